/* node.c — graph nodes' life: the graph context, reference counting, buffers,
 * and the hash-consing table that makes the same op on the same sources one
 * node. */
#define _GNU_SOURCE /* madvise */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "graph/graph.h"
#include "graph/internal.h"

/* The hash-consing table is open addressing with linear probing, each slot
 * a node's hash beside the node: a lookup that misses compares hashes only
 * and touches no node, where the chained table it replaces walked nodes
 * scattered over the heap (a cache miss per link: 70% of graph_intern's time
 * while recording a 100000-op chain). At most half full; a removal shifts
 * the probe run back instead of leaving a tombstone.
 *
 * A node made from a source nothing was made from before cannot equal any
 * existing node, so it skips the table: it is kept as that source's
 * `pending` node instead, and a later node from the same source is compared
 * with it there. Every live interned node is thus in the table or the
 * pending node of one of its sources, and a lookup checks both. Along a
 * chain of ops every node is such a first consumer: its table slot, random
 * in a table of megabytes, was a cache miss when recording it and again
 * when freeing it. */
typedef struct slot {
    uint64_t hash;
    graph_node *node; /* NULL: empty */
} slot;

/* Nodes are carved from slabs and recycled through a free list: recording
 * an op made and freed a 400-byte node (and its source array) through malloc
 * each time. Under AddressSanitizer every node is malloc'd, so a use after
 * free is still caught. */
#if defined(__SANITIZE_ADDRESS__)
#define NODE_SLABS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NODE_SLABS 0
#endif
#endif
#ifndef NODE_SLABS
#define NODE_SLABS 1
#endif
enum { SLAB_NODES = 256, SMALL_SLABS = 8 };
typedef struct slab {
    struct slab *next;
    graph_node nodes[];
} slab;

/* Large blocks (a table of 100000 nodes' slots, nodes by the thousand) on
 * 2 MB pages where the kernel grants them (advice only): their 4 KB pages,
 * touched at random, cost a TLB miss on most of a long chain's ops. */
enum { HUGE_PAGE = 2 << 20 };
static void *huge_alloc(size_t bytes, bool zero) {
    void *p = NULL;
#ifdef MADV_HUGEPAGE
    size_t whole = (bytes + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
    if (bytes >= HUGE_PAGE / 2 && (p = aligned_alloc(HUGE_PAGE, whole))) {
        madvise(p, whole, MADV_HUGEPAGE);
        if (zero)
            memset(p, 0, bytes);
        return p;
    }
#endif
    /* 64-byte aligned, for the node slabs */
    size_t lines = (bytes + 63) & ~(size_t)63;
    if ((p = aligned_alloc(64, lines ? lines : 64)) && zero)
        memset(p, 0, bytes);
    return p;
}

struct graph_ctx {
    int64_t live;
    int64_t next_id;
    slot *table;
    size_t cap;   /* power of two */
    size_t count; /* interned nodes */
    slab *slabs;
    int nslabs;
    graph_node *free_nodes; /* linked through hnext */
    graph_comm comm;
    bool has_comm;
    size_t sig_hint;
    /* The constants broadcast to a shape that were asked for last, held
     * without a reference (a node leaves when it dies): every
     * kiln_*_scalar asks for one, and the table's way to it (two
     * prototypes, two hashes, two probes) was a third of recording the op. */
    graph_node *memo[8];
};

size_t *graph_ctx_sig_hint(graph_ctx *g) { return &g->sig_hint; }

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
    while (g->slabs) {
        slab *s = g->slabs;
        g->slabs = s->next;
        free(s);
    }
    free(g->table);
    free(g);
}

static graph_node *node_alloc(graph_ctx *g) {
#if NODE_SLABS
    if (!g->free_nodes) {
        /* a few small slabs, then 2 MB ones: a small graph stays small */
        size_t n = g->nslabs < SMALL_SLABS ? SLAB_NODES
                                           : (HUGE_PAGE - sizeof(slab)) / sizeof(graph_node);
        /* 64-byte aligned, as graph_node is (its first line is a walk's) */
        slab *s = g->nslabs < SMALL_SLABS ? aligned_alloc(64, sizeof *s + n * sizeof(graph_node))
                                          : huge_alloc(sizeof *s + n * sizeof(graph_node), false);
        if (!s)
            return NULL;
        g->nslabs++;
        s->next = g->slabs;
        g->slabs = s;
        for (size_t i = n; i-- > 0;) {
            s->nodes[i].hnext = g->free_nodes;
            g->free_nodes = &s->nodes[i];
        }
    }
    graph_node *n = g->free_nodes;
    g->free_nodes = n->hnext;
    /* the next node's lines, for writing: a recycled node is rarely in
     * cache, and copying a prototype into it missed on each of its 7 lines
     * (recording along a 100000-op chain 238-256 -> 209-222 ns an op) */
    if (g->free_nodes)
        for (size_t off = 0; off < sizeof(graph_node); off += 64)
            __builtin_prefetch((const char *)g->free_nodes + off, 1);
    return n;
#else
    (void)g;
    return aligned_alloc(_Alignof(graph_node), sizeof(graph_node));
#endif
}

static void node_release(graph_ctx *g, graph_node *n) {
    if (n->src != n->src_inline)
        free(n->src);
#if NODE_SLABS
    n->hnext = g->free_nodes;
    g->free_nodes = n;
#else
    (void)g;
    free(n);
#endif
}

void *(*const volatile graph_zero)(void *, int, size_t) = memset;
static void *(*const volatile graph_copy)(void *restrict, const void *restrict, size_t) = memcpy;

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

/* The interning hash: 64-bit words folded by multiply and rotate, finished
 * by a full avalanche (Stafford's mix13), so that the table's low bits
 * depend on every input bit. It only has to spread nodes within one
 * process (nothing keeps it), so it trades XXH3's streaming state (a
 * 576-byte reset per node, 10% of recording an op) for a few multiplies. */
static inline uint64_t mix_word(uint64_t h, uint64_t w) {
    h ^= w * 0x9e3779b97f4a7c15u;
    h = (h << 27) | (h >> 37);
    return h * 0xbf58476d1ce4e5b9u + 0x94d049bb133111ebu;
}

static void feed_mix(void *st, const void *p, size_t len) {
    uint64_t *h = st;
    const unsigned char *b = p;
    for (; len >= 8; len -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        *h = mix_word(*h, w);
    }
    if (len) {
        uint64_t w = 0;
        memcpy(&w, b, len);
        *h = mix_word(*h, w ^ ((uint64_t)len << 56));
    }
}

static inline uint64_t avalanche(uint64_t h) {
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9u;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebu;
    return h ^ (h >> 31);
}

/* The node's structure apart from its sources (graph_node.sig). */
static uint64_t node_sig(const graph_node *n) {
    uint64_t h = mix_word((uint64_t)n->op << 32 | (uint64_t)n->dtype,
                          (uint64_t)n->ndim << 32 | (uint64_t)n->nsrc);
    for (int d = 0; d < n->ndim; d++)
        h = mix_word(h, (uint64_t)n->shape[d]);
    graph_feed_params(n, feed_mix, &h);
    return avalanche(h);
}

/* The interning key: the structure and which nodes are the sources. */
static uint64_t node_hash(const graph_node *n, uint64_t sig) {
    uint64_t h = sig;
    for (int i = 0; i < n->nsrc; i++)
        h = mix_word(h, (uint64_t)(uintptr_t)n->src[i]);
    return avalanche(h);
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
    size_t mask = g->cap - 1, i = n->hash & mask;
    while (g->table[i].node && g->table[i].node != n)
        i = (i + 1) & mask;
    if (!g->table[i].node)
        return;
    g->count--;
    /* Backward shift: each later entry of the run whose home slot is not
     * between the hole and it moves into the hole. */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; g->table[j].node; j = (j + 1) & mask) {
        size_t home = g->table[j].hash & mask;
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            g->table[hole] = g->table[j];
            hole = j;
        }
    }
    g->table[hole].node = NULL;
}

static void table_put(slot *t, size_t mask, uint64_t h, graph_node *n) {
    size_t i = h & mask;
    while (t[i].node)
        i = (i + 1) & mask;
    t[i].hash = h;
    t[i].node = n;
}

/* Grows the table past half full; a failed grow only costs speed until the
 * table is full, where interning the node fails. */
static bool table_make_room(graph_ctx *g) {
    if (2 * (g->count + 1) <= g->cap)
        return true;
    size_t cap = g->cap * 2;
    slot *t = huge_alloc(cap * sizeof *t, true);
    if (!t)
        return g->count + 1 < g->cap;
    for (size_t i = 0; i < g->cap; i++)
        if (g->table[i].node)
            table_put(t, cap - 1, g->table[i].hash, g->table[i].node);
    free(g->table);
    g->table = t;
    g->cap = cap;
    return true;
}

graph_node *graph_intern(graph_ctx *g, const graph_node *proto) {
    uint64_t h = 0, sig = 0;
    graph_node *first = NULL; /* a source nothing was made from yet */
    if (interned(proto)) {
        sig = node_sig(proto);
        h = node_hash(proto, sig);
        for (int i = 0; i < proto->nsrc; i++) {
            graph_node *s = proto->src[i];
            if (s->pending && s->pending->hash == h && node_equal(s->pending, proto))
                return graph_ref(s->pending);
            if (!s->consumed && !first)
                first = s;
        }
        if (!first) {
            size_t mask = g->cap - 1;
            for (size_t i = h & mask; g->table[i].node; i = (i + 1) & mask)
                if (g->table[i].hash == h && node_equal(g->table[i].node, proto))
                    return graph_ref(g->table[i].node);
            if (!table_make_room(g))
                return NULL;
        }
    }
    graph_node *n = node_alloc(g);
    if (!n)
        return NULL;
    graph_copy(n, proto, sizeof *n); /* not `rep movsq`: see graph_zero */
    n->src = n->src_inline;
    if (proto->nsrc > GRAPH_SRC_INLINE) {
        n->src = malloc(sizeof(graph_node *) * (size_t)proto->nsrc);
        if (!n->src) {
            n->src = n->src_inline;
            n->nsrc = 0;
            node_release(g, n);
            return NULL;
        }
    }
    for (int i = 0; i < proto->nsrc; i++)
        n->src[i] = graph_ref(proto->src[i]);
    n->refs = 1;
    n->g = g;
    n->id = g->next_id++;
    n->hash = h;
    n->sig = sig;
    n->hnext = NULL;
    n->scratch = NULL;
    n->pending = NULL;
    n->consumed = false;
    n->listed = false;
    n->memo = false;
    graph_buffer_ref(n->buf);
    g->live++;
    if (interned(n)) {
        for (int i = 0; i < n->nsrc; i++)
            n->src[i]->consumed = true;
        if (first) {
            first->pending = n;
        } else {
            table_put(g->table, g->cap - 1, h, n);
            g->count++;
            n->listed = true;
        }
    }
    return n;
}

static unsigned memo_slot(kiln_dtype dt, const graph_scalar *v, int ndim, const int64_t *shape) {
    uint64_t bits;
    memcpy(&bits, v, sizeof bits);
    uint64_t h = (bits ^ (uint64_t)dt << 56 ^ (uint64_t)ndim << 48 ^
                  (uint64_t)(ndim ? shape[ndim - 1] : 0)) * 0x9e3779b97f4a7c15u;
    return (unsigned)(h >> 61);
}

graph_node *graph_memo_full(graph_ctx *g, kiln_dtype dt, graph_scalar v, int ndim,
                            const int64_t *shape) {
    graph_node *n = g->memo[memo_slot(dt, &v, ndim, shape)];
    if (!n || n->dtype != dt || n->ndim != ndim ||
        memcmp(n->shape, shape, sizeof(int64_t) * (size_t)ndim) ||
        memcmp(&n->src[0]->p.value, &v, sizeof v))
        return NULL;
    return graph_ref(n);
}

void graph_memo_put(graph_ctx *g, graph_node *n) {
    graph_node **slot = &g->memo[memo_slot(n->dtype, &n->src[0]->p.value, n->ndim, n->shape)];
    if (*slot == n)
        return;
    if (*slot)
        (*slot)->memo = false;
    *slot = n;
    n->memo = true;
}

/* Takes n out of hash-consing: out of the table, or off the source it is
 * pending at; and out of the memo. */
static void unlist(graph_ctx *g, graph_node *n) {
    if (n->memo) {
        for (int i = 0; i < 8; i++)
            if (g->memo[i] == n)
                g->memo[i] = NULL;
        n->memo = false;
    }
    if (n->listed) {
        table_remove(g, n);
        n->listed = false;
        return;
    }
    for (int i = 0; i < n->nsrc; i++)
        if (n->src[i]->pending == n) {
            n->src[i]->pending = NULL;
            return;
        }
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
    unlist(g, n);
    n->hnext = NULL;
    graph_node *dying = n;
    while (dying) {
        graph_node *d = dying;
        dying = d->hnext;
        for (int i = 0; i < d->nsrc; i++) {
            graph_node *s = d->src[i];
            if (--s->refs == 0) {
                unlist(g, s);
                s->hnext = dying;
                dying = s;
            }
        }
        graph_buffer_unref(d->buf);
        node_release(g, d);
        g->live--;
    }
}

void graph_forget_sources(graph_node *n) {
    if (!n->buf || n->op == GRAPH_BUFFER)
        return;
    unlist(n->g, n);
    graph_node **src = n->src;
    int nsrc = n->nsrc;
    n->op = GRAPH_BUFFER;
    memset(&n->p, 0, sizeof n->p);
    n->src = n->src_inline;
    n->nsrc = 0;
    for (int i = 0; i < nsrc; i++)
        graph_unref(src[i]);
    if (src != n->src_inline)
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
bool graph_is_identity(const graph_node *n) { return n->op == GRAPH_CAT && n->nsrc == 1; }
bool graph_op_computes(graph_op op) {
    return op != GRAPH_VIEW && op != GRAPH_CONST && op != GRAPH_BUFFER;
}
