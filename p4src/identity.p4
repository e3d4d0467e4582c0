/* The switch's own settings, and the ingress that strings the shared controls together: the same
 * for every architecture, between the top-level programs' mapping of their intrinsic metadata. */
#ifndef INA_IDENTITY_P4
#define INA_IDENTITY_P4

/* The switch's own address and its settings, set by the control plane: the policy (esa: preemption; atp: what
 * `missing` becomes as a chunk completes, HELD for a held result, else 0) and the egress queues (by priority,
 * or one FIFO a port), whatever the policy. */
control Identity(inout ina_meta_t meta) {
    @name(".ina_identity")
    action identity(bit<32> ip, bit<48> mac, bit<32> held_missing, bit<1> priority_queues, bit<1> esa) {
        meta.switch_ip = ip;
        meta.switch_mac = mac;
        meta.esa = esa;
        meta.held_missing = held_missing;
        meta.priority_queues = priority_queues;
    }

    @name(".ina_switch")
    table switch_identity {
        actions = { identity; }
        default_action = identity(0, 0, 0, 1, 1);
        size = 1;
    }

    apply {
        switch_identity.apply();
    }
}

control InaIngressLogic(inout headers_t hdr, inout ina_meta_t meta) {
    Identity() identity;
    CpuPort() cpu_port;
    Validate() validate;
    JobChecks() job_checks;
    Admission() admission;
    SlotDecision() slots;
    IngressWords() words;
    ChooseSlotAction() choose;
    Victims() victims;
    Decide() decide;
    EgressQueue() in_queue;
    EgressQueue() old_queue;
    Outputs() outputs;
    Count() count;
    L2Forwarding() l2;
    NextPass() next_pass;
    WordPassStep() word_pass_step;
    WordPassOutput() word_pass_output;
    Levels() levels;
    EgressQueue() up_queue;

    /* A word pass (WORD_PASS, word_passes.p4) steps its group with the deciding pass's tables (bf-p4c
     * places a table applied in two places in neither): it takes its step from the bridge instead of
     * the checks and the slot, and sends as the bridge says instead of deciding. It counts nothing
     * (no outcome, event or arrival). Without word passes WORD_PASS is false, which the compiler
     * folds away. */
    apply {
        meta.drop = 0;
        meta.queue = 0;
        meta.egress_port = 0;
        meta.mcast_group = 0;
#ifdef INA_OWN_ADDRESS
        /* only an ina packet to the switch's own address is its protocol: one to another host (the PS's
         * FLUSH to a leaf crossing the spine) is forwarded as any other packet (docs/p4.md, "Own address").
         * A later pass is of a packet the first pass took. */
        if (!WORD_PASS) {
            identity.apply(meta);
            if (CARRY.pass == PASS_FIRST && hdr.ipv4.dst != meta.switch_ip) {
                meta.is_ina = 0;
            }
        }
#endif
        if (meta.is_ina == 0) {
            l2.apply(hdr, meta);
        } else {
            bit<1> arrived = 0;
            if (CARRY.pass == PASS_FIRST) {
                arrived = 1;
            }
            meta.outcome = NO_OUTCOME;
            meta.event = NO_EVENT;
            if (WORD_PASS) {
                word_pass_step.apply(hdr, meta);
            } else {
#ifndef INA_OWN_ADDRESS
                identity.apply(meta);
#endif
                cpu_port.apply(meta);
                validate.apply(hdr, meta);
                job_checks.apply(hdr, meta);
                victims.apply(hdr, meta);
                levels.apply(hdr, meta);
                admission.apply(hdr, meta);
            }
            if (meta.outcome == NO_OUTCOME) {
                if (!WORD_PASS) {
                    in_queue.apply(hdr.ina.priority, meta.priority_queues, meta.in_queue);
                    slots.apply(hdr, meta);
                    choose.apply(hdr, meta);
                }
                words.apply(hdr, meta);
                /* Decide and Outputs each under a condition of its own: Tofino 1 places all of a
                 * branch's tables before anything after the branch, and the words go in stages
                 * between and beside them. */
                if (!WORD_PASS) {
                    old_queue.apply(meta.old_prio, meta.priority_queues, meta.old_queue);
                    up_queue.apply(meta.up_prio, meta.priority_queues, meta.up_queue);
                    decide.apply(hdr, meta);
                }
                if (!WORD_PASS) {
                    outputs.apply(hdr, meta);
                }
                if (WORD_PASS) {
                    word_pass_output.apply(hdr, meta);
                } else {
                    next_pass.apply(hdr, meta);
                }
            } else {
                meta.drop = 1;
            }
            count.apply(meta, arrived);
        }
    }
}

#endif
