/* Each value word by its literal index, for TNA's one register per word (values.p4 defines WORD(i),
 * includes this file, and undefines it). Written out because a register's name needs its index as a
 * token, which the unrolling of each_word.p4 does not give; arch_tna.p4 allows at most 31 words. */
#if 0 < WORDS
WORD(0)
#endif
#if 1 < WORDS
WORD(1)
#endif
#if 2 < WORDS
WORD(2)
#endif
#if 3 < WORDS
WORD(3)
#endif
#if 4 < WORDS
WORD(4)
#endif
#if 5 < WORDS
WORD(5)
#endif
#if 6 < WORDS
WORD(6)
#endif
#if 7 < WORDS
WORD(7)
#endif
#if 8 < WORDS
WORD(8)
#endif
#if 9 < WORDS
WORD(9)
#endif
#if 10 < WORDS
WORD(10)
#endif
#if 11 < WORDS
WORD(11)
#endif
#if 12 < WORDS
WORD(12)
#endif
#if 13 < WORDS
WORD(13)
#endif
#if 14 < WORDS
WORD(14)
#endif
#if 15 < WORDS
WORD(15)
#endif
#if 16 < WORDS
WORD(16)
#endif
#if 17 < WORDS
WORD(17)
#endif
#if 18 < WORDS
WORD(18)
#endif
#if 19 < WORDS
WORD(19)
#endif
#if 20 < WORDS
WORD(20)
#endif
#if 21 < WORDS
WORD(21)
#endif
#if 22 < WORDS
WORD(22)
#endif
#if 23 < WORDS
WORD(23)
#endif
#if 24 < WORDS
WORD(24)
#endif
#if 25 < WORDS
WORD(25)
#endif
#if 26 < WORDS
WORD(26)
#endif
#if 27 < WORDS
WORD(27)
#endif
#if 28 < WORDS
WORD(28)
#endif
#if 29 < WORDS
WORD(29)
#endif
#if 30 < WORDS
WORD(30)
#endif
