// msm.cu with the point-arithmetic kernels capped at 168 registers (3 blocks of 128 threads per
// SM: 12 warps instead of 8), to test whether the MSM is latency-bound (bench/notes/msm.md, 2026-11-29, 289fd6e).
// Launch with blocks of at most 128 threads.
#define MSM_BOUNDS __launch_bounds__(128, 3)
#include "msm/msm.cu"
