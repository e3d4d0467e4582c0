/* The TNA parsers and deparsers: the frames of parser_v1model.p4, behind the bridge header
 * (headers.p4) that tells a later pass and the egress what the ingress decided. A frame from a
 * front port gets a fresh bridge; one from the recirculation port brings its own. */
#ifndef INA_PARSER_TNA_P4
#define INA_PARSER_TNA_P4

/* Ethernet, IPv4, UDP to INA_PORT, up to the ina header: the states every path shares, named
 * P_ethernet, P_ipv4, P_udp, going on to state INA (which decides which words to extract). */
#define INA_FRAME_STATES(P, INA) \
    state P##_ethernet { \
        packet.extract(hdr.ethernet); \
        transition select(hdr.ethernet.ether_type) { \
            ETHERTYPE_IPV4: P##_ipv4; \
            default: accept; \
        } \
    } \
    INA_FRAME_IPV4(P, INA)
#define INA_FRAME_IPV4(P, INA) \
    state P##_ipv4 { \
        packet.extract(hdr.ipv4); \
        transition select(hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) { \
            (4w4, 4w5, 13w0, IP_PROTO_UDP): P##_udp; \
            default: accept; \
        } \
    } \
    state P##_udp { \
        packet.extract(hdr.udp); \
        transition select(hdr.udp.dst_port) { \
            INA_PORT: INA; \
            default: accept; \
        } \
    }

/* the ingress parser's words: each one extracted (stack_words.p4) */
#define STACK_WORD(w) packet.extract(w);
parser InaIngressParser(packet_in packet, out headers_t hdr, out ina_meta_t meta,
                        out ingress_intrinsic_metadata_t ig_intr_md) {
#ifndef INA_TESTGEN
    /* a first pass's ina packets are those to the switch's own address (docs/p4.md, "Own address"): the
     * address matched ahead of the IPv4 header, in a state of its own (the parser's match registers) */
    @name(".ina_own_address")
    value_set<bit<32>>(1) own_address;
#endif

    state start {
        packet.extract(ig_intr_md);
        packet.advance(PORT_METADATA_SIZE);
        meta.in_port = ig_intr_md.ingress_port;  /* here, so that stage 0 can match on it */
        transition select(ig_intr_md.ingress_port) {
            RECIRC_PORT: recirculated;
            default: fresh;
        }
    }

    state recirculated {
        packet.extract(hdr.bridge);
#ifdef INA_WORD_PASSES
        transition select(hdr.bridge.pass) {
            PASS_WORDS: word_pass;
            default: again_ethernet;
        }
#else
        transition again_ethernet;
#endif
    }

    state fresh {
        hdr.bridge.setValid();
        hdr.bridge.pass = PASS_FIRST;
        hdr.bridge.claim_kind = CLAIM_FREE;
        hdr.bridge.expect_id = 0;
        hdr.bridge.expect_seq = 0;
        hdr.bridge.group = 0;
        hdr.bridge.out_kind = OUT_DROP;
        hdr.bridge.from_pad = 0;
        hdr.bridge.from_port = ig_intr_md.ingress_port;
#ifdef INA_WORD_PASSES
        hdr.bridge.word_group = 0;
        hdr.bridge.word_step = SLOT_NONE;
        hdr.bridge.word_index = 0;
        hdr.bridge.groups_absent = 0;
        hdr.bridge.final_kind = OUT_DROP;
        hdr.bridge.final_drop = 0;
        hdr.bridge.final_port = 0;
        hdr.bridge.final_queue = 0;
#endif
        transition fresh_ethernet;
    }

#ifdef INA_TESTGEN
    /* p4testgen's cases: every ina packet the switch's own, as the replay's software switch takes them */
    INA_FRAME_STATES(fresh, ig_ina)
#else
    state fresh_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: fresh_address;
            default: accept;
        }
    }

    state fresh_address {
        transition select(packet.lookahead<ipv4_h>().dst) {
            own_address: own_ipv4;
            default: other_ipv4;
        }
    }

    state other_ipv4 {
        packet.extract(hdr.ipv4);
        transition accept;
    }

    INA_FRAME_IPV4(own, ig_ina)
#endif
    INA_FRAME_STATES(again, ig_ina)

    /* a DATA's K words (a later pass is always a DATA's) */
    state ig_ina {
        meta.is_ina = 1;
        packet.extract(hdr.ina);
        transition select(hdr.ina.kind) {
            KIND_DATA: parse_words;
            default: accept;
        }
    }

    /* the first group's words (all K without word passes), the others after them */
    state parse_words {
#include "frame_words.p4"
        transition accept;
    }

#ifdef INA_WORD_PASSES
    /* A word pass's frame is one the deciding pass wrote (a DATA, PARTIAL or RESULT of K words, to
     * any UDP port): the groups before its own go through in `before1` and `before2`, its own to
     * `words`, the groups after it stay payload. A FLUSH's or SWEEP's frame ends before its group
     * (groups_absent), whose words WordPassStep makes valid. */
    state word_pass {
        meta.is_ina = 1;
        packet.extract(hdr.ethernet);
        packet.extract(hdr.ipv4);
        packet.extract(hdr.udp);
        packet.extract(hdr.ina);
#define WORD_STACK before1
#define EACH_WORD_COUNT INA_WORD_GROUP
#include "stack_words.p4"
        transition select(hdr.bridge.word_group, hdr.bridge.groups_absent) {
            (1, 0): word_group_1;
            (1, 1): accept;
#if WORD_GROUPS == 3
            (2, _): word_group_2;
#endif
            default: reject;
        }
    }

    state word_group_1 {
#define WORD_STACK words
#define EACH_WORD_COUNT AFTER1_WORDS
#include "stack_words.p4"
        transition accept;
    }

#if WORD_GROUPS == 3
    state word_group_2 {
#define WORD_STACK before2
#define EACH_WORD_COUNT INA_WORD_GROUP
#include "stack_words.p4"
        transition select(hdr.bridge.groups_absent) {
            0: word_group_2_words;
            default: accept;
        }
    }

    state word_group_2_words {
#define WORD_STACK words
#define EACH_WORD_COUNT LAST_GROUP_WORDS
#include "stack_words.p4"
        transition accept;
    }
#endif
#endif
}
#undef STACK_WORD

control InaIngressDeparser(packet_out packet, inout headers_t hdr, in ina_meta_t meta,
                           in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    apply {
        packet.emit(hdr);
    }
}

parser InaEgressParser(packet_in packet, out headers_t hdr, out ina_meta_t meta,
                       out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        packet.extract(eg_intr_md);
        packet.extract(hdr.bridge);
        transition eg_ethernet;
    }

    INA_FRAME_STATES(eg, eg_ina)

    /* the egress rewrites headers only: the words go through as payload */
    state eg_ina {
        meta.is_ina = 1;
        packet.extract(hdr.ina);
        transition accept;
    }
}

/* The egress deparser: the bridge goes along only into the recirculation port (the egress control
 * invalidates it otherwise); the IPv4 checksum covers the addresses the ingress and egress wrote
 * (UDP checksums are zeroed). */
control InaEgressDeparser(packet_out packet, inout headers_t hdr, in ina_meta_t meta,
                          in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;

    apply {
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.checksum = ipv4_checksum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
                hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
                hdr.ipv4.protocol, hdr.ipv4.src, hdr.ipv4.dst});
        }
        packet.emit(hdr);
    }
}

#endif
