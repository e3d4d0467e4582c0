/* What leaves the switch (docs/protocol.md, section 5), decided from what the slot stages answered:
 * the packet forwarded unchanged to its job's PS, a PARTIAL to a PS, a RESULT replicated to every
 * worker and the PS (one multicast group per job; the egress writes each copy's destination), or a
 * later pass. Unicast goes out by the route table. */
#ifndef INA_OUTPUTS_P4
#define INA_OUTPUTS_P4

const bit<16> CHUNK_UDP_LEN = LANES_UDP_LEN;

/* The outcome, event and output of a packet on its deciding pass (docs/p4.md, "Per-packet algorithm"). */
control Decide(inout headers_t hdr, inout ina_meta_t meta) {
    action send(bit<8> output, bit<32> outcome) {
        meta.output = output;
        meta.outcome = outcome;
    }

    /* a later pass, which re-checks that the slot still holds the key this pass saw */
    action next_pass(bit<8> pass, bit<8> kind) {
        meta.output = OUT_RECIRC;
        meta.outcome = NO_OUTCOME;
        CARRY.pass = pass;
        CARRY.claim_kind = kind;
        CARRY.expect_id = meta.old_id;
        CARRY.expect_seq = meta.old_seq;
    }

    /* The slot's own partial leaves as a PARTIAL to this job's PS. */
    action evict_own() {
        meta.partial_id = meta.key_id;
        meta.partial_seq = meta.old_seq;
        meta.partial_full = meta.full;
        meta.partial_lanes = meta.lane_bits;
        meta.partial_ps_ip = meta.ps_ip;
        meta.partial_ps_port = meta.ps_port;
        meta.partial_missing = meta.old_missing;
        meta.output = OUT_PARTIAL;
    }

    /* A preempted or raced partial may be another job's: its PS and bitmap come from this table. */
    @name(".ina_victim")
    action victim(bit<32> full, bit<8> lane_bits, bit<32> ps_ip, bit<16> ps_port) {
        meta.partial_full = full;
        meta.partial_lanes = lane_bits;
        meta.partial_ps_ip = ps_ip;
        meta.partial_ps_port = ps_port;
    }

    @name(".ina_victims")
    table victims {
        key = { CARRY.expect_id[15:0]: exact @name("job"); }
        actions = { victim; NoAction; }
        const default_action = NoAction();
        size = 2048;
    }

    apply {
        meta.output = OUT_DROP;
        if (CARRY.pass == PASS_REDIRECT) {
            /* the collision decided on the first pass: its chunk's later packets follow it */
            send(OUT_TO_PS, OUTCOME_COLLISION);
        } else if (meta.flushing == 1) {
            /* FLUSH from the PS, the control plane's idle sweep, or a RESEND's flush */
            if (meta.slot_action == SLOT_READ) {
                evict_own();
            }
            if (meta.slot_action == SLOT_READ && hdr.ina.kind == KIND_SWEEP) {
                meta.partial_missing = meta.rest;
                meta.event = EVENT_SWEPT;
            } else if (meta.slot_action == SLOT_READ && hdr.ina.kind == KIND_FLUSH) {
                meta.event = EVENT_FLUSH_HITS;
            }
            if (hdr.ina.kind == KIND_FLUSH) {
                meta.outcome = OUTCOME_FLUSH_REQUESTS;
            } else if (hdr.ina.kind != KIND_SWEEP) {
                meta.outcome = OUTCOME_FLUSHED;
            }
        } else if (CARRY.pass == PASS_CLAIM) {
            if (meta.path == PATH_CLAIM) {
                meta.outcome = OUTCOME_CLAIMED;
                if (meta.old_missing != 0) {
                    meta.partial_id = CARRY.expect_id;
                    meta.partial_seq = meta.old_seq;
                    meta.partial_missing = meta.old_missing;
                    victims.apply();
                    meta.output = OUT_PARTIAL;
                    if (CARRY.claim_kind == CLAIM_PREEMPT) {
                        meta.event = EVENT_PREEMPTED;
                    } else {
                        meta.event = EVENT_STALE;
                    }
                } else if (meta.rest == 0) {
                    meta.output = OUT_RESULT;
                    meta.event = EVENT_COMPLETED;
                }
            } else {
                /* the slot changed between the passes: the PS takes the packet (its FLUSH
                 * requests resolve any split this leaves) */
                send(OUT_TO_PS, OUTCOME_COLLISION);
            }
        } else if (REDIRECTED) {
            send(OUT_TO_PS, OUTCOME_REDIRECTED);
        } else if (meta.path == PATH_TAKE) {
            meta.outcome = OUTCOME_CLAIMED;
            if (meta.old_missing != 0) {
                /* an older partial of this key id: stale, to the PS */
                evict_own();
                meta.event = EVENT_STALE;
            } else if (meta.rest == 0) {
                meta.output = OUT_RESULT;
                meta.event = EVENT_COMPLETED;
            }
        } else if (meta.path == PATH_SAME) {
            if ((meta.missing_pred & PRED_LO) != 0) {
                /* the slot's chunk completed or was flushed: a late first transmission claims it again */
                if (meta.first == 1) {
                    next_pass(PASS_CLAIM, CLAIM_FREE);
                } else {
                    send(OUT_TO_PS, OUTCOME_RESEND_FORWARDED);
                }
            } else if (meta.old_missing != 0) {
                meta.outcome = OUTCOME_AGGREGATED;
                if ((meta.missing_pred & PRED_HI) != 0) {
                    meta.output = OUT_RESULT;
                    meta.event = EVENT_COMPLETED;
                }
            } else if (meta.first == 1) {
                /* the slot already holds this worker's contribution */
                send(OUT_DROP, OUTCOME_DUPLICATE);
            } else {
                next_pass(PASS_FLUSH, CLAIM_FREE);
            }
        } else if (meta.first == 0) {
            /* a RESEND on a free slot or another chunk's: only the PS can hold its result */
            send(OUT_TO_PS, OUTCOME_RESEND_FORWARDED);
        } else if ((meta.missing_pred & PRED_LO) != 0) {
            next_pass(PASS_CLAIM, CLAIM_FREE);
        } else if (SAME_ID || meta.old_id == meta.key_id_other_op) {
            /* another chunk of this job */
            if (NEWER) {
                next_pass(PASS_CLAIM, CLAIM_STALE);
            } else {
                send(OUT_TO_PS, OUTCOME_STRAGGLER);
            }
        } else if (meta.esa == 1 && meta.fanin > 1 && (meta.prio_lower & PRED_LO) != 0) {
            next_pass(PASS_CLAIM, CLAIM_PREEMPT);
        } else {
            next_pass(PASS_REDIRECT, CLAIM_FREE);
        }
    }
}

control Outputs(inout headers_t hdr, inout ina_meta_t meta) {
    @name(".ina_route")
    action route(bit<9> port, bit<48> mac) {
        meta.egress_port = port;
        hdr.ethernet.src = meta.switch_mac;
        hdr.ethernet.dst = mac;
    }

    action unroutable() {
        meta.drop = 1;
    }

    /* Every address the switch sends to: workers and PSes. */
    @name(".ina_routes")
    table routes {
        key = { hdr.ipv4.dst: exact @name("dst"); }
        actions = { route; unroutable; }
        const default_action = unroutable();
        size = 4096;
    }

    /* A packet the switch writes: from its own address, K words after the header. */
    action from_switch() {
        hdr.ethernet.src = meta.switch_mac;
        hdr.ipv4.src = meta.switch_ip;
        hdr.ipv4.total_len = IPV4_HEADER_LEN + CHUNK_UDP_LEN;
        hdr.udp.src_port = INA_PORT;
        hdr.udp.length = CHUNK_UDP_LEN;
        hdr.udp.checksum = 0;
    }

    apply {
        CARRY.from_port = (bit<16>)meta.in_port;
        if (meta.output == OUT_TO_PS) {
            /* unchanged but for the destination (docs/protocol.md, "Forward to the PS") */
            hdr.ipv4.dst = meta.ps_ip;
            hdr.udp.dst_port = meta.ps_port;
            hdr.udp.checksum = 0;
            routes.apply();
        } else if (meta.output == OUT_PARTIAL) {
            /* the partial's key, its priority and the workers it holds (lanes: a MAX chunk's words are whole) */
            hdr.ina.kind = KIND_PARTIAL;
            hdr.ina.flags = 0;
            if (meta.partial_id[16:16] == 1) {
                hdr.ina.flags = FLAG_MAX_BIT;
            }
            hdr.ina.job = meta.partial_id[15:0];
            hdr.ina.rank = 0;
            hdr.ina.priority = meta.old_prio;
            hdr.ina.seq = meta.partial_seq;
            hdr.ina.index_bits = 0;
            hdr.ina.lane_bits = meta.partial_lanes;
            if (meta.partial_id[16:16] == 1) {
                hdr.ina.lane_bits = 32;
            }
            hdr.ina.bitmap = meta.partial_full & ~meta.partial_missing;
            from_switch();
            hdr.ipv4.dst = meta.partial_ps_ip;
            hdr.udp.dst_port = meta.partial_ps_port;
            routes.apply();
        } else if (meta.output == OUT_RESULT) {
            /* this chunk's key; every worker's contribution */
            hdr.ina.kind = KIND_RESULT;
            hdr.ina.rank = 0;
            hdr.ina.priority = 0;
            hdr.ina.flags = hdr.ina.flags & FLAG_MAX_BIT;
            hdr.ina.bitmap = meta.full;
            from_switch();
            meta.mcast_group = CARRY.group;
        } else if (meta.output == OUT_RECIRC) {
            meta.egress_port = INA_RECIRC_PORT;
        } else {
            meta.drop = 1;
        }
        CARRY.out_kind = meta.output;
        /* ESA's egress queue (docs/protocol.md, "Egress queues"): the priority the packet leaves with,
         * eight levels a queue; atp and static keep one FIFO */
        if (meta.esa == 1) {
            meta.queue = 7;
            if (hdr.ina.priority < 56) {
                meta.queue = hdr.ina.priority[5:3];
            }
        }
    }
}

#endif
