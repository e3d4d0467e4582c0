/* The counters of docs/protocol.md, section 5: received packets, one outcome per received packet,
 * further events, and (in InaEgress) transmitted packets. Read over BMv2's Thrift API by
 * ina/p4/controller.py, which names them as the software switch does. */
#ifndef INA_COUNTERS_P4
#define INA_COUNTERS_P4

control Count(in ina_meta_t meta) {
    @name(".ina_rx") counter(1, CounterType.packets) rx;
    @name(".ina_outcomes") counter(16, CounterType.packets) outcomes;
    @name(".ina_events") counter(8, CounterType.packets) events;

    apply {
        if (meta.from_cpu == 0) {
            if (meta.pass == PASS_FIRST) {
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
