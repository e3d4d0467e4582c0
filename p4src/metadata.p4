/* Per-packet metadata: what the controls of the switch tell each other (docs/p4.md). */
#ifndef INA_METADATA_P4
#define INA_METADATA_P4

/* Which pass a packet is on. A write that is decided after the stage of its register is done
 * on a recirculated copy (docs/p4.md, "Late writes"). */
const bit<8> PASS_FIRST = 0;     /* as received */
const bit<8> PASS_CLAIM = 1;     /* claim a slot whose key must change (free slot of another key, stale, preempt) */
const bit<8> PASS_FLUSH = 2;     /* a RESEND found its own contribution: flush the slot */
const bit<8> PASS_REDIRECT = 3;  /* a collision: set the redirect, then forward to the PS */

const bit<8> CLAIM_FREE = 0;     /* the slot was free (its last chunk completed or was flushed) */
const bit<8> CLAIM_STALE = 1;    /* an older partial of the same job */
const bit<8> CLAIM_PREEMPT = 2;  /* a lower-priority partial of another job */

/* What leaves the switch for this packet. */
const bit<8> OUT_DROP = 0;
const bit<8> OUT_TO_PS = 1;      /* the packet unchanged, to its job's PS */
const bit<8> OUT_PARTIAL = 2;    /* a PARTIAL of the slot's old contents */
const bit<8> OUT_RESULT = 3;     /* a RESULT to every worker of the job and its PS */
const bit<8> OUT_RECIRC = 4;     /* the next pass */

/* What the slot's value words do (0: nothing). */
const bit<8> SLOT_CLAIM = 1;     /* value = payload (the old words into the PARTIAL if evicting) */
const bit<8> SLOT_ADD = 2;       /* value += payload (or max): the new sums into the packet */
const bit<8> SLOT_EVICT = 3;     /* the old words into the packet (FLUSH, sweep) */

/* Counter indices: every received packet counts under exactly one outcome; events count more. */
const bit<32> OUTCOME_MALFORMED = 0;
const bit<32> OUTCOME_UNEXPECTED = 1;
const bit<32> OUTCOME_UNREGISTERED = 2;
const bit<32> OUTCOME_BAD_SLOT = 3;
const bit<32> OUTCOME_BAD_FORMAT = 4;
const bit<32> OUTCOME_DUPLICATE = 5;
const bit<32> OUTCOME_REDIRECTED = 6;
const bit<32> OUTCOME_FLUSHED = 7;
const bit<32> OUTCOME_AGGREGATED = 8;
const bit<32> OUTCOME_CLAIMED = 9;
const bit<32> OUTCOME_RESEND_FORWARDED = 10;
const bit<32> OUTCOME_STRAGGLER = 11;
const bit<32> OUTCOME_COLLISION = 12;
const bit<32> OUTCOME_FLUSH_REQUESTS = 13;
const bit<32> OUTCOMES = 14;
const bit<32> NO_OUTCOME = 15;   /* a pass that hands its packet's outcome to the next pass */

const bit<32> EVENT_COMPLETED = 0;
const bit<32> EVENT_PREEMPTED = 1;
const bit<32> EVENT_STALE = 2;
const bit<32> EVENT_FLUSH_HITS = 3;
const bit<32> EVENT_SWEPT = 4;
const bit<32> EVENTS = 5;
const bit<32> NO_EVENT = 7;

struct ina_meta_t {
    bit<1>  is_ina;          /* UDP to INA_PORT */
    bit<1>  from_cpu;        /* a packet-out from the control plane */
    bit<16> expected_udp_len;

    /* the job table */
    bit<32> full;            /* 2^n - 1 */
    bit<8>  fanin;           /* n */
    bit<16> slot_base;
    bit<16> span_mask;       /* span - 1: the job's slots are (slot_base + seq mod span) mod P */
    bit<8>  priority_cap;
    bit<8>  lane_bits;
    bit<32> ps_ip;
    bit<16> ps_port;
    bit<16> group;           /* multicast group: the workers and the PS */

    /* the switch's own settings */
    bit<32> switch_ip;
    bit<48> switch_mac;
    bit<1>  esa;

    /* the packet as the slot sees it */
    bit<32> slot;            /* register index */
    bit<32> key_id;          /* KEY_VALID | op | job */
    bit<32> rank_bit;        /* 1 << rank */
    bit<8>  prio;            /* min(priority, priority_cap) */
    bit<1>  op_max;

    /* carried to the next pass (recirculate_preserving_field_list(1)) */
    @field_list(1) bit<8>  pass;
    @field_list(1) bit<8>  claim_kind;
    @field_list(1) bit<32> expect_id;
    @field_list(1) bit<32> expect_seq;

    /* what the slot held */
    bit<32> old_id;
    bit<32> old_seq;
    bit<32> old_missing;
    bit<8>  old_prio;

    /* the evicted partial: its key and its job's PS */
    bit<32> partial_id;
    bit<32> partial_seq;
    bit<32> partial_full;
    bit<8>  partial_lanes;
    bit<32> partial_ps_ip;
    bit<16> partial_ps_port;

    /* decisions */
    bit<8>  slot_action;
    bit<1>  evict;           /* the packet carries the slot's old words */
    bit<8>  output;
    bit<32> outcome;
    bit<32> event;
}

#endif
