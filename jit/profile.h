/* profile.h — what jit/'s files share about watching programs run: the debug
 * level, the profiler, KILN_DUMP, and the machine's measured limits. The
 * backend owns one jit_watch and calls its hooks; nothing here reads a clock
 * unless the debug level is 2 or more or a profile is being recorded. */
#ifndef KILN_JIT_PROFILE_H
#define KILN_JIT_PROFILE_H

#include <stdbool.h>
#include <stdio.h>

#include "cache/cache.h"
#include "jit/jit.h"
#include "lower/lower.h"

/* A kernel's work per launch, counted from its IR (see jit_prog_costs). */
typedef struct jit_kernel_cost {
    double flops, bytes;
    int product_dtype; /* a matmul of two operands of this dtype (a kiln_dtype) that
                          accumulate in f32, whose products a device may run on other
                          units than the FMA lanes (jit_device_ops.product_peak); -1
                          for any other kernel */
} jit_kernel_cost;

/* What the profiler knows of a compiled program, kept with it. */
typedef struct jit_prog_facts {
    cache_key key;         /* of its generated code: names KILN_DUMP's files */
    const char *origin;    /* where its code came from: "compiled", "disk", "memory" */
    double build_ms;       /* scheduling, code generation, compiling or loading */
    jit_kernel_cost *cost; /* per kernel */
} jit_prog_facts;

typedef struct jit_prof jit_prof;

typedef struct jit_watch {
    int debug;        /* KILN_DEBUG, or kiln_ctx_set_debug */
    jit_prof *prof;   /* the profile being recorded or last recorded, or NULL */
    bool recording;
    char *trace_path; /* KILN_PROFILE: the whole life of the context is traced */
    char *dump_dir;   /* KILN_DUMP */
    cache *cache;
    int nthreads;
    bool have_machine;
    kiln_machine machine;
    struct jit_device *dev; /* whose limits rate the kernels: the host CPU's unless its
                               ops have limits */
} jit_watch;

/* Reads KILN_DEBUG, KILN_PROFILE and KILN_DUMP. */
void jit_watch_init(jit_watch *w, cache *c, int nthreads);
/* Writes KILN_PROFILE's trace (a failure is reported on stderr) and frees. */
void jit_watch_fini(jit_watch *w);
/* The backend's watch (backend.c). */
jit_watch *jit_backend_watch(jit_backend *j);

/* FLOPs and bytes per launch of every kernel of p, counted from the IR; call
 * before the program drops its nodes. malloc'd; NULL when out of memory.
 * FLOPs: each ALU op (casts, selects and random numbers left out) and each
 * reduction step counts 1, transcendental ones included, times the elements
 * it runs on (numel × rnumel for inner instructions, numel for the others);
 * a matmul adds 2·n·k·m per batch. Bytes: each output once, plus for each
 * input the elements its widest load touches, at most the whole input, so an
 * input read through a broadcast counts once (caches are assumed to hold the
 * repeats) and one read at several places counts once. A kernel's compute
 * peak is the machine's gflops, or the device's product_peak for its
 * product_dtype where that is not 0. */
jit_kernel_cost *jit_prog_costs(const lower_program *p);

/* KILN_DUMP: writes the program's source, kernel IR and plans there, and the
 * compiler's own IR when ir_text (the device's) is not NULL. */
void jit_watch_dump(jit_watch *w, const jit_prog_facts *f, const lower_program *p,
                    const lower_plan *plans, const char *src,
                    char *(*ir_text)(const lower_program *p, const lower_plan *plans, char *msg,
                                     size_t cap));

/* Whether launches must be timed. */
static inline bool jit_watch_timing(const jit_watch *w) {
    return w->debug >= 2 || (w->prof && w->recording);
}

/* One launch of kernel i of a program, from t0 to t1 (ms, jit_now_ms). */
void jit_watch_launch(jit_watch *w, const jit_prog_facts *f, const lower_kernel *k, int i,
                      bool graph_hit, double t0, double t1);
/* One sync: built (or looked up) from t0 to t1, run from t1 to t2. */
void jit_watch_sync(jit_watch *w, double t0, double t1, double t2, bool graph_hit,
                    int nkernels, int64_t nodes);

double jit_now_ms(void);

/* The machine's limits: remembered, else from the disk cache, else measured
 * (about a second) and stored there, keyed by CPU model and thread count. */
kiln_status jit_machine_get(jit_watch *w, kiln_machine *m, char *msg, size_t cap);
/* Measures now (kiln_machine_measure). */
kiln_status jit_machine_measure(jit_watch *w, kiln_machine *m, char *msg, size_t cap);

#endif /* KILN_JIT_PROFILE_H */
