/* The counters of docs/protocol.md, section 5: received packets, one outcome per received packet,
 * further events, and (in the egress) transmitted packets. The controller reads them by name
 * (ina/p4/device.py) and names them as the software switch does. */
#ifndef INA_COUNTERS_P4
#define INA_COUNTERS_P4

/* `arrived`: the packet's first pass (a later pass counts no rx). */
control Count(in ina_meta_t meta, in bit<1> arrived) {
    INA_COUNTER(rx, ".ina_rx", 1)
    INA_COUNTER(outcomes, ".ina_outcomes", OUTCOMES)
    INA_COUNTER(events, ".ina_events", EVENTS)
    INA_COUNTER(sent_up, ".ina_sent_up", 1)  /* a leaf's sums up: an event beside COMPLETED, and a TNA counter counts once a packet */

    apply {
        if (meta.from_cpu == 0) {
            if (arrived == 1) {
                rx.count(0);
            }
            if (meta.outcome != NO_OUTCOME) {
                outcomes.count(meta.outcome);
            }
        }
        if (meta.event != NO_EVENT) {
            events.count(meta.event);
        }
        if (meta.event == EVENT_COMPLETED && meta.role == ROLE_LEAF) {
            sent_up.count(0);
        }
    }
}

/* An ina packet to another address is forwarded as any other packet (docs/p4.md, "Own address"), leaving with
 * nothing decided for it (OUT_DROP, as every packet not ina's): not counted, and a flooded copy of it not sent
 * back where it came from. */
#define OWN_INA(valid) (valid && CARRY.out_kind != OUT_DROP)

/* The egress: the last value words, each RESULT copy's destination, transmitted packets. */
control InaEgressLogic(inout headers_t hdr, inout ina_meta_t meta) {
    INA_COUNTER(tx, ".ina_tx", 1)

    @name(".ina_replica")
    action replica(bit<32> ip, bit<16> port, bit<48> mac) {
        hdr.ipv4.dst = ip;
        hdr.udp.dst_port = port;
        hdr.ethernet.dst = mac;
    }

    action no_replica() {
        meta.drop = 1;
    }

    /* A RESULT copy's destination: replica `rank` of a job's group is that worker, replica n its PS. */
    @name(".ina_replicas")
    table replicas {
        key = {
            CARRY.group: exact @name("group");
            meta.egress_rid: exact @name("replica");
        }
        actions = { replica; no_replica; }
        const default_action = no_replica();
        size = 32768;
    }

    apply {
        meta.drop = 0;
        if (CARRY.out_kind == OUT_RECIRC) {
            /* the architecture recirculates it */
        } else if (hdr.ina.isValid() && CARRY.out_kind == OUT_RESULT) {
            if (replicas.apply().hit) {
                tx.count(0);
            }
        } else if (OWN_INA(hdr.ina.isValid())) {
            tx.count(0);
        } else if (meta.out_port == meta.in_port) {
            meta.drop = 1;  /* a flooded copy back where it came from */
        }
    }
}

#endif
