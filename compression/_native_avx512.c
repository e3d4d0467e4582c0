/* The THC kernels for x86-64 CPUs with AVX-512 (F, BW, DQ, VL): 16 lanes, 32 registers. */
#include "_native.h"

#ifdef NATIVE_X86
#pragma GCC target("avx2,avx512f,avx512bw,avx512dq,avx512vl")
#define KERNELS native_avx512
#define KERNELS_NAME "avx512"
#define LANES 16
#define REGISTER_STAGES 4
#include "_native_kernels.h"
#endif
