/* build.c — node constructors for every non-movement op, with constant
 * folding and the algebraic identities (x+0, x*1, x/1, x**1, neg(neg(x)),
 * where on a constant condition, casts to the same dtype). */
#include <string.h>

#include "graph/graph.h"
#include "graph/internal.h"

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
    graph_node p;
    graph_proto(&p, GRAPH_BUFFER, dt, ndim, shape);
    p.buf = buf;
    return graph_intern(g, &p);
}

/* Canonical bits, so that equal constants hash alike. */
static graph_scalar canonical(kiln_dtype dt, graph_scalar v) {
    graph_scalar c;
    memset(&c, 0, sizeof c);
    if (graph_dtype_is_float(dt))
        c.f = v.f;
    else
        c.i = v.i;
    return c;
}

graph_node *graph_const(graph_ctx *g, kiln_dtype dt, graph_scalar v) {
    graph_node p;
    graph_proto(&p, GRAPH_CONST, dt, 0, NULL);
    p.p.value = canonical(dt, v);
    return graph_intern(g, &p);
}

graph_node *graph_full(graph_ctx *g, kiln_dtype dt, int ndim, const int64_t *shape,
                       graph_scalar v) {
    graph_node *m = ndim ? graph_memo_full(g, dt, canonical(dt, v), ndim, shape) : NULL;
    if (m)
        return m;
    graph_node *c = graph_const(g, dt, v);
    if (!c || ndim == 0)
        return c;
    graph_node p;
    graph_proto(&p, GRAPH_VIEW, dt, ndim, shape);
    graph_node *srcs[1] = {c};
    p.nsrc = 1;
    p.src = srcs;
    graph_node *n = graph_intern(g, &p);
    graph_unref(c);
    if (n)
        graph_memo_put(g, n);
    return n;
}

graph_node *graph_arange(graph_ctx *g, kiln_dtype dt, int64_t n, double start, double step) {
    graph_node p;
    graph_proto(&p, GRAPH_ARANGE, dt, 1, &n);
    p.p.value.f = start;
    p.p.step = step;
    return graph_intern(g, &p);
}

graph_node *graph_rand(graph_ctx *g, graph_op op, kiln_dtype dt, int ndim,
                       const int64_t *shape, uint64_t seed) {
    graph_node p;
    graph_proto(&p, op, dt, ndim, shape);
    p.p.seed = seed;
    return graph_intern(g, &p);
}

static graph_node *with_sources(graph_node *proto, int nsrc, graph_node **srcs) {
    proto->nsrc = nsrc;
    proto->src = srcs;
    return graph_intern(srcs[0]->g, proto);
}

graph_node *graph_rand_keyed(graph_node *key, graph_op op, kiln_dtype dt, int ndim,
                             const int64_t *shape) {
    graph_node p;
    graph_proto(&p, op, dt, ndim, shape);
    graph_node *srcs[1] = {key};
    return with_sources(&p, 1, srcs);
}

graph_node *graph_unary(graph_op op, graph_node *a) {
    graph_scalar v;
    if (graph_const_value(a, &v))
        return graph_full(a->g, a->dtype, a->ndim, a->shape,
                          graph_scalar_unary(op, a->dtype, a->dtype, v));
    if (op == GRAPH_NEG && a->op == GRAPH_NEG && !a->buf)
        return graph_ref(a->src[0]);
    graph_node p;
    graph_proto(&p, op, a->dtype, a->ndim, a->shape);
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
    graph_node p;
    graph_proto(&p, GRAPH_CAST, dt, a->ndim, a->shape);
    graph_node *srcs[1] = {a};
    return with_sources(&p, 1, srcs);
}

graph_node *graph_bitcast(graph_node *a, kiln_dtype dt) {
    if (dt == a->dtype)
        return graph_ref(a);
    graph_scalar v;
    if (graph_const_value(a, &v))
        return graph_full(a->g, dt, a->ndim, a->shape,
                          graph_scalar_unary(GRAPH_BITCAST, a->dtype, dt, v));
    graph_node p;
    graph_proto(&p, GRAPH_BITCAST, dt, a->ndim, a->shape);
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
    graph_node p;
    graph_proto(&p, op, out, a->ndim, a->shape);
    graph_node *srcs[2] = {a, b};
    return with_sources(&p, 2, srcs);
}

graph_node *graph_where(graph_node *c, graph_node *a, graph_node *b) {
    graph_scalar vc;
    if (graph_const_value(c, &vc))
        return graph_ref(vc.i ? a : b);
    if (a == b)
        return graph_ref(a);
    graph_node p;
    graph_proto(&p, GRAPH_WHERE, a->dtype, a->ndim, a->shape);
    graph_node *srcs[3] = {c, a, b};
    return with_sources(&p, 3, srcs);
}

/* The axes along which n's value cannot change, looking at most `budget`
 * nodes deep: size-1 axes, a view's stride-0 axes (a broadcast) that its
 * mask leaves alone, every axis of a view of a constant, and what all the
 * sources of an elementwise node share. */
static uint32_t constant_axes(const graph_node *n, int *budget) {
    uint32_t c = 0;
    for (int d = 0; d < n->ndim; d++)
        if (n->shape[d] == 1)
            c |= 1u << d;
    if (--*budget < 0 || n->buf)
        return c;
    uint32_t all = n->ndim ? (uint32_t)((1ull << n->ndim) - 1) : 0;
    if (n->op == GRAPH_VIEW) {
        const graph_view *v = &n->p.view;
        if (n->src[0]->op == GRAPH_CONST)
            return all;
        for (int d = 0; d < n->ndim; d++)
            if (v->strides[d] == 0 &&
                (!v->masked || (v->mask_lo[d] <= 0 && v->mask_hi[d] >= n->shape[d])))
                c |= 1u << d;
        return c;
    }
    if (!graph_op_is_unary(n->op) && !graph_op_is_binary(n->op) && n->op != GRAPH_WHERE &&
        n->op != GRAPH_CAST)
        return c;
    uint32_t shared = all;
    for (int j = 0; j < n->nsrc && shared & ~c; j++)
        shared &= constant_axes(n->src[j], budget);
    return c | shared;
}

/* graph_slice(n, ...) with the slice moved below n's elementwise nodes (at
 * most `budget` of them), so that they are computed over the slice only:
 * an executor that materialises each op (eager mode) then never computes
 * the broadcast's elements either. */
static graph_node *slice_through(graph_node *n, const int64_t *start, const int64_t *step,
                                 const int64_t *len, int *budget) {
    bool elementwise = graph_op_is_unary(n->op) || graph_op_is_binary(n->op) ||
                       n->op == GRAPH_WHERE || n->op == GRAPH_CAST;
    if (n->buf || !elementwise || --*budget < 0)
        return graph_slice(n, start, step, len);
    graph_node *s[3] = {NULL, NULL, NULL};
    graph_node *r = NULL;
    bool ok = true;
    for (int j = 0; j < n->nsrc && ok; j++)
        ok = (s[j] = slice_through(n->src[j], start, step, len, budget)) != NULL;
    if (ok)
        r = n->op == GRAPH_CAST      ? graph_cast(s[0], n->dtype)
            : n->op == GRAPH_BITCAST ? graph_bitcast(s[0], n->dtype)
            : n->op == GRAPH_WHERE   ? graph_where(s[0], s[1], s[2])
            : n->nsrc == 1         ? graph_unary(n->op, s[0])
                                   : graph_binary(n->op, s[0], s[1]);
    for (int j = 0; j < 3; j++)
        graph_unref(s[j]);
    return r;
}

/* A reduction over axes along which its source is constant (a broadcast, a
 * size-1 axis) reads one element of each: the sum is that element times
 * the count, the max and min are the element, the arg-reductions 0 when
 * every reduced axis is such. Without this, sum(expand(x, [1e6, 1e6]))
 * passes over 10^12 elements (minutes) for what one multiply gives, with
 * less rounding. Returns NULL when the rule does not apply. */
static graph_node *reduce_constant_axes(graph_op op, graph_node *a, uint32_t axes,
                                        kiln_dtype dt) {
    int budget = 64;
    uint32_t c = axes & constant_axes(a, &budget);
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] == 0)
            c &= ~(1u << d); /* nothing to read one element of */
    bool arg = op == GRAPH_ARGMAX || op == GRAPH_ARGMIN;
    if (!c || (arg && c != axes))
        return NULL;
    int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS], len[KILN_MAX_DIMS], count = 1;
    for (int d = 0; d < a->ndim; d++) {
        bool one = c & (1u << d);
        start[d] = 0;
        step[d] = 1;
        len[d] = one ? 1 : a->shape[d];
        if (one)
            count *= a->shape[d];
    }
    if (arg)
        return graph_full(a->g, dt, a->ndim, len, (graph_scalar){.i = 0});
    budget = 64;
    graph_node *one = slice_through(a, start, step, len, &budget);
    if (!one)
        return NULL;
    graph_node *r = one;
    if (axes & ~c) {
        r = graph_reduce(op, one, axes & ~c, dt);
        graph_unref(one);
    } else if (one->dtype != dt) {
        r = graph_cast(one, dt);
        graph_unref(one);
    }
    if (!r || op != GRAPH_SUM || count == 1)
        return r;
    graph_node *n = graph_full(a->g, dt, r->ndim, r->shape,
                               graph_dtype_is_float(dt) ? (graph_scalar){.f = (double)count}
                                                        : (graph_scalar){.i = count});
    graph_node *m = n ? graph_binary(GRAPH_MUL, r, n) : NULL;
    graph_unref(n);
    graph_unref(r);
    return m;
}

/* A float sum over trailing axes and over others apart from them, with a
 * kept axis between (a convolution bias's gradient: [N, C, H, W] over N, H
 * and W) is the trailing axes' sum first, then the others': one kernel
 * that sums contiguous rows and a small one over their sums, where one
 * kernel walked every output's elements through a division per element
 * (their coordinates in two runs) and a gather. The partial sums are kept
 * in double, the precision f32 sums accumulate in anyway. Only where the
 * rows are long (SPLIT_SUM_ROW elements): a short row's partial sums would
 * be a pass over a large fraction of the input. [128, 16, 28, 28] over
 * (0, 2, 3), 2 threads: 0.68 -> 0.26 ms (the CNN's first bias gradient), and
 * [128, 32, 14, 14] 0.54 -> 0.15. Returns NULL
 * when the rule does not apply. */
enum { SPLIT_SUM_ROW = 64 };
static graph_node *split_sum(graph_op op, graph_node *a, uint32_t axes, kiln_dtype dt) {
    int nd = a->ndim;
    if (op != GRAPH_SUM || !graph_dtype_is_float(dt) || nd < 3 || !(axes & (1u << (nd - 1))))
        return NULL;
    int lo = nd - 1;
    while (lo > 0 && (axes & (1u << (lo - 1))))
        lo--;
    uint32_t inner = 0;
    int64_t row = 1;
    for (int d = lo; d < nd; d++) {
        inner |= 1u << d;
        row *= a->shape[d];
    }
    uint32_t outer = axes & ~inner;
    if (!outer || row < SPLIT_SUM_ROW)
        return NULL;
    int top = 0; /* past the outer group's last axis */
    for (int d = 0; d < lo; d++)
        if (outer & (1u << d))
            top = d + 1;
    int64_t between = 1, reduced = 1;
    for (int d = top; d < lo; d++)
        between *= a->shape[d];
    for (int d = 0; d < lo; d++)
        if (outer & (1u << d))
            reduced *= a->shape[d];
    if (between < 2 || reduced < 2)
        return NULL;
    const kiln_dtype acc = KILN_F64;
    graph_node *wide = a->dtype == acc ? graph_ref(a) : graph_cast(a, acc);
    graph_node *rows = wide ? graph_reduce(GRAPH_SUM, wide, inner, acc) : NULL;
    graph_node *sum = rows ? graph_reduce(GRAPH_SUM, rows, outer, acc) : NULL;
    graph_node *r = sum ? (dt == acc ? graph_ref(sum) : graph_cast(sum, dt)) : NULL;
    graph_unref(wide);
    graph_unref(rows);
    graph_unref(sum);
    return r;
}

/* A sum, max or min over a permutation of its source's axes (a transpose:
 * the weight gradient autograd takes transposed, swap_broadcast_grad) is
 * the permutation of the source's reduction: contiguous reads, and only
 * the small result permuted (a batch's sum of 128 transposed 144 x 32
 * products read across their rows took 1.06 ms, the plain sum 0.18).
 * Returns NULL when the rule does not apply. */
static graph_node *reduce_permuted(graph_op op, graph_node *a, uint32_t axes, kiln_dtype dt) {
    if ((op != GRAPH_SUM && op != GRAPH_RMAX && op != GRAPH_RMIN) || a->op != GRAPH_VIEW ||
        a->buf || a->p.view.masked || a->p.view.offset != 0 || a->src[0]->ndim != a->ndim)
        return NULL;
    graph_node *s = a->src[0];
    int nd = a->ndim, perm[KILN_MAX_DIMS];
    bool used[KILN_MAX_DIMS] = {false}, identity = true;
    int64_t cs[KILN_MAX_DIMS], st = 1;
    for (int d = nd - 1; d >= 0; d--) {
        cs[d] = st;
        st *= s->shape[d];
    }
    for (int i = 0; i < nd; i++) {
        int d = 0;
        while (d < nd && (used[d] || s->shape[d] != a->shape[i] ||
                          (a->shape[i] > 1 && a->p.view.strides[i] != cs[d])))
            d++;
        if (d == nd)
            return NULL;
        used[d] = true;
        perm[i] = d;
        identity = identity && d == i;
    }
    if (identity)
        return NULL;
    uint32_t saxes = 0;
    for (int i = 0; i < nd; i++)
        if (axes & (1u << i))
            saxes |= 1u << perm[i];
    graph_node *r = graph_reduce(op, s, saxes, dt);
    graph_node *p = r ? graph_permute(r, perm) : NULL;
    graph_unref(r);
    return p;
}

graph_node *graph_reduce(graph_op op, graph_node *a, uint32_t axes, kiln_dtype dt) {
    graph_node *permuted = reduce_permuted(op, a, axes, dt);
    if (permuted)
        return permuted;
    graph_node *folded = reduce_constant_axes(op, a, axes, dt);
    if (folded)
        return folded;
    graph_node *split = split_sum(op, a, axes, dt);
    if (split)
        return split;
    graph_node p;
    graph_proto(&p, op, dt, a->ndim, a->shape);
    for (int d = 0; d < a->ndim; d++)
        if (axes & (1u << d))
            p.shape[d] = 1;
    p.p.axes = axes;
    graph_node *srcs[1] = {a};
    return with_sources(&p, 1, srcs);
}

graph_node *graph_cat(int n, graph_node *const *srcs, int axis) {
    graph_node p;
    graph_proto(&p, GRAPH_CAT, srcs[0]->dtype, srcs[0]->ndim, srcs[0]->shape);
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
    graph_node p;
    graph_proto(&p, op, a->dtype, a->ndim, a->shape);
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

/* Not folded over a constant source: the index still decides which
 * elements are 0 (out of range). */
graph_node *graph_gather(graph_node *a, int axis, graph_node *index) {
    graph_node p;
    graph_proto(&p, GRAPH_GATHER, a->dtype, index->ndim, index->shape);
    p.p.axis = axis;
    graph_node *srcs[2] = {a, index};
    return with_sources(&p, 2, srcs);
}

/* Not folded either: which places the index reaches is data. */
graph_node *graph_scatter(graph_node *t, int axis, graph_node *index, graph_node *src, int reduce,
                          bool include_self) {
    graph_node p;
    graph_proto(&p, GRAPH_SCATTER, t->dtype, t->ndim, t->shape);
    p.p.axis = axis;
    p.p.reduce = reduce;
    p.p.include_self = include_self && reduce != GRAPH_SCATTER_ASSIGN;
    graph_node *srcs[3] = {t, index, src};
    return with_sources(&p, 3, srcs);
}

graph_node *graph_matmul(graph_node *a, graph_node *b) {
    graph_node p;
    graph_proto(&p, GRAPH_MATMUL, a->dtype, a->ndim, a->shape);
    p.shape[a->ndim - 1] = b->shape[b->ndim - 1];
    graph_node *srcs[2] = {a, b};
    return with_sources(&p, 2, srcs);
}

graph_node *graph_attention(graph_op op, int nsrc, graph_node *const *srcs, double scale,
                            bool causal) {
    const graph_node *q = srcs[0], *k = srcs[1], *v = srcs[2];
    int nd = q->ndim;
    graph_node p;
    graph_proto(&p, op, q->dtype, nd, q->shape);
    if (op == GRAPH_ATTENTION)
        p.shape[nd - 1] = v->shape[nd - 1] + 1;
    else if (op == GRAPH_ATTENTION_DKV)
        p.shape[nd - 2] = k->shape[nd - 2], p.shape[nd - 1] += v->shape[nd - 1];
    p.p.scale = scale;
    p.p.causal = causal;
    return with_sources(&p, nsrc, (graph_node **)srcs);
}
