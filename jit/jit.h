/* jit.h — jit/'s face: the backends that compile and run a captured graph's
 * kernels, and their counters. api/ makes one backend per context. */
#ifndef KILN_JIT_H
#define KILN_JIT_H

#include <stdbool.h>
#include <stddef.h>

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

#endif /* KILN_JIT_H */
