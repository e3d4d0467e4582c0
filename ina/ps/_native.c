/* The parameter server's data plane in C (docs/protocol.md, section 6): the twin of
 * ina/ps/core.py with job.py, pieces.py, lookup.py and results.py, packet for packet.
 *
 * It keeps per job the incomplete chunks (their pieces, merged by exact cover), the ring of
 * recent results (packets as sent or received), the fetches in progress and the newest seq; and
 * one heap of FLUSH timers. Every output packet, its destination and its place in the output are
 * those of the Python PS, and so are the counters. The control plane (registration checks,
 * policy) stays in Python (ina/ps/native.py), which hands each admitted job to `register`.
 * Malformed or hostile packets are dropped and counted; nothing here trusts a length or a field.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ina_wire.h"
#include "ina_udp.h"
#include "ina_heap.h"
#include "ina_pynode.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the index lookup writes lanes as a little-endian byte stream"
#endif

/* The counters, in the order of ina.ps.core.COUNTERS. */
#define PS_COUNTERS(X)                                                                                                   \
    X(rx) X(tx) X(rx_data) X(rx_partial) X(rx_result) X(pieces) X(completed) X(results_replayed) X(result_copies)       \
    X(results_returned) X(status_sent) X(flush_sent) X(fetch_sent) X(fetched) X(malformed) X(unexpected)               \
    X(unregistered) X(bad_format) X(bad_bitmap) X(mismatch) X(duplicate) X(late) X(stale) X(unsolicited) X(overloaded) \
    X(expired) X(retired) X(superseded)
#define PS_ENUM(name) C_##name,
#define PS_NAME(name) #name,
enum { PS_COUNTERS(PS_ENUM) C_COUNT };
static const char *const counter_names[] = {PS_COUNTERS(PS_NAME)};

#define FLUSH_CAP 1.0 /* longest wait between two FLUSH requests for one chunk, seconds */
#define MAX_RACKS 32  /* ina.protocol.constants.MAX_RACKS: a racked job's bitmaps have at most this many words */
#define ACCEPTED -1   /* piece_bitmap: the piece is the job's, else the counter that refuses it */
#define HALF_SEQ 0x80000000u

/* ------------------------------------------------------------------ ordered seq maps */

/* seq -> entry (0..cap-1), in insertion order: the Python PS's OrderedDicts keyed by seq. */
typedef struct {
    uint32_t cap, count, mask;
    uint32_t *key;
    int32_t *prev, *next, *table;
    int32_t head, tail, free;
} seqmap;

static uint32_t seq_hash(const seqmap *m, uint32_t seq) { return (seq * 0x9E3779B1u) & m->mask; }

static int seqmap_init(seqmap *m, uint32_t cap) {
    memset(m, 0, sizeof *m);
    uint32_t size = 8;
    while (size < 2 * cap) size *= 2;
    m->cap = cap, m->mask = size - 1, m->head = m->tail = -1, m->free = 0;
    m->key = calloc(cap, sizeof *m->key), m->prev = calloc(cap, sizeof *m->prev), m->next = calloc(cap, sizeof *m->next);
    m->table = malloc(size * sizeof *m->table);
    if (!m->key || !m->prev || !m->next || !m->table) return -1;
    for (uint32_t i = 0; i < size; i++) m->table[i] = -1;
    for (uint32_t i = 0; i < cap; i++) m->next[i] = i + 1 < cap ? (int32_t)i + 1 : -1;
    return 0;
}

static void seqmap_free(seqmap *m) { free(m->key), free(m->prev), free(m->next), free(m->table); }

static int32_t seqmap_find(const seqmap *m, uint32_t seq) {
    for (uint32_t i = seq_hash(m, seq);; i = (i + 1) & m->mask) {
        int32_t e = m->table[i];
        if (e < 0 || m->key[e] == seq) return e;
    }
}

/* Add `seq` (absent, count < cap) as the newest entry. */
static int32_t seqmap_insert(seqmap *m, uint32_t seq) {
    int32_t e = m->free;
    m->free = m->next[e];
    m->key[e] = seq, m->prev[e] = m->tail, m->next[e] = -1;
    if (m->tail >= 0) m->next[m->tail] = e; else m->head = e;
    m->tail = e;
    uint32_t i = seq_hash(m, seq);
    while (m->table[i] >= 0) i = (i + 1) & m->mask;
    m->table[i] = e;
    m->count++;
    return e;
}

static void seqmap_remove(seqmap *m, int32_t e) {
    if (m->prev[e] >= 0) m->next[m->prev[e]] = m->next[e]; else m->head = m->next[e];
    if (m->next[e] >= 0) m->prev[m->next[e]] = m->prev[e]; else m->tail = m->prev[e];
    uint32_t i = seq_hash(m, m->key[e]);
    while (m->table[i] != e) i = (i + 1) & m->mask;
    for (uint32_t j = i;;) { /* backward-shift deletion keeps every probe chain whole */
        j = (j + 1) & m->mask;
        int32_t moved = m->table[j];
        if (moved < 0) break;
        uint32_t home = seq_hash(m, m->key[moved]);
        if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) m->table[i] = moved, i = j;
    }
    m->table[i] = -1;
    m->next[e] = m->free, m->free = e;
    m->count--;
}

/* ------------------------------------------------------------------ per job */

/* What every piece of a chunk agrees on (job.py's ChunkFormat), its DATA words included. */
typedef struct {
    uint8_t flags, index_bits, lane_bits; /* flags: INA_FLAG_MAX or 0 */
    uint16_t slot;
    uint32_t words;
} chunk_format;

/* The format of a valid packet of `length` bytes (words 0 for the kinds without payload). */
static chunk_format format_of(const ina_header *h, size_t length) {
    return (chunk_format){(uint8_t)(h->flags & INA_FLAG_MAX), h->index_bits, h->lane_bits, h->slot, ina_packet_chunk(h, length)};
}

static int format_eq(chunk_format a, chunk_format b) {
    return a.flags == b.flags && a.index_bits == b.index_bits && a.lane_bits == b.lane_bits && a.slot == b.slot &&
           a.words == b.words;
}

/* An incomplete chunk: its pieces (pieces.py) and FLUSH timer (job.py's Chunk). Bitmaps are the job's
 * `nw` words each (see job). */
typedef struct {
    chunk_format format;
    uint32_t words; /* payload words of its pieces */
    double created, flush_at, flush_interval;
    uint32_t generation; /* changes when the chunk dies: its heap entries are then void */
    uint32_t count, room; /* room: bitmaps allocated */
    size_t sums_room;     /* words allocated in sums */
    int disjoint;
    uint32_t *bitmaps;        /* count * nw, in arrival order */
    uint32_t *sums;           /* count * words, host order */
    uint32_t held[MAX_RACKS]; /* the union of its pieces' bitmaps (nw words used; last, to keep the rest in one cache line) */
} chunk;

typedef struct {
    int is_max;
    uint32_t length, room;
    uint8_t *packet;
} stored;

typedef struct {
    chunk_format format;
    int sent;
    double sent_at;
} fetch;

/* THC indices to lanes (lookup.py): groups of `group` indices of a word, each an entry of `entry` lane bytes
 * (a table of at most LOOKUP_BYTES, so that it stays in cache). */
typedef struct {
    unsigned index_bits, group, groups, entry;
    uint32_t mask;
    uint8_t *entries;
    int nibbles;        /* 4-bit indices, 8-bit lanes, and the CPU has AVX2: lookup_nibbles */
    uint8_t levels[16]; /* its table */
} lookup;

/* A job. Its pieces' bitmaps are `nw` words: a job of one switch has one, its ranks; a racked job
 * (docs/protocol.md, section 10) one per rack, word r bit l for worker l of rack r (the wide bitmaps of
 * job.py's Racks, bit 32 r + l). Its workers are numbered by their place in the registration, rack by rack. */
typedef struct {
    uint16_t id;
    uint32_t words, n, window, cap;
    uint32_t nw, full[MAX_RACKS]; /* every worker, as the pieces name them */
    uint32_t result_bitmap;       /* what every RESULT of the job carries: every rank, or every rack */
    uint8_t result_flags;         /* INA_FLAG_SPINE in a racked job */
    uint8_t lane_bits;
    uint32_t piece_cap;           /* pieces a chunk may hold beyond single workers' */
    ina_addr *workers;            /* n, rack by rack */
    uint16_t *bit;                /* each worker's bit in the pieces' bitmaps: 32 * rack + rank in the rack */
    uint32_t nracks;              /* 0: a job of one switch */
    uint32_t sizes[MAX_RACKS], offsets[MAX_RACKS];
    ina_addr leaves[MAX_RACKS];
    int has_switch;
    ina_addr sw; /* the job's switch: its only one, or its spine */
    int has_group; /* RESULTs made here go once to `group`, else to every worker */
    ina_addr group;
    int has_table;
    lookup table;
    seqmap pending, ring, fetches;
    chunk *chunks;
    stored *results;
    fetch *fetchv;
    uint32_t nreq;         /* words of a fetch's requesters, one bit per worker */
    uint32_t *requesters;  /* cap * nreq: the workers that resent each fetched chunk */
    int has_newest;
    uint32_t newest;
    uint32_t *scratch; /* a result's sums */
    uint8_t *packet;   /* one RESULT being built */
    uint64_t completed, switch_completed; /* chunks completed here, and at the switch (its RESULT copies) */
} job;

#define LOOKUP_BYTES (256u << 10)

static int lookup_init(lookup *t, const uint32_t *table, unsigned index_bits, unsigned lane_bits) {
    unsigned per_word = 32 / index_bits, group = 1;
    for (unsigned g = 1; g <= per_word; g++) /* the largest group whose table stays in L2 */
        if (per_word % g == 0 && g * index_bits <= 16 && ((size_t)g * lane_bits / 8 << (g * index_bits)) <= LOOKUP_BYTES) group = g;
    t->index_bits = index_bits, t->group = group, t->groups = per_word / group;
    t->entry = group * lane_bits / 8, t->mask = (1u << (group * index_bits)) - 1;
    t->entries = malloc((size_t)(t->mask + 1) * t->entry);
    if (!t->entries) return -1;
#if defined(__x86_64__)
    t->nibbles = index_bits == 4 && lane_bits == 8 && __builtin_cpu_supports("avx2");
    for (unsigned i = 0; i < 16 && index_bits == 4; i++) t->levels[i] = (uint8_t)table[i];
#endif
    for (uint32_t code = 0; code <= t->mask; code++) {
        uint8_t *e = t->entries + (size_t)code * t->entry;
        for (unsigned k = 0; k < group; k++) {
            uint32_t value = table[(code >> (k * index_bits)) & ((1u << index_bits) - 1)];
            for (unsigned b = 0; b < lane_bits / 8; b++) e[k * lane_bits / 8 + b] = (uint8_t)(value >> (8 * b));
        }
    }
    return 0;
}

#define LOOKUP_RUN(E)                                                                                                    \
    for (uint32_t w = 0; w < words; w++) {                                                                            \
        uint32_t v = ina_load32(payload + 4 * w);                                                                     \
        for (unsigned g = 0; g < t->groups; g++, o += (E))                                                              \
            memcpy(o, t->entries + (size_t)((v >> (g * shift)) & t->mask) * (E), (E));                                 \
    }

#if defined(__x86_64__)
#include <immintrin.h>

/* 4-bit indices into 8-bit lanes, 16 levels: one byte shuffle looks up 32 indices at once. Each
 * big-endian word's bytes are reversed first; index 2k of a word is the low nibble of its byte k.
 * The lanes of the 8 words at `payload`: the first 32 in `*first`, the next 32 in `*second`. */
__attribute__((target("avx2"))) static inline void nibble_lanes(__m256i table, const uint8_t *payload, __m256i *first,
                                                                 __m256i *second) {
    const __m256i reverse = _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12,
                                             3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256i x = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)payload), reverse);
    __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(x, low));
    __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(x, 4), low));
    /* Interleaving works within each 16-byte half: words 0-1 and 4-5, then 2-3 and 6-7. */
    __m256i a = _mm256_unpacklo_epi8(lo, hi), b = _mm256_unpackhi_epi8(lo, hi);
    *first = _mm256_permute2x128_si256(a, b, 0x20), *second = _mm256_permute2x128_si256(a, b, 0x31);
}

/* The lanes of whole groups of 8 index words stored at `o`: the words done. */
__attribute__((target("avx2"))) static uint32_t lookup_nibbles(const uint8_t *levels, const uint8_t *payload, uint32_t words,
                                                                uint8_t *o) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)levels));
    uint32_t w = 0;
    for (; w + 8 <= words; w += 8, o += 64) {
        __m256i first, second;
        nibble_lanes(table, payload + 4 * w, &first, &second);
        _mm256_storeu_si256((__m256i *)o, first);
        _mm256_storeu_si256((__m256i *)(o + 32), second);
    }
    return w;
}

/* The same lanes added to the host-order words `sums` (32-bit wrapping) instead of stored. */
__attribute__((target("avx2"))) static uint32_t lookup_nibbles_add(const uint8_t *levels, const uint8_t *payload,
                                                                    uint32_t words, uint32_t *sums) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)levels));
    uint32_t w = 0;
    for (; w + 8 <= words; w += 8, sums += 16) {
        __m256i first, second, *a = (__m256i *)sums, *b = (__m256i *)(sums + 8);
        nibble_lanes(table, payload + 4 * w, &first, &second);
        _mm256_storeu_si256(a, _mm256_add_epi32(_mm256_loadu_si256(a), first));
        _mm256_storeu_si256(b, _mm256_add_epi32(_mm256_loadu_si256(b), second));
    }
    return w;
}
#endif

/* `words` big-endian index words to lanes in `out` (`out_bytes`, host-order words). */
static void lookup_lanes(const lookup *t, const uint8_t *payload, uint32_t words, uint32_t *out, size_t out_bytes) {
    uint8_t *o = (uint8_t *)out;
#if defined(__x86_64__)
    if (t->nibbles) { /* the rest of the words, if any, by the table below */
        uint32_t done = lookup_nibbles(t->levels, payload, words, o);
        payload += 4 * done, words -= done, o += 8 * done;
    }
#endif
    unsigned shift = t->group * t->index_bits;
    switch (t->entry) { /* constant sizes: each memcpy is one move */
    case 1: LOOKUP_RUN(1) break;
    case 2: LOOKUP_RUN(2) break;
    case 4: LOOKUP_RUN(4) break;
    case 8: LOOKUP_RUN(8) break;
    case 16: LOOKUP_RUN(16) break;
    default: LOOKUP_RUN(t->entry) break;
    }
    memset(o, 0, (size_t)((uint8_t *)out + out_bytes - o)); /* the last word's tail */
}

static void job_free(job *j) {
    if (!j) return;
    for (uint32_t i = 0; i < j->cap; i++) {
        if (j->chunks) free(j->chunks[i].bitmaps), free(j->chunks[i].sums);
        if (j->results) free(j->results[i].packet);
    }
    free(j->chunks), free(j->results), free(j->fetchv), free(j->scratch), free(j->packet);
    free(j->workers), free(j->bit), free(j->requesters);
    if (j->has_table) free(j->table.entries);
    seqmap_free(&j->pending), seqmap_free(&j->ring), seqmap_free(&j->fetches);
    free(j);
}

/* The switch's DATA rule (lanes of the job's width, 32 for MAX), indices only with the job's table, and SPINE only
 * in a racked job. */
static int format_ok(const job *j, const ina_header *h) {
    if ((h->flags & INA_FLAG_SPINE) && !j->nracks) return 0; /* SPINE only in a racked job */
    if (h->lane_bits != ((h->flags & INA_FLAG_MAX) ? 32 : j->lane_bits)) return 0;
    return !h->index_bits || (j->has_table && !(h->flags & INA_FLAG_MAX) && h->index_bits == j->table.index_bits);
}

static void observe(job *j, uint32_t seq) {
    if (!j->has_newest || ((seq - j->newest) & INA_SEQ_MASK) < HALF_SEQ) j->newest = seq, j->has_newest = 1;
}

/* The window rule: a worker that sent `newest` holds every result <= newest - W. */
static int proven_complete(const job *j, uint32_t seq) {
    if (!j->has_newest) return 0;
    uint32_t behind = (j->newest - seq) & INA_SEQ_MASK;
    return j->window <= behind && behind < HALF_SEQ;
}

/* ---- wide bitmaps: `nw` words (see job); a job of one switch, the common case, has one */

static inline int wide_eq(const uint32_t *a, const uint32_t *b, uint32_t nw) {
    if (nw == 1) return a[0] == b[0];
    return !memcmp(a, b, nw * sizeof *a);
}

/* `into` = `from` (or 0 without `from`): one store for a job of one switch, where a call to memcpy would cost more. */
static inline void wide_set(uint32_t *into, const uint32_t *from, uint32_t nw) {
    if (nw == 1) into[0] = from ? from[0] : 0;
    else if (from) memcpy(into, from, nw * sizeof *into);
    else memset(into, 0, nw * sizeof *into);
}

static inline int wide_meets(const uint32_t *a, const uint32_t *b, uint32_t nw) {
    if (nw == 1) return (a[0] & b[0]) != 0;
    for (uint32_t w = 0; w < nw; w++)
        if (a[w] & b[w]) return 1;
    return 0;
}

static uint32_t wide_count(const uint32_t *a, uint32_t nw) {
    uint32_t bits = 0;
    for (uint32_t w = 0; w < nw; w++) bits += (uint32_t)__builtin_popcount(a[w]);
    return bits;
}

/* The worker (its place in `workers`) of a DATA without SPINE from `source`: the worker itself or, forwarded, the
 * job's switch (a racked job's: the worker's leaf, the header's rank being its rank in the rack); -1 if neither. */
static int32_t data_worker(const job *j, const ina_header *h, ina_addr source) {
    if (!j->nracks)
        return h->rank < j->n && (ina_addr_eq(source, j->workers[h->rank]) || (j->has_switch && ina_addr_eq(source, j->sw)))
                   ? h->rank : -1;
    for (uint32_t r = 0; r < j->nracks; r++) /* the job's addresses are distinct: one rack at most matches */
        if (h->rank < j->sizes[r] && (ina_addr_eq(source, j->workers[j->offsets[r] + h->rank]) || ina_addr_eq(source, j->leaves[r])))
            return (int32_t)(j->offsets[r] + h->rank);
    return -1;
}

/* The bitmap (into `wide`, nw words) of a PARTIAL or of a racked job's DATA with SPINE (a rack's sum, from its leaf
 * or through the spine), as job.py's piece_bitmap: ACCEPTED, or the counter that refuses it. */
static int piece_bitmap(const job *j, const ina_header *h, ina_addr source, uint32_t *wide) {
    int from_spine = j->has_switch && ina_addr_eq(source, j->sw);
    wide_set(wide, NULL, j->nw);
    if (!j->nracks) {
        if (!from_spine) return C_unregistered;
        if (!h->bitmap || (h->bitmap & ~j->full[0])) return C_bad_bitmap;
        wide[0] = h->bitmap;
        return ACCEPTED;
    }
    if ((h->flags & INA_FLAG_SPINE) && h->kind == INA_DATA) {
        if (h->rank >= j->nracks || !(from_spine || ina_addr_eq(source, j->leaves[h->rank]))) return C_unregistered;
        wide[h->rank] = j->full[h->rank];
        return ACCEPTED;
    }
    if (h->flags & INA_FLAG_SPINE) {
        if (!from_spine) return C_unregistered;
        if (!h->bitmap || (h->bitmap & ~j->result_bitmap)) return C_bad_bitmap;
        for (uint32_t r = 0; r < j->nracks; r++)
            if (h->bitmap >> r & 1) wide[r] = j->full[r];
        return ACCEPTED;
    }
    for (uint32_t r = 0; r < j->nracks; r++) {
        if (!ina_addr_eq(source, j->leaves[r])) continue;
        if (!h->bitmap || (h->bitmap & ~j->full[r])) return C_bad_bitmap;
        wide[r] = h->bitmap;
        return ACCEPTED;
    }
    return C_unregistered;
}

/* ------------------------------------------------------------------ the server */

typedef struct {
    double due;
    uint64_t order;
    job *owner;
    int32_t entry;
    uint32_t generation;
} timer;

typedef struct {
    PyObject_HEAD
    ina_loop loop;
    ina_node node;
    uint32_t words;
    double flush_delay, piece_timeout;
    uint64_t counts[C_COUNT];
    job *jobs[1 << 16];
    uint16_t order[1 << 16]; /* registered job ids, first registered first */
    uint32_t njobs;
    timer *heap;
    size_t heap_count, heap_room;
    uint64_t next_order;
    int ready;
} PS;

/* ---- output */

static void write_control(uint8_t *p, unsigned kind, uint16_t id, uint32_t seq, chunk_format f, uint32_t bitmap) {
    ina_header h = {(uint8_t)kind, f.flags, 0, 0, f.index_bits, f.lane_bits, id, f.slot, seq, bitmap};
    ina_write_header(p, &h);
}

/* Queue a header-only packet (out of memory: not sent, not counted). */
static void send_control(PS *ps, ina_tx *tx, ina_addr to, unsigned kind, uint16_t id, uint32_t seq, chunk_format f,
                         uint32_t bitmap) {
    uint8_t *p = ina_tx_add(tx, to, INA_HEADER_BYTES);
    if (!p) return;
    write_control(p, kind, id, seq, f, bitmap);
    ps->counts[C_tx]++;
}

/* Queue a copy of `packet` to `to` (out of memory: not sent, not counted). */
static void send_copy(PS *ps, ina_tx *tx, ina_addr to, const uint8_t *packet, uint32_t length) {
    uint8_t *p = ina_tx_add(tx, to, length);
    if (!p) return;
    memcpy(p, packet, length);
    ps->counts[C_tx]++;
}

/* Queue the datagram just queued again, to `to`, sharing its bytes (out of memory: not sent, not counted). */
static void send_again(PS *ps, ina_tx *tx, ina_addr to) {
    if (ina_tx_repeat(tx, to) == 0) ps->counts[C_tx]++;
}

/* ---- the FLUSH heap, ordered by (due, order) as Python's heapq of tuples */

static int timer_before(const timer *a, const timer *b) { return a->due < b->due || (a->due == b->due && a->order < b->order); }

INA_HEAP(timers, timer, timer_before)

static void schedule(PS *ps, job *j, int32_t entry) {
    if (ps->heap_count == ps->heap_room) {
        size_t room = ps->heap_room ? 2 * ps->heap_room : 256;
        timer *heap = realloc(ps->heap, room * sizeof *heap);
        if (!heap) return; /* out of memory: the chunk still completes or expires, unflushed */
        ps->heap = heap, ps->heap_room = room;
    }
    const chunk *c = &j->chunks[entry];
    timers_push(ps->heap, &ps->heap_count, (timer){c->flush_at, ps->next_order++, j, entry, c->generation});
}

static int timer_current(const timer *t) {
    const chunk *c = &t->owner->chunks[t->entry];
    return c->generation == t->generation && c->flush_at == t->due;
}

/* ---- chunks */

/* Forget an incomplete chunk; `reason` counts its pieces. */
static void drop_chunk(PS *ps, job *j, int32_t entry, int reason) {
    chunk *c = &j->chunks[entry];
    ps->counts[reason] += c->count;
    c->generation++;
    seqmap_remove(&j->pending, entry);
}

/* Pairwise disjoint pieces covering `full` that include piece `newest`, as pieces.py's `_cover_with`
 * finds them (the same candidates in the same order, so the same cover); `chosen` gets their indices.
 * Bitmaps are `nw` words; `covered` holds the union at each depth of the search. */
typedef struct {
    const uint32_t *bitmaps, *full;
    uint32_t nw;
    const uint32_t *candidates;
    uint32_t ncandidates;
    uint32_t *covered;              /* (ncandidates + 2) * nw */
    uint32_t *dead;                 /* open-addressing set of unions that lead nowhere, nw words each (all 0: empty; unions never are) */
    uint32_t dead_mask, dead_count; /* at most half full: beyond that, dead ends are no longer remembered */
    uint32_t *chosen, nchosen;
} cover_search;

static int dead_seen(cover_search *s, const uint32_t *covered, int add) {
    const uint32_t nw = s->nw;
    uint32_t hash = 0;
    for (uint32_t w = 0; w < nw; w++) hash = (hash ^ covered[w]) * 0x9E3779B1u;
    uint32_t i = hash & s->dead_mask, *entry;
    for (;; i = (i + 1) & s->dead_mask) {
        entry = s->dead + (size_t)i * nw;
        if (!wide_count(entry, nw)) break;
        if (wide_eq(entry, covered, nw)) return 1;
    }
    if (add && 2 * (s->dead_count + 1) <= s->dead_mask + 1) memcpy(entry, covered, nw * sizeof *entry), s->dead_count++;
    return 0;
}

static int cover_from(cover_search *s, uint32_t depth) {
    const uint32_t nw = s->nw, *covered = s->covered + (size_t)depth * nw;
    uint32_t *next = s->covered + (size_t)(depth + 1) * nw, w = 0;
    while (w < nw && covered[w] == s->full[w]) w++;
    if (w == nw) return 1;
    if (dead_seen(s, covered, 0)) return 0;
    uint32_t missing = s->full[w] & ~covered[w], lowest = missing & -missing;
    for (uint32_t k = 0; k < s->ncandidates; k++) {
        const uint32_t *b = s->bitmaps + (size_t)s->candidates[k] * nw;
        if ((b[w] & lowest) && !wide_meets(b, covered, nw)) {
            s->chosen[s->nchosen++] = s->candidates[k];
            for (uint32_t i = 0; i < nw; i++) next[i] = covered[i] | b[i];
            if (cover_from(s, depth + 1)) return 1;
            s->nchosen--;
        }
    }
    dead_seen(s, covered, 1);
    return 0;
}

static int ascending(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* An exact cover of `full` by pieces of `c` that include its newest (which made its union full): its
 * `chosen` indices and their number in `*nchosen`; 1 if found, 0 if none, -1 out of memory. */
static int find_cover(const chunk *c, const uint32_t *full, uint32_t nw, uint32_t *chosen, uint32_t *nchosen) {
    uint32_t n = c->count, newest = n - 1, dead_size = 8, ncand = 0;
    const uint32_t *bitmap = c->bitmaps + (size_t)newest * nw;
    while (dead_size < 4 * n + 8) dead_size *= 2;
    uint64_t *order = malloc(n * sizeof *order);
    uint32_t *ids = malloc(n * sizeof *ids), *covered = malloc((size_t)(n + 2) * nw * sizeof *covered);
    uint32_t *dead = calloc((size_t)dead_size * nw, sizeof *dead);
    int found = -1;
    if (order && ids && covered && dead) {
        for (uint32_t i = 0; i < n; i++) /* by bit count, largest first, then in arrival order (a stable sort) */
            if (!wide_meets(c->bitmaps + (size_t)i * nw, bitmap, nw))
                order[ncand++] = (uint64_t)(32 * MAX_RACKS - wide_count(c->bitmaps + (size_t)i * nw, nw)) << 32 | i;
        qsort(order, ncand, sizeof *order, ascending);
        for (uint32_t k = 0; k < ncand; k++) ids[k] = (uint32_t)order[k];
        wide_set(covered, bitmap, nw);
        chosen[0] = newest;
        cover_search s = {c->bitmaps, full, nw, ids, ncand, covered, dead, dead_size - 1, 0, chosen, 1};
        found = cover_from(&s, 0);
        *nchosen = s.nchosen;
    }
    free(order), free(ids), free(covered), free(dead);
    return found;
}

/* `into` op= `piece`, word by word (SUM: modulo 2^32; MAX: unsigned). */
static void combine(uint32_t *into, const uint32_t *piece, uint32_t words, int is_max) {
    if (is_max)
        for (uint32_t w = 0; w < words; w++) into[w] = into[w] > piece[w] ? into[w] : piece[w];
    else
        for (uint32_t w = 0; w < words; w++) into[w] += piece[w];
}

/* The lanes of `words` index words added to `sums` (their `out_bytes` of host-order words), by byte
 * shuffles where they apply; `scratch` takes the lanes of the words they leave. */
static void add_lanes(const lookup *t, const uint8_t *payload, uint32_t words, size_t out_bytes, uint32_t *sums,
                      uint32_t *scratch) {
    uint32_t done = 0; /* index words whose lanes (8 bytes each) are added */
#if defined(__x86_64__)
    if (t->nibbles) done = lookup_nibbles_add(t->levels, payload, words, sums);
#endif
    size_t rest = out_bytes - 8 * (size_t)done;
    lookup_lanes(t, payload + 4 * done, words - done, scratch, rest);
    combine(sums + 2 * done, scratch, (uint32_t)(rest / 4), 0);
}

/* `words` big-endian words of `payload` combined into `sums` (SUM: modulo 2^32; MAX: unsigned). */
static void add_words(uint32_t *sums, const uint8_t *payload, uint32_t words, int is_max) {
    for (uint32_t w = 0; w < words; w++) {
        uint32_t v = ina_load32(payload + 4 * w);
        sums[w] = is_max ? (sums[w] > v ? sums[w] : v) : sums[w] + v;
    }
}

/* The sums (or maxima) of `count` pieces of `c` into `out`: those at `chosen`, or without it the first `count`. */
static void sum_pieces(const chunk *c, const uint32_t *chosen, uint32_t count, uint32_t *out) {
    const uint32_t words = c->words;
    memcpy(out, c->sums + (size_t)(chosen ? chosen[0] : 0) * words, words * sizeof *out);
    for (uint32_t k = 1; k < count; k++) combine(out, c->sums + (size_t)(chosen ? chosen[k] : k) * words, words, c->format.flags & INA_FLAG_MAX);
}

/* The result of chunk `c` into `out` if its pieces hold an exact cover of the job's `full`: 1, else 0 (-1: out of memory). */
static int chunk_result(const chunk *c, const job *j, uint32_t *out) {
    if (c->disjoint) {
        sum_pieces(c, NULL, c->count, out);
        return 1;
    }
    uint32_t nchosen = 0, *chosen = malloc(c->count * sizeof *chosen);
    int found = chosen ? find_cover(c, j->full, j->nw, chosen, &nchosen) : -1;
    if (found == 1) sum_pieces(c, chosen, nchosen, out);
    free(chosen);
    return found;
}

/* Store a RESULT packet in the ring (results.py's put): 0 if `seq` is stored already (or no memory). */
static int ring_put(job *j, uint32_t seq, int is_max, const uint8_t *packet, uint32_t length) {
    if (seqmap_find(&j->ring, seq) >= 0) return 0;
    if (j->ring.count == j->ring.cap) seqmap_remove(&j->ring, j->ring.head); /* the oldest stored goes */
    stored *slot = &j->results[j->ring.free];                                 /* the entry insert takes */
    if (slot->room < length) {
        uint8_t *grown = realloc(slot->packet, length);
        if (!grown) return 0;
        slot->packet = grown, slot->room = length;
    }
    seqmap_insert(&j->ring, seq);
    memcpy(slot->packet, packet, length);
    slot->length = length, slot->is_max = is_max;
    return 1;
}

static void fetch_pop(job *j, uint32_t seq) {
    int32_t e = seqmap_find(&j->fetches, seq);
    if (e >= 0) seqmap_remove(&j->fetches, e);
}

/* Send the RESULT to every worker of the job and keep it for replays. It is written straight
 * into the send queue: once to the job's group, or once for each worker (without a copy). */
static void complete(PS *ps, job *j, int32_t entry, const uint32_t *sums, ina_tx *tx) {
    chunk *c = &j->chunks[entry];
    uint32_t seq = j->pending.key[entry], length = INA_HEADER_BYTES + 4 * c->words;
    uint8_t *packet = ina_tx_add(tx, j->has_group ? j->group : j->workers[0], length);
    int queued = packet != NULL;
    if (!queued) packet = j->packet; /* out of memory: kept for replays, not sent (not counted) */
    chunk_format f = c->format;
    f.flags |= j->result_flags;
    write_control(packet, INA_RESULT, j->id, seq, f, j->result_bitmap);
    ina_store_words(packet + INA_HEADER_BYTES, sums, c->words);
    ring_put(j, seq, c->format.flags != 0, packet, length);
    c->generation++;
    seqmap_remove(&j->pending, entry);
    fetch_pop(j, seq); /* every worker gets the RESULT below */
    if (queued) {
        ps->counts[C_tx]++;
        for (uint32_t r = 1; r < j->n && !j->has_group; r++) send_again(ps, tx, j->workers[r]);
    }
    ps->counts[C_completed]++, j->completed++;
}

/* Add a piece (`bitmap`, nw words: the job's) of chunk `seq` of format `f` to it: its sums, big-endian in `payload`,
 * or with `table` the lanes of its indices. The chunk's entry if it is still incomplete, -1 if it completed or the
 * piece was refused. Inlined into add_piece for a constant nw of 1 and for the others: a job of one switch pays
 * nothing for the racks of others. */
static inline __attribute__((always_inline)) int32_t add_piece_of(PS *ps, job *j, uint32_t seq, const uint32_t *bitmap, uint32_t nw,
                                                                  chunk_format f, const uint8_t *payload, const lookup *table,
                                                                  double now, ina_tx *tx) {
    uint32_t words = ina_result_words(f.words, f.index_bits, f.lane_bits); /* the sums of a piece */
    int32_t entry = seqmap_find(&j->pending, seq);
    chunk *c;
    if (entry < 0) {
        if (j->pending.count >= j->cap) {
            ps->counts[C_overloaded]++;
            return -1;
        }
        entry = seqmap_insert(&j->pending, seq);
        c = &j->chunks[entry];
        c->format = f, c->words = words, c->created = now;
        c->flush_interval = ps->flush_delay, c->flush_at = now + ps->flush_delay;
        c->count = 0, c->disjoint = 1;
        memset(c->held, 0, nw * sizeof *c->held);
        if (j->has_switch) schedule(ps, j, entry);
    } else {
        c = &j->chunks[entry];
        if (!format_eq(c->format, f)) {
            ps->counts[C_mismatch]++;
            return -1;
        }
    }
    if (c->count >= j->piece_cap && wide_count(bitmap, nw) > 1) {
        ps->counts[C_overloaded]++;
        return entry;
    }
    for (uint32_t i = 0; i < c->count; i++) {
        if (wide_eq(c->bitmaps + (size_t)i * nw, bitmap, nw)) {
            ps->counts[C_duplicate]++;
            return entry;
        }
    }
    /* Without a switch every piece is one worker's DATA (its bitmap is checked to be 1 << rank), so
     * the pieces of a chunk are disjoint, and each is summed into the first on arrival: one
     * buffer, and the chunk's sums are ready when its last piece comes. */
    int summed = !j->has_switch;
    size_t stored = summed ? 1 : (size_t)c->count + 1;
    if (c->count == c->room || stored * c->words > c->sums_room) { /* entries are reused: sizes vary */
        uint32_t room = c->room > c->count ? c->room : (c->room ? 2 * c->room : j->n);
        uint32_t *bitmaps = realloc(c->bitmaps, (size_t)room * nw * sizeof *bitmaps);
        if (bitmaps) c->bitmaps = bitmaps, c->room = room;
        size_t sums_room = (summed ? 1 : (size_t)c->room) * c->words;
        uint32_t *grown = bitmaps && sums_room > c->sums_room ? realloc(c->sums, sums_room * sizeof *grown) : c->sums;
        if (!bitmaps || !grown) {
            ps->counts[C_overloaded]++; /* out of memory: refused like a piece beyond the bound */
            return entry;
        }
        if (sums_room > c->sums_room) c->sums = grown, c->sums_room = sums_room;
    }
    if (summed && c->count) {
        if (table) add_lanes(table, payload, f.words, 4 * (size_t)words, c->sums, j->scratch);
        else add_words(c->sums, payload, c->words, c->format.flags & INA_FLAG_MAX);
    } else {
        uint32_t *into = c->sums + (size_t)c->count * c->words;
        if (table) lookup_lanes(table, payload, f.words, into, 4 * (size_t)words);
        else ina_load_words(into, payload, c->words);
    }
    memcpy(c->bitmaps + (size_t)c->count++ * nw, bitmap, nw * sizeof *bitmap);
    c->disjoint &= !wide_meets(bitmap, c->held, nw);
    for (uint32_t w = 0; w < nw; w++) c->held[w] |= bitmap[w];
    ps->counts[C_pieces]++;
    if (!wide_eq(c->held, j->full, nw)) return entry;
    if (summed) {
        complete(ps, j, entry, c->sums, tx);
        return -1;
    }
    int found = chunk_result(c, j, j->scratch);
    if (found != 1) return entry;
    complete(ps, j, entry, j->scratch, tx);
    return -1;
}

static int32_t add_piece(PS *ps, job *j, uint32_t seq, const uint32_t *bitmap, chunk_format f, const uint8_t *payload,
                         const lookup *table, double now, ina_tx *tx) {
    if (j->nw == 1) return add_piece_of(ps, j, seq, bitmap, 1, f, payload, table, now, tx);
    return add_piece_of(ps, j, seq, bitmap, j->nw, f, payload, table, now, tx);
}

/* Tell a resending worker (its place in `workers`) which workers' contributions the PS holds of its rack (`held`,
 * nw words; a job of one switch has one rack). */
static void status(PS *ps, job *j, int32_t worker, uint32_t seq, chunk_format f, const uint32_t *held, ina_tx *tx) {
    send_control(ps, tx, j->workers[worker], INA_STATUS, j->id, seq, f, held[j->bit[worker] / 32]);
    ps->counts[C_status_sent]++;
}

/* A worker (its place in `workers`) resent chunk `seq` (of format `f`) whose result the PS lacks: remember it, and
 * ask the other workers at most once per flush_delay; `repeated_only`: only if it resent it before (PS._fetch). */
static void fetch_result(PS *ps, job *j, int32_t worker, uint32_t seq, chunk_format f, double now, ina_tx *tx,
                         int repeated_only) {
    int32_t e = seqmap_find(&j->fetches, seq);
    int first = e < 0 || !(j->requesters[(size_t)e * j->nreq + (uint32_t)worker / 32] >> (worker % 32) & 1);
    if (e < 0) {
        if (j->fetches.count >= j->cap) {
            seqmap_remove(&j->fetches, j->fetches.head);
            ps->counts[C_overloaded]++;
        }
        e = seqmap_insert(&j->fetches, seq);
        j->fetchv[e] = (fetch){f, 0, 0.0};
        memset(j->requesters + (size_t)e * j->nreq, 0, j->nreq * sizeof *j->requesters);
    } else if (!format_eq(j->fetchv[e].format, f)) {
        ps->counts[C_mismatch]++;
        return;
    }
    fetch *x = &j->fetchv[e];
    j->requesters[(size_t)e * j->nreq + (uint32_t)worker / 32] |= 1u << (worker % 32);
    if ((repeated_only && first) || (x->sent && now < x->sent_at + ps->flush_delay)) return;
    x->sent = 1, x->sent_at = now;
    for (uint32_t r = 0; r < j->n; r++)
        if (r != (uint32_t)worker) send_control(ps, tx, j->workers[r], INA_FETCH, j->id, seq, f, 0);
    ps->counts[C_fetch_sent] += j->n - 1;
}

/* Keep a RESULT received, drop the chunk's pieces and answer the workers that asked; 0 if stored already. */
static int store(PS *ps, job *j, const ina_header *h, const uint8_t *data, size_t length, ina_tx *tx) {
    if (!ring_put(j, h->seq, (h->flags & INA_FLAG_MAX) != 0, data, (uint32_t)length)) return 0;
    int32_t entry = seqmap_find(&j->pending, h->seq);
    if (entry >= 0) drop_chunk(ps, j, entry, C_superseded);
    int32_t e = seqmap_find(&j->fetches, h->seq);
    if (e >= 0) {
        const uint32_t *requesters = j->requesters + (size_t)e * j->nreq;
        seqmap_remove(&j->fetches, e); /* its requesters stay until the entry is taken again */
        for (uint32_t r = 0; r < j->n; r++)
            if (requesters[r / 32] >> (r % 32) & 1) send_copy(ps, tx, j->workers[r], data, (uint32_t)length);
        ps->counts[C_results_replayed] += wide_count(requesters, j->nreq);
    }
    return 1;
}

/* A PARTIAL, or a racked job's DATA with SPINE (a rack's sum): a piece from a switch, never answered. */
static void on_piece(PS *ps, job *j, const ina_header *h, const uint8_t *data, size_t length, ina_addr source, double now,
                     ina_tx *tx) {
    uint32_t bitmap[MAX_RACKS];
    int refused = piece_bitmap(j, h, source, bitmap);
    if (refused != ACCEPTED) ps->counts[refused]++;
    else if (!format_ok(j, h)) ps->counts[C_bad_format]++;
    else {
        observe(j, h->seq);
        if (seqmap_find(&j->ring, h->seq) >= 0) ps->counts[C_late]++;
        else if (proven_complete(j, h->seq)) ps->counts[C_stale]++;
        else add_piece(ps, j, h->seq, bitmap, format_of(h, length), data + INA_HEADER_BYTES, NULL, now, tx);
    }
}

static void on_data(PS *ps, job *j, const ina_header *h, const uint8_t *data, size_t length, ina_addr source, double now,
                    ina_tx *tx) {
    if ((h->flags & INA_FLAG_SPINE) && j->nracks) { /* a rack's sum, sent up by its leaf */
        on_piece(ps, j, h, data, length, source, now, tx);
        return;
    }
    int32_t worker = data_worker(j, h, source);
    if (worker < 0) {
        ps->counts[C_unregistered]++;
        return;
    }
    if (!format_ok(j, h)) {
        ps->counts[C_bad_format]++;
        return;
    }
    observe(j, h->seq);
    chunk_format f = format_of(h, length);
    int32_t e = seqmap_find(&j->ring, h->seq);
    if (e >= 0) {
        const stored *s = &j->results[e];
        if (s->is_max != ((h->flags & INA_FLAG_MAX) != 0)) {
            ps->counts[C_mismatch]++;
            return;
        }
        send_copy(ps, tx, j->workers[worker], s->packet, s->length);
        ps->counts[C_results_replayed]++;
        return;
    }
    if (proven_complete(j, h->seq)) {
        ps->counts[C_stale]++;
        if (h->flags & INA_FLAG_RESEND) {
            fetch_result(ps, j, worker, h->seq, f, now, tx, 0);
            status(ps, j, worker, h->seq, f, j->full, tx);
        }
        return;
    }
    uint32_t bitmap[MAX_RACKS];
    wide_set(bitmap, NULL, j->nw);
    bitmap[j->bit[worker] / 32] = 1u << (j->bit[worker] % 32);
    int32_t entry = add_piece(ps, j, h->seq, bitmap, f, data + INA_HEADER_BYTES, h->index_bits ? &j->table : NULL, now, tx);
    if (entry >= 0 && (h->flags & INA_FLAG_RESEND)) {
        if (j->has_switch) fetch_result(ps, j, worker, h->seq, f, now, tx, 1); /* asked when it resends again */
        status(ps, j, worker, h->seq, f, j->chunks[entry].held, tx);
    }
}

static void on_result(PS *ps, job *j, const ina_header *h, const uint8_t *data, size_t length, ina_addr source, ina_tx *tx) {
    if (j->has_switch && ina_addr_eq(source, j->sw)) {
        if (h->bitmap != j->result_bitmap) {
            ps->counts[C_bad_bitmap]++;
            return;
        }
        observe(j, h->seq);
        if (h->flags & INA_FLAG_HOLD) { /* atp: the switch holds the slot until this comes back, stored before or not */
            send_copy(ps, tx, j->sw, data, (uint32_t)length);
            ps->counts[C_results_returned]++;
        }
        if (!store(ps, j, h, data, length, tx)) {
            ps->counts[C_duplicate]++;
            return;
        }
        ps->counts[C_result_copies]++, j->switch_completed++;
        return;
    }
    int worker = 0;
    for (uint32_t r = 0; r < j->n && !worker; r++) worker = ina_addr_eq(source, j->workers[r]);
    if (!worker) {
        ps->counts[C_unregistered]++;
        return;
    }
    int32_t e = seqmap_find(&j->fetches, h->seq);
    if (e < 0) ps->counts[C_unsolicited]++;
    else if (h->bitmap != j->result_bitmap) ps->counts[C_bad_bitmap]++;
    else if (!format_eq(format_of(h, length), j->fetchv[e].format)) ps->counts[C_mismatch]++;
    else {
        store(ps, j, h, data, length, tx);
        ps->counts[C_fetched]++;
    }
}

static void ps_receive(void *self, const uint8_t *data, size_t length, ina_addr source, double now, ina_tx *tx) {
    PS *ps = self;
    ps->counts[C_rx]++;
    ina_header h;
    if (!ina_parse_header(data, length, &h)) {
        ps->counts[C_malformed]++;
        return;
    }
    job *j = ps->jobs[h.job];
    if (!ina_length_ok(&h, length, j ? j->words : ps->words)) {
        ps->counts[C_malformed]++;
        return;
    }
    if (h.kind != INA_DATA && h.kind != INA_PARTIAL && h.kind != INA_RESULT) ps->counts[C_unexpected]++;
    else if (!j) ps->counts[C_unregistered]++;
    else if (h.kind == INA_DATA) ps->counts[C_rx_data]++, on_data(ps, j, &h, data, length, source, now, tx);
    else if (h.kind == INA_PARTIAL) ps->counts[C_rx_partial]++, on_piece(ps, j, &h, data, length, source, now, tx);
    else ps->counts[C_rx_result]++, on_result(ps, j, &h, data, length, source, tx);
}

/* Ask the switch (a racked job's: the spine and every leaf) to flush a stalled chunk, then wait twice as long for
 * the next request. */
static void flush(PS *ps, job *j, int32_t entry, double now, ina_tx *tx) {
    chunk *c = &j->chunks[entry];
    uint32_t seq = j->pending.key[entry];
    if (proven_complete(j, seq)) {
        drop_chunk(ps, j, entry, C_retired);
        return;
    }
    send_control(ps, tx, j->sw, INA_FLUSH, j->id, seq, c->format, 0);
    for (uint32_t r = 0; r < j->nracks; r++) send_control(ps, tx, j->leaves[r], INA_FLUSH, j->id, seq, c->format, 0);
    ps->counts[C_flush_sent] += 1 + j->nracks;
    c->flush_interval = 2 * c->flush_interval < FLUSH_CAP ? 2 * c->flush_interval : FLUSH_CAP;
    c->flush_at = now + c->flush_interval;
    schedule(ps, j, entry);
}

static void ps_tick(void *self, double now, ina_tx *tx) {
    PS *ps = self;
    while (ps->heap_count && ps->heap[0].due <= now) {
        timer t = ps->heap[0];
        timers_pop(ps->heap, &ps->heap_count);
        if (timer_current(&t)) flush(ps, t.owner, t.entry, now, tx);
    }
    for (uint32_t k = 0; k < ps->njobs; k++) {
        job *j = ps->jobs[ps->order[k]];
        while (j->pending.count) {
            int32_t oldest = j->pending.head;
            if (j->chunks[oldest].created + ps->piece_timeout > now) break;
            drop_chunk(ps, j, oldest, C_expired);
        }
    }
}

static double ps_next_deadline(void *self) {
    PS *ps = self;
    while (ps->heap_count && !timer_current(&ps->heap[0])) timers_pop(ps->heap, &ps->heap_count);
    double deadline = ps->heap_count ? ps->heap[0].due : INFINITY;
    for (uint32_t k = 0; k < ps->njobs; k++) {
        const job *j = ps->jobs[ps->order[k]];
        if (j->pending.count) {
            double expiry = j->chunks[j->pending.head].created + ps->piece_timeout;
            if (expiry < deadline) deadline = expiry;
        }
    }
    return deadline;
}

/* ------------------------------------------------------------------ Python */

static int PS_init(PS *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"words", "flush_delay", "piece_timeout", "messages", NULL};
    unsigned int words, messages = 64;
    double flush_delay, piece_timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Idd|I", names, &words, &flush_delay, &piece_timeout, &messages)) return -1;
    if (self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "a parameter server core is initialized once");
        return -1;
    }
    if (words < 1 || messages < 1) {
        PyErr_SetString(PyExc_ValueError, "words and messages must be positive");
        return -1;
    }
    if (ina_loop_init(&self->loop, messages) < 0) {
        PyErr_SetString(PyExc_MemoryError, self->loop.error);
        return -1;
    }
    self->words = words, self->flush_delay = flush_delay, self->piece_timeout = piece_timeout;
    self->node = (ina_node){self, ps_receive, ps_tick, ps_next_deadline};
    self->ready = 1;
    return 0;
}

static void forget_timers(PS *ps, const job *j) {
    size_t kept = 0;
    for (size_t i = 0; i < ps->heap_count; i++)
        if (ps->heap[i].owner != j) ps->heap[kept++] = ps->heap[i];
    ps->heap_count = kept;
    timers_build(ps->heap, kept);
}

static void remove_job(PS *ps, uint16_t id) {
    job *j = ps->jobs[id];
    ps->jobs[id] = NULL;
    uint32_t kept = 0;
    for (uint32_t k = 0; k < ps->njobs; k++)
        if (ps->order[k] != id) ps->order[kept++] = ps->order[k];
    ps->njobs = kept;
    forget_timers(ps, j);
    job_free(j);
}

static void PS_dealloc(PS *self) {
    if (self->ready) {
        for (uint32_t k = self->njobs; k-- > 0;) remove_job(self, self->order[k]);
        free(self->heap);
        ina_loop_free(&self->loop);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int not_ready(PS *self) {
    if (self->ready) return 0;
    PyErr_SetString(PyExc_RuntimeError, "the parameter server core was not initialized");
    return 1;
}

/* The racks of job `j` (n workers): `sizes` its racks' worker counts (uint32, none for a job of one switch), `leaves`
 * their leaves as (ip, port) uint32 pairs; sets its bitmaps' words, each worker's bit, its RESULTs' bitmap and flags
 * and its pieces' bound. 0, or -1 if they are not what the Python control plane checks (ina.control.jobs). */
static int set_racks(job *j, const Py_buffer *sizes, const Py_buffer *leaves) {
    uint32_t nracks = (uint32_t)(sizes->len / 4), placed = 0;
    if (sizes->len % 4 || nracks == 1 || nracks > MAX_RACKS || (size_t)leaves->len != 8 * (size_t)nracks || (nracks && !j->has_switch))
        return -1;
    if (!nracks) { /* one switch: one word, the ranks */
        if (j->n > INA_MAX_WORKERS) return -1;
        j->nw = 1, j->full[0] = j->n == 32 ? 0xFFFFFFFFu : (1u << j->n) - 1, j->result_bitmap = j->full[0];
        for (uint32_t r = 0; r < j->n; r++) j->bit[r] = (uint16_t)r;
        j->piece_cap = 2 * j->n;
        return 0;
    }
    const uint32_t *n = sizes->buf, *peers = leaves->buf;
    for (uint32_t r = 0; r < nracks; r++) {
        if (n[r] < 1 || n[r] > INA_MAX_WORKERS || placed + n[r] > j->n) return -1;
        j->sizes[r] = n[r], j->offsets[r] = placed, j->full[r] = n[r] == 32 ? 0xFFFFFFFFu : (1u << n[r]) - 1;
        j->leaves[r] = (ina_addr){peers[2 * r], (uint16_t)peers[2 * r + 1]};
        for (uint32_t rank = 0; rank < n[r]; rank++) j->bit[placed + rank] = (uint16_t)(32 * r + rank);
        placed += n[r];
    }
    if (placed != j->n) return -1;
    j->nracks = j->nw = nracks, j->result_bitmap = nracks == 32 ? 0xFFFFFFFFu : (1u << nracks) - 1;
    j->result_flags = INA_FLAG_SPINE, j->piece_cap = 2 * (j->n + nracks);
    return 0;
}

/* register(job, words, window, ring, lane_bits, index_bits, workers, switch, table, group[, racks, leaves]): workers is
 * (ip, port) uint32 pairs as bytes, rack by rack, switch (a racked job's spine) and group (ip, port) or None, table
 * the levels as uint32 bytes (empty without indices), racks each rack's worker count as uint32 bytes and leaves each
 * rack's leaf as (ip, port) uint32 pairs (both empty, or left out, for a job of one switch). */
static PyObject *PS_register(PS *self, PyObject *args) {
    unsigned int id, words, window, cap, lane_bits, index_bits;
    Py_buffer workers, table, racks = {0}, leaves = {0};
    PyObject *sw, *group;
    if (not_ready(self)) return NULL;
    if (!PyArg_ParseTuple(args, "IIIIIIy*Oy*O|y*y*", &id, &words, &window, &cap, &lane_bits, &index_bits, &workers, &sw, &table,
                          &group, &racks, &leaves))
        return NULL;
    PyObject *result = NULL;
    job *j = NULL;
    unsigned n = (unsigned)(workers.len / 8);
    unsigned switch_ip = 0, switch_port = 0, group_ip = 0, group_port = 0;
    if (sw != Py_None && !PyArg_ParseTuple(sw, "II", &switch_ip, &switch_port)) goto done;
    if (group != Py_None && !PyArg_ParseTuple(group, "II", &group_ip, &group_port)) goto done;
    if (id >= 1 << 16 || !words || !window || !cap || n < 1 || n > INA_MAX_WORKERS * MAX_RACKS || workers.len % 8 ||
        !ina_lane_width_ok(lane_bits) || index_bits > INA_MAX_INDEX_BITS ||
        (index_bits && (size_t)table.len != 4 * ((size_t)1 << index_bits)) || (racks.len && (index_bits || group != Py_None)))
        goto unchecked;
    j = calloc(1, sizeof *j);
    if (!j) goto nomem;
    j->id = (uint16_t)id, j->words = words, j->n = n;
    j->window = window, j->cap = cap, j->lane_bits = (uint8_t)lane_bits;
    j->workers = malloc(n * sizeof *j->workers), j->bit = malloc(n * sizeof *j->bit);
    j->nreq = (n + 31) / 32, j->requesters = calloc((size_t)cap * j->nreq, sizeof *j->requesters);
    if (!j->workers || !j->bit || !j->requesters) goto nomem;
    const uint32_t *peers = workers.buf;
    for (unsigned r = 0; r < n; r++) j->workers[r] = (ina_addr){peers[2 * r], (uint16_t)peers[2 * r + 1]};
    j->has_switch = sw != Py_None, j->sw = (ina_addr){switch_ip, (uint16_t)switch_port};
    j->has_group = group != Py_None, j->group = (ina_addr){group_ip, (uint16_t)group_port};
    if (set_racks(j, &racks, &leaves) < 0) goto unchecked;
    uint32_t longest = words;
    if (index_bits) {
        if (lookup_init(&j->table, table.buf, index_bits, lane_bits) < 0) goto nomem;
        j->has_table = 1;
        if (ina_result_words(words, index_bits, lane_bits) > longest) longest = ina_result_words(words, index_bits, lane_bits);
    }
    j->scratch = malloc(longest * sizeof *j->scratch), j->packet = malloc(INA_HEADER_BYTES + 4 * (size_t)longest);
    j->chunks = calloc(cap, sizeof *j->chunks), j->results = calloc(cap, sizeof *j->results);
    j->fetchv = calloc(cap, sizeof *j->fetchv);
    if (!j->scratch || !j->packet || !j->chunks || !j->results || !j->fetchv || seqmap_init(&j->pending, cap) < 0 ||
        seqmap_init(&j->ring, cap) < 0 || seqmap_init(&j->fetches, cap) < 0)
        goto nomem;
    ina_py_lock(&self->loop);
    if (self->jobs[id]) {
        ina_py_unlock(&self->loop);
        PyErr_Format(PyExc_ValueError, "job %u is already registered", id);
        goto done;
    }
    self->jobs[id] = j, self->order[self->njobs++] = (uint16_t)id;
    ina_py_unlock(&self->loop);
    j = NULL;
    result = Py_NewRef(Py_None);
    goto done;
unchecked:
    PyErr_SetString(PyExc_ValueError, "a job the Python control plane did not check");
    goto done;
nomem:
    PyErr_NoMemory();
done:
    job_free(j);
    PyBuffer_Release(&workers), PyBuffer_Release(&table), PyBuffer_Release(&racks), PyBuffer_Release(&leaves);
    return result;
}

static PyObject *PS_deregister(PS *self, PyObject *args) {
    unsigned int id;
    if (not_ready(self) || !PyArg_ParseTuple(args, "I", &id)) return NULL;
    if (id >= 1 << 16) return PyErr_Format(PyExc_ValueError, "job %u is not registered", id);
    ina_py_lock(&self->loop);
    int known = self->jobs[id] != NULL;
    if (known) remove_job(self, (uint16_t)id);
    ina_py_unlock(&self->loop);
    if (!known) return PyErr_Format(PyExc_ValueError, "job %u is not registered", id);
    Py_RETURN_NONE;
}

/* (pending, results, fetching, completed, switch_completed) of a registered job. */
static PyObject *PS_job_state(PS *self, PyObject *args) {
    unsigned int id;
    if (not_ready(self) || !PyArg_ParseTuple(args, "I", &id)) return NULL;
    ina_py_lock(&self->loop);
    const job *j = id < 1 << 16 ? self->jobs[id] : NULL;
    unsigned pending = j ? j->pending.count : 0, results = j ? j->ring.count : 0, fetching = j ? j->fetches.count : 0;
    unsigned long long completed = j ? j->completed : 0, switch_completed = j ? j->switch_completed : 0;
    ina_py_unlock(&self->loop);
    if (!j) return PyErr_Format(PyExc_ValueError, "job %u is not registered", id);
    return Py_BuildValue("IIIKK", pending, results, fetching, completed, switch_completed);
}

/* The workers (by place in `workers`) in the bitmap `held`, as core.py's waiting reports them: into `out`, words
 * of 32 (zeroed first). */
static void ranks_held(const job *j, const uint32_t *held, uint32_t *out, uint32_t width) {
    memset(out, 0, width * sizeof *out);
    if (!j->nracks) {
        out[0] = held[0];
        return;
    }
    for (uint32_t r = 0; r < j->nracks; r++) {
        uint32_t at = j->offsets[r], shift = at % 32;
        uint64_t bits = (uint64_t)held[r] << shift; /* rack r's n_r bits, at its offset: in one word or two */
        out[at / 32] |= (uint32_t)bits;
        if (bits >> 32) out[at / 32 + 1] |= (uint32_t)(bits >> 32);
    }
}

/* waiting() -> (rows, width): every incomplete chunk as native-order uint32 arrays (job ids, seqs, MAX flags), then
 * each chunk's workers held as `width` words (the widest job's: 32 workers a word). */
static PyObject *PS_waiting(PS *self, PyObject *unused) {
    (void)unused;
    if (not_ready(self)) return NULL;
    ina_py_lock(&self->loop);
    size_t total = 0;
    uint32_t width = 1;
    for (uint32_t k = 0; k < self->njobs; k++) {
        const job *j = self->jobs[self->order[k]];
        total += j->pending.count;
        if ((j->n + 31) / 32 > width) width = (j->n + 31) / 32;
    }
    uint32_t *rows = malloc(((3 + width) * total + 1) * sizeof *rows), *out = rows;
    if (rows) {
        for (uint32_t k = 0; k < self->njobs; k++) {
            const job *j = self->jobs[self->order[k]];
            for (int32_t e = j->pending.head; e >= 0; e = j->pending.next[e], out++) {
                out[0] = j->id, out[total] = j->pending.key[e], out[2 * total] = j->chunks[e].format.flags != 0;
                ranks_held(j, j->chunks[e].held, rows + 3 * total + (size_t)(out - rows) * width, width);
            }
        }
    }
    ina_py_unlock(&self->loop);
    if (!rows) return PyErr_NoMemory();
    PyObject *result = Py_BuildValue("y#I", (const char *)rows, (Py_ssize_t)((3 + width) * total * sizeof *rows), width);
    free(rows);
    return result;
}

static PyObject *PS_counters(PS *self, PyObject *unused) {
    (void)unused;
    if (not_ready(self)) return NULL;
    uint64_t counts[C_COUNT];
    ina_py_lock(&self->loop);
    memcpy(counts, self->counts, sizeof counts);
    ina_py_unlock(&self->loop);
    PyObject *out = PyTuple_New(C_COUNT);
    for (int i = 0; out && i < C_COUNT; i++) {
        PyObject *value = PyLong_FromUnsignedLongLong(counts[i]);
        if (!value) return Py_DECREF(out), NULL;
        PyTuple_SET_ITEM(out, i, value);
    }
    return out;
}

static PyObject *PS_receive(PS *self, PyObject *args) { return not_ready(self) ? NULL : ina_py_receive(&self->loop, &self->node, args); }
static PyObject *PS_tick(PS *self, PyObject *args) { return not_ready(self) ? NULL : ina_py_tick(&self->loop, &self->node, args); }
static PyObject *PS_next_deadline(PS *self, PyObject *unused) {
    (void)unused;
    return not_ready(self) ? NULL : ina_py_next_deadline(&self->loop, &self->node);
}
static PyObject *PS_serve(PS *self, PyObject *args) { return not_ready(self) ? NULL : ina_py_serve(&self->loop, &self->node, args); }
static PyObject *PS_stop(PS *self, PyObject *unused) {
    (void)unused;
    return not_ready(self) ? NULL : ina_py_stop(&self->loop);
}
static PyObject *PS_refused(PS *self, PyObject *unused) {
    (void)unused;
    return not_ready(self) ? NULL : ina_py_refused(&self->loop);
}

static PyMethodDef PS_methods[] = {
    {"register", (PyCFunction)PS_register, METH_VARARGS, "Add an admitted job (ina/ps/native.py checks it first)."},
    {"deregister", (PyCFunction)PS_deregister, METH_VARARGS, "Forget a job: its pieces, results, fetches and timers."},
    {"job_state", (PyCFunction)PS_job_state, METH_VARARGS, "(pending, results, fetching, completed, switch_completed) of a job."},
    {"counters", (PyCFunction)PS_counters, METH_NOARGS, "Every counter, in the order of COUNTERS."},
    {"waiting", (PyCFunction)PS_waiting, METH_NOARGS, "Incomplete chunks: (uint32 rows job, seq, max, then held words; width)."},
    {"receive", (PyCFunction)PS_receive, METH_VARARGS, "receive(data, start, length, ip, port, now): what to send."},
    {"tick", (PyCFunction)PS_tick, METH_VARARGS, "tick(now): the FLUSH requests and expiries due."},
    {"next_deadline", (PyCFunction)PS_next_deadline, METH_NOARGS, "When tick next has work, or None."},
    {"serve", (PyCFunction)PS_serve, METH_VARARGS, "serve(fd): serve a bound UDP socket until stop(), GIL released."},
    {"stop", (PyCFunction)PS_stop, METH_NOARGS, "Make serve() return (any thread)."},
    {"refused", (PyCFunction)PS_refused, METH_NOARGS, "Datagrams the kernel refused to send."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PSType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ina.ps._native.ParameterServer",
    .tp_basicsize = sizeof(PS),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The PS's data plane (docs/protocol.md, section 6); ina.ps.native wraps it.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PS_init,
    .tp_dealloc = (destructor)PS_dealloc,
    .tp_methods = PS_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ina.ps._native", "The parameter server's data plane in C.", -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return ina_py_module(&module, &PSType, "ParameterServer", counter_names, C_COUNT); }
