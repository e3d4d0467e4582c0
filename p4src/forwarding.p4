/* Plain Ethernet forwarding for everything that is not ina's (ARP, the workers' own TCP, ...):
 * known addresses to their port, the rest flooded. The control plane fills the table. */
#ifndef INA_FORWARDING_P4
#define INA_FORWARDING_P4

const bit<16> FLOOD_GROUP = 1;

control L2Forwarding(inout headers_t hdr, inout standard_metadata_t std) {
    @name(".ina_l2_port")
    action to_port(bit<9> port) {
        std.egress_spec = port;
    }

    @name(".ina_flood")
    action flood() {
        std.mcast_grp = FLOOD_GROUP;
    }

    @name(".ina_l2")
    table l2 {
        key = { hdr.ethernet.dst: exact @name("dst"); }
        actions = { to_port; flood; }
        const default_action = flood();
        size = 4096;
    }

    apply {
        l2.apply();
    }
}

#endif
