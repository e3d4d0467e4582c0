/* The slot decision (docs/protocol.md, section 5, "Per-packet algorithm"), as the registers of
 * docs/p4.md in their stage order: redirect, key_id, key_seq, missing, prio. Each register is
 * read and written at most once per pass, and each write is decided by the packet and the
 * registers before it; a write decided later is done on a recirculated pass (meta.pass).
 *
 * A slot is free when `missing` (the workers whose contribution it still lacks) is 0: completing
 * a chunk frees its slot without touching the key registers before it, which keep the key of the
 * slot's last chunk. The value words and `touched` follow in Values. */
#ifndef INA_SLOTS_P4
#define INA_SLOTS_P4

control SlotDecision(inout headers_t hdr, inout ina_meta_t meta, in standard_metadata_t std) {
    @name(".ina_redirect_id") register<bit<32>>(POOL) redirect_id;
    @name(".ina_redirect_seq") register<bit<32>>(POOL) redirect_seq;
    @name(".ina_key_id") register<bit<32>>(POOL) key_id;
    @name(".ina_key_seq") register<bit<32>>(POOL) key_seq;
    @name(".ina_missing") register<bit<32>>(POOL) missing;
    @name(".ina_prio") register<bit<8>>(POOL) prio;

    /* -- outcomes: what leaves the switch and how it is counted ------------------------------ */

    action send(bit<8> output, bit<32> outcome) {
        meta.output = output;
        meta.outcome = outcome;
    }

    action next_pass(bit<8> pass, bit<8> kind) {
        meta.output = OUT_RECIRC;
        meta.outcome = NO_OUTCOME;
        meta.pass = pass;
        meta.claim_kind = kind;
        meta.expect_id = meta.old_id;
        meta.expect_seq = meta.old_seq;
    }

    /* The slot's old partial leaves as a PARTIAL to the PS of its own job. */
    action evict_own(bit<32> id, bit<32> seq) {
        meta.evict = 1;
        meta.partial_id = id;
        meta.partial_seq = seq;
        meta.partial_full = meta.full;
        meta.partial_lanes = (id & KEY_MAX) == 0 ? meta.lane_bits : 8w32;
        meta.partial_ps_ip = meta.ps_ip;
        meta.partial_ps_port = meta.ps_port;
    }

    /* A preempted or raced partial may be another job's: its PS and bitmap come from this table. */
    @name(".ina_victim")
    action victim(bit<32> full, bit<8> lane_bits, bit<32> ps_ip, bit<16> ps_port) {
        meta.partial_full = full;
        meta.partial_lanes = (meta.old_id & KEY_MAX) == 0 ? lane_bits : 8w32;
        meta.partial_ps_ip = ps_ip;
        meta.partial_ps_port = ps_port;
    }

    @name(".ina_victims")
    table victims {
        key = { meta.partial_id[15:0]: exact @name("job"); }
        actions = { victim; NoAction; }
        const default_action = NoAction();
        size = 2048;
    }

    /* -- registers ----------------------------------------------------------------------------- */

    /* Stage 1, redirect: compare with the packet's key, or set it. */
    action read_redirect(out bool redirected) {
        bit<32> rid;
        bit<32> rseq;
        redirect_id.read(rid, meta.slot);
        redirect_seq.read(rseq, meta.slot);
        redirected = rid == meta.key_id && rseq == hdr.ina.seq;
    }

    action set_redirect(bit<32> id, bit<32> seq) {
        redirect_id.write(meta.slot, id);
        redirect_seq.write(meta.slot, seq);
    }

    /* The missing bitmap of a claim: every worker but the claimer. */
    action claim_missing() {
        missing.write(meta.slot, meta.full & ~meta.rank_bit);
    }

    /* Stage 5, prio: a claim sets it, an added contribution raises it. */
    action claim_prio() {
        prio.read(meta.old_prio, meta.slot);
        prio.write(meta.slot, meta.prio);
    }

    action raise_prio() {
        prio.read(meta.old_prio, meta.slot);
        prio.write(meta.slot, meta.prio > meta.old_prio ? meta.prio : meta.old_prio);
    }

    action read_prio() {
        prio.read(meta.old_prio, meta.slot);
    }

    apply {
        if (hdr.ina.kind == KIND_FLUSH || hdr.ina.kind == KIND_SWEEP || meta.pass == PASS_FLUSH) {
            /* FLUSH from the PS, the control plane's idle sweep, or a RESEND's flush: the slot's
             * partial of this key leaves as a PARTIAL; its later packets are redirected. */
            set_redirect(meta.key_id, hdr.ina.seq);
            key_id.read(meta.old_id, meta.slot);
            key_seq.read(meta.old_seq, meta.slot);
            missing.read(meta.old_missing, meta.slot);
            bool hit = meta.old_id == meta.key_id && meta.old_seq == hdr.ina.seq && meta.old_missing != 0;
            if (hdr.ina.kind == KIND_SWEEP) {
                /* only if nothing was added since the control plane saw the slot idle */
                hit = hit && meta.old_missing == (meta.full & ~hdr.ina.bitmap);
            }
            if (hit) {
                missing.write(meta.slot, 0);
            }
            read_prio();
            meta.output = OUT_DROP;
            if (hit) {
                evict_own(meta.key_id, hdr.ina.seq);
                meta.slot_action = SLOT_EVICT;
                meta.output = OUT_PARTIAL;
            }
            if (hdr.ina.kind == KIND_SWEEP) {
                meta.event = hit ? EVENT_SWEPT : NO_EVENT;
            } else if (hdr.ina.kind == KIND_FLUSH) {
                meta.outcome = OUTCOME_FLUSH_REQUESTS;
                meta.event = hit ? EVENT_FLUSH_HITS : NO_EVENT;
            } else {
                meta.outcome = OUTCOME_FLUSHED;
            }
        } else if (meta.pass == PASS_REDIRECT) {
            /* the collision decided on the first pass: its chunk's later packets follow it */
            set_redirect(meta.key_id, hdr.ina.seq);
            send(OUT_TO_PS, OUTCOME_COLLISION);
        } else if (meta.pass == PASS_CLAIM) {
            /* claim a slot whose key must change, if it still holds the key the first pass saw */
            if (meta.claim_kind == CLAIM_PREEMPT) {
                set_redirect(meta.expect_id, meta.expect_seq);
            }
            key_id.read(meta.old_id, meta.slot);
            bool won = meta.old_id == meta.expect_id;
            if (won) {
                key_id.write(meta.slot, meta.key_id);
            }
            key_seq.read(meta.old_seq, meta.slot);
            if (won) {
                key_seq.write(meta.slot, hdr.ina.seq);
            }
            missing.read(meta.old_missing, meta.slot);
            if (won) {
                claim_missing();
                claim_prio();
                meta.slot_action = SLOT_CLAIM;
                meta.outcome = OUTCOME_CLAIMED;
                meta.output = OUT_DROP;
                if (meta.old_missing != 0) {
                    meta.evict = 1;
                    meta.partial_id = meta.old_id;
                    meta.partial_seq = meta.old_seq;
                    victims.apply();
                    meta.output = OUT_PARTIAL;
                    meta.event = meta.claim_kind == CLAIM_PREEMPT ? EVENT_PREEMPTED : EVENT_STALE;
                } else if ((meta.full & ~meta.rank_bit) == 0) {
                    meta.output = OUT_RESULT;
                    meta.event = EVENT_COMPLETED;
                }
            } else {
                /* the slot changed between the passes: the PS takes the packet (its FLUSH
                 * requests resolve any split this leaves) */
                send(OUT_TO_PS, OUTCOME_COLLISION);
            }
        } else {
            /* DATA, first pass */
            bool redirected;
            read_redirect(redirected);
            if (redirected) {
                send(OUT_TO_PS, OUTCOME_REDIRECTED);
            } else {
                bool first = (hdr.ina.flags & FLAG_RESEND) == 0;
                /* stage 2, key_id: a first transmission claims a slot that never held a key */
                key_id.read(meta.old_id, meta.slot);
                bool virgin = meta.old_id == 0;
                if (first && virgin) {
                    key_id.write(meta.slot, meta.key_id);
                }
                /* stage 3, key_seq: ... or a slot whose last chunk is an older one of this key */
                key_seq.read(meta.old_seq, meta.slot);
                bool same_id = meta.old_id == meta.key_id;
                bit<32> age = hdr.ina.seq - meta.old_seq;
                bool newer = age != 0 && age[31:31] == 0;
                bool took_key = first && (virgin || (same_id && newer));
                if (took_key) {
                    key_seq.write(meta.slot, hdr.ina.seq);
                }
                bool same_key = same_id && meta.old_seq == hdr.ina.seq;
                /* stage 4, missing */
                missing.read(meta.old_missing, meta.slot);
                bool free = meta.old_missing == 0;
                if (took_key || (same_key && first && free)) {
                    claim_missing();
                    claim_prio();
                    meta.slot_action = SLOT_CLAIM;
                    meta.outcome = OUTCOME_CLAIMED;
                    meta.output = OUT_DROP;
                    if (!free) {
                        /* an older partial of this key id: stale, to the PS */
                        evict_own(meta.key_id, meta.old_seq);
                        meta.output = OUT_PARTIAL;
                        meta.event = EVENT_STALE;
                    } else if ((meta.full & ~meta.rank_bit) == 0) {
                        meta.output = OUT_RESULT;
                        meta.event = EVENT_COMPLETED;
                    }
                } else if (same_key && !free && (meta.old_missing & meta.rank_bit) == 0) {
                    /* the slot already holds this worker's contribution */
                    if (first) {
                        send(OUT_DROP, OUTCOME_DUPLICATE);
                    } else {
                        next_pass(PASS_FLUSH, CLAIM_FREE);
                    }
                } else if (same_key && !free) {
                    missing.write(meta.slot, meta.old_missing & ~meta.rank_bit);
                    raise_prio();
                    meta.slot_action = SLOT_ADD;
                    meta.outcome = OUTCOME_AGGREGATED;
                    meta.output = OUT_DROP;
                    if (meta.old_missing == meta.rank_bit) {
                        meta.output = OUT_RESULT;
                        meta.event = EVENT_COMPLETED;
                    }
                } else if (!first) {
                    /* a RESEND on a free slot or another chunk's: only the PS can hold its result */
                    send(OUT_TO_PS, OUTCOME_RESEND_FORWARDED);
                } else if (free) {
                    next_pass(PASS_CLAIM, CLAIM_FREE);
                } else if (meta.old_id[15:0] == hdr.ina.job) {
                    if (newer) {
                        next_pass(PASS_CLAIM, CLAIM_STALE);
                    } else {
                        send(OUT_TO_PS, OUTCOME_STRAGGLER);
                    }
                } else {
                    /* stage 5, prio: another job's partial */
                    read_prio();
                    if (meta.esa == 1 && meta.fanin > 1 && meta.prio > meta.old_prio) {
                        next_pass(PASS_CLAIM, CLAIM_PREEMPT);
                    } else {
                        next_pass(PASS_REDIRECT, CLAIM_FREE);
                    }
                }
            }
        }
    }
}

#endif
