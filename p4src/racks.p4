/* A racked job's leaf and spine (docs/protocol.md, section 10), in both programs. The level table
 * (Levels) says in the first stage what a packet of the job is at this switch, and the shared controls
 * act on it: the checks in Admission (jobs.p4); the sum up, the SPINE flag and the descent in Decide and
 * Outputs (outputs.p4); the slot's raised priority (slots.p4); sent_up in Count (counters.p4). A leaf
 * passes its spine's RESULT down the way atp passes on the PS's return of a held result, which under
 * atp frees the slot holding the leaf's sum.
 *
 * A job without an entry here is the switch's only job role. A leaf sends a completed chunk up as
 * one DATA and passes its spine's RESULT down to its rack (the job's multicast group, which at a
 * leaf holds the workers alone); a spine takes only DATA flagged SPINE and flags what it sends. */
#ifndef INA_RACKS_P4
#define INA_RACKS_P4

/* The job's role at this switch, the level checks of docs/protocol.md (section 10) and atp's release
 * (section 5): one ternary table beside the job table in the first stage, so that Admission's chain
 * tests a bit for each (a Tofino stage tests one chain of gateways). Keyed on the job, the kind, the
 * flags and the bitmap, its entries (ina/p4/entries.py `levels`) say what a packet of the job is at
 * this level: a leaf's, with where its sums go up, and whether it is its spine's RESULT to pass down;
 * a spine's; a RESULT the PS returns under atp; and whether it is of the wrong level (bad_format). A
 * packet no entry matches is of a job whose only switch this is. */
control Levels(inout headers_t hdr, inout ina_meta_t meta) {
    @name(".ina_leaf")
    action leaf(bit<8> rack, bit<32> rack_bit, bit<32> spine_ip, bit<16> spine_port, bit<9> spine_egress,
                bit<48> spine_mac, bit<1> descend, bit<1> misleveled) {
        meta.spine_egress = spine_egress;
        meta.spine_mac = spine_mac;
        meta.role = ROLE_LEAF;
        meta.level_flags = 0;
        meta.rack = rack;
        meta.rack_bit = rack_bit;
        meta.spine_ip = spine_ip;
        meta.spine_port = spine_port;
        meta.descend = descend;
        meta.passing_on = descend;
        meta.misleveled = misleveled;
    }

    @name(".ina_spine")
    action spine(bit<1> release, bit<1> misleveled) {
        meta.role = ROLE_SPINE;
        meta.level_flags = FLAG_SPINE;
        meta.descend = 0;
        meta.passing_on = release;
        meta.misleveled = misleveled;
    }

    @name(".ina_only")
    action only(bit<1> release, bit<1> misleveled) {
        meta.role = ROLE_ONLY;
        meta.level_flags = 0;
        meta.descend = 0;
        meta.passing_on = release;
        meta.misleveled = misleveled;
    }

    @name(".ina_levels")
    table levels {
        key = {
            hdr.ina.job: ternary @name("job");
            hdr.ina.kind: ternary @name("kind");
            hdr.ina.flags: ternary @name("flags");
            hdr.ina.bitmap: ternary @name("bitmap");
        }
        actions = { leaf; spine; only; }
        const default_action = only(0, 0);
        size = LEVEL_ENTRIES;
    }

    apply {
        levels.apply();
        /* p4testgen's cases take the entries of a job whose only switch this is, without atp, which the controller
         * writes (entries.py `switch_levels`): the racked roles and atp are the BMv2 tests' on these same controls
         * (tests/test_p4_racks.py, test_p4_atp.py) */
        INA_ASSUME(meta.role == ROLE_ONLY && meta.passing_on == 0 && meta.held_missing == 0);
        INA_ASSUME((meta.misleveled == 1) == (hdr.ina.kind == KIND_DATA && hdr.ina.flags[3:3] == 1));
    }
}

#endif
