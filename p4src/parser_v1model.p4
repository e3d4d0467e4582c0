/* The v1model parser, deparser and checksum controls: Ethernet, IPv4, UDP to INA_PORT, the ina
 * header, and for DATA its WORDS payload words (parser_tna.p4 parses the same). A packet too short
 * for what it claims is a parser error, which Validate counts as malformed. */
#ifndef INA_PARSER_V1MODEL_P4
#define INA_PARSER_V1MODEL_P4

parser InaParser(packet_in packet, out headers_t hdr, inout ina_meta_t meta, inout standard_metadata_t std) {
    state start {
#ifdef INA_WORD_PASSES
        /* a word pass's frame is one the deciding pass wrote, to any UDP port (the preserved metadata says so) */
        transition select(meta.pass) {
            PASS_WORDS: word_pass;
            default: parse_ethernet;
        }
    }

    state parse_ethernet {
#endif
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_INA_PEEK: parse_peek;
            default: accept;
        }
    }

    state parse_peek {
        packet.extract(hdr.peek);
        transition accept;
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (4w4, 4w5, 13w0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            INA_PORT: parse_ina;
            default: accept;
        }
    }

    state parse_ina {
        meta.is_ina = 1;
        packet.extract(hdr.ina);
        transition select(hdr.ina.kind) {
            KIND_DATA: parse_words;
            default: accept;
        }
    }

    /* the first group's words (all K without word passes), the others after them */
    state parse_words {
#define STACK_WORD(w) packet.extract(w);
#include "frame_words.p4"
#undef STACK_WORD
        transition accept;
    }

#ifdef INA_WORD_PASSES
    /* A word pass's frame (docs/p4.md, "Word passes"), as parser_tna.p4 parses it: the groups
     * before its own through, its own to `words`, the rest payload; none of its own on a FLUSH's. */
    state word_pass {
        meta.is_ina = 1;
        packet.extract(hdr.ethernet);
        packet.extract(hdr.ipv4);
        packet.extract(hdr.udp);
        packet.extract(hdr.ina);
        packet.extract(hdr.before1);
        transition select(meta.word_group, meta.groups_absent) {
            (1, 1): accept;
#if WORD_GROUPS == 3
            (2, _): word_group_2;
#endif
            default: word_group_words;
        }
    }

#if WORD_GROUPS == 3
    state word_group_2 {
        packet.extract(hdr.before2);
        transition select(meta.groups_absent) {
            0: word_group_words;
            default: accept;
        }
    }
#endif

    state word_group_words {
        packet.extract(hdr.words);
        transition accept;
    }
#endif
}

control InaVerifyChecksum(inout headers_t hdr, inout ina_meta_t meta) {
    apply { }
}

/* UDP checksums are zeroed on every packet the switch writes (allowed over IPv4), so only the
 * IPv4 header checksum is recomputed. */
control InaComputeChecksum(inout headers_t hdr, inout ina_meta_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src, hdr.ipv4.dst },
            hdr.ipv4.checksum,
            HashAlgorithm.csum16);
    }
}

control InaDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.peek);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.ina);
#ifdef INA_WORD_PASSES
        packet.emit(hdr.before1);
#if WORD_GROUPS == 3
        packet.emit(hdr.before2);
#endif
#endif
        packet.emit(hdr.words);
#ifdef INA_WORD_PASSES
        packet.emit(hdr.after1);
#if WORD_GROUPS == 3
        packet.emit(hdr.after2);
#endif
#endif
    }
}

#endif
