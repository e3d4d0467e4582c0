/* How the shared controls' stateful steps are written on TNA (Tofino): each is a RegisterAction on
 * one register entry, so a pass reads and writes every register once, with the comparisons and the
 * single output a stateful ALU has (docs/p4.md, "Tofino"). arch_v1model.p4 writes the same bodies
 * for BMv2. */
#ifndef INA_ARCH_TNA_P4
#define INA_ARCH_TNA_P4

#define INA_ARCH_TNA
#define INA_CARRY_HEADER

/* One stateful ALU a value word, since each answers one 32-bit word a pass. bf-p4c places the
 * admission checks in stages 0-1, the slot registers in 2-4, the priority and the first three words
 * in 5, four words a stage after that, and the outcome, outputs and counters with and after the last
 * word (Tofino 1 has no long branches: what follows the words in the control flow cannot go before
 * them): 23 words fit 12 stages, 24 take 13 (docs/p4.md, "Tofino"). A larger K is stepped in groups
 * over later passes (INA_WORD_GROUP, ina_tna.p4). The egress sums none: packets of one slot can pass
 * each other in different ports' queues on their way there. */
#if STEP_WORDS > 23
#error "INA_WORD_GROUP must be at most 23 on Tofino 1: the words after the slot decision and before the outputs fill 12 stages (docs/p4.md, Tofino)"
#endif

#define INA_REGISTER(T, inst, pname) @name(pname) Register<T, bit<16>>(POOL) inst;

#define INA_ACTION(T, U, reg, act) RegisterAction<T, bit<16>, U>(reg) act = { void apply(inout T value, out U rv) {
#define INA_UPDATE(T, reg, act) RegisterAction<T, bit<16>, bit<8>>(reg) act = { void apply(inout T value) {
#define INA_END(reg) } };
/* what `missing` holds for a held result (atp): a run-time parameter of the stateful ALUs, set by the control plane */
#define INA_HELD_PARAM(inst, pname) @name(pname) RegisterParam<bit<32>>(0) inst;
#define INA_HELD_VALUE(inst) inst.read()

#define INA_RUN(dst, act) dst = act.execute(meta.slot)
#define INA_DO(act) act.execute(meta.slot)
#ifdef INA_TESTGEN
/* p4testgen's cases are of a registered job: the control plane writes only such entries
 * (ina/p4/entries.py), and p4testgen would otherwise choose any values. */
extern void testgen_assume(in bool check);
#define INA_ASSUME(check) testgen_assume(check)
/* p4testgen cannot evaluate `this.predicate()` ("Cast failed: this with type This is not a
 * PathExpression"): for it, the predicate is written as its encoding, as on v1model. */
#define INA_PREDICATE(lo, hi) ((bit<4>)1 << (((hi) ? 8w2 : 8w0) + ((lo) ? 8w1 : 8w0)))
#define INA_PREDICATE1(lo) ((lo) ? 4w0b0010 : 4w0b0001)
#else
#define INA_ASSUME(check)
#define INA_PREDICATE(lo, hi) this.predicate(lo, hi)
#define INA_PREDICATE1(lo) this.predicate(lo)
#endif

/* bf-p4c wants every table's size, constant tables' too (p4c warns on one there) */
#define INA_CONST_TABLE_SIZE(n) size = n;

#define INA_COUNTER(inst, pname, size) @name(pname) Counter<bit<32>, bit<32>>(size, CounterType_t.PACKETS) inst;

#endif
