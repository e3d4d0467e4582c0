/* A racked job's leaf and spine (docs/protocol.md, section 10), on v1model only: ina_v1model.p4
 * defines INA_RACKS and includes this file; the shared controls take the hooks under INA_RACKS (the
 * checks in Admission, jobs.p4; the sum up and the SPINE flag in Outputs, outputs.p4; the slot's
 * raised priority in slots.p4; sent_up in Count, counters.p4). A leaf passes its spine's RESULT down
 * the way atp passes on the PS's return of a held result (INA_HOLD, which INA_RACKS needs: Admission,
 * slots.p4, Decide and Outputs), which under atp frees the slot holding the leaf's sum. The TNA
 * program is left as it is, and refuses racked roles in its controller (docs/p4.md, "Racks").
 *
 * A job without an entry here is the switch's only job role. A leaf sends a completed chunk up as
 * one DATA and passes its spine's RESULT down to its rack (the job's multicast group, which at a
 * leaf holds the workers alone); a spine takes only DATA flagged SPINE and flags what it sends. */
#ifndef INA_RACKS_P4
#define INA_RACKS_P4

/* The job's role at this switch, and what checking and sending by it needs. Looked up with the job
 * table, before Admission. */
control Levels(inout headers_t hdr, inout ina_meta_t meta) {
    @name(".ina_leaf")
    action leaf(bit<8> rack, bit<32> racks_full, bit<32> spine_ip, bit<16> spine_port) {
        meta.role = ROLE_LEAF;
        meta.rack = rack;
        meta.racks_full = racks_full;
        meta.spine_ip = spine_ip;
        meta.spine_port = spine_port;
    }

    @name(".ina_spine")
    action spine() {
        meta.role = ROLE_SPINE;
        meta.level_flags = FLAG_SPINE;
    }

    @name(".ina_levels")
    table levels {
        key = { hdr.ina.job: exact @name("job"); }
        actions = { leaf; spine; NoAction; }
        const default_action = NoAction();
        size = 2048;
    }

    apply {
        meta.role = ROLE_ONLY;
        meta.level_flags = 0;
        meta.descend = 0;
        meta.from_up = 0;
        meta.misleveled = 0;
        levels.apply();
        bit<1> spine_flag = hdr.ina.flags[3:3];
        if (hdr.ina.kind == KIND_RESULT && meta.role == ROLE_LEAF) {
            /* the spine's RESULT, to pass down: from the spine, flagged, every rack's */
            meta.descend = 1;
            if (hdr.ipv4.src == meta.spine_ip && hdr.udp.src_port == meta.spine_port) {
                meta.from_up = 1;
            }
            if (spine_flag == 0 || hdr.ina.bitmap != meta.racks_full) {
                meta.misleveled = 1;
            }
        } else if (hdr.ina.kind == KIND_DATA) {
            /* a spine's DATA is a leaf's sum (flagged, never resent), anyone else's a worker's */
            if (meta.role == ROLE_SPINE) {
                meta.misleveled = ~spine_flag | hdr.ina.flags[0:0];
            } else {
                meta.misleveled = spine_flag;
            }
        }
    }
}

/* A claim pass evicts a partial that may be another job's: whether that job's PARTIAL carries SPINE
 * (this switch is its spine). Looked up on the claim pass, as the victim table is (outputs.p4). */
control VictimLevel(inout ina_meta_t meta) {
    @name(".ina_victim_spine")
    action victim_spine() {
        meta.victim_flags = FLAG_SPINE;
    }

    @name(".ina_victim_levels")
    table victim_levels {
        key = { CARRY.expect_id[15:0]: exact @name("job"); }
        actions = { victim_spine; NoAction; }
        const default_action = NoAction();
        size = 2048;
    }

    apply {
        meta.victim_flags = 0;
        if (CARRY.pass == PASS_CLAIM) {
            victim_levels.apply();
        }
    }
}

#endif
