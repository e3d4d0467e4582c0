/* The job table and the checks that follow it (docs/protocol.md, section 5): unregistered,
 * bad_slot (a job's slots are (slot_base + seq mod span) mod P; span is the pool but under the
 * static policy), bad_format. The control plane (ina/p4/controller.py) fills both tables. */
#ifndef INA_JOBS_P4
#define INA_JOBS_P4

control JobChecks(inout headers_t hdr, inout ina_meta_t meta, in standard_metadata_t std) {
    bool job_known = false;

    @name(".ina_job")
    action job(bit<32> full, bit<8> fanin, bit<16> slot_base, bit<16> span_mask, bit<8> priority_cap,
               bit<8> lane_bits, bit<32> ps_ip, bit<16> ps_port, bit<16> group) {
        job_known = true;
        meta.full = full;
        meta.fanin = fanin;
        meta.slot_base = slot_base;
        meta.span_mask = span_mask;
        meta.priority_cap = priority_cap;
        meta.lane_bits = lane_bits;
        meta.ps_ip = ps_ip;
        meta.ps_port = ps_port;
        meta.group = group;
    }

    @name(".ina_jobs")
    table jobs {
        key = { hdr.ina.job: exact @name("job"); }
        actions = { job; NoAction; }
        const default_action = NoAction();
        size = 1024;
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
        actions = { NoAction; }
        const default_action = NoAction();
        size = 32768;
    }

    apply {
        jobs.apply();
        bool known = job_known;
        if (known && hdr.ina.kind == KIND_DATA) {
            known = workers.apply().hit;
        } else if (known && hdr.ina.kind == KIND_FLUSH) {
            known = hdr.ipv4.src == meta.ps_ip && hdr.udp.src_port == meta.ps_port;
        }
        meta.op_max = (hdr.ina.flags & FLAG_MAX) == 0 ? 1w0 : 1w1;
        if (!known) {
            meta.outcome = OUTCOME_UNREGISTERED;
        } else if (hdr.ina.kind != KIND_SWEEP
                   && hdr.ina.slot != ((meta.slot_base + (hdr.ina.seq[15:0] & meta.span_mask)) & POOL_MASK)) {
            meta.outcome = OUTCOME_BAD_SLOT;
        } else if (hdr.ina.kind == KIND_DATA
                   && (hdr.ina.index_bits != 0
                       || hdr.ina.lane_bits != (meta.op_max == 1 ? 8w32 : meta.lane_bits))) {
            meta.outcome = OUTCOME_BAD_FORMAT;
        }
        meta.slot = (bit<32>)(hdr.ina.slot & POOL_MASK);
        meta.key_id = KEY_VALID | (meta.op_max == 1 ? KEY_MAX : 32w0) | (bit<32>)hdr.ina.job;
        meta.rank_bit = 32w1 << hdr.ina.rank;
        meta.prio = hdr.ina.priority < meta.priority_cap ? hdr.ina.priority : meta.priority_cap;
    }
}

#endif
