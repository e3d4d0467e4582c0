/* The value words of a slot (docs/protocol.md, section 5): SUM chunks add modulo 2^32, MAX chunks
 * take the unsigned maximum, every word in the ingress right after the slot decision, which chooses
 * the step (ChooseSlotAction, shared). None is left to the egress: packets of one slot can pass each
 * other in different ports' queues on their way there. On TNA one register action per word and
 * step; on v1model one action steps all K words at once, lane-wise (BMv2 pays per primitive). */
#ifndef INA_VALUES_P4
#define INA_VALUES_P4

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

/* The bodies: `value` is the register word, `w` the packet's, `rv` what goes into the packet. A
 * stateful ALU has four register actions a register: a store is a swap whose answer is dropped.
 * Register ina_value_i holds word i + g * INA_WORD_GROUP of slot s at index s + g * POOL: every
 * group's word in the stateful ALU of the word a pass steps in its place (meta.slot is that index). */
#define WORD_SWAP(w) rv = value; value = w;
#define WORD_ADD(w) value = value + w; rv = value;
#define WORD_MAX(w) if (w > value) { value = w; } rv = value;
#define WORD_READ(w) rv = value;

#define TNA_WORD_REGISTER(i) \
    Register<bit<32>, bit<16>>(WORD_CELLS) ina_value_##i; \
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

#else /* v1model: one entry a slot of all K words (headers.p4, words_h), stepped lane-wise at once */

INA_WORD_REGISTERS

/* Lane-wise arithmetic on the K words as one number (words_t, headers.p4), exact per 32-bit word:
 * with each word's top bit set aside, no carry or borrow crosses into the next word (the SWAR idiom). */
const words_t WORD_ONES = ((words_t)0 - 1) / 0xFFFFFFFF;  /* 1 in every word */
const words_t WORD_TOPS = WORD_ONES << 31;
const words_t WORD_LOWS = ~WORD_TOPS;

/* a + b modulo 2^32 in every word: the low 31 bits add without crossing, the top bits by xor */
#define WORDS_ADD(a, b) ((((a) & WORD_LOWS) + ((b) & WORD_LOWS)) ^ (((a) ^ (b)) & WORD_TOPS))
/* a word's top bit set where a's low 31 bits are at least b's: 2^31 + a_low - b_low never borrows */
#define WORDS_LOW_AT_LEAST(a, b) ((((a) | WORD_TOPS) - ((b) & WORD_LOWS)) & WORD_TOPS)

control IngressWords(inout headers_t hdr, inout ina_meta_t meta) {
    action store_words() {
        words_register.write((bit<32>)meta.slot, hdr.words.value);
    }

    action swap_words() {
        words_t value;
        words_register.read(value, (bit<32>)meta.slot);
        words_register.write((bit<32>)meta.slot, hdr.words.value);
        hdr.words.value = value;
    }

    action add_words() {
        words_t value;
        words_register.read(value, (bit<32>)meta.slot);
        value = WORDS_ADD(value, hdr.words.value);
        words_register.write((bit<32>)meta.slot, value);
        hdr.words.value = value;
    }

    action max_words() {
        words_t value;
        words_register.read(value, (bit<32>)meta.slot);
        words_t w = hdr.words.value;
        /* a word's top bit where value >= w: value's top bit where the top bits differ, else the low bits' */
        words_t keep = ((value & ~w) | (~(value ^ w) & WORDS_LOW_AT_LEAST(value, w))) & WORD_TOPS;
        keep = (keep - (keep >> 31)) | keep;  /* the top bit spread over its word */
        value = (value & keep) | (w & ~keep);
        words_register.write((bit<32>)meta.slot, value);
        hdr.words.value = value;
    }

    action read_words() {
        words_register.read(hdr.words.value, (bit<32>)meta.slot);
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
