/* Word passes (K above INA_WORD_GROUP; docs/p4.md, "Word passes"): a Tofino pass's stages have a
 * stateful ALU for INA_WORD_GROUP words, so the deciding pass steps the first group and hands the
 * packet to a pass for each later group, through the recirculation port (BMv2 built with a word
 * group runs the same, for its tests). Such a pass decides nothing: it takes the deciding pass's
 * step (its slot action) to the group's part of the word registers and, after the last group, sends
 * the packet as the deciding pass decided.
 *
 * Why the groups stay in order: every word pass goes round in queue 0 of the one recirculation
 * port, so a slot's packets reach group g + 1 in the order they stepped group g; the first group's
 * order is the slot's (the deciding passes'). A last group shorter than the others leaves its
 * stateful ALUs past K stepping words the packet does not have (invalid headers): the cells they
 * write are no word's, and nothing reads them. */
#ifndef INA_WORD_PASSES_P4
#define INA_WORD_PASSES_P4
#ifdef INA_WORD_PASSES
#define WORD_PASS (CARRY.pass == PASS_WORDS)

/* Round again for group `group` at register index `index`: the architecture's ingress sends a
 * packet whose bridge says PASS_WORDS to queue 0 of INA_WORD_PASS_PORT (ina_tna.p4, ina_v1model.p4),
 * so that no table here writes what Outputs wrote in an earlier stage. */
#define TO_WORD_PASS(group, index) \
    CARRY.pass = PASS_WORDS; \
    CARRY.out_kind = OUT_RECIRC; \
    CARRY.word_group = group; \
    CARRY.word_index = index;

/* The deciding pass, once Outputs routed it, where its slot action steps the words (NextPass,
 * outputs.p4): its step, and what leaves after the last group and where, go along. */
#define HAND_TO_WORD_PASSES \
    CARRY.word_step = meta.slot_action; \
    CARRY.final_kind = meta.output; \
    CARRY.final_drop = (bit<8>)meta.drop; \
    CARRY.final_port = (bit<16>)meta.egress_port; \
    CARRY.final_queue = (bit<8>)meta.queue; \
    TO_WORD_PASS(1, meta.slot + POOL)

/* A word pass: the key the words' tables (values.p4) choose the deciding pass's step by, and the
 * group's register index as the slot. */
control WordPassStep(inout headers_t hdr, inout ina_meta_t meta) {
    action step_of(bit<8> path, bit<32> answer, bit<1> op_max) {
        meta.path = path;
        meta.old_missing = answer;
        meta.op_max = op_max;
        meta.rest = 0;
        meta.slot = CARRY.word_index;
#ifdef INA_WIDE_WORDS
        meta.slot_action = CARRY.word_step;  /* v1model's words step by the slot action, TNA's by path and answer */
#endif
    }

    @name(".ina_word_steps")
    table word_steps {
        key = { CARRY.word_step: exact @name("step"); }
        actions = { step_of; }
        const default_action = step_of(PATH_NONE, 0, 0);
        INA_CONST_TABLE_SIZE(8)
        const entries = {
            SLOT_STORE: step_of(PATH_TAKE, 0, 0);
            SLOT_SWAP: step_of(PATH_TAKE, 1, 0);
            SLOT_ADD: step_of(PATH_SAME, 1, 0);
            SLOT_MAX: step_of(PATH_SAME, 1, 1);
            SLOT_READ: step_of(PATH_FLUSH, 1, 0);
        }
    }

    apply {
        if (CARRY.groups_absent == 1) {
            /* a FLUSH's or SWEEP's frame ends before this group: its words, which the read fills */
#if WORD_GROUPS == 3
            if (CARRY.word_group == 1) {
#define EACH_WORD_COUNT INA_WORD_GROUP
#include "valid_words.p4"
            } else
#endif
            {
#define EACH_WORD_COUNT LAST_GROUP_WORDS
#include "valid_words.p4"
            }
        }
        word_steps.apply();
    }
}

/* After a word pass: the next group's, or out as the deciding pass decided (one table: one logical
 * table in a stage the words share). */
control WordPassOutput(inout headers_t hdr, inout ina_meta_t meta) {
    action leave() {
        CARRY.pass = PASS_FIRST;
        CARRY.out_kind = CARRY.final_kind;
        meta.drop = CARRY.final_drop[0:0];
        meta.egress_port = CARRY.final_port[8:0];
        meta.queue = CARRY.final_queue[2:0];
    }

    action leave_to_group() {
        leave();
        meta.mcast_group = CARRY.group;
    }

    action next_group() {
        TO_WORD_PASS(CARRY.word_group + 1, CARRY.word_index + POOL)
    }

    @name(".ina_word_pass_outputs")
    table word_pass_outputs {
        key = {
            CARRY.word_group: ternary @name("group");
            CARRY.final_kind: ternary @name("final_kind");
        }
        actions = { leave; leave_to_group; next_group; }
        const default_action = next_group();
        INA_CONST_TABLE_SIZE(4)
        const entries = {
            (WORD_GROUPS - 1, OUT_RESULT): leave_to_group();
            (WORD_GROUPS - 1, _): leave();
        }
    }

    apply {
        word_pass_outputs.apply();
    }
}

#else
/* K at most a pass's words: no word passes, and nothing of theirs left for the compiler to place */
#define WORD_PASS false
control WordPassStep(inout headers_t hdr, inout ina_meta_t meta) { apply { } }
control WordPassOutput(inout headers_t hdr, inout ina_meta_t meta) { apply { } }
#endif
#endif
