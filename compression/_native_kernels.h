/* The THC kernels, compiled once per instruction set: _native_<isa>.c sets its target with a GCC
 * pragma, defines KERNELS and KERNELS_NAME (the kernel set and its name), LANES (fp32 lanes of its
 * vectors) and REGISTER_STAGES (butterfly stages a pass keeps in registers), and includes this.
 *
 * The arithmetic mirrors hadamard.py, quantize.py and rng.py operation by operation (same fp32
 * constants, same butterfly order, no FMA contraction: build with -ffp-contract=off), so every
 * instruction set produces the same bits as the torch path.
 */
#include <stdlib.h>
#include <string.h>

#include "_native.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* Helpers are inlined into the kernels, in this file's instruction set. */
#define INLINE static inline __attribute__((always_inline))

/* GCC vector extensions of the target's own width: LANES floats, words, integers. */
typedef float vf __attribute__((vector_size(LANES * 4)));
typedef int32_t vi __attribute__((vector_size(LANES * 4)));
typedef uint32_t vu __attribute__((vector_size(LANES * 4)));
typedef uint8_t vb __attribute__((vector_size(16))); /* 16 bytes; the first LANES used per row */

/* Variable byte shuffles in one instruction (pshufb, tbl): table lookups 16 bytes at a time. */
#if defined(__SSSE3__) || defined(__ARM_NEON)
#define BYTE_SHUFFLES 1
#endif

#define MAX_LANES 16
/* Rows of a work item read ahead on the strided side: they share a few cache sets, so not many. */
#define PREFETCH_ROWS 8

static const uint32_t IOTA_WORDS[MAX_LANES] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

INLINE vu iota(void) {
    vu v;
    memcpy(&v, IOTA_WORDS, sizeof v);
    return v;
}

INLINE vf load_vf(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Lanes of `yes` where mask is set, of `no` elsewhere. */
INLINE vi blend(vi mask, vi yes, vi no) { return (yes & mask) | (no & ~mask); }

/* Flip the sign where bit 31 of the mask is set: exactly x * -1 or x * 1. */
INLINE vf flip(vf x, vu mask) { return (vf)((vu)x ^ mask); }

/* Bytes 0 .. LANES - 1 as integers, and back (values 0..255). */
INLINE vi widen(vb v) {
#if LANES == 16 && defined(__AVX512F__)
    return (vi)_mm512_cvtepu8_epi32((__m128i)v);
#elif LANES == 8 && defined(__AVX2__)
    return (vi)_mm256_cvtepu8_epi32((__m128i)v);
#else
    vi out;
    for (int k = 0; k < LANES; k++) out[k] = v[k];
    return out;
#endif
}

INLINE vb narrow(vi v) {
#if LANES == 16 && defined(__AVX512F__)
    return (vb)_mm512_cvtepi32_epi8((__m512i)v);
#elif LANES == 8 && defined(__AVX2__)
    /* Byte 0 of each word into the low word of its 128-bit half, then the two halves together. */
    const __m256i low_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8,
                                               12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i packed = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8((__m256i)v, low_bytes),
                                                 _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    return (vb)_mm256_castsi256_si128(packed);
#else
    vb out = {0};
    for (int k = 0; k < LANES; k++) out[k] = (uint8_t)v[k];
    return out;
#endif
}

/* ---- counter-based stream (rng.py) ---- */

/* The 32-bit mixer, written once for scalars and vectors. */
#define MIX32(x)            \
    do {                    \
        (x) ^= (x) >> 16;   \
        (x) *= 0x21F0AAADu; \
        (x) ^= (x) >> 15;   \
        (x) *= 0xD35A2D97u; \
        (x) ^= (x) >> 15;   \
    } while (0)

/* The stream's word for each lane's index. */
INLINE vu stream(vu index, uint32_t k0, uint32_t k1) {
    vu x = index ^ k0;
    MIX32(x);
    x ^= k1;
    MIX32(x);
    return x;
}

/* ---- in-register transposes (perfect shuffles: log2(n) rounds of interleaving row i with row
 * i + n/2) ---- */

/* 16 x 16 bytes: v[i][j] <-> v[j][i]. */
INLINE void transpose_bytes(vb v[16]) {
    for (int round = 0; round < 4; round++) {
        vb t[16];
        for (int i = 0; i < 8; i++) {
            t[2 * i] = __builtin_shuffle(v[i], v[i + 8], (vb){0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23});
            t[2 * i + 1] =
                __builtin_shuffle(v[i], v[i + 8], (vb){8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31});
        }
        memcpy(v, t, sizeof t);
    }
}

/* LANES x LANES words: v[i][j] <-> v[j][i]. */
#if LANES == 16
#define ZIP_LOW {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23}
#define ZIP_HIGH {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}
#elif LANES == 8
#define ZIP_LOW {0, 8, 1, 9, 2, 10, 3, 11}
#define ZIP_HIGH {4, 12, 5, 13, 6, 14, 7, 15}
#else
#define ZIP_LOW {0, 4, 1, 5}
#define ZIP_HIGH {2, 6, 3, 7}
#endif

INLINE void transpose_lanes(vu v[LANES]) {
    for (int round = 1; round < LANES; round *= 2) {
        vu t[LANES];
        for (int i = 0; i < LANES / 2; i++) {
            t[2 * i] = __builtin_shuffle(v[i], v[i + LANES / 2], (vu)ZIP_LOW);
            t[2 * i + 1] = __builtin_shuffle(v[i], v[i + LANES / 2], (vu)ZIP_HIGH);
        }
        memcpy(v, t, sizeof t);
    }
}

/* ---- quantize: clip, map to [0, g], stochastic rounding to table levels (quantize.quantize) ----
 * v rounds up from R[i] to R[i+1] when r * (R[i+1] - R[i]) < v - R[i], r uniform in [0, 1). */

/* The bracketing levels of v for c = floor(v): R[i] (below), R[i+1] - R[i] (step) and i (lower). */
typedef struct {
    vf below, step;
    vi lower;
} bracket;

INLINE vu load_vu(const uint32_t *p) {
    vu v;
    memcpy(&v, p, sizeof v);
    return v;
}

#if LANES == 16 && defined(__AVX512F__)
/* 32-entry table[c] for c in 0..31 (vpermt2ps). */
INLINE vf permute32(const float *table, vi c) { return __builtin_shuffle(load_vf(table), load_vf(table + 16), c); }

INLINE bracket brackets(const quantizer *q, vi c) {
    bracket b = {permute32(q->base, c), permute32(q->width, c), (vi)permute32((const float *)q->lower, c)};
    for (int32_t first = 32; first <= q->top; first += 32) { /* g > 32: one more permute per 32 entries */
        vi here = (c & ~31) == first;
        b.below = (vf)blend(here, (vi)permute32(q->base + first, c), (vi)b.below);
        b.step = (vf)blend(here, (vi)permute32(q->width + first, c), (vi)b.step);
        b.lower = blend(here, (vi)permute32((const float *)q->lower + first, c), b.lower);
    }
    return b;
}
#else
/* quantizer.levels[c]: all three levels in one lookup, 8-entry permutes on AVX2. */
INLINE vu level_words(const quantizer *q, vi c) {
#if LANES == 8 && defined(__AVX2__)
    vu words = (vu)_mm256_permutevar8x32_epi32((__m256i)load_vu(q->levels), (__m256i)c);
    for (int32_t first = 8; first <= q->top; first += 8) {
        __m256i more = _mm256_permutevar8x32_epi32((__m256i)load_vu(q->levels + first), (__m256i)c);
        words = (vu)blend((c & ~7) == first, (vi)more, (vi)words);
    }
#else
    vu words;
    for (int k = 0; k < LANES; k++) words[k] = q->levels[c[k]];
#endif
    return words;
}

INLINE bracket brackets(const quantizer *q, vi c) {
    vu words = level_words(q, c);
    return (bracket){__builtin_convertvector((vi)(words & 255), vf),
                     __builtin_convertvector((vi)(words >> 8 & 255), vf), (vi)(words >> 16)};
}
#endif

INLINE vf splat(float x) {
    vf v;
    for (int k = 0; k < LANES; k++) v[k] = x;
    return v;
}

/* u > -t ? u : -t, then u < t ? u : t: NaN goes to -T (max and min return their second operand
 * for NaN, as the comparisons do). */
INLINE vf clip(vf u, vf t) {
#if LANES == 16 && defined(__AVX512F__)
    return (vf)_mm512_min_ps(_mm512_max_ps((__m512)u, (__m512)-t), (__m512)t);
#elif LANES == 8 && defined(__AVX2__)
    return (vf)_mm256_min_ps(_mm256_max_ps((__m256)u, (__m256)-t), (__m256)t);
#else
    u = (vf)blend((vi)(u > -t), (vi)u, (vi)-t);
    return (vf)blend((vi)(u < t), (vi)u, (vi)t);
#endif
}

/* Table indices of y, or their values R[index] (q->values), whose elements have rounding-stream
 * indices p (in the first LANES bytes). R[index] is the bracket's lower level, plus its step where
 * rounding up: integers, exact in fp32. */
INLINE vb quantize_lanes(const quantizer *q, vf y, vu p) {
    const vf t = splat(q->threshold);
    vf v = (clip(y * q->scale, t) + t) * q->gain; /* in [0, g] */
    vi c = __builtin_convertvector(v, vi);         /* truncation: floor, as v >= 0 */
    c = blend(c > q->top, (vi){0} + q->top, c);
    bracket b = brackets(q, c);
    vi word = (vi)(stream(p, q->k0, q->k1) >> 8); /* top 24 bits: exact in fp32 */
    vf r = __builtin_convertvector(word, vf) * 0x1p-24f;
    vi up = (vi)(r * b.step < v - b.below); /* -1 where rounding up */
    if (q->values) return narrow(__builtin_convertvector(b.below + (vf)((vi)b.step & up), vi));
    return narrow(b.lower - up);
}

/* ---- tiles: the transform of LANES interleaved blocks side by side (hadamard.py) ----
 *
 * Viewing the padded input as a row-major matrix of `block` rows and `columns` = padded / block
 * columns, rotated block j is the transform of column j (elements j, j + columns, ...) and is
 * stored contiguously. A tile takes LANES adjacent columns: row r of the tile is one vector, lane
 * k holding element r of block c0 + k, so every butterfly of the transform adds and subtracts
 * whole rows, with no shuffles. A tile's rows stay in a scratch of block vectors while passes of
 * up to REGISTER_STAGES butterfly stages each run over them in registers.
 *
 * The rotated side of each kernel (encode's indices, decode's sums) is contiguous per tile and
 * goes through in-register transposes. The interleaved side (encode's input, decode's output)
 * has one row of a tile every `columns` elements: at a power-of-two stride those rows all fall
 * into the same few cache sets, so a work item takes a group of adjacent tiles and moves each
 * row of the group as one contiguous run. */

typedef struct {
    size_t c0, width; /* first column, columns in use (LANES except at the right edge) */
    vu first;         /* rotated position of each lane's row 0: (c0 + lane) * block */
    vf *rows;         /* block rows */
    vu *words;        /* sign stream words of each 32 rows (block >= 32) */
} tile_t;

/* Scratch memory, 64-byte aligned; aborts when out of memory, as there is no way to report it
 * from a worker thread and the process cannot go on anyway. */
static void *scratch(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) abort();
    return p;
}

/* Sign masks of row r: position p flips where bit p % 32 of stream word p / 32 is set (rng.signs). */
INLINE vu sign_mask(const tile_job *j, const tile_t *t, size_t r) {
    if (j->block >= 32) return (t->words[r >> 5] >> (uint32_t)(r & 31)) << 31;
    vu p = t->first + (uint32_t)r;
    return (stream(p >> 5, j->k0, j->k1) >> (p & 31)) << 31;
}

/* Lanes [0, count) of a row from p, zeros beyond (a tile's right edge, or the input's end). */
static void partial_row(float *row, const float *p, size_t count) {
    memset(row, 0, LANES * sizeof(float));
    memcpy(row, p, count * sizeof(float));
}

/* Whether every row of the group's tiles lies within `limit` elements: then no bounds checks. */
static int whole_rows(const tile_job *j, const tile_t *tiles, size_t count, size_t limit) {
    const tile_t *last = &tiles[count - 1];
    return last->width == LANES && (j->block - 1) * j->columns + last->c0 + LANES <= limit;
}

/* ENCODE, ROTATE: the group's rows from x, zero-padded, signs flipped. */
INLINE void load_input(const tile_job *j, tile_t *tiles, size_t count) {
    const int whole = whole_rows(j, tiles, count, j->n);
    const size_t ahead = PREFETCH_ROWS * j->columns;
    for (size_t r = 0; r < j->block; r++)
        for (size_t g = 0; g < count; g++) {
            tile_t *t = &tiles[g];
            size_t at = r * j->columns + t->c0;
            vf v;
            if (whole) {
                if (r + PREFETCH_ROWS < j->block) { /* both lines of a row that straddles two */
                    __builtin_prefetch(j->x + at + ahead, 0, 2);
                    __builtin_prefetch(j->x + at + ahead + LANES - 1, 0, 2);
                }
                v = load_vf(j->x + at);
            } else {
                partial_row((float *)&v, j->x + at, at >= j->n ? 0 : j->n - at < t->width ? j->n - at : t->width);
            }
            t->rows[r] = flip(v, sign_mask(j, t, r));
        }
}

/* DECODE: the group's normalized rows, signs flipped, to their interleaved places in the output. */
INLINE void store_rows(const tile_job *j, const tile_t *tiles, size_t count) {
    const int whole = whole_rows(j, tiles, count, j->length);
    const size_t ahead = PREFETCH_ROWS * j->columns;
    for (size_t r = 0; r < j->block; r++)
        for (size_t g = 0; g < count; g++) {
            const tile_t *t = &tiles[g];
            vf v = flip(t->rows[r] * j->norm, sign_mask(j, t, r));
            size_t at = r * j->columns + t->c0;
            if (whole) {
                if (r + PREFETCH_ROWS < j->block) {
                    __builtin_prefetch(j->out + at + ahead, 1, 3);
                    __builtin_prefetch(j->out + at + ahead + LANES - 1, 1, 3);
                }
                memcpy(j->out + at, &v, sizeof v);
            } else {
                for (size_t k = 0; k < t->width && at + k < j->length; k++) j->out[at + k] = v[k];
            }
        }
}

/* DECODE: a tile's rows from the rotated-layout sums, (src - offset) * scale. */
INLINE void load_sums(const tile_job *j, tile_t *t) {
    const size_t block = j->block, c0 = t->c0;
    if (block >= 16 && j->kind == SRC_U8) { /* 16 rows of each block at a time, transposed */
        const uint8_t *src = (const uint8_t *)j->src;
        for (size_t r0 = 0; r0 < block; r0 += 16) {
            vb v[16] = {{0}};
            for (size_t k = 0; k < t->width; k++) memcpy(&v[k], src + (c0 + k) * block + r0, sizeof v[k]);
            transpose_bytes(v);
            for (int i = 0; i < 16; i++)
                t->rows[r0 + i] = (__builtin_convertvector(widen(v[i]), vf) - j->offset) * j->scale;
        }
    } else if (block >= LANES && j->kind != SRC_U8) { /* 32-bit sums or floats, LANES rows at a time */
        const uint32_t *src = (const uint32_t *)j->src;
        for (size_t r0 = 0; r0 < block; r0 += LANES) {
            vu v[LANES] = {{0}};
            for (size_t k = 0; k < t->width; k++) memcpy(&v[k], src + (c0 + k) * block + r0, sizeof v[k]);
            transpose_lanes(v);
            for (int i = 0; i < LANES; i++) {
                vf s = j->kind == SRC_I32 ? __builtin_convertvector((vi)v[i], vf) : (vf)v[i];
                t->rows[r0 + i] = (s - j->offset) * j->scale;
            }
        }
    } else { /* blocks shorter than a transpose */
        for (size_t r = 0; r < block; r++) {
            vf s = {0};
            for (size_t k = 0; k < t->width; k++) {
                size_t at = (c0 + k) * block + r;
                s[k] = j->kind == SRC_U8    ? (float)((const uint8_t *)j->src)[at]
                       : j->kind == SRC_I32 ? (float)((const int32_t *)j->src)[at]
                                            : ((const float *)j->src)[at];
            }
            t->rows[r] = (s - j->offset) * j->scale;
        }
    }
}

/* Butterfly pair: (a, b) -> (a + b, a - b). */
#define BUTTERFLY(a, b)      \
    do {                     \
        vf sum_ = (a) + (b); \
        (b) = (a) - (b);     \
        (a) = sum_;          \
    } while (0)

/* Stages s0 .. s0 + k - 1 (pairs of rows 2^s apart) over a tile, 2^k rows at a time in registers. */
INLINE void transform_pass(vf *rows, size_t block, int s0, const int k) {
    const size_t h = (size_t)1 << s0, span = h << k;
    for (size_t base = 0; base < block; base += span)
        for (size_t row = base; row < base + h; row++) {
            vf v[1 << REGISTER_STAGES], *at = rows + row;
#pragma GCC unroll 32
            for (int i = 0; i < 1 << k; i++) v[i] = at[i * h];
#pragma GCC unroll 5
            for (int s = 0; s < k; s++)
#pragma GCC unroll 32
                for (int i = 0; i < 1 << k; i++)
                    if (!(i & 1 << s)) BUTTERFLY(v[i], v[i | 1 << s]);
#pragma GCC unroll 32
            for (int i = 0; i < 1 << k; i++) at[i * h] = v[i];
        }
}

/* All log2(block) stages, not normalized, in as few passes as the registers allow (any split gives
 * the same bits: each element goes through the same additions in the same order). */
INLINE void transform(vf *rows, size_t block, int stages) {
    const int passes = (stages + REGISTER_STAGES - 1) / REGISTER_STAGES;
    for (int p = 0, s0 = 0; p < passes; p++) {
        int k = stages / passes + (p < stages % passes);
        switch (k) {
        case 1: transform_pass(rows, block, s0, 1); break;
        case 2: transform_pass(rows, block, s0, 2); break;
#if REGISTER_STAGES >= 3
        case 3: transform_pass(rows, block, s0, 3); break;
#endif
#if REGISTER_STAGES >= 4
        case 4: transform_pass(rows, block, s0, 4); break;
#endif
#if REGISTER_STAGES >= 5
        case 5: transform_pass(rows, block, s0, 5); break;
#endif
        }
        s0 += k;
    }
}

/* ENCODE: a tile's normalized rows quantized, 16 rows at a time transposed into its blocks. */
INLINE void store_indices(const tile_job *j, const tile_t *t) {
    const size_t block = j->block;
    for (size_t r0 = 0; r0 < block; r0 += 16) {
        vb v[16] = {{0}};
        if (block >= 16) {
#pragma GCC unroll 16
            for (size_t i = 0; i < 16; i++)
                v[i] = quantize_lanes(&j->q, t->rows[r0 + i] * j->norm, t->first + (uint32_t)(r0 + i));
        } else {
            for (size_t i = 0; i < block; i++)
                v[i] = quantize_lanes(&j->q, t->rows[i] * j->norm, t->first + (uint32_t)i);
        }
        transpose_bytes(v);
        for (size_t k = 0; k < t->width; k++) {
            uint8_t *out = j->indices + (t->c0 + k) * block + r0;
            if (block >= 16) memcpy(out, &v[k], sizeof v[k]);
            else memcpy(out, &v[k], block);
        }
    }
}

/* ROTATE: a tile's normalized rows, LANES at a time transposed into its blocks of the output. */
INLINE void store_rotated(const tile_job *j, const tile_t *t) {
    const size_t block = j->block;
    if (block >= LANES) {
        for (size_t r0 = 0; r0 < block; r0 += LANES) {
            vu v[LANES];
            for (int i = 0; i < LANES; i++) v[i] = (vu)(t->rows[r0 + i] * j->norm);
            transpose_lanes(v);
            for (size_t k = 0; k < t->width; k++) memcpy(j->out + (t->c0 + k) * block + r0, &v[k], sizeof v[k]);
        }
    } else {
        for (size_t r = 0; r < block; r++) {
            vf row = t->rows[r] * j->norm;
            for (size_t k = 0; k < t->width; k++) j->out[(t->c0 + k) * block + r] = row[k];
        }
    }
}

/* Work items are groups of j->group tiles. */
INLINE void tile_body(const void *ctx, work_t *work, int mode) {
    /* A local copy: stores through the output pointers cannot alias it. */
    const tile_job job = *(const tile_job *)ctx, *j = &job;
    const size_t block = j->block, tiles = (j->columns + LANES - 1) / LANES;
    vf *rows = scratch(j->group * block * sizeof(vf));
    vu *words = block >= 32 ? scratch(j->group * block / 32 * sizeof(vu)) : NULL;
    tile_t group[MAX_GROUP];
    size_t first, last;
    while (claim(work, &first, &last))
        for (size_t item = first; item < last; item++) {
            size_t count = tiles - item * j->group < j->group ? tiles - item * j->group : j->group;
            for (size_t g = 0; g < count; g++) {
                tile_t *t = &group[g];
                t->c0 = (item * j->group + g) * LANES;
                t->width = j->columns - t->c0 < LANES ? j->columns - t->c0 : LANES;
                t->first = (iota() + (uint32_t)t->c0) * (uint32_t)block;
                t->rows = rows + g * block;
                t->words = words ? words + g * (block / 32) : NULL;
                for (size_t i = 0; i < block / 32; i++)
                    t->words[i] = stream((t->first >> 5) + (uint32_t)i, j->k0, j->k1);
                if (mode == DECODE) load_sums(j, t);
            }
            if (mode != DECODE) load_input(j, group, count);
            for (size_t g = 0; g < count; g++) {
                transform(group[g].rows, block, j->log_block);
                if (mode == ENCODE) store_indices(j, &group[g]);
                if (mode == ROTATE) store_rotated(j, &group[g]);
            }
            if (mode == DECODE) store_rows(j, group, count);
        }
    free(rows);
    free(words);
}

static void tiles(const void *job, work_t *work) {
    switch (((const tile_job *)job)->mode) {
    case ENCODE: tile_body(job, work, ENCODE); break;
    case ROTATE: tile_body(job, work, ROTATE); break;
    default: tile_body(job, work, DECODE); break;
    }
}

/* ---- quantize of a rotated vector, and table lookup: element by element ---- */

static void quantize(const void *ctx, work_t *work) {
    const quantize_job job = *(const quantize_job *)ctx, *j = &job;
    size_t first, last;
    while (claim(work, &first, &last)) {
        size_t i = first;
        for (; i + LANES <= last; i += LANES) {
            vb index = quantize_lanes(&j->q, load_vf(j->src + i), iota() + (uint32_t)i);
            memcpy(j->dst + i, &index, LANES);
        }
        if (i < last) { /* the ragged end */
            vf y;
            partial_row((float *)&y, j->src + i, last - i);
            vb index = quantize_lanes(&j->q, y, iota() + (uint32_t)i);
            memcpy(j->dst + i, &index, last - i);
        }
    }
}

#ifdef BYTE_SHUFFLES
/* table[index] for 16 byte indices, table holding `chunks` * 16 bytes (pshufb); 0 beyond it. */
INLINE vb lookup16(const uint8_t *table, size_t chunks, vb index) {
    vb low = index & 15, high = index >> 4, out = {0};
    for (size_t c = 0; c < chunks; c++) {
        vb part;
        memcpy(&part, table + 16 * c, sizeof part);
        out |= __builtin_shuffle(part, low) & (vb)(high == (uint8_t)c);
    }
    return out;
}

#endif

static void lookup(const void *ctx, work_t *work) {
    const lookup_job job = *(const lookup_job *)ctx, *j = &job;
    size_t first, last;
    while (claim(work, &first, &last))
#ifndef BYTE_SHUFFLES
        for (size_t i = first; i < last; i++) j->dst[i] = j->values[j->src[i]]; /* tables hold 256 bytes */
#else
        for (size_t i = first; i < last; i += 16) {
            vb index = {0};
            if (last - i >= 16) {
                memcpy(&index, j->src + i, sizeof index);
                index = lookup16(j->values, j->chunks, index);
                memcpy(j->dst + i, &index, sizeof index);
            } else {
                memcpy(&index, j->src + i, last - i);
                index = lookup16(j->values, j->chunks, index);
                memcpy(j->dst + i, &index, last - i);
            }
        }
#endif
}

/* Each pair (a, b) read as the 16-bit a | b << 8 becomes the byte a | b << 4: a loop the
 * compiler vectorizes. An index above 15 leaves a high nibble set, which the OR of all pairs keeps. */
static void pack_nibbles(const void *ctx, work_t *work) {
    nibbles_job *j = (nibbles_job *)ctx;
    const uint8_t *restrict src = j->src;
    uint8_t *restrict dst = j->dst;
    size_t first, last;
    uint16_t seen = 0;
    while (claim(work, &first, &last))
        for (size_t i = first; i < last; i++) {
            uint16_t pair = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
            seen |= pair;
            dst[i] = (uint8_t)(pair | pair >> 4);
        }
    if (seen & 0xF0F0) __atomic_store_n(&j->out_of_range, 1, __ATOMIC_RELAXED);
}

const kernels_t KERNELS = {KERNELS_NAME, LANES, tiles, quantize, lookup, pack_nibbles};
