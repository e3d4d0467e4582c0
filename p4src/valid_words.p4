/* Makes the first EACH_WORD_COUNT words of `words` valid (STEP_WORDS where it is not defined; on
 * v1model the one field, which BMv2 zeroes): a FLUSH's or SWEEP's words, which arrive without them
 * and which the register read fills. The caller may define EACH_WORD_COUNT; this file undefines it. */
#ifdef INA_WIDE_WORDS
hdr.words.setValid();
#undef EACH_WORD_COUNT
#else
#define STACK_WORD(w) w.setValid();
#define WORD_STACK words
#include "stack_words.p4"
#undef STACK_WORD
#endif
