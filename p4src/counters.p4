/* The counters of docs/protocol.md, section 5: received packets, one outcome per received packet,
 * further events, and (in InaEgress) transmitted packets. Read over BMv2's Thrift API by
 * ina/p4/controller.py, which names them as the software switch does. */
#ifndef INA_COUNTERS_P4
#define INA_COUNTERS_P4

/* `arrived`: the packet's first pass (a recirculated pass counts no rx). */
control Count(in ina_meta_t meta, in bool arrived) {
    @name(".ina_rx") counter(1, CounterType.packets) rx;
    @name(".ina_outcomes") counter(OUTCOMES, CounterType.packets) outcomes;
    @name(".ina_events") counter(EVENTS, CounterType.packets) events;

    apply {
        if (meta.from_cpu == 0) {
            if (arrived) {
                rx.count(0);
            }
            if (meta.outcome != NO_OUTCOME) {
                outcomes.count(meta.outcome);
            }
        }
        if (meta.event != NO_EVENT) {
            events.count(meta.event);
        }
    }
}

#endif
