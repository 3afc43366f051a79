/* view.c — movement ops as index arithmetic. Each op rewrites the view of its
 * source (shape, strides, offset, mask) so that a chain of movements stays one
 * view over one base node; only a reshape that strides cannot express views
 * the previous view node itself, which executors then materialise. */
#include <string.h>

#include "graph/graph.h"
#include "graph/internal.h"

typedef struct {
    graph_node *base;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    graph_view v;
} view_state;

static void contiguous(graph_view *v, int ndim, const int64_t *shape) {
    memset(v, 0, sizeof *v);
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        v->strides[d] = s;
        s *= shape[d];
    }
}

/* The view a movement op starts from: the source's own view when it is an
 * unrealized view node, else the identity over the source. */
static view_state view_start(graph_node *a) {
    view_state s;
    s.ndim = a->ndim;
    memcpy(s.shape, a->shape, sizeof s.shape);
    if (a->op == GRAPH_VIEW && !a->buf) {
        s.base = a->src[0];
        s.v = a->p.view;
    } else {
        s.base = a;
        contiguous(&s.v, a->ndim, a->shape);
    }
    return s;
}

static bool dim_full(const view_state *s, int d) {
    return !s->v.masked || (s->v.mask_lo[d] <= 0 && s->v.mask_hi[d] >= s->shape[d]);
}

static void ensure_mask(view_state *s) {
    if (s->v.masked)
        return;
    s->v.masked = true;
    for (int d = 0; d < s->ndim; d++) {
        s->v.mask_lo[d] = 0;
        s->v.mask_hi[d] = s->shape[d];
    }
}

/* Canonical form, so that equal views hash alike: strides of size-1 axes are
 * irrelevant, masks are clamped, and a mask that hides nothing is dropped. */
static void canonicalize(view_state *s) {
    for (int d = 0; d < s->ndim; d++)
        if (s->shape[d] == 1 && (!s->v.masked || s->v.mask_lo[d] < s->v.mask_hi[d]))
            s->v.strides[d] = 0;
    if (!s->v.masked)
        return;
    bool full = true;
    for (int d = 0; d < s->ndim; d++) {
        int64_t lo = s->v.mask_lo[d] < 0 ? 0 : s->v.mask_lo[d];
        int64_t hi = s->v.mask_hi[d] > s->shape[d] ? s->shape[d] : s->v.mask_hi[d];
        if (hi < lo)
            hi = lo;
        s->v.mask_lo[d] = lo;
        s->v.mask_hi[d] = hi;
        full = full && lo == 0 && hi == s->shape[d];
    }
    if (full) {
        s->v.masked = false;
        memset(s->v.mask_lo, 0, sizeof s->v.mask_lo);
        memset(s->v.mask_hi, 0, sizeof s->v.mask_hi);
    }
}

/* Whether the view reads its source's elements in row-major order, one after
 * another from the first (strides of size-1 axes do not matter). */
static bool reads_in_order(int ndim, const int64_t *shape, const graph_view *v) {
    if (v->masked || v->offset != 0)
        return false;
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && v->strides[d] != st)
            return false;
        st *= shape[d];
    }
    return true;
}

bool graph_view_is_reshape(const graph_node *v) {
    return reads_in_order(v->ndim, v->shape, &v->p.view) &&
           graph_numel(v) == graph_numel(v->src[0]);
}

/* The view node of the given shape and view over base. */
static graph_node *view_node(graph_node *base, kiln_dtype dt, int ndim, const int64_t *shape,
                             const graph_view *v) {
    graph_node p;
    graph_proto(&p, GRAPH_VIEW, dt, ndim, shape);
    p.p.view = *v;
    graph_node *srcs[1] = {base};
    p.nsrc = 1;
    p.src = srcs;
    return graph_intern(base->g, &p);
}

static graph_node *finish(view_state *s, kiln_dtype dt) {
    canonicalize(s);
    graph_node *b = s->base;
    if (s->ndim == b->ndim && !memcmp(s->shape, b->shape, sizeof(int64_t) * (size_t)s->ndim) &&
        reads_in_order(s->ndim, s->shape, &s->v))
        return graph_ref(b);
    return view_node(b, dt, s->ndim, s->shape, &s->v);
}

graph_node *graph_view_over(const graph_node *v, graph_node *base) {
    return view_node(base, v->dtype, v->ndim, v->shape, &v->p.view);
}

graph_node *graph_permute(graph_node *a, const int *perm) {
    view_state s = view_start(a), t = s;
    for (int d = 0; d < a->ndim; d++) {
        t.shape[d] = s.shape[perm[d]];
        t.v.strides[d] = s.v.strides[perm[d]];
        t.v.mask_lo[d] = s.v.mask_lo[perm[d]];
        t.v.mask_hi[d] = s.v.mask_hi[perm[d]];
    }
    return finish(&t, a->dtype);
}

/* Each axis of s of size 1 where shape has more: stride 0, its mask (if it
 * shows the element) the whole axis. */
static void expand_axes(view_state *s, const int64_t *shape) {
    for (int d = 0; d < s->ndim; d++) {
        if (s->shape[d] == shape[d])
            continue;
        s->v.strides[d] = 0;
        if (s->v.masked && s->v.mask_lo[d] < s->v.mask_hi[d]) {
            s->v.mask_lo[d] = 0;
            s->v.mask_hi[d] = shape[d];
        }
        s->shape[d] = shape[d];
    }
}

graph_node *graph_expand(graph_node *a, const int64_t *shape) {
    view_state s = view_start(a);
    expand_axes(&s, shape);
    return finish(&s, a->dtype);
}

graph_node *graph_broadcast(graph_node *a, int ndim, const int64_t *shape) {
    view_state s = view_start(a), t = s;
    int lead = ndim - a->ndim;
    t.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        bool led = d < lead;
        t.shape[d] = led ? 1 : s.shape[d - lead];
        t.v.strides[d] = led ? 0 : s.v.strides[d - lead];
        t.v.mask_lo[d] = led ? 0 : s.v.mask_lo[d - lead];
        t.v.mask_hi[d] = led ? 1 : s.v.mask_hi[d - lead];
    }
    expand_axes(&t, shape);
    return finish(&t, a->dtype);
}

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

graph_node *graph_slice(graph_node *a, const int64_t *start, const int64_t *step,
                        const int64_t *len) {
    view_state s = view_start(a);
    for (int d = 0; d < a->ndim; d++) {
        if (s.v.masked) {
            int64_t lo = s.v.mask_lo[d], hi = s.v.mask_hi[d];
            if (step[d] > 0) {
                s.v.mask_lo[d] = ceil_div(lo - start[d], step[d]);
                s.v.mask_hi[d] = ceil_div(hi - start[d], step[d]);
            } else {
                s.v.mask_lo[d] = floor_div(start[d] - hi, -step[d]) + 1;
                s.v.mask_hi[d] = floor_div(start[d] - lo, -step[d]) + 1;
            }
        }
        s.v.offset += start[d] * s.v.strides[d];
        /* With one element or none the stride is never used, and a huge step
         * times it could overflow; with two or more the product is a distance
         * inside the base, so it fits. */
        s.v.strides[d] = len[d] <= 1 ? 0 : s.v.strides[d] * step[d];
        s.shape[d] = len[d];
    }
    return finish(&s, a->dtype);
}

graph_node *graph_pad(graph_node *a, const int64_t *before, const int64_t *after) {
    view_state s = view_start(a);
    ensure_mask(&s);
    for (int d = 0; d < a->ndim; d++) {
        s.v.offset -= before[d] * s.v.strides[d];
        s.v.mask_lo[d] += before[d];
        s.v.mask_hi[d] += before[d];
        s.shape[d] += before[d] + after[d];
    }
    return finish(&s, a->dtype);
}

graph_node *graph_flip(graph_node *a, uint32_t axes) {
    view_state s = view_start(a);
    for (int d = 0; d < a->ndim; d++) {
        if (!(axes & (1u << d)))
            continue;
        int64_t n = s.shape[d];
        if (n > 0)
            s.v.offset += (n - 1) * s.v.strides[d];
        s.v.strides[d] = -s.v.strides[d];
        if (s.v.masked) {
            int64_t lo = s.v.mask_lo[d];
            s.v.mask_lo[d] = n - s.v.mask_hi[d];
            s.v.mask_hi[d] = n - lo;
        }
    }
    return finish(&s, a->dtype);
}

/* Sliding windows read one stride twice: the axis's for the window's start
 * (times step) and for the element within it, so windows may overlap. A mask
 * on the axis (a pad) would have to bound the sum start + element, which no
 * per-axis mask can say: the windows then view the masked view itself, which
 * an executor computes where it is read (its mask tested on the coordinates
 * recovered from the flat index) or materialises. */
graph_node *graph_unfold(graph_node *a, int axis, int64_t size, int64_t step) {
    view_state s = view_start(a);
    if (!dim_full(&s, axis)) {
        s.base = a;
        contiguous(&s.v, a->ndim, a->shape);
    }
    int nd = a->ndim;
    int64_t n = s.shape[axis], nw = (n - size) / step + 1, st = s.v.strides[axis];
    /* With one window the step is never used, and a huge one times the
     * stride could overflow; with two or more, step < n. */
    s.v.strides[axis] = nw > 1 ? st * step : 0;
    s.v.strides[nd] = st;
    if (s.v.masked) {
        s.v.mask_lo[axis] = s.v.mask_lo[nd] = 0;
        s.v.mask_hi[axis] = nw;
        s.v.mask_hi[nd] = size;
    }
    s.shape[axis] = nw;
    s.shape[nd] = size;
    s.ndim = nd + 1;
    return finish(&s, a->dtype);
}

/* Expresses the reshape over the same base when every group of source axes
 * that merges or splits is contiguous within itself and unmasked (NumPy's
 * no-copy reshape rule, extended with masks); size-1 axes come and go freely. */
static bool reshape_view(const view_state *s, int ndim, const int64_t *shape, view_state *out) {
    int od[KILN_MAX_DIMS], nd[KILN_MAX_DIMS], on = 0, nn = 0;
    for (int d = 0; d < s->ndim; d++) {
        if (s->shape[d] != 1)
            od[on++] = d;
        else if (s->v.masked && s->v.mask_lo[d] >= s->v.mask_hi[d])
            return false;
    }
    for (int d = 0; d < ndim; d++)
        if (shape[d] != 1)
            nd[nn++] = d;
    out->base = s->base;
    out->ndim = ndim;
    if (ndim > 0)
        memcpy(out->shape, shape, sizeof(int64_t) * (size_t)ndim);
    memset(&out->v, 0, sizeof out->v);
    out->v.offset = s->v.offset;
    out->v.masked = s->v.masked;
    for (int d = 0; d < ndim; d++)
        out->v.mask_hi[d] = shape[d];
    int oi = 0, ni = 0;
    while (oi < on && ni < nn) {
        int oj = oi + 1, nj = ni + 1;
        int64_t op = s->shape[od[oi]], np = shape[nd[ni]];
        while (op != np) {
            if (np < op)
                np *= shape[nd[nj++]];
            else
                op *= s->shape[od[oj++]];
        }
        bool identity = oj - oi == 1 && nj - ni == 1;
        for (int k = oi; k < oj; k++) {
            if (!identity && !dim_full(s, od[k]))
                return false;
            if (k + 1 < oj &&
                s->v.strides[od[k]] != s->v.strides[od[k + 1]] * s->shape[od[k + 1]])
                return false;
        }
        out->v.strides[nd[nj - 1]] = s->v.strides[od[oj - 1]];
        for (int k = nj - 1; k > ni; k--)
            out->v.strides[nd[k - 1]] = out->v.strides[nd[k]] * shape[nd[k]];
        if (identity && s->v.masked) {
            out->v.mask_lo[nd[ni]] = s->v.mask_lo[od[oi]];
            out->v.mask_hi[nd[ni]] = s->v.mask_hi[od[oi]];
        }
        oi = oj;
        ni = nj;
    }
    return true;
}

graph_node *graph_reshape(graph_node *a, int ndim, const int64_t *shape) {
    view_state s = view_start(a), t;
    if (graph_numel(a) == 0) {
        /* Nothing is ever read through an empty view. */
        t.base = s.base;
        t.ndim = ndim;
        if (ndim > 0)
            memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
        contiguous(&t.v, ndim, shape);
        return finish(&t, a->dtype);
    }
    if (reshape_view(&s, ndim, shape, &t))
        return finish(&t, a->dtype);
    t.base = a;
    t.ndim = ndim;
    if (ndim > 0)
        memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
    contiguous(&t.v, ndim, shape);
    return finish(&t, a->dtype);
}
