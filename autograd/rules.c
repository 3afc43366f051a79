/* rules.c — the vector-Jacobian product of every differentiable graph op,
 * written with graph/'s constructors so that gradients are lazy nodes that
 * fold, simplify and fuse like the forward pass (and can be differentiated
 * again). Extreme-value reductions and maximum/minimum split the gradient
 * evenly between tied elements. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autograd/internal.h"

/* ---- helpers that consume their arguments ---- */

graph_node *autograd_take_binary(graph_op op, graph_node *a, graph_node *b) {
    graph_node *r = a && b ? graph_binary(op, a, b) : NULL;
    graph_unref(a);
    graph_unref(b);
    return r;
}

graph_node *autograd_take_unary(graph_op op, graph_node *a) {
    graph_node *r = a ? graph_unary(op, a) : NULL;
    graph_unref(a);
    return r;
}

graph_node *autograd_take_where(graph_node *c, graph_node *a, graph_node *b) {
    graph_node *r = c && a && b ? graph_where(c, a, b) : NULL;
    graph_unref(c);
    graph_unref(a);
    graph_unref(b);
    return r;
}

graph_node *autograd_take_reduce(graph_node *a, uint32_t axes) {
    graph_node *r = a ? graph_reduce(GRAPH_SUM, a, axes, a->dtype) : NULL;
    graph_unref(a);
    return r;
}

graph_node *autograd_take_reshape(graph_node *a, int ndim, const int64_t *shape) {
    graph_node *r = a ? graph_reshape(a, ndim, shape) : NULL;
    graph_unref(a);
    return r;
}

graph_node *autograd_full_shape(const graph_node *like, int ndim, const int64_t *shape, double v) {
    return graph_full(like->g, like->dtype, ndim, shape, graph_scalar_from_double(v, like->dtype));
}

graph_node *autograd_full(const graph_node *like, double v) {
    return autograd_full_shape(like, like->ndim, like->shape, v);
}

/* Short names for the rules below: R borrows (takes a reference of its own). */
#define R(n) graph_ref(n)
#define ADD(a, b) autograd_take_binary(GRAPH_ADD, (a), (b))
#define SUB(a, b) autograd_take_binary(GRAPH_SUB, (a), (b))
#define MUL(a, b) autograd_take_binary(GRAPH_MUL, (a), (b))
#define DIV(a, b) autograd_take_binary(GRAPH_DIV, (a), (b))
#define CMP(op, a, b) autograd_take_binary((op), (a), (b))
#define UN(op, a) autograd_take_unary((op), (a))
#define WHERE(c, a, b) autograd_take_where((c), (a), (b))
#define K(like, v) autograd_full((like), (v))

/* ---- rules ---- */

static graph_node *unary_vjp(graph_node *n, graph_node *g) {
    graph_node *x = n->src[0];
    switch (n->op) {
    case GRAPH_NEG:
        return UN(GRAPH_NEG, R(g));
    case GRAPH_ABS: /* sign(x), 0 at 0 */
        return WHERE(CMP(GRAPH_GT, R(x), K(x, 0)), R(g),
                     WHERE(CMP(GRAPH_LT, R(x), K(x, 0)), UN(GRAPH_NEG, R(g)), K(g, 0)));
    case GRAPH_EXP:
        return MUL(R(g), R(n));
    case GRAPH_LOG:
        return DIV(R(g), R(x));
    case GRAPH_SQRT:
        return DIV(MUL(R(g), K(g, 0.5)), R(n));
    case GRAPH_RSQRT: /* -x^(-3/2) / 2 = -y^3 / 2 */
        return MUL(MUL(R(g), K(g, -0.5)), MUL(R(n), MUL(R(n), R(n))));
    case GRAPH_SIN:
        return MUL(R(g), UN(GRAPH_COS, R(x)));
    case GRAPH_COS:
        return UN(GRAPH_NEG, MUL(R(g), UN(GRAPH_SIN, R(x))));
    case GRAPH_TANH:
        return MUL(R(g), SUB(K(n, 1), MUL(R(n), R(n))));
    case GRAPH_SIGMOID:
        return MUL(R(g), MUL(R(n), SUB(K(n, 1), R(n))));
    case GRAPH_RELU:
        return WHERE(CMP(GRAPH_GT, R(x), K(x, 0)), R(g), K(g, 0));
    case GRAPH_GELU: {
        /* gelu(x) = x Phi(x), so gelu' = Phi(x) + x phi(x); with no erf among
         * the ops, Phi(x) is gelu(x) / x (1/2 at 0, where x is replaced by 1
         * so that no branch of the where divides by zero). */
        graph_node *zero = CMP(GRAPH_EQ, R(x), K(x, 0));
        graph_node *safe = WHERE(R(zero), K(x, 1), R(x));
        graph_node *cdf = WHERE(R(zero), K(x, 0.5), DIV(R(n), safe));
        graph_node *pdf = MUL(K(x, 0.3989422804014327),
                              UN(GRAPH_EXP, MUL(K(x, -0.5), MUL(R(x), R(x)))));
        graph_unref(zero);
        return MUL(R(g), ADD(cdf, MUL(R(x), pdf)));
    }
    case GRAPH_SILU: { /* s (1 + x (1 - s)), s = sigmoid(x) */
        graph_node *s = UN(GRAPH_SIGMOID, R(x));
        graph_node *d = MUL(R(s), ADD(K(x, 1), MUL(R(x), SUB(K(x, 1), R(s)))));
        graph_unref(s);
        return MUL(R(g), d);
    }
    case GRAPH_RECIP:
        return UN(GRAPH_NEG, MUL(R(g), MUL(R(n), R(n))));
    case GRAPH_FLOOR: /* piecewise constant: 0, as PyTorch has it (at the steps too) */
    case GRAPH_CEIL:
    case GRAPH_TRUNC:
    case GRAPH_ROUND:
        return K(g, 0);
    case GRAPH_TAN: /* 1 + tan^2 */
        return MUL(R(g), ADD(K(n, 1), MUL(R(n), R(n))));
    case GRAPH_ASIN: /* 1 / sqrt(1 - x^2) */
        return DIV(R(g), UN(GRAPH_SQRT, SUB(K(x, 1), MUL(R(x), R(x)))));
    case GRAPH_ACOS:
        return UN(GRAPH_NEG, DIV(R(g), UN(GRAPH_SQRT, SUB(K(x, 1), MUL(R(x), R(x))))));
    case GRAPH_ATAN:
        return DIV(R(g), ADD(K(x, 1), MUL(R(x), R(x))));
    case GRAPH_SINH:
        return MUL(R(g), UN(GRAPH_COSH, R(x)));
    case GRAPH_COSH:
        return MUL(R(g), UN(GRAPH_SINH, R(x)));
    case GRAPH_ASINH: /* 1 / sqrt(x^2 + 1) */
        return DIV(R(g), UN(GRAPH_SQRT, ADD(MUL(R(x), R(x)), K(x, 1))));
    case GRAPH_ACOSH: /* 1 / sqrt((x - 1)(x + 1)), which keeps its digits near 1 */
        return DIV(R(g), UN(GRAPH_SQRT, MUL(SUB(R(x), K(x, 1)), ADD(R(x), K(x, 1)))));
    case GRAPH_ATANH: /* 1 / (1 - x^2) */
        return DIV(R(g), SUB(K(x, 1), MUL(R(x), R(x))));
    case GRAPH_ERF: /* 2/sqrt(pi) exp(-x^2) */
    case GRAPH_ERFC:
        return MUL(MUL(R(g), K(x, n->op == GRAPH_ERF ? 1.1283791670955126 : -1.1283791670955126)),
                   UN(GRAPH_EXP, UN(GRAPH_NEG, MUL(R(x), R(x)))));
    case GRAPH_EXPM1:
        return MUL(R(g), ADD(R(n), K(n, 1)));
    case GRAPH_LOG1P:
        return DIV(R(g), ADD(R(x), K(x, 1)));
    case GRAPH_CAST:
        return graph_cast(g, x->dtype);
    case GRAPH_BITCAST: /* not differentiable: between the half types, no gradient */
        return K(x, 0);
    default:
        return NULL;
    }
}

/* maximum (gt) or minimum (lt): the winner takes g, a tie halves it. */
static graph_node *extreme_vjp(graph_op wins, graph_node *self, graph_node *other,
                               graph_node *g) {
    return WHERE(CMP(wins, R(self), R(other)), R(g),
                 WHERE(CMP(GRAPH_EQ, R(self), R(other)), MUL(R(g), K(g, 0.5)), K(g, 0)));
}

static graph_node *binary_vjp(graph_node *n, graph_node *g, int j) {
    graph_node *a = n->src[0], *b = n->src[1];
    switch (n->op) {
    case GRAPH_ADD:
        return R(g);
    case GRAPH_SUB:
        return j == 0 ? R(g) : UN(GRAPH_NEG, R(g));
    case GRAPH_MUL:
        return MUL(R(g), R(j == 0 ? b : a));
    case GRAPH_DIV:
        return j == 0 ? DIV(R(g), R(b)) : UN(GRAPH_NEG, DIV(MUL(R(g), R(n)), R(b)));
    case GRAPH_POW:
        if (j == 0) /* b a^(b-1), and 0 where b is 0 (a^0 is 1 for every a, 0 included,
                       where b a^(b-1) would be 0 * inf) */
            return WHERE(CMP(GRAPH_EQ, R(b), K(b, 0)), K(g, 0),
                         MUL(R(g), MUL(R(b), autograd_take_binary(GRAPH_POW, R(a),
                                                                  SUB(R(b), K(b, 1))))));
        /* y log(a); 0 where a is 0 and b >= 0 (0^b does not move with b there), and
         * y log(a) = inf * -inf = -inf where a is 0 and b < 0, as PyTorch has it */
        return WHERE(CMP(GRAPH_EQ, R(a), K(a, 0)),
                     WHERE(CMP(GRAPH_GE, R(b), K(b, 0)), K(g, 0),
                           MUL(R(g), MUL(R(n), UN(GRAPH_LOG, R(a))))),
                     MUL(R(g), MUL(R(n), UN(GRAPH_LOG, R(a)))));
    case GRAPH_ATAN2: { /* d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2) */
        graph_node *r2 = ADD(MUL(R(a), R(a)), MUL(R(b), R(b)));
        return j == 0 ? DIV(MUL(R(g), R(b)), r2) : UN(GRAPH_NEG, DIV(MUL(R(g), R(a)), r2));
    }
    case GRAPH_FMOD: /* a - trunc(a / b) b */
    case GRAPH_MOD:  /* a - floor(a / b) b */
        return j == 0 ? R(g)
                      : UN(GRAPH_NEG, MUL(R(g), UN(n->op == GRAPH_FMOD ? GRAPH_TRUNC : GRAPH_FLOOR,
                                                   DIV(R(a), R(b)))));
    case GRAPH_COPYSIGN: /* a's side: the sign it was given (result / a), 0 at a = 0, as
                            PyTorch has it; b's: 0 */
        if (j == 1)
            return K(g, 0);
        return WHERE(CMP(GRAPH_EQ, R(a), K(a, 0)), K(g, 0), MUL(R(g), DIV(R(n), R(a))));
    case GRAPH_MAXIMUM:
        return extreme_vjp(GRAPH_GT, j == 0 ? a : b, j == 0 ? b : a, g);
    case GRAPH_MINIMUM:
        return extreme_vjp(GRAPH_LT, j == 0 ? a : b, j == 0 ? b : a, g);
    default:
        return NULL;
    }
}

/* max and min: the elements equal to the extreme share g evenly; a NaN row
 * (whose extreme equals nothing) gets no gradient. */
static graph_node *reduce_extreme_vjp(graph_node *n, graph_node *g) {
    graph_node *x = n->src[0];
    graph_node *hit = CMP(GRAPH_EQ, R(x), graph_expand(n, x->shape));
    graph_node *count = hit ? autograd_take_reduce(graph_cast(hit, x->dtype), n->p.axes) : NULL;
    graph_node *share = DIV(R(g), count);
    graph_node *spread = share ? graph_expand(share, x->shape) : NULL;
    graph_unref(share);
    return WHERE(hit, spread, K(x, 0));
}

/* Whether v is an unrealized view that only swaps the last two axes of its
 * contiguous source: a weight read as w^T (kiln_linear's). */
static bool is_transposed_source(const graph_node *v) {
    if (v->op != GRAPH_VIEW || v->buf || v->p.view.masked || v->p.view.offset != 0 ||
        v->ndim < 2 || v->src[0]->ndim != v->ndim)
        return false;
    const graph_node *s = v->src[0];
    int nd = v->ndim;
    int64_t st = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int vd = d == nd - 1 ? nd - 2 : d == nd - 2 ? nd - 1 : d; /* v's axis of s's d */
        if (v->shape[vd] != s->shape[d] || (s->shape[d] > 1 && v->p.view.strides[vd] != st))
            return false;
        st *= s->shape[d];
    }
    return true;
}

static graph_node *swap_last(graph_node *x) {
    int perm[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        perm[d] = d;
    perm[x->ndim - 2] = x->ndim - 1;
    perm[x->ndim - 1] = x->ndim - 2;
    return graph_permute(x, perm);
}

/* The gradient of a matmul's A that the batch broadcasts (a convolution's
 * weight against each image's im2col, [OC, K] @ [N, K, P]): g @ B^T per
 * batch matrix, then summed over the batch, packs B^T ([P, K] read across
 * B's rows) for every matrix. Where K is the longer side of A, (B g^T)^T
 * packs g^T instead (P x OC, the smaller), reads B's rows in place, and
 * the batch's sum reads the transposed products as they are: the CNN's
 * second convolution, 32 x 196 @ 196 x 144 per image, 2.27 -> 1.63 ms (its
 * batch sum level: graph_reduce sums the products before the transpose). */
static bool swap_broadcast_grad(const graph_node *n) {
    const graph_node *a = n->src[0], *b = n->src[1];
    int nd = a->ndim;
    int64_t rows = a->shape[nd - 2], k = a->shape[nd - 1], batch = 1;
    if (a->op != GRAPH_VIEW || a->p.view.masked || !graph_dtype_is_float(n->dtype) ||
        k <= 2 * rows || is_transposed_source(b))
        return false;
    /* kiln_matmul expands a broadcast operand to the batch: stride 0 */
    for (int d = 0; d < nd - 2; d++) {
        if (a->shape[d] > 1 && a->p.view.strides[d] != 0)
            return false;
        batch *= a->shape[d];
    }
    return batch > 1;
}

/* y = a @ b: da = g @ b^T, db = a^T @ g. When the operand is itself a
 * transposed view of its source (b = w^T), its gradient is computed
 * transposed, dw = g^T @ a, so that the view's own rule swaps it back into
 * the matmul's output as it is: otherwise every linear layer's weight
 * gradient was a [in, out] product copied into the [out, in] layout by a
 * kernel of its own (4 of GPT-2's copy-only kernels per layer). The same
 * transposed form serves a batch-broadcast A (swap_broadcast_grad). */
static graph_node *matmul_vjp(graph_node *n, graph_node *g, int j) {
    graph_node *other = n->src[1 - j];
    if (is_transposed_source(n->src[j]) || (j == 0 && swap_broadcast_grad(n))) {
        graph_node *gt = swap_last(g);
        graph_node *m = gt ? (j == 0 ? graph_matmul(other, gt) : graph_matmul(gt, other)) : NULL;
        graph_node *r = m ? swap_last(m) : NULL;
        graph_unref(gt);
        graph_unref(m);
        return r;
    }
    graph_node *t = swap_last(other);
    graph_node *r = t ? (j == 0 ? graph_matmul(g, t) : graph_matmul(t, g)) : NULL;
    graph_unref(t);
    return r;
}

/* Columns [lo, lo + len) of x's last axis (a view). */
static graph_node *columns(graph_node *x, int64_t lo, int64_t len) {
    int64_t start[KILN_MAX_DIMS] = {0}, step[KILN_MAX_DIMS], n[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        step[d] = 1;
        n[d] = x->shape[d];
    }
    start[x->ndim - 1] = lo;
    n[x->ndim - 1] = len;
    return graph_slice(x, start, step, n);
}

/* Fused attention (GRAPH_ATTENTION) is differentiated by its two backward
 * kernels, which recompute P from q, k and the stored log-sum-exp instead of
 * keeping it: FlashAttention's backward. g covers the output and its lse
 * column; since d lse_i / d s_ij = P_ij, lse's gradient enters as a term of
 * delta: dS = P (dP - (rowsum(go o) - g_lse)). Both rules ask for the same
 * nodes, which hash-consing makes one (dk and dv are columns of one kernel's
 * output). */
static graph_node *attention_vjp(graph_node *n, graph_node *g, int j) {
    int nd = n->ndim;
    int64_t dv = n->shape[nd - 1] - 1, d = n->src[0]->shape[nd - 1];
    graph_node *go = columns(g, 0, dv), *o = columns(n, 0, dv);
    graph_node *lse = columns(n, dv, 1);
    graph_node *delta = SUB(autograd_take_reduce(MUL(R(go), o), 1u << (nd - 1)), columns(g, dv, 1));
    graph_node *r = NULL;
    if (go && lse && delta) {
        graph_node *srcs[6] = {n->src[0], n->src[1], n->src[2], go, lse, delta};
        graph_node *b = graph_attention(j == 0 ? GRAPH_ATTENTION_DQ : GRAPH_ATTENTION_DKV, 6, srcs,
                                        n->p.scale, n->p.causal);
        r = !b ? NULL : j == 0 ? R(b) : j == 1 ? columns(b, 0, d) : columns(b, d, dv);
        graph_unref(b);
    }
    graph_unref(go);
    graph_unref(lse);
    graph_unref(delta);
    return r;
}

static graph_node *cat_vjp(graph_node *n, graph_node *g, int j) {
    int ax = n->p.axis;
    int64_t lo = 0;
    for (int i = 0; i < j; i++)
        lo += n->src[i]->shape[ax];
    int64_t start[KILN_MAX_DIMS] = {0}, step[KILN_MAX_DIMS], len[KILN_MAX_DIMS];
    for (int d = 0; d < n->ndim; d++) {
        step[d] = 1;
        len[d] = n->shape[d];
    }
    start[ax] = lo;
    len[ax] = n->src[j]->shape[ax];
    return graph_slice(g, start, step, len);
}

/* A scatter by n's index along n's axis (GRAPH_SCATTER: O(J) per row, in
 * one kernel), consuming base and src. */
static graph_node *scat(const graph_node *n, graph_node *base, graph_node *src, int reduce,
                        bool include_self) {
    graph_node *r = base && src ? graph_scatter(base, n->p.axis, n->src[1], src, reduce,
                                                include_self)
                                : NULL;
    graph_unref(base);
    graph_unref(src);
    return r;
}

/* x (consumed) read where n's index points: of the index's shape, 0 where
 * the index lies outside the axis. */
static graph_node *gat(const graph_node *n, graph_node *x) {
    graph_node *r = x ? graph_gather(x, n->p.axis, n->src[1]) : NULL;
    graph_unref(x);
    return r;
}

/* The gradient of a gather with respect to its table: g added where the
 * index points, a scatter-add into zeros (linear in the index's size,
 * whatever the table's: an embedding's gradient over a large vocabulary),
 * padded with zeros where the index is smaller than the table off the axis.
 * Out-of-range indices add nothing. */
static graph_node *gather_vjp(graph_node *n, graph_node *g) {
    graph_node *x = n->src[0];
    int ax = n->p.axis;
    int64_t shape[KILN_MAX_DIMS], before[KILN_MAX_DIMS] = {0}, after[KILN_MAX_DIMS];
    bool pad = false;
    for (int d = 0; d < n->ndim; d++) {
        shape[d] = d == ax ? x->shape[ax] : n->shape[d];
        after[d] = x->shape[d] - shape[d];
        pad = pad || after[d] > 0;
    }
    graph_node *r = scat(n, autograd_full_shape(g, n->ndim, shape, 0), R(g), KILN_SCATTER_SUM, true);
    if (!r || !pad)
        return r;
    graph_node *p = graph_pad(r, before, after);
    graph_unref(r);
    return p;
}

/* g where nothing points (t's value survives there), 0 where something does
 * (it was replaced): g with zeros assigned at every place pointed at. */
static graph_node *uncovered(graph_node *n, graph_node *g) {
    return scat(n, R(g), autograd_full(n->src[2], 0), GRAPH_SCATTER_ASSIGN, false);
}

/* The source positions along n's axis, of the index's shape (i64). */
static graph_node *positions(graph_node *n) {
    const graph_node *I = n->src[1];
    int ax = n->p.axis;
    int64_t line[KILN_MAX_DIMS];
    for (int d = 0; d < I->ndim; d++)
        line[d] = d == ax ? I->shape[d] : 1;
    graph_node *j = autograd_take_reshape(graph_arange(n->g, KILN_I64, I->shape[ax], 0, 1),
                                          I->ndim, line);
    graph_node *e = j ? graph_expand(j, I->shape) : NULL;
    graph_unref(j);
    return e;
}

/* The scatter's gradients, each O(J) per row like the scatter: gathers of g
 * and of scatters of g or of counts, never a comparison of every element
 * with the whole axis. j = 0 is t's, j = 2 the source's. Assignment: only
 * the last element to reach a place (which a scatter of positions finds)
 * gets its gradient, t only where nothing points. amax/amin: the elements
 * equal to the result, t among them with include_self, share it evenly.
 * prod: each factor gets the product of the others, which with zeros among
 * them is 0, and otherwise the product of the nonzero factors divided by
 * its own (from a count of zeros and a product of nonzero factors per place). */
static graph_node *scatter_vjp(graph_node *n, graph_node *g, int j) {
    graph_node *t = n->src[0], *src = n->src[2];
    bool self = n->p.include_self;
    switch (n->p.reduce) {
    case KILN_SCATTER_SUM:
        return j == 0 ? (self ? R(g) : uncovered(n, g)) : gat(n, R(g));
    case GRAPH_SCATTER_ASSIGN: {
        if (j == 0)
            return uncovered(n, g);
        graph_node *last = scat(n, graph_full(n->g, KILN_I64, t->ndim, t->shape,
                                              (graph_scalar){.i = -1}),
                                positions(n), GRAPH_SCATTER_ASSIGN, false);
        return WHERE(CMP(GRAPH_EQ, gat(n, last), positions(n)), gat(n, R(g)), K(src, 0));
    }
    case KILN_SCATTER_AMAX:
    case KILN_SCATTER_AMIN: {
        graph_node *hit = CMP(GRAPH_EQ, R(src), gat(n, R(n)));
        graph_node *tself = self ? CMP(GRAPH_EQ, R(t), R(n)) : NULL;
        graph_node *base = self ? WHERE(R(tself), K(g, 1), K(g, 0)) : K(g, 0);
        graph_node *cnt = scat(n, base, WHERE(R(hit), K(src, 1), K(src, 0)), KILN_SCATTER_SUM, true);
        graph_node *r;
        if (j == 2) {
            r = WHERE(hit, DIV(gat(n, R(g)), gat(n, cnt)), K(src, 0));
            graph_unref(tself);
        } else {
            graph_unref(hit);
            r = self ? WHERE(tself, DIV(R(g), cnt), K(g, 0)) : (graph_unref(cnt), uncovered(n, g));
        }
        return r;
    }
    default: { /* KILN_SCATTER_PROD */
        graph_node *z = CMP(GRAPH_EQ, R(src), K(src, 0));
        graph_node *nz = WHERE(R(z), K(src, 1), R(src));
        graph_node *tz = CMP(GRAPH_EQ, R(t), K(t, 0));
        graph_node *nzt = WHERE(R(tz), K(t, 1), R(t));
        graph_node *zc = scat(n, self ? WHERE(R(tz), K(g, 1), K(g, 0)) : K(g, 0),
                              WHERE(R(z), K(src, 1), K(src, 0)), KILN_SCATTER_SUM, true);
        graph_node *prod = scat(n, self ? R(nzt) : K(g, 1), R(nz), KILN_SCATTER_PROD, true);
        graph_node *r = NULL;
        if (j == 2) {
            /* zeros other than this factor's make the product of the others 0 */
            graph_node *others = SUB(gat(n, R(zc)), WHERE(R(z), K(src, 1), K(src, 0)));
            r = MUL(gat(n, R(g)), WHERE(CMP(GRAPH_GT, others, K(src, 0.5)), K(src, 0),
                                        DIV(gat(n, R(prod)), R(nz))));
        } else if (self) {
            graph_node *others = SUB(R(zc), WHERE(R(tz), K(t, 1), K(t, 0)));
            r = MUL(R(g), WHERE(CMP(GRAPH_GT, others, K(t, 0.5)), K(t, 0), DIV(R(prod), R(nzt))));
        } else {
            r = uncovered(n, g);
        }
        graph_unref(z);
        graph_unref(nz);
        graph_unref(tz);
        graph_unref(nzt);
        graph_unref(zc);
        graph_unref(prod);
        return r;
    }
    }
}

kiln_status autograd_vjp(graph_node *n, graph_node *g, const bool *need, graph_node **out,
                         char *msg, size_t cap) {
    bool bad = false;
    /* every slot NULL first: a failure at j leaves none after it stale */
    for (int j = 0; j < n->nsrc; j++)
        out[j] = NULL;
    for (int j = 0; j < n->nsrc; j++) {
        if (!need[j])
            continue;
        if (graph_op_is_unary(n->op))
            out[j] = unary_vjp(n, g);
        else if (graph_op_is_binary(n->op))
            out[j] = binary_vjp(n, g, j);
        else if (n->op == GRAPH_WHERE)
            out[j] = j == 1 ? WHERE(R(n->src[0]), R(g), K(g, 0))
                            : WHERE(R(n->src[0]), K(g, 0), R(g));
        else if (n->op == GRAPH_SUM)
            out[j] = graph_expand(g, n->src[0]->shape);
        else if (n->op == GRAPH_RMAX || n->op == GRAPH_RMIN)
            out[j] = reduce_extreme_vjp(n, g);
        else if (n->op == GRAPH_VIEW)
            out[j] = autograd_view_vjp(n, R(g), &bad);
        else if (n->op == GRAPH_CAT)
            out[j] = cat_vjp(n, g, j);
        else if (n->op == GRAPH_MATMUL)
            out[j] = matmul_vjp(n, g, j);
        else if (n->op == GRAPH_GATHER)
            out[j] = gather_vjp(n, g);
        else if (n->op == GRAPH_SCATTER)
            out[j] = scatter_vjp(n, g, j);
        else if (graph_op_is_collective(n->op))
            out[j] = autograd_collective_vjp(n, g);
        else if (n->op == GRAPH_ATTENTION)
            out[j] = attention_vjp(n, g, j);
        if (!out[j]) {
            for (int i = 0; i < j; i++) {
                graph_unref(out[i]);
                out[i] = NULL;
            }
            if (graph_op_is_attention(n->op) && n->op != GRAPH_ATTENTION) {
                char shape[KILN_MAX_DIMS * 21 + 3];
                graph_format_shape(shape, sizeof shape, n->ndim, n->shape);
                snprintf(msg, cap,
                         "autograd: %s %s: the backward of fused attention "
                         "(kiln_scaled_dot_product_attention) is not differentiated again; "
                         "kiln_attention with a mask records a form that is",
                         graph_op_name(n->op), shape);
                return KILN_ERR_ARG;
            }
            if (bad) {
                char shape[KILN_MAX_DIMS * 21 + 3];
                graph_format_shape(shape, sizeof shape, n->ndim, n->shape);
                snprintf(msg, cap, "autograd: a view of shape %s reads source elements twice",
                         shape);
                return KILN_ERR_ARG;
            }
            snprintf(msg, cap, "autograd: out of memory while differentiating %s",
                     graph_op_name(n->op));
            return KILN_ERR_OOM;
        }
    }
    return KILN_OK;
}
