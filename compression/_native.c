/* Fused CPU kernels of the THC codec: randomized Hadamard transform, stochastic quantization,
 * table lookup. Plain CPython C API: arguments are data pointers (as integers) and sizes, the
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

#define MAX_THREADS 64
#define TILE 256 /* elements processed per inner pass: small enough for L1, long enough to vectorize */
#define ELEMENT_GRAIN 65536 /* least elements worth a thread */
#define BLOCK_GRAIN 16384   /* least transform elements worth a thread */

/* GCC vector extensions: 8 lanes, lowered to AVX2 or SSE2 by the target clone. */
typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint8_t v16b __attribute__((vector_size(16)));
typedef float v16f __attribute__((vector_size(64)));

static inline v8f load8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }

/* ---- counter-based stream (rng.py) ---- */

static inline v8u mix32(v8u x) {
    x ^= x >> 16;
    x *= 0x21F0AAADu;
    x ^= x >> 15;
    x *= 0xD35A2D97u;
    x ^= x >> 15;
    return x;
}

/* Stream words of the 8 consecutive indices first..first+7. */
static inline v8u stream8(uint32_t first, uint32_t k0, uint32_t k1) {
    v8u index = (v8u){0, 1, 2, 3, 4, 5, 6, 7} + first;
    return mix32(mix32(index ^ k0) ^ k1);
}

/* Multiply by -1 where the word's top bit is set: exactly x * (1 - 2 * (word >> 31)). */
static inline v8f flip8(v8f x, v8u word) { return (v8f)((v8u)x ^ (word & 0x80000000u)); }

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

/* ---- Walsh-Hadamard butterflies (hadamard.fwht) ---- */

/* Stages h = 1, 2, 4 inside one group of 8: lanes j < j + h of a pair get a + b and a - b. */
static inline v8f wht8(v8f v) {
    v8f a = __builtin_shuffle(v, (v8i){1, 0, 3, 2, 5, 4, 7, 6});
    v = __builtin_shuffle(v + a, a - v, (v8i){0, 9, 2, 11, 4, 13, 6, 15});
    a = __builtin_shuffle(v, (v8i){2, 3, 0, 1, 6, 7, 4, 5});
    v = __builtin_shuffle(v + a, a - v, (v8i){0, 1, 10, 11, 4, 5, 14, 15});
    a = __builtin_shuffle(v, (v8i){4, 5, 6, 7, 0, 1, 2, 3});
    return __builtin_shuffle(v + a, a - v, (v8i){0, 1, 2, 3, 12, 13, 14, 15});
}

/* Stages h = 8, 16, ... of a block of at least 8 whose groups of 8 are already transformed, then scale. */
static inline void wht_rest(float *restrict x, size_t block, float scale) {
    for (size_t h = 8; h < block; h *= 2)
        for (size_t i = 0; i < block; i += 2 * h)
            for (size_t j = i; j < i + h; j += 8) {
                v8f a = load8(x + j), b = load8(x + j + h);
                store8(x + j, a + b);
                store8(x + j + h, a - b);
            }
    for (size_t j = 0; j < block; j += 8) store8(x + j, load8(x + j) * scale);
}

/* Whole transform of a block shorter than 8 (tiny vectors), in the same stage order. */
static void wht_small(float *x, size_t block, float scale) {
    for (size_t h = 1; h < block; h *= 2)
        for (size_t i = 0; i < block; i += 2 * h)
            for (size_t j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    for (size_t j = 0; j < block; j++) x[j] *= scale;
}

/* Sign of element `index` as a float multiplier, for the tiny-block path. */
static float sign_of(uint32_t index, uint32_t k0, uint32_t k1) {
    return stream8(index, k0, k1)[0] >> 31 ? -1.0f : 1.0f;
}

/* ---- rotate: pad, flip signs, transform (hadamard.rotate) ---- */

typedef struct {
    const float *src;
    size_t n;
    float *dst;
    size_t block;
    uint32_t k0, k1;
    float scale;
} rotate_args;

SIMD static void rotate_range(const void *ctx, size_t first, size_t last) {
    const rotate_args *a = ctx;
    const size_t n = a->n, block = a->block;
    const uint32_t k0 = a->k0, k1 = a->k1;
    float tail[8];
    for (size_t b = first; b < last; b++) {
        size_t base = b * block;
        float *restrict y = a->dst + base;
        if (block < 8) {
            for (size_t j = 0; j < block; j++)
                y[j] = (base + j < n ? a->src[base + j] : 0.0f) * sign_of((uint32_t)(base + j), k0, k1);
            wht_small(y, block, a->scale);
            continue;
        }
        for (size_t j = 0; j < block; j += 8) {
            size_t i = base + j;
            const float *x = a->src + i;
            if (i + 8 > n) { /* the zero-padded end */
                for (size_t l = 0; l < 8; l++) tail[l] = i + l < n ? x[l] : 0.0f;
                x = tail;
            }
            store8(y + j, wht8(flip8(load8(x), stream8((uint32_t)i, k0, k1))));
        }
        wht_rest(y, block, a->scale);
    }
}

/* ---- unrotate: (src - offset) * scale, transform, flip signs, truncate (quantize.dequantize +
 * hadamard.unrotate) ---- */

enum { SRC_F32 = 0, SRC_U8 = 1, SRC_I32 = 2 };

typedef struct {
    const void *src;
    int kind;
    float offset, scale;
    float *dst;
    size_t length;
    size_t block;
    uint32_t k0, k1;
    float norm;
} unrotate_args;

SIMD static void load_affine(float *restrict y, const void *src, int kind, size_t base, size_t count, float offset,
                             float scale) {
    if (kind == SRC_U8) {
        const uint8_t *s = (const uint8_t *)src + base;
        for (size_t j = 0; j < count; j++) y[j] = ((float)s[j] - offset) * scale;
    } else if (kind == SRC_I32) {
        const int32_t *s = (const int32_t *)src + base;
        for (size_t j = 0; j < count; j++) y[j] = ((float)s[j] - offset) * scale;
    } else {
        const float *s = (const float *)src + base;
        for (size_t j = 0; j < count; j++) y[j] = (s[j] - offset) * scale;
    }
}

SIMD static void unrotate_range(const void *ctx, size_t first, size_t last) {
    const unrotate_args *a = ctx;
    const size_t block = a->block, length = a->length;
    const uint32_t k0 = a->k0, k1 = a->k1;
    float *restrict y = aligned_alloc(32, (block < 8 ? 8 : block) * sizeof(float));
    if (!y) abort(); /* block floats; failing here means the process is out of memory anyway */
    for (size_t b = first; b < last; b++) {
        size_t base = b * block;
        size_t count = base + block <= length ? block : (base < length ? length - base : 0);
        float *restrict out = a->dst + base;
        load_affine(y, a->src, a->kind, base, block, a->offset, a->scale);
        if (block < 8) {
            wht_small(y, block, a->norm);
            for (size_t j = 0; j < count; j++) out[j] = y[j] * sign_of((uint32_t)(base + j), k0, k1);
            continue;
        }
        for (size_t j = 0; j < block; j += 8) store8(y + j, wht8(load8(y + j)));
        wht_rest(y, block, a->norm);
        for (size_t j = 0; j < count; j += 8) {
            v8f v = flip8(load8(y + j), stream8((uint32_t)(base + j), k0, k1));
            if (j + 8 <= count) {
                store8(out + j, v);
            } else {
                for (size_t l = 0; j + l < count; l++) out[j + l] = v[l];
            }
        }
    }
    free(y);
}

/* ---- small-table lookups: 16 bytes at a time by in-register shuffles (pshufb) ---- */

/* table[index] for 16 indices, table holding `chunks` * 16 bytes; indices beyond it give 0. */
static inline v16b lookup16(const uint8_t *table, size_t chunks, v16b index) {
    v16b low = index & 15, high = index >> 4, out = {0};
    for (size_t c = 0; c < chunks; c++) {
        v16b part;
        memcpy(&part, table + 16 * c, sizeof part);
        out |= __builtin_shuffle(part, low) & (v16b)(high == (uint8_t)c);
    }
    return out;
}

/* ---- quantize: clip, map to [0, g], stochastic rounding to table levels (quantize.quantize) ---- */

typedef struct {
    const float *src;
    uint8_t *dst;
    float scale, threshold, gain;
    int32_t top;   /* g - 1 */
    size_t chunks; /* 16-byte chunks of each table */
    const uint8_t *lower, *base, *width;
    uint32_t k0, k1;
} quantize_args;

SIMD static void quantize_range(const void *ctx, size_t first, size_t last) {
    const quantize_args *a = ctx;
    const float t = a->threshold, gain = a->gain, scale = a->scale;
    const int32_t top = a->top;
    const uint32_t k0 = a->k0, k1 = a->k1;
    uint8_t c[TILE] = {0};
    float v[TILE] = {0}, r[TILE] = {0};
    for (size_t start = first; start < last; start += TILE) {
        size_t count = last - start < TILE ? last - start : TILE;
        const float *restrict y = a->src + start;
        for (size_t j = 0; j < count; j++) {
            float u = y[j] * scale;
            u = u > -t ? u : -t; /* NaN goes to -T */
            u = u < t ? u : t;
            float w = (u + t) * gain;
            int32_t k = (int32_t)w;
            k = k < 0 ? 0 : k;
            c[j] = (uint8_t)(k > top ? top : k);
            v[j] = w;
        }
        for (size_t j = 0; j < count; j += 8) {
            v8i word = (v8i)(stream8((uint32_t)(start + j), k0, k1) >> 8); /* < 2**24: exact as float */
            store8(r + j, __builtin_convertvector(word, v8f) * 0x1p-24f);
        }
        for (size_t j = 0; j < count; j += 16) {
            v16b k, up;
            memcpy(&k, c + j, sizeof k);
            v16f below = __builtin_convertvector(lookup16(a->base, a->chunks, k), v16f);
            v16f step = __builtin_convertvector(lookup16(a->width, a->chunks, k), v16f);
            v16f value, uniform;
            memcpy(&value, v + j, sizeof value);
            memcpy(&uniform, r + j, sizeof uniform);
            up = __builtin_convertvector(uniform < (value - below) / step, v16b); /* -1 where rounding up */
            v16b index = lookup16(a->lower, a->chunks, k) - up;
            memcpy(a->dst + start + j, &index, count - j < 16 ? count - j : 16);
        }
    }
}

/* ---- lookup: table values of indices ---- */

typedef struct {
    const uint8_t *src;
    uint8_t *dst;
    const uint8_t *values;
    size_t chunks;
} lookup_args;

SIMD static void lookup_range(const void *ctx, size_t first, size_t last) {
    const lookup_args *a = ctx;
    for (size_t i = first; i < last; i += 16) {
        size_t count = last - i < 16 ? last - i : 16;
        v16b index = {0};
        memcpy(&index, a->src + i, count);
        index = lookup16(a->values, a->chunks, index);
        memcpy(a->dst + i, &index, count);
    }
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
    rotate_args a = {PTR(src), (size_t)n, PTR(dst), (size_t)block, k0, k1, scale};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(rotate_range, &a, (size_t)(padded / block), BLOCK_GRAIN / (size_t)block + 1, threads);
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
    unrotate_args a = {PTR(src), kind, offset, scale, PTR(dst), (size_t)length, (size_t)block, k0, k1, norm};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(unrotate_range, &a, (size_t)(padded / block), BLOCK_GRAIN / (size_t)block + 1, threads);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_quantize(PyObject *self, PyObject *args) {
    unsigned long long src, dst, lower, base, width;
    Py_ssize_t n;
    float scale, threshold, gain;
    int granularity, threads;
    unsigned int k0, k1;
    if (!PyArg_ParseTuple(args, "KnKfffiKKKIIi", &src, &n, &dst, &scale, &threshold, &gain, &granularity, &lower,
                          &base, &width, &k0, &k1, &threads))
        return NULL;
    if (granularity < 1 || granularity > 256) {
        PyErr_SetString(PyExc_ValueError, "quantize: granularity must be in 1..256 (tables hold 256 bytes)");
        return NULL;
    }
    quantize_args a = {PTR(src), PTR(dst), scale, threshold, gain, granularity - 1, ((size_t)granularity + 15) / 16,
                       PTR(lower), PTR(base), PTR(width), k0, k1};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(quantize_range, &a, (size_t)n, ELEMENT_GRAIN, threads);
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
    {"lookup", py_lookup, METH_VARARGS,
     "lookup(src, n, dst, values, levels, threads): dst[i] = values[src[i]] (uint8; 0 beyond levels)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "Fused CPU kernels of the THC codec.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
