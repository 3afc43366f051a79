/* backward.c — the rewrite itself: the walk over the part of the graph
 * between an output and the nodes it is differentiated with respect to, and
 * the accumulation of each node's gradient from all of its consumers, in
 * reverse topological order. Also what a detached node is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/internal.h"

bool autograd_is_detached(const graph_node *n) { return graph_is_identity(n); }

graph_node *autograd_detach(graph_node *n) {
    /* A view of a detached node or of a constant is cut off already: no
     * gradient reaches its base (no-grad records views of detached sources,
     * see api_wrap). */
    const graph_node *base = n;
    while (base->op == GRAPH_VIEW)
        base = base->src[0];
    bool cut = base->op == GRAPH_CONST || (base != n && autograd_is_detached(base));
    if (autograd_is_detached(n) || !graph_dtype_is_float(n->dtype) || cut)
        return graph_ref(n);
    if (n->ndim > 0)
        return graph_cat(1, &n, 0);
    /* cat needs an axis: a scalar goes through a one-element vector. */
    const int64_t one = 1;
    graph_node *v = graph_reshape(n, 1, &one);
    graph_node *c = v ? graph_cat(1, &v, 0) : NULL;
    graph_unref(v);
    return autograd_take_reshape(c, 0, &one);
}

/* What the rewrite knows of one node of the walk; a node's scratch holds its
 * record's index + 1 while the rewrite runs. */
typedef struct record {
    graph_node *node;
    graph_node *grad; /* accumulated so far (owned) */
    bool is_x;
    bool done;    /* finished by the walk */
    bool reaches; /* an x lies at or below it, along nodes looked through */
} record;

typedef struct rewrite {
    record *recs;
    int64_t nrecs, cap;
    bool stop_at_xs;
} rewrite;

static int64_t rec_of(const graph_node *n) { return (int64_t)(intptr_t)n->scratch - 1; }

/* The record of n, made when n is new; -1 when out of memory. */
static int64_t rec_get(rewrite *w, graph_node *n) {
    if (n->scratch)
        return rec_of(n);
    if (w->nrecs == w->cap) {
        int64_t cap = w->cap ? w->cap * 2 : 64;
        record *r = realloc(w->recs, sizeof *r * (size_t)cap);
        if (!r)
            return -1;
        w->recs = r;
        w->cap = cap;
    }
    w->recs[w->nrecs] = (record){.node = n};
    n->scratch = (void *)(intptr_t)(w->nrecs + 1);
    return w->nrecs++;
}

/* Whether the rewrite looks through n to its sources. */
static bool looks_through(const rewrite *w, const record *r) {
    return graph_dtype_is_float(r->node->dtype) && !autograd_is_detached(r->node) &&
           !(r->is_x && w->stop_at_xs);
}

/* Post-order over the float nodes below y that the rewrite looks through
 * (every source before its consumers), as record indices. Iterative, as
 * graphs can be deeper than the C stack. */
static kiln_status walk(rewrite *w, graph_node *y, int64_t **order, int64_t *norder) {
    typedef struct frame {
        int64_t rec;
        int next;
    } frame;
    frame *stack = NULL;
    int64_t nstack = 0, scap = 0, ocap = 0;
    int64_t *out = NULL;
    *norder = 0;
    int64_t root = rec_get(w, y);
    if (root < 0)
        return KILN_ERR_OOM;
    kiln_status st = KILN_OK;
    scap = 64;
    if (!(stack = malloc(sizeof *stack * (size_t)scap)))
        return KILN_ERR_OOM;
    stack[nstack++] = (frame){root, 0};
    while (nstack > 0 && st == KILN_OK) {
        frame *top = &stack[nstack - 1];
        record *r = &w->recs[top->rec];
        graph_node *n = r->node;
        if (looks_through(w, r) && top->next < n->nsrc) {
            graph_node *s = n->src[top->next++];
            if (!graph_dtype_is_float(s->dtype) || (s->scratch && w->recs[rec_of(s)].done))
                continue;
            /* New, or an x registered before the walk: a record that is
             * not done is otherwise on the stack, which a graph without
             * cycles never leads back to. */
            int64_t k = rec_get(w, s);
            if (k < 0) {
                st = KILN_ERR_OOM;
                break;
            }
            if (nstack == scap) {
                frame *p = realloc(stack, sizeof *p * (size_t)(scap * 2));
                if (!p) {
                    st = KILN_ERR_OOM;
                    break;
                }
                stack = p;
                scap *= 2;
            }
            stack[nstack++] = (frame){k, 0};
            continue;
        }
        bool reaches = r->is_x;
        if (looks_through(w, r))
            for (int j = 0; j < n->nsrc && !reaches; j++)
                reaches = n->src[j]->scratch && w->recs[rec_of(n->src[j])].reaches &&
                          graph_dtype_is_float(n->src[j]->dtype);
        r->reaches = reaches;
        r->done = true;
        if (*norder == ocap) {
            int64_t c = ocap ? ocap * 2 : 64;
            int64_t *p = realloc(out, sizeof *p * (size_t)c);
            if (!p) {
                st = KILN_ERR_OOM;
                break;
            }
            out = p;
            ocap = c;
        }
        out[(*norder)++] = top->rec;
        nstack--;
    }
    free(stack);
    if (st != KILN_OK) {
        free(out);
        return st;
    }
    *order = out;
    return KILN_OK;
}

/* The box of m's (a masked view's) elements seen through v, a reshape of
 * m that only splits its axes (each of m's axes is one run of v's): a
 * masked axis must be cut at multiples of its run's inner sizes, so that
 * its bounds fall on the run's first axis of more than one element. false
 * where they do not, or where v merges axes. */
static bool box_through_split(const graph_node *v, const graph_node *m, int64_t *lo,
                              int64_t *hi) {
    int j = 0;
    for (int i = 0; i < m->ndim; i++) {
        int64_t mlo = m->p.view.mask_lo[i], mhi = m->p.view.mask_hi[i], prod = 1;
        int first = j, outer = -1;
        while (prod < m->shape[i] && j < v->ndim) {
            if (outer < 0 && v->shape[j] > 1)
                outer = j;
            prod *= v->shape[j++];
        }
        if (prod != m->shape[i])
            return false;
        int64_t inner = outer < 0 ? 1 : prod / v->shape[outer];
        if ((mlo > 0 || mhi < m->shape[i]) && (outer < 0 || mlo % inner || mhi % inner))
            return false;
        for (int d = first; d < j; d++) {
            lo[d] = d == outer ? mlo / inner : 0;
            hi[d] = d == outer ? mhi / inner : v->shape[d];
        }
    }
    for (; j < v->ndim; j++) { /* trailing axes of one */
        lo[j] = 0;
        hi[j] = 1;
    }
    return true;
}

/* The box where masked view v (a pad's gradient, a slice's) may be nonzero:
 * [lo[d], hi[d]) per axis; false where v is no masked view or its box is
 * empty. A reshape splitting a masked view's axes is one too: the view
 * gradient's coarse spread reads a [b, t, 3, c] projection's slice of one
 * along its third axis as [b t, 3 c] masked, reshaped back. */
static bool zero_outside_box(const graph_node *v, int64_t *lo, int64_t *hi) {
    if (v->op != GRAPH_VIEW)
        return false;
    const graph_node *m = v->src[0];
    if (v->p.view.masked) {
        memcpy(lo, v->p.view.mask_lo, sizeof(int64_t) * (size_t)v->ndim);
        memcpy(hi, v->p.view.mask_hi, sizeof(int64_t) * (size_t)v->ndim);
    } else if (m->op != GRAPH_VIEW || !m->p.view.masked || !graph_view_is_reshape(v) ||
               !box_through_split(v, m, lo, hi)) {
        return false;
    }
    for (int d = 0; d < v->ndim; d++)
        if (lo[d] >= hi[d])
            return false;
    return true;
}

/* a's box alone (a view), as the sources of a cat along axis: the sources
 * of a cat it is along that axis (up to JOIN_FLAT of them), so that joins of
 * joins stay one cat. */
enum { JOIN_FLAT = 16 };
static int box_sources(graph_node *a, const int64_t *lo, const int64_t *hi, int axis,
                       graph_node **out, graph_node **hold) {
    int64_t step[KILN_MAX_DIMS], len[KILN_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) {
        step[d] = 1;
        len[d] = hi[d] - lo[d];
    }
    graph_node *s = *hold = graph_slice(a, lo, step, len);
    if (!s)
        return -1;
    if (s->op == GRAPH_CAT && s->nsrc > 1 && s->nsrc <= JOIN_FLAT && s->p.axis == axis) {
        for (int i = 0; i < s->nsrc; i++)
            out[i] = s->src[i];
        return s->nsrc;
    }
    out[0] = s;
    return 1;
}

/* a + b (consumed; NULL, both untouched, where this does not apply) where each
 * is zero outside a box and the boxes lie side by side along one axis, equal
 * along the others: the two boxes' cat, padded. The gradient of several
 * slices of one tensor (a fused projection's q, k and v) is a sum of pads,
 * which a kernel computed as every pad's masked load at every element
 * (transformer block backward: the qkv gradient's add of three pads, 4.6
 * ms of ~145); a cat writes each region from its one source. */
static graph_node *join_boxes(graph_node *a, graph_node *b) {
    int64_t lo[2][KILN_MAX_DIMS], hi[2][KILN_MAX_DIMS];
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->ndim == 0 ||
        memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) != 0 ||
        !zero_outside_box(a, lo[0], hi[0]) || !zero_outside_box(b, lo[1], hi[1]))
        return NULL;
    int axis = -1;
    for (int d = 0; d < a->ndim; d++) {
        if (lo[0][d] == lo[1][d] && hi[0][d] == hi[1][d])
            continue;
        if (axis >= 0)
            return NULL;
        axis = d;
    }
    if (axis < 0 || (hi[0][axis] != lo[1][axis] && hi[1][axis] != lo[0][axis]))
        return NULL;
    int f = hi[0][axis] == lo[1][axis] ? 0 : 1; /* the box that comes first */
    graph_node *box[2] = {f ? b : a, f ? a : b};
    graph_node *srcs[2 * JOIN_FLAT], *hold[2] = {NULL, NULL}, *cat = NULL, *r = NULL;
    int na = box_sources(box[0], lo[f], hi[f], axis, srcs, &hold[0]);
    int nb = na < 0 ? -1 : box_sources(box[1], lo[1 - f], hi[1 - f], axis, srcs + na, &hold[1]);
    if (nb > 0)
        cat = graph_cat(na + nb, srcs, axis);
    if (cat) {
        int64_t before[KILN_MAX_DIMS], after[KILN_MAX_DIMS];
        for (int d = 0; d < a->ndim; d++) {
            before[d] = lo[f][d];
            after[d] = a->shape[d] - hi[1 - f][d];
        }
        r = graph_pad(cat, before, after);
    }
    graph_unref(cat);
    graph_unref(hold[0]);
    graph_unref(hold[1]);
    if (r) {
        graph_unref(a);
        graph_unref(b);
    }
    return r;
}

/* sum + c (both consumed) with c joined to a box of sum where it can be:
 * sum itself, or either term of a sum (x + y) + c = x + (y joined with c),
 * and that joined again with x where it can (the three pads of q, k and v
 * arrive in the walk's order, not the features'). Every element of a join
 * is one term plus zeros, so the result's bits are the plain sum's. */
static graph_node *add_joining(graph_node *sum, graph_node *c) {
    graph_node *j = join_boxes(sum, c);
    if (j)
        return j;
    for (int i = 1; sum->op == GRAPH_ADD && i >= 0; i--) {
        graph_node *term = graph_ref(sum->src[i]);
        if (!(j = join_boxes(term, c))) {
            graph_unref(term);
            continue;
        }
        graph_node *other = graph_ref(sum->src[1 - i]);
        graph_unref(sum);
        graph_node *both = join_boxes(other, j);
        return both ? both : autograd_take_binary(GRAPH_ADD, other, j);
    }
    return autograd_take_binary(GRAPH_ADD, sum, c);
}

/* Adds c (consumed) into the gradient of record k. */
static bool accumulate(rewrite *w, int64_t k, graph_node *c) {
    record *r = &w->recs[k];
    if (!c)
        return false;
    if (!r->grad) {
        r->grad = c;
        return true;
    }
    r->grad = add_joining(r->grad, c);
    return r->grad != NULL;
}

static kiln_status propagate(rewrite *w, const int64_t *order, int64_t norder, char *msg,
                             size_t cap) {
    bool *need = NULL;
    graph_node **out = NULL;
    int width = 0;
    kiln_status st = KILN_OK;
    for (int64_t i = norder - 1; i >= 0 && st == KILN_OK; i--) {
        record *r = &w->recs[order[i]];
        graph_node *n = r->node;
        if (!r->reaches || !r->grad || !looks_through(w, r) || n->nsrc == 0)
            continue;
        if (n->nsrc > width) {
            bool *nn = realloc(need, sizeof *nn * (size_t)n->nsrc);
            graph_node **no = nn ? realloc(out, sizeof *no * (size_t)n->nsrc) : NULL;
            if (nn)
                need = nn;
            if (no)
                out = no;
            if (!nn || !no) {
                snprintf(msg, cap, "kiln_backward: out of memory");
                st = KILN_ERR_OOM;
                break;
            }
            width = n->nsrc;
        }
        bool any = false;
        for (int j = 0; j < n->nsrc; j++) {
            graph_node *s = n->src[j];
            need[j] = graph_dtype_is_float(s->dtype) && s->scratch && w->recs[rec_of(s)].reaches;
            any = any || need[j];
        }
        if (!any)
            continue;
        st = autograd_vjp(n, r->grad, need, out, msg, cap);
        for (int j = 0; j < n->nsrc && st == KILN_OK; j++) {
            if (!need[j])
                continue;
            graph_node *c = out[j];
            out[j] = NULL;
            if (!accumulate(w, rec_of(n->src[j]), c)) {
                snprintf(msg, cap, "kiln_backward: out of memory");
                st = KILN_ERR_OOM;
            }
        }
        for (int j = 0; j < n->nsrc; j++)
            if (need[j])
                graph_unref(out[j]);
        /* Interior gradients are not needed once passed on. */
        if (!r->is_x) {
            graph_unref(r->grad);
            r->grad = NULL;
        }
    }
    free(need);
    free(out);
    return st;
}

kiln_status autograd_gradients(graph_node *y, graph_node *seed, int n, graph_node *const *xs,
                               bool stop_at_xs, graph_node **out, char *msg, size_t cap) {
    rewrite w = {.stop_at_xs = stop_at_xs};
    int64_t *order = NULL, norder = 0;
    kiln_status st = KILN_OK;
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    for (int i = 0; i < n && st == KILN_OK; i++) {
        int64_t k = rec_get(&w, xs[i]);
        if (k < 0)
            st = KILN_ERR_OOM;
        else
            w.recs[k].is_x = true;
    }
    if (st == KILN_OK)
        st = walk(&w, y, &order, &norder);
    if (st == KILN_OK) {
        int64_t k = rec_of(y);
        w.recs[k].grad = graph_ref(seed);
        st = propagate(&w, order, norder, msg, cap);
    } else {
        snprintf(msg, cap, "kiln_backward: out of memory");
    }
    for (int i = 0; i < n && st == KILN_OK; i++) {
        record *r = &w.recs[rec_of(xs[i])];
        out[i] = r->reaches ? graph_ref(r->grad) : NULL;
    }
    for (int64_t k = 0; k < w.nrecs; k++) {
        w.recs[k].node->scratch = NULL;
        graph_unref(w.recs[k].grad);
    }
    free(w.recs);
    free(order);
    return st;
}
