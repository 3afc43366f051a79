/* collective.h — jit/'s private runner of a program's collective kernels
 * (LOWER_COLLECTIVE), which dist/ runs rather than a device: what each one
 * is, known when the program is built, and how one run agrees on them with
 * the other ranks and hands their buffers over. */
#ifndef KILN_JIT_COLLECTIVE_H
#define KILN_JIT_COLLECTIVE_H

#include "dist/dist.h"
#include "jit/device.h"
#include "lower/lower.h"

typedef struct jit_collectives {
    int n;            /* collective kernels in the program */
    dist_desc *descs; /* each one's descriptor, in program order */
    int *of_kernel;   /* per kernel: its index in descs, -1 for the rest */
    char what[40];    /* the first one's API name, for messages ("kiln_all_reduce") */
} jit_collectives;

/* Fills c from p's kernels while they still name their nodes; false when out
 * of memory. A program without collectives leaves c empty. */
bool jit_collectives_plan(const lower_program *p, jit_collectives *c);
void jit_collectives_free(jit_collectives *c);

/* Runs the n collective kernels held[0..n) of one run: ins[i] and outs[i]
 * are each one's source and result, both holding buffers of device d. */
kiln_status jit_collectives_run(const jit_collectives *c, dist_world *w, jit_device *d, int n,
                                const int *held, graph_node *const *ins,
                                graph_node *const *outs, char *msg, size_t cap);

#endif /* KILN_JIT_COLLECTIVE_H */
