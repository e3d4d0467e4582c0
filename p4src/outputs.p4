/* What leaves the switch (docs/protocol.md, section 5), decided from what the slot stages answered:
 * the packet forwarded unchanged to its job's PS, a PARTIAL to a PS, a RESULT replicated to every
 * worker and the PS (one multicast group per job; the egress writes each copy's destination), or a
 * later pass. Unicast goes out by the route table. */
#ifndef INA_OUTPUTS_P4
#define INA_OUTPUTS_P4

/* a PARTIAL's flags: at a job's spine it carries SPINE (racks.p4), the victim's its victim entry's */
#define VICTIM_FLAGS , bit<8> flags
#define PARTIAL_FLAGS(op) ((op) | meta.partial_flags)

const bit<16> CHUNK_UDP_LEN = LANES_UDP_LEN;

/* A claim pass's victim: the job whose partial the pass evicts, named by the bridge, so that the table is
 * looked up with the job tables, long before the outcome needs it (and its route's key is known when the
 * outcome is). */
control Victims(in headers_t hdr, inout ina_meta_t meta) {
    @name(".ina_victim")
    action victim(bit<32> full, bit<8> lane_bits, bit<32> ps_ip, bit<16> ps_port VICTIM_FLAGS) {
        meta.victim_flags = flags;
        meta.partial_full = full;
        meta.partial_lanes = lane_bits;
        meta.victim_ps_ip = ps_ip;
        meta.victim_ps_port = ps_port;
    }

    @name(".ina_victims")
    table victims {
        key = { CARRY.expect_id[15:0]: exact @name("job"); }
        actions = { victim; NoAction; }
        const default_action = NoAction();
        size = 2048;
    }

    apply {
        if (CARRY.pass == PASS_CLAIM) {
            victims.apply();
        }
    }
}

/* A RESULT passed on to the job's workers (Outputs), which Admission lets in as a leaf's descent or atp's
 * release, takes the flush pass (jobs.p4): it found its held result if its sweep of HELD answered 0 (slots.p4),
 * which under atp only a held result does. Keys and entries of the flush outcomes. */
#define PASS_ON_KEYS \
            meta.descend: ternary @name("descend"); \
            meta.path: ternary @name("path"); \
            meta.old_missing: ternary @name("answer"); \
            meta.held_missing[31:31]: ternary @name("held");
#define PASS_ON_ANY , _, _, _, _
#define PASS_ON_ENTRIES \
            (KIND_RESULT, _, 1, PATH_SWEEP, 0, 1): send(OUT_RESULT, OUTCOME_DESCENDED, EVENT_RELEASE_HITS); \
            (KIND_RESULT, _, 1, _, _, _): send(OUT_RESULT, OUTCOME_DESCENDED, NO_EVENT); \
            (KIND_RESULT, _, 0, PATH_SWEEP, 0, 1): send(OUT_RESULT, OUTCOME_RELEASES, EVENT_RELEASE_HITS); \
            (KIND_RESULT, _, 0, _, _, _): send(OUT_RESULT, OUTCOME_RELEASES, NO_EVENT);

/* The outcome, event and output of a packet on its deciding pass (docs/p4.md, "Per-packet algorithm"):
 * constant ternary tables, first match winning (slots.p4 says why), one for each kind of pass. */
control Decide(inout headers_t hdr, inout ina_meta_t meta) {
    action send(bit<8> output, bit<32> outcome, bit<32> event) {
        meta.output = output;
        meta.outcome = outcome;
        meta.event = event;
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

    /* The slot's own partial leaves as a PARTIAL to this job's PS ... */
    action own_partial() {
        meta.partial_id = meta.key_id;
        meta.partial_seq = meta.old_seq;
        meta.partial_full = meta.full;
        meta.partial_lanes = meta.lane_bits;
        meta.output = OUT_PARTIAL;
        meta.partial_flags = meta.level_flags;
    }

    /* ... lacking the workers `missing` held, */
    action evict(bit<32> outcome, bit<32> event) {
        own_partial();
        meta.partial_missing = meta.old_missing;
        meta.outcome = outcome;
        meta.event = event;
    }

    /* ... or, swept, those the control plane saw missing. */
    action evict_swept() {
        own_partial();
        meta.partial_missing = meta.rest;
        meta.outcome = NO_OUTCOME;
        meta.event = EVENT_SWEPT;
    }

    /* The claim pass evicts a stale or preempted partial, which may be another job's: its PS and
     * bitmap come from the victim table (Victims). */
    action claim_evict(bit<32> event) {
        meta.partial_id = CARRY.expect_id;
        meta.partial_seq = meta.old_seq;
        meta.partial_missing = meta.old_missing;
        meta.dst_ip = meta.victim_ps_ip;
        meta.dst_port = meta.victim_ps_port;
        meta.output = OUT_PARTIAL;
        meta.partial_flags = meta.victim_flags;
        meta.outcome = OUTCOME_CLAIMED;
        meta.event = event;
    }

    /* FLUSH from the PS, the control plane's idle sweep, or a RESEND's flush */
    @name(".ina_flush_outcomes")
    table flush_outcomes {
        key = {
            hdr.ina.kind: ternary @name("kind");
            meta.slot_action: ternary @name("slot_action");
            PASS_ON_KEYS
        }
        actions = { send; evict; evict_swept; }
        const default_action = send(OUT_DROP, OUTCOME_FLUSHED, NO_EVENT);
        INA_CONST_TABLE_SIZE(16)
        const entries = {
            PASS_ON_ENTRIES
            (KIND_SWEEP, SLOT_READ PASS_ON_ANY): evict_swept();
            (KIND_SWEEP, _ PASS_ON_ANY): send(OUT_DROP, NO_OUTCOME, NO_EVENT);
            (KIND_FLUSH, SLOT_READ PASS_ON_ANY): evict(OUTCOME_FLUSH_REQUESTS, EVENT_FLUSH_HITS);
            (KIND_FLUSH, _ PASS_ON_ANY): send(OUT_DROP, OUTCOME_FLUSH_REQUESTS, NO_EVENT);
            (_, SLOT_READ PASS_ON_ANY): evict(OUTCOME_FLUSHED, NO_EVENT);
        }
    }

    /* The claim pass: the slot is ours if it still held the key the first pass saw, or if another
     * worker's claim pass took it for this very chunk (PATH_SAME: the packet adds to it, as on a first
     * pass); else the PS takes the packet (its FLUSH requests resolve any split this leaves). */
    @name(".ina_claim_outcomes")
    table claim_outcomes {
        key = {
            meta.path: ternary @name("path");
            meta.old_missing: ternary @name("answer");
            meta.rest: ternary @name("rest");
            CARRY.claim_kind: ternary @name("claim_kind");
            meta.missing_pred: ternary @name("missing");
        }
        actions = { send; claim_evict; }
        const default_action = send(OUT_TO_PS, OUTCOME_COLLISION, NO_EVENT);
        INA_CONST_TABLE_SIZE(8)
        const entries = {
            (PATH_CLAIM, 0, 0, _, _): send(OUT_RESULT, OUTCOME_CLAIMED, EVENT_COMPLETED);
            (PATH_CLAIM, 0, _, _, _): send(OUT_DROP, OUTCOME_CLAIMED, NO_EVENT);
            (PATH_CLAIM, _, _, CLAIM_PREEMPT, _): claim_evict(EVENT_PREEMPTED);
            (PATH_CLAIM, _, _, _, _): claim_evict(EVENT_STALE);
            /* the chunk left the slot meanwhile (flushed: the PS holds it) */
            (PATH_SAME, _, _, _, PRED_LO &&& PRED_LO): send(OUT_TO_PS, OUTCOME_COLLISION, NO_EVENT);
            (PATH_SAME, 0, _, _, _): send(OUT_DROP, OUTCOME_DUPLICATE, NO_EVENT);
            (PATH_SAME, _, _, _, PRED_HI &&& PRED_HI): send(OUT_RESULT, OUTCOME_AGGREGATED, EVENT_COMPLETED);
            (PATH_SAME, _, _, _, _): send(OUT_DROP, OUTCOME_AGGREGATED, NO_EVENT);
        }
    }

    /* A packet on its first pass. */
    @name(".ina_data_outcomes")
    table data_outcomes {
        key = {
            meta.redirect_id_pred: ternary @name("redirect_id");
            meta.redirect_seq_pred: ternary @name("redirect_seq");
            meta.path: ternary @name("path");
            meta.first: ternary @name("first");
            meta.missing_pred: ternary @name("missing");
            meta.old_missing: ternary @name("answer");
            meta.rest: ternary @name("rest");
            meta.id_pred: ternary @name("id");
            meta.other_op_diff: ternary @name("other_op");
            meta.seq_pred: ternary @name("seq");
            meta.esa: ternary @name("esa");
            meta.fanin: ternary @name("fanin");
            meta.prio_lower: ternary @name("prio_lower");
        }
        actions = { send; evict; next_pass; }
        const default_action = next_pass(PASS_REDIRECT, CLAIM_FREE);
        INA_CONST_TABLE_SIZE(32)
        const entries = {
            /* rid rseq path  first missing answer rest id  other_op seq esa fanin prio_lower */
            /* redirected: this chunk's later packets follow its first to the PS */
            (LO, LO, _, _, _, _, _, _, _, _, _, _, _): send(OUT_TO_PS, OUTCOME_REDIRECTED, NO_EVENT);
            /* took the slot from an older partial of this key id (stale, to the PS) or a free one */
            (_, _, PATH_TAKE, _, _, 0, 0, _, _, _, _, _, _): send(OUT_RESULT, OUTCOME_CLAIMED, EVENT_COMPLETED);
            (_, _, PATH_TAKE, _, _, 0, _, _, _, _, _, _, _): send(OUT_DROP, OUTCOME_CLAIMED, NO_EVENT);
            (_, _, PATH_TAKE, _, _, _, _, _, _, _, _, _, _): evict(OUTCOME_CLAIMED, EVENT_STALE);
            /* the slot's chunk completed or was flushed: a late first transmission claims it again */
            (_, _, PATH_SAME, 1, LO, _, _, _, _, _, _, _, _): next_pass(PASS_CLAIM, CLAIM_FREE);
            (_, _, PATH_SAME, _, LO, _, _, _, _, _, _, _, _): send(OUT_TO_PS, OUTCOME_RESEND_FORWARDED, NO_EVENT);
            /* the slot already holds this worker's contribution: a duplicate, or a RESEND's flush */
            (_, _, PATH_SAME, 1, _, 0, _, _, _, _, _, _, _): send(OUT_DROP, OUTCOME_DUPLICATE, NO_EVENT);
            (_, _, PATH_SAME, _, _, 0, _, _, _, _, _, _, _): next_pass(PASS_FLUSH, CLAIM_FREE);
            (_, _, PATH_SAME, _, HI, _, _, _, _, _, _, _, _): send(OUT_RESULT, OUTCOME_AGGREGATED, EVENT_COMPLETED);
            (_, _, PATH_SAME, _, _, _, _, _, _, _, _, _, _): send(OUT_DROP, OUTCOME_AGGREGATED, NO_EVENT);
            /* a RESEND on a free slot or another chunk's: only the PS can hold its result */
            (_, _, _, 0, _, _, _, _, _, _, _, _, _): send(OUT_TO_PS, OUTCOME_RESEND_FORWARDED, NO_EVENT);
            (_, _, _, _, LO, _, _, _, _, _, _, _, _): next_pass(PASS_CLAIM, CLAIM_FREE);
            /* another chunk of this job (either operation): a newer one claims, an older one straggles */
            (_, _, _, _, _, _, _, LO, _, LO, _, _, _): next_pass(PASS_CLAIM, CLAIM_STALE);
            (_, _, _, _, _, _, _, _, 0, LO, _, _, _): next_pass(PASS_CLAIM, CLAIM_STALE);
            (_, _, _, _, _, _, _, LO, _, _, _, _, _): send(OUT_TO_PS, OUTCOME_STRAGGLER, NO_EVENT);
            (_, _, _, _, _, _, _, _, 0, _, _, _, _): send(OUT_TO_PS, OUTCOME_STRAGGLER, NO_EVENT);
            /* another job's partial: esa preempts one of lower priority, unless this job is one worker */
            (_, _, _, _, _, _, _, _, _, _, 1, 0 &&& 0xFE, _): next_pass(PASS_REDIRECT, CLAIM_FREE);
            (_, _, _, _, _, _, _, _, _, _, 1, _, LO): next_pass(PASS_CLAIM, CLAIM_PREEMPT);
        }
    }

    apply {
        meta.output = OUT_DROP;
        if (CARRY.pass == PASS_REDIRECT) {
            /* the collision decided on the first pass: its chunk's later packets follow it */
            send(OUT_TO_PS, OUTCOME_COLLISION, NO_EVENT);
        } else if (meta.flushing == 1) {
            flush_outcomes.apply();
        } else if (CARRY.pass == PASS_CLAIM) {
            claim_outcomes.apply();
        } else {
            data_outcomes.apply();
        }
    }
}

/* The egress queue of a DATA's or PARTIAL's priority (docs/protocol.md, "Egress queues"): eight
 * levels a queue, from queue 1 up, since queue 0 holds the RESULTs and everything else nobody's
 * chunk waits behind; 0 for all with one FIFO a port (`by_priority` 0: the control plane's queues
 * setting, the same whatever the policy). */
control EgressQueue(in bit<8> priority, in bit<1> by_priority, out bit<3> queue) {
    action set_queue(bit<3> q) {
        queue = q;
    }

    /* exact on the priority's eighths (no TCAM: the words' stages hold the outcome tables' ternary keys) */
    table queue_of {
        key = { by_priority: exact; priority[7:3]: exact @name("priority"); }
        actions = { set_queue; }
        const default_action = set_queue(0);
        INA_CONST_TABLE_SIZE(32)
        const entries = {
            (1, 0): set_queue(1); (1, 1): set_queue(2); (1, 2): set_queue(3); (1, 3): set_queue(4);
            (1, 4): set_queue(5); (1, 5): set_queue(6); (1, 6): set_queue(7); (1, 7): set_queue(7);
            (1, 8): set_queue(7); (1, 9): set_queue(7); (1, 10): set_queue(7); (1, 11): set_queue(7);
            (1, 12): set_queue(7); (1, 13): set_queue(7); (1, 14): set_queue(7); (1, 15): set_queue(7);
            (1, 16): set_queue(7); (1, 17): set_queue(7); (1, 18): set_queue(7); (1, 19): set_queue(7);
            (1, 20): set_queue(7); (1, 21): set_queue(7); (1, 22): set_queue(7); (1, 23): set_queue(7);
            (1, 24): set_queue(7); (1, 25): set_queue(7); (1, 26): set_queue(7); (1, 27): set_queue(7);
            (1, 28): set_queue(7); (1, 29): set_queue(7); (1, 30): set_queue(7); (1, 31): set_queue(7);
        }
    }

    apply {
        queue_of.apply();
    }
}

/* The packet as it leaves: each output's header fields written once on its branch, and the route
 * looked up on the destination Decide chose, so that a Tofino stage does both. */
control Outputs(inout headers_t hdr, inout ina_meta_t meta) {
    @name(".ina_route")
    action route(bit<9> port, bit<48> mac) {
        meta.egress_port = port;
        hdr.ethernet.dst = mac;
    }

    action unroutable() {
        meta.drop = 1;
    }

    /* Every address the switch sends to: workers and PSes. */
    @name(".ina_routes")
    table routes {
        key = { meta.dst_ip: exact @name("dst"); }
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

    /* unchanged but for the destination (docs/protocol.md, "Forward to the PS") */
    action to_ps() {
        hdr.ethernet.src = meta.switch_mac;
        hdr.ipv4.dst = meta.dst_ip;
        hdr.udp.dst_port = meta.dst_port;
        hdr.udp.checksum = 0;
        meta.queue = meta.in_queue;
    }

    /* the partial's key, its priority and the workers it holds, ... */
    action partial() {
        hdr.ina.kind = KIND_PARTIAL;
        hdr.ina.job = meta.partial_id[15:0];
        hdr.ina.rank = 0;
        hdr.ina.priority = meta.old_prio;
        hdr.ina.seq = meta.partial_seq;
        hdr.ina.index_bits = 0;
        hdr.ina.bitmap = meta.partial_full & ~meta.partial_missing;
        from_switch();
        hdr.ipv4.dst = meta.dst_ip;
        hdr.udp.dst_port = meta.dst_port;
        meta.queue = meta.old_queue;
    }

    /* ... a MAX chunk's words whole, ... */
    action partial_max() {
        partial();
        hdr.ina.flags = PARTIAL_FLAGS(FLAG_MAX_BIT);
        hdr.ina.lane_bits = 32;
    }

    /* ... a SUM's in the lanes of its workers */
    action partial_sum() {
        partial();
        hdr.ina.flags = PARTIAL_FLAGS(0);
        hdr.ina.lane_bits = meta.partial_lanes;
    }

    /* this chunk's key; every worker's contribution (priority 0: queue 0) */
    action result() {
        hdr.ina.kind = KIND_RESULT;
        hdr.ina.rank = 0;
        hdr.ina.priority = 0;
        hdr.ina.flags[7:4] = 0;  /* MAX and SPINE stay: a spine completes DATA flagged SPINE, others none */
        hdr.ina.flags[2:2] = 0;
        hdr.ina.flags[0:0] = 0;
        hdr.ina.bitmap = meta.full;
        from_switch();
        meta.mcast_group = CARRY.group;
    }

    /* atp: a completed chunk's RESULT to its PS alone, flagged HOLD, which the step waits for: queue 1 of the
     * priority queues (docs/protocol.md, "Egress queues"); the slot stays held (slots.p4) */
    action held_result() {
        result();
        hdr.ina.flags[2:2] = 1;  /* FLAG_HOLD */
        hdr.ipv4.dst = meta.dst_ip;
        hdr.udp.dst_port = meta.dst_port;
        meta.mcast_group = 0;
        meta.queue = (bit<3>)meta.priority_queues;
        meta.output = OUT_HELD;  /* unicast: no replicas in the egress */
    }

    /* A RESULT passed on to every worker of the job (the group), HOLD cleared, from the switch's own address
     * (the workers take RESULTs from their switch): the PS's return of a held result, or at a leaf its spine's
     * RESULT (docs/protocol.md, sections 5 and 10) */
    action pass_on() {
        hdr.ina.flags = hdr.ina.flags & ~FLAG_HOLD;
        hdr.ethernet.src = meta.switch_mac;
        hdr.ipv4.src = meta.switch_ip;
        hdr.udp.src_port = INA_PORT;
        hdr.udp.checksum = 0;
        meta.mcast_group = CARRY.group;
    }

    /* A leaf's completed chunk instead: its rack's sum, one DATA up to the spine (docs/protocol.md,
     * section 10), the rack its rank and bit, with the slot's priority (the slot frees itself: no
     * worker is missing) */
    action up() {
        hdr.ina.kind = KIND_DATA;
        hdr.ina.flags[7:4] = 0;
        hdr.ina.flags[3:3] = 1;  /* FLAG_SPINE */
        hdr.ina.flags[2:2] = 0;
        hdr.ina.flags[0:0] = 0;
        hdr.ina.rank = meta.rack;
        hdr.ina.priority = meta.up_prio;
        hdr.ina.bitmap = meta.rack_bit;
        from_switch();
        hdr.ipv4.dst = meta.spine_ip;
        hdr.udp.dst_port = meta.spine_port;
        hdr.ethernet.dst = meta.spine_mac;  /* the route to the spine, from the level table */
        meta.egress_port = meta.spine_egress;
        meta.queue = meta.up_queue;
        meta.output = OUT_UP;  /* unicast: no replicas in the egress */
    }

    action to_recirc_port() {
        meta.egress_port = INA_RECIRC_PORT;
        meta.queue = meta.in_queue;
    }

    action drop() {
        meta.drop = 1;
    }

    /* each branch one action (one logical table), so that the words share the stage */
    apply {
        if (meta.output == OUT_TO_PS) {
            to_ps();
            routes.apply();
        } else if (meta.output == OUT_PARTIAL) {
            if (meta.partial_id[16:16] == 1) {
                partial_max();
            } else {
                partial_sum();
            }
            routes.apply();
        } else if (meta.passing_on == 1) {
            pass_on();
        } else if (meta.output == OUT_RESULT && meta.role == ROLE_LEAF) {
            up();
        } else if (meta.output == OUT_RESULT && meta.held_missing != 0) {
            held_result();
            routes.apply();
        } else if (meta.output == OUT_RESULT) {
            result();
        } else if (meta.output == OUT_RECIRC) {
            to_recirc_port();
        } else {
            drop();
        }
    }
}

/* What the bridge says comes after this pass: the egress and out, with the output Decide chose; the
 * later pass Decide chose (its next_pass); or, where the slot action steps words of later groups,
 * their word passes (word_passes.p4). */
control NextPass(inout headers_t hdr, inout ina_meta_t meta) {
    action leave() {
        CARRY.pass = PASS_FIRST;
        CARRY.out_kind = meta.output;
    }

    action go_round() {
        CARRY.out_kind = OUT_RECIRC;
    }

#ifdef INA_WORD_PASSES
    action hand_to_word_passes() {
        HAND_TO_WORD_PASSES
    }
#endif

    /* one table, not a chain of conditions: one logical table in a stage the words share */
    @name(".ina_next_passes")
    table next_passes {
        key = {
            meta.output: ternary @name("output");
            meta.slot_action: ternary @name("slot_action");
        }
#ifdef INA_WORD_PASSES
        actions = { leave; go_round; hand_to_word_passes; }
#else
        actions = { leave; go_round; }
#endif
        const default_action = leave();
        INA_CONST_TABLE_SIZE(4)
        const entries = {
            (OUT_RECIRC, _): go_round();
#ifdef INA_WORD_PASSES
            (_, SLOT_NONE): leave();
            (_, _): hand_to_word_passes();
#endif
        }
    }

    apply {
        next_passes.apply();
    }
}

#endif
