/* machine.h — what this machine can do at best, measured rather than read
 * from a data sheet: memory bandwidth by a STREAM-like triad and f32
 * arithmetic peak by an FMA loop, both on every thread kiln would use. The
 * benchmarks divide their achieved GB/s and GFLOP/s by these. */
#ifndef BENCH_MACHINE_H
#define BENCH_MACHINE_H

#include <stdint.h>

typedef struct bench_machine {
    char cpu[128];     /* "model name" of /proc/cpuinfo */
    int threads;       /* threads the measurements ran on */
    double triad_gbps; /* a[i] = b[i] + s*c[i], best repetition, 12 bytes per element */
    int64_t triad_elems;
    double fma_gflops; /* f32, 2 flops per FMA lane, best repetition */
    int vector_bits;   /* width of the vectors the FMA loop ran on */
} bench_machine;

/* Measures the machine on nthreads threads (nthreads < 1: every online CPU),
 * with reps repetitions of each test. Returns 0, or -1 when memory or
 * threads could not be had. */
int bench_machine_measure(bench_machine *m, int nthreads, int reps);

#endif
