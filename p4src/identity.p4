/* The switch's own settings, and the ingress that strings the shared controls together: the same
 * for every architecture, between the top-level programs' mapping of their intrinsic metadata. */
#ifndef INA_IDENTITY_P4
#define INA_IDENTITY_P4

/* The switch's own address, and the policy (1 = esa, 0 = atp), set by the control plane. */
control Identity(inout ina_meta_t meta) {
    @name(".ina_identity")
    action identity(bit<32> ip, bit<48> mac, bit<1> esa) {
        meta.switch_ip = ip;
        meta.switch_mac = mac;
        meta.esa = esa;
    }

    @name(".ina_switch")
    table switch_identity {
        actions = { identity; }
        default_action = identity(0, 0, 1);
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
    Decide() decide;
    EgressQueue() in_queue;
    EgressQueue() old_queue;
    Outputs() outputs;
    Count() count;
    L2Forwarding() l2;
#ifdef INA_WORD_PASSES
    HandToWordPasses() hand_to_word_passes;
    WordPassStep() word_pass_step;
    WordPassOutput() word_pass_output;
#endif

    apply {
        meta.drop = 0;
        meta.queue = 0;
        meta.egress_port = 0;
        meta.mcast_group = 0;
        if (meta.is_ina == 0) {
            l2.apply(hdr, meta);
#ifdef INA_WORD_PASSES
        } else if (CARRY.pass == PASS_WORDS) {
            word_pass_step.apply(hdr, meta);
            words.apply(hdr, meta);
            word_pass_output.apply(hdr, meta);
#endif
        } else {
            bit<1> arrived = 0;
            if (CARRY.pass == PASS_FIRST) {
                arrived = 1;
            }
            meta.outcome = NO_OUTCOME;
            meta.event = NO_EVENT;
            identity.apply(meta);
            cpu_port.apply(meta);
            validate.apply(hdr, meta);
            job_checks.apply(hdr, meta);
            admission.apply(hdr, meta);
            if (meta.outcome == NO_OUTCOME) {
                in_queue.apply(hdr.ina.priority, meta.esa, meta.in_queue);
                slots.apply(hdr, meta);
                old_queue.apply(meta.old_prio, meta.esa, meta.old_queue);
                choose.apply(hdr, meta);
                words.apply(hdr, meta);
                decide.apply(hdr, meta);
                if (meta.output != OUT_RECIRC) {
                    CARRY.pass = PASS_FIRST;
                }
                outputs.apply(hdr, meta);
#ifdef INA_WORD_PASSES
                if (meta.slot_action != SLOT_NONE && meta.output != OUT_RECIRC) {
                    hand_to_word_passes.apply(hdr, meta);
                }
#endif
            } else {
                meta.drop = 1;
            }
            count.apply(meta, arrived);
        }
    }
}

#endif
