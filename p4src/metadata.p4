/* Per-packet metadata: what the controls of the switch tell each other (docs/p4.md), the same on
 * every architecture. What a later pass or the egress must know travels in `ina_bridge_h`
 * (headers.p4): on TNA as a header in front of the frame, on v1model as preserved metadata. */
#ifndef INA_METADATA_P4
#define INA_METADATA_P4

/* Which pass a packet is on. A write decided after its register's stage is done on a recirculated
 * copy (docs/p4.md, "Late writes"). */
const bit<8> PASS_FIRST = 0;     /* as received */
const bit<8> PASS_CLAIM = 1;     /* claim a slot whose key must change (free slot of another key, stale, preempt) */
const bit<8> PASS_FLUSH = 2;     /* a RESEND found its own contribution: flush the slot */
const bit<8> PASS_REDIRECT = 3;  /* a collision: set the redirect, then forward to the PS */
#ifdef INA_WORD_PASSES
const bit<8> PASS_WORDS = 4;     /* K above a pass's words (TNA; v1model built with a word group): the next group of the words (word_passes.p4) */
#endif

const bit<8> CLAIM_FREE = 0;     /* the slot was free (its last chunk completed or was flushed) */
const bit<8> CLAIM_STALE = 1;    /* an older partial of the same job */
const bit<8> CLAIM_PREEMPT = 2;  /* a lower-priority partial of another job */

/* What leaves the switch for this packet. */
const bit<8> OUT_DROP = 0;
const bit<8> OUT_TO_PS = 1;      /* the packet unchanged, to its job's PS */
const bit<8> OUT_PARTIAL = 2;    /* a PARTIAL of the slot's old contents */
const bit<8> OUT_RESULT = 3;     /* a RESULT to every worker of the job and its PS */
const bit<8> OUT_RECIRC = 4;     /* the next pass */
const bit<8> OUT_UP = 5;         /* a leaf's completed chunk: its rack's sum to the spine (racks.p4) */
const bit<8> OUT_HELD = 6;       /* atp: a completed chunk's RESULT, flagged HOLD, to its PS alone (unicast) */

/* What the slot's value words do (0: nothing). */
const bit<8> SLOT_NONE = 0;
const bit<8> SLOT_STORE = 1;     /* value = payload */
const bit<8> SLOT_SWAP = 2;      /* value = payload; the old words into the packet (a PARTIAL) */
const bit<8> SLOT_ADD = 3;       /* value += payload: the new sums into the packet */
const bit<8> SLOT_MAX = 4;       /* value = max(value, payload): the new maxima into the packet */
const bit<8> SLOT_READ = 5;      /* the old words into the packet (FLUSH, sweep, a RESEND's flush) */

/* How a packet met its slot, decided from the key registers before the `missing` stage. */
const bit<8> PATH_NONE = 0;      /* no slot state changes (redirected, forwarded, a later pass's forward) */
const bit<8> PATH_TAKE = 1;      /* a newer chunk of the slot's key id: claim, evicting a stale partial */
const bit<8> PATH_SAME = 2;      /* the slot's own key: add (or a duplicate, or a RESEND's flush) */
const bit<8> PATH_CLAIM = 3;     /* the claim pass, slot still as the first pass saw it */
const bit<8> PATH_FLUSH = 4;     /* FLUSH or a RESEND's flush pass on the slot's own key */
const bit<8> PATH_SWEEP = 5;     /* the control plane's SWEEP on the slot's own key */
const bit<8> PATH_OTHER = 6;     /* another key: free, stale, straggler, preemption or collision */

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
const bit<32> OUTCOME_DESCENDED = 14;  /* a leaf: its spine's RESULT, passed down to the rack (racks.p4) */
const bit<32> OUTCOME_RELEASES = 15;   /* atp: a held RESULT the PS returned, passed on to the workers */
const bit<32> OUTCOMES = 16;
const bit<32> NO_OUTCOME = 16;

const bit<32> EVENT_COMPLETED = 0;
const bit<32> EVENT_PREEMPTED = 1;
const bit<32> EVENT_STALE = 2;
const bit<32> EVENT_FLUSH_HITS = 3;
const bit<32> EVENT_SWEPT = 4;
/* (a leaf's sums up count on a counter of their own, counters.p4) */
const bit<32> EVENT_RELEASE_HITS = 5;  /* a RESULT passed on found its held result in the slot, and freed it */
const bit<32> EVENTS = 6;
const bit<32> NO_EVENT = 8;

/* The stateful ALUs' 4-bit predicate output (bf-p4c's encoding, which the v1model emulation
 * copies): bit (2 * cmphi + cmplo) is set. No register action's two comparisons can both hold
 * (slots.p4), so one bit answers each. */
const bit<4> PRED_LO = 4w0b0010;  /* the low comparison held (and the high one not) */
const bit<4> PRED_HI = 4w0b0100;  /* the high comparison held (and the low one not) */
const bit<4> PRED_BOTH = 4w0b1000;  /* both held (only key_id_copy's claim-pass swap can answer it) */

/* atp (docs/protocol.md, section 5): a completed chunk's slot stays held, its RESULT flagged
 * HOLD to the PS alone, until the PS returns that RESULT (a release) or, at a leaf, the spine's RESULT passes
 * down; either frees the slot if it still holds that result, and goes on to the workers. A held result is a
 * `missing` of HELD, 0x80000000, which the control plane writes (ina.p4.entries.HELD): no worker's bit (the controller takes jobs of 2..31 workers under atp), so the job's
 * packets meet a chunk every worker is in (a duplicate, a RESEND's flush, a stale partial), another job's
 * a collision, and a PARTIAL of it carries the full bitmap. (A one-worker chunk evicting its job's held
 * result would owe two packets, the PARTIAL and its own held RESULT, where a pass sends one.) */

/* How the switch serves a job (docs/protocol.md, section 10; racks.p4) */
const bit<2> ROLE_ONLY = 0;
const bit<2> ROLE_LEAF = 1;
const bit<2> ROLE_SPINE = 2;
/* the level table's entries: a racked job's, atp's jobs' (ina.p4.entries.LEVEL_ENTRIES) */
#ifndef LEVEL_ENTRIES
#define LEVEL_ENTRIES 1024
#endif

struct ina_meta_t {
    /* from the architecture (the top-level program fills these before the shared controls run) */
    bit<1>  parser_error;    /* the parser rejected the frame */
    bit<1>  truncated;       /* shorter than its IPv4 total length (v1model; the TNA parser rejects it) */
    bit<32> now;             /* a timestamp for `touched` */
    bit<9>  in_port;         /* the ingress port */
    bit<16> egress_rid;      /* egress: the replica id of a multicast copy */
    bit<9>  out_port;        /* egress: the port it leaves by */

    /* to the architecture (the top-level program applies these) */
    bit<1>  drop;
    bit<9>  egress_port;
    bit<16> mcast_group;
    bit<3>  queue;           /* the egress queue (by priority under the queues setting; else 0) */

    bit<1>  is_ina;          /* UDP to INA_PORT (on v1model: and to the switch's own address, identity.p4) */
    bit<1>  from_cpu;        /* a packet-out from the control plane (table ina_cpu_ports) */
    bit<16> expected_udp_len;
    bit<16> ip_udp_gap;      /* IPv4 total length - UDP length: the IPv4 header's 20 */
    bit<1>  rank_ok;         /* DATA: bitmap == 1 << rank < 2^32 (table ina_ranks) */

    /* the job table */
    bit<32> full;            /* 2^n - 1 */
#ifdef INA_TESTGEN
    bit<16> span_mask;       /* what the assumptions of p4testgen's cases check */
    bit<16> neg_slot_base;
#endif
    bit<8>  fanin;           /* n */
    bit<8>  lane_bits;
    bit<1>  from_ps;         /* from the job's PS (table ina_sources) */
    bit<1>  from_up;         /* from where the job's RESULTs come: its spine at a leaf, else its PS */
    bit<1>  job_known;       /* the job table holds (job, op) */
    bit<1>  worker_known;    /* DATA: the worker table holds (job, rank, source) */
    bit<SLOT_BITS> slot_offset;  /* slot - slot_base (mod P): must equal seq mod span */
    bit<16> seq_offset;      /* seq mod span */
    bit<8>  prio;            /* min(priority, priority_cap) */
    bit<8>  priority_cap;
    bit<8>  prio_gap;        /* priority_cap - priority, saturating at 0 (0: at or over the cap) */
    bit<32> rest;            /* full & ~bitmap: the claim's missing bitmap (DATA), the swept partial's (SWEEP) */
    bit<32> claim_bitmap;    /* what `missing` becomes on a claim (rest) or a flush (0) */

    /* the switch's own settings */
    bit<32> switch_ip;
    bit<48> switch_mac;
    bit<1>  esa;
    bit<32> held_missing;    /* what `missing` becomes as a chunk completes: HELD under atp, else 0 (free) */
    bit<1>  passing_on;      /* a RESULT passed on to the job's workers: a release (from the PS) or a leaf's descent */
    bit<1>  priority_queues; /* the egress queues by priority (else one FIFO a port), whatever the policy */

    /* the packet as the slot sees it */
    bit<16> slot;            /* register index */
    bit<32> key_id;          /* KEY_VALID | op | job */
    bit<32> key_id_other_op; /* this job's key id of the other operation */
    bit<1>  op_max;
    bit<1>  first;           /* not a RESEND */
    bit<1>  data_first;      /* a DATA on its first pass */
    bit<1>  flushing;        /* a FLUSH, a SWEEP, or a RESEND's flush pass */
    bit<1>  sweep;           /* a SWEEP */
    bit<1>  claim_pass;      /* the claim pass */

    /* what the registers answered */
    bit<4>  redirect_id_pred;   /* redirect_id is this key id (PRED_LO) */
    bit<4>  redirect_seq_pred;  /* redirect_seq is this seq (PRED_LO) */
    bit<32> old_id;          /* key_id */
    bit<4>  id_pred;         /* key_id is this key id (PRED_LO); claim pass: the expected one (PRED_LO), this key id
                                unexpected (PRED_HI: another worker's claim pass of this chunk went first), both */
    bit<32> other_op_diff;   /* old_id xor this job's key id of the other operation */
    bit<32> old_seq;         /* key_seq */
    bit<4>  seq_pred;        /* this chunk is newer (lo), the same seq (hi) */
    bit<1>  touching;        /* the slot's key id met on the first pass or the claim pass: `touched` takes the time */
    bit<32> old_missing;     /* the bitmap of missing workers before this packet, or (PATH_SAME) its bit */
    bit<4>  missing_pred;    /* free (PRED_LO); PATH_SAME: this worker the last missing (PRED_HI) */
    bit<4>  prio_lower;      /* the slot's chunk has the lower priority (PRED_LO) */
    bit<8>  old_prio;

    /* decisions */
    bit<8>  path;
    bit<8>  slot_action;
    bit<8>  output;
    bit<32> outcome;
    bit<32> event;
    bit<32> redirect_id;     /* what a redirect write stores */
    bit<32> redirect_seq;

    /* the evicted partial: its key and its job's PS */
    bit<32> partial_id;
    bit<32> partial_seq;
    bit<32> partial_full;
    bit<8>  partial_lanes;
    bit<32> partial_missing; /* the workers the PARTIAL lacks */
    bit<32> victim_ps_ip;    /* a claim pass: the PS of the slot's job (table ina_victims) */
    bit<16> victim_ps_port;

    /* where a unicast packet goes: its job's PS (set by the job table), or a claimed partial's */
    bit<32> dst_ip;
    bit<16> dst_port;

    /* the egress queue (by priority) of the packet's priority as it arrived, and of the slot's */
    bit<3>  in_queue;
    bit<3>  old_queue;

    /* the job's role here (racks.p4) */
    bit<2>  role;            /* ROLE_* */
    bit<8>  rack;            /* a leaf: its rack, the rank its sums go up with */
    bit<32> rack_bit;        /* 1 << rack: its bit in the spine bitmap (no shift by a field on Tofino) */
    bit<32> spine_ip;        /* a leaf: where its sums go up */
    bit<16> spine_port;
    bit<9>  spine_egress;    /* ... and its route: the port and the next hop's MAC */
    bit<48> spine_mac;
    bit<8>  level_flags;     /* FLAG_SPINE at the job's spine: its PARTIALs and RESULTs carry it */
    bit<8>  victim_flags;    /* the same for a claim pass's victim's job */
    bit<8>  partial_flags;   /* ... and for the PARTIAL that leaves */
    bit<1>  descend;         /* a leaf: a RESULT of the job, to pass down */
    bit<1>  misleveled;      /* a DATA or RESULT of the wrong level, or a release not flagged HOLD with every
                              * worker's bitmap: bad_format */
    bit<8>  up_prio;         /* the slot's priority once this packet is in it: a leaf's sum goes up with it */
    bit<3>  up_queue;        /* its egress queue */

#ifndef INA_CARRY_HEADER
    INA_CARRIED_FIELDS(@field_list(1))
    INA_WORD_PASS_FIELDS(@field_list(1))
#endif
}

#endif
