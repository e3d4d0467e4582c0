/* Expands WORD_STEP(i) for i = 0 .. N-1, N the words a pass steps (STEP_WORDS) or, where the caller
 * defines EACH_WORD_COUNT, that many (the caller defines WORD_STEP, includes this file, then
 * undefines both). P4 has no loops a target must support, and N is a compile-time parameter, so
 * the words are unrolled here by its binary digits. */
#ifdef EACH_WORD_COUNT
#define INA_N (EACH_WORD_COUNT)
#else
#define INA_N STEP_WORDS
#endif
#define INA_REP1(M, b) M(b)
#define INA_REP2(M, b) INA_REP1(M, b) INA_REP1(M, (b) + 1)
#define INA_REP4(M, b) INA_REP2(M, b) INA_REP2(M, (b) + 2)
#define INA_REP8(M, b) INA_REP4(M, b) INA_REP4(M, (b) + 4)
#define INA_REP16(M, b) INA_REP8(M, b) INA_REP8(M, (b) + 8)
#define INA_REP32(M, b) INA_REP16(M, b) INA_REP16(M, (b) + 16)
#define INA_REP64(M, b) INA_REP32(M, b) INA_REP32(M, (b) + 32)
#define INA_REP128(M, b) INA_REP64(M, b) INA_REP64(M, (b) + 64)
#define INA_REP256(M, b) INA_REP128(M, b) INA_REP128(M, (b) + 128)
#if INA_N & 1
INA_REP1(WORD_STEP, 0)
#endif
#if INA_N & 2
INA_REP2(WORD_STEP, (INA_N & 1))
#endif
#if INA_N & 4
INA_REP4(WORD_STEP, (INA_N & 3))
#endif
#if INA_N & 8
INA_REP8(WORD_STEP, (INA_N & 7))
#endif
#if INA_N & 16
INA_REP16(WORD_STEP, (INA_N & 15))
#endif
#if INA_N & 32
INA_REP32(WORD_STEP, (INA_N & 31))
#endif
#if INA_N & 64
INA_REP64(WORD_STEP, (INA_N & 63))
#endif
#if INA_N & 128
INA_REP128(WORD_STEP, (INA_N & 127))
#endif
#if INA_N & 256
INA_REP256(WORD_STEP, 0)
#endif
#undef INA_N
