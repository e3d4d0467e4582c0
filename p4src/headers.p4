/* ina: constants and headers of docs/protocol.md (section 2), shared by every P4 target.
 *
 * Compile-time parameters (set with -D by `ina p4 build`):
 *   POOL           aggregator slots P, a power of two (default 64)
 *   WORDS          32-bit payload words per packet K, 1..256 (default 64; on Tofino 1 at most three
 *                  passes' words, ina_tna.p4)
 *
 * A program whose passes step at most INA_WORD_GROUP words (ina_tna.p4 defines it; on v1model
 * `ina p4 build --word-group`, to run the word passes on BMv2) steps a larger K in groups of that
 * many, one group a pass (docs/p4.md, "Word passes").
 */
#ifndef INA_HEADERS_P4
#define INA_HEADERS_P4

#ifndef POOL
#define POOL 64
#endif
#ifndef WORDS
#define WORDS 64
#endif
#if WORDS < 1 || WORDS > 256
#error "WORDS (K) must be in 1..256"
#endif
#if (POOL & (POOL - 1)) != 0 || POOL < 1 || POOL > 65536
#error "POOL (P) must be a power of two in 1..65536"
#endif

const bit<16> POOL_MASK = POOL - 1;
/* log2(P), at least 1: the width the slot arithmetic wraps at */
#if POOL <= 2
#define SLOT_BITS 1
#elif POOL == 4
#define SLOT_BITS 2
#elif POOL == 8
#define SLOT_BITS 3
#elif POOL == 16
#define SLOT_BITS 4
#elif POOL == 32
#define SLOT_BITS 5
#elif POOL == 64
#define SLOT_BITS 6
#elif POOL == 128
#define SLOT_BITS 7
#elif POOL == 256
#define SLOT_BITS 8
#elif POOL == 512
#define SLOT_BITS 9
#elif POOL == 1024
#define SLOT_BITS 10
#elif POOL == 2048
#define SLOT_BITS 11
#elif POOL == 4096
#define SLOT_BITS 12
#elif POOL == 8192
#define SLOT_BITS 13
#elif POOL == 16384
#define SLOT_BITS 14
#elif POOL == 32768
#define SLOT_BITS 15
#else
#define SLOT_BITS 16
#endif
const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_UDP = 17;
const bit<16> INA_PORT = 47100;
const bit<8>  INA_MAGIC = 0xA7;
const bit<8>  INA_VERSION = 1;
const bit<16> INA_HEADER_LEN = 20;
const bit<16> UDP_HEADER_LEN = 8;
const bit<16> IPV4_HEADER_LEN = 20;
const bit<16> LANES_UDP_LEN = UDP_HEADER_LEN + INA_HEADER_LEN + 4 * WORDS;

const bit<8> KIND_DATA = 1;
const bit<8> KIND_RESULT = 2;
const bit<8> KIND_PARTIAL = 3;
const bit<8> KIND_FLUSH = 4;
const bit<8> KIND_STATUS = 5;
const bit<8> KIND_FETCH = 6;
const bit<8> KIND_SWEEP = 7;

/* FLAG_RESEND is bit 0 (0x01): the switch reads it as hdr.ina.flags[0:0] */
/* FLAG_MAX is bit 1 (0x02): hdr.ina.flags[1:1], the key's operation bit */
const bit<8> FLAG_MAX_BIT = 0x02;
/* FLAG_HOLD is bit 2 (0x04): atp's held RESULT, to the PS and back (metadata.p4) */
const bit<8> FLAG_HOLD = 0x04;
/* FLAG_SPINE is bit 3 (0x08): a racked job's spine level (racks.p4) */
const bit<8> FLAG_SPINE = 0x08;
const bit<8> KNOWN_FLAGS = 0x0F;

/* A chunk key as the slot registers hold it: a valid bit (bit 17, so that 0 is "no key"), the
 * operation bit (bit 16, set for MAX) and the job id. The sequence number lives in a register of its
 * own. */

header ethernet_h {
    bit<48> dst;
    bit<48> src;
    bit<16> ether_type;
}

header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> checksum;
    bit<32> src;
    bit<32> dst;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

/* The 20-byte ina header (docs/protocol.md, section 2). */
header ina_h {
    bit<8>  magic;
    bit<8>  version;
    bit<8>  kind;
    bit<8>  flags;
    bit<16> job;
    bit<8>  rank;
    bit<8>  priority;
    bit<32> seq;
    bit<16> slot;
    bit<8>  index_bits;
    bit<8>  lane_bits;
    bit<32> bitmap;
}

#if defined(INA_WORD_GROUP) && WORDS > INA_WORD_GROUP
/* `words` holds the group a pass steps. The deciding pass parses the later groups into `after1` and
 * `after2` (a DATA shorter than its K words is a parser error there, before any word is stepped); a
 * word pass parses the groups before its own into `before1` and `before2` and leaves those after it
 * as payload, so that the frame leaves every pass with its words in their order. Each holds at most
 * a group, as `words` does. */
#define INA_WORD_PASSES
#define WORD_GROUPS ((WORDS + INA_WORD_GROUP - 1) / INA_WORD_GROUP)
#define LAST_GROUP_WORDS (WORDS - (WORD_GROUPS - 1) * INA_WORD_GROUP)
#define STEP_WORDS INA_WORD_GROUP
#if WORD_GROUPS == 3
#define AFTER1_WORDS INA_WORD_GROUP  /* after the first group: the second, then the third in after2 */
#else
#define AFTER1_WORDS LAST_GROUP_WORDS
#endif
#if WORD_GROUPS > 3
#error "WORDS (K) must be at most three passes' words (3 * INA_WORD_GROUP): the ingress parser takes about 256 bytes of words"
#endif
#if WORD_GROUPS * POOL > 65536
#error "POOL (P) times the word passes must be at most 65536: a word register holds every group's words, P apart"
#endif
#if defined(INA_WIDE_WORDS) && WORDS % INA_WORD_GROUP != 0
#error "WORDS (K) must be a multiple of INA_WORD_GROUP on v1model: each group is one field as wide as a pass's words"
#endif
#define WORD_CELLS (POOL * WORD_GROUPS)  /* a word register's cells: every group's, P apart */
#else
#define WORD_GROUPS 1
#define STEP_WORDS WORDS
#define WORD_CELLS POOL
#endif

#ifdef INA_WIDE_WORDS
/* BMv2 pays for a primitive per field, about the same whatever its width: the K words (a group's,
 * with word passes) as one field, so that a packet's words cost one extract, one register access and
 * a few lane-wise operations (values.p4), not K of each. Word 0 is the field's most significant 32
 * bits, as on the wire. */
typedef bit<(STEP_WORDS * 32)> words_t;
header words_h {
    words_t value;
}

/* The controller's read of a slot's words, answered to the CPU port with the words after it: BMv2's
 * Thrift reads at most 64 bits of a register entry. A frame of this EtherType from the CPU port. */
const bit<16> ETHERTYPE_INA_PEEK = 0x88B5;  /* IEEE 802 local experimental */
header peek_h {
    bit<16> slot;
}
#define INA_WORDS_TYPE words_h
#define INA_GROUP_TYPE(n) words_h  /* every group as wide as a pass's words (K a multiple of them) */
#else
header word_h {
    bit<32> value;
}
#define INA_WORDS_TYPE word_h[STEP_WORDS]
#define INA_GROUP_TYPE(n) word_h[n]
#endif

/* What a later pass, or the egress, must know of a packet (docs/p4.md, "Passes"). On TNA it travels
 * as a header in front of the frame; on v1model in metadata that recirculation preserves. */
#define INA_CARRIED_FIELDS(ANNOTATION) \
    ANNOTATION bit<8>  pass;          /* PASS_*: which pass the packet is on next */ \
    ANNOTATION bit<8>  claim_kind;    /* PASS_CLAIM: CLAIM_* */ \
    ANNOTATION bit<32> expect_id;     /* PASS_CLAIM: the key the first pass saw in the slot */ \
    ANNOTATION bit<32> expect_seq; \
    ANNOTATION bit<16> group;         /* the job's multicast group (the egress's replica table) */ \
    ANNOTATION bit<8>  out_kind;      /* OUT_*: what leaves */ \
    ANNOTATION bit<7>  from_pad;      /* from_port as the parser reads it, in the low bits of 16 */ \
    ANNOTATION bit<9>  from_port;     /* the port the frame came in by (Ethernet flooding): the parser's */

#define INA_NO_ANNOTATION

#ifdef INA_WORD_PASSES
/* A word pass's: which group, with what step, and what leaves after the last (word_passes.p4). */
#define INA_WORD_PASS_FIELDS(ANNOTATION) \
    ANNOTATION bit<8>  word_group;    /* PASS_WORDS: the group this pass steps (1 .. WORD_GROUPS - 1) */ \
    ANNOTATION bit<8>  word_step;     /* the slot action (SLOT_*) the deciding pass chose */ \
    ANNOTATION bit<16> word_index;    /* the group's register index: slot + group * POOL */ \
    ANNOTATION bit<8>  groups_absent; /* 1: the frame ends before this pass's group (a FLUSH's or SWEEP's: each pass adds its own) */ \
    ANNOTATION bit<8>  final_kind;    /* OUT_*: what the deciding pass sends, once the last group is stepped */ \
    ANNOTATION bit<8>  final_drop; \
    ANNOTATION bit<16> final_port; \
    ANNOTATION bit<8>  final_queue;
#else
#define INA_WORD_PASS_FIELDS(ANNOTATION)
#endif

#ifdef INA_CARRY_HEADER
header ina_bridge_h {
    INA_CARRIED_FIELDS(INA_NO_ANNOTATION)
    INA_WORD_PASS_FIELDS(INA_NO_ANNOTATION)
}
#define CARRY hdr.bridge
#else
#define CARRY meta
#endif

struct headers_t {
#ifdef INA_CARRY_HEADER
    ina_bridge_h bridge;
#endif
    ethernet_h ethernet;
#ifdef INA_WIDE_WORDS
    peek_h peek;
#endif
    ipv4_h ipv4;
    udp_h udp;
    ina_h ina;
#ifdef INA_WORD_PASSES
    INA_GROUP_TYPE(INA_WORD_GROUP) before1;
#if WORD_GROUPS == 3
    INA_GROUP_TYPE(INA_WORD_GROUP) before2;
#endif
#endif
    INA_WORDS_TYPE words;
#ifdef INA_WORD_PASSES
    INA_GROUP_TYPE(AFTER1_WORDS) after1;
#if WORD_GROUPS == 3
    INA_GROUP_TYPE(LAST_GROUP_WORDS) after2;
#endif
#endif
}

#endif
