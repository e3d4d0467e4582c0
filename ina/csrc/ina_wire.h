/* The packet header of docs/protocol.md, section 2, for the native packet paths.
 *
 * Shared by the native worker engine, PS and software switch (header-only: each extension
 * compiles its own copy). The checks are those of ina/protocol/header.py's `parse`, split in two
 * because a PS-only job may use its own words per packet: `ina_parse_header` checks everything
 * but the length, `ina_length_ok` the length for a given K (a chunk of 1..K words).
 */
#ifndef INA_WIRE_H
#define INA_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define INA_MAGIC 0xA7
#define INA_VERSION 1
#define INA_HEADER_BYTES 20
#define INA_MAX_WORKERS 32
#define INA_MAX_INDEX_BITS 8
#define INA_KNOWN_FLAGS 0x0Fu
#define INA_SEQ_MASK 0xFFFFFFFFu

enum ina_kind { INA_DATA = 1, INA_RESULT = 2, INA_PARTIAL = 3, INA_FLUSH = 4, INA_STATUS = 5, INA_FETCH = 6, INA_SWEEP = 7 };
enum ina_flag { INA_FLAG_RESEND = 0x01, INA_FLAG_MAX = 0x02, INA_FLAG_HOLD = 0x04, INA_FLAG_SPINE = 0x08 };

typedef struct {
    uint8_t kind, flags, rank, priority, index_bits, lane_bits;
    uint16_t job, slot;
    uint32_t seq, bitmap;
} ina_header;

static inline uint32_t ina_load32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void ina_store32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static inline uint16_t ina_load16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static inline void ina_store16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v; }

/* Big-endian 32-bit words to and from host order, a whole word at a time (a byte swap, or
 * nothing on a big-endian host). */
static inline uint32_t ina_be32(uint32_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return v;
#else
    return __builtin_bswap32(v);
#endif
}

/* Baseline x86-64 has no byte shuffle, so compilers leave a word swap loop scalar (one word per
 * step); clones for SSSE3 and AVX2, picked at load time, shuffle 16 or 32 bytes per step. Other
 * targets' baselines vectorize the loop as it is. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define INA_WORD_COPY __attribute__((target_clones("avx2", "ssse3", "default"), unused)) static
#else
#define INA_WORD_COPY static inline
#endif

/* Payload words (big-endian on the wire) to and from host-order uint32; the two never overlap. */
INA_WORD_COPY void ina_load_words(uint32_t *restrict dst, const uint8_t *restrict src, size_t words) {
    for (size_t i = 0; i < words; i++) {
        uint32_t v;
        memcpy(&v, src + 4 * i, 4);
        dst[i] = ina_be32(v);
    }
}

INA_WORD_COPY void ina_store_words(uint8_t *restrict dst, const uint32_t *restrict src, size_t words) {
    for (size_t i = 0; i < words; i++) {
        uint32_t v = ina_be32(src[i]);
        memcpy(dst + 4 * i, &v, 4);
    }
}

static inline int ina_lane_width_ok(unsigned width) { return width == 8 || width == 16 || width == 32; }

/* Payload words of a RESULT/PARTIAL for a chunk of `words` DATA words (protocol.md, section 2). */
static inline uint32_t ina_result_words(uint32_t words, unsigned index_bits, unsigned lane_bits) {
    if (index_bits == 0) return words;
    uint64_t coordinates = (uint64_t)words * (32 / index_bits);
    unsigned per_word = 32 / lane_bits;
    return (uint32_t)((coordinates + per_word - 1) / per_word);
}

/* The DATA words of the chunk a packet of `kind` with `payload` words carries (header.py's chunk_words): a
 * DATA's own payload, the m whose RESULT or PARTIAL is `payload` words; 0 where no chunk has that length and
 * for the kinds without payload. Indices are at least as dense as lanes, so at most one m fits: the most
 * index words whose lanes fit `payload` words, if their lanes fill them exactly. */
static inline uint32_t ina_chunk_words(unsigned kind, uint32_t payload, unsigned index_bits, unsigned lane_bits) {
    if (kind == INA_DATA || (index_bits == 0 && (kind == INA_RESULT || kind == INA_PARTIAL))) return payload;
    if (kind != INA_RESULT && kind != INA_PARTIAL) return 0;
    uint32_t words = (uint32_t)((uint64_t)payload * (32 / lane_bits) / (32 / index_bits));
    return ina_result_words(words, index_bits, lane_bits) == payload ? words : 0;
}

/* Decode the header of a `len`-byte packet and check every rule of section 2 but its length:
 * 1 if it holds, 0 if the packet is malformed (h is then unspecified). */
static inline int ina_parse_header(const uint8_t *p, size_t len, ina_header *h) {
    if (len < INA_HEADER_BYTES || p[0] != INA_MAGIC || p[1] != INA_VERSION) return 0;
    h->kind = p[2], h->flags = p[3], h->job = ina_load16(p + 4), h->rank = p[6], h->priority = p[7];
    h->seq = ina_load32(p + 8), h->slot = ina_load16(p + 12), h->index_bits = p[14], h->lane_bits = p[15];
    h->bitmap = ina_load32(p + 16);
    if (h->kind < INA_DATA || h->kind > INA_SWEEP || (h->flags & ~INA_KNOWN_FLAGS)) return 0;
    if (!ina_lane_width_ok(h->lane_bits) || h->index_bits > INA_MAX_INDEX_BITS) return 0;
    if (h->kind == INA_DATA && (h->rank >= INA_MAX_WORKERS || h->bitmap != (uint32_t)1 << h->rank)) return 0;
    return 1;
}

/* Whether a parsed packet of `len` bytes has a payload its kind may carry where K is `words`
 * (header.py's length_ok): whole words of a chunk of 1..K DATA words, or none for the kinds without payload. */
static inline int ina_length_ok(const ina_header *h, size_t len, uint32_t words) {
    size_t payload = len - INA_HEADER_BYTES; /* ina_parse_header checked len >= the header */
    if (payload % 4 || payload / 4 > UINT32_MAX) return 0;
    if (h->kind != INA_DATA && h->kind != INA_RESULT && h->kind != INA_PARTIAL) return payload == 0;
    uint32_t chunk = ina_chunk_words(h->kind, (uint32_t)(payload / 4), h->index_bits, h->lane_bits);
    return chunk >= 1 && chunk <= words;
}

/* The DATA words of the chunk a valid packet of `len` bytes carries. */
static inline uint32_t ina_packet_chunk(const ina_header *h, size_t len) {
    return ina_chunk_words(h->kind, (uint32_t)((len - INA_HEADER_BYTES) / 4), h->index_bits, h->lane_bits);
}

/* Both checks: what `ina.protocol.header.parse` accepts for a deployment of `words` per packet. */
static inline int ina_parse(const uint8_t *p, size_t len, uint32_t words, ina_header *h) {
    return ina_parse_header(p, len, h) && ina_length_ok(h, len, words);
}

static inline void ina_write_header(uint8_t *p, const ina_header *h) {
    p[0] = INA_MAGIC, p[1] = INA_VERSION, p[2] = h->kind, p[3] = h->flags;
    ina_store16(p + 4, h->job), p[6] = h->rank, p[7] = h->priority;
    ina_store32(p + 8, h->seq), ina_store16(p + 12, h->slot), p[14] = h->index_bits, p[15] = h->lane_bits;
    ina_store32(p + 16, h->bitmap);
}

#endif
