/* What leaves the switch (docs/protocol.md, section 5): the packet forwarded unchanged to its
 * job's PS, a PARTIAL to a PS, or a RESULT replicated to every worker and the PS (one multicast
 * group per job; InaEgress writes each copy's destination). Unicast goes out by the route table. */
#ifndef INA_OUTPUTS_P4
#define INA_OUTPUTS_P4

const bit<16> CHUNK_UDP_LEN = LANES_UDP_LEN;

control Outputs(inout headers_t hdr, inout ina_meta_t meta, inout standard_metadata_t std) {
    @name(".ina_route")
    action route(bit<9> port, bit<48> mac) {
        std.egress_spec = port;
        hdr.ethernet.src = meta.switch_mac;
        hdr.ethernet.dst = mac;
    }

    action unroutable() {
        mark_to_drop(std);
    }

    /* Every address the switch sends to: workers and PSes. */
    @name(".ina_routes")
    table routes {
        key = { hdr.ipv4.dst: exact @name("dst"); }
        actions = { route; unroutable; }
        const default_action = unroutable();
        size = 4096;
    }

    /* A packet the switch writes: from its own address, K words after the header. */
    action from_switch() {
        hdr.ethernet.src = meta.switch_mac;
        hdr.ipv4.src = meta.switch_ip;
        hdr.ipv4.total_len = IPV4_HEADER_LEN + CHUNK_UDP_LEN;
        hdr.udp.src_port = INA_PORT;
        hdr.udp.length = CHUNK_UDP_LEN;
        hdr.udp.checksum = 0;
    }

    action chunk_header(bit<8> kind, bit<32> id, bit<8> priority, bit<32> seq, bit<8> lane_bits, bit<32> bitmap) {
        hdr.ina.kind = kind;
        hdr.ina.flags = (id & KEY_MAX) == 0 ? 8w0 : FLAG_MAX;
        hdr.ina.job = id[15:0];
        hdr.ina.rank = 0;
        hdr.ina.priority = priority;
        hdr.ina.seq = seq;
        hdr.ina.index_bits = 0;
        hdr.ina.lane_bits = lane_bits;
        hdr.ina.bitmap = bitmap;
    }

    apply {
        if (meta.output == OUT_TO_PS) {
            /* unchanged but for the destination (docs/protocol.md, "Forward to the PS") */
            hdr.ipv4.dst = meta.ps_ip;
            hdr.udp.dst_port = meta.ps_port;
            hdr.udp.checksum = 0;
            routes.apply();
        } else if (meta.output == OUT_PARTIAL) {
            chunk_header(KIND_PARTIAL, meta.partial_id, meta.old_prio, meta.partial_seq, meta.partial_lanes,
                         meta.partial_full & ~meta.old_missing);
            from_switch();
            hdr.ipv4.dst = meta.partial_ps_ip;
            hdr.udp.dst_port = meta.partial_ps_port;
            routes.apply();
        } else if (meta.output == OUT_RESULT) {
            chunk_header(KIND_RESULT, meta.key_id, 0, hdr.ina.seq, hdr.ina.lane_bits, meta.full);
            from_switch();
            std.mcast_grp = meta.group;
        } else if (meta.output == OUT_RECIRC) {
            std.egress_spec = std.ingress_port;
        } else {
            mark_to_drop(std);
        }
    }
}

#endif
