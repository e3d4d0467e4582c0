/* The THC kernels for any CPU of the build's architecture (SSE2 on x86-64): 4 lanes. */
#define KERNELS native_baseline
#define KERNELS_NAME "baseline"
#define LANES 4
#define REGISTER_STAGES 3
#include "_native_kernels.h"
