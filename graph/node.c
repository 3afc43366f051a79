/* node.c — graph nodes' life: the graph context, reference counting, buffers,
 * and the hash-consing table that makes the same op on the same sources one
 * node. */
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "graph/graph.h"
#include "graph/internal.h"

struct graph_ctx {
    int64_t live;
    int64_t next_id;
    graph_node **table;
    size_t cap;   /* power of two */
    size_t count; /* interned nodes */
    graph_comm comm;
    bool has_comm;
};

graph_ctx *graph_ctx_new(void) {
    graph_ctx *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->cap = 1024;
    g->table = calloc(g->cap, sizeof *g->table);
    if (!g->table) {
        free(g);
        return NULL;
    }
    return g;
}

void graph_ctx_free(graph_ctx *g) {
    if (!g)
        return;
    free(g->table);
    free(g);
}

int64_t graph_ctx_live_nodes(const graph_ctx *g) { return g ? g->live : 0; }

void graph_ctx_set_comm(graph_ctx *g, const graph_comm *c) {
    g->has_comm = c != NULL;
    if (c)
        g->comm = *c;
}

const graph_comm *graph_ctx_comm(const graph_ctx *g) { return g->has_comm ? &g->comm : NULL; }

int64_t graph_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

int64_t graph_numel(const graph_node *n) { return graph_shape_numel(n->ndim, n->shape); }

bool graph_is_realized(const graph_node *n) { return n->buf != NULL; }

/* ---- buffers ---- */

graph_buffer *graph_buffer_adopt(void *data, size_t nbytes, void *owner,
                                 graph_buffer_release release) {
    graph_buffer *b = malloc(sizeof *b);
    if (!b)
        return NULL;
    b->refs = 1;
    b->nbytes = nbytes;
    b->data = data;
    b->owner = owner;
    b->release = release;
    b->release_arg = owner;
    return b;
}

graph_buffer *graph_buffer_new(size_t nbytes) {
    /* aligned_alloc wants a size that is a multiple of the alignment. */
    size_t rounded = (nbytes + 63) & ~(size_t)63;
    if (rounded < nbytes)
        return NULL;
    void *data = aligned_alloc(64, rounded ? rounded : 64);
    graph_buffer *b = data ? graph_buffer_adopt(data, nbytes, NULL, NULL) : NULL;
    if (!b)
        free(data);
    return b;
}

graph_buffer *graph_buffer_ref(graph_buffer *b) {
    if (b)
        b->refs++;
    return b;
}

void graph_buffer_unref(graph_buffer *b) {
    if (b && --b->refs == 0) {
        if (b->release)
            b->release(b->release_arg, b);
        else
            free(b->data);
        free(b);
    }
}

/* ---- hashing and equality ---- */

static bool interned(const graph_node *n) { return n->op != GRAPH_BUFFER; }

/* Feeds what distinguishes a node of its op beyond op, dtype, shape and
 * sources: the hash-consing key and the captured graph's signature share it. */
void graph_feed_params(const graph_node *n, graph_feed feed, void *ctx) {
    switch (n->op) {
    case GRAPH_CONST:
        feed(ctx, &n->p.value, sizeof n->p.value);
        break;
    case GRAPH_ARANGE:
        feed(ctx, &n->p.value, sizeof n->p.value);
        feed(ctx, &n->p.step, sizeof n->p.step);
        break;
    case GRAPH_RAND:
    case GRAPH_RANDN:
        feed(ctx, &n->p.seed, sizeof n->p.seed);
        break;
    case GRAPH_VIEW:
        feed(ctx, n->p.view.strides, sizeof(int64_t) * (size_t)n->ndim);
        feed(ctx, &n->p.view.offset, sizeof n->p.view.offset);
        feed(ctx, &n->p.view.masked, sizeof n->p.view.masked);
        if (n->p.view.masked) {
            feed(ctx, n->p.view.mask_lo, sizeof(int64_t) * (size_t)n->ndim);
            feed(ctx, n->p.view.mask_hi, sizeof(int64_t) * (size_t)n->ndim);
        }
        break;
    case GRAPH_CAT:
    case GRAPH_GATHER:
        feed(ctx, &n->p.axis, sizeof n->p.axis);
        break;
    case GRAPH_SCATTER:
        feed(ctx, &n->p.axis, sizeof n->p.axis);
        feed(ctx, &n->p.reduce, sizeof n->p.reduce);
        feed(ctx, &n->p.include_self, sizeof n->p.include_self);
        break;
    case GRAPH_ATTENTION:
    case GRAPH_ATTENTION_DQ:
    case GRAPH_ATTENTION_DKV:
        feed(ctx, &n->p.scale, sizeof n->p.scale);
        feed(ctx, &n->p.causal, sizeof n->p.causal);
        break;
    case GRAPH_ALL_REDUCE:
    case GRAPH_ALL_GATHER:
    case GRAPH_REDUCE_SCATTER:
    case GRAPH_BROADCAST:
        feed(ctx, &n->p.axis, sizeof n->p.axis);
        feed(ctx, &n->p.reduce, sizeof n->p.reduce);
        feed(ctx, &n->p.root, sizeof n->p.root);
        break;
    default:
        if (graph_op_is_reduce(n->op))
            feed(ctx, &n->p.axes, sizeof n->p.axes);
        break;
    }
}

static void feed_xxh3(void *st, const void *p, size_t len) { XXH3_64bits_update(st, p, len); }

static uint64_t node_hash(const graph_node *n) {
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    int head[4] = {(int)n->op, (int)n->dtype, n->ndim, n->nsrc};
    XXH3_64bits_update(&st, head, sizeof head);
    XXH3_64bits_update(&st, n->shape, sizeof(int64_t) * (size_t)n->ndim);
    XXH3_64bits_update(&st, n->src, sizeof(graph_node *) * (size_t)n->nsrc);
    graph_feed_params(n, feed_xxh3, &st);
    return XXH3_64bits_digest(&st);
}

static bool same_dims(int ndim, const int64_t *a, const int64_t *b) {
    return memcmp(a, b, sizeof(int64_t) * (size_t)ndim) == 0;
}

static bool node_equal(const graph_node *a, const graph_node *b) {
    if (a->op != b->op || a->dtype != b->dtype || a->ndim != b->ndim || a->nsrc != b->nsrc)
        return false;
    if (!same_dims(a->ndim, a->shape, b->shape))
        return false;
    for (int i = 0; i < a->nsrc; i++)
        if (a->src[i] != b->src[i])
            return false;
    switch (a->op) {
    case GRAPH_CONST:
        return memcmp(&a->p.value, &b->p.value, sizeof a->p.value) == 0;
    case GRAPH_ARANGE:
        return memcmp(&a->p.value, &b->p.value, sizeof a->p.value) == 0 &&
               memcmp(&a->p.step, &b->p.step, sizeof a->p.step) == 0;
    case GRAPH_RAND:
    case GRAPH_RANDN:
        return a->p.seed == b->p.seed;
    case GRAPH_VIEW:
        if (a->p.view.offset != b->p.view.offset || a->p.view.masked != b->p.view.masked ||
            !same_dims(a->ndim, a->p.view.strides, b->p.view.strides))
            return false;
        return !a->p.view.masked || (same_dims(a->ndim, a->p.view.mask_lo, b->p.view.mask_lo) &&
                                     same_dims(a->ndim, a->p.view.mask_hi, b->p.view.mask_hi));
    case GRAPH_CAT:
    case GRAPH_GATHER:
        return a->p.axis == b->p.axis;
    case GRAPH_SCATTER:
        return a->p.axis == b->p.axis && a->p.reduce == b->p.reduce &&
               a->p.include_self == b->p.include_self;
    case GRAPH_ATTENTION:
    case GRAPH_ATTENTION_DQ:
    case GRAPH_ATTENTION_DKV:
        return memcmp(&a->p.scale, &b->p.scale, sizeof a->p.scale) == 0 &&
               a->p.causal == b->p.causal;
    case GRAPH_ALL_REDUCE:
    case GRAPH_ALL_GATHER:
    case GRAPH_REDUCE_SCATTER:
    case GRAPH_BROADCAST:
        return a->p.axis == b->p.axis && a->p.reduce == b->p.reduce && a->p.root == b->p.root;
    default:
        return !graph_op_is_reduce(a->op) || a->p.axes == b->p.axes;
    }
}

static void table_remove(graph_ctx *g, graph_node *n) {
    graph_node **pp = &g->table[n->hash & (g->cap - 1)];
    while (*pp && *pp != n)
        pp = &(*pp)->hnext;
    if (*pp) {
        *pp = n->hnext;
        g->count--;
    }
    n->hnext = NULL;
}

/* Grows the table when it gets dense; a failed grow only costs speed. */
static void table_maybe_grow(graph_ctx *g) {
    if (g->count < g->cap)
        return;
    size_t cap = g->cap * 2;
    graph_node **t = calloc(cap, sizeof *t);
    if (!t)
        return;
    for (size_t i = 0; i < g->cap; i++) {
        graph_node *n = g->table[i];
        while (n) {
            graph_node *next = n->hnext;
            n->hnext = t[n->hash & (cap - 1)];
            t[n->hash & (cap - 1)] = n;
            n = next;
        }
    }
    free(g->table);
    g->table = t;
    g->cap = cap;
}

graph_node *graph_intern(graph_ctx *g, const graph_node *proto) {
    uint64_t h = 0;
    if (interned(proto)) {
        h = node_hash(proto);
        for (graph_node *n = g->table[h & (g->cap - 1)]; n; n = n->hnext)
            if (n->hash == h && node_equal(n, proto))
                return graph_ref(n);
    }
    graph_node *n = malloc(sizeof *n);
    if (!n)
        return NULL;
    *n = *proto;
    n->src = NULL;
    if (proto->nsrc) {
        n->src = malloc(sizeof(graph_node *) * (size_t)proto->nsrc);
        if (!n->src) {
            free(n);
            return NULL;
        }
        for (int i = 0; i < proto->nsrc; i++)
            n->src[i] = graph_ref(proto->src[i]);
    }
    n->refs = 1;
    n->g = g;
    n->id = g->next_id++;
    n->hash = h;
    n->hnext = NULL;
    n->scratch = NULL;
    graph_buffer_ref(n->buf);
    g->live++;
    if (interned(n)) {
        table_maybe_grow(g);
        size_t slot = h & (g->cap - 1);
        n->hnext = g->table[slot];
        g->table[slot] = n;
        g->count++;
    }
    return n;
}

graph_node *graph_ref(graph_node *n) {
    if (n)
        n->refs++;
    return n;
}

/* Iterative, because a long chain of ops would overflow the stack if each
 * node freed its sources recursively; dying nodes are linked through hnext,
 * which they no longer need once out of the table. */
void graph_unref(graph_node *n) {
    if (!n || --n->refs > 0)
        return;
    graph_ctx *g = n->g;
    if (interned(n))
        table_remove(g, n);
    n->hnext = NULL;
    graph_node *dying = n;
    while (dying) {
        graph_node *d = dying;
        dying = d->hnext;
        for (int i = 0; i < d->nsrc; i++) {
            graph_node *s = d->src[i];
            if (--s->refs == 0) {
                if (interned(s))
                    table_remove(g, s);
                s->hnext = dying;
                dying = s;
            }
        }
        graph_buffer_unref(d->buf);
        free(d->src);
        free(d);
        g->live--;
    }
}

void graph_forget_sources(graph_node *n) {
    if (!n->buf || n->op == GRAPH_BUFFER)
        return;
    if (interned(n))
        table_remove(n->g, n);
    graph_node **src = n->src;
    int nsrc = n->nsrc;
    n->op = GRAPH_BUFFER;
    memset(&n->p, 0, sizeof n->p);
    n->src = NULL;
    n->nsrc = 0;
    for (int i = 0; i < nsrc; i++)
        graph_unref(src[i]);
    free(src);
}

/* ---- op classes ---- */

static const char *const op_names[GRAPH_NUM_OPS] = {
    [GRAPH_BUFFER] = "buffer",   [GRAPH_CONST] = "const",     [GRAPH_ARANGE] = "arange",
    [GRAPH_RAND] = "rand",       [GRAPH_RANDN] = "randn",     [GRAPH_NEG] = "neg",
    [GRAPH_ABS] = "abs",         [GRAPH_EXP] = "exp",         [GRAPH_LOG] = "log",
    [GRAPH_SQRT] = "sqrt",       [GRAPH_RSQRT] = "rsqrt",     [GRAPH_SIN] = "sin",
    [GRAPH_COS] = "cos",         [GRAPH_TANH] = "tanh",       [GRAPH_SIGMOID] = "sigmoid",
    [GRAPH_RELU] = "relu",       [GRAPH_GELU] = "gelu",       [GRAPH_SILU] = "silu",
    [GRAPH_RECIP] = "recip",     [GRAPH_CAST] = "cast",       [GRAPH_ADD] = "add",
    [GRAPH_SUB] = "sub",         [GRAPH_MUL] = "mul",         [GRAPH_DIV] = "div",
    [GRAPH_POW] = "pow",         [GRAPH_MAXIMUM] = "maximum", [GRAPH_MINIMUM] = "minimum",
    [GRAPH_LT] = "lt",           [GRAPH_LE] = "le",           [GRAPH_GT] = "gt",
    [GRAPH_GE] = "ge",           [GRAPH_EQ] = "eq",           [GRAPH_NE] = "ne",
    [GRAPH_WHERE] = "where",     [GRAPH_SUM] = "sum",         [GRAPH_RMAX] = "max",
    [GRAPH_RMIN] = "min",        [GRAPH_ARGMAX] = "argmax",   [GRAPH_ARGMIN] = "argmin",
    [GRAPH_VIEW] = "view",       [GRAPH_CAT] = "cat",         [GRAPH_MATMUL] = "matmul",
    [GRAPH_GATHER] = "gather",    [GRAPH_SCATTER] = "scatter",
    [GRAPH_FLOOR] = "floor",     [GRAPH_CEIL] = "ceil",       [GRAPH_TRUNC] = "trunc",
    [GRAPH_ROUND] = "round",     [GRAPH_TAN] = "tan",         [GRAPH_ASIN] = "asin",
    [GRAPH_ACOS] = "acos",       [GRAPH_ATAN] = "atan",       [GRAPH_SINH] = "sinh",
    [GRAPH_COSH] = "cosh",       [GRAPH_ASINH] = "asinh",     [GRAPH_ACOSH] = "acosh",
    [GRAPH_ATANH] = "atanh",     [GRAPH_ERF] = "erf",         [GRAPH_ERFC] = "erfc",
    [GRAPH_EXPM1] = "expm1",     [GRAPH_LOG1P] = "log1p",     [GRAPH_BITNOT] = "bitnot",
    [GRAPH_BITCAST] = "bitcast",
    [GRAPH_ATAN2] = "atan2",     [GRAPH_FMOD] = "fmod",       [GRAPH_MOD] = "mod",
    [GRAPH_COPYSIGN] = "copysign", [GRAPH_BITAND] = "bitand", [GRAPH_BITOR] = "bitor",
    [GRAPH_BITXOR] = "bitxor",   [GRAPH_SHL] = "shl",         [GRAPH_SHR] = "shr",
    [GRAPH_ALL_REDUCE] = "all_reduce", [GRAPH_ALL_GATHER] = "all_gather",
    [GRAPH_REDUCE_SCATTER] = "reduce_scatter", [GRAPH_BROADCAST] = "broadcast",
    [GRAPH_ATTENTION] = "attention", [GRAPH_ATTENTION_DQ] = "attention_dq",
    [GRAPH_ATTENTION_DKV] = "attention_dkv",
};

const char *graph_op_name(graph_op op) {
    return (op >= 0 && op < GRAPH_NUM_OPS && op_names[op]) ? op_names[op] : "?";
}

bool graph_op_is_unary(graph_op op) { return op >= GRAPH_NEG && op <= GRAPH_BITCAST; }
bool graph_op_is_binary(graph_op op) { return op >= GRAPH_ADD && op <= GRAPH_NE; }
bool graph_op_is_compare(graph_op op) { return op >= GRAPH_LT && op <= GRAPH_NE; }
bool graph_op_is_reduce(graph_op op) { return op >= GRAPH_SUM && op <= GRAPH_ARGMIN; }
bool graph_op_is_collective(graph_op op) {
    return op >= GRAPH_ALL_REDUCE && op <= GRAPH_BROADCAST;
}
bool graph_op_is_attention(graph_op op) {
    return op >= GRAPH_ATTENTION && op <= GRAPH_ATTENTION_DKV;
}
bool graph_op_computes(graph_op op) {
    return op != GRAPH_VIEW && op != GRAPH_CONST && op != GRAPH_BUFFER;
}
