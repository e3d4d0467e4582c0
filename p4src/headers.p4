/* ina: constants and headers of docs/protocol.md (section 2), shared by every P4 target.
 *
 * Compile-time parameters (set with -D by `ina p4 build`):
 *   POOL   aggregator slots P, a power of two (default 64)
 *   WORDS  32-bit payload words per packet K, 1..256 (default 64)
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

const bit<8> FLAG_RESEND = 0x01;
const bit<8> FLAG_MAX = 0x02;
const bit<8> KNOWN_FLAGS = 0x03;

/* A chunk key as the slot registers hold it: valid bit, operation bit, job id.
 * The sequence number lives in a register of its own (docs/p4.md). */
const bit<32> KEY_VALID = 0x00020000;
const bit<32> KEY_MAX = 0x00010000;

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

header word_h {
    bit<32> value;
}

struct headers_t {
    ethernet_h ethernet;
    ipv4_h ipv4;
    udp_h udp;
    ina_h ina;
    word_h[WORDS] words;
}

#endif
