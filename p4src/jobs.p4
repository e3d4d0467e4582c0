/* The job table and the checks that follow it (docs/protocol.md, section 5): unregistered,
 * bad_slot (a job's slots are (slot_base + seq mod span) mod P; span is the pool but under the
 * static policy), bad_format. The control plane (ina/p4/controller.py) fills both tables. */
#ifndef INA_JOBS_P4
#define INA_JOBS_P4

control JobChecks(inout headers_t hdr, inout ina_meta_t meta) {
    bool job_known = false;

    /* The job's settings; the slot check's two sides, slot - slot_base and seq mod span, are computed
     * here with the table's own data so that the registers can start one stage later. */
    @name(".ina_job")
    action job(bit<32> full, bit<8> fanin, bit<16> slot_base, bit<16> span_mask, bit<8> priority_cap,
               bit<8> lane_bits, bit<32> ps_ip, bit<16> ps_port, bit<16> group) {
        job_known = true;
        meta.full = full;
        meta.fanin = fanin;
        meta.slot_offset = hdr.ina.slot[SLOT_BITS-1:0] - slot_base[SLOT_BITS-1:0];
        meta.seq_offset = hdr.ina.seq[15:0] & span_mask;
        meta.prio = (bit<32>)(hdr.ina.priority < priority_cap ? hdr.ina.priority : priority_cap);
        meta.lane_bits = lane_bits;
        meta.ps_ip = ps_ip;
        meta.ps_port = ps_port;
        CARRY.group = group;
        meta.rest = full & ~hdr.ina.bitmap;
    }

    @name(".ina_jobs")
    table jobs {
        key = { hdr.ina.job: exact @name("job"); }
        actions = { job; NoAction; }
        const default_action = NoAction();
        size = 1024;
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

    apply {
        meta.worker_known = 0;
        meta.op_max = hdr.ina.flags[1:1];
        meta.first = (hdr.ina.flags & FLAG_RESEND) == 0 ? 1w1 : 1w0;
        meta.key_id = 14w0 ++ 1w1 ++ hdr.ina.flags[1:1] ++ hdr.ina.job;
        meta.slot = (bit<32>)hdr.ina.slot[SLOT_BITS-1:0];
        jobs.apply();
        workers.apply();
        bool known = job_known;
        if (known && hdr.ina.kind == KIND_DATA) {
            known = meta.worker_known == 1;
        } else if (known && hdr.ina.kind == KIND_FLUSH) {
            known = hdr.ipv4.src == meta.ps_ip && hdr.udp.src_port == meta.ps_port;
        }
        if (!known) {
            meta.outcome = OUTCOME_UNREGISTERED;
        } else if (hdr.ina.kind != KIND_SWEEP
                   && (meta.slot_offset != meta.seq_offset[SLOT_BITS-1:0] || (hdr.ina.slot & ~POOL_MASK) != 0)) {
            meta.outcome = OUTCOME_BAD_SLOT;
        } else if (hdr.ina.kind == KIND_DATA
                   && (hdr.ina.index_bits != 0
                       || hdr.ina.lane_bits != (meta.op_max == 1 ? 8w32 : meta.lane_bits))) {
            meta.outcome = OUTCOME_BAD_FORMAT;
        }
    }
}

#endif
