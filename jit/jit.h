/* jit.h — jit/'s face: the backends that compile and run a captured graph's
 * kernels, their counters, debug output, profiler and the machine's limits.
 * api/ makes one backend per context. */
#ifndef KILN_JIT_H
#define KILN_JIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "api/kiln.h"
#include "graph/graph.h"

typedef struct jit_backend jit_backend;

typedef struct jit_counters {
    int64_t syncs;        /* programs run */
    int64_t kernels;      /* kernel launches */
    int64_t compiles;     /* translation units compiled */
    int64_t graph_hits;   /* syncs whose captured structure was compiled before */
    int64_t memory_hits;  /* programs found compiled in this process */
    int64_t disk_hits;    /* programs loaded from the disk cache */
} jit_counters;

/* A backend for dev (KILN_CPU today). NULL with a message when unavailable. */
jit_backend *jit_backend_new(kiln_device dev, char *msg, size_t msgcap);
void jit_backend_free(jit_backend *j);

/* Realizes the n nodes by compiling and running kernels: fused, or with
 * fuse false one kernel per op (eager mode). Nodes already realized stay so
 * on failure, and the message names what failed. */
kiln_status jit_realize(jit_backend *j, int n, graph_node *const *nodes, bool fuse, char *msg,
                        size_t msgcap);

jit_counters jit_get_counters(const jit_backend *j);

/* ---- watching programs run (jit/profile.c, jit/machine.c) ---- */

void jit_set_debug(jit_backend *j, int level);
int jit_debug(const jit_backend *j);
/* The machine's measured limits, as kiln_machine_info reports them. */
kiln_status jit_machine_limits(jit_backend *j, kiln_machine *m, char *msg, size_t msgcap);

/* A profile records every launch and sync from begin to end; a new begin
 * starts a fresh one. The reports read the last one recorded (empty if none). */
kiln_status jit_profile_begin(jit_backend *j, char *msg, size_t msgcap);
void jit_profile_end(jit_backend *j);

/* Kernels in the profile, in order of first launch. Kernel i's line (its
 * strings live as long as the profile) needs the machine's limits: when they
 * cannot be had it comes without pct_of_limit, with the reason's status and
 * message (KILN_ERR_ARG: no kernel i, and *r is left as it was). */
int jit_profile_count(jit_backend *j);
kiln_status jit_profile_kernel(jit_backend *j, int i, kiln_kernel_profile *r, char *msg,
                               size_t msgcap);
kiln_status jit_profile_print(jit_backend *j, FILE *f, char *msg, size_t msgcap);
kiln_status jit_profile_write_json(jit_backend *j, const char *path, char *msg, size_t msgcap);
kiln_status jit_profile_write_trace(jit_backend *j, const char *path, char *msg, size_t msgcap);

#endif /* KILN_JIT_H */
