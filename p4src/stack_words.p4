/* STACK_WORD(hdr.WORD_STACK[i]) for i < EACH_WORD_COUNT (STEP_WORDS where it is not defined): the
 * caller defines STACK_WORD (what to do with one word: the parser extracts it, a FLUSH makes it valid),
 * WORD_STACK and EACH_WORD_COUNT and includes this file, which undefines the last two. */
#define WORD_STEP(i) STACK_WORD(hdr.WORD_STACK[i])
#include "each_word.p4"
#undef WORD_STEP
#undef WORD_STACK
#undef EACH_WORD_COUNT
