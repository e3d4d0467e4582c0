/* The slot decision (docs/protocol.md, section 5, "Per-packet algorithm"), the same for v1model and
 * TNA: the registers in their stage order (docs/p4.md, "Stages"), each read and written by one
 * register action per pass, each action a Tofino stateful ALU's (two comparisons, one output):
 *
 *   stage 1  redirect_id, redirect_seq    key_id, key_id_copy
 *   stage 2  key_seq, key_seq_copy        touched
 *   stage 3  missing, missing_copy
 *   stage 4  prio                         (the value words follow, values.p4)
 *
 * A copy takes the same writes as its register and answers another question: the registers answer
 * with values later stages compute with, the copies with 4-bit predicates that a stage's gateway
 * can test (a gateway takes a few dozen bits, not the 32-bit compares of every condition). 
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

/* The conditions the stages test, on the flags JobChecks set and what the registers before answered. */
#define REDIRECTED ((meta.redirect_id_pred & PRED_LO) != 0 && (meta.redirect_seq_pred & PRED_LO) != 0)
#define SAME_ID ((meta.id_pred & PRED_LO) != 0)            /* key_id is this key id (claim pass: the expected one) */
#define NEWER ((meta.seq_pred & PRED_LO) != 0)             /* 0 < seq - key_seq < 2^31 */
#define SAME_SEQ ((meta.seq_pred & PRED_HI) != 0)
#define MEETS_SLOT (meta.data_first == 1 && !REDIRECTED)
#define IS_TAKE (MEETS_SLOT && meta.first == 1 && SAME_ID && NEWER)
#define IS_SAME (MEETS_SLOT && SAME_ID && SAME_SEQ)
#define IS_CLAIM (meta.claim_pass == 1 && SAME_ID)
#define IS_FLUSH (meta.flushing == 1 && meta.sweep == 0 && SAME_ID && SAME_SEQ)
#define IS_SWEEP (meta.sweep == 1 && SAME_ID && SAME_SEQ)

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

    INA_ACTION(bit<32>, bit<4>, key_id_copy, key_id_copy_swap)
        rv = INA_PREDICATE1(value == CARRY.expect_id);
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
        if (value != 0) {
            value = value & ~hdr.ina.bitmap;
        }
    INA_END(missing)

    /* ... the same update; out: whether the slot was free (lo) and this worker the last missing (hi) */
    INA_ACTION(bit<32>, bit<4>, missing_copy, missing_copy_add)
        rv = INA_PREDICATE(value == 0, value == hdr.ina.bitmap);
        if (value != 0) {
            value = value & ~hdr.ina.bitmap;
        }
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

    INA_UPDATE(bit<8>, prio, prio_raise)
        if (value < meta.prio) {
            value = meta.prio;
        }
    INA_END(prio)

    INA_ACTION(bit<8>, bit<8>, prio, prio_read)
        rv = value;
    INA_END(prio)

    /* another job's partial: whether its priority is below ours */
    INA_ACTION(bit<8>, bit<4>, prio, prio_compare)
        rv = INA_PREDICATE1(value < meta.prio);
    INA_END(prio)

    apply {
        /* a FLUSH or SWEEP that evicts the slot leaves with its K words (each part fills its own) */
        if (hdr.ina.kind != KIND_DATA) {
#define WORD_STEP(i) hdr.words[i].setValid();
#include "each_word.p4"
#undef WORD_STEP
        }

        /* the effective priority: min(priority, priority_cap) */
        if (meta.prio_gap == 0) {
            meta.prio = meta.priority_cap;
        }

        /* what a claim leaves missing: every worker but this one; a flush: none (a SWEEP compares
         * with the partial it saw) */
        if (meta.flushing == 1 && meta.sweep == 0) {
            meta.claim_bitmap = 0;
        } else {
            meta.claim_bitmap = meta.rest;
        }

        /* stage 1 */
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

        /* stage 2 */
        if (MEETS_SLOT && meta.first == 1 && SAME_ID) {
            INA_RUN(meta.old_seq, key_seq_take);
            INA_RUN(meta.seq_pred, key_seq_copy_take);
        } else if (IS_CLAIM) {
            INA_RUN(meta.old_seq, key_seq_swap);
            INA_DO(key_seq_copy_swap);
        } else if (MEETS_SLOT || meta.flushing == 1) {
            INA_RUN(meta.old_seq, key_seq_read);
            INA_RUN(meta.seq_pred, key_seq_copy_compare);
        }
        if ((MEETS_SLOT || meta.claim_pass == 1) && SAME_ID) {
            INA_DO(touch);
        }

        /* stage 3: how the packet meets the slot (the same conditions set meta.path for later stages) */
        if (IS_TAKE || IS_CLAIM || IS_FLUSH) {
            INA_RUN(meta.old_missing, missing_claim);
            INA_DO(missing_copy_claim);
        } else if (IS_SAME) {
            INA_RUN(meta.old_missing, missing_add);
            INA_RUN(meta.missing_pred, missing_copy_add);
        } else if (IS_SWEEP) {
            INA_RUN(meta.old_missing, missing_sweep);
            INA_DO(missing_copy_sweep);
        } else if (MEETS_SLOT) {
            INA_RUN(meta.old_missing, missing_read);
            INA_RUN(meta.missing_pred, missing_copy_read);
        }
        if (IS_TAKE) {
            meta.path = PATH_TAKE;
        } else if (IS_SAME) {
            meta.path = PATH_SAME;
        } else if (IS_CLAIM) {
            meta.path = PATH_CLAIM;
        } else if (IS_FLUSH) {
            meta.path = PATH_FLUSH;
        } else if (IS_SWEEP) {
            meta.path = PATH_SWEEP;
        } else if (MEETS_SLOT) {
            meta.path = PATH_OTHER;
        } else {
            meta.path = PATH_NONE;
        }

        /* stage 4 */
        if (meta.path == PATH_TAKE || meta.path == PATH_CLAIM) {
            INA_RUN(meta.old_prio, prio_claim);
        } else if (meta.path == PATH_SAME && (meta.missing_pred & PRED_LO) == 0 && meta.old_missing != 0) {
            INA_DO(prio_raise);
        } else if (meta.path == PATH_FLUSH || meta.path == PATH_SWEEP) {
            INA_RUN(meta.old_prio, prio_read);
        } else if (meta.path == PATH_OTHER) {
            INA_RUN(meta.prio_lower, prio_compare);
        }
    }
}

#endif
