/* STACK_WORD on each of a frame's K words as the deciding pass holds them: the first group in
 * `words`, the others (with word passes) in after1 and after2. The caller defines STACK_WORD. */
#define WORD_STACK words
#include "stack_words.p4"
#ifdef INA_WORD_PASSES
#define WORD_STACK after1
#define EACH_WORD_COUNT AFTER1_WORDS
#include "stack_words.p4"
#if WORD_GROUPS == 3
#define WORD_STACK after2
#define EACH_WORD_COUNT LAST_GROUP_WORDS
#include "stack_words.p4"
#endif
#endif
