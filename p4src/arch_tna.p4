/* How the shared controls' stateful steps are written on TNA (Tofino): each is a RegisterAction on
 * one register entry, so a pass reads and writes every register once, with the comparisons and the
 * single output a stateful ALU has (docs/p4.md, "Tofino"). arch_v1model.p4 writes the same bodies
 * for BMv2. */
#ifndef INA_ARCH_TNA_P4
#define INA_ARCH_TNA_P4

#define INA_ARCH_TNA
#define INA_CARRY_HEADER

#if WORDS > 64
#error "WORDS (K) must be at most 64 on Tofino: one stateful ALU per value word"
#endif

/* Stages 0-3 decide, stage 4 has the priority and three words, stages 5-11 four words each. */
#ifndef INGRESS_WORDS
#if WORDS < 31
#define INGRESS_WORDS WORDS
#else
#define INGRESS_WORDS 31
#endif
#endif

#define INA_REGISTER(T, inst, pname) @name(pname) Register<T, bit<32>>(POOL) inst;
#define INA_PAIR_REGISTER(inst, pname) @name(pname) Register<pair_t, bit<32>>(POOL) inst;

#define INA_ACTION(T, U, reg, act) RegisterAction<T, bit<32>, U>(reg) act = { void apply(inout T value, out U rv) {
#define INA_UPDATE(T, reg, act) RegisterAction<T, bit<32>, bit<32>>(reg) act = { void apply(inout T value) {
#define INA_END(reg) } };
#define INA_PAIR_ACTION(U, reg, act) INA_ACTION(pair_t, U, reg, act)
#define INA_PAIR_UPDATE(reg, act) INA_UPDATE(pair_t, reg, act)
#define INA_PAIR_END(reg) INA_END(reg)

#define INA_RUN(dst, act) dst = act.execute(meta.slot)
#define INA_DO(act) act.execute(meta.slot)
#define INA_PREDICATE(lo, hi) this.predicate(lo, hi)

#define INA_COUNTER(inst, pname, size) @name(pname) Counter<bit<32>, bit<32>>(size, CounterType_t.PACKETS) inst;

#endif
