/* schedule.c — cuts a captured graph into kernels and lowers each to kernel
 * IR. A node becomes a kernel output (is materialised) when it is requested,
 * is a matmul, is read from two kernels (recomputing it in each would repeat
 * work), or is viewed in a way strides cannot express; every other node fuses
 * into the kernel of its consumers: elementwise chains, broadcasts and views
 * into one kernel, elementwise producers into the reduction that reads them,
 * and a reduction into the kernel that reads it back over its rows (a row
 * kernel: softmax, layer-norm). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower/ir.h"
#include "lower/lower.h"

/* Per-node scheduling state, hung on node->scratch during a schedule. */
typedef struct node_info {
    int consumers;
    graph_node *last_consumer;
    bool materialize;
    bool alias;         /* materialised by sharing its source's buffer */
    graph_node *owner;  /* the kernel root this node fuses into */
    bool conflict;      /* consumers in different kernels */
    bool row;           /* a root with fused reductions: a row kernel */
    uint32_t row_axes;  /* its reduced axes */
    bool repi;          /* a root over fused reductions' results (one per element) */
    const graph_node *rdom; /* their source, */
    uint32_t raxes;         /* and their reduced axes */
    graph_node *epilogue_of; /* a root whose kernel is this matmul's epilogue */
    bool target;
    int64_t pos;        /* index in the post-order */
    bool ident;         /* computed at its kernel root's own element index */
    /* Sibling kernels: a root's group (its members share one kernel, lowered
     * where the last member is) and, per root, what its kernel reads from
     * outside itself. */
    int group;          /* -1: none */
    bool group_last;
    struct ext_read *ext;
    int next, ext_cap;
    graph_node **readers; /* a materialised node's reading roots */
    int nreaders, readers_cap;
} node_info;

/* A root's kernel reads base (a materialised node or a leaf), at its own
 * element index when ident. */
typedef struct ext_read {
    graph_node *base;
    bool ident;
} ext_read;

static node_info *info(const graph_node *n) { return n->scratch; }

static bool pending(const graph_node *n) { return !n->buf && n->op != GRAPH_BUFFER; }

static bool same_shape(const graph_node *a, const graph_node *b) {
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* Leaves and views of leaves cost nothing to read again in every consumer. */
static bool cheap(const graph_node *n) {
    while (n->op == GRAPH_VIEW && pending(n))
        n = n->src[0];
    return !pending(n) || n->op == GRAPH_CONST;
}

/* The pending nodes below the targets in post-order, each with its info and
 * its count of distinct consumers. */
static bool collect(int n, graph_node *const *targets, graph_node ***order, int64_t *count) {
    if (graph_postorder(n, targets, true, order, count) != KILN_OK)
        return false;
    for (int64_t i = 0; i < *count; i++) {
        node_info *xi = calloc(1, sizeof(node_info));
        if (!((*order)[i]->scratch = xi))
            return false;
        xi->pos = i;
        xi->group = -1;
    }
    for (int64_t i = 0; i < *count; i++) {
        graph_node *x = (*order)[i];
        for (int j = 0; j < x->nsrc; j++) {
            node_info *si = x->src[j]->scratch;
            if (si && si->last_consumer != x) {
                si->consumers++;
                si->last_consumer = x;
            }
        }
    }
    return true;
}

/* Decides which kernel every fused node belongs to. A node read from two
 * kernels is materialised (recomputing it in each could repeat any amount of
 * work), and so is one with several consumers in a kernel without fused
 * reductions; inside a row kernel a shared node is recomputed once per pass
 * over the row, which is how softmax and layer-norm become one kernel. A
 * fused reduction must reduce the same axes of the same shape as the kernel
 * it is in. Returns whether anything new was materialised. */
static bool settle_kernels(graph_node **order, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        node_info *xi = info(order[i]);
        xi->owner = NULL;
        xi->conflict = xi->row = xi->repi = false;
    }
    for (int64_t i = count - 1; i >= 0; i--) {
        graph_node *x = order[i];
        node_info *xi = info(x);
        if (xi->materialize)
            xi->owner = x;
        for (int j = 0; j < x->nsrc; j++) {
            node_info *si = x->src[j]->scratch;
            if (!si || cheap(x->src[j]))
                continue;
            if (!si->owner)
                si->owner = xi->owner;
            else if (si->owner != xi->owner)
                si->conflict = true;
        }
    }
    bool changed = false;
    for (int64_t i = 0; i < count; i++) {
        graph_node *x = order[i];
        node_info *xi = info(x);
        if (xi->materialize || !graph_op_is_reduce(x->op))
            continue;
        graph_node *root = xi->owner;
        node_info *ri = info(root);
        if (!graph_op_is_reduce(root->op) && !same_shape(root, x->src[0]) &&
            graph_numel(root) == graph_numel(x)) {
            /* the root is elementwise over the reduction's result: a mean's
             * division, a variance from two sums */
            bool fits = !xi->conflict && root->op != GRAPH_MATMUL && !ri->row &&
                        (!ri->repi || (ri->raxes == x->p.axes && same_shape(ri->rdom, x->src[0])));
            if (!fits) {
                xi->materialize = changed = true;
                continue;
            }
            ri->repi = true;
            ri->rdom = x->src[0];
            ri->raxes = x->p.axes;
            continue;
        }
        const graph_node *dom = graph_op_is_reduce(root->op) ? root->src[0] : root;
        uint32_t axes = graph_op_is_reduce(root->op) ? root->p.axes
                        : ri->row                   ? ri->row_axes
                                                    : x->p.axes;
        bool fits = !xi->conflict && root->op != GRAPH_MATMUL && !ri->repi && x->p.axes == axes &&
                    x->src[0]->ndim == dom->ndim &&
                    !memcmp(x->src[0]->shape, dom->shape, sizeof(int64_t) * (size_t)dom->ndim);
        if (!fits) {
            xi->materialize = changed = true;
            continue;
        }
        ri->row = true;
        ri->row_axes = axes;
    }
    for (int64_t i = 0; i < count; i++) {
        graph_node *x = order[i];
        node_info *xi = info(x);
        if (xi->materialize || cheap(x) || graph_op_is_reduce(x->op))
            continue;
        if (xi->conflict || (xi->consumers > 1 && !info(xi->owner)->row && !info(xi->owner)->repi))
            xi->materialize = changed = true;
    }
    return changed;
}

/* Whether a matmul operand reads as strides over a materialised base; fills
 * the operand's layout (batch strides, row and column strides) if so. */
static graph_node *operand_base(graph_node *s, lower_operand *o) {
    int nd = s->ndim;
    memset(o, 0, sizeof *o);
    if (s->op == GRAPH_VIEW && pending(s)) {
        if (s->p.view.masked)
            return NULL;
        graph_node *base = s->src[0];
        if (pending(base) && !info(base)->materialize)
            return NULL;
        o->offset = s->p.view.offset;
        for (int d = 0; d < nd - 2; d++)
            o->batch_strides[d] = s->p.view.strides[d];
        o->row_stride = s->p.view.strides[nd - 2];
        o->col_stride = s->p.view.strides[nd - 1];
        return base;
    }
    if (pending(s) && !info(s)->materialize)
        return NULL;
    int64_t st = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t v = s->shape[d] == 1 ? 0 : st;
        if (d == nd - 1)
            o->col_stride = v;
        else if (d == nd - 2)
            o->row_stride = v;
        else
            o->batch_strides[d] = v;
        st *= s->shape[d];
    }
    return s;
}

/* Matmul operands that strides cannot describe are computed first, and a
 * materialised reshape shares its source's buffer (so the source is computed).
 * Reverse order, so that a materialised operand is decided before a view of
 * it is examined. */
static void materialize_operands(graph_node **order, int64_t count) {
    for (int64_t i = count - 1; i >= 0; i--) {
        graph_node *x = order[i];
        if (x->op != GRAPH_MATMUL)
            continue;
        for (int s = 0; s < 2; s++) {
            lower_operand o;
            graph_node *src = x->src[s];
            if (operand_base(src, &o))
                continue;
            if (src->op == GRAPH_VIEW && pending(src) && !src->p.view.masked)
                info(src->src[0])->materialize = true;
            else
                info(src)->materialize = true;
        }
    }
    for (int64_t i = count - 1; i >= 0; i--) {
        graph_node *x = order[i];
        if (x->op == GRAPH_VIEW && info(x)->materialize && graph_view_is_reshape(x)) {
            info(x)->alias = true;
            if (pending(x->src[0]))
                info(x->src[0])->materialize = true;
        }
    }
}

/* Applies the rules that depend on other nodes' decisions until none
 * materialises anything more. */
static void settle(graph_node **order, int64_t count) {
    do {
        materialize_operands(order, count);
    } while (settle_kernels(order, count));
}

static bool elementwise(graph_op op) {
    return graph_op_is_unary(op) || graph_op_is_binary(op) || op == GRAPH_WHERE;
}

/* Bias and activation epilogues: a matmul whose one consumer is elementwise
 * is computed inside the kernel of that consumer's root when every node from
 * the matmul up to the root is elementwise (or a reshape) over as many
 * elements, so that each output element reads the dot product of the element
 * with its own flat index. Fused nodes
 * outside row kernels have one consumer each, so that path is unique. */
static void choose_epilogues(graph_node **order, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        graph_node *m = order[i];
        node_info *mi = info(m);
        if (m->op != GRAPH_MATMUL || mi->target || mi->consumers != 1)
            continue;
        graph_node *root = info(mi->last_consumer)->owner;
        node_info *ri = info(root);
        if (ri->row || ri->repi || ri->epilogue_of || ri->alias)
            continue;
        bool ok = true;
        for (graph_node *x = mi->last_consumer; ok; x = info(x)->last_consumer) {
            /* a reshape keeps the flat index: conv2d's bias over its matmul */
            bool reshape = x->op == GRAPH_VIEW && graph_view_is_reshape(x);
            ok = (elementwise(x->op) || reshape) && graph_numel(x) == graph_numel(m) &&
                 info(x)->owner == root;
            if (x == root)
                break;
            ok = ok && info(x)->consumers == 1 && !info(x)->materialize;
        }
        if (!ok)
            continue;
        mi->materialize = false;
        mi->owner = root;
        ri->epilogue_of = m;
    }
}

/* ---- sibling kernels ---- */

static graph_node *root_of(graph_node *x) {
    node_info *xi = info(x);
    return xi->materialize ? x : xi->owner;
}

static bool add_ext(node_info *ri, graph_node *base, bool ident) {
    for (int i = 0; i < ri->next; i++)
        if (ri->ext[i].base == base) {
            ri->ext[i].ident = ri->ext[i].ident && ident;
            return true;
        }
    if (ri->next == ri->ext_cap) {
        int cap = ri->ext_cap ? ri->ext_cap * 2 : 4;
        ext_read *e = realloc(ri->ext, sizeof *e * (size_t)cap);
        if (!e)
            return false;
        ri->ext = e;
        ri->ext_cap = cap;
    }
    ri->ext[ri->next++] = (ext_read){base, ident};
    return true;
}

/* Fills each root's external reads; false when out of memory. */
static bool find_reads(graph_node **order, int64_t count) {
    for (int64_t i = count - 1; i >= 0; i--) {
        graph_node *x = order[i];
        node_info *xi = info(x);
        graph_node *c = xi->last_consumer;
        xi->ident = xi->materialize ||
                    (xi->owner && xi->consumers == 1 && info(c)->ident && elementwise(c->op));
    }
    for (int64_t i = 0; i < count; i++) {
        graph_node *x = order[i];
        graph_node *r = root_of(x);
        if (!r || (cheap(x) && !info(x)->materialize))
            continue;
        for (int j = 0; j < x->nsrc; j++) {
            graph_node *s = x->src[j];
            if (pending(s) && !info(s)->materialize && !cheap(s))
                continue; /* fused into the same kernel */
            graph_node *base = s;
            while (pending(base) && !info(base)->materialize && base->op == GRAPH_VIEW)
                base = base->src[0];
            if (!add_ext(info(r), base, base == s && info(x)->ident && elementwise(x->op)))
                return false;
            if (!pending(base))
                continue;
            node_info *bi = info(base);
            if (bi->nreaders && bi->readers[bi->nreaders - 1] == r)
                continue;
            if (bi->nreaders == bi->readers_cap) {
                int cap = bi->readers_cap ? bi->readers_cap * 2 : 4;
                graph_node **rd = realloc(bi->readers, sizeof *rd * (size_t)cap);
                if (!rd)
                    return false;
                bi->readers = rd;
                bi->readers_cap = cap;
            }
            bi->readers[bi->nreaders++] = r;
        }
    }
    return true;
}

static bool sibling_candidate(const graph_node *x) {
    const node_info *xi = info(x);
    return xi->materialize && !xi->alias && !xi->row && !xi->repi && !xi->epilogue_of &&
           elementwise(x->op);
}

/* Whether r can join the group whose members are m[0..n): it reads members
 * only at its own element index, every other kernel that reads a member runs
 * after r (the group's kernel runs where its last member is), and it shares
 * something with them worth sharing: an input, or a member's value. */
static bool can_join(graph_node *r, graph_node **m, int n, int gid) {
    node_info *ri = info(r);
    bool shares = false;
    for (int i = 0; i < ri->next; i++) {
        graph_node *b = ri->ext[i].base;
        bool member = pending(b) && info(b)->group == gid;
        if (member && !ri->ext[i].ident)
            return false;
        shares = shares || member;
        for (int k = 0; k < n && !shares; k++)
            for (int e = 0; e < info(m[k])->next && !shares; e++)
                shares = info(m[k])->ext[e].base == b;
    }
    return shares;
}

/* Whether every kernel outside the group that reads a member runs after r. */
static bool readers_after(graph_node *r, graph_node **m, int n, int gid) {
    for (int k = 0; k < n; k++) {
        node_info *mi = info(m[k]);
        for (int i = 0; i < mi->nreaders; i++) {
            node_info *xi = info(mi->readers[i]);
            if (xi->group != gid && mi->readers[i] != r && xi->pos < info(r)->pos)
                return false;
        }
    }
    return true;
}

/* Groups elementwise kernels of one shape that share inputs into
 * multi-output kernels, greedily in post-order; a few recent groups are
 * tried, which bounds the cost on large graphs. */
static bool choose_siblings(graph_node **order, int64_t count) {
    if (!find_reads(order, count))
        return false;
    enum { RECENT = 8, MAX_MEMBERS = 8 };
    graph_node *members[RECENT][MAX_MEMBERS];
    int nmembers[RECENT] = {0}, gids[RECENT], ngroups = 0, next_gid = 0;
    for (int64_t i = 0; i < count; i++) {
        graph_node *r = order[i];
        if (!sibling_candidate(r))
            continue;
        int joined = -1;
        for (int g = 0; g < ngroups && joined < 0; g++) {
            graph_node *first = members[g][0];
            if (nmembers[g] == MAX_MEMBERS || !same_shape(first, r))
                continue;
            if (can_join(r, members[g], nmembers[g], gids[g]) &&
                readers_after(r, members[g], nmembers[g], gids[g]))
                joined = g;
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
        info(r)->group = gids[joined];
    }
    /* Groups of one are no groups; the last member lowers the others. */
    int *size = calloc((size_t)next_gid + 1, sizeof *size);
    if (!size)
        return false;
    for (int64_t i = 0; i < count; i++)
        if (info(order[i])->group >= 0)
            size[info(order[i])->group]++;
    for (int64_t i = count - 1; i >= 0; i--) {
        node_info *xi = info(order[i]);
        if (xi->group < 0)
            continue;
        if (size[xi->group] == 1) {
            xi->group = -1;
            continue;
        }
        xi->group_last = size[xi->group] > 0;
        if (xi->group_last)
            size[xi->group] = -size[xi->group];
    }
    free(size);
    return true;
}

static void mark(graph_node **order, int64_t count, int n, graph_node *const *targets,
                 bool fuse) {
    for (int r = 0; r < n; r++)
        if (pending(targets[r]))
            info(targets[r])->materialize = info(targets[r])->target = true;
    for (int64_t i = 0; i < count; i++) {
        graph_node *x = order[i];
        node_info *xi = info(x);
        if (x->op == GRAPH_MATMUL)
            xi->materialize = true;
        if (!fuse && graph_op_computes(x->op))
            xi->materialize = true;
    }
    settle(order, count);
    if (fuse)
        choose_epilogues(order, count);
    /* Siblings only save work; without memory for them, kernels stay single. */
    if (fuse && !choose_siblings(order, count))
        for (int64_t i = 0; i < count; i++)
            info(order[i])->group = -1;
}

/* ---- lowering one kernel ---- */

typedef struct ix {
    int ndim;
    int d[KILN_MAX_DIMS];
    int flat; /* the row-major flat index over the node's shape, or -1 */
} ix;

typedef struct memo_entry {
    const graph_node *node; /* NULL: an empty slot */
    ix at;
    int valid;
    int result;
} memo_entry;

typedef struct emitter {
    ir_builder b;
    lower_kernel *k;
    /* A kernel with reduced elements: the reduced index, its axes, and its
     * decomposition per axis of the kernel's domain. */
    int ridx;
    uint32_t axes;
    int rd[KILN_MAX_DIMS];
    graph_node *retry; /* a fused node that must be materialised after all */
    graph_node *epilogue_of; /* the matmul whose dot products this kernel finishes */
    int ninputs_cap;
    memo_entry *memo; /* open addressing, a power of two in size */
    int nmemo, memo_cap;
    graph_node **fused; /* the nodes computed in the kernel, each once */
    int nfused, fused_cap;
    bool failed;
} emitter;

/* Only the kernel's description reads the list: out of memory, it lists fewer. */
static void note_fused(emitter *e, graph_node *n) {
    for (int i = 0; i < e->nfused; i++)
        if (e->fused[i] == n)
            return;
    if (e->nfused == e->fused_cap) {
        int cap = e->fused_cap ? e->fused_cap * 2 : 16;
        graph_node **f = realloc(e->fused, sizeof *f * (size_t)cap);
        if (!f)
            return;
        e->fused = f;
        e->fused_cap = cap;
    }
    e->fused[e->nfused++] = n;
}

static int input_slot(emitter *e, graph_node *n) {
    lower_kernel *k = e->k;
    for (int i = 0; i < k->ninputs; i++)
        if (k->inputs[i] == n)
            return k->nouts + i; /* the outputs come first */
    if (k->ninputs == e->ninputs_cap) {
        int cap = e->ninputs_cap ? e->ninputs_cap * 2 : 8;
        graph_node **in = realloc(k->inputs, sizeof *in * (size_t)cap);
        if (!in) {
            e->failed = true;
            return 1;
        }
        k->inputs = in;
        e->ninputs_cap = cap;
    }
    k->inputs[k->ninputs++] = graph_ref(n);
    return k->nouts + k->ninputs - 1;
}

static int flatten(emitter *e, const ix *at, int ndim, const int64_t *shape) {
    if (at->flat >= 0)
        return at->flat;
    int f = ir_index(&e->b, 0);
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        f = ir_iadd(&e->b, f, ir_imul(&e->b, at->d[d], st));
        st *= shape[d];
    }
    return f;
}

static ix unflatten(emitter *e, int flat, int ndim, const int64_t *shape) {
    ix r = {.ndim = ndim, .flat = flat};
    int64_t st = 1;
    /* With a size-0 axis no element exists and no index is ever used; size 1
     * keeps the arithmetic free of division by zero. */
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t sd = shape[d] ? shape[d] : 1;
        int q = ir_idiv(&e->b, flat, st);
        r.d[d] = d == 0 ? q : ir_imod(&e->b, q, sd);
        st *= sd;
    }
    return r;
}

static int emit(emitter *e, graph_node *n, const ix *at, int valid);

static int emit_view(emitter *e, graph_node *n, const ix *at, int valid) {
    const graph_view *v = &n->p.view;
    graph_node *s = n->src[0];
    int inside = -1;
    if (v->masked) {
        for (int d = 0; d < n->ndim; d++) {
            if (v->mask_lo[d] > 0)
                inside = ir_and(&e->b, inside,
                                ir_ilt(&e->b, ir_index(&e->b, v->mask_lo[d] - 1), at->d[d]));
            if (v->mask_hi[d] < n->shape[d])
                inside = ir_and(&e->b, inside,
                                ir_ilt(&e->b, at->d[d], ir_index(&e->b, v->mask_hi[d])));
        }
    }
    int flat;
    if (at->flat >= 0 && graph_view_is_reshape(n)) {
        flat = at->flat;
    } else {
        flat = ir_index(&e->b, v->offset);
        for (int d = 0; d < n->ndim; d++)
            if (v->strides[d])
                flat = ir_iadd(&e->b, flat, ir_imul(&e->b, at->d[d], v->strides[d]));
    }
    ix sat = unflatten(e, flat, s->ndim, s->shape);
    int val = emit(e, s, &sat, ir_and(&e->b, valid, inside));
    if (inside < 0)
        return val;
    return ir_where(&e->b, n->dtype, inside, val, ir_imm(&e->b, n->dtype, (graph_scalar){.i = 0}));
}

static int emit_cat(emitter *e, graph_node *n, const ix *at, int valid) {
    int ax = n->p.axis;
    int result = -1;
    int64_t hi = n->shape[ax];
    for (int j = n->nsrc - 1; j >= 0; j--) {
        graph_node *s = n->src[j];
        int64_t lo = hi - s->shape[ax];
        ix sat = *at;
        sat.flat = -1;
        sat.d[ax] = ir_iadd(&e->b, at->d[ax], ir_index(&e->b, -lo));
        int here = lo > 0 ? ir_ilt(&e->b, ir_index(&e->b, lo - 1), at->d[ax]) : -1;
        int below = ir_ilt(&e->b, at->d[ax], ir_index(&e->b, hi));
        int val = emit(e, s, &sat, ir_and(&e->b, valid, ir_and(&e->b, here, below)));
        result = result < 0 ? val : ir_where(&e->b, n->dtype, below, val, result);
        hi = lo;
    }
    return result;
}

/* A reduction inside the kernel: it reduces the kernel's reduced elements of
 * its source at the row `at` names. The row must not depend on the reduced
 * index (a view in between that moves axes would make it so); then the
 * reduction is materialised instead and the program lowered again. */
static int emit_fused_reduce(emitter *e, graph_node *n, const ix *at, int valid) {
    ir_builder *b = &e->b;
    graph_node *s = n->src[0];
    bool ok = e->ridx >= 0 && n->p.axes == e->axes && (valid < 0 || !b->ins[valid].inner);
    ix sat = {.ndim = s->ndim, .flat = -1};
    for (int d = 0; ok && d < s->ndim; d++) {
        if (n->p.axes & (1u << d))
            sat.d[d] = e->rd[d];
        else if (b->ins[at->d[d]].inner)
            ok = false;
        else
            sat.d[d] = at->d[d];
    }
    if (!ok) {
        e->retry = n;
        e->failed = true;
        return 0;
    }
    return ir_reduce(b, n->op, n->dtype, emit(e, s, &sat, valid), e->ridx);
}

static bool is_output(const lower_kernel *k, const graph_node *n) {
    for (int o = 0; o < k->nouts; o++)
        if (k->outs[o] == n)
            return true;
    return false;
}

static int emit_node(emitter *e, graph_node *n, const ix *at, int valid) {
    ir_builder *b = &e->b;
    if (n == e->epilogue_of)
        return ir_acc(b, n->dtype);
    if (!pending(n) || (info(n)->materialize && !is_output(e->k, n))) {
        int slot = input_slot(e, n);
        return ir_load(b, n->dtype, slot, flatten(e, at, n->ndim, n->shape), valid);
    }
    note_fused(e, n);
    switch (n->op) {
    case GRAPH_CONST:
        return ir_imm(b, n->dtype, n->p.value);
    case GRAPH_ARANGE: {
        int i = ir_alu(b, GRAPH_CAST, KILN_F64, at->d[0], -1);
        int v = ir_alu(b, GRAPH_MUL, KILN_F64, i, ir_imm(b, KILN_F64, (graph_scalar){.f = n->p.step}));
        v = ir_alu(b, GRAPH_ADD, KILN_F64, ir_imm(b, KILN_F64, n->p.value), v);
        return n->dtype == KILN_F64 ? v : ir_alu(b, GRAPH_CAST, n->dtype, v, -1);
    }
    case GRAPH_RAND:
    case GRAPH_RANDN:
        return ir_rand(b, n->op, n->dtype, flatten(e, at, n->ndim, n->shape), n->p.seed);
    case GRAPH_VIEW:
        return emit_view(e, n, at, valid);
    case GRAPH_CAT:
        return emit_cat(e, n, at, valid);
    case GRAPH_WHERE: {
        int c = emit(e, n->src[0], at, valid);
        int x = emit(e, n->src[1], at, valid);
        int y = emit(e, n->src[2], at, valid);
        return ir_where(b, n->dtype, c, x, y);
    }
    default:
        break;
    }
    if (graph_op_is_unary(n->op))
        return ir_alu(b, n->op, n->dtype, emit(e, n->src[0], at, valid), -1);
    if (graph_op_is_binary(n->op)) {
        int x = emit(e, n->src[0], at, valid);
        int y = emit(e, n->src[1], at, valid);
        return ir_alu(b, n->op, n->dtype, x, y);
    }
    if (graph_op_is_reduce(n->op))
        return emit_fused_reduce(e, n, at, valid);
    /* A matmul whose epilogue kernel changed since it was chosen: it becomes
     * its own kernel and the program is lowered again. */
    e->retry = n;
    e->failed = true;
    return 0;
}


static bool same_ix(const ix *a, const ix *b) {
    return a->ndim == b->ndim && a->flat == b->flat &&
           !memcmp(a->d, b->d, sizeof(int) * (size_t)a->ndim);
}

static uint64_t memo_hash(const graph_node *n, const ix *at, int valid) {
    uint64_t h = (uint64_t)(uintptr_t)n * 0x9E3779B97F4A7C15ull ^ (uint64_t)(valid + 2);
    h = (h ^ (uint64_t)(at->flat + 2)) * 0xBF58476D1CE4E5B9ull;
    for (int d = 0; d < at->ndim; d++)
        h = (h ^ (uint64_t)at->d[d]) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

static memo_entry *memo_slot(memo_entry *memo, int cap, const graph_node *n, const ix *at,
                             int valid) {
    size_t i = memo_hash(n, at, valid) & (size_t)(cap - 1);
    while (memo[i].node &&
           !(memo[i].node == n && memo[i].valid == valid && same_ix(&memo[i].at, at)))
        i = (i + 1) & (size_t)(cap - 1);
    return &memo[i];
}

/* Keeps the table at most half full; false when out of memory. */
static bool memo_reserve(emitter *e) {
    if ((e->nmemo + 1) * 2 <= e->memo_cap)
        return true;
    int cap = e->memo_cap ? e->memo_cap * 2 : 64;
    memo_entry *m = calloc((size_t)cap, sizeof *m);
    if (!m)
        return false;
    for (int i = 0; i < e->memo_cap; i++)
        if (e->memo[i].node)
            *memo_slot(m, cap, e->memo[i].node, &e->memo[i].at, e->memo[i].valid) = e->memo[i];
    free(e->memo);
    e->memo = m;
    e->memo_cap = cap;
    return true;
}

/* Memoised, so that a node read twice in one kernel (x*x) is lowered once. */
static int emit(emitter *e, graph_node *n, const ix *at, int valid) {
    if (e->memo_cap) {
        memo_entry *m = memo_slot(e->memo, e->memo_cap, n, at, valid);
        if (m->node)
            return m->result;
    }
    int r = emit_node(e, n, at, valid);
    if (!memo_reserve(e)) {
        e->failed = true;
        return r;
    }
    *memo_slot(e->memo, e->memo_cap, n, at, valid) = (memo_entry){n, *at, valid, r};
    e->nmemo++;
    return r;
}

static void name_kernel(lower_kernel *k) {
    const graph_node *n = k->out;
    char dims[56] = "";
    size_t len = 0;
    if (k->kind == LOWER_MATMUL) {
        snprintf(dims, sizeof dims, "%lldx%lldx%lld", (long long)k->n, (long long)k->k,
                 (long long)k->m);
    } else {
        for (int d = 0; d < n->ndim && len < sizeof dims - 24; d++)
            len += (size_t)snprintf(dims + len, sizeof dims - len, "%s%lld", d ? "x" : "",
                                    (long long)n->shape[d]);
        if (!n->ndim)
            snprintf(dims, sizeof dims, "1");
    }
    const graph_node *shown = n;
    while (shown->op == GRAPH_VIEW && pending(shown->src[0]) && !info(shown->src[0])->materialize)
        shown = shown->src[0];
    const graph_node *mm = info(n)->epilogue_of;
    if (mm) {
        /* matmul_add_relu_...: the epilogue's ops from the matmul up */
        char ops[32] = "matmul";
        size_t at = strlen(ops);
        for (const graph_node *x = info(mm)->last_consumer; at < sizeof ops - 1;
             x = info(x)->last_consumer) {
            at += (size_t)snprintf(ops + at, sizeof ops - at, "_%s", graph_op_name(x->op));
            if (x == n)
                break;
        }
        snprintf(k->name, sizeof k->name, "%s_%s", ops, dims);
        return;
    }
    snprintf(k->name, sizeof k->name, "%s_%s%s", graph_op_name(shown->op),
             k->kind == LOWER_REDUCE ? "r" : k->kind == LOWER_ELEMENTWISE ? "e" : "", dims);
    if (k->nouts > 1) {
        size_t len = strlen(k->name);
        snprintf(k->name + len, sizeof k->name - len, "_%douts", k->nouts);
    }
}

/* A matmul kernel computes x's dot products; its root (k->out) is x itself or
 * an elementwise epilogue over them. */
static bool lower_matmul(lower_kernel *k, emitter *e, graph_node *x) {
    k->kind = LOWER_MATMUL;
    k->nbatch = x->ndim - 2;
    memcpy(k->batch, x->shape, sizeof(int64_t) * (size_t)k->nbatch);
    k->n = x->shape[x->ndim - 2];
    k->m = x->shape[x->ndim - 1];
    k->k = x->src[0]->shape[x->ndim - 1];
    graph_node *ab = operand_base(x->src[0], &k->a), *bb = operand_base(x->src[1], &k->b);
    if (!ab || !bb)
        return false;
    k->a.buf = input_slot(e, ab);
    k->b.buf = input_slot(e, bb);
    k->numel = graph_numel(x);
    k->rnumel = k->k;
    int gidx = ir_gidx(&e->b, k->numel);
    k->store = gidx;
    e->epilogue_of = x;
    note_fused(e, x);
    ix oat = unflatten(e, gidx, k->out->ndim, k->out->shape);
    k->result = emit(e, k->out, &oat, -1);
    return true;
}

/* Sets up the reduced index of a kernel over domain `dom` reducing `axes`:
 * RIDX, its decomposition, and the domain index of output row g; returns
 * whether the reduced axes are the trailing ones (then the domain's flat
 * index is g * rnumel + r). */
static bool reduced_index(emitter *e, const graph_node *dom, uint32_t axes, int gidx,
                          const ix *rowat, ix *at) {
    ir_builder *b = &e->b;
    lower_kernel *k = e->k;
    int nred = 0;
    int64_t rshape[KILN_MAX_DIMS] = {0};
    bool trailing = true;
    for (int d = 0; d < dom->ndim; d++) {
        if (axes & (1u << d)) {
            rshape[nred++] = dom->shape[d];
            k->rnumel *= dom->shape[d];
        } else if (nred > 0 && dom->shape[d] != 1) {
            trailing = false;
        }
    }
    e->ridx = ir_ridx(b, k->rnumel);
    e->axes = axes;
    ix rat = unflatten(e, e->ridx, nred, rshape);
    *at = (ix){.ndim = dom->ndim, .flat = -1};
    for (int d = 0, r = 0; d < dom->ndim; d++) {
        e->rd[d] = (axes & (1u << d)) ? rat.d[r++] : -1;
        at->d[d] = (axes & (1u << d)) ? e->rd[d] : rowat->d[d];
    }
    if (trailing)
        at->flat = ir_iadd(b, ir_imul(b, gidx, k->rnumel), e->ridx);
    return trailing;
}

static bool lower_kernel_ir(lower_kernel *k, emitter *e) {
    graph_node *out = k->out;
    ir_builder *b = &e->b;
    node_info *oi = info(out);
    k->rnumel = 1;
    e->ridx = -1;
    if (graph_op_is_reduce(out->op)) {
        k->kind = LOWER_REDUCE;
        k->numel = graph_numel(out);
        int gidx = ir_gidx(b, k->numel);
        ix oat = unflatten(e, gidx, out->ndim, out->shape), sat;
        reduced_index(e, out->src[0], out->p.axes, gidx, &oat, &sat);
        k->result = ir_reduce(b, out->op, out->dtype, emit(e, out->src[0], &sat, -1), e->ridx);
        k->store = gidx;
    } else if (oi->repi) {
        /* one program instance per output element, which reduces each fused
         * reduction's row before the elementwise ops over the results */
        k->kind = LOWER_REDUCE;
        k->numel = graph_numel(out);
        int gidx = ir_gidx(b, k->numel);
        ix oat = unflatten(e, gidx, out->ndim, out->shape);
        ix rowat = {.ndim = oi->rdom->ndim, .flat = -1}, at;
        for (int d = 0; d < rowat.ndim; d++)
            rowat.d[d] = gidx; /* unused: each reduction names its own row */
        reduced_index(e, oi->rdom, oi->raxes, gidx, &rowat, &at);
        k->result = emit(e, out, &oat, -1);
        k->store = gidx;
    } else if (oi->row) {
        /* A row kernel: one program instance per row, which passes over the
         * row once per fused reduction and once more to store. */
        k->kind = LOWER_REDUCE;
        int64_t rows[KILN_MAX_DIMS];
        for (int d = 0; d < out->ndim; d++)
            rows[d] = (oi->row_axes & (1u << d)) ? 1 : out->shape[d];
        k->numel = graph_shape_numel(out->ndim, rows);
        int gidx = ir_gidx(b, k->numel);
        ix rowat = unflatten(e, gidx, out->ndim, rows), at;
        reduced_index(e, out, oi->row_axes, gidx, &rowat, &at);
        k->result = emit(e, out, &at, -1);
        k->store = flatten(e, &at, out->ndim, out->shape);
    } else {
        /* siblings too: every output is elementwise over the same shape */
        k->kind = LOWER_ELEMENTWISE;
        k->numel = graph_numel(out);
        int gidx = ir_gidx(b, k->numel);
        ix oat = unflatten(e, gidx, out->ndim, out->shape);
        for (int o = 0; o < k->nouts; o++)
            k->results[o] = emit(e, k->outs[o], &oat, -1);
        k->result = k->results[0];
        k->store = gidx;
    }
    return !b->failed && !e->failed;
}

static bool lower_alias(lower_kernel *k, emitter *e) {
    k->kind = LOWER_ALIAS;
    k->numel = graph_numel(k->out);
    k->rnumel = 1;
    input_slot(e, k->out->src[0]);
    return true;
}

/* Lowers the kernel whose outputs are outs[0..n): one root, or siblings. */
static bool lower_one(lower_kernel *k, graph_node **outs, int n, graph_node **retry) {
    emitter e;
    memset(&e, 0, sizeof e);
    ir_init(&e.b);
    e.k = k;
    e.ridx = -1;
    graph_node *out = outs[0];
    k->outs = malloc(sizeof *k->outs * (size_t)n);
    k->results = calloc((size_t)n, sizeof *k->results);
    if (!k->outs || !k->results) {
        free(k->outs);
        k->outs = NULL;
        k->out = graph_ref(out);
        e.failed = true;
    } else {
        for (int o = 0; o < n; o++)
            k->outs[o] = graph_ref(outs[o]);
        k->nouts = n;
        k->out = k->outs[0];
    }
    graph_node *mm = out->op == GRAPH_MATMUL ? out : info(out)->epilogue_of;
    bool ok = e.failed          ? false
              : info(out)->alias ? lower_alias(k, &e)
              : mm               ? lower_matmul(k, &e, mm)
                                 : lower_kernel_ir(k, &e);
    ok = ok && !e.failed && !e.b.failed;
    if (ok && k->nouts == 1)
        k->results[0] = k->result;
    k->ins = e.b.ins;
    k->nins = e.b.n;
    e.b.ins = NULL;
    ir_free(&e.b);
    ok = ok && lower_rules(k);
    free(e.memo);
    lower_describe_fused(k, e.nfused, e.fused);
    free(e.fused);
    *retry = e.retry;
    k->tile = k->kind == LOWER_ELEMENTWISE ? 1024 : 1;
    if (ok)
        name_kernel(k);
    return ok;
}

void lower_program_free(lower_program *p) {
    if (!p)
        return;
    for (int i = 0; i < p->nkernels; i++) {
        lower_kernel *k = &p->kernels[i];
        if (k->outs)
            for (int j = 0; j < k->nouts; j++)
                graph_unref(k->outs[j]);
        else
            graph_unref(k->out);
        free(k->outs);
        free(k->results);
        for (int j = 0; j < k->ninputs; j++)
            graph_unref(k->inputs[j]);
        free(k->inputs);
        free(k->ins);
    }
    free(p->kernels);
    free(p);
}

/* Lowers every materialised node to a kernel; NULL when out of memory, or
 * with *retry set when a fused reduction turned out not to fit its kernel. */
static lower_program *lower_all(graph_node **order, int64_t count, graph_node **retry) {
    lower_program *p = calloc(1, sizeof *p);
    int nk = 0;
    for (int64_t i = 0; i < count; i++)
        nk += info(order[i])->materialize;
    bool ok = p && (p->kernels = calloc((size_t)(nk ? nk : 1), sizeof *p->kernels));
    for (int64_t i = 0; ok && i < count; i++) {
        node_info *xi = info(order[i]);
        if (!xi->materialize || (xi->group >= 0 && !xi->group_last))
            continue;
        graph_node *outs[8] = {order[i]};
        int n = 1;
        if (xi->group >= 0) {
            n = 0;
            for (int64_t j = 0; j <= i; j++)
                if (info(order[j])->group == xi->group)
                    outs[n++] = order[j];
        }
        lower_kernel *k = &p->kernels[p->nkernels];
        ok = lower_one(k, outs, n, retry);
        /* Names are unique within a program: they are its symbols. */
        size_t len = strlen(k->name);
        if (len > sizeof k->name - 16)
            k->name[len = sizeof k->name - 16] = 0;
        snprintf(k->name + len, sizeof k->name - len, "_k%d", p->nkernels++);
    }
    if (!ok) {
        lower_program_free(p);
        return NULL;
    }
    return p;
}

lower_program *lower_schedule(int n, graph_node *const *targets, bool fuse) {
    graph_node **order = NULL;
    int64_t count = 0;
    lower_program *p = NULL;
    if (collect(n, targets, &order, &count)) {
        mark(order, count, n, targets, fuse);
        graph_node *retry = NULL;
        while (!(p = lower_all(order, count, &retry)) && retry) {
            info(retry)->materialize = true;
            for (int64_t i = 0; i < count; i++)
                if (info(order[i])->epilogue_of == retry)
                    info(order[i])->epilogue_of = NULL;
            settle(order, count);
            retry = NULL;
        }
    }
    for (int64_t i = 0; i < count; i++) {
        node_info *xi = info(order[i]);
        if (xi) {
            free(xi->ext);
            free(xi->readers);
        }
        free(xi);
        order[i]->scratch = NULL;
    }
    free(order);
    return p;
}
