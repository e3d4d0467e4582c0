/* The malformed and unexpected checks of docs/protocol.md (sections 2 and 5). The payload length
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

control Validate(inout headers_t hdr, inout ina_meta_t meta, in standard_metadata_t std) {
    action expect_length(bit<16> udp_length) {
        meta.expected_udp_len = udp_length;
    }

    action unknown_format() {
        meta.expected_udp_len = 0;
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

    apply {
        bool malformed = std.parser_error != error.NoError || !hdr.ina.isValid();
        if (!malformed) {
            malformed = hdr.ina.magic != INA_MAGIC || hdr.ina.version != INA_VERSION
                || (hdr.ina.flags & ~KNOWN_FLAGS) != 0
                || hdr.ipv4.total_len != IPV4_HEADER_LEN + hdr.udp.length
                || std.packet_length < 14 + (bit<32>)hdr.ipv4.total_len;
        }
        if (!malformed) {
            lengths.apply();
            malformed = hdr.udp.length != meta.expected_udp_len;
        }
        if (!malformed && hdr.ina.kind == KIND_DATA) {
            malformed = hdr.ina.rank >= 32 || hdr.ina.bitmap != (32w1 << hdr.ina.rank);
        }
        if (malformed) {
            meta.outcome = OUTCOME_MALFORMED;
        } else if (hdr.ina.kind != KIND_DATA && hdr.ina.kind != KIND_FLUSH
                   && !(hdr.ina.kind == KIND_SWEEP && meta.from_cpu == 1)) {
            meta.outcome = OUTCOME_UNEXPECTED;
        }
    }
}

#endif
