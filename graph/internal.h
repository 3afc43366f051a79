/* internal.h — what graph/'s own files share and nobody else sees. */
#ifndef KILN_GRAPH_INTERNAL_H
#define KILN_GRAPH_INTERNAL_H

#include <string.h>

#include "graph/graph.h"

/* Returns the existing node equal to proto (same op, dtype, shape, sources and
 * parameters) or a new one copied from it; buffer nodes are never shared. */
graph_node *graph_intern(graph_ctx *g, const graph_node *proto);

/* Makes *p a prototype with op, dtype and shape set and everything else
 * zero. Filled in place: returned by value it was a memset into a temporary
 * and a 450-byte `rep movsq` out of it (recording a scalar op in a 1000-op
 * chain: 208 -> 158 ns). */
/* libc's memset, called: gcc inlines a constant-size memset of a node
 * (456 bytes) as `rep stosq`, whose start-up cost was 4% of recording an
 * op (three prototypes an op), where the library's vector stores are not. */
extern void *(*const volatile graph_zero)(void *, int, size_t);

static inline void graph_proto(graph_node *p, graph_op op, kiln_dtype dt, int ndim,
                               const int64_t *shape) {
    graph_zero(p, 0, sizeof *p);
    p->op = op;
    p->dtype = dt;
    p->ndim = ndim;
    if (ndim)
        memcpy(p->shape, shape, sizeof(int64_t) * (size_t)ndim);
}

/* True when every element of n is the same known constant (a constant, or an
 * unmasked view of one); *v receives it. */
bool graph_const_value(const graph_node *n, graph_scalar *v);

/* The length of the last signature a capture of g's nodes built (capture.c
 * sizes the next one by it: a replayed step's capture never grows its
 * buffer). */
size_t *graph_ctx_sig_hint(graph_ctx *g);

/* graph_full's memo (node.c): the node for v (canonical bits) broadcast to
 * shape if the memo holds it (a new reference), else NULL; and the node to
 * hold (a view of a 0-d constant), without taking a reference. */
graph_node *graph_memo_full(graph_ctx *g, kiln_dtype dt, graph_scalar v, int ndim,
                            const int64_t *shape);
void graph_memo_put(graph_ctx *g, graph_node *n);

typedef void (*graph_feed)(void *ctx, const void *bytes, size_t len);
/* Feeds a node's op parameters (constant, seed, view, axes ...) to feed. */
void graph_feed_params(const graph_node *n, graph_feed feed, void *ctx);

#endif /* KILN_GRAPH_INTERNAL_H */
