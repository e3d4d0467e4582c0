/* Plain Ethernet forwarding for everything that is not ina's (ARP, the workers' own TCP, ...):
 * known addresses to their port, the rest flooded. The control plane fills the table. */
#ifndef INA_FORWARDING_P4
#define INA_FORWARDING_P4

const bit<16> FLOOD_GROUP = 1;

control L2Forwarding(inout headers_t hdr, inout ina_meta_t meta) {
    @name(".ina_l2_port")
    action to_port(bit<9> port) {
        meta.egress_port = port;
    }

    @name(".ina_flood")
    action flood() {
        meta.mcast_group = FLOOD_GROUP;
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

/* The control plane's port: SWEEP packets enter there (BMv2's P4Runtime packet-out port; on Tofino
 * the CPU Ethernet port whose Linux interface the controller writes to). */
control CpuPort(inout ina_meta_t meta) {
    @name(".ina_from_cpu")
    action from_cpu() {
        meta.from_cpu = 1;
    }

    /* the default writes the 0 (in the table, not before it: one stage) */
    action not_from_cpu() {
        meta.from_cpu = 0;
    }

    @name(".ina_cpu_ports")
    table cpu_ports {
        key = { meta.in_port: exact @name("port"); }
        actions = { from_cpu; not_from_cpu; }
        const default_action = not_from_cpu();
        size = 4;
    }

    apply {
        cpu_ports.apply();
    }
}

#endif
