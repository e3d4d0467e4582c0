/* The THC kernels for x86-64 CPUs with AVX2: 8 lanes, 16 registers. */
#include "_native.h"

#ifdef NATIVE_X86
#pragma GCC target("avx2")
#define KERNELS native_avx2
#define KERNELS_NAME "avx2"
#define LANES 8
#define REGISTER_STAGES 3
#include "_native_kernels.h"
#endif
