/* The value words and the touched time of a slot (docs/protocol.md, section 5): stage 6 on, after
 * the slot decision. SUM chunks add modulo 2^32, MAX chunks take the unsigned maximum. */
#ifndef INA_VALUES_P4
#define INA_VALUES_P4

control Values(inout headers_t hdr, inout ina_meta_t meta, in standard_metadata_t std) {
    /* word i of slot s at s * WORDS + i; on Tofino one register array per pair of words */
    @name(".ina_value") register<bit<32>>(POOL * WORDS) value;
    @name(".ina_touched") register<bit<48>>(POOL) touched;

    apply {
        bit<32> base = meta.slot * WORDS;
        bit<32> old;
        if (meta.slot_action == SLOT_CLAIM && meta.evict == 1) {
#define WORD_STEP(i) value.read(old, base + (i)); value.write(base + (i), hdr.words[i].value); hdr.words[i].value = old;
#include "each_word.p4"
#undef WORD_STEP
        } else if (meta.slot_action == SLOT_CLAIM) {
#define WORD_STEP(i) value.write(base + (i), hdr.words[i].value);
#include "each_word.p4"
#undef WORD_STEP
        } else if (meta.slot_action == SLOT_ADD && meta.op_max == 1) {
#define WORD_STEP(i) value.read(old, base + (i)); \
    if (old > hdr.words[i].value) { hdr.words[i].value = old; } \
    value.write(base + (i), hdr.words[i].value);
#include "each_word.p4"
#undef WORD_STEP
        } else if (meta.slot_action == SLOT_ADD) {
#define WORD_STEP(i) value.read(old, base + (i)); hdr.words[i].value = hdr.words[i].value + old; \
    value.write(base + (i), hdr.words[i].value);
#include "each_word.p4"
#undef WORD_STEP
        } else if (meta.slot_action == SLOT_EVICT) {
#define WORD_STEP(i) value.read(old, base + (i)); hdr.words[i].setValid(); hdr.words[i].value = old;
#include "each_word.p4"
#undef WORD_STEP
        }
        if (meta.slot_action == SLOT_CLAIM || meta.slot_action == SLOT_ADD) {
            touched.write(meta.slot, std.ingress_global_timestamp);
        }
    }
}

#endif
