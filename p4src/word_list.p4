/* Each value word by its literal index, for TNA's one register per word (values.p4 defines
 * WORD_OUT(i) for the egress words, the first EGRESS_WORDS, and WORD_IN(i) for the ingress
 * words, includes this file, and undefines them). Written out because a register's name needs its
 * index as a token, which the unrolling of each_word.p4 does not give. */
#if 0 < WORDS
#if 0 < EGRESS_WORDS
WORD_OUT(0)
#else
WORD_IN(0)
#endif
#endif
#if 1 < WORDS
#if 1 < EGRESS_WORDS
WORD_OUT(1)
#else
WORD_IN(1)
#endif
#endif
#if 2 < WORDS
#if 2 < EGRESS_WORDS
WORD_OUT(2)
#else
WORD_IN(2)
#endif
#endif
#if 3 < WORDS
#if 3 < EGRESS_WORDS
WORD_OUT(3)
#else
WORD_IN(3)
#endif
#endif
#if 4 < WORDS
#if 4 < EGRESS_WORDS
WORD_OUT(4)
#else
WORD_IN(4)
#endif
#endif
#if 5 < WORDS
#if 5 < EGRESS_WORDS
WORD_OUT(5)
#else
WORD_IN(5)
#endif
#endif
#if 6 < WORDS
#if 6 < EGRESS_WORDS
WORD_OUT(6)
#else
WORD_IN(6)
#endif
#endif
#if 7 < WORDS
#if 7 < EGRESS_WORDS
WORD_OUT(7)
#else
WORD_IN(7)
#endif
#endif
#if 8 < WORDS
#if 8 < EGRESS_WORDS
WORD_OUT(8)
#else
WORD_IN(8)
#endif
#endif
#if 9 < WORDS
#if 9 < EGRESS_WORDS
WORD_OUT(9)
#else
WORD_IN(9)
#endif
#endif
#if 10 < WORDS
#if 10 < EGRESS_WORDS
WORD_OUT(10)
#else
WORD_IN(10)
#endif
#endif
#if 11 < WORDS
#if 11 < EGRESS_WORDS
WORD_OUT(11)
#else
WORD_IN(11)
#endif
#endif
#if 12 < WORDS
#if 12 < EGRESS_WORDS
WORD_OUT(12)
#else
WORD_IN(12)
#endif
#endif
#if 13 < WORDS
#if 13 < EGRESS_WORDS
WORD_OUT(13)
#else
WORD_IN(13)
#endif
#endif
#if 14 < WORDS
#if 14 < EGRESS_WORDS
WORD_OUT(14)
#else
WORD_IN(14)
#endif
#endif
#if 15 < WORDS
#if 15 < EGRESS_WORDS
WORD_OUT(15)
#else
WORD_IN(15)
#endif
#endif
#if 16 < WORDS
#if 16 < EGRESS_WORDS
WORD_OUT(16)
#else
WORD_IN(16)
#endif
#endif
#if 17 < WORDS
#if 17 < EGRESS_WORDS
WORD_OUT(17)
#else
WORD_IN(17)
#endif
#endif
#if 18 < WORDS
#if 18 < EGRESS_WORDS
WORD_OUT(18)
#else
WORD_IN(18)
#endif
#endif
#if 19 < WORDS
#if 19 < EGRESS_WORDS
WORD_OUT(19)
#else
WORD_IN(19)
#endif
#endif
#if 20 < WORDS
#if 20 < EGRESS_WORDS
WORD_OUT(20)
#else
WORD_IN(20)
#endif
#endif
#if 21 < WORDS
#if 21 < EGRESS_WORDS
WORD_OUT(21)
#else
WORD_IN(21)
#endif
#endif
#if 22 < WORDS
#if 22 < EGRESS_WORDS
WORD_OUT(22)
#else
WORD_IN(22)
#endif
#endif
#if 23 < WORDS
#if 23 < EGRESS_WORDS
WORD_OUT(23)
#else
WORD_IN(23)
#endif
#endif
#if 24 < WORDS
#if 24 < EGRESS_WORDS
WORD_OUT(24)
#else
WORD_IN(24)
#endif
#endif
#if 25 < WORDS
#if 25 < EGRESS_WORDS
WORD_OUT(25)
#else
WORD_IN(25)
#endif
#endif
#if 26 < WORDS
#if 26 < EGRESS_WORDS
WORD_OUT(26)
#else
WORD_IN(26)
#endif
#endif
#if 27 < WORDS
#if 27 < EGRESS_WORDS
WORD_OUT(27)
#else
WORD_IN(27)
#endif
#endif
#if 28 < WORDS
#if 28 < EGRESS_WORDS
WORD_OUT(28)
#else
WORD_IN(28)
#endif
#endif
#if 29 < WORDS
#if 29 < EGRESS_WORDS
WORD_OUT(29)
#else
WORD_IN(29)
#endif
#endif
#if 30 < WORDS
#if 30 < EGRESS_WORDS
WORD_OUT(30)
#else
WORD_IN(30)
#endif
#endif
#if 31 < WORDS
#if 31 < EGRESS_WORDS
WORD_OUT(31)
#else
WORD_IN(31)
#endif
#endif
#if 32 < WORDS
#if 32 < EGRESS_WORDS
WORD_OUT(32)
#else
WORD_IN(32)
#endif
#endif
#if 33 < WORDS
#if 33 < EGRESS_WORDS
WORD_OUT(33)
#else
WORD_IN(33)
#endif
#endif
#if 34 < WORDS
#if 34 < EGRESS_WORDS
WORD_OUT(34)
#else
WORD_IN(34)
#endif
#endif
#if 35 < WORDS
#if 35 < EGRESS_WORDS
WORD_OUT(35)
#else
WORD_IN(35)
#endif
#endif
#if 36 < WORDS
#if 36 < EGRESS_WORDS
WORD_OUT(36)
#else
WORD_IN(36)
#endif
#endif
#if 37 < WORDS
#if 37 < EGRESS_WORDS
WORD_OUT(37)
#else
WORD_IN(37)
#endif
#endif
#if 38 < WORDS
#if 38 < EGRESS_WORDS
WORD_OUT(38)
#else
WORD_IN(38)
#endif
#endif
#if 39 < WORDS
#if 39 < EGRESS_WORDS
WORD_OUT(39)
#else
WORD_IN(39)
#endif
#endif
#if 40 < WORDS
#if 40 < EGRESS_WORDS
WORD_OUT(40)
#else
WORD_IN(40)
#endif
#endif
#if 41 < WORDS
#if 41 < EGRESS_WORDS
WORD_OUT(41)
#else
WORD_IN(41)
#endif
#endif
#if 42 < WORDS
#if 42 < EGRESS_WORDS
WORD_OUT(42)
#else
WORD_IN(42)
#endif
#endif
#if 43 < WORDS
#if 43 < EGRESS_WORDS
WORD_OUT(43)
#else
WORD_IN(43)
#endif
#endif
#if 44 < WORDS
#if 44 < EGRESS_WORDS
WORD_OUT(44)
#else
WORD_IN(44)
#endif
#endif
#if 45 < WORDS
#if 45 < EGRESS_WORDS
WORD_OUT(45)
#else
WORD_IN(45)
#endif
#endif
#if 46 < WORDS
#if 46 < EGRESS_WORDS
WORD_OUT(46)
#else
WORD_IN(46)
#endif
#endif
#if 47 < WORDS
#if 47 < EGRESS_WORDS
WORD_OUT(47)
#else
WORD_IN(47)
#endif
#endif
#if 48 < WORDS
#if 48 < EGRESS_WORDS
WORD_OUT(48)
#else
WORD_IN(48)
#endif
#endif
#if 49 < WORDS
#if 49 < EGRESS_WORDS
WORD_OUT(49)
#else
WORD_IN(49)
#endif
#endif
#if 50 < WORDS
#if 50 < EGRESS_WORDS
WORD_OUT(50)
#else
WORD_IN(50)
#endif
#endif
#if 51 < WORDS
#if 51 < EGRESS_WORDS
WORD_OUT(51)
#else
WORD_IN(51)
#endif
#endif
#if 52 < WORDS
#if 52 < EGRESS_WORDS
WORD_OUT(52)
#else
WORD_IN(52)
#endif
#endif
#if 53 < WORDS
#if 53 < EGRESS_WORDS
WORD_OUT(53)
#else
WORD_IN(53)
#endif
#endif
#if 54 < WORDS
#if 54 < EGRESS_WORDS
WORD_OUT(54)
#else
WORD_IN(54)
#endif
#endif
#if 55 < WORDS
#if 55 < EGRESS_WORDS
WORD_OUT(55)
#else
WORD_IN(55)
#endif
#endif
#if 56 < WORDS
#if 56 < EGRESS_WORDS
WORD_OUT(56)
#else
WORD_IN(56)
#endif
#endif
#if 57 < WORDS
#if 57 < EGRESS_WORDS
WORD_OUT(57)
#else
WORD_IN(57)
#endif
#endif
#if 58 < WORDS
#if 58 < EGRESS_WORDS
WORD_OUT(58)
#else
WORD_IN(58)
#endif
#endif
#if 59 < WORDS
#if 59 < EGRESS_WORDS
WORD_OUT(59)
#else
WORD_IN(59)
#endif
#endif
#if 60 < WORDS
#if 60 < EGRESS_WORDS
WORD_OUT(60)
#else
WORD_IN(60)
#endif
#endif
#if 61 < WORDS
#if 61 < EGRESS_WORDS
WORD_OUT(61)
#else
WORD_IN(61)
#endif
#endif
#if 62 < WORDS
#if 62 < EGRESS_WORDS
WORD_OUT(62)
#else
WORD_IN(62)
#endif
#endif
#if 63 < WORDS
#if 63 < EGRESS_WORDS
WORD_OUT(63)
#else
WORD_IN(63)
#endif
#endif
