/* The value words of a slot (docs/protocol.md, section 5): SUM chunks add modulo 2^32, MAX chunks
 * take the unsigned maximum. Words 0 .. INGRESS_WORDS-1 are summed in the ingress right after the
 * slot decision; the rest in the egress, from the slot action the ingress decided (a RESULT then
 * recirculates once, to be replicated with every word). One register action per word and step,
 * whose bodies below both architectures run. */
#ifndef INA_VALUES_P4
#define INA_VALUES_P4

/* The bodies: `value` is the register word, `w` the packet's, `rv` what goes into the packet. A
 * stateful ALU has four register actions a register: a store is a swap whose answer is dropped. */
#define WORD_SWAP(w) rv = value; value = w;
#define WORD_ADD(w) value = value + w; rv = value;
#define WORD_MAX(w) if (w > value) { value = w; } rv = value;
#define WORD_READ(w) rv = value;

/* What the ingress words do, from what the slot stages answered (meta.slot_action says the same one
 * stage later, for the egress words and the outputs). */
#define DO_STORE ((meta.path == PATH_TAKE || meta.path == PATH_CLAIM) && meta.old_missing == 0)
#define DO_SWAP ((meta.path == PATH_TAKE || meta.path == PATH_CLAIM) && meta.old_missing != 0)
#define DO_ADD (meta.path == PATH_SAME && meta.old_missing != 0 && meta.op_max == 0)
#define DO_MAX (meta.path == PATH_SAME && meta.old_missing != 0 && meta.op_max == 1)
#define DO_READ ((meta.path == PATH_FLUSH && meta.old_missing != 0) \
                 || (meta.path == PATH_SWEEP && meta.old_missing == 0 && meta.rest != 0))

/* The egress words: what the ingress decided. */
#define EG_STORE (CARRY.eg_action == SLOT_STORE)
#define EG_SWAP (CARRY.eg_action == SLOT_SWAP)
#define EG_ADD (CARRY.eg_action == SLOT_ADD)
#define EG_MAX (CARRY.eg_action == SLOT_MAX)
#define EG_READ (CARRY.eg_action == SLOT_READ)

/* The slot action the conditions above choose. */
control ChooseSlotAction(inout headers_t hdr, inout ina_meta_t meta) {
    apply {
        if (DO_STORE) {
            meta.slot_action = SLOT_STORE;
        } else if (DO_SWAP) {
            meta.slot_action = SLOT_SWAP;
        } else if (DO_ADD) {
            meta.slot_action = SLOT_ADD;
        } else if (DO_MAX) {
            meta.slot_action = SLOT_MAX;
        } else if (DO_READ) {
            meta.slot_action = SLOT_READ;
        } else {
            meta.slot_action = SLOT_NONE;
        }
    }
}

#ifdef INA_ARCH_TNA

#define TNA_WORD_REGISTER(i) \
    Register<bit<32>, bit<32>>(POOL) ina_value_##i; \
    RegisterAction<bit<32>, bit<32>, bit<32>>(ina_value_##i) swap_##i = { \
        void apply(inout bit<32> value, out bit<32> rv) { WORD_SWAP(hdr.words[i].value) } }; \
    RegisterAction<bit<32>, bit<32>, bit<32>>(ina_value_##i) add_##i = { \
        void apply(inout bit<32> value, out bit<32> rv) { WORD_ADD(hdr.words[i].value) } }; \
    RegisterAction<bit<32>, bit<32>, bit<32>>(ina_value_##i) max_##i = { \
        void apply(inout bit<32> value, out bit<32> rv) { WORD_MAX(hdr.words[i].value) } }; \
    RegisterAction<bit<32>, bit<32>, bit<32>>(ina_value_##i) read_##i = { \
        void apply(inout bit<32> value, out bit<32> rv) { WORD_READ(hdr.words[i].value) } };

#define TNA_WORD_APPLY(i, STORE, SWAP, ADD, MAX, READ) \
    if (STORE) { swap_##i.execute(meta.slot); } \
    else if (SWAP) { hdr.words[i].value = swap_##i.execute(meta.slot); } \
    else if (ADD) { hdr.words[i].value = add_##i.execute(meta.slot); } \
    else if (MAX) { hdr.words[i].value = max_##i.execute(meta.slot); } \
    else if (READ) { hdr.words[i].setValid(); hdr.words[i].value = read_##i.execute(meta.slot); }

control IngressWords(inout headers_t hdr, inout ina_meta_t meta) {
#define WORD_IN(i) TNA_WORD_REGISTER(i)
#define WORD_OUT(i)
#include "word_list.p4"
#undef WORD_IN
#undef WORD_OUT
    apply {
#define WORD_IN(i) TNA_WORD_APPLY(i, DO_STORE, DO_SWAP, DO_ADD, DO_MAX, DO_READ)
#define WORD_OUT(i)
#include "word_list.p4"
#undef WORD_IN
#undef WORD_OUT
    }
}

control EgressWords(inout headers_t hdr, inout ina_meta_t meta) {
#define WORD_IN(i)
#define WORD_OUT(i) TNA_WORD_REGISTER(i)
#include "word_list.p4"
#undef WORD_IN
#undef WORD_OUT
    apply {
#define WORD_IN(i)
#define WORD_OUT(i) TNA_WORD_APPLY(i, EG_STORE, EG_SWAP, EG_ADD, EG_MAX, EG_READ)
#include "word_list.p4"
#undef WORD_IN
#undef WORD_OUT
    }
}

#else /* v1model: one array (ina_value), the same bodies as actions */

INA_WORD_REGISTERS  /* one array at the top level: the ingress and the egress words are its parts */

#define V1_WORD_STEPS \
    INA_WORD_STEP_ACTION(word_swap, WORD_SWAP) \
    INA_WORD_STEP_ACTION(word_add, WORD_ADD) \
    INA_WORD_STEP_ACTION(word_max, WORD_MAX) \
    INA_WORD_STEP_ACTION(word_read, WORD_READ)

#define V1_WORD_APPLY(i, STORE, SWAP, ADD, MAX, READ) \
    if (STORE) { bit<32> kept = hdr.words[i].value; word_swap(i, kept); } \
    else if (SWAP) { word_swap(i, hdr.words[i].value); } \
    else if (ADD) { word_add(i, hdr.words[i].value); } \
    else if (MAX) { word_max(i, hdr.words[i].value); } \
    else if (READ) { hdr.words[i].setValid(); word_read(i, hdr.words[i].value); }

control IngressWords(inout headers_t hdr, inout ina_meta_t meta) {
    V1_WORD_STEPS
    apply {
#define WORD_STEP(i) if ((i) < INGRESS_WORDS) { V1_WORD_APPLY(i, DO_STORE, DO_SWAP, DO_ADD, DO_MAX, DO_READ) }
#include "each_word.p4"
#undef WORD_STEP
    }
}

control EgressWords(inout headers_t hdr, inout ina_meta_t meta) {
    V1_WORD_STEPS
    apply {
#define WORD_STEP(i) if ((i) >= INGRESS_WORDS) { V1_WORD_APPLY(i, EG_STORE, EG_SWAP, EG_ADD, EG_MAX, EG_READ) }
#include "each_word.p4"
#undef WORD_STEP
    }
}

#endif
#endif
