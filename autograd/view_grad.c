/* view_grad.c — the gradient of a view: the transpose of its index map. A
 * view reads element i of its shape from flat element offset + sum(i*stride)
 * of its source inside its mask, so the source's gradient scatters g back:
 * the masked-off border is cut away, broadcast (stride 0) axes are summed,
 * reversed axes flipped, the axes sorted by stride, and the elements spread
 * over the source's flat range by padding each axis to its stride. Views that
 * a chain of permutes, slices, reshapes, expands, pads and flips can make are
 * all of this form. A view whose axes overlap (sliding windows, graph_unfold)
 * is split: the fewest index combinations of some of its axes (a
 * convolution's kernel taps) are taken one at a time, each a view that reads
 * every source element at most once, and their gradients are added. */
#include <string.h>

#include "autograd/internal.h"

static graph_node *zeros_like_src(const graph_node *v) { return autograd_full(v->src[0], 0); }

static graph_node *take_slice_axis(graph_node *a, int axis, int64_t start, int64_t len) {
    if (!a)
        return NULL;
    int64_t st[KILN_MAX_DIMS] = {0}, step[KILN_MAX_DIMS], ln[KILN_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) {
        step[d] = 1;
        ln[d] = a->shape[d];
    }
    st[axis] = start;
    ln[axis] = len;
    graph_node *r = graph_slice(a, st, step, ln);
    graph_unref(a);
    return r;
}

static graph_node *take_pad_axis(graph_node *a, int axis, int64_t before, int64_t after) {
    if (!a)
        return NULL;
    int64_t lo[KILN_MAX_DIMS] = {0}, hi[KILN_MAX_DIMS] = {0};
    lo[axis] = before;
    hi[axis] = after;
    graph_node *r = graph_pad(a, lo, hi);
    graph_unref(a);
    return r;
}

/* Past this many index combinations an overlapping view is refused: each
 * is one term of the gradient's sum, one load per source element. */
#define VIEW_UNROLL_MAX 4096

/* Whether the axes in the bit mask `axes` step past everything inside each
 * other when sorted by stride: then no two elements of the view that they
 * span read one source element. */
static bool disjoint(const graph_node *g, const int64_t *stride, uint32_t axes) {
    int64_t st[KILN_MAX_DIMS], n[KILN_MAX_DIMS];
    int m = 0;
    for (int d = 0; d < g->ndim; d++) {
        if (!(axes & (1u << d)))
            continue;
        int k = m++;
        for (; k > 0 && st[k - 1] < stride[d]; k--) {
            st[k] = st[k - 1];
            n[k] = n[k - 1];
        }
        st[k] = stride[d];
        n[k] = g->shape[d];
    }
    int64_t extent = 1;
    for (int k = m - 1; k >= 0; k--) {
        if (st[k] < extent)
            return false;
        extent += (n[k] - 1) * st[k];
    }
    return true;
}

/* Whether each of the m axes (sizes n, strides st, sorted outermost first)
 * steps along its own axis of s (read as contiguous) by a multiple of that
 * axis's stride and stays inside it, starting from off's coordinates; then
 * axis_of[k] is axis k's axis of s. */
static bool per_axis(int m, const int64_t *n, const int64_t *st, int64_t off, int r,
                     const int64_t *shape, int *axis_of) {
    int prev = -1;
    int64_t cs[KILN_MAX_DIMS], c = 1;
    for (int a = r - 1; a >= 0; a--) {
        cs[a] = c;
        c *= shape[a];
    }
    for (int k = 0; k < m; k++) {
        int a = prev + 1;
        while (a < r && (shape[a] == 1 || cs[a] > st[k]))
            a++;
        if (a == r || st[k] % cs[a])
            return false;
        int64_t o = off / cs[a] % shape[a];
        if (o + (n[k] - 1) * (st[k] / cs[a]) >= shape[a])
            return false;
        if (st[k] != cs[a] && r == KILN_MAX_DIMS) /* no room to split the axis */
            return false;
        axis_of[k] = prev = a;
    }
    return true;
}

/* spread for views that per_axis accepts: g [n...] (consumed) moved onto
 * its axes of s, spread by zeros along those it steps by more than one, and
 * padded per axis to s's shape. With unit steps that is one view with
 * per-axis masks, which a kernel reads with one load; the flat spread's
 * merges of padded axes are views of views, each a division to recover
 * coordinates. */
static graph_node *spread_per_axis(graph_node *g, int m, const int64_t *n, const int64_t *st,
                                   int64_t off, int r, const int64_t *sshape,
                                   const int *axis_of) {
    int64_t cs[KILN_MAX_DIMS], c = 1, shape[KILN_MAX_DIMS], lo[KILN_MAX_DIMS], hi[KILN_MAX_DIMS];
    for (int a = r - 1; a >= 0; a--) {
        cs[a] = c;
        c *= sshape[a];
        shape[a] = 1;
    }
    for (int k = 0; k < m; k++)
        shape[axis_of[k]] = n[k];
    g = autograd_take_reshape(g, r, shape);
    for (int k = 0; k < m && g; k++) {
        int a = axis_of[k];
        int64_t step = st[k] / cs[a];
        if (step == 1)
            continue;
        int64_t split[KILN_MAX_DIMS + 1];
        memcpy(split, shape, sizeof(int64_t) * (size_t)(a + 1));
        split[a + 1] = 1;
        memcpy(split + a + 2, shape + a + 1, sizeof(int64_t) * (size_t)(r - a - 1));
        g = take_pad_axis(autograd_take_reshape(g, r + 1, split), a + 1, 0, step - 1);
        shape[a] = n[k] * step;
        g = take_slice_axis(autograd_take_reshape(g, r, shape), a, 0, (n[k] - 1) * step + 1);
        shape[a] = (n[k] - 1) * step + 1;
    }
    if (!g)
        return NULL;
    for (int a = 0; a < r; a++) {
        lo[a] = off / cs[a] % sshape[a];
        hi[a] = sshape[a] - lo[a] - shape[a];
    }
    graph_node *p = graph_pad(g, lo, hi);
    graph_unref(g);
    return p;
}

/* g (consumed) scattered over s's flat elements: g's element i goes to
 * off + sum(i*stride), strides >= 0 and disjoint over g's axes of size
 * above 1. */
static graph_node *spread(graph_node *g, const int64_t *stride, int64_t off,
                          const graph_node *s) {
    int nd = g->ndim;
    int64_t base = graph_numel(s);
    int keep[KILN_MAX_DIMS], m = 0;
    for (int d = 0; d < nd; d++)
        if (g->shape[d] != 1)
            keep[m++] = d;
    /* Outermost (largest stride) first: insertion sort, stable. */
    for (int i = 1; i < m; i++)
        for (int k = i; k > 0 && stride[keep[k - 1]] < stride[keep[k]]; k--) {
            int t = keep[k];
            keep[k] = keep[k - 1];
            keep[k - 1] = t;
        }
    int perm[KILN_MAX_DIMS], np = 0;
    for (int i = 0; i < m; i++)
        perm[np++] = keep[i];
    for (int d = 0; d < nd; d++)
        if (g->shape[d] == 1)
            perm[np++] = d;
    int64_t n[KILN_MAX_DIMS + 1], st[KILN_MAX_DIMS];
    for (int i = 0; i < m; i++) {
        n[i] = g->shape[keep[i]];
        st[i] = stride[keep[i]];
    }
    graph_node *p = graph_permute(g, perm);
    graph_unref(g);
    g = autograd_take_reshape(p, m, n);
    /* g's axes with those that read one run together (an axis's stride the
     * extent of the next) merged: mn, mst. */
    int64_t mn[KILN_MAX_DIMS], mst[KILN_MAX_DIMS];
    int nm = 0;
    for (int k = 0; k < m; k++) {
        if (nm > 0 && mst[nm - 1] == st[k] * n[k]) {
            mn[nm - 1] *= n[k];
            mst[nm - 1] = st[k];
        } else {
            mn[nm] = n[k];
            mst[nm++] = st[k];
        }
    }
    /* A view that reads its whole source once in order (one run from the
     * first element) only needs reshaping. */
    int64_t count = 1;
    for (int i = 0; i < m; i++)
        count *= n[i];
    bool dense = off == 0 && count == base && (nm == 0 || (nm == 1 && mst[0] == 1));
    if (dense || !g)
        return autograd_take_reshape(g, s->ndim, s->shape);
    int axis_of[KILN_MAX_DIMS];
    if (per_axis(m, n, st, off, s->ndim, s->shape, axis_of))
        return spread_per_axis(g, m, n, st, off, s->ndim, s->shape, axis_of);
    /* Where per_axis refuses g's own axes: the merged ones. Heads split
     * from a projection's features ([b, s, h*d] read as [b, h, s, d]) put
     * two axes on one axis of s, and the flat spread below is views of
     * views, a division per coordinate, where one masked view is one load.
     * Only here: merging axes of a g that is itself a transposed view makes
     * a reshape no view expresses (a conv weight's gradient, [144, 32] read
     * as [32, 144], then took a strided reduction of its own, 0.12 -> 0.84
     * ms a CNN step). Then, where an axis spans several axes of s (rows
     * [b*s] of a [b, s, f]), s is read as one axis per stride of g's (where
     * those strides nest) and reshaped back: one masked view where that
     * reshape splits only unmasked axes (the heads' case: rows whole,
     * features masked), else the view of a view the flat spread makes too. */
    if (nm < m && per_axis(nm, mn, mst, off, s->ndim, s->shape, axis_of))
        return spread_per_axis(autograd_take_reshape(g, nm, mn), nm, mn, mst, off, s->ndim,
                               s->shape, axis_of);
    int64_t coarse[KILN_MAX_DIMS];
    int r = 0;
    bool nests = nm > 0 && mst[0] > 0 && base % mst[0] == 0;
    for (int k = 0; nests && k < nm; k++) {
        int64_t outer = k == 0 ? base : mst[k - 1];
        nests = mst[k] > 0 && outer % mst[k] == 0;
        if (nests)
            coarse[r++] = outer / mst[k];
    }
    if (nests && mst[nm - 1] > 1) {
        if (r < KILN_MAX_DIMS)
            coarse[r++] = mst[nm - 1];
        else
            nests = false;
    }
    if (nests && per_axis(nm, mn, mst, off, r, coarse, axis_of)) {
        g = nm < m ? autograd_take_reshape(g, nm, mn) : g;
        return autograd_take_reshape(spread_per_axis(g, nm, mn, mst, off, r, coarse, axis_of),
                                     s->ndim, s->shape);
    }
    /* Spread each axis over its stride, innermost first, merging as it goes:
     * shape [n0..nk, w] becomes [n0..n(k-1), w'], where w' = (nk-1)*stride_k
     * + w is the extent of axis k and everything inside it. */
    n[m] = 1;
    g = autograd_take_reshape(g, m + 1, n);
    int64_t w = 1;
    for (int k = m - 1; k >= 0 && g; k--) {
        if (st[k] > w)
            g = take_pad_axis(g, k + 1, 0, st[k] - w);
        int64_t merged[KILN_MAX_DIMS + 1];
        memcpy(merged, n, sizeof(int64_t) * (size_t)k);
        merged[k] = n[k] * st[k];
        g = autograd_take_reshape(g, k + 1, merged);
        if (st[k] > w)
            g = take_slice_axis(g, k, 0, (n[k] - 1) * st[k] + w);
        w = (n[k] - 1) * st[k] + w;
    }
    /* g now covers flat source elements [off, off + w), inside the source. */
    if (g && w < base)
        g = take_pad_axis(g, 0, off, base - off - w);
    return autograd_take_reshape(g, s->ndim, s->shape);
}

graph_node *autograd_view_vjp(const graph_node *v, graph_node *g, bool *bad) {
    const graph_view *vw = &v->p.view;
    const graph_node *s = v->src[0];
    int nd = v->ndim;
    int64_t off = vw->offset;
    if (graph_numel(v) == 0 || graph_numel(s) == 0) {
        graph_unref(g);
        return zeros_like_src(v);
    }
    /* The masked-off border reads nothing. */
    if (vw->masked) {
        int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS], len[KILN_MAX_DIMS];
        for (int d = 0; d < nd; d++) {
            if (vw->mask_hi[d] <= vw->mask_lo[d]) {
                graph_unref(g);
                return zeros_like_src(v);
            }
            start[d] = vw->mask_lo[d];
            step[d] = 1;
            len[d] = vw->mask_hi[d] - vw->mask_lo[d];
            off += vw->mask_lo[d] * vw->strides[d];
        }
        graph_node *c = g ? graph_slice(g, start, step, len) : NULL;
        graph_unref(g);
        g = c;
    }
    if (!g)
        return NULL;
    int64_t stride[KILN_MAX_DIMS];
    memcpy(stride, vw->strides, sizeof stride);
    /* Broadcast axes read one element many times: their gradients add up. */
    uint32_t sum = 0;
    for (int d = 0; d < nd; d++)
        if (stride[d] == 0 && g->shape[d] > 1)
            sum |= 1u << d;
    if (sum)
        g = autograd_take_reduce(g, sum);
    if (!g)
        return NULL;
    uint32_t flip = 0, live = 0;
    for (int d = 0; d < nd; d++) {
        if (g->shape[d] == 1)
            continue;
        if (stride[d] < 0) {
            flip |= 1u << d;
            off += (g->shape[d] - 1) * stride[d];
            stride[d] = -stride[d];
        }
        live |= 1u << d;
    }
    if (flip) {
        graph_node *f = graph_flip(g, flip);
        graph_unref(g);
        if (!(g = f))
            return NULL;
    }
    if (disjoint(g, stride, live))
        return spread(g, stride, off, s);
    /* Overlapping axes: the smallest set of axes whose every index
     * combination leaves a disjoint view (over at most 8 axes, 256 sets). */
    uint32_t best = 0;
    int64_t best_count = VIEW_UNROLL_MAX + 1;
    for (uint32_t u = 1; u < (1u << nd); u++) {
        if (u & ~live)
            continue;
        int64_t count = 1;
        for (int d = 0; d < nd && count < best_count; d++)
            if (u & (1u << d))
                count *= g->shape[d];
        if (count < best_count && disjoint(g, stride, live & ~u)) {
            best = u;
            best_count = count;
        }
    }
    if (!best) {
        *bad = true;
        graph_unref(g);
        return NULL;
    }
    graph_node *total = NULL;
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (int64_t c = 0; c < best_count; c++) {
        int64_t start[KILN_MAX_DIMS] = {0}, step[KILN_MAX_DIMS], len[KILN_MAX_DIMS];
        int64_t at = off;
        for (int d = 0; d < nd; d++) {
            step[d] = 1;
            len[d] = g->shape[d];
            if (best & (1u << d)) {
                start[d] = idx[d];
                len[d] = 1;
                at += idx[d] * stride[d];
            }
        }
        graph_node *part = graph_slice(g, start, step, len);
        graph_node *term = part ? spread(part, stride, at, s) : NULL;
        total = !total ? term : autograd_take_binary(GRAPH_ADD, total, term);
        if (!total)
            break;
        /* the next combination, the last axis fastest */
        for (int d = nd - 1; d >= 0; d--)
            if (best & (1u << d)) {
                if (++idx[d] < g->shape[d])
                    break;
                idx[d] = 0;
            }
    }
    graph_unref(g);
    return total;
}
