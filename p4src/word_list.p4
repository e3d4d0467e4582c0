/* Each value word a pass steps by its literal index, for TNA's one register per word (values.p4
 * defines WORD(i), includes this file, and undefines it). Written out because a register's name needs
 * its index as a token, which the unrolling of each_word.p4 does not give; arch_tna.p4 allows at most
 * 31 words a pass. */
#if 0 < STEP_WORDS
WORD(0)
#endif
#if 1 < STEP_WORDS
WORD(1)
#endif
#if 2 < STEP_WORDS
WORD(2)
#endif
#if 3 < STEP_WORDS
WORD(3)
#endif
#if 4 < STEP_WORDS
WORD(4)
#endif
#if 5 < STEP_WORDS
WORD(5)
#endif
#if 6 < STEP_WORDS
WORD(6)
#endif
#if 7 < STEP_WORDS
WORD(7)
#endif
#if 8 < STEP_WORDS
WORD(8)
#endif
#if 9 < STEP_WORDS
WORD(9)
#endif
#if 10 < STEP_WORDS
WORD(10)
#endif
#if 11 < STEP_WORDS
WORD(11)
#endif
#if 12 < STEP_WORDS
WORD(12)
#endif
#if 13 < STEP_WORDS
WORD(13)
#endif
#if 14 < STEP_WORDS
WORD(14)
#endif
#if 15 < STEP_WORDS
WORD(15)
#endif
#if 16 < STEP_WORDS
WORD(16)
#endif
#if 17 < STEP_WORDS
WORD(17)
#endif
#if 18 < STEP_WORDS
WORD(18)
#endif
#if 19 < STEP_WORDS
WORD(19)
#endif
#if 20 < STEP_WORDS
WORD(20)
#endif
#if 21 < STEP_WORDS
WORD(21)
#endif
#if 22 < STEP_WORDS
WORD(22)
#endif
#if 23 < STEP_WORDS
WORD(23)
#endif
#if 24 < STEP_WORDS
WORD(24)
#endif
#if 25 < STEP_WORDS
WORD(25)
#endif
#if 26 < STEP_WORDS
WORD(26)
#endif
#if 27 < STEP_WORDS
WORD(27)
#endif
#if 28 < STEP_WORDS
WORD(28)
#endif
#if 29 < STEP_WORDS
WORD(29)
#endif
#if 30 < STEP_WORDS
WORD(30)
#endif
