/* What the THC kernels (_native_kernels.h, compiled once per instruction set) and their Python
 * bindings (_native.c) share: the jobs the bindings fill in, and how threads share them out. */
#ifndef INA_NATIVE_H
#define INA_NATIVE_H

#include <stddef.h>
#include <stdint.h>

/* AVX2 and AVX-512 kernels are built beside the baseline ones (GCC target pragmas, x86-64). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6
#define NATIVE_X86 1
#endif

#define MAX_GROUP 16 /* tiles per work item of the transform */

enum mode { ENCODE, ROTATE, DECODE };
enum { SRC_F32 = 0, SRC_U8 = 1, SRC_I32 = 2 };

/* Stochastic rounding to table levels (quantize.quantize). */
typedef struct {
    float scale, threshold, gain;
    int32_t top; /* g - 1: the largest c = floor(v) that indexes the tables */
    uint32_t k0, k1;
    int32_t values; /* 1: emit the table values R[index] that sums add, not the indices */
    /* quantize.Levels' tables, as fp32 and int32 (for permutes of 32 entries) and packed into
     * base[c] | width[c] << 8 | lower[c] << 16 (one lookup of 8-entry permutes or loads for all three). */
    float base[256] __attribute__((aligned(64)));
    float width[256] __attribute__((aligned(64)));
    int32_t lower[256] __attribute__((aligned(64)));
    uint32_t levels[256] __attribute__((aligned(64)));
} quantizer;

/* The transform of interleaved blocks, with what comes before and after it (see the kernels). */
typedef struct {
    int mode;
    size_t block, columns; /* padded = block * columns */
    int log_block;
    float norm;      /* the transform's normalization, 1/sqrt(block) in fp32 */
    uint32_t k0, k1; /* sign stream */
    size_t group;    /* tiles per work item */
    /* ENCODE, ROTATE: fp32 x of n elements, zero-padded */
    const float *x;
    size_t n;
    /* DECODE: (src - offset) * scale, src of `kind` in the rotated layout */
    const void *src;
    int kind;
    float offset, scale;
    /* outputs: ENCODE indices (or table values); ROTATE all padded floats; DECODE the first `length` floats */
    uint8_t *indices;
    float *out;
    size_t length;
    quantizer q; /* ENCODE */
} tile_job;

typedef struct {
    const float *src;
    uint8_t *dst;
    quantizer q;
} quantize_job;

typedef struct {
    const uint8_t *src;
    uint8_t *dst;
    const uint8_t *values;
    size_t chunks;
} lookup_job;

/* Pairs of 4-bit indices into bytes (`count` of the work: pairs), the first in the low nibble. */
typedef struct {
    const uint8_t *src;
    uint8_t *dst;
    int out_of_range; /* set when some index is above 15 */
} nibbles_job;

/* Items [0, count): threads claim `chunk` of them at a time (next is claimed atomically). */
typedef struct {
    size_t next, count, chunk;
} work_t;

/* The next chunk [*first, *last), or 0 when the work is done. */
static inline int claim(work_t *work, size_t *first, size_t *last) {
    size_t begin = __atomic_fetch_add(&work->next, work->chunk, __ATOMIC_RELAXED);
    if (begin >= work->count) return 0;
    *first = begin;
    *last = begin + work->chunk < work->count ? begin + work->chunk : work->count;
    return 1;
}

/* A kernel: takes items of `work` until none is left (tiles: groups of tiles; others: elements). */
typedef void (*body_fn)(const void *job, work_t *work);

typedef struct {
    const char *name;
    size_t lanes; /* blocks per tile */
    body_fn tiles, quantize, lookup, pack_nibbles;
} kernels_t;

extern const kernels_t native_baseline;
#ifdef NATIVE_X86
extern const kernels_t native_avx2, native_avx512;
#endif

#endif
