/* STACK_WORD on each of a frame's K words as the deciding pass holds them: the first group in
 * `words`, the others (with word passes) in after1 and after2; on v1model each of them is one field
 * (headers.p4, words_h), which STACK_WORD takes whole. The caller defines STACK_WORD. */
#ifdef INA_WIDE_WORDS
STACK_WORD(hdr.words)
#ifdef INA_WORD_PASSES
STACK_WORD(hdr.after1)
#if WORD_GROUPS == 3
STACK_WORD(hdr.after2)
#endif
#endif
#else
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
#endif
