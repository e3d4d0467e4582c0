/* How the shared controls' stateful steps are written on v1model (BMv2): each "register action" is
 * an action that reads the slot's register entry, runs the same body as the Tofino RegisterAction,
 * and writes it back, so BMv2 runs the very decisions the Tofino program runs (docs/p4.md). */
#ifndef INA_ARCH_V1MODEL_P4
#define INA_ARCH_V1MODEL_P4

#define INA_ARCH_V1MODEL

#define INA_REGISTER(T, inst, pname) @name(pname) register<T>(POOL) inst;

/* A register action with an output `rv`, and one without: `value` is the entry. */
#define INA_ACTION(T, U, reg, act) action act(out U rv) { T value; reg.read(value, (bit<32>)meta.slot);
#define INA_UPDATE(T, reg, act) action act() { T value; reg.read(value, (bit<32>)meta.slot);
#define INA_END(reg) reg.write((bit<32>)meta.slot, value); }
/* what `missing` holds for a held result (atp): the identity's setting (identity.p4) */
#define INA_HELD_PARAM(inst, pname)
#define INA_HELD_VALUE(inst) meta.held_missing

#define INA_ASSUME(check)
#define INA_RUN(dst, act) act(dst)
#define INA_DO(act) act()
#define INA_PREDICATE(lo, hi) ((bit<4>)1 << (((hi) ? 8w2 : 8w0) + ((lo) ? 8w1 : 8w0)))
#define INA_PREDICATE1(lo) ((lo) ? 4w0b0010 : 4w0b0001)

/* The value words: a slot's K words in one entry, laid out as the packet's (headers.p4, words_h); with
 * word passes a group's words an entry, group g of slot s at s + g * POOL. */
#define INA_WORD_REGISTERS @name(".ina_value") register<words_t>(WORD_CELLS) words_register;

#define INA_CONST_TABLE_SIZE(n)  /* p4c warns on a constant table's size; bf-p4c wants it */

#define INA_COUNTER(inst, pname, size) @name(pname) counter(size, CounterType.packets) inst;

#endif
