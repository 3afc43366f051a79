/* donate.h — buffer donation: an output that may take the buffer of a leaf
 * that nothing can read after the run (jit/donate.c). Internal to jit/. */
#ifndef KILN_JIT_DONATE_H
#define KILN_JIT_DONATE_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/graph.h"
#include "lower/lower.h"

/* Output `out` of kernel `kernel` may compute into the buffer of capture
 * node `leaf`: fixed by the program's structure (jit_donations_plan); whether
 * it does is decided per run (jit_donations_pick). */
typedef struct jit_donation {
    int kernel, out;
    int64_t leaf;
} jit_donation;

typedef struct jit_donations {
    int n;
    jit_donation *d;
    int64_t npending;    /* the capture's pending nodes, then its leaves */
    int64_t *src_off;    /* per pending node i: its sources' capture indices are */
    int64_t *src_idx;    /*   src_idx[src_off[i] .. src_off[i + 1]) */
    bool *stored;        /* per pending node: a kernel's output */
} jit_donations;

/* The program's candidates, from the capture it was built for (its nodes'
 * scratch holding 1 + their capture index): outs[i] and inputs[i] are
 * kernel i's capture indices, last[x] the last kernel reading node x (-1
 * for targets). False only when out of memory. */
bool jit_donations_plan(jit_donations *dn, const lower_program *p, const graph_capture *cap,
                        int64_t *const *outs, int64_t *const *inputs, const int *last);
void jit_donations_free(jit_donations *dn);

/* For this run of a capture with the program's structure: pick[j] set for
 * each candidate j whose leaf nothing can read after the run, and whose
 * buffer is the leaf's alone. forgets[i] (NULL: none) says that capture
 * node i drops its sources once the run has succeeded (an optimiser's
 * assigned update). False only when out of memory (then nothing is
 * picked). */
bool jit_donations_pick(const jit_donations *dn, const graph_capture *cap, const bool *forgets,
                        bool *pick);

#endif /* KILN_JIT_DONATE_H */
