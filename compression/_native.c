/* Fused CPU kernels of the THC codec: randomized Hadamard transform, stochastic quantization,
 * both at once (encode), table lookup. Plain CPython C API: arguments are data pointers (as integers) and sizes, the
 * GIL is released while the kernels run, and large inputs are split over pthreads.
 *
 * The arithmetic mirrors hadamard.py, quantize.py and rng.py operation by operation (same fp32
 * constants, same butterfly order, no FMA contraction: build with -ffp-contract=off), so both
 * paths produce the same signs and the same indices.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define SIMD __attribute__((target_clones("avx2", "default")))
#else
#define SIMD
#endif

/* Helpers are inlined into each target clone so that they get its instruction set too. */
#define INLINE static inline __attribute__((always_inline))

#define MAX_THREADS 64
#define ELEMENT_GRAIN 65536 /* least elements worth a thread */
#define GROUP_GRAIN 65536   /* least transform elements worth a thread */

/* GCC (>= 9) vector extensions: 8 lanes, lowered to AVX2 or SSE2 by the target clone. Other
 * compilers fail the (optional) build and the codec uses its torch path. */
typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint8_t v8b __attribute__((vector_size(8)));
typedef uint8_t v16b __attribute__((vector_size(16)));
typedef uint8_t v32b __attribute__((vector_size(32)));

INLINE v8f load8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }

/* ---- counter-based stream (rng.py) ---- */

/* The 32-bit mixer, written once for scalars and 8-lane vectors. */
#define MIX32(x)           \
    do {                   \
        (x) ^= (x) >> 16;  \
        (x) *= 0x21F0AAADu; \
        (x) ^= (x) >> 15;  \
        (x) *= 0xD35A2D97u; \
        (x) ^= (x) >> 15;  \
    } while (0)

INLINE uint32_t stream(uint32_t index, uint32_t k0, uint32_t k1) {
    uint32_t x = index ^ k0;
    MIX32(x);
    x ^= k1;
    MIX32(x);
    return x;
}

/* stream() of 8 indices at once. */
INLINE v8u stream8(v8u index, uint32_t k0, uint32_t k1) {
    v8u x = index ^ k0;
    MIX32(x);
    x ^= k1;
    MIX32(x);
    return x;
}

static const v8u IOTA = {0, 1, 2, 3, 4, 5, 6, 7};

/* Signs (rng.signs): position p flips where bit p % 32 of stream word p / 32 is set. Masks carry
 * that bit in bit 31, ready to XOR onto a float. */
INLINE uint32_t sign_mask(uint32_t p, uint32_t k0, uint32_t k1) { return (stream(p >> 5, k0, k1) >> (p & 31)) << 31; }

/* Masks of positions p .. p + 7 (p % 8 == 0, so they share the stream word `word`). */
INLINE v8u sign_mask8(uint32_t word, uint32_t p) { return (((v8u){0} + word) >> (IOTA + (p & 31))) << 31; }

/* Flip the sign where the mask says: exactly x * -1 or x * 1. */
INLINE float flip(float x, uint32_t mask) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits ^= mask;
    memcpy(&x, &bits, sizeof x);
    return x;
}

INLINE v8f flip8(v8f x, v8u mask) { return (v8f)((v8u)x ^ mask); }

/* ---- fork-join over [0, count) ---- */

typedef void (*range_fn)(const void *ctx, size_t begin, size_t end);

typedef struct {
    range_fn fn;
    const void *ctx;
    size_t begin, end;
} task_t;

static void *run_task(void *arg) {
    task_t *task = (task_t *)arg;
    task->fn(task->ctx, task->begin, task->end);
    return NULL;
}

/* Split [0, count) into at most `threads` ranges of at least `grain` items; the caller runs one. */
static void parallel_for(range_fn fn, const void *ctx, size_t count, size_t grain, int threads) {
    size_t parts = count / (grain ? grain : 1);
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if ((size_t)threads > parts) threads = (int)parts;
    if (threads <= 1) {
        fn(ctx, 0, count);
        return;
    }
    task_t tasks[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS];
    size_t chunk = (count + (size_t)threads - 1) / (size_t)threads;
    for (int t = 0; t < threads; t++) {
        size_t begin = (size_t)t * chunk;
        size_t end = begin + chunk < count ? begin + chunk : count;
        tasks[t] = (task_t){fn, ctx, begin, end};
        started[t] = t > 0 && pthread_create(&ids[t], NULL, run_task, &tasks[t]) == 0;
        if (t > 0 && !started[t]) run_task(&tasks[t]);
    }
    run_task(&tasks[0]);
    for (int t = 1; t < threads; t++)
        if (started[t]) pthread_join(ids[t], NULL);
}

/* ---- Walsh-Hadamard transform of interleaved blocks (hadamard.py) ----
 *
 * Viewing the padded input as a row-major matrix of `block` rows and `columns` = padded / block
 * columns, rotated block j is the transform of column j (elements j, j + columns, ...). The
 * rotated vector stores its blocks contiguously, so only one side of each kernel is strided.
 * A task takes GROUP columns; tiles of 8 rows x 8 columns move through an in-register transpose,
 * and leftover columns (and blocks shorter than 8) take a scalar path.
 */

#define GROUP 32         /* columns per task: 128 bytes of each strided row, 32 blocks of output */
#define PREFETCH_ROWS 8 /* how far ahead strided rows are prefetched: the next tile's rows */

/* Butterfly stages h = 1, 2, 4 inside one group of 8: pairs (j, j + h) get a + b and a - b. */
INLINE v8f butterflies8(v8f v) {
    v8f a = __builtin_shuffle(v, (v8i){1, 0, 3, 2, 5, 4, 7, 6});
    v = __builtin_shuffle(v + a, a - v, (v8i){0, 9, 2, 11, 4, 13, 6, 15});
    a = __builtin_shuffle(v, (v8i){2, 3, 0, 1, 6, 7, 4, 5});
    v = __builtin_shuffle(v + a, a - v, (v8i){0, 1, 10, 11, 4, 5, 14, 15});
    a = __builtin_shuffle(v, (v8i){4, 5, 6, 7, 0, 1, 2, 3});
    return __builtin_shuffle(v + a, a - v, (v8i){0, 1, 2, 3, 12, 13, 14, 15});
}

/* Butterfly pair: (a, b) -> (a + b, a - b). */
#define BUTTERFLY(a, b)       \
    do {                      \
        v8f sum_ = (a) + (b); \
        (b) = (a) - (b);      \
        (a) = sum_;           \
    } while (0)

/* One pass of `stages` (1 to 3) consecutive stages of distances d, 2d, 4d over x[0, n), d >= 8,
 * kept in registers between stages; results are multiplied by m (1, or the final scale). */
INLINE void butterfly_pass(float *restrict x, size_t n, size_t d, int stages, float m) {
    size_t span = d << stages;
    for (size_t i = 0; i < n; i += span)
        for (size_t j = i; j < i + d; j += 8) {
            v8f v[8];
            for (int k = 0; k < 1 << stages; k++) v[k] = load8(x + j + k * d);
            for (int s = 0; s < stages; s++)
                for (int k = 0; k < 1 << stages; k++)
                    if (!(k & (1 << s))) BUTTERFLY(v[k], v[k | 1 << s]);
            for (int k = 0; k < 1 << stages; k++) store8(x + j + k * d, v[k] * m);
        }
}

/* Normalized transform of one contiguous block in place: stages h = 1, 2, 4, ..., then scale. */
INLINE void transform(float *restrict x, size_t block, float scale) {
    if (block < 8) {
        for (size_t d = 1; d < block; d *= 2)
            for (size_t i = 0; i < block; i += 2 * d)
                for (size_t j = i; j < i + d; j++) {
                    float a = x[j], b = x[j + d];
                    x[j] = a + b;
                    x[j + d] = a - b;
                }
        for (size_t j = 0; j < block; j++) x[j] *= scale;
        return;
    }
    for (size_t j = 0; j < block; j += 8) store8(x + j, butterflies8(load8(x + j)));
    if (block == 8) {
        for (size_t j = 0; j < block; j += 8) store8(x + j, load8(x + j) * scale);
        return;
    }
    for (size_t d = 8; d < block;) { /* up to three stages per pass; the last pass also scales */
        int stages = 8 * d <= block ? 3 : 4 * d <= block ? 2 : 1;
        size_t next = d << stages;
        float m = next == block ? scale : 1.0f;
        if (stages == 3) butterfly_pass(x, block, d, 3, m);
        else if (stages == 2) butterfly_pass(x, block, d, 2, m);
        else butterfly_pass(x, block, d, 1, m);
        d = next;
    }
}

/* In-register transpose of an 8 x 8 tile: v[i][j] <-> v[j][i]. */
INLINE void transpose8(v8f v[8]) {
    v8f t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shuffle(v[i], v[i + 1], (v8i){0, 8, 1, 9, 4, 12, 5, 13});
        t[i + 1] = __builtin_shuffle(v[i], v[i + 1], (v8i){2, 10, 3, 11, 6, 14, 7, 15});
    }
    for (int i = 0; i < 8; i += 4)
        for (int k = 0; k < 2; k++) {
            u[i + 2 * k] = __builtin_shuffle(t[i + k], t[i + k + 2], (v8i){0, 1, 8, 9, 4, 5, 12, 13});
            u[i + 2 * k + 1] = __builtin_shuffle(t[i + k], t[i + k + 2], (v8i){2, 3, 10, 11, 6, 7, 14, 15});
        }
    for (int i = 0; i < 4; i++) {
        v[i] = __builtin_shuffle(u[i], u[i + 4], (v8i){0, 1, 2, 3, 8, 9, 10, 11});
        v[i + 4] = __builtin_shuffle(u[i], u[i + 4], (v8i){4, 5, 6, 7, 12, 13, 14, 15});
    }
}

/* Distance between blocks in a task's scratch: a block plus one cache line, so that the 8 blocks
 * a tile touches do not all fall into the same L1 set (blocks are 4 KiB multiples). */
static size_t skewed(size_t block) { return (block < 8 ? 8 : block) + 16; }

/* Scratch for the GROUP blocks of one task; aborts when out of memory, as there is no way to
 * report it from a worker thread and the process cannot go on anyway. */
static float *group_scratch(size_t block) {
    float *x = aligned_alloc(32, GROUP * skewed(block) * sizeof(float));
    if (!x) abort();
    return x;
}

/* ---- rotate: pad, flip signs, gather interleaved blocks, transform (hadamard.rotate) ---- */

typedef struct {
    const float *src;
    size_t n;
    float *dst;
    size_t block, columns;
    uint32_t k0, k1;
    float scale;
} rotate_args;

/* Stream words holding the signs of rows r .. r + 7 of the 8 blocks from `column`. */
INLINE v8u group_words(size_t column, size_t block, size_t r, uint32_t k0, uint32_t k1) {
    return stream8(((IOTA + (uint32_t)column) * (uint32_t)block + (uint32_t)r) >> 5, k0, k1);
}

/* Rows r .. r + 7 of the 8 input columns from `column`, transposed into their gathered blocks
 * (block k at out + k * stride) with signs flipped. */
INLINE void rotate_tile(const rotate_args *a, size_t column, size_t r, float *out, size_t stride) {
    const size_t block = a->block, columns = a->columns, n = a->n;
    v8f v[8];
    for (int i = 0; i < 8; i++) {
        size_t at = (r + i) * columns + column;
        if (at + 8 <= n) {
            v[i] = load8(a->src + at);
        } else {
            for (size_t k = 0; k < 8; k++) v[i][k] = at + k < n ? a->src[at + k] : 0.0f;
        }
    }
    transpose8(v);
    v8u words = group_words(column, block, r, a->k0, a->k1);
    for (int k = 0; k < 8; k++) {
        size_t p = (column + k) * block + r;
        store8(out + k * stride + r, flip8(v[k], sign_mask8(words[k], (uint32_t)p)));
    }
}

/* Rotated blocks of task g (columns g * GROUP onward) into out, block k of the task at
 * out + k * stride. */
INLINE void rotate_group(const rotate_args *a, size_t g, float *out, size_t stride) {
    const size_t block = a->block, columns = a->columns, n = a->n;
    size_t column = g * GROUP, width = columns - column < GROUP ? columns - column : GROUP;
    size_t vector = block >= 8 ? width / 8 * 8 : 0; /* columns that go through transposes */
    for (size_t r = 0; vector && r < block; r += 8) {
        for (size_t i = 0; i < 8; i++) /* strided rows: fetch ahead of the hardware's reach */
            for (size_t k = 0, at = (r + i + PREFETCH_ROWS) * columns + column; k < vector; k += 16)
                if (at + k < n) __builtin_prefetch(a->src + at + k);
        for (size_t k = 0; k < vector; k += 8) rotate_tile(a, column + k, r, out + k * stride, stride);
    }
    for (size_t k = vector; k < width; k++)
        for (size_t r = 0; r < block; r++) {
            size_t i = r * columns + column + k, p = (column + k) * block + r;
            out[k * stride + r] = flip(i < n ? a->src[i] : 0.0f, sign_mask((uint32_t)p, a->k0, a->k1));
        }
    for (size_t k = 0; k < width; k++) transform(out + k * stride, block, a->scale);
}

SIMD static void rotate_range(const void *ctx, size_t first, size_t last) {
    const rotate_args args = *(const rotate_args *)ctx, *a = &args; /* a local copy: stores cannot alias it */
    for (size_t g = first; g < last; g++) rotate_group(a, g, a->dst + g * GROUP * a->block, a->block);
}

/* ---- unrotate: (src - offset) * scale, transform, scatter interleaved blocks, flip signs,
 * truncate (quantize.dequantize + hadamard.unrotate) ---- */

enum { SRC_F32 = 0, SRC_U8 = 1, SRC_I32 = 2 };

typedef struct {
    const void *src;
    int kind;
    float offset, scale;
    float *dst;
    size_t length;
    size_t block, columns;
    uint32_t k0, k1;
    float norm;
} unrotate_args;

/* out[0, count) = (src[at, at + count) - offset) * scale in fp32. */
INLINE void unrotate_load(float *restrict out, const unrotate_args *a, size_t at, size_t count) {
    if (a->kind == SRC_U8) {
        const uint8_t *s = (const uint8_t *)a->src + at;
        for (size_t k = 0; k < count; k++) out[k] = ((float)s[k] - a->offset) * a->scale;
    } else if (a->kind == SRC_I32) {
        const int32_t *s = (const int32_t *)a->src + at;
        for (size_t k = 0; k < count; k++) out[k] = ((float)s[k] - a->offset) * a->scale;
    } else {
        const float *s = (const float *)a->src + at;
        for (size_t k = 0; k < count; k++) out[k] = (s[k] - a->offset) * a->scale;
    }
}

/* Rows r .. r + 7 of the 8 transformed blocks in x from `column` (block k at x + k * stride),
 * signs flipped, transposed back into the output's interleaved layout. */
INLINE void unrotate_tile(const unrotate_args *a, const float *x, size_t stride, size_t column, size_t r) {
    const size_t block = a->block, columns = a->columns, length = a->length;
    v8f v[8];
    v8u words = group_words(column, block, r, a->k0, a->k1);
    for (int k = 0; k < 8; k++) {
        uint32_t p = (uint32_t)((column + k) * block + r);
        v[k] = flip8(load8(x + k * stride + r), sign_mask8(words[k], p));
    }
    transpose8(v);
    for (int i = 0; i < 8; i++) {
        size_t at = (r + i) * columns + column;
        if (at + 8 <= length) {
            store8(a->dst + at, v[i]);
        } else {
            for (size_t k = 0; at + k < length && k < 8; k++) a->dst[at + k] = v[i][k];
        }
    }
}

SIMD static void unrotate_range(const void *ctx, size_t first, size_t last) {
    const unrotate_args args = *(const unrotate_args *)ctx, *a = &args; /* a local copy: stores cannot alias it */
    const size_t block = a->block, columns = a->columns, length = a->length, stride = skewed(block);
    float *restrict x = group_scratch(block);
    for (size_t g = first; g < last; g++) {
        size_t column = g * GROUP, width = columns - column < GROUP ? columns - column : GROUP;
        size_t vector = block >= 8 ? width / 8 * 8 : 0; /* columns that go through transposes */
        for (size_t k = 0; k < width; k++) {
            unrotate_load(x + k * stride, a, (column + k) * block, block);
            transform(x + k * stride, block, a->norm);
        }
        for (size_t r = 0; vector && r < block; r += 8)
            for (size_t k = 0; k < vector; k += 8) unrotate_tile(a, x + k * stride, stride, column + k, r);
        for (size_t k = vector; k < width; k++)
            for (size_t r = 0; r < block; r++) {
                size_t i = r * columns + column + k, p = (column + k) * block + r;
                if (i < length) a->dst[i] = flip(x[k * stride + r], sign_mask((uint32_t)p, a->k0, a->k1));
            }
    }
    free(x);
}

/* ---- small-table lookups: 16 bytes at a time by in-register shuffles (pshufb) ---- */

/* table[index] for 16 indices, table holding `chunks` * 16 bytes; indices beyond it give 0. */
INLINE v16b lookup16(const uint8_t *table, size_t chunks, v16b index) {
    v16b low = index & 15, high = index >> 4, out = {0};
    for (size_t c = 0; c < chunks; c++) {
        v16b part;
        memcpy(&part, table + 16 * c, sizeof part);
        out |= __builtin_shuffle(part, low) & (v16b)(high == (uint8_t)c);
    }
    return out;
}

/* The low byte of each int32 lane, in bytes 0-7 (and again in 8-15). */
INLINE v16b narrow8(v8i v) {
    v32b bytes = __builtin_shuffle((v32b)v, (v32b){0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28,
                                                   0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28});
    v16b low;
    memcpy(&low, &bytes, sizeof low);
    return low;
}

/* Bytes 0-7 of v as int32 lanes (zero-extended). */
INLINE v8i widen8(v16b v) {
    v8b low;
    memcpy(&low, &v, sizeof low);
    return __builtin_convertvector(low, v8i);
}

/* ---- quantize: clip, map to [0, g], stochastic rounding to table levels (quantize.quantize) ----
 * v rounds up from R[i] to R[i+1] when r * (R[i+1] - R[i]) < v - R[i], r uniform in [0, 1). */

typedef struct {
    const float *src;
    uint8_t *dst;
    float scale, threshold, gain;
    int32_t top;   /* g - 1 */
    size_t chunks; /* 16-byte chunks of each table */
    const uint8_t *lower, *base, *width;
    uint32_t k0, k1;
} quantize_args;

/* Lanes of `yes` where mask is set, of `no` elsewhere. */
INLINE v8i select8(v8i mask, v8i yes, v8i no) { return (yes & mask) | (no & ~mask); }

/* Table indices of y[0, 8) (global element index `first` onward) into out[0, 8). */
INLINE void quantize8(const quantize_args *a, const float *y, size_t first, uint8_t *out) {
    const v8f t = (v8f){0} + a->threshold;
    v8f u = load8(y) * a->scale;
    u = (v8f)select8((v8i)(u > -t), (v8i)u, (v8i)-t); /* NaN goes to -T */
    u = (v8f)select8((v8i)(u < t), (v8i)u, (v8i)t);
    v8f v = (u + t) * a->gain;
    v8i c = __builtin_convertvector(v, v8i); /* truncation: floor, as v >= 0 */
    c = select8(c < 0, (v8i){0}, c);
    c = select8(c > a->top, (v8i){0} + a->top, c);
    v16b k = narrow8(c);
    v8f below = __builtin_convertvector(widen8(lookup16(a->base, a->chunks, k)), v8f);
    v8f step = __builtin_convertvector(widen8(lookup16(a->width, a->chunks, k)), v8f);
    v8i word = (v8i)(stream8(IOTA + (uint32_t)first, a->k0, a->k1) >> 8); /* top 24 bits: exact */
    v8f r = __builtin_convertvector(word, v8f) * 0x1p-24f;
    v8i up = (v8i)(r * step < v - below); /* -1 where rounding up */
    v16b index = narrow8(widen8(lookup16(a->lower, a->chunks, k)) - up);
    memcpy(out, &index, 8);
}

/* Indices of y[0, count) (global element index `first` onward) into out. */
INLINE void quantize_some(const quantize_args *a, const float *y, size_t first, size_t count, uint8_t *out) {
    size_t i = 0;
    for (; i + 8 <= count; i += 8) quantize8(a, y + i, first + i, out + i);
    if (i < count) { /* the ragged end, through zero-padded copies */
        float tail[8] = {0};
        uint8_t indices[8];
        memcpy(tail, y + i, (count - i) * sizeof(float));
        quantize8(a, tail, first + i, indices);
        memcpy(out + i, indices, count - i);
    }
}

SIMD static void quantize_range(const void *ctx, size_t first, size_t last) {
    const quantize_args args = *(const quantize_args *)ctx, *a = &args; /* a local copy: stores cannot alias it */
    quantize_some(a, a->src + first, first, last - first, a->dst + first);
}

/* ---- encode: rotate + quantize without writing the rotated vector (THCCodec.encode) ---- */

typedef struct {
    rotate_args rotate; /* dst unused */
    quantize_args quantize; /* src unused */
} encode_args;

SIMD static void encode_range(const void *ctx, size_t first, size_t last) {
    const encode_args args = *(const encode_args *)ctx, *a = &args; /* a local copy: stores cannot alias it */
    const size_t block = a->rotate.block, columns = a->rotate.columns, stride = skewed(block);
    float *restrict y = group_scratch(block);
    for (size_t g = first; g < last; g++) {
        size_t column = g * GROUP, width = columns - column < GROUP ? columns - column : GROUP;
        rotate_group(&a->rotate, g, y, stride);
        for (size_t k = 0; k < width; k++) {
            size_t p = (column + k) * block;
            quantize_some(&a->quantize, y + k * stride, p, block, a->quantize.dst + p);
        }
    }
    free(y);
}

/* ---- lookup: table values of indices ---- */

typedef struct {
    const uint8_t *src;
    uint8_t *dst;
    const uint8_t *values;
    size_t chunks;
} lookup_args;

/* values[src[0, count)] into dst, count <= 16. */
INLINE void lookup_some(const lookup_args *a, const uint8_t *src, uint8_t *dst, size_t count) {
    v16b index = {0};
    memcpy(&index, src, count);
    index = lookup16(a->values, a->chunks, index);
    memcpy(dst, &index, count);
}

SIMD static void lookup_range(const void *ctx, size_t first, size_t last) {
    const lookup_args args = *(const lookup_args *)ctx, *a = &args; /* a local copy: stores cannot alias it */
    size_t i = first;
    for (; i + 16 <= last; i += 16) lookup_some(a, a->src + i, a->dst + i, 16);
    if (i < last) lookup_some(a, a->src + i, a->dst + i, last - i);
}

/* ---- Python bindings ---- */

#define PTR(p) ((void *)(uintptr_t)(p))

static PyObject *py_rotate(PyObject *self, PyObject *args) {
    unsigned long long src, dst;
    Py_ssize_t n, padded, block;
    unsigned int k0, k1;
    float scale;
    int threads;
    if (!PyArg_ParseTuple(args, "KnKnnIIfi", &src, &n, &dst, &padded, &block, &k0, &k1, &scale, &threads))
        return NULL;
    size_t columns = (size_t)(padded / block);
    rotate_args a = {PTR(src), (size_t)n, PTR(dst), (size_t)block, columns, k0, k1, scale};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(rotate_range, &a, (columns + GROUP - 1) / GROUP, GROUP_GRAIN / ((size_t)block * GROUP) + 1, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_unrotate(PyObject *self, PyObject *args) {
    unsigned long long src, dst;
    int kind, threads;
    Py_ssize_t padded, block, length;
    unsigned int k0, k1;
    float offset, scale, norm;
    if (!PyArg_ParseTuple(args, "KinffKnnIIfi", &src, &kind, &padded, &offset, &scale, &dst, &length, &block, &k0,
                          &k1, &norm, &threads))
        return NULL;
    if (kind != SRC_F32 && kind != SRC_U8 && kind != SRC_I32) {
        PyErr_SetString(PyExc_ValueError, "unrotate: source kind must be 0 (fp32), 1 (uint8) or 2 (int32)");
        return NULL;
    }
    size_t columns = (size_t)(padded / block);
    unrotate_args a = {PTR(src), kind, offset, scale, PTR(dst), (size_t)length, (size_t)block, columns, k0, k1, norm};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(unrotate_range, &a, (columns + GROUP - 1) / GROUP, GROUP_GRAIN / ((size_t)block * GROUP) + 1,
                 threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* Fill q from quantize's parsed arguments; -1 with a Python error if they are inconsistent. */
static int quantize_setup(quantize_args *q, unsigned long long src, unsigned long long dst, float scale, float threshold,
                          float gain, int granularity, unsigned long long lower, unsigned long long base,
                          unsigned long long width, unsigned int k0, unsigned int k1) {
    if (granularity < 1 || granularity > 256) {
        PyErr_SetString(PyExc_ValueError, "quantize: granularity must be in 1..256 (tables hold 256 bytes)");
        return -1;
    }
    *q = (quantize_args){PTR(src), PTR(dst), scale, threshold, gain, granularity - 1, ((size_t)granularity + 15) / 16,
                         PTR(lower), PTR(base), PTR(width), k0, k1};
    return 0;
}

static PyObject *py_quantize(PyObject *self, PyObject *args) {
    unsigned long long src, dst, lower, base, width;
    Py_ssize_t n;
    float scale, threshold, gain;
    int granularity, threads;
    unsigned int k0, k1;
    quantize_args a;
    if (!PyArg_ParseTuple(args, "KnKfffiKKKIIi", &src, &n, &dst, &scale, &threshold, &gain, &granularity, &lower,
                          &base, &width, &k0, &k1, &threads) ||
        quantize_setup(&a, src, dst, scale, threshold, gain, granularity, lower, base, width, k0, k1))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    parallel_for(quantize_range, &a, (size_t)n, ELEMENT_GRAIN, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_encode(PyObject *self, PyObject *args) {
    unsigned long long src, dst, lower, base, width;
    Py_ssize_t n, padded, block;
    unsigned int sign_k0, sign_k1, round_k0, round_k1;
    float norm, scale, threshold, gain;
    int granularity, threads;
    encode_args a;
    if (!PyArg_ParseTuple(args, "KnKnnIIffffiKKKIIi", &src, &n, &dst, &padded, &block, &sign_k0, &sign_k1, &norm,
                          &scale, &threshold, &gain, &granularity, &lower, &base, &width, &round_k0, &round_k1,
                          &threads) ||
        quantize_setup(&a.quantize, 0, dst, scale, threshold, gain, granularity, lower, base, width, round_k0,
                       round_k1))
        return NULL;
    size_t columns = (size_t)(padded / block);
    a.rotate = (rotate_args){PTR(src), (size_t)n, NULL, (size_t)block, columns, sign_k0, sign_k1, norm};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(encode_range, &a, (columns + GROUP - 1) / GROUP, GROUP_GRAIN / ((size_t)block * GROUP) + 1, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_lookup(PyObject *self, PyObject *args) {
    unsigned long long src, dst, values;
    Py_ssize_t n;
    int levels, threads;
    if (!PyArg_ParseTuple(args, "KnKKii", &src, &n, &dst, &values, &levels, &threads)) return NULL;
    if (levels < 1 || levels > 256) {
        PyErr_SetString(PyExc_ValueError, "lookup: levels must be in 1..256");
        return NULL;
    }
    lookup_args a = {PTR(src), PTR(dst), PTR(values), ((size_t)levels + 15) / 16};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(lookup_range, &a, (size_t)n, ELEMENT_GRAIN, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"rotate", py_rotate, METH_VARARGS,
     "rotate(src, n, dst, padded, block, k0, k1, scale, threads): pad fp32 src to dst, flip signs, "
     "normalized block WHT."},
    {"unrotate", py_unrotate, METH_VARARGS,
     "unrotate(src, kind, padded, offset, scale, dst, length, block, k0, k1, norm, threads): "
     "(src - offset) * scale, normalized block WHT, flip signs, first `length` to fp32 dst."},
    {"quantize", py_quantize, METH_VARARGS,
     "quantize(src, n, dst, scale, threshold, gain, granularity, lower, base, width, k0, k1, threads): "
     "uint8 table indices of fp32 src by stochastic rounding (tables: 256 bytes each)."},
    {"encode", py_encode, METH_VARARGS,
     "encode(src, n, dst, padded, block, sign_k0, sign_k1, norm, scale, threshold, gain, granularity, lower, base, "
     "width, round_k0, round_k1, threads): rotate then quantize, uint8 indices only."},
    {"lookup", py_lookup, METH_VARARGS,
     "lookup(src, n, dst, values, levels, threads): dst[i] = values[src[i]] (uint8; 0 beyond levels)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "Fused CPU kernels of the THC codec.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
