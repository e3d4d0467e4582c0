/* Python bindings of the THC codec's CPU kernels: randomized Hadamard transform, stochastic
 * quantization, both at once (encode), dequantization with the inverse transform (decode), table
 * lookup. Plain CPython C API: arguments are data pointers (as integers) and sizes, the GIL is
 * released while the kernels run, and large inputs are shared out among torch's OpenMP threads.
 *
 * The kernels (_native_kernels.h) are compiled once per instruction set (_native_baseline.c,
 * _native_avx2.c, _native_avx512.c); the best set this CPU supports is chosen at import and
 * set_isa() forces another. All sets compute the same bits. No -march flag: the build runs on
 * any CPU of its architecture.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "_native.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1; older C libraries' headers lack it, older kernels refuse it */
#endif

#define MAX_THREADS 64
#define GRAIN 65536                /* elements worth a thread, and per claim of element-wise work */
#define GROUP_BYTES (256 * 1024) /* rows of a transform's work item: well within L2 */

/* ---- instruction sets ---- */

static const kernels_t *const SETS[] = {
    &native_baseline,
#ifdef NATIVE_X86
    &native_avx2,
    &native_avx512,
#endif
};
#define SET_COUNT ((int)(sizeof SETS / sizeof SETS[0]))

static const kernels_t *active = &native_baseline;

/* Whether this CPU (and its OS) runs kernel set i of SETS. */
static int supported(int i) {
#ifdef NATIVE_X86
    __builtin_cpu_init();
    if (SETS[i] == &native_avx2) return __builtin_cpu_supports("avx2");
    if (SETS[i] == &native_avx512)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
#endif
    return SETS[i] == &native_baseline;
}

/* ---- fork-join: threads take items of the work until none is left ----
 * OpenMP, so that the kernels run on torch's own thread pool: torch loads its libgomp globally
 * and this module's libgomp.so.1 binds to it. Threads of a pool of our own would compete for the
 * cores with torch's workers, which spin for a while after each torch operation (DDP calls the
 * hook right after the backward's last matmul). */

/* Run body on up to `threads` threads (the caller's among them) over count items in chunks. */
static void parallel(body_fn body, const void *job, size_t count, size_t chunk, int threads) {
    work_t work = {0, count, chunk ? chunk : 1};
    size_t chunks = (count + work.chunk - 1) / work.chunk;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if ((size_t)threads > chunks) threads = (int)chunks;
    if (threads < 1) threads = 1;
#pragma omp parallel num_threads(threads)
    body(job, &work);
}

/* Threads for `elements` of work, at most `threads`. */
static int threads_for(size_t elements, int threads) {
    size_t useful = elements / GRAIN + 1;
    return (size_t)threads < useful ? threads : (int)useful;
}

/* Jobs live on the heap: quantizer tables make them a few kilobytes, and some are 64-byte aligned. */
static void *new_job(size_t bytes) {
    void *job = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!job) PyErr_NoMemory();
    return job;
}

/* Run the transform job on its tiles; -1 with a Python error if its shape is inconsistent. */
static int run_tiles(tile_job *job, size_t padded, int threads) {
    size_t block = job->block;
    if (block == 0 || (block & (block - 1)) || padded % block) {
        PyErr_SetString(PyExc_ValueError, "block must be a power of two dividing the padded length");
        return -1;
    }
    job->columns = padded / block;
    while (((size_t)1 << job->log_block) < block) job->log_block++;
    const size_t lanes = active->lanes, tiles = (job->columns + lanes - 1) / lanes;
    size_t group = GROUP_BYTES / (block * lanes * sizeof(float));
    job->group = group < 1 ? 1 : group > MAX_GROUP ? MAX_GROUP : group;
    Py_BEGIN_ALLOW_THREADS
    parallel(active->tiles, job, (tiles + job->group - 1) / job->group, 1, threads_for(padded, threads));
    Py_END_ALLOW_THREADS
    return 0;
}

#define PTR(p) ((void *)(uintptr_t)(p))

/* Fill q from quantize's parsed arguments; -1 with a Python error if they are inconsistent. */
static int quantizer_setup(quantizer *q, float scale, float threshold, float gain, int granularity,
                           unsigned long long lower, unsigned long long base, unsigned long long width, unsigned int k0,
                           unsigned int k1, int values) {
    if (granularity < 1 || granularity > 256) {
        PyErr_SetString(PyExc_ValueError, "quantize: granularity must be in 1..256 (tables hold 256 bytes)");
        return -1;
    }
    q->scale = scale, q->threshold = threshold, q->gain = gain, q->top = granularity - 1, q->k0 = k0, q->k1 = k1;
    q->values = values;
    const uint8_t *lowers = PTR(lower), *bases = PTR(base), *widths = PTR(width);
    for (int i = 0; i < 256; i++) {
        q->base[i] = bases[i], q->width[i] = widths[i], q->lower[i] = lowers[i];
        q->levels[i] = bases[i] | (uint32_t)widths[i] << 8 | (uint32_t)lowers[i] << 16;
    }
    return 0;
}

/* ---- Python functions ---- */

static PyObject *py_rotate(PyObject *self, PyObject *args) {
    unsigned long long src, dst;
    Py_ssize_t n, padded, block;
    unsigned int k0, k1;
    float norm;
    int threads;
    if (!PyArg_ParseTuple(args, "KnKnnIIfi", &src, &n, &dst, &padded, &block, &k0, &k1, &norm, &threads))
        return NULL;
    tile_job *job = new_job(sizeof *job);
    if (!job) return NULL;
    *job = (tile_job){.mode = ROTATE, .block = (size_t)block, .norm = norm, .k0 = k0, .k1 = k1, .x = PTR(src),
                      .n = (size_t)n, .out = PTR(dst)};
    int failed = run_tiles(job, (size_t)padded, threads);
    free(job);
    if (failed) return NULL;
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
    tile_job *job = new_job(sizeof *job);
    if (!job) return NULL;
    *job = (tile_job){.mode = DECODE, .block = (size_t)block, .norm = norm, .k0 = k0, .k1 = k1, .src = PTR(src),
                      .kind = kind, .offset = offset, .scale = scale, .out = PTR(dst), .length = (size_t)length};
    int failed = run_tiles(job, (size_t)padded, threads);
    free(job);
    if (failed) return NULL;
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
    quantize_job *job = new_job(sizeof *job);
    if (!job) return NULL;
    job->src = PTR(src), job->dst = PTR(dst);
    if (quantizer_setup(&job->q, scale, threshold, gain, granularity, lower, base, width, k0, k1, 0)) {
        free(job);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    parallel(active->quantize, job, (size_t)n, GRAIN, threads_for((size_t)n, threads));
    Py_END_ALLOW_THREADS
    free(job);
    Py_RETURN_NONE;
}

static PyObject *py_encode(PyObject *self, PyObject *args) {
    unsigned long long src, dst, lower, base, width;
    Py_ssize_t n, padded, block;
    unsigned int sign_k0, sign_k1, round_k0, round_k1;
    float norm, scale, threshold, gain;
    int granularity, values, threads;
    if (!PyArg_ParseTuple(args, "KnKnnIIffffiKKKIIpi", &src, &n, &dst, &padded, &block, &sign_k0, &sign_k1, &norm,
                          &scale, &threshold, &gain, &granularity, &lower, &base, &width, &round_k0, &round_k1,
                          &values, &threads))
        return NULL;
    tile_job *job = new_job(sizeof *job);
    if (!job) return NULL;
    *job = (tile_job){.mode = ENCODE, .block = (size_t)block, .norm = norm, .k0 = sign_k0, .k1 = sign_k1,
                      .x = PTR(src), .n = (size_t)n, .indices = PTR(dst)};
    int failed = quantizer_setup(&job->q, scale, threshold, gain, granularity, lower, base, width, round_k0,
                                 round_k1, values) ||
                 run_tiles(job, (size_t)padded, threads);
    free(job);
    if (failed) return NULL;
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
    lookup_job job = {PTR(src), PTR(dst), PTR(values), ((size_t)levels + 15) / 16};
    Py_BEGIN_ALLOW_THREADS
    parallel(active->lookup, &job, (size_t)n, GRAIN, threads_for((size_t)n, threads));
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* pack_nibbles(src, n, dst, threads): n uint8 indices two to a byte into dst (ceil(n / 2) bytes);
 * False, with dst unspecified, when an index is above 15. */
static PyObject *py_pack_nibbles(PyObject *self, PyObject *args) {
    unsigned long long src, dst;
    Py_ssize_t n;
    int threads;
    if (!PyArg_ParseTuple(args, "KnKi", &src, &n, &dst, &threads)) return NULL;
    nibbles_job job = {PTR(src), PTR(dst), 0};
    size_t pairs = (size_t)n / 2;
    Py_BEGIN_ALLOW_THREADS
    parallel(active->pack_nibbles, &job, pairs, GRAIN, threads_for(pairs, threads));
    Py_END_ALLOW_THREADS
    if (n % 2) { /* the odd one out: a byte of its own */
        uint8_t last = job.src[n - 1];
        job.dst[pairs] = last;
        job.out_of_range |= last > 15;
    }
    return PyBool_FromLong(!job.out_of_range);
}

static PyObject *py_isas(PyObject *self, PyObject *args) {
    PyObject *names = PyList_New(0);
    for (int i = SET_COUNT - 1; names && i >= 0; i--) {
        if (!supported(i)) continue;
        PyObject *name = PyUnicode_FromString(SETS[i]->name);
        if (!name || PyList_Append(names, name)) Py_CLEAR(names);
        Py_XDECREF(name);
    }
    return names;
}

static PyObject *py_isa(PyObject *self, PyObject *args) { return PyUnicode_FromString(active->name); }

static PyObject *py_set_isa(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
    for (int i = 0; i < SET_COUNT; i++)
        if (!strcmp(name, SETS[i]->name) && supported(i)) {
            active = SETS[i];
            Py_RETURN_NONE;
        }
    PyErr_Format(PyExc_ValueError, "instruction set %s is not built or not supported by this CPU", name);
    return NULL;
}

static PyObject *py_advise_huge(PyObject *self, PyObject *args) {
    unsigned long long start;
    Py_ssize_t bytes;
    int now;
    if (!PyArg_ParseTuple(args, "Knp", &start, &bytes, &now)) return NULL;
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)1 << 21;
    uintptr_t first = ((uintptr_t)start + huge - 1) & ~(huge - 1);
    uintptr_t end = ((uintptr_t)start + (size_t)bytes) & ~(huge - 1);
    if (end > first) {
        Py_BEGIN_ALLOW_THREADS
        /* Advice: failure changes nothing. MADV_COLLAPSE (Linux 6.1) moves pages in use now. */
        madvise((void *)first, end - first, MADV_HUGEPAGE);
        if (now) madvise((void *)first, end - first, MADV_COLLAPSE);
        Py_END_ALLOW_THREADS
    }
#endif
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
     "width, round_k0, round_k1, values, threads): rotate then quantize, uint8 indices (or their table values) only."},
    {"lookup", py_lookup, METH_VARARGS,
     "lookup(src, n, dst, values, levels, threads): dst[i] = values[src[i]] (uint8; 0 beyond levels)."},
    {"pack_nibbles", py_pack_nibbles, METH_VARARGS,
     "pack_nibbles(src, n, dst, threads): uint8 indices two to a byte, the first in the low nibble; "
     "False when one is above 15."},
    {"isas", py_isas, METH_NOARGS, "isas(): the instruction sets built and supported here, best first."},
    {"isa", py_isa, METH_NOARGS, "isa(): the instruction set the kernels use."},
    {"set_isa", py_set_isa, METH_VARARGS, "set_isa(name): use the kernels of that instruction set."},
    {"advise_huge", py_advise_huge, METH_VARARGS,
     "advise_huge(start, bytes): ask for transparent huge pages in the 2 MiB pages within [start, start + bytes)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "Fused CPU kernels of the THC codec.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__native(void) {
    for (int i = SET_COUNT - 1; i > 0 && active == &native_baseline; i--)
        if (supported(i)) active = SETS[i];
    return PyModule_Create(&module);
}
