/* graph_util.h — what tests of graph/ and lower/ (below the public API) use
 * to make leaves. */
#ifndef KILN_TESTS_GRAPH_UTIL_H
#define KILN_TESTS_GRAPH_UTIL_H

#include <criterion/criterion.h>
#include <string.h>

#include "graph/graph.h"

/* A leaf of g: a node of dtype dt and the given shape over a fresh buffer of
 * zeros of its own (the node holds the buffer's one reference). */
static inline graph_node *tu_leaf(graph_ctx *g, kiln_dtype dt, int ndim, const int64_t *shape) {
    int64_t n = graph_shape_numel(ndim, shape);
    size_t bytes = (size_t)(n ? n : 1) * kiln_dtype_size(dt);
    graph_buffer *b = graph_buffer_new(bytes);
    cr_assert(b);
    memset(b->data, 0, bytes);
    graph_node *x = graph_buffer_node(g, dt, ndim, shape, b);
    graph_buffer_unref(b);
    cr_assert(x);
    return x;
}

#endif /* KILN_TESTS_GRAPH_UTIL_H */
