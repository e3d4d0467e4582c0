/* The slot decision (docs/protocol.md, section 5, "Per-packet algorithm"), the same for v1model and
 * TNA: the registers in their stage order (docs/p4.md, "Stages"), each read and written by one
 * register action per pass, each action a Tofino stateful ALU's (two comparisons, one output):
 *
 *   stage 1  redirect_id, redirect_seq    key_id, key_id_copy       (gateways on the packet's flags)
 *   stage 2  key_seq, key_seq_copy        (table ina_seq_steps), touched
 *   stage 3  missing (ina_paths), missing_copy (ina_paths_copy)
 *   stage 4  prio (ina_prio_steps)        (the value words follow, values.p4)
 *
 * A copy takes the same writes as its register and answers another question: the registers answer
 * with values later stages compute with, the copies with 4-bit predicates that a later stage's
 * table can match (a 32-bit compare of every condition would not fit a stage's match input).
 *
 * A slot is free when `missing` (the workers whose contribution it still lacks) is 0: completing a
 * chunk frees its slot without touching the key registers before it, which keep the key of the
 * slot's last chunk. A write that must be decided after its register's stage is done on a later
 * pass (meta.pass), which first re-checks that the slot still holds the key the first pass saw.
 *
 * The values: the old key id and seq (for a later pass, a victim, a stale partial), missing as the
 * old bitmap or this worker's bit of it, prio as the old priority or its difference from ours. */
#ifndef INA_SLOTS_P4
#define INA_SLOTS_P4

/* The stages from 2 on choose their register actions with constant ternary tables keyed on the flags
 * JobChecks set and the predicates the registers before answered, first match winning: an if/else
 * chain of such conditions is a gateway whose rows bf-p4c multiplies out under the negation of the
 * branches before it (docs/p4.md, "Tofino"), where a table's entries take the chain's order as is.
 *
 * A register's two comparisons never both hold, so a predicate is one of 0b0001 (neither), PRED_LO
 * and PRED_HI, and a key tests one of its bits. The table columns below: */
#define LO PRED_LO &&& PRED_LO          /* the low comparison held */
#define HI PRED_HI &&& PRED_HI          /* the high comparison held */
#define BOTH PRED_BOTH &&& PRED_BOTH    /* both held */
#define NOT_LO 0 &&& PRED_LO           /* the low comparison did not hold */
/* A DATA on its first pass that meets its slot: not redirected (redirect id and seq both this
 * chunk's); the redirect's predicates are the first two columns after data_first. */
#define MEETS_SLOT(act, ...) (1, NOT_LO, _, __VA_ARGS__): act; (1, LO, NOT_LO, __VA_ARGS__): act;
#define REDIRECT_KEY \
        meta.data_first: ternary @name("data_first"); \
        meta.redirect_id_pred: ternary @name("redirect_id"); \
        meta.redirect_seq_pred: ternary @name("redirect_seq");

/* The contribution's bit cleared; under atp a chunk it completes (its bit is the whole of `missing`, compared
 * before the update, as a stateful ALU does) stays held (metadata.p4), else it is free. */
#define CLEAR_CONTRIBUTION(held) \
        if (value == hdr.ina.bitmap) { value = INA_HELD_VALUE(held); } else if (value != 0) { value = value & ~hdr.ina.bitmap; }

control SlotDecision(inout headers_t hdr, inout ina_meta_t meta) {
    INA_REGISTER(bit<32>, redirect_id, ".ina_redirect_id")
    INA_REGISTER(bit<32>, redirect_seq, ".ina_redirect_seq")
    INA_REGISTER(bit<32>, key_id, ".ina_key_id")
    INA_REGISTER(bit<32>, key_id_copy, ".ina_key_id_copy")
    INA_REGISTER(bit<32>, key_seq, ".ina_key_seq")
    INA_REGISTER(bit<32>, key_seq_copy, ".ina_key_seq_copy")
    INA_REGISTER(bit<32>, touched, ".ina_touched")
    INA_REGISTER(bit<32>, missing, ".ina_missing")
    INA_REGISTER(bit<32>, missing_copy, ".ina_missing_copy")
    INA_REGISTER(bit<8>, prio, ".ina_prio")
    INA_HELD_PARAM(held, "ina_held")  /* one a register */
    INA_HELD_PARAM(held_copy, "ina_held_copy")

    /* -- stage 1: the redirect (its id and seq each a register: a stateful ALU takes two inputs) and key_id */

    INA_ACTION(bit<32>, bit<4>, redirect_id, redirect_id_check)
        rv = INA_PREDICATE1(value == meta.key_id);
    INA_END(redirect_id)

    /* FLUSH, SWEEP, a RESEND's flush, a collision: this chunk's later packets go to the PS */
    INA_UPDATE(bit<32>, redirect_id, redirect_id_key)
        value = meta.key_id;
    INA_END(redirect_id)

    /* a preemption: the victim's later packets follow its partial to the PS */
    INA_UPDATE(bit<32>, redirect_id, redirect_id_victim)
        value = CARRY.expect_id;
    INA_END(redirect_id)

    INA_ACTION(bit<32>, bit<4>, redirect_seq, redirect_seq_check)
        rv = INA_PREDICATE1(value == hdr.ina.seq);
    INA_END(redirect_seq)

    INA_UPDATE(bit<32>, redirect_seq, redirect_seq_key)
        value = hdr.ina.seq;
    INA_END(redirect_seq)

    INA_UPDATE(bit<32>, redirect_seq, redirect_seq_victim)
        value = CARRY.expect_seq;
    INA_END(redirect_seq)

    INA_ACTION(bit<32>, bit<32>, key_id, key_id_read)
        rv = value;
    INA_END(key_id)

    INA_ACTION(bit<32>, bit<4>, key_id_copy, key_id_copy_compare)
        rv = INA_PREDICATE1(value == meta.key_id);
    INA_END(key_id_copy)

    /* the claim pass: take the slot if it still holds the key the first pass saw */
    INA_UPDATE(bit<32>, key_id, key_id_swap)
        if (value == CARRY.expect_id) {
            value = meta.key_id;
        }
    INA_END(key_id)

    /* ... and whether it holds this key id instead: two workers' first packets of a chunk both found
     * the slot free, and the other's claim pass took it first (this packet then adds to it) */
    INA_ACTION(bit<32>, bit<4>, key_id_copy, key_id_copy_swap)
        rv = INA_PREDICATE(value == CARRY.expect_id, value == meta.key_id);
        if (value == CARRY.expect_id) {
            value = meta.key_id;
        }
    INA_END(key_id_copy)

    /* -- stage 2: key_seq and touched ---------------------------------------------------------- */

    INA_ACTION(bit<32>, bit<32>, key_seq, key_seq_read)
        rv = value;
    INA_END(key_seq)

    /* a first transmission of the slot's key id: a newer chunk takes the key */
    INA_ACTION(bit<32>, bit<32>, key_seq, key_seq_take)
        rv = value;
        if ((int<32>)(hdr.ina.seq - value) > 0) {
            value = hdr.ina.seq;
        }
    INA_END(key_seq)

    INA_ACTION(bit<32>, bit<32>, key_seq, key_seq_swap)
        rv = value;
        value = hdr.ina.seq;
    INA_END(key_seq)

    INA_ACTION(bit<32>, bit<4>, key_seq_copy, key_seq_copy_compare)
        rv = INA_PREDICATE((int<32>)(hdr.ina.seq - value) > 0, value == hdr.ina.seq);
    INA_END(key_seq_copy)

    INA_ACTION(bit<32>, bit<4>, key_seq_copy, key_seq_copy_take)
        rv = INA_PREDICATE((int<32>)(hdr.ina.seq - value) > 0, value == hdr.ina.seq);
        if ((int<32>)(hdr.ina.seq - value) > 0) {
            value = hdr.ina.seq;
        }
    INA_END(key_seq_copy)

    INA_UPDATE(bit<32>, key_seq_copy, key_seq_copy_swap)
        value = hdr.ina.seq;
    INA_END(key_seq_copy)

    INA_UPDATE(bit<32>, touched, touch)
        value = meta.now;
    INA_END(touched)

    /* -- stage 3: missing, and its copy for a second answer ------------------------------------ */

    /* a claim (every worker but this one missing) or a flush (none): the old bitmap out, a stale,
     * preempted or flushed partial's. (Four register actions a register: claim and flush are one.) */
    INA_ACTION(bit<32>, bit<32>, missing, missing_claim)
        rv = value;
        value = meta.claim_bitmap;
    INA_END(missing)

    INA_UPDATE(bit<32>, missing_copy, missing_copy_claim)
        value = meta.claim_bitmap;
    INA_END(missing_copy)

    /* the slot's own chunk: this worker's bit out (0: a duplicate, or a free slot), and cleared */
    INA_ACTION(bit<32>, bit<32>, missing, missing_add)
        rv = value & hdr.ina.bitmap;
        CLEAR_CONTRIBUTION(held)
    INA_END(missing)

    /* ... the same update; out: whether the slot was free (lo) and this worker the last missing (hi) */
    INA_ACTION(bit<32>, bit<4>, missing_copy, missing_copy_add)
        rv = INA_PREDICATE(value == 0, value == hdr.ina.bitmap);
        CLEAR_CONTRIBUTION(held_copy)
    INA_END(missing_copy)

    /* SWEEP: freed only if the slot still holds exactly the partial the control plane saw (answer 0) */
    INA_ACTION(bit<32>, bit<32>, missing, missing_sweep)
        rv = value ^ meta.claim_bitmap;
        if (value == meta.claim_bitmap) {
            value = 0;
        }
    INA_END(missing)

    INA_UPDATE(bit<32>, missing_copy, missing_copy_sweep)
        if (value == meta.claim_bitmap) {
            value = 0;
        }
    INA_END(missing_copy)

    INA_ACTION(bit<32>, bit<32>, missing, missing_read)
        rv = value;
    INA_END(missing)

    INA_ACTION(bit<32>, bit<4>, missing_copy, missing_copy_read)
        rv = INA_PREDICATE1(value == 0);
    INA_END(missing_copy)

    /* -- stage 4: prio --------------------------------------------------------------------------- */

    INA_ACTION(bit<8>, bit<8>, prio, prio_claim)
        rv = value;
        value = meta.prio;
    INA_END(prio)

    INA_ACTION(bit<8>, bit<8>, prio, prio_raise)  /* answers the raised priority, which a leaf sends its sum up with (racks.p4) */
        if (value < meta.prio) {
            value = meta.prio;
        }
        rv = value;
    INA_END(prio)

    INA_ACTION(bit<8>, bit<8>, prio, prio_read)
        rv = value;
    INA_END(prio)

    /* another job's partial: whether its priority is below ours */
    INA_ACTION(bit<8>, bit<4>, prio, prio_compare)
        rv = INA_PREDICATE1(value < meta.prio);
    INA_END(prio)

    /* -- the stages' choices ------------------------------------------------------------------ */

    /* stage 2: a first transmission of the slot's key id may take it; the claim pass takes it; a
     * packet of the slot's key id on its first pass or the claim pass touches it (in a gateway of
     * its own: the registers a Tofino table's actions use must be used by all of them) */
    action seq_take() {
        INA_RUN(meta.old_seq, key_seq_take);
        INA_RUN(meta.seq_pred, key_seq_copy_take);
        meta.touching = 1;
    }

    action seq_swap() {
        INA_RUN(meta.old_seq, key_seq_swap);
        INA_DO(key_seq_copy_swap);
        meta.touching = 1;
    }

    action seq_read() {
        INA_RUN(meta.old_seq, key_seq_read);
        INA_RUN(meta.seq_pred, key_seq_copy_compare);
    }

    action seq_read_touch() {
        seq_read();
        meta.touching = 1;
    }

    @name(".ina_seq_steps")
    table seq_steps {
        key = {
            REDIRECT_KEY
            meta.first: ternary @name("first");
            meta.claim_pass: ternary @name("claim_pass");
            meta.flushing: ternary @name("flushing");
            meta.id_pred: ternary @name("id");
        }
        actions = { seq_take; seq_swap; seq_read_touch; seq_read; NoAction; }
        const default_action = NoAction();
        INA_CONST_TABLE_SIZE(16)
        const entries = {
            /*         first claim flushing id */
            MEETS_SLOT(seq_take(), 1, _, _, LO)
            (_, _, _, _, 1, _, LO): seq_swap();
            (_, _, _, _, 1, _, BOTH): seq_swap();
            (_, _, _, _, 1, _, HI): seq_read_touch();
            MEETS_SLOT(seq_read_touch(), _, _, _, LO)
            MEETS_SLOT(seq_read(), _, _, _, _)
            (_, _, _, _, _, 1, _): seq_read();
        }
    }

    /* stage 3: how the packet meets the slot (meta.path, for the stages after), and `missing` and
     * its copy, each from a table of its own with the same entries (on Tofino, two registers of one
     * table share its eight input-crossbar bytes for their inputs, and these two read the same two
     * fields in different ways) */
#define PATH_KEY \
        key = { \
            REDIRECT_KEY \
            meta.first: ternary @name("first"); \
            meta.claim_pass: ternary @name("claim_pass"); \
            meta.flushing: ternary @name("flushing"); \
            meta.sweep: ternary @name("sweep"); \
            meta.id_pred: ternary @name("id"); \
            meta.seq_pred: ternary @name("seq"); \
        }
/*                                       first claim flushing sweep id seq (LO: newer, HI: the same) */
#define PATH_ENTRIES(TAKE, SAME, CLAIM, FLUSH, SWEEP, OTHER) \
            MEETS_SLOT(TAKE, 1, _, _, _, LO, LO) \
            MEETS_SLOT(SAME, _, _, _, _, LO, HI) \
            (_, _, _, _, 1, _, _, LO, _): CLAIM; \
            (_, _, _, _, 1, _, _, BOTH, _): CLAIM; \
            (_, _, _, _, 1, _, _, HI, HI): SAME; \
            (_, _, _, _, _, 1, 0, LO, HI): FLUSH; \
            (_, _, _, _, _, _, 1, LO, HI): SWEEP; \
            MEETS_SLOT(OTHER, _, _, _, _, _, _)

    action claim_slot(bit<8> path) {
        meta.path = path;
        INA_RUN(meta.old_missing, missing_claim);
    }

    action add_to_slot() {
        meta.path = PATH_SAME;
        INA_RUN(meta.old_missing, missing_add);
    }

    action sweep_slot() {
        meta.path = PATH_SWEEP;
        INA_RUN(meta.old_missing, missing_sweep);
    }

    action read_slot() {
        meta.path = PATH_OTHER;
        INA_RUN(meta.old_missing, missing_read);
    }

    action no_path() {
        meta.path = PATH_NONE;
    }

    @name(".ina_paths")
    table paths {
        PATH_KEY
        actions = { claim_slot; add_to_slot; sweep_slot; read_slot; no_path; }
        const default_action = no_path();
        INA_CONST_TABLE_SIZE(16)
        const entries = {
            PATH_ENTRIES(claim_slot(PATH_TAKE), add_to_slot(), claim_slot(PATH_CLAIM), claim_slot(PATH_FLUSH),
                         sweep_slot(), read_slot())
        }
    }

    action claim_copy() {
        INA_DO(missing_copy_claim);
    }

    action add_to_copy() {
        INA_RUN(meta.missing_pred, missing_copy_add);
    }

    action sweep_copy() {
        INA_DO(missing_copy_sweep);
    }

    action read_copy() {
        INA_RUN(meta.missing_pred, missing_copy_read);
    }

    @name(".ina_paths_copy")
    table paths_copy {
        PATH_KEY
        actions = { claim_copy; add_to_copy; sweep_copy; read_copy; NoAction; }
        const default_action = NoAction();
        INA_CONST_TABLE_SIZE(16)
        const entries = {
            PATH_ENTRIES(claim_copy(), add_to_copy(), claim_copy(), claim_copy(), sweep_copy(), read_copy())
        }
    }

    /* stage 4: a claim takes the slot's priority; an added contribution that leaves the chunk
     * incomplete raises it; another key's partial answers whether its priority is below ours */
    action prio_take() {
        INA_RUN(meta.old_prio, prio_claim);
    }

    action prio_add() {
        INA_RUN(meta.up_prio, prio_raise);
    }

    action prio_old() {
        INA_RUN(meta.old_prio, prio_read);
    }

    action prio_below() {
        INA_RUN(meta.prio_lower, prio_compare);
    }

    @name(".ina_prio_steps")
    table prio_steps {
        key = {
            meta.path: ternary @name("path");
            meta.missing_pred: ternary @name("missing");
            meta.old_missing: ternary @name("answer");
        }
        actions = { prio_take; prio_add; prio_old; prio_below; NoAction; }
        const default_action = NoAction();
        INA_CONST_TABLE_SIZE(16)
        const entries = {
            (PATH_TAKE, _, _): prio_take();
            (PATH_CLAIM, _, _): prio_take();
            (PATH_SAME, LO, _): NoAction();
            (PATH_SAME, _, 0): NoAction();
            (PATH_SAME, _, _): prio_add();
            (PATH_FLUSH, _, _): prio_old();
            (PATH_SWEEP, _, _): prio_old();
            (PATH_OTHER, _, _): prio_below();
        }
    }

    apply {
        /* a FLUSH or SWEEP that evicts the slot leaves with its K words: the first group's made valid
         * here, where the register read fills them; the later groups' (word passes) on their own
         * passes, which the bridge tells that the frame ends before them */
        if (meta.passing_on == 1) {
            /* a RESULT passed on leaves with its own words (BMv2 zeroes a header made valid again) */
        } else
        if (hdr.ina.kind != KIND_DATA) {
#include "valid_words.p4"
#ifdef INA_WORD_PASSES
            CARRY.groups_absent = 1;
#endif
        }

        /* the effective priority: min(priority, priority_cap) */
        if (meta.prio_gap == 0) {
            meta.prio = meta.priority_cap;
        }
        meta.up_prio = meta.prio;  /* a claim's; an added contribution's is the raised one (prio_add) */

        /* what a claim leaves missing: every worker but this one; a flush: none (a SWEEP compares
         * with the partial it saw) */
        if (meta.passing_on == 1) {
            /* a RESULT passed on (a FLUSH and a SWEEP, jobs.p4) frees the slot as a SWEEP would, only if it
             * holds exactly the held result, and names no partial */
            meta.claim_bitmap = meta.held_missing;
            meta.rest = 0;
        } else if (meta.flushing == 1 && meta.sweep == 0) {
            meta.claim_bitmap = 0;
        } else if (meta.sweep == 1 && meta.rest == 0) {
            /* a SWEEP of a held result (the control plane saw every worker in) */
            meta.claim_bitmap = meta.held_missing;
            meta.rest = meta.held_missing;
        } else {
            meta.claim_bitmap = meta.rest;
        }

        /* stage 1 */
        if (meta.passing_on == 1) {
            /* its chunk is complete: nothing of it is to follow to the PS */
        } else
        if (meta.flushing == 1 || CARRY.pass == PASS_REDIRECT) {
            INA_DO(redirect_id_key);
            INA_DO(redirect_seq_key);
        } else if (meta.claim_pass == 1 && CARRY.claim_kind == CLAIM_PREEMPT) {
            INA_DO(redirect_id_victim);
            INA_DO(redirect_seq_victim);
        } else if (meta.data_first == 1) {
            INA_RUN(meta.redirect_id_pred, redirect_id_check);
            INA_RUN(meta.redirect_seq_pred, redirect_seq_check);
        }
        if (meta.claim_pass == 1) {
            INA_DO(key_id_swap);
            INA_RUN(meta.id_pred, key_id_copy_swap);
        } else if (meta.data_first == 1 || meta.flushing == 1) {
            INA_RUN(meta.old_id, key_id_read);
            INA_RUN(meta.id_pred, key_id_copy_compare);
        }

        /* 0: the slot holds this job's chunk of the other operation (a register takes two packet
         * fields, which key_id_copy's compare and swap use up) */
        meta.other_op_diff = meta.old_id ^ meta.key_id_other_op;

        meta.touching = 0;
        seq_steps.apply();
        if (meta.touching == 1) {
            INA_DO(touch);
        }
        paths.apply();
        paths_copy.apply();
        prio_steps.apply();
    }
}

#endif
