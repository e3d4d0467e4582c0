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
#if defined(INA_WORD_PASSES) && !defined(INA_WORD_PASSES_P4)
#define INA_WORD_PASSES_P4

/* round again for group `group` at register index `index` */
#define TO_WORD_PASS(group, index) \
    CARRY.pass = PASS_WORDS; \
    CARRY.out_kind = OUT_RECIRC; \
    CARRY.word_group = group; \
    CARRY.word_index = index; \
    meta.drop = 0; \
    meta.mcast_group = 0; \
    meta.egress_port = INA_WORD_PASS_PORT; \
    meta.queue = 0;

/* The deciding pass, once Outputs wrote the packet: keep what leaves for after the last group. */
control HandToWordPasses(inout headers_t hdr, inout ina_meta_t meta) {
    apply {
        CARRY.word_step = meta.slot_action;
        CARRY.final_kind = meta.output;
        CARRY.final_drop = (bit<8>)meta.drop;
        CARRY.final_port = (bit<16>)meta.egress_port;
        CARRY.final_queue = (bit<8>)meta.queue;
        TO_WORD_PASS(1, meta.slot + POOL)
    }
}

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
        word_steps.apply();
    }
}

/* After a word pass: the next group's, or out as the deciding pass decided. */
control WordPassOutput(inout headers_t hdr, inout ina_meta_t meta) {
    apply {
        if (CARRY.word_group == WORD_GROUPS - 1) {
            CARRY.pass = PASS_FIRST;
            CARRY.out_kind = CARRY.final_kind;
            meta.drop = CARRY.final_drop[0:0];
            meta.egress_port = CARRY.final_port[8:0];
            meta.queue = CARRY.final_queue[2:0];
            if (CARRY.final_kind == OUT_RESULT) {
                meta.mcast_group = CARRY.group;
            }
        } else {
            TO_WORD_PASS(CARRY.word_group + 1, CARRY.word_index + POOL)
        }
    }
}

#endif
