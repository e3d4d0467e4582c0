/* Expands WORD_STEP(i) for i = 0 .. WORDS-1 (the caller defines WORD_STEP, includes this file,
 * then undefines it). P4 has no loops a target must support, and WORDS is a compile-time
 * parameter, so the words are unrolled here by the binary digits of WORDS. */
#define INA_REP1(M, b) M(b)
#define INA_REP2(M, b) INA_REP1(M, b) INA_REP1(M, (b) + 1)
#define INA_REP4(M, b) INA_REP2(M, b) INA_REP2(M, (b) + 2)
#define INA_REP8(M, b) INA_REP4(M, b) INA_REP4(M, (b) + 4)
#define INA_REP16(M, b) INA_REP8(M, b) INA_REP8(M, (b) + 8)
#define INA_REP32(M, b) INA_REP16(M, b) INA_REP16(M, (b) + 16)
#define INA_REP64(M, b) INA_REP32(M, b) INA_REP32(M, (b) + 32)
#define INA_REP128(M, b) INA_REP64(M, b) INA_REP64(M, (b) + 64)
#define INA_REP256(M, b) INA_REP128(M, b) INA_REP128(M, (b) + 128)
#if WORDS & 1
INA_REP1(WORD_STEP, 0)
#endif
#if WORDS & 2
INA_REP2(WORD_STEP, (WORDS & 1))
#endif
#if WORDS & 4
INA_REP4(WORD_STEP, (WORDS & 3))
#endif
#if WORDS & 8
INA_REP8(WORD_STEP, (WORDS & 7))
#endif
#if WORDS & 16
INA_REP16(WORD_STEP, (WORDS & 15))
#endif
#if WORDS & 32
INA_REP32(WORD_STEP, (WORDS & 31))
#endif
#if WORDS & 64
INA_REP64(WORD_STEP, (WORDS & 63))
#endif
#if WORDS & 128
INA_REP128(WORD_STEP, (WORDS & 127))
#endif
#if WORDS & 256
INA_REP256(WORD_STEP, 0)
#endif
