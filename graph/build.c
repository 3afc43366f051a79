/* build.c — node constructors for every non-movement op, with constant
 * folding and the algebraic identities (x+0, x*1, x/1, x**1, neg(neg(x)),
 * where on a constant condition, casts to the same dtype). */
#include <string.h>

#include "graph/graph.h"
#include "graph/internal.h"

graph_node graph_proto(graph_op op, kiln_dtype dt, int ndim, const int64_t *shape) {
    graph_node p;
    memset(&p, 0, sizeof p);
    p.op = op;
    p.dtype = dt;
    p.ndim = ndim;
    if (ndim)
        memcpy(p.shape, shape, sizeof(int64_t) * (size_t)ndim);
    return p;
}

bool graph_const_value(const graph_node *n, graph_scalar *v) {
    if (n->op == GRAPH_VIEW && !n->p.view.masked)
        n = n->src[0];
    if (n->op != GRAPH_CONST)
        return false;
    *v = n->p.value;
    return true;
}

static bool const_is(const graph_node *n, double x) {
    graph_scalar v;
    if (!graph_const_value(n, &v))
        return false;
    return graph_dtype_is_float(n->dtype) ? v.f == x : v.i == (int64_t)x;
}

graph_node *graph_buffer_node(graph_ctx *g, kiln_dtype dt, int ndim, const int64_t *shape,
                              graph_buffer *buf) {
    graph_node p = graph_proto(GRAPH_BUFFER, dt, ndim, shape);
    p.buf = buf;
    return graph_intern(g, &p);
}

graph_node *graph_const(graph_ctx *g, kiln_dtype dt, graph_scalar v) {
    graph_node p = graph_proto(GRAPH_CONST, dt, 0, NULL);
    /* Canonical bits, so that equal constants hash alike. */
    memset(&p.p.value, 0, sizeof p.p.value);
    if (graph_dtype_is_float(dt))
        p.p.value.f = v.f;
    else
        p.p.value.i = v.i;
    return graph_intern(g, &p);
}

graph_node *graph_full(graph_ctx *g, kiln_dtype dt, int ndim, const int64_t *shape,
                       graph_scalar v) {
    graph_node *c = graph_const(g, dt, v);
    if (!c || ndim == 0)
        return c;
    graph_node p = graph_proto(GRAPH_VIEW, dt, ndim, shape);
    graph_node *srcs[1] = {c};
    p.nsrc = 1;
    p.src = srcs;
    graph_node *n = graph_intern(g, &p);
    graph_unref(c);
    return n;
}

graph_node *graph_arange(graph_ctx *g, kiln_dtype dt, int64_t n, double start, double step) {
    graph_node p = graph_proto(GRAPH_ARANGE, dt, 1, &n);
    p.p.value.f = start;
    p.p.step = step;
    return graph_intern(g, &p);
}

graph_node *graph_rand(graph_ctx *g, graph_op op, kiln_dtype dt, int ndim,
                       const int64_t *shape, uint64_t seed) {
    graph_node p = graph_proto(op, dt, ndim, shape);
    p.p.seed = seed;
    return graph_intern(g, &p);
}

static graph_node *with_sources(graph_node *proto, int nsrc, graph_node **srcs) {
    proto->nsrc = nsrc;
    proto->src = srcs;
    return graph_intern(srcs[0]->g, proto);
}

graph_node *graph_unary(graph_op op, graph_node *a) {
    graph_scalar v;
    if (graph_const_value(a, &v))
        return graph_full(a->g, a->dtype, a->ndim, a->shape,
                          graph_scalar_unary(op, a->dtype, a->dtype, v));
    if (op == GRAPH_NEG && a->op == GRAPH_NEG && !a->buf)
        return graph_ref(a->src[0]);
    graph_node p = graph_proto(op, a->dtype, a->ndim, a->shape);
    graph_node *srcs[1] = {a};
    return with_sources(&p, 1, srcs);
}

graph_node *graph_cast(graph_node *a, kiln_dtype dt) {
    if (dt == a->dtype)
        return graph_ref(a);
    graph_scalar v;
    if (graph_const_value(a, &v))
        return graph_full(a->g, dt, a->ndim, a->shape,
                          graph_scalar_unary(GRAPH_CAST, a->dtype, dt, v));
    graph_node p = graph_proto(GRAPH_CAST, dt, a->ndim, a->shape);
    graph_node *srcs[1] = {a};
    return with_sources(&p, 1, srcs);
}

graph_node *graph_binary(graph_op op, graph_node *a, graph_node *b) {
    kiln_dtype out = graph_op_is_compare(op) ? KILN_BOOL : a->dtype;
    graph_scalar va, vb;
    if (graph_const_value(a, &va) && graph_const_value(b, &vb))
        return graph_full(a->g, out, a->ndim, a->shape,
                          graph_scalar_binary(op, a->dtype, va, vb));
    switch (op) {
    case GRAPH_ADD:
        if (const_is(b, 0))
            return graph_ref(a);
        if (const_is(a, 0))
            return graph_ref(b);
        break;
    case GRAPH_SUB:
        if (const_is(b, 0))
            return graph_ref(a);
        break;
    case GRAPH_MUL:
        if (const_is(b, 1))
            return graph_ref(a);
        if (const_is(a, 1))
            return graph_ref(b);
        break;
    case GRAPH_DIV:
    case GRAPH_POW:
        if (const_is(b, 1))
            return graph_ref(a);
        break;
    default:
        break;
    }
    graph_node p = graph_proto(op, out, a->ndim, a->shape);
    graph_node *srcs[2] = {a, b};
    return with_sources(&p, 2, srcs);
}

graph_node *graph_where(graph_node *c, graph_node *a, graph_node *b) {
    graph_scalar vc;
    if (graph_const_value(c, &vc))
        return graph_ref(vc.i ? a : b);
    if (a == b)
        return graph_ref(a);
    graph_node p = graph_proto(GRAPH_WHERE, a->dtype, a->ndim, a->shape);
    graph_node *srcs[3] = {c, a, b};
    return with_sources(&p, 3, srcs);
}

graph_node *graph_reduce(graph_op op, graph_node *a, uint32_t axes, kiln_dtype dt) {
    graph_node p = graph_proto(op, dt, a->ndim, a->shape);
    for (int d = 0; d < a->ndim; d++)
        if (axes & (1u << d))
            p.shape[d] = 1;
    p.p.axes = axes;
    graph_node *srcs[1] = {a};
    return with_sources(&p, 1, srcs);
}

graph_node *graph_cat(int n, graph_node *const *srcs, int axis) {
    graph_node p = graph_proto(GRAPH_CAT, srcs[0]->dtype, srcs[0]->ndim, srcs[0]->shape);
    p.shape[axis] = 0;
    for (int i = 0; i < n; i++)
        p.shape[axis] += srcs[i]->shape[axis];
    p.p.axis = axis;
    return with_sources(&p, n, (graph_node **)srcs);
}

/* Never folded, even over a constant: what the other ranks hold is unknown
 * here, and every rank must run every collective it recorded. */
graph_node *graph_collective(graph_op op, graph_node *a, int reduce, int axis, int root,
                             int size) {
    graph_node p = graph_proto(op, a->dtype, a->ndim, a->shape);
    if (op == GRAPH_ALL_GATHER)
        p.shape[axis] *= size;
    else if (op == GRAPH_REDUCE_SCATTER)
        p.shape[axis] /= size;
    if (op == GRAPH_ALL_GATHER || op == GRAPH_REDUCE_SCATTER)
        p.p.axis = axis;
    if (op == GRAPH_ALL_REDUCE || op == GRAPH_REDUCE_SCATTER)
        p.p.reduce = reduce;
    if (op == GRAPH_BROADCAST)
        p.p.root = root;
    graph_node *srcs[1] = {a};
    return with_sources(&p, 1, srcs);
}

graph_node *graph_matmul(graph_node *a, graph_node *b) {
    graph_node p = graph_proto(GRAPH_MATMUL, a->dtype, a->ndim, a->shape);
    p.shape[a->ndim - 1] = b->shape[b->ndim - 1];
    graph_node *srcs[2] = {a, b};
    return with_sources(&p, 2, srcs);
}
