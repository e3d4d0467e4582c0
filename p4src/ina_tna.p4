/* ina's aggregation switch for Tofino (TNA): the same shared controls as p4src/ina_v1model.p4
 * (docs/p4.md lists what differs between the two and why), with this file mapping TNA's intrinsic
 * metadata to their fields and back:
 *
 *   ingress  stage 0 the tables (the job's, its level's, its sources', a claim's victim's); 1 Admission's
 *            checks; 2-5 the slot registers (slots.p4); 5-10 the value words (values.p4); the decision
 *            and the header rewrite (outputs.p4); for K above INA_WORD_GROUP, a word pass a later
 *            group of the words (identity.p4)
 *   egress   RESULT copies' destinations, tx
 *
 * A packet's later pass goes round through the recirculation port RECIRC_PORT (pipe 0's by default)
 * with the bridge header in front.
 * Build: `ina p4 build --target tofino --words K --pool P` (ina/p4/build.py). */
#include <core.p4>
#include <tna.p4>

#ifndef RECIRC_PORT
#define RECIRC_PORT 68
#endif

/* The words a pass steps: a K above it is stepped a group a pass, each later group on a pass of its
 * own through the recirculation port (docs/p4.md, "Word passes"). */
#ifndef INA_WORD_GROUP
#define INA_WORD_GROUP 23
#endif

#define INA_CARRY_HEADER
#include "headers.p4"
#include "arch_tna.p4"
#include "metadata.p4"
#include "parser_tna.p4"

#define INA_RECIRC_PORT RECIRC_PORT
#define INA_WORD_PASS_PORT RECIRC_PORT

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

control InaIngress(inout headers_t hdr, inout ina_meta_t meta,
                   in ingress_intrinsic_metadata_t ig_intr_md,
                   in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                   inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                   inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    InaIngressLogic() logic;

    apply {
        meta.parser_error = 0;
        if (ig_prsr_md.parser_err != 0) {
            meta.parser_error = 1;
        }
        meta.truncated = 0;  /* a frame shorter than its headers is a parser error here */
        meta.now = ig_prsr_md.global_tstamp[41:10];
        logic.apply(hdr, meta);
#ifdef INA_WORD_PASSES
        if (hdr.bridge.pass == PASS_WORDS) {
            /* a group's word pass next (word_passes.p4): queue 0 of the recirculation port */
            ig_tm_md.qid = 0;
            ig_tm_md.ucast_egress_port = INA_WORD_PASS_PORT;
        } else
#endif
        {
            ig_tm_md.qid = (QueueId_t)meta.queue;  /* the port's queues strict-priority, 7 first (docs/p4.md) */
            if (meta.drop == 1) {
                ig_dprsr_md.drop_ctl = 1;
            } else if (meta.mcast_group != 0) {
                ig_tm_md.mcast_grp_a = meta.mcast_group;
            } else {
                ig_tm_md.ucast_egress_port = meta.egress_port;
            }
        }
    }
}

control InaEgress(inout headers_t hdr, inout ina_meta_t meta,
                  in egress_intrinsic_metadata_t eg_intr_md,
                  in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                  inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                  inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    InaEgressLogic() logic;

    apply {
        meta.egress_rid = eg_intr_md.egress_rid;
        meta.out_port = eg_intr_md.egress_port;
        meta.in_port = hdr.bridge.from_port;
        logic.apply(hdr, meta);
        if (hdr.bridge.out_kind != OUT_RECIRC) {
            hdr.bridge.setInvalid();
        }
        if (meta.drop == 1) {
            eg_dprsr_md.drop_ctl = 1;
        }
    }
}

Pipeline(InaIngressParser(), InaIngress(), InaIngressDeparser(),
         InaEgressParser(), InaEgress(), InaEgressDeparser()) pipe;

Switch(pipe) main;
