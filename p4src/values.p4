/* The value words of a slot (docs/protocol.md, section 5): SUM chunks add modulo 2^32, MAX chunks
 * take the unsigned maximum, every word in the ingress right after the slot decision. One register
 * action per word and step, whose bodies below both architectures run. None is left to the egress:
 * packets of one slot can pass each other in different ports' queues on their way there. */
#ifndef INA_VALUES_P4
#define INA_VALUES_P4

/* The bodies: `value` is the register word, `w` the packet's, `rv` what goes into the packet. A
 * stateful ALU has four register actions a register: a store is a swap whose answer is dropped. */
#define WORD_SWAP(w) rv = value; value = w;
#define WORD_ADD(w) value = value + w; rv = value;
#define WORD_MAX(w) if (w > value) { value = w; } rv = value;
#define WORD_READ(w) rv = value;

/* What the words do, from what the slot stages answered: the path, and whether `missing` answered 0
 * (for a SWEEP: whether the slot held exactly the partial swept, of a nonempty bitmap). A constant
 * ternary table, first match winning, so that a Tofino stage chooses with one lookup where the
 * conditions written out are more than its gateways take. */
#define SLOT_ACTION_KEY \
    key = { \
        meta.path: ternary @name("path"); \
        meta.old_missing: ternary @name("answer"); \
        meta.op_max: ternary @name("op_max"); \
        meta.rest: ternary @name("rest"); \
    }
#define SLOT_ACTION_ENTRIES(STORE, SWAP, ADD, MAX, READ, NONE) \
    (PATH_TAKE, 0, _, _): STORE; \
    (PATH_TAKE, _, _, _): SWAP; \
    (PATH_CLAIM, 0, _, _): STORE; \
    (PATH_CLAIM, _, _, _): SWAP; \
    (PATH_SAME, 0, _, _): NONE; \
    (PATH_SAME, _, 0, _): ADD; \
    (PATH_SAME, _, 1, _): MAX; \
    (PATH_FLUSH, 0, _, _): NONE; \
    (PATH_FLUSH, _, _, _): READ; \
    (PATH_SWEEP, 0, _, 0): NONE; \
    (PATH_SWEEP, 0, _, _): READ;

/* The slot action, for the outputs and (on v1model) the words. */
control ChooseSlotAction(inout headers_t hdr, inout ina_meta_t meta) {
    action set_slot_action(bit<8> slot_action) {
        meta.slot_action = slot_action;
    }

    @name(".ina_slot_actions")
    table slot_actions {
        SLOT_ACTION_KEY
        actions = { set_slot_action; }
        const default_action = set_slot_action(SLOT_NONE);
        INA_CONST_TABLE_SIZE(16)
        const entries = {
            SLOT_ACTION_ENTRIES(set_slot_action(SLOT_STORE), set_slot_action(SLOT_SWAP), set_slot_action(SLOT_ADD),
                                set_slot_action(SLOT_MAX), set_slot_action(SLOT_READ), set_slot_action(SLOT_NONE))
        }
    }

    apply {
        slot_actions.apply();
    }
}

#ifdef INA_ARCH_TNA

#define TNA_WORD_REGISTER(i) \
    Register<bit<32>, bit<16>>(POOL) ina_value_##i; \
    RegisterAction<bit<32>, bit<16>, bit<32>>(ina_value_##i) swap_##i = { \
        void apply(inout bit<32> value, out bit<32> rv) { WORD_SWAP(hdr.words[i].value) } }; \
    RegisterAction<bit<32>, bit<16>, bit<32>>(ina_value_##i) add_##i = { \
        void apply(inout bit<32> value, out bit<32> rv) { WORD_ADD(hdr.words[i].value) } }; \
    RegisterAction<bit<32>, bit<16>, bit<32>>(ina_value_##i) max_##i = { \
        void apply(inout bit<32> value, out bit<32> rv) { WORD_MAX(hdr.words[i].value) } }; \
    RegisterAction<bit<32>, bit<16>, bit<32>>(ina_value_##i) read_##i = { \
        void apply(inout bit<32> value, out bit<32> rv) { WORD_READ(hdr.words[i].value) } };

#define TNA_WORD_STEPS(i) \
    action store_step_##i() { swap_##i.execute(meta.slot); } \
    action swap_step_##i() { hdr.words[i].value = swap_##i.execute(meta.slot); } \
    action add_step_##i() { hdr.words[i].value = add_##i.execute(meta.slot); } \
    action max_step_##i() { hdr.words[i].value = max_##i.execute(meta.slot); } \
    action read_step_##i() { hdr.words[i].value = read_##i.execute(meta.slot); }

/* Each ingress word chooses its step with its own copy of the slot-action table: one lookup in the
 * word's stage, right after the slot decision. */
#define TNA_WORD_TABLE(i) \
    TNA_WORD_REGISTER(i) \
    TNA_WORD_STEPS(i) \
    table step_##i { \
        SLOT_ACTION_KEY \
        actions = { store_step_##i; swap_step_##i; add_step_##i; max_step_##i; read_step_##i; NoAction; } \
        const default_action = NoAction(); \
        INA_CONST_TABLE_SIZE(16) \
        const entries = { \
            SLOT_ACTION_ENTRIES(store_step_##i(), swap_step_##i(), add_step_##i(), max_step_##i(), read_step_##i(), NoAction()) \
        } \
    }

control IngressWords(inout headers_t hdr, inout ina_meta_t meta) {
#define WORD(i) TNA_WORD_TABLE(i)
#include "word_list.p4"
#undef WORD
    apply {
#define WORD(i) step_##i.apply();
#include "word_list.p4"
#undef WORD
    }
}

#else /* v1model: one array (ina_value), the same bodies in one action a slot action */

INA_WORD_REGISTERS

/* Every word's step in one action: BMv2 runs an action's primitives in one go, where a step a word
 * (a condition and an action each) costs it pipeline nodes a word. `OUT` puts the answer in the packet. */
#define V1_WORD_STEP(i, BODY, OUT) { \
        bit<32> value; bit<32> rv; \
        words_register.read(value, base + i); BODY(hdr.words[i].value) words_register.write(base + i, value); OUT }
#define V1_WORD_ACTION_HEAD bit<32> base = (bit<32>)meta.slot * WORDS;

control IngressWords(inout headers_t hdr, inout ina_meta_t meta) {
    action store_words() {
        V1_WORD_ACTION_HEAD
#define WORD_STEP(i) V1_WORD_STEP(i, WORD_SWAP, )
#include "each_word.p4"
#undef WORD_STEP
    }

    action swap_words() {
        V1_WORD_ACTION_HEAD
#define WORD_STEP(i) V1_WORD_STEP(i, WORD_SWAP, hdr.words[i].value = rv;)
#include "each_word.p4"
#undef WORD_STEP
    }

    action add_words() {
        V1_WORD_ACTION_HEAD
#define WORD_STEP(i) V1_WORD_STEP(i, WORD_ADD, hdr.words[i].value = rv;)
#include "each_word.p4"
#undef WORD_STEP
    }

    action max_words() {
        V1_WORD_ACTION_HEAD
#define WORD_STEP(i) V1_WORD_STEP(i, WORD_MAX, hdr.words[i].value = rv;)
#include "each_word.p4"
#undef WORD_STEP
    }

    action read_words() {
        V1_WORD_ACTION_HEAD
#define WORD_STEP(i) V1_WORD_STEP(i, WORD_READ, hdr.words[i].value = rv;)
#include "each_word.p4"
#undef WORD_STEP
    }

    apply {
        if (meta.slot_action == SLOT_STORE) {
            store_words();
        } else if (meta.slot_action == SLOT_SWAP) {
            swap_words();
        } else if (meta.slot_action == SLOT_ADD) {
            add_words();
        } else if (meta.slot_action == SLOT_MAX) {
            max_words();
        } else if (meta.slot_action == SLOT_READ) {
            read_words();
        }
    }
}

#endif
#endif
