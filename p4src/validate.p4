/* What the malformed and unexpected checks of docs/protocol.md (sections 2 and 5) look up (the
 * checks themselves are Admission's, jobs.p4, in one chain with the job table's). The payload length
 * each kind must have is a constant table, since it depends on WORDS, index_bits and lane_bits;
 * a combination without an entry (unknown kind, lane_bits not 8/16/32, index_bits > 8) is malformed. */
#ifndef INA_VALIDATE_P4
#define INA_VALIDATE_P4

#define UDP_LEN(words) (UDP_HEADER_LEN + INA_HEADER_LEN + 4 * (words))
/* RESULT words of an indices chunk: WORDS * floor(32/b) coordinates in floor(32/w) lanes a word. */
#define SUMS(per_index_word, per_lane_word) ((WORDS * (per_index_word) + (per_lane_word) - 1) / (per_lane_word))
#define LANES3(kind, b, n8, n16, n32) \
    (kind, b, 8): expect_length(UDP_LEN(n8)); \
    (kind, b, 16): expect_length(UDP_LEN(n16)); \
    (kind, b, 32): expect_length(UDP_LEN(n32));
#define FIXED_LENGTH(kind, n) \
    LANES3(kind, 0, n, n, n) LANES3(kind, 1, n, n, n) LANES3(kind, 2, n, n, n) \
    LANES3(kind, 3, n, n, n) LANES3(kind, 4, n, n, n) LANES3(kind, 5, n, n, n) \
    LANES3(kind, 6, n, n, n) LANES3(kind, 7, n, n, n) LANES3(kind, 8, n, n, n)
#define SUMS_LENGTH(kind) \
    LANES3(kind, 0, WORDS, WORDS, WORDS) \
    LANES3(kind, 1, SUMS(32, 4), SUMS(32, 2), SUMS(32, 1)) \
    LANES3(kind, 2, SUMS(16, 4), SUMS(16, 2), SUMS(16, 1)) \
    LANES3(kind, 3, SUMS(10, 4), SUMS(10, 2), SUMS(10, 1)) \
    LANES3(kind, 4, SUMS(8, 4), SUMS(8, 2), SUMS(8, 1)) \
    LANES3(kind, 5, SUMS(6, 4), SUMS(6, 2), SUMS(6, 1)) \
    LANES3(kind, 6, SUMS(5, 4), SUMS(5, 2), SUMS(5, 1)) \
    LANES3(kind, 7, SUMS(4, 4), SUMS(4, 2), SUMS(4, 1)) \
    LANES3(kind, 8, SUMS(4, 4), SUMS(4, 2), SUMS(4, 1))

control Validate(inout headers_t hdr, inout ina_meta_t meta) {
    /* (each action also takes the IPv4 header's length out of the IPv4 total length, for the check
     * that the two lengths agree: a table's action, so that a later stage compares a field) */
    action expect_length(bit<16> udp_length) {
        meta.expected_udp_len = udp_length;
        meta.ip_udp_gap = hdr.ipv4.total_len - hdr.udp.length;
    }

    action unknown_format() {
        meta.expected_udp_len = 0;
        meta.ip_udp_gap = hdr.ipv4.total_len - hdr.udp.length;
    }

    @name(".ina_lengths")
    table lengths {
        key = {
            hdr.ina.kind: exact;
            hdr.ina.index_bits: exact;
            hdr.ina.lane_bits: exact;
        }
        actions = { expect_length; unknown_format; }
        const default_action = unknown_format();
        INA_CONST_TABLE_SIZE(256)
        const entries = {
            FIXED_LENGTH(KIND_DATA, WORDS)
            SUMS_LENGTH(KIND_RESULT)
            SUMS_LENGTH(KIND_PARTIAL)
            FIXED_LENGTH(KIND_FLUSH, 0)
            FIXED_LENGTH(KIND_STATUS, 0)
            FIXED_LENGTH(KIND_FETCH, 0)
            FIXED_LENGTH(KIND_SWEEP, 0)
        }
    }

    action rank_bit() {
        meta.rank_ok = 1;
    }

    /* A DATA's bitmap must be 1 << rank (rank < 32): a constant table, since a shift by a field is
     * not a Tofino ALU operation. */
    @name(".ina_ranks")
    table ranks {
        key = {
            hdr.ina.rank: exact;
            hdr.ina.bitmap: exact;
        }
        actions = { rank_bit; NoAction; }
        const default_action = NoAction();
        INA_CONST_TABLE_SIZE(32)
        const entries = {
#define RANK_ENTRY(r) (r, 32w1 << r): rank_bit();
            RANK_ENTRY(0) RANK_ENTRY(1) RANK_ENTRY(2) RANK_ENTRY(3) RANK_ENTRY(4) RANK_ENTRY(5) RANK_ENTRY(6)
            RANK_ENTRY(7) RANK_ENTRY(8) RANK_ENTRY(9) RANK_ENTRY(10) RANK_ENTRY(11) RANK_ENTRY(12) RANK_ENTRY(13)
            RANK_ENTRY(14) RANK_ENTRY(15) RANK_ENTRY(16) RANK_ENTRY(17) RANK_ENTRY(18) RANK_ENTRY(19) RANK_ENTRY(20)
            RANK_ENTRY(21) RANK_ENTRY(22) RANK_ENTRY(23) RANK_ENTRY(24) RANK_ENTRY(25) RANK_ENTRY(26) RANK_ENTRY(27)
            RANK_ENTRY(28) RANK_ENTRY(29) RANK_ENTRY(30) RANK_ENTRY(31)
#undef RANK_ENTRY
        }
    }

    apply {
        meta.rank_ok = 0;
        lengths.apply();
        ranks.apply();
    }
}

#endif
