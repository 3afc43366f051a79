/* stores.c — where a joint attention backward stores its values.
 *
 * The gradient of a fused qkv projection ([b, t, 3c] read as three heads'
 * [b, h, t, d] through slices, reshapes and permutes) is a cat of three
 * views of the attention backward's dk, dv and dq (autograd/backward.c joins
 * the three pads into it). Stored the plain way, the joint kernel writes dkv
 * and dq row-major and the cat's three region kernels copy them into place:
 * pure copies, 3 per layer of a GPT-2 step. Where the cat is the only reader
 * of dk, dv and dq, every view between them is a bijection onto a box of its
 * source (no mask, no broadcast, no flip) and each piece lands in the cat at
 * stride 1 along its columns, the kernel stores each piece straight into its
 * region instead (lower_attention.store), through the strides the views
 * compose to (a masked view among them only where what is read lies inside
 * its mask); dkv and dq then have no buffer at all.
 *
 * Likewise the forward's output o, permuted back from heads ([b, h, t, d]
 * read as [b, t, h d]) for the out-projection, whose operand strides cannot
 * read it so: a view materialised only to copy it. The forward kernel
 * stores o there too, as a second output, and the copy's kernel is gone
 * (its own output keeps o and lse for the backward's readers). */
#include <string.h>

#include "lower/sched.h"

/* Where a box of a node's elements goes in the cat's buffer: element x of
 * the box [lo, hi) is at `at` + sum (x[a] - lo[a]) * stride[a]. */
typedef struct placement {
    int64_t lo[KILN_MAX_DIMS], hi[KILN_MAX_DIMS], stride[KILN_MAX_DIMS];
    int64_t at;
} placement;

/* x's elements placed in a buffer of x's own shape, row-major, from `at`. */
static void whole(placement *p, const graph_node *x, int64_t at) {
    int64_t numel = 1;
    for (int a = x->ndim - 1; a >= 0; a--) {
        p->lo[a] = 0;
        p->hi[a] = x->shape[a];
        p->stride[a] = numel;
        numel *= x->shape[a];
    }
    p->at = at;
}

/* The placement of view v's source elements that v's box reads, from v's
 * own: false where v does not read its box one-to-one from a box of its
 * source with a stride per source axis. v's view maps its element i to the
 * source's flat index offset + sum i[e] * vs[e]; the source is row-major.
 * Each axis of v's box is a digit of that flat index: taken in order of
 * stride, the digits falling in one source axis must be that axis's own
 * mixed radix (strides 1, n1, n1 n2, ... of it), and their places in the
 * cat must nest the same way; the axis then has one stride there. */
static bool through_view(const graph_node *v, const placement *in, placement *out) {
    const graph_view *w = &v->p.view;
    const graph_node *src = v->src[0];
    for (int e = 0; w->masked && e < v->ndim; e++) /* a mask the box lies within is none */
        if (in->lo[e] < w->mask_lo[e] || in->hi[e] > w->mask_hi[e])
            return false;
    int64_t off = w->offset, ws[KILN_MAX_DIMS], ext[KILN_MAX_DIMS], numel = 1;
    for (int e = 0; e < v->ndim; e++)
        off += in->lo[e] * w->strides[e];
    for (int a = src->ndim - 1; a >= 0; a--) {
        ws[a] = numel;
        numel *= src->shape[a];
    }
    if (off < 0 || off >= numel)
        return false;
    for (int a = 0; a < src->ndim; a++) {
        out->lo[a] = off / ws[a] % src->shape[a];
        out->stride[a] = 0;
        ext[a] = 1;
    }
    out->at = in->at;
    bool used[KILN_MAX_DIMS] = {false};
    for (;;) {
        int e = -1;
        for (int f = 0; f < v->ndim; f++)
            if (!used[f] && in->hi[f] - in->lo[f] > 1 &&
                (e < 0 || w->strides[f] < w->strides[e]))
                e = f;
        if (e < 0)
            break;
        used[e] = true;
        int64_t vs = w->strides[e], n = in->hi[e] - in->lo[e], cst = in->stride[e];
        int a = src->ndim - 1;
        while (a >= 0 && !(vs >= ws[a] && vs < ws[a] * src->shape[a]))
            a--;
        if (vs <= 0 || a < 0 || vs % ws[a] || vs / ws[a] != ext[a])
            return false;
        /* a digit that runs past its axis (a reshape's merged axes) goes on
         * as the next axes' first digit, where it fills them from 0 */
        while (n > 1) {
            int64_t take = n;
            if (ext[a] * n > src->shape[a] - out->lo[a]) {
                if (out->lo[a] || src->shape[a] % ext[a] || n % (src->shape[a] / ext[a]))
                    return false;
                take = src->shape[a] / ext[a];
            }
            if (ext[a] == 1)
                out->stride[a] = cst;
            else if (cst != out->stride[a] * ext[a])
                return false;
            ext[a] *= take;
            n /= take;
            cst *= take;
            for (a--; a >= 0 && src->shape[a] == 1; a--)
                ;
            if (n > 1 && (a < 0 || ext[a] != 1))
                return false;
        }
    }
    for (int a = 0; a < src->ndim; a++)
        out->hi[a] = out->lo[a] + ext[a];
    return true;
}

/* The node below a chain of views from cat source v, read by nothing else
 * on the way, with the placement of its elements that the chain reads; NULL
 * where the chain is not one-to-one or something else reads a view in it. */
static graph_node *chain_base(const sched *s, graph_node *v, placement *p) {
    while (v->op == GRAPH_VIEW) {
        const sched_node *vs = sched_of(s, v);
        placement below;
        if (!vs || vs->materialized || vs->requested || vs->nconsumers != 1 ||
            !through_view(v, p, &below))
            return NULL;
        *p = below;
        v = v->src[0];
    }
    return v;
}

/* Piece `at` of an attention output x ([..., R, W]) from a placement of its
 * columns [c0, c0 + width): every batch and row, columns at stride 1. */
static bool piece(const graph_node *x, const placement *p, int64_t c0, int64_t width,
                  lower_operand *at) {
    int nd = x->ndim;
    for (int a = 0; a < nd - 1; a++)
        if (p->lo[a] != 0 || p->hi[a] != x->shape[a])
            return false;
    if (p->lo[nd - 1] > c0 || p->hi[nd - 1] < c0 + width || (p->stride[nd - 1] != 1 && width > 1))
        return false;
    memset(at, 0, sizeof *at);
    at->offset = p->at + (c0 - p->lo[nd - 1]);
    for (int d = 0; d < nd - 2; d++)
        at->batch_strides[d] = p->stride[d];
    at->row_stride = p->stride[nd - 2];
    at->col_stride = 1;
    return true;
}

bool sched_cat_attention_stores(const sched *s, const graph_node *x, graph_node **dkv,
                                graph_node **dq, lower_operand store[3]) {
    const sched_node *xs = sched_of(s, x);
    if (!s->joint_attention || x->op != GRAPH_CAT || x->nsrc < 2 || !xs || !xs->materialized ||
        xs->alias || xs->form != SCHED_PLAIN || xs->sibling_group >= 0 || xs->epilogue_of)
        return false;
    *dkv = *dq = NULL;
    bool have[3] = {false, false, false};
    int reads_dkv = 0, reads_dq = 0; /* chains ending at each */
    placement cat;
    whole(&cat, x, 0);
    int64_t lo = 0;
    for (int j = 0; j < x->nsrc; j++) {
        graph_node *v = x->src[j];
        /* source j: the cat's strides over its own shape, from its region */
        placement p = cat;
        for (int a = 0; a < v->ndim; a++)
            p.hi[a] = v->shape[a];
        p.at = lo * cat.stride[x->p.axis];
        lo += v->shape[x->p.axis];
        graph_node *base = chain_base(s, v, &p);
        const sched_node *bs = base ? sched_of(s, base) : NULL;
        if (!bs || !bs->materialized || bs->requested || bs->alias || base->dtype != x->dtype)
            return false;
        graph_node **slot = base->op == GRAPH_ATTENTION_DKV ? dkv
                            : base->op == GRAPH_ATTENTION_DQ ? dq : NULL;
        if (!slot || (*slot && *slot != base))
            return false;
        *slot = base;
        int64_t d = base->src[0]->shape[base->ndim - 1], width = base->shape[base->ndim - 1];
        /* dk: columns [0, d) of dkv; dv: [d, width); dq: all of its d */
        int first = base->op == GRAPH_ATTENTION_DQ ? 2 : p.lo[base->ndim - 1] == 0 ? 0 : 1;
        int last = base->op == GRAPH_ATTENTION_DQ ? 2 : p.hi[base->ndim - 1] == width ? 1 : 0;
        if (first > last)
            return false;
        for (int q = first; q <= last; q++) {
            int64_t c0 = q == 1 ? d : 0, w = q == 1 ? width - d : d;
            if (have[q] || !piece(base, &p, c0, w, &store[q]))
                return false;
            have[q] = true;
        }
        /* the chain's box holds exactly its pieces' columns */
        if (p.lo[base->ndim - 1] != (first == 1 ? d : 0) ||
            p.hi[base->ndim - 1] != (last == 0 ? d : width))
            return false;
        *(slot == dkv ? &reads_dkv : &reads_dq) += 1;
    }
    if (!have[0] || !have[1] || !have[2] || sched_of(s, *dkv)->nconsumers != reads_dkv ||
        sched_of(s, *dq)->nconsumers != reads_dq)
        return false;
    int64_t partner = sched_attention_partner(s, sched_pos(s, *dkv));
    return partner >= 0 && s->order[partner] == *dq;
}

bool sched_view_attention_copy(const sched *s, const graph_node *x, graph_node **att,
                               lower_operand *store) {
    const sched_node *xs = sched_of(s, x);
    if (x->op != GRAPH_VIEW || !xs || !xs->materialized || xs->alias ||
        xs->form != SCHED_PLAIN || xs->sibling_group >= 0 || xs->epilogue_of)
        return false;
    placement p, below;
    whole(&p, x, 0);
    /* x itself is the copy; the views below it are read by it alone */
    if (!through_view(x, &p, &below))
        return false;
    graph_node *base = chain_base(s, x->src[0], &below);
    const sched_node *bs = base ? sched_of(s, base) : NULL;
    if (!bs || !bs->materialized || bs->alias || bs->sibling_group >= 0 ||
        base->op != GRAPH_ATTENTION || base->dtype != x->dtype)
        return false;
    /* o: columns [0, dv) of the forward's [..., L, Dv + 1] */
    int64_t dv = base->shape[base->ndim - 1] - 1;
    if (below.lo[base->ndim - 1] != 0 || below.hi[base->ndim - 1] != dv ||
        !piece(base, &below, 0, dv, store))
        return false;
    store->buf = 1;
    *att = base;
    return true;
}

void sched_attention_own_piece(const graph_node *x, int buf, int64_t c0, lower_operand *at) {
    placement p;
    whole(&p, x, 0);
    piece(x, &p, c0, x->shape[x->ndim - 1] - c0, at);
    at->buf = buf;
}
