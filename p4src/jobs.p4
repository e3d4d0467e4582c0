/* The job table and the checks that follow it (docs/protocol.md, section 5): unregistered,
 * bad_slot (a job's slots are (slot_base + seq mod span) mod P; span is the pool but under the
 * static policy), bad_format. The control plane (ina/p4/controller.py) fills both tables. */
#ifndef INA_JOBS_P4
#define INA_JOBS_P4

control JobChecks(inout headers_t hdr, inout ina_meta_t meta) {
    /* The job's settings; the slot check's two sides, slot - slot_base and seq mod span, are computed
     * here with the table's own data so that the registers can start one stage later (Tofino's ALU
     * adds action data but does not subtract it: the entry holds -slot_base mod P; it subtracts a
     * field from action data, so the priority cap is cap |-| priority, 0 at or over the cap). A job has an entry
     * for each operation (SUM, MAX), whose key ids (valid bit, operation bit, job) the registers hold. */
    @name(".ina_job")
    action job(bit<32> key_id, bit<32> key_id_other_op, bit<32> full, bit<8> fanin, bit<16> neg_slot_base,
               bit<16> span_mask, bit<8> priority_cap, bit<8> lane_bits, bit<32> ps_ip, bit<16> ps_port, bit<16> group) {
        meta.job_known = 1;
        meta.key_id = key_id;
        meta.key_id_other_op = key_id_other_op;
        meta.full = full;
        meta.fanin = fanin;
#ifdef INA_TESTGEN
        meta.span_mask = span_mask;
        meta.neg_slot_base = neg_slot_base;
#endif
        meta.slot_offset = hdr.ina.slot[SLOT_BITS-1:0] + neg_slot_base[SLOT_BITS-1:0];
        meta.seq_offset = hdr.ina.seq[15:0] & span_mask;
        meta.prio = hdr.ina.priority;
        meta.priority_cap = priority_cap;
        meta.prio_gap = priority_cap |-| hdr.ina.priority;
        meta.lane_bits = lane_bits;
        meta.dst_ip = ps_ip;
        meta.dst_port = ps_port;
        CARRY.group = group;
        meta.rest = full & ~hdr.ina.bitmap;
    }

    @name(".ina_jobs")
    table jobs {
        key = {
            hdr.ina.job: exact @name("job");
            hdr.ina.flags[1:1]: exact @name("op");
        }
        actions = { job; NoAction; }
        const default_action = NoAction();
        size = 2048;
    }

    @name(".ina_worker")
    action worker() {
        meta.worker_known = 1;
    }

    /* One entry per (job, rank): the address that rank registered. */
    @name(".ina_workers")
    table workers {
        key = {
            hdr.ina.job: exact @name("job");
            hdr.ina.rank: exact @name("rank");
            hdr.ipv4.src: exact @name("src");
            hdr.udp.src_port: exact @name("src_port");
        }
        actions = { worker; NoAction; }
        const default_action = NoAction();
        size = 32768;
    }

    /* One entry per (job, address) that a FLUSH or a RESULT may come from: the job's PS, and at a leaf its
     * spine; `up` where the job's RESULTs come from (the spine at a leaf, else the PS). A table rather than
     * a comparison with the job's addresses, so that Admission tests a bit (the sources' 48 bits are more
     * than a gateway compares). */
    @name(".ina_source")
    action source(bit<1> ps, bit<1> up) {
        meta.from_ps = ps;
        meta.from_up = up;
    }

    @name(".ina_sources")
    table sources {
        key = {
            hdr.ina.job: exact @name("job");
            hdr.ipv4.src: exact @name("src");
            hdr.udp.src_port: exact @name("src_port");
        }
        actions = { source; }
        const default_action = source(0, 0);
        size = 4096;
    }

    apply {
        meta.worker_known = 0;
        meta.job_known = 0;
        meta.op_max = hdr.ina.flags[1:1];
        meta.first = ~hdr.ina.flags[0:0];  /* FLAG_RESEND */
        meta.slot = (bit<16>)hdr.ina.slot[SLOT_BITS-1:0];
        meta.data_first = 0;
        meta.flushing = 0;
        meta.sweep = 0;
        meta.claim_pass = 0;
        if (hdr.ina.kind == KIND_DATA && CARRY.pass == PASS_FIRST) {
            meta.data_first = 1;
        }
        /* a RESULT that Admission lets in is passed on (racks.p4): its slot stages are a SWEEP's (slots.p4) */
        if (hdr.ina.kind == KIND_FLUSH || hdr.ina.kind == KIND_SWEEP || CARRY.pass == PASS_FLUSH
            || hdr.ina.kind == KIND_RESULT) {
            meta.flushing = 1;
        }
        if (hdr.ina.kind == KIND_SWEEP || hdr.ina.kind == KIND_RESULT) {
            meta.sweep = 1;
        }
        if (CARRY.pass == PASS_CLAIM) {
            meta.claim_pass = 1;
        }
        jobs.apply();
        workers.apply();
        sources.apply();
        if (meta.job_known == 1) {
            /* what every entry the control plane writes satisfies (p4testgen's cases only) */
            INA_ASSUME(meta.key_id == (32w0x20000 | ((bit<32>)hdr.ina.flags[1:1] << 16) | (bit<32>)hdr.ina.job));
            INA_ASSUME(meta.key_id_other_op == (meta.key_id ^ 32w0x10000));
            INA_ASSUME(meta.fanin >= 1 && meta.fanin <= 32);
            INA_ASSUME(meta.full == (32w0xFFFFFFFF >> (32w32 - (bit<32>)meta.fanin)));
            INA_ASSUME(meta.lane_bits == 8 || meta.lane_bits == 16 || meta.lane_bits == 32);
            INA_ASSUME(meta.dst_ip != 0 && meta.dst_port != 0);
            /* the sources the controller writes (entries.py `sources`): the job's PS, its RESULTs' source too */
            INA_ASSUME((meta.from_ps == 1) == (hdr.ipv4.src == meta.dst_ip && hdr.udp.src_port == meta.dst_port));
            INA_ASSUME(meta.from_up == meta.from_ps);
            INA_ASSUME(meta.span_mask < POOL && (meta.span_mask & (meta.span_mask + 1)) == 0);
            INA_ASSUME(meta.neg_slot_base < POOL && (meta.neg_slot_base & meta.span_mask) == 0);
        }
    }
}


/* The checks in order, Validate's and then the job table's, each a plain condition: one chain, so
 * that a Tofino stage tests them all after the tables of both (the level table's, racks.p4, among
 * them). */
control Admission(inout headers_t hdr, inout ina_meta_t meta) {
    apply {
        if (meta.parser_error == 1 || !hdr.ina.isValid() || meta.truncated == 1) {
            meta.outcome = OUTCOME_MALFORMED;
        } else if (hdr.ina.magic != INA_MAGIC || hdr.ina.version != INA_VERSION || (hdr.ina.flags & ~KNOWN_FLAGS) != 0) {
            meta.outcome = OUTCOME_MALFORMED;
        } else if (meta.ip_udp_gap != IPV4_HEADER_LEN) {
            meta.outcome = OUTCOME_MALFORMED;
        } else if (hdr.udp.length != meta.expected_udp_len) {
            meta.outcome = OUTCOME_MALFORMED;
        } else if (hdr.ina.kind == KIND_DATA && meta.rank_ok == 0) {
            meta.outcome = OUTCOME_MALFORMED;
        } else if (hdr.ina.kind != KIND_DATA && hdr.ina.kind != KIND_FLUSH
                   && meta.passing_on == 0  /* a RESULT to pass on: a leaf's descent or atp's release (racks.p4) */
                   && !(hdr.ina.kind == KIND_SWEEP && meta.from_cpu == 1)) {
            meta.outcome = OUTCOME_UNEXPECTED;
        } else if (meta.job_known == 0) {
            meta.outcome = OUTCOME_UNREGISTERED;
        } else if (hdr.ina.kind == KIND_DATA && meta.worker_known == 0) {
            meta.outcome = OUTCOME_UNREGISTERED;
        } else if ((hdr.ina.kind == KIND_FLUSH && meta.from_ps == 0) || (meta.passing_on == 1 && meta.from_up == 0)) {
            meta.outcome = OUTCOME_UNREGISTERED;
        } else if (hdr.ina.kind != KIND_SWEEP && meta.slot_offset != meta.seq_offset[SLOT_BITS-1:0]) {
            meta.outcome = OUTCOME_BAD_SLOT;
        } else if (hdr.ina.kind != KIND_SWEEP && (hdr.ina.slot & ~POOL_MASK) != 0) {
            meta.outcome = OUTCOME_BAD_SLOT;
        } else if (hdr.ina.kind == KIND_DATA && hdr.ina.index_bits != 0) {
            meta.outcome = OUTCOME_BAD_FORMAT;
        } else if (hdr.ina.kind == KIND_DATA && meta.op_max == 1 && hdr.ina.lane_bits != 32) {
            meta.outcome = OUTCOME_BAD_FORMAT;
        } else if (hdr.ina.kind == KIND_DATA && meta.op_max == 0 && hdr.ina.lane_bits != meta.lane_bits) {
            meta.outcome = OUTCOME_BAD_FORMAT;
        } else if (meta.misleveled == 1) {
            meta.outcome = OUTCOME_BAD_FORMAT;
        }
    }
}

#endif
