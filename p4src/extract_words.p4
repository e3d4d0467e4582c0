/* packet.extract(hdr.EXTRACT_STACK[i]) for i < EACH_WORD_COUNT (parser_tna.p4 defines both, includes
 * this file, which undefines them). */
#define WORD_STEP(i) packet.extract(hdr.EXTRACT_STACK[i]);
#include "each_word.p4"
#undef WORD_STEP
#undef EXTRACT_STACK
#undef EACH_WORD_COUNT
