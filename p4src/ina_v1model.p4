/* ina's aggregation switch for BMv2 (v1model): docs/protocol.md section 5, laid out as docs/p4.md
 * describes, one control per concern:
 *
 *   validate.p4   malformed and unexpected packets
 *   jobs.p4       the job table: unregistered, bad_slot, bad_format
 *   slots.p4      the slot decision: redirect, key, missing bitmap, priority; esa or atp
 *   values.p4     the value words and the touched time
 *   outputs.p4    forwarding to the PS, PARTIALs, RESULT replication
 *   counters.p4   rx, outcomes, events (tx in the egress below)
 *   forwarding.p4 Ethernet forwarding of everything else
 *
 * Build: `ina p4 build --words K --pool P` (ina/p4/build.py). */
#include <core.p4>
#include <v1model.p4>

#ifndef CPU_PORT
#define CPU_PORT 255
#endif

#include "headers.p4"
#include "metadata.p4"
#include "parser.p4"
#include "validate.p4"
#include "jobs.p4"
#include "slots.p4"
#include "values.p4"
#include "outputs.p4"
#include "counters.p4"
#include "forwarding.p4"

control InaIngress(inout headers_t hdr, inout ina_meta_t meta, inout standard_metadata_t std) {
    /* The switch's own address, and the policy (1 = esa, 0 = atp), set by the control plane. */
    @name(".ina_identity")
    action identity(bit<32> ip, bit<48> mac, bit<1> esa) {
        meta.switch_ip = ip;
        meta.switch_mac = mac;
        meta.esa = esa;
    }

    @name(".ina_switch")
    table switch_identity {
        actions = { identity; }
        default_action = identity(0, 0, 1);
    }

    Validate() validate;
    JobChecks() job_checks;
    SlotDecision() slots;
    Values() values;
    Outputs() outputs;
    Count() count;
    L2Forwarding() l2;

    apply {
        if (meta.is_ina == 0) {
            l2.apply(hdr, std);
        } else {
            bool arrived = meta.pass == PASS_FIRST;
            meta.from_cpu = std.ingress_port == CPU_PORT ? 1w1 : 1w0;
            meta.outcome = NO_OUTCOME;
            meta.event = NO_EVENT;
            switch_identity.apply();
            validate.apply(hdr, meta, std);
            if (meta.outcome == NO_OUTCOME) {
                job_checks.apply(hdr, meta, std);
            }
            if (meta.outcome == NO_OUTCOME) {
                slots.apply(hdr, meta, std);
                values.apply(hdr, meta, std);
                outputs.apply(hdr, meta, std);
            } else {
                mark_to_drop(std);
            }
            count.apply(meta, arrived);
        }
    }
}

control InaEgress(inout headers_t hdr, inout ina_meta_t meta, inout standard_metadata_t std) {
    @name(".ina_tx") counter(1, CounterType.packets) tx;

    @name(".ina_replica")
    action replica(bit<32> ip, bit<16> port, bit<48> mac) {
        hdr.ipv4.dst = ip;
        hdr.udp.dst_port = port;
        hdr.ethernet.dst = mac;
    }

    action no_replica() {
        mark_to_drop(std);
    }

    /* A RESULT copy's destination: replica `rank` of a job's group is that worker, replica n its PS. */
    @name(".ina_replicas")
    table replicas {
        key = {
            std.mcast_grp: exact @name("group");
            std.egress_rid: exact @name("replica");
        }
        actions = { replica; no_replica; }
        const default_action = no_replica();
        size = 32768;
    }

    apply {
        if (meta.output == OUT_RECIRC) {
            recirculate_preserving_field_list(1);
        } else if (meta.is_ina == 1 && meta.output == OUT_RESULT) {
            if (replicas.apply().hit) {
                tx.count(0);
            }
        } else if (meta.is_ina == 1) {
            tx.count(0);
        } else if (std.egress_port == std.ingress_port) {
            mark_to_drop(std);  /* a flooded copy back where it came from */
        }
    }
}

V1Switch(InaParser(), InaVerifyChecksum(), InaIngress(), InaEgress(), InaComputeChecksum(), InaDeparser()) main;
