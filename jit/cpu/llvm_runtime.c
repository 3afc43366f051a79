/* llvm_runtime.c — the run-time support that LLVM-generated kernels call:
 * parallel_for over program instances on OpenMP's threads (the same pool the
 * C path's kernels use). Built with -fopenmp, apart from the rest of jit/cpu. */
#include <omp.h>
#include <stdint.h>

#include "jit/cpu/llvm_api.h"

void jit_llvm_parallel_for(void (*body)(void *ctx, int64_t lo, int64_t hi), void *ctx, int64_t n,
                           int nthreads) {
    if (n <= 0)
        return;
    if (nthreads <= 1 || n == 1) {
        body(ctx, 0, n);
        return;
    }
    int nt = (int64_t)nthreads < n ? nthreads : (int)n;
#pragma omp parallel num_threads(nt)
    {
        /* One contiguous range per thread, as schedule(static) gives. */
        int64_t m = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t q = n / m, r = n % m;
        int64_t lo = t * q + (t < r ? t : r);
        int64_t hi = lo + q + (t < r ? 1 : 0);
        if (lo < hi)
            body(ctx, lo, hi);
    }
}
