/* ina's aggregation switch for BMv2 (v1model): docs/protocol.md section 5, laid out as docs/p4.md
 * describes. Every decision is in the shared controls, which p4src/ina_tna.p4 compiles for Tofino:
 *
 *   validate.p4   malformed and unexpected packets
 *   jobs.p4       the job table: unregistered, bad_slot, bad_format
 *   slots.p4      the slot decision: redirect, key, missing bitmap, priority; esa's preemption, atp's hold
 *   values.p4     the value words
 *   outputs.p4    what leaves: forwarding to the PS, PARTIALs, RESULT replication
 *   counters.p4   rx, outcomes, events; the egress (tx, replicas)
 *   forwarding.p4 Ethernet forwarding of everything else; the control plane's port
 *   racks.p4      a racked job's leaf and spine (docs/protocol.md, section 10)
 *
 * This file maps v1model's intrinsic metadata to the shared controls' fields and back.
 * Build: `ina p4 build --words K --pool P` (ina/p4/build.py). */
#include <core.p4>
#include <v1model.p4>

#ifndef CPU_PORT
#define CPU_PORT 255
#endif

#define INA_WIDE_WORDS
#define INA_OWN_ADDRESS /* ina packets to another address forwarded, not taken: compared in the ingress (the TNA parser matches it; docs/p4.md, "Own address") */
#include "headers.p4"
#include "arch_v1model.p4"
#include "metadata.p4"
#include "parser_v1model.p4"

#define INA_RECIRC_PORT meta.in_port  /* any port: the egress recirculates instead of sending */
#define INA_WORD_PASS_PORT 510       /* one port for every word pass, so that its queue keeps their order (no interface) */

#include "validate.p4"
#include "jobs.p4"
#include "slots.p4"
#include "values.p4"
#include "word_passes.p4"
#include "outputs.p4"
#include "counters.p4"
#include "forwarding.p4"
#include "racks.p4"
#include "identity.p4"

control InaIngress(inout headers_t hdr, inout ina_meta_t meta, inout standard_metadata_t std) {
    InaIngressLogic() logic;

    apply {
        meta.parser_error = std.parser_error == error.NoError ? 1w0 : 1w1;
        meta.truncated = std.packet_length < 14 + (bit<32>)hdr.ipv4.total_len ? 1w1 : 1w0;
        meta.now = std.ingress_global_timestamp[31:0];
        meta.in_port = std.ingress_port;
        if (hdr.peek.isValid() && std.ingress_port == CPU_PORT) {
            /* the controller reads a slot's words (headers.p4, peek_h): back to it, counted nowhere */
            hdr.words.setValid();  /* first: BMv2 zeroes a header it makes valid */
            words_register.read(hdr.words.value, (bit<32>)hdr.peek.slot);
            std.egress_spec = CPU_PORT;
            return;
        }
        logic.apply(hdr, meta);
#ifdef INA_WORD_PASSES
        if (CARRY.pass == PASS_WORDS) {
            std.egress_spec = INA_WORD_PASS_PORT;  /* a group's word pass next (word_passes.p4), queue 0 */
        } else
#endif
        if (meta.drop == 1) {
            mark_to_drop(std);
        } else {
            std.egress_spec = meta.egress_port;
            std.mcast_grp = meta.mcast_group;
            std.priority = meta.queue;  /* BMv2 started with --priority-queues 8: 7 is served first */
        }
    }
}

control InaEgress(inout headers_t hdr, inout ina_meta_t meta, inout standard_metadata_t std) {
    InaEgressLogic() logic;

    apply {
        meta.egress_rid = std.egress_rid;
        meta.out_port = std.egress_port;
        if (hdr.peek.isValid() && std.egress_port == CPU_PORT) {
            return;
        }
        logic.apply(hdr, meta);
        if (meta.out_kind == OUT_RECIRC) {
            recirculate_preserving_field_list(1);
        } else if (meta.drop == 1) {
            mark_to_drop(std);
        }
    }
}

V1Switch(InaParser(), InaVerifyChecksum(), InaIngress(), InaEgress(), InaComputeChecksum(), InaDeparser()) main;
