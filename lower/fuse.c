/* fuse.c — the scheduler's fusion decisions. A node is a kernel boundary
 * (materialised: its value stored in a buffer of its own) when it is
 * requested, is a matmul, is read from two kernels, or is viewed in a way
 * strides cannot express; every other node is computed in the kernel of its
 * consumers. Each rule below is a small function whose comment gives its
 * reason; sched_fuse applies them in order, repeating those that depend on
 * each other's decisions until none changes anything. */
#include <stdlib.h>
#include <string.h>

#include "lower/sched.h"

/* Leaves, and views of leaves or of nodes already materialised, cost
 * nothing to read again in every consumer: a view is index arithmetic over
 * a buffer. (A layer-norm's row statistic broadcast over its rows, read by
 * the forward normalisation and by the backward pass, was copied to full
 * size by a kernel of its own: two of GPT-2's copy-only kernels per layer.)
 * So do identities over them: cross-entropy's detached row max, read by the
 * exp kernel and by the log-sum-exp, was a copy kernel of its own. */
enum { CHEAP_CONE_NODES = 6 }; /* see cheap_cone */
static bool cheap_cone(const sched *s, const graph_node *n, int *budget);

static bool cheap(const sched *s, const graph_node *n) {
    /* A view read by one consumer that a matmul's epilogue may still take
     * into the matmul's kernel (conv2d's bias through a reshape) is not. */
    bool shared = sched_pending(n) && sched_of(s, n)->nconsumers > 1;
    int budget = CHEAP_CONE_NODES;
    if (shared && cheap_cone(s, n, &budget))
        return true;
    while ((n->op == GRAPH_VIEW || graph_is_identity(n)) && sched_pending(n)) {
        n = n->src[0];
        if (sched_pending(n) && sched_of(s, n)->materialized &&
            (shared || n->op != GRAPH_MATMUL))
            return true;
    }
    return !sched_pending(n) || n->op == GRAPH_CONST;
}

/* A shared value that a few integer-cheap ops make from leaves, constants,
 * indices and materialised nodes is recomputed by every kernel that reads
 * it, never stored: cross-entropy's one-hot targets (eq(arange, targets),
 * cast) were a 256x50257 f32 kernel of their own in GPT-2's step (4 ms of
 * 160), read back by three kernels that each compute it in a few
 * instructions. At most CHEAP_CONE_NODES nodes of these ops: */

static bool cheap_op(graph_op op) {
    switch (op) {
    case GRAPH_CAST:
    case GRAPH_NEG:
    case GRAPH_ADD:
    case GRAPH_SUB:
    case GRAPH_MUL:
    case GRAPH_MAXIMUM:
    case GRAPH_MINIMUM:
    case GRAPH_WHERE:
    case GRAPH_ARANGE:
    case GRAPH_BITAND:
    case GRAPH_BITOR:
    case GRAPH_BITXOR:
    case GRAPH_BITNOT:
        return true;
    default:
        return graph_op_is_compare(op);
    }
}

/* ... and at most one input of about the value's own size, so that each
 * recomputation reads no more than a read of the stored value would (an
 * add of two gradients stays stored: recomputed, each reader would read
 * both). big counts those inputs; numel is the value's size. */
static bool cheap_cone_of(const sched *s, const graph_node *n, int64_t numel, int *budget, int *big) {
    if (n->op == GRAPH_CONST)
        return true;
    if (!sched_pending(n) || sched_of(s, n)->materialized)
        return 2 * graph_numel(n) <= numel || ++*big <= 1;
    if (sched_of(s, n)->requested || --*budget < 0)
        return false;
    if (n->op == GRAPH_VIEW || graph_is_identity(n))
        return cheap_cone_of(s, n->src[0], numel, budget, big);
    if (!cheap_op(n->op))
        return false;
    for (int i = 0; i < n->nsrc; i++)
        if (!cheap_cone_of(s, n->src[i], numel, budget, big))
            return false;
    return true;
}

static bool cheap_cone(const sched *s, const graph_node *n, int *budget) {
    int big = 0;
    return cheap_cone_of(s, n, graph_numel(n), budget, &big);
}

static graph_node *past_identity(const sched *s, graph_node *n);

graph_node *sched_operand_base(const sched *s, graph_node *o, lower_operand *layout) {
    int nd = o->ndim;
    memset(layout, 0, sizeof *layout);
    /* An identity that no kernel stores (no-grad's detach of a weight) is
     * its source: the weight's reshape in an evaluation-mode conv2d was
     * copied by a kernel of its own. */
    o = past_identity(s, o);
    /* A view without a mask is strides over its source; a masked one (a pad)
     * has zeros no stride reaches, so it is read from its own buffer. */
    if (o->op == GRAPH_VIEW && sched_pending(o) && !o->p.view.masked) {
        graph_node *base = past_identity(s, o->src[0]);
        if (sched_pending(base) && !sched_of(s, base)->materialized)
            return NULL;
        layout->offset = o->p.view.offset;
        for (int d = 0; d < nd - 2; d++)
            layout->batch_strides[d] = o->p.view.strides[d];
        layout->row_stride = o->p.view.strides[nd - 2];
        layout->col_stride = o->p.view.strides[nd - 1];
        return base;
    }
    if (sched_pending(o) && !sched_of(s, o)->materialized)
        return NULL;
    int64_t st = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t v = o->shape[d] == 1 ? 0 : st;
        if (d == nd - 1)
            layout->col_stride = v;
        else if (d == nd - 2)
            layout->row_stride = v;
        else
            layout->batch_strides[d] = v;
        st *= o->shape[d];
    }
    return o;
}

/* The axes of view v as a split operand reads them: each axis's size, its
 * stride over the buffer read, and where that buffer is a pad's source
 * (the view's base a masked view, not stored), the masked axis of the pad
 * it moves along (-1: none) and its step there. */
typedef struct split_axes {
    int n;
    int64_t size[KILN_MAX_DIMS], stride[KILN_MAX_DIMS], step[KILN_MAX_DIMS];
    int mask[KILN_MAX_DIMS];
} split_axes;

/* One axis group of a split operand: the axes [lo, hi) that make one axis of
 * its reshape, size-1 axes dropped and neighbours that strides join merged
 * (outer to inner; never an axis along a mask). false when more than
 * LOWER_SPLIT_DIMS remain. */
static bool split_group(const split_axes *v, int lo, int hi, int *n, int64_t *size,
                        int64_t *stride, int8_t *mask, int64_t *step) {
    *n = 0;
    for (int d = lo; d < hi; d++) {
        if (v->size[d] == 1)
            continue;
        int64_t st = v->stride[d];
        if (*n > 0 && mask[*n - 1] < 0 && v->mask[d] < 0 && stride[*n - 1] == st * v->size[d]) {
            size[*n - 1] *= v->size[d];
            stride[*n - 1] = st;
            continue;
        }
        if (*n == LOWER_SPLIT_DIMS)
            return false;
        size[*n] = v->size[d];
        mask[*n] = (int8_t)v->mask[d];
        step[*n] = v->step[d];
        stride[(*n)++] = st;
    }
    return true;
}

/* The split layout of o, a reshape of a view whose axes are a: which axes of
 * the view make each axis of o (an axis that two of o's share fails), each
 * batch axis one stride along no mask, the rows and columns a group each. */
static bool split_layout(const graph_node *o, const split_axes *a, int64_t offset,
                         lower_operand *layout) {
    int nd = o->ndim, first[KILN_MAX_DIMS + 1], i = 0;
    for (int d = 0; d < nd; d++) {
        first[d] = i;
        int64_t prod = 1;
        while (i < a->n && (prod < o->shape[d] || a->size[i] == 1)) {
            if (a->size[i] == 0)
                return false;
            prod *= a->size[i++];
        }
        if (prod != o->shape[d])
            return false;
    }
    if (i != a->n)
        return false;
    first[nd] = a->n;
    lower_operand l = *layout;
    l.offset = offset;
    for (int d = 0; d < nd - 2; d++) {
        int n;
        int64_t size[LOWER_SPLIT_DIMS], stride[LOWER_SPLIT_DIMS], step[LOWER_SPLIT_DIMS];
        int8_t mask[LOWER_SPLIT_DIMS];
        if (!split_group(a, first[d], first[d + 1], &n, size, stride, mask, step) || n > 1 ||
            (n == 1 && mask[0] >= 0))
            return false;
        l.batch_strides[d] = n ? stride[0] : 0;
    }
    if (!split_group(a, first[nd - 2], first[nd - 1], &l.nrdims, l.rsize, l.rstride, l.rmask,
                     l.rstep) ||
        !split_group(a, first[nd - 1], first[nd], &l.ncdims, l.csize, l.cstride, l.cmask,
                     l.cstep))
        return false;
    /* One axis along no mask is a plain stride. */
    if (l.nrdims == 0 || (l.nrdims == 1 && l.rmask[0] < 0)) {
        l.row_stride = l.nrdims ? l.rstride[0] : 0;
        l.nrdims = 0;
    }
    if (l.ncdims == 0 || (l.ncdims == 1 && l.cmask[0] < 0)) {
        l.col_stride = l.ncdims ? l.cstride[0] : 0;
        l.ncdims = 0;
    }
    *layout = l;
    return true;
}

/* v's axes over pad p's source, where every axis of v moves along one axis
 * of p (as an unfold's windows and positions do) and stays within it: then
 * an element of v is p's source at strides, or a zero where a masked axis's
 * coordinate lies outside [mask_lo, mask_hi). The masked axes (at most
 * LOWER_SPLIT_DIMS) go into the layout with their bounds and the coordinate
 * v's offset starts at; *offset is over p's source. */
static bool through_pad(const graph_node *v, const graph_node *p, split_axes *a,
                        lower_operand *layout, int64_t *offset) {
    const graph_view *pv = &p->p.view;
    int64_t cs[KILN_MAX_DIMS], origin[KILN_MAX_DIMS], reach[KILN_MAX_DIMS], st = 1;
    int mask_of[KILN_MAX_DIMS];
    for (int d = p->ndim - 1; d >= 0; d--) {
        cs[d] = st;
        st *= p->shape[d];
    }
    int64_t off = v->p.view.offset;
    if (off < 0)
        return false;
    *offset = pv->offset;
    for (int d = 0; d < p->ndim; d++) {
        origin[d] = reach[d] = off / cs[d] % p->shape[d];
        *offset += origin[d] * pv->strides[d];
        bool masked = pv->mask_lo[d] > 0 || pv->mask_hi[d] < p->shape[d];
        mask_of[d] = -1;
        if (masked) {
            if (layout->nmasks == LOWER_SPLIT_DIMS)
                return false;
            int m = layout->nmasks++;
            layout->mlo[m] = pv->mask_lo[d];
            layout->mhi[m] = pv->mask_hi[d];
            layout->morigin[m] = origin[d];
            mask_of[d] = m;
        }
    }
    a->n = v->ndim;
    for (int i = 0; i < v->ndim; i++) {
        int64_t s = v->p.view.strides[i];
        a->size[i] = v->shape[i];
        a->stride[i] = a->step[i] = 0;
        a->mask[i] = -1;
        if (s == 0 || v->shape[i] == 1)
            continue;
        int d = 0;
        while (d < p->ndim && (s < 0 || s % cs[d] || (d > 0 && s / cs[d] >= p->shape[d])))
            d++;
        if (d == p->ndim)
            return false;
        a->step[i] = s / cs[d];
        a->stride[i] = a->step[i] * pv->strides[d];
        a->mask[i] = mask_of[d];
        reach[d] += a->step[i] * (v->shape[i] - 1);
    }
    for (int d = 0; d < p->ndim; d++)
        if (reach[d] >= p->shape[d])
            return false;
    return true;
}

/* n, or the source of n where n is an identity (a one-source cat: what
 * no-grad records after an op) that no kernel stores: reading the source is
 * reading n. */
static graph_node *past_identity(const sched *s, graph_node *n) {
    if (graph_is_identity(n) && sched_pending(n) && !sched_of(s, n)->materialized)
        return n->src[0];
    return n;
}

/* A matmul's B that is a reshape of a view reading its base's elements
 * several times each (conv2d's im2col: 9x the input for a 3x3 kernel) is
 * read in place: the copy of the view cost a fifth of a 3x3 convolution's
 * forward time (0.70 of 3.55 ms at x 8x64x32x32, 2 threads). Where the base
 * is a pad (a masked view, not stored), its source is read and the pad's
 * zeros come from bounds on the coordinates (the pad's copy took 0.5 ms
 * more on one thread); otherwise the base is. Only where the view and its
 * reshape have no other reader (a view that another kernel materialises
 * anyway is read from there), and where the columns' innermost axis is
 * contiguous and at least 8 long, so that the packing copies runs of
 * vectors. Best of 27 runs, 3x3 with padding 1 and a relu, 2 threads,
 * against the copy: 500x16x14x14 to 32 channels 14.7 -> 9.4 ms,
 * 500x1x28x28 to 16 4.2 -> 3.5, 8x64x32x32 to 64 2.80 -> 2.25, 64x32x8x8
 * to 64 level (0.96 -> 0.94); output rows of 4 and fewer were 1.4-1.5x
 * slower read in place (256x64x4x4 2.25 -> 3.2 ms). Returns the buffer
 * read, materialised once the caller sees to it. */
static graph_node *split_base(const sched *s, const graph_node *x, int j, lower_operand *layout) {
    graph_node *o = x->src[j], *v = o->src[0];
    if (!s->split_operands || j != 1 || o->op != GRAPH_VIEW || !sched_pending(o) ||
        !graph_view_is_reshape(o) || v->op != GRAPH_VIEW || !sched_pending(v) ||
        v->p.view.masked || sched_of(s, v)->materialized || sched_of(s, o)->materialized ||
        sched_of(s, v)->nconsumers != 1 || sched_of(s, o)->nconsumers != 1 ||
        graph_numel(v) < 2 * graph_numel(v->src[0]))
        return NULL;
    graph_node *b = past_identity(s, v->src[0]);
    lower_operand l;
    memset(&l, 0, sizeof l);
    split_axes a;
    int64_t offset = v->p.view.offset;
    if (b->op == GRAPH_VIEW && sched_pending(b) && b->p.view.masked &&
        !sched_of(s, b)->materialized && through_pad(v, b, &a, &l, &offset)) {
        b = past_identity(s, b->src[0]);
    } else { /* read b itself: what a through_pad that failed half-way wrote goes */
        memset(&l, 0, sizeof l);
        offset = v->p.view.offset;
        a.n = v->ndim;
        for (int i = 0; i < v->ndim; i++) {
            a.size[i] = v->shape[i];
            a.stride[i] = v->p.view.strides[i];
            a.step[i] = 0;
            a.mask[i] = -1;
        }
    }
    if (!split_layout(o, &a, offset, &l) || !lower_operand_split(&l))
        return NULL;
    int64_t inner = l.ncdims ? l.cstride[l.ncdims - 1] : l.col_stride;
    int64_t len = l.ncdims ? l.csize[l.ncdims - 1] : o->shape[o->ndim - 1];
    if (inner != 1 || len < 8)
        return NULL;
    if (layout)
        *layout = l;
    return b;
}

graph_node *sched_matmul_operand(const sched *s, const graph_node *x, int j,
                                 lower_operand *layout) {
    graph_node *b = sched_operand_base(s, x->src[j], layout);
    if (b)
        return b;
    lower_operand l;
    b = split_base(s, x, j, &l);
    if (!b || (sched_pending(b) && !sched_of(s, b)->materialized))
        return NULL;
    *layout = l;
    return b;
}

/* ---- kernel boundaries ---- */

/* A requested value must be in memory when the run ends. */
static void boundary_requested(sched *s, int n, graph_node *const *targets) {
    for (int r = 0; r < n; r++)
        if (sched_pending(targets[r])) {
            sched_node *t = sched_of(s, targets[r]);
            t->materialized = t->requested = true;
        }
}

/* A matmul is a kernel of its own: a tiled dot product whose blocking the
 * target chooses; only an elementwise epilogue joins it
 * (fuse_matmul_epilogue). Without fusion (eager mode's baseline) every op
 * that computes is its own kernel. */
static bool boundary_op(const graph_node *x, bool fuse) {
    /* A scatter's places are data, so nothing can read its result at a
     * computed index before every row's pass is done: its own kernel too. */
    return x->op == GRAPH_MATMUL || graph_op_is_collective(x->op) || x->op == GRAPH_SCATTER ||
           graph_op_is_attention(x->op) || (!fuse && graph_op_computes(x->op));
}

/* A collective hands its source's memory to dist/ as it is: a contiguous
 * buffer of the source's own, a leaf's or a kernel's output (a view of one
 * is copied by a kernel first). */
static void boundary_collective_sources(sched *s) {
    for (int64_t i = 0; i < s->count; i++)
        if (graph_op_is_collective(s->order[i]->op) && sched_pending(s->order[i]->src[0]))
            sched_of(s, s->order[i]->src[0])->materialized = true;
}

/* A gather reads its source at coordinates that are data. The scheduler's
 * decisions (which reductions fit a row, which reads are at a kernel's own
 * index) rest on index arithmetic it can see, so a source that would be
 * computed inside the gather's kernel is materialised first; views over it
 * stay index arithmetic, and the gather costs one load per element. */
static void boundary_gather_sources(sched *s) {
    for (int64_t i = 0; i < s->count; i++) {
        if (s->order[i]->op != GRAPH_GATHER)
            continue;
        graph_node *base = s->order[i]->src[0];
        while (base->op == GRAPH_VIEW && sched_pending(base))
            base = base->src[0];
        if (sched_pending(base) && base->op != GRAPH_CONST)
            sched_of(s, base)->materialized = true;
    }
}

/* A value that reads several stored tensors of at least its own size, read
 * through a view that repeats its elements (a broadcast: the view has at
 * least twice its elements), is materialised: computed inside the view's
 * reader, its reads would be repeated for every copy. A max-pool's backward
 * spreads each window's gradient (a conv's col2im, a sum of 9 taps of the
 * stored column gradient, divided by the window's count of ties) over the
 * window's 4 elements: 4 times the taps, 2.4 ms of a CNN step at 12 GB/s.
 * Reductions end the walk, and values made only from them (a layer-norm
 * backward's per-row coefficients, a few multiplies of row sums) stay in
 * their row kernels: there they cost arithmetic, not reads. */
enum { REPEAT_MIN_READS = 2, REPEAT_WALK = 64 };

static bool stored_here(const sched *s, const graph_node *x) {
    return !sched_pending(x) || sched_of(s, x)->materialized;
}

/* Adds to seen[*n] the distinct reads of stored tensors of at least numel
 * elements that x's kernel would make, up to REPEAT_MIN_READS of them: a
 * read is a stored node, or a view of one (a conv's col2im reads 9 views of
 * its column gradient: 9 reads; x * x reads x once). */
static void cone_reads(const sched *s, const graph_node *x, int64_t numel, int *walk,
                       const graph_node **seen, int *n) {
    if (x->op == GRAPH_CONST || *n >= REPEAT_MIN_READS || --*walk < 0)
        return;
    const graph_node *base = x;
    while (base->op == GRAPH_VIEW && !stored_here(s, base))
        base = base->src[0];
    if (stored_here(s, base)) {
        for (int i = 0; i < *n; i++)
            if (seen[i] == x)
                return;
        if (graph_numel(base) >= numel)
            seen[(*n)++] = x;
        return;
    }
    if (graph_op_is_reduce(x->op))
        return;
    for (int i = 0; i < x->nsrc; i++)
        cone_reads(s, x->src[i], numel, walk, seen, n);
}

static void boundary_repeated_work(sched *s) {
    for (int64_t i = 0; i < s->count; i++) {
        graph_node *v = s->order[i];
        if (v->op != GRAPH_VIEW || !sched_pending(v))
            continue;
        graph_node *x = v->src[0];
        if (!sched_pending(x) || x->op == GRAPH_VIEW || graph_op_is_reduce(x->op) ||
            sched_of(s, x)->materialized || graph_numel(v) < 2 * graph_numel(x))
            continue;
        int walk = REPEAT_WALK, n = 0;
        const graph_node *seen[REPEAT_MIN_READS];
        cone_reads(s, x, graph_numel(x), &walk, seen, &n);
        if (n >= REPEAT_MIN_READS)
            sched_of(s, x)->materialized = true;
    }
}

/* A matmul (and fused attention) reads its operands as strides over a buffer: an operand that
 * strides cannot describe is computed first. Reverse post-order, so that a
 * materialised operand is decided before a view of it is examined. */
static void boundary_matmul_operands(sched *s) {
    for (int64_t i = s->count - 1; i >= 0; i--) {
        graph_node *x = s->order[i];
        if (x->op != GRAPH_MATMUL && !graph_op_is_attention(x->op))
            continue;
        for (int j = 0; j < x->nsrc; j++) {
            lower_operand layout;
            graph_node *o = x->src[j];
            if (sched_operand_base(s, o, &layout))
                continue;
            graph_node *base = x->op == GRAPH_MATMUL ? split_base(s, x, j, NULL) : NULL;
            if (base) {
                if (sched_pending(base))
                    sched_of(s, base)->materialized = true;
                continue;
            }
            if (o->op == GRAPH_VIEW && sched_pending(o) && !o->p.view.masked)
                sched_of(s, o->src[0])->materialized = true;
            else
                sched_of(s, o)->materialized = true;
        }
    }
}

/* A materialised reshape costs no kernel: it shares its source's buffer, so
 * the source is materialised instead. */
static void alias_reshapes(sched *s) {
    for (int64_t i = s->count - 1; i >= 0; i--) {
        graph_node *x = s->order[i];
        sched_node *xs = &s->nodes[i];
        if (x->op == GRAPH_VIEW && xs->materialized && graph_view_is_reshape(x)) {
            xs->alias = true;
            if (sched_pending(x->src[0]))
                sched_of(s, x->src[0])->materialized = true;
        }
    }
}

/* ---- what fuses into what ---- */

/* Every node not materialised is computed in the kernel of its consumers:
 * so elementwise chains, broadcasts and views become one kernel, and
 * elementwise producers join the reduction that reads them. Walking from the
 * consumers down, a node whose consumers are in two kernels is marked for
 * refuse_recompute. Leaves, views of leaves and constants join no kernel:
 * every kernel reads them again. */
static void fuse_into_consumers(sched *s) {
    for (int64_t i = 0; i < s->count; i++) {
        sched_node *xs = &s->nodes[i];
        xs->root = NULL;
        xs->split_consumers = false;
        xs->form = SCHED_PLAIN;
    }
    for (int64_t i = s->count - 1; i >= 0; i--) {
        graph_node *x = s->order[i];
        sched_node *xs = &s->nodes[i];
        if (xs->materialized)
            xs->root = x;
        for (int j = 0; j < x->nsrc; j++) {
            sched_node *ss = sched_of(s, x->src[j]);
            if (!ss || cheap(s, x->src[j]))
                continue;
            if (!ss->root)
                ss->root = xs->root;
            else if (ss->root != xs->root)
                ss->split_consumers = true;
        }
    }
}

/* Whether the kernel of root, which reduction x fuses into, is elementwise
 * over x's result rather than over x's source: a mean's division, a
 * variance from two sums. */
static bool over_reduced_result(const graph_node *root, const graph_node *x) {
    return !graph_op_is_reduce(root->op) && !sched_same_shape(root, x->src[0]) &&
           graph_numel(root) == graph_numel(x);
}

/* A reduction joins the elementwise kernel over its result, which then
 * reduces each fused reduction's row per output element first. The
 * reductions of one such kernel reduce the same axes of the same source (the
 * kernel has one reduced index), and none joins a matmul's or a row kernel.
 * Returns whether x fits. */
static bool fuse_reduction_into_elementwise(sched *s, graph_node *x, graph_node *root) {
    sched_node *xs = sched_of(s, x), *rs = sched_of(s, root);
    bool fits = !xs->split_consumers && root->op != GRAPH_MATMUL && rs->form != SCHED_ROWS &&
                (rs->form != SCHED_PER_ELEMENT ||
                 (rs->reduced_axes == x->p.axes && sched_same_shape(rs->reduced_source, x->src[0])));
    if (fits) {
        rs->form = SCHED_PER_ELEMENT;
        rs->reduced_source = x->src[0];
        rs->reduced_axes = x->p.axes;
    }
    return fits;
}

/* A reduction joins a kernel that reads it back over its rows (softmax's max
 * and sum, layer-norm's mean and variance: one kernel each), or a reduction
 * over the same rows (the max inside sum(exp(x - max))): the kernel passes
 * over each row once per fused reduction. It must reduce the same axes of
 * the same shape as the kernel, which must be no matmul's. Returns whether x
 * fits. */
static bool fuse_row_consumers(sched *s, graph_node *x, graph_node *root) {
    sched_node *xs = sched_of(s, x), *rs = sched_of(s, root);
    bool reduce = graph_op_is_reduce(root->op);
    const graph_node *dom = reduce ? root->src[0] : root;
    uint32_t axes = reduce                    ? root->p.axes
                    : rs->form == SCHED_ROWS ? rs->row_axes
                                             : x->p.axes;
    bool fits = !xs->split_consumers && root->op != GRAPH_MATMUL &&
                rs->form != SCHED_PER_ELEMENT && x->p.axes == axes &&
                sched_same_shape(x->src[0], dom);
    if (fits) {
        rs->form = SCHED_ROWS;
        rs->row_axes = axes;
    }
    return fits;
}

/* A node read from two kernels is materialised: recomputing it in each could
 * repeat any amount of work. So is one read twice inside a kernel that
 * computes each element once; inside a row kernel, or one reducing per
 * element, a shared node is recomputed once per pass over the row, which is
 * how softmax and layer-norm become one kernel. Returns whether x must be
 * materialised. */
static bool refuse_recompute(const sched *s, const graph_node *x) {
    const sched_node *xs = sched_of(s, x);
    if (xs->materialized || cheap(s, x) || graph_op_is_reduce(x->op))
        return false;
    /* Read only by cheap nodes (recomputed in each of their kernels, so in
     * no kernel of their own): read once, it is recomputed with its reader;
     * read by several (too big beside its own smaller size to be cheap
     * itself), stored. */
    if (!xs->root)
        return xs->nconsumers > 1;
    return xs->split_consumers ||
           (xs->nconsumers > 1 && sched_of(s, xs->root)->form == SCHED_PLAIN);
}

/* Materialises x, read from several kernels; but for a view at least as
 * large as the computed node it views (a broadcast, a permute), that node:
 * then the view is index arithmetic over its buffer in every consumer
 * (cheap), where materialising the view itself stored a copy of it. */
static void materialise_shared(sched *s, graph_node *x) {
    graph_node *b = x->op == GRAPH_VIEW ? x->src[0] : NULL;
    if (b && b->op != GRAPH_VIEW && sched_pending(b) && !sched_of(s, b)->materialized &&
        graph_numel(x) >= graph_numel(b))
        sched_of(s, b)->materialized = true;
    else
        sched_of(s, x)->materialized = true;
}

/* Decides which kernel every fused node belongs to, and materialises what
 * does not fit where it fell. Returns whether anything new was materialised. */
static bool fuse_kernels(sched *s) {
    fuse_into_consumers(s);
    bool changed = false;
    for (int64_t i = 0; i < s->count; i++) {
        graph_node *x = s->order[i];
        sched_node *xs = &s->nodes[i];
        if (xs->materialized || !graph_op_is_reduce(x->op))
            continue;
        /* A scatter kernel's passes run over a row's places and its source
         * elements, neither of which is a reduction's row. */
        bool fits = !xs->root || xs->root->op == GRAPH_SCATTER ? false
                    : over_reduced_result(xs->root, x)
                        ? fuse_reduction_into_elementwise(s, x, xs->root)
                        : fuse_row_consumers(s, x, xs->root);
        if (!fits)
            xs->materialized = changed = true;
    }
    for (int64_t i = 0; i < s->count; i++)
        if (refuse_recompute(s, s->order[i])) {
            materialise_shared(s, s->order[i]);
            changed = true;
        }
    return changed;
}

/* Applies the rules that depend on other nodes' decisions until none
 * materialises anything more. */
static void settle(sched *s) {
    do {
        boundary_matmul_operands(s);
        alias_reshapes(s);
    } while (fuse_kernels(s));
}

/* A matmul's bias and activation are computed on each finished dot product,
 * inside the matmul's kernel, instead of a second pass over its output: when
 * the matmul's one consumer is elementwise and every node from it up to its
 * kernel's root is elementwise (or a reshape) over as many elements, so that
 * each output element reads the dot product at its own flat index. Fused
 * nodes outside row kernels have one consumer each, so that path is unique. */
static void fuse_matmul_epilogue(sched *s, graph_node *m) {
    sched_node *ms = sched_of(s, m);
    if (ms->requested || ms->nconsumers != 1)
        return;
    graph_node *root = sched_of(s, ms->last_consumer)->root;
    sched_node *rs = root ? sched_of(s, root) : NULL;
    if (!rs || rs->form != SCHED_PLAIN || rs->epilogue_of || rs->alias)
        return;
    for (graph_node *x = ms->last_consumer;; x = sched_of(s, x)->last_consumer) {
        const sched_node *xs = sched_of(s, x);
        /* a reshape keeps the flat index: conv2d's bias over its matmul */
        bool reshape = x->op == GRAPH_VIEW && graph_view_is_reshape(x);
        if (!(sched_elementwise(x) || reshape) || graph_numel(x) != graph_numel(m) ||
            xs->root != root)
            return;
        if (x == root)
            break;
        if (xs->nconsumers != 1 || xs->materialized)
            return;
    }
    ms->materialized = false;
    ms->root = root;
    rs->epilogue_of = m;
}

/* ---- sibling kernels ---- */

/* A kernel's read from outside itself: base is materialised or a leaf, read
 * at the kernel's own element index everywhere when at_own_index. */
typedef struct outside_read {
    graph_node *base;
    bool at_own_index;
} outside_read;

/* The sibling pass's own state of one node, freed when the pass ends. */
typedef struct sibling_node {
    bool at_root_index;    /* computed at its kernel root's own element index */
    outside_read *reads;   /* as a root: what its kernel reads from outside */
    int nreads, reads_cap;
    graph_node **readers;  /* as a materialised node: the roots whose kernels read it */
    int nreaders, readers_cap;
} sibling_node;

typedef struct siblings {
    sched *s;
    sibling_node *nodes; /* indexed as s->nodes */
} siblings;

static sibling_node *sib_of(const siblings *g, const graph_node *n) {
    return &g->nodes[sched_pos(g->s, n)];
}

static graph_node *root_of(const sched *s, graph_node *x) {
    const sched_node *xs = sched_of(s, x);
    return xs->materialized ? x : xs->root;
}

static bool add_read(sibling_node *r, graph_node *base, bool at_own_index) {
    for (int i = 0; i < r->nreads; i++)
        if (r->reads[i].base == base) {
            r->reads[i].at_own_index = r->reads[i].at_own_index && at_own_index;
            return true;
        }
    if (r->nreads == r->reads_cap) {
        int cap = r->reads_cap ? r->reads_cap * 2 : 4;
        outside_read *e = realloc(r->reads, sizeof *e * (size_t)cap);
        if (!e)
            return false;
        r->reads = e;
        r->reads_cap = cap;
    }
    r->reads[r->nreads++] = (outside_read){base, at_own_index};
    return true;
}

static bool add_reader(sibling_node *b, graph_node *r) {
    if (b->nreaders && b->readers[b->nreaders - 1] == r)
        return true;
    if (b->nreaders == b->readers_cap) {
        int cap = b->readers_cap ? b->readers_cap * 2 : 4;
        graph_node **rd = realloc(b->readers, sizeof *rd * (size_t)cap);
        if (!rd)
            return false;
        b->readers = rd;
        b->readers_cap = cap;
    }
    b->readers[b->nreaders++] = r;
    return true;
}

/* Records what root r reads from outside its kernel through n, a cheap
 * source (cheap): n itself where it is stored or a leaf, else what the
 * views, identities and cheap ops below it read; at r's own index while
 * no view lies between. */
static bool add_cone_reads(siblings *g, graph_node *r, graph_node *n, bool own) {
    const sched *s = g->s;
    if (sched_pending(n) && !sched_of(s, n)->materialized && n->op != GRAPH_CONST) {
        for (int i = 0; i < n->nsrc; i++)
            if (!add_cone_reads(g, r, n->src[i], own && n->op != GRAPH_VIEW))
                return false;
        return true;
    }
    if (!add_read(sib_of(g, r), n, own))
        return false;
    return !sched_pending(n) || add_reader(sib_of(g, n), r);
}

/* Fills each root's outside reads and each materialised node's readers;
 * false when out of memory. */
static bool find_reads(siblings *g) {
    sched *s = g->s;
    for (int64_t i = s->count - 1; i >= 0; i--) {
        const sched_node *xs = &s->nodes[i];
        graph_node *c = xs->last_consumer;
        g->nodes[i].at_root_index =
            xs->materialized || (xs->root && xs->nconsumers == 1 && sib_of(g, c)->at_root_index &&
                                 sched_elementwise(c));
    }
    for (int64_t i = 0; i < s->count; i++) {
        graph_node *x = s->order[i];
        graph_node *r = root_of(s, x);
        if (!r || (cheap(s, x) && !s->nodes[i].materialized))
            continue;
        for (int j = 0; j < x->nsrc; j++) {
            graph_node *src = x->src[j];
            if (sched_pending(src) && !sched_of(s, src)->materialized && !cheap(s, src))
                continue; /* fused into the same kernel */
            if (!add_cone_reads(g, r, src, g->nodes[i].at_root_index && sched_elementwise(x)))
                return false;
        }
    }
    return true;
}

static bool sibling_candidate(const sched *s, const graph_node *x) {
    const sched_node *xs = sched_of(s, x);
    return xs->materialized && !xs->alias && xs->form == SCHED_PLAIN && !xs->epilogue_of &&
           sched_elementwise(x);
}

/* Whether r reads a member of group gid: then r's kernel computes the
 * member's value anyway (at r's own index, can_join sees to it), and with
 * the member as one more output of that kernel the value is stored once and
 * never read back. AdamW's new p reads the new m and v: as three kernels
 * an update made 10 passes over the parameter's size (the gradient read
 * twice, m and v read back), as one kernel it makes 7 (m, v, p and the
 * gradient read once; m, v and p written). */
static bool reads_member(const siblings *g, graph_node *r, int gid) {
    const sibling_node *rg = sib_of(g, r);
    for (int i = 0; i < rg->nreads; i++) {
        graph_node *b = rg->reads[i].base;
        if (sched_pending(b) && sched_of(g->s, b)->sibling_group == gid)
            return true;
    }
    return false;
}

/* Whether r reads something from memory that a member m[0..n) reads too, so
 * that one kernel reads it once. A constant is an immediate, no read: every
 * Adam update multiplies by the same beta1, and counting that as sharing
 * grouped unrelated parameters' updates up to MAX_MEMBERS, which then split
 * a parameter's new p from the m and v it reads (an MLP's three 64-element
 * parameters ran as an 8-output kernel and a 1-output one re-reading two of
 * them). */
static bool shares_input(const siblings *g, graph_node *r, graph_node **m, int n) {
    const sibling_node *rg = sib_of(g, r);
    for (int i = 0; i < rg->nreads; i++) {
        graph_node *b = rg->reads[i].base;
        if (b->op == GRAPH_CONST)
            continue;
        for (int k = 0; k < n; k++) {
            const sibling_node *mg = sib_of(g, m[k]);
            for (int e = 0; e < mg->nreads; e++)
                if (mg->reads[e].base == b)
                    return true;
        }
    }
    return false;
}

/* Whether r can join the group whose members are m[0..n): it reads members
 * only at its own element index (a member is computed in the group's
 * kernel at that index only), and it shares something with them worth
 * sharing: a member's value, or an input. */
static bool can_join(const siblings *g, graph_node *r, graph_node **m, int n, int gid) {
    const sibling_node *rg = sib_of(g, r);
    for (int i = 0; i < rg->nreads; i++) {
        graph_node *b = rg->reads[i].base;
        if (sched_pending(b) && sched_of(g->s, b)->sibling_group == gid &&
            !rg->reads[i].at_own_index)
            return false;
    }
    return reads_member(g, r, gid) || shares_input(g, r, m, n);
}

/* Whether every kernel outside the group that reads a member runs after r:
 * the group's kernel runs where its last member is. */
static bool readers_after(const siblings *g, graph_node *r, graph_node **m, int n, int gid) {
    int64_t rpos = sched_pos(g->s, r);
    for (int k = 0; k < n; k++) {
        const sibling_node *mg = sib_of(g, m[k]);
        for (int i = 0; i < mg->nreaders; i++) {
            graph_node *reader = mg->readers[i];
            if (sched_of(g->s, reader)->sibling_group != gid && reader != r &&
                sched_pos(g->s, reader) < rpos)
                return false;
        }
    }
    return true;
}

/* Groups elementwise kernels of one shape that share inputs, or read one
 * another at their own index, into multi-output kernels, greedily in
 * post-order; a few recent groups are tried, which bounds the cost on large
 * graphs. */
static bool group_siblings(siblings *g) {
    sched *s = g->s;
    if (!find_reads(g))
        return false;
    enum { RECENT = 8, MAX_MEMBERS = 8 };
    graph_node *members[RECENT][MAX_MEMBERS];
    int nmembers[RECENT] = {0}, gids[RECENT], ngroups = 0, next_gid = 0;
    for (int64_t i = 0; i < s->count; i++) {
        graph_node *r = s->order[i];
        if (!sibling_candidate(s, r))
            continue;
        /* A group whose member r reads comes first (reads_member): joining
         * another would leave r reading that member back from memory. */
        int joined = -1;
        for (int pass = 0; pass < 2 && joined < 0; pass++)
            for (int k = 0; k < ngroups && joined < 0; k++) {
                graph_node *first = members[k][0];
                if (nmembers[k] == MAX_MEMBERS || !sched_same_shape(first, r) ||
                    (pass == 0 && !reads_member(g, r, gids[k])))
                    continue;
                if (can_join(g, r, members[k], nmembers[k], gids[k]) &&
                    readers_after(g, r, members[k], nmembers[k], gids[k]))
                    joined = k;
            }
        if (joined < 0) {
            if (ngroups == RECENT) {
                memmove(&members[0], &members[1], sizeof members[0] * (RECENT - 1));
                memmove(&nmembers[0], &nmembers[1], sizeof nmembers[0] * (RECENT - 1));
                memmove(&gids[0], &gids[1], sizeof gids[0] * (RECENT - 1));
                ngroups--;
            }
            joined = ngroups++;
            nmembers[joined] = 0;
            gids[joined] = next_gid++;
        }
        members[joined][nmembers[joined]++] = r;
        s->nodes[i].sibling_group = gids[joined];
    }
    /* Groups of one are no groups; the last member lowers the others. */
    int *size = calloc((size_t)next_gid + 1, sizeof *size);
    if (!size)
        return false;
    for (int64_t i = 0; i < s->count; i++)
        if (s->nodes[i].sibling_group >= 0)
            size[s->nodes[i].sibling_group]++;
    for (int64_t i = s->count - 1; i >= 0; i--) {
        sched_node *xs = &s->nodes[i];
        if (xs->sibling_group < 0)
            continue;
        if (size[xs->sibling_group] == 1) {
            xs->sibling_group = -1;
            continue;
        }
        xs->lowers_group = size[xs->sibling_group] > 0;
        if (xs->lowers_group)
            size[xs->sibling_group] = -size[xs->sibling_group];
    }
    free(size);
    return true;
}

/* A member that no one requested and nothing outside its group reads is
 * computed in the group's kernel, for the members that read it, and stored
 * nowhere: it was materialised because two kernels read it
 * (refuse_recompute), and they are one kernel now. An Adam gradient with
 * weight decay added (g + wd p), or a clipped one, is read by both moments:
 * their kernel wrote it as a fourth array it never read back. Never the
 * member that lowers the group, which someone after it reads. */
static void unstored_members(siblings *g) {
    sched *s = g->s;
    for (int64_t i = 0; i < s->count; i++) {
        sched_node *xs = &s->nodes[i];
        if (xs->sibling_group < 0 || xs->requested || xs->lowers_group)
            continue;
        const sibling_node *xg = &g->nodes[i];
        bool inside = xg->nreaders > 0;
        for (int r = 0; r < xg->nreaders && inside; r++)
            inside = sched_of(s, xg->readers[r])->sibling_group == xs->sibling_group;
        xs->unstored = inside;
    }
}

/* A view over memory (a materialised node or a leaf, through views only)
 * that it was a kernel of its own to copy, because two kernels read it
 * (refuse_recompute), is read in place again when those kernels are one
 * group now: the group's kernel reads the view's strides once, where the
 * copy read them, wrote the copy, and the group read it back. A linear
 * layer's weight gradient is the transpose of a matmul's output, which both
 * of Adam's moments read: a copy kernel per weight, before its update. */
static void views_read_in_place(siblings *g) {
    sched *s = g->s;
    for (int64_t i = 0; i < s->count; i++) {
        graph_node *x = s->order[i];
        sched_node *xs = &s->nodes[i];
        if (x->op != GRAPH_VIEW || !xs->materialized || xs->alias || xs->requested)
            continue;
        const graph_node *base = x->src[0];
        while (base->op == GRAPH_VIEW && sched_pending(base) && !sched_of(s, base)->materialized)
            base = base->src[0];
        if (sched_pending(base) && !sched_of(s, base)->materialized)
            continue;
        const sibling_node *xg = &g->nodes[i];
        int gid = xg->nreaders > 0 ? sched_of(s, xg->readers[0])->sibling_group : -1;
        bool inside = gid >= 0;
        for (int r = 1; r < xg->nreaders && inside; r++)
            inside = sched_of(s, xg->readers[r])->sibling_group == gid;
        if (inside)
            xs->materialized = false;
    }
}

/* Elementwise kernels over one shape that read the same inputs become one
 * kernel with several outputs, which reads each input once. Siblings only
 * save work: without memory for them, kernels stay single. */
static void fuse_siblings(sched *s) {
    siblings g = {s, calloc((size_t)(s->count ? s->count : 1), sizeof *g.nodes)};
    if (g.nodes && group_siblings(&g)) {
        unstored_members(&g);
        views_read_in_place(&g);
    }
    else
        for (int64_t i = 0; i < s->count; i++)
            s->nodes[i].sibling_group = -1;
    for (int64_t i = 0; g.nodes && i < s->count; i++) {
        free(g.nodes[i].reads);
        free(g.nodes[i].readers);
    }
    free(g.nodes);
}

void sched_fuse(sched *s, int n, graph_node *const *targets, bool fuse) {
    boundary_requested(s, n, targets);
    for (int64_t i = 0; i < s->count; i++)
        if (boundary_op(s->order[i], fuse))
            s->nodes[i].materialized = true;
    boundary_collective_sources(s);
    boundary_gather_sources(s);
    if (fuse)
        boundary_repeated_work(s);
    settle(s);
    if (!fuse)
        return;
    for (int64_t i = 0; i < s->count; i++)
        if (s->order[i]->op == GRAPH_MATMUL)
            fuse_matmul_epilogue(s, s->order[i]);
    fuse_siblings(s);
}

bool sched_unfuse(sched *s, graph_node *x) {
    sched_node *xs = sched_of(s, x);
    if (xs->materialized)
        return false;
    xs->materialized = true;
    /* x's new kernel may read what only x's old one did: every member is
     * stored again. */
    for (int64_t i = 0; i < s->count; i++) {
        s->nodes[i].unstored = false;
        if (s->nodes[i].epilogue_of == x)
            s->nodes[i].epilogue_of = NULL;
    }
    settle(s);
    return true;
}
