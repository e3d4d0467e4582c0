/* The slot decision (docs/protocol.md, section 5, "Per-packet algorithm"), the same for v1model and
 * TNA: the registers in their stage order (docs/p4.md, "Stages"), each read and written by one
 * register action per pass, each action a Tofino stateful ALU's (two comparisons, one output):
 *
 *   stage 1  redirect (a pair: seq, id)   key_id
 *   stage 2  key_seq                      touched
 *   stage 3  missing                      missing_copy (the same updates, another output)
 *   stage 4  prio                         (the value words follow, values.p4)
 *
 * A slot is free when `missing` (the workers whose contribution it still lacks) is 0: completing a
 * chunk frees its slot without touching the key registers before it, which keep the key of the
 * slot's last chunk. A write that must be decided after its register's stage is done on a later
 * pass (meta.pass), which first re-checks that the slot still holds the key the first pass saw.
 *
 * The registers answer in forms a stage can test against constants: key_id as its xor with this
 * key (0: the same), key_seq as its difference from this seq (0: the same; negative: this chunk is
 * newer), missing as the old bitmap or this worker's bit of it, prio as its difference from ours. */
#ifndef INA_SLOTS_P4
#define INA_SLOTS_P4

const bit<32> SEQ_HALF = 0x80000000;  /* seq_d: exactly half the sequence space apart, neither newer nor older */

/* The conditions every stage tests, on what the registers before it answered. */
#define DATA_FIRST_PASS (hdr.ina.kind == KIND_DATA && CARRY.pass == PASS_FIRST)
#define FLUSHING (hdr.ina.kind == KIND_FLUSH || hdr.ina.kind == KIND_SWEEP || CARRY.pass == PASS_FLUSH)
#define REDIRECTED (meta.redirected == 4w0b1000)
#define SAME_ID (meta.id_x == 0)
#define SAME_SEQ (meta.seq_d == 0)
#define NEWER (meta.seq_d[31:31] == 1 && meta.seq_d != SEQ_HALF)
#define MEETS_SLOT (DATA_FIRST_PASS && !REDIRECTED)
#define IS_TAKE (MEETS_SLOT && meta.first == 1 && SAME_ID && NEWER)
#define IS_SAME (MEETS_SLOT && SAME_ID && SAME_SEQ)
#define IS_CLAIM (CARRY.pass == PASS_CLAIM && SAME_ID)
#define IS_FLUSH (FLUSHING && hdr.ina.kind != KIND_SWEEP && SAME_ID && SAME_SEQ)
#define IS_SWEEP (hdr.ina.kind == KIND_SWEEP && SAME_ID && SAME_SEQ)

control SlotDecision(inout headers_t hdr, inout ina_meta_t meta) {
    INA_PAIR_REGISTER(redirect, ".ina_redirect")
    INA_REGISTER(bit<32>, key_id, ".ina_key_id")
    INA_REGISTER(bit<32>, key_seq, ".ina_key_seq")
    INA_REGISTER(bit<32>, touched, ".ina_touched")
    INA_REGISTER(bit<32>, missing, ".ina_missing")
    INA_REGISTER(bit<32>, missing_copy, ".ina_missing_copy")
    INA_REGISTER(bit<32>, prio, ".ina_prio")

    /* -- stage 1: redirect (lo = seq, hi = key id) and key_id ---------------------------------- */

    INA_PAIR_ACTION(bit<4>, redirect, redirect_check)
        rv = INA_PREDICATE(value.lo == hdr.ina.seq, value.hi == meta.key_id);
    INA_PAIR_END(redirect)

    /* FLUSH, SWEEP, a RESEND's flush, a collision: this chunk's later packets go to the PS */
    INA_PAIR_UPDATE(redirect, redirect_key)
        value.lo = hdr.ina.seq;
        value.hi = meta.key_id;
    INA_PAIR_END(redirect)

    /* a preemption: the victim's later packets follow its partial to the PS */
    INA_PAIR_UPDATE(redirect, redirect_victim)
        value.lo = CARRY.expect_seq;
        value.hi = CARRY.expect_id;
    INA_PAIR_END(redirect)

    INA_ACTION(bit<32>, bit<32>, key_id, key_id_compare)
        rv = value ^ meta.key_id;
    INA_END(key_id)

    /* the claim pass: take the slot if it still holds the key the first pass saw (answer 0) */
    INA_ACTION(bit<32>, bit<32>, key_id, key_id_swap)
        rv = value ^ CARRY.expect_id;
        if (value == CARRY.expect_id) {
            value = meta.key_id;
        }
    INA_END(key_id)

    /* -- stage 2: key_seq and touched ---------------------------------------------------------- */

    INA_ACTION(bit<32>, bit<32>, key_seq, key_seq_compare)
        rv = value - hdr.ina.seq;
    INA_END(key_seq)

    /* a first transmission of the slot's key id: a newer chunk takes the key */
    INA_ACTION(bit<32>, bit<32>, key_seq, key_seq_take)
        rv = value - hdr.ina.seq;
        if ((int<32>)(hdr.ina.seq - value) > 0) {
            value = hdr.ina.seq;
        }
    INA_END(key_seq)

    INA_ACTION(bit<32>, bit<32>, key_seq, key_seq_swap)
        rv = value - hdr.ina.seq;
        value = hdr.ina.seq;
    INA_END(key_seq)

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
        rv = value ^ meta.rest;
        if (value == meta.rest) {
            value = 0;
        }
    INA_END(missing)

    INA_UPDATE(bit<32>, missing_copy, missing_copy_sweep)
        if (value == meta.rest) {
            value = 0;
        }
    INA_END(missing_copy)

    INA_ACTION(bit<32>, bit<32>, missing, missing_read)
        rv = value;
    INA_END(missing)

    /* -- stage 4: prio --------------------------------------------------------------------------- */

    INA_ACTION(bit<32>, bit<32>, prio, prio_claim)
        rv = value;
        value = meta.prio;
    INA_END(prio)

    INA_UPDATE(bit<32>, prio, prio_raise)
        if (value < meta.prio) {
            value = meta.prio;
        }
    INA_END(prio)

    INA_ACTION(bit<32>, bit<32>, prio, prio_read)
        rv = value;
    INA_END(prio)

    /* another job's partial: negative when its priority is below ours */
    INA_ACTION(bit<32>, bit<32>, prio, prio_compare)
        rv = value - meta.prio;
    INA_END(prio)

    apply {
        /* what a claim leaves missing: every worker but this one; a flush: none */
        if (FLUSHING) {
            meta.claim_bitmap = 0;
        } else {
            meta.claim_bitmap = meta.rest;
        }

        /* stage 1 */
        if (FLUSHING || CARRY.pass == PASS_REDIRECT) {
            INA_DO(redirect_key);
        } else if (CARRY.pass == PASS_CLAIM && CARRY.claim_kind == CLAIM_PREEMPT) {
            INA_DO(redirect_victim);
        } else if (DATA_FIRST_PASS) {
            INA_RUN(meta.redirected, redirect_check);
        }
        if (CARRY.pass == PASS_CLAIM) {
            INA_RUN(meta.id_x, key_id_swap);
        } else if (DATA_FIRST_PASS || FLUSHING) {
            INA_RUN(meta.id_x, key_id_compare);
        }

        /* stage 2 */
        if (DATA_FIRST_PASS && !REDIRECTED && meta.first == 1 && SAME_ID) {
            INA_RUN(meta.seq_d, key_seq_take);
        } else if (CARRY.pass == PASS_CLAIM && SAME_ID) {
            INA_RUN(meta.seq_d, key_seq_swap);
        } else if ((DATA_FIRST_PASS && !REDIRECTED) || FLUSHING) {
            INA_RUN(meta.seq_d, key_seq_compare);
        }
        if (((DATA_FIRST_PASS && !REDIRECTED) || CARRY.pass == PASS_CLAIM) && SAME_ID) {
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
        } else if (meta.path == PATH_SAME && meta.old_missing != 0) {
            INA_DO(prio_raise);
        } else if (meta.path == PATH_FLUSH || meta.path == PATH_SWEEP) {
            INA_RUN(meta.old_prio, prio_read);
        } else if (meta.path == PATH_OTHER) {
            INA_RUN(meta.prio_d, prio_compare);
        }
    }
}

#endif
