/* bench.h — what kiln's benchmark programs share: options (steps, quick
 * mode), clocks and medians, one JSON line per measurement, and the runner
 * that takes one graph-building function through lazy and eager mode in the
 * same process and checks that both computed the same thing. */
#ifndef BENCH_BENCH_H
#define BENCH_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln.h"

typedef struct bench_opts {
    int steps;  /* timed steps per mode, after the warm-up: at least these, and
                   more (up to BENCH_MAX_STEPS) until BENCH_MIN_SECONDS of them */
    int warmup; /* untimed steps per mode; the first one compiles */
    bool quick; /* --quick or KILN_BENCH_QUICK=1: fewer steps, no 4096 matmul */
    bool full;  /* --full: the largest sizes too */
    kiln_device device; /* --device cpu|cuda or KILN_BENCH_DEVICE: where kiln runs (cpu) */
} bench_opts;

/* A step's median is taken over at least BENCH_MIN_SECONDS of steps (up to
 * BENCH_MAX_STEPS of them): three steps of a 0.1 ms product measured its
 * first steps after the compile, each 0.2 ms (the threads waking from
 * sleep), where forty measured 0.108 ms. bench/peers/harness.py takes its
 * steps by the same rule. */
#define BENCH_MIN_SECONDS 0.05
#define BENCH_MAX_STEPS 200

/* Reads --quick, --full, --steps N and --device D from argv, then
 * KILN_BENCH_QUICK, KILN_BENCH_STEPS and KILN_BENCH_DEVICE from the
 * environment. */
bench_opts bench_parse_opts(int argc, char **argv);

double bench_now(void);
/* Sorts t in place and returns its median. */
double bench_median(double *t, int n);

/* One measurement. Fields left 0 (or NULL) are not printed. */
typedef struct bench_record {
    const char *suite;    /* "ops", "compile", "nn", "machine" */
    const char *workload; /* a stable identifier, e.g. "softmax_rows" */
    const char *shape;    /* e.g. "4096x4096" */
    const char *impl;     /* "kiln-lazy", "kiln-eager", … */
    const char *metric;   /* what median_ms is the time of, when not a step */
    double median_ms, min_ms;
    int steps;
    double kernels; /* kernel launches per step */
    double bytes;   /* minimal memory traffic of one step */
    double flops;   /* arithmetic of one step */
    double gbps, gflops;
    double pct_bw, pct_peak; /* of the machine's measured limits */
    bool has_diff;
    double max_abs_diff; /* against the other mode of the same run */
    double ratio;        /* eager/lazy, in the same run */
    double compiles, memory_hits, disk_hits; /* kiln_stats counters of the step */
} bench_record;

/* Prints r as one JSON line on stdout and a readable line on stderr. */
void bench_emit(const bench_record *r);
/* Prints a failed measurement as a JSON line with "error": the message. */
void bench_emit_error(const char *suite, const char *workload, const char *shape,
                      const char *impl, const char *message);
/* Prints the machine's measurement as a JSON line ("suite":"machine"). */
void bench_emit_machine(const kiln_machine *m);

/* The rest of a training step whose forward pass gave loss: the backward
 * pass, the optimiser's update and its gradients zeroed, then the step's
 * one sync point, the loss read into *l. KILN_OK, or the first failure with
 * *what naming its stage (kiln_ctx_last_error says why). */
kiln_status bench_train_step(kiln_tensor *loss, kiln_optim *o, double *l, const char **what);

/* The gradients of y (seeded by ones) with respect to the n xs, each
 * flattened, joined into one tensor: what a workload with a backward pass
 * returns for lazy and eager to compare. y itself when they fail. */
kiln_tensor *bench_gradients_joined(kiln_tensor *y, int n, kiln_tensor *const *xs);

/* Builds a workload's output from its inputs; called once per step. */
typedef kiln_tensor *(*bench_build_fn)(kiln_tensor *const *in, const void *arg);

typedef struct bench_workload {
    const char *name;
    const char *shape;
    const char *suite;
    int ninputs;
    kiln_tensor *const *inputs; /* realized before the run */
    bench_build_fn build;
    const void *arg;
    double bytes, flops; /* for GB/s and GFLOP/s; 0 when not meaningful */
} bench_workload;

/* Runs w lazy and eager, steps interleaved (lazy, eager, lazy, …) so that a
 * change in the machine's speed hits both modes alike, and emits a record per
 * mode with the eager/lazy ratio on the lazy one. The outputs of the last step
 * of each mode are compared; max_abs_diff is their largest difference, and a
 * difference above tol times the largest output magnitude (at least 1), or a
 * NaN, fails the run. A failure is emitted as an error record. Returns 0 or
 * 1. */
int bench_lazy_eager(kiln_ctx *ctx, const bench_workload *w, const bench_opts *o,
                     const kiln_machine *m, double tol);

#endif
