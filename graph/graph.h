/* graph.h — the lazy graph's face to the rest of kiln: nodes, views,
 * hash-consing and simplification, dtype arithmetic, the Philox generator and
 * the float64 reference evaluator.
 *
 * Constructors here trust their arguments: api/ checks shapes, dtypes and axes
 * and writes the user's error messages; a graph constructor only fails for
 * lack of memory (it then returns NULL). Every constructor returns a new
 * reference that the caller owns and drops with graph_unref. */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "api/kiln.h"

typedef enum graph_op {
    /* leaves */
    GRAPH_BUFFER, /* bound data: kiln_from_data, or a node once realized */
    GRAPH_CONST,  /* a 0-d constant (p.value) */
    GRAPH_ARANGE, /* 1-d: element i = p.value.f + i * p.step, converted */
    GRAPH_RAND,   /* uniform [0,1) from Philox, key p.seed, or src[0]'s (below) */
    GRAPH_RANDN,  /* standard normal from Philox, key p.seed, or src[0]'s (below) */
    /* elementwise unary: the source has the node's shape */
    GRAPH_NEG,
    GRAPH_ABS,
    GRAPH_EXP,
    GRAPH_LOG,
    GRAPH_SQRT,
    GRAPH_RSQRT,
    GRAPH_SIN,
    GRAPH_COS,
    GRAPH_TANH,
    GRAPH_SIGMOID,
    GRAPH_RELU,
    GRAPH_GELU,
    GRAPH_SILU,
    GRAPH_RECIP,
    GRAPH_FLOOR, /* rounding to an integer value: the identity on integers */
    GRAPH_CEIL,
    GRAPH_TRUNC,
    GRAPH_ROUND, /* half to even */
    GRAPH_TAN,
    GRAPH_ASIN,
    GRAPH_ACOS,
    GRAPH_ATAN,
    GRAPH_SINH,
    GRAPH_COSH,
    GRAPH_ASINH,
    GRAPH_ACOSH,
    GRAPH_ATANH,
    GRAPH_ERF,
    GRAPH_ERFC,
    GRAPH_EXPM1,
    GRAPH_LOG1P,
    GRAPH_BITNOT, /* integers: ~a; bool: !a */
    GRAPH_CAST, /* to the node's dtype from the source's */
    GRAPH_BITCAST, /* the source's bits read as the node's dtype, of the same size */
    /* elementwise binary: both sources have the node's shape and one dtype */
    GRAPH_ADD,
    GRAPH_SUB,
    GRAPH_MUL,
    GRAPH_DIV,
    GRAPH_POW,
    GRAPH_MAXIMUM,
    GRAPH_MINIMUM,
    GRAPH_ATAN2,    /* floats: atan2(a, b), the angle of the point (b, a) */
    GRAPH_FMOD,     /* a - trunc(a / b) b, exactly: the sign of a (C's fmod and %) */
    GRAPH_MOD,      /* a - floor(a / b) b: the sign of b (Python's %) */
    GRAPH_COPYSIGN, /* floats: |a| with b's sign bit */
    GRAPH_BITAND,   /* integers and bool */
    GRAPH_BITOR,
    GRAPH_BITXOR,
    GRAPH_SHL,      /* integers: a << b, 0 when b is negative or not below the width */
    GRAPH_SHR,      /* integers: a >> b, arithmetic for signed types (sign-filled when b
                       is not below the width), 0 when b is negative */
    GRAPH_LT, /* comparisons: node dtype is bool */
    GRAPH_LE,
    GRAPH_GT,
    GRAPH_GE,
    GRAPH_EQ,
    GRAPH_NE,
    GRAPH_WHERE, /* src[0] bool, src[1] and src[2] of the node's dtype */
    /* reductions over the axes in p.axes (a bit mask); reduced axes keep
     * size 1 in the node's shape */
    GRAPH_SUM,
    GRAPH_RMAX,
    GRAPH_RMIN,
    GRAPH_ARGMAX, /* i64 */
    GRAPH_ARGMIN, /* i64 */
    /* movement */
    GRAPH_VIEW,   /* p.view over src[0] read as a contiguous row-major array */
    GRAPH_CAT,    /* nsrc sources joined along p.axis, all of the node's dtype */
    GRAPH_MATMUL, /* [..., n, k] @ [..., k, m]: sources have equal batch dims */
    GRAPH_GATHER, /* src[0] data, src[1] an integer index of the node's shape (each axis but
                     p.axis at most src[0]'s size): element [.., j, ..] is
                     src[0][.., src[1][.., j, ..], ..] along p.axis, 0 where the index lies
                     outside [0, src[0]->shape[p.axis]) */
    GRAPH_SCATTER, /* src[0] the destination t (the node's shape and dtype), src[1] an integer
                      index and src[2] values of t's dtype, both of one shape that equals t's
                      off p.axis: t, then for j in order along the axis, the place
                      [.., src[1][.., j, ..], ..] combined with src[2][.., j, ..] by p.reduce
                      (GRAPH_SCATTER_ASSIGN: the last wins, or a kiln_scatter_reduction: sum,
                      prod, amax, amin; never mean). Without p.include_self, every place an
                      index points at starts from the combination's identity instead of t's
                      value. An index outside [0, t->shape[p.axis]) writes nothing. */
    /* fused scaled dot-product attention (kiln_scaled_dot_product_attention), one kernel
       that never stores the scores. Sources of one batch shape [..., ]: src[0] q [..., L, D],
       src[1] k [..., S, D], src[2] v [..., S, Dv], all of the node's dtype (f32 or f64);
       p.scale multiplies the scores, p.causal masks key j > query i. Write
       P[i][j] = exp(scale q_i.k_j - lse_i), 0 where masked, lse_i = log sum_j exp(scale q_i.k_j)
       over the unmasked keys. */
    GRAPH_ATTENTION,     /* [..., L, Dv + 1]: columns < Dv sum_j P[i][j] v_j, column Dv lse_i */
    GRAPH_ATTENTION_DQ,  /* the backward, sources q, k, v, then go [..., L, Dv] (the gradient
                            of the output), lse [..., L, 1] and delta [..., L, 1] (sum_c
                            go*o over the row, less lse's own gradient): dS[i][j] =
                            P[i][j] (go_i.v_j - delta_i); dq [..., L, D] = scale dS k */
    GRAPH_ATTENTION_DKV, /* the same sources: [..., S, D + Dv], dk = scale dSᵀ q in the first D
                            columns, dv = Pᵀ go in the rest */
    /* collectives over every rank of the graph_ctx's job (graph_comm), of one
     * source and its dtype */
    GRAPH_ALL_REDUCE,     /* reduction p.reduce over the ranks, elementwise */
    GRAPH_ALL_GATHER,     /* the ranks' sources joined along p.axis, in rank order */
    GRAPH_REDUCE_SCATTER, /* the reduction, piece `rank` of world-size pieces along p.axis */
    GRAPH_BROADCAST,      /* rank p.root's source */
    GRAPH_NUM_OPS
} graph_op;

/* A view maps the node's logical index i to src[0]'s flat index
 * offset + sum(i[d] * strides[d]), where every i[d] lies in
 * [mask_lo[d], mask_hi[d]); outside the mask the element is zero (false). */
typedef struct graph_view {
    int64_t strides[KILN_MAX_DIMS];
    int64_t offset;
    bool masked;
    int64_t mask_lo[KILN_MAX_DIMS];
    int64_t mask_hi[KILN_MAX_DIMS];
} graph_view;

/* A scalar as the reference evaluator holds it: floats (and half types) as
 * double, integers and bool as int64. */
typedef union graph_scalar {
    double f;
    int64_t i;
} graph_scalar;

/* The memory holding one realized node, row-major in its dtype. Shared by
 * reference count. A buffer belongs to the device that allocated it (owner,
 * opaque here: graph/ knows no devices); data is that device's handle of the
 * memory, which only the owner reads or writes through (on a host device, a
 * 64-byte-aligned host address). A buffer without an owner is host memory of
 * graph_buffer_new, as the reference evaluator's own results are. */
typedef struct graph_buffer graph_buffer;
typedef void (*graph_buffer_release)(void *owner, graph_buffer *b);
struct graph_buffer {
    int64_t refs;
    size_t nbytes;
    void *data;
    void *owner;                  /* the device whose memory data is (NULL: plain host memory) */
    graph_buffer_release release; /* frees data when the last reference goes; NULL: free() */
    void *release_arg; /* what release is called with: owner, unless the memory's allocator
                          outlives its device (a device's pool, jit/pool.h) */
};

typedef struct graph_ctx graph_ctx;
typedef struct graph_node graph_node;

/* Sources a node holds without a separate allocation (binary ops, where,
 * views and most others). */
#define GRAPH_SRC_INLINE 3
struct graph_node {
    /* A capture's walk reads this first cache line of each node and no
     * other (nodes are 64-byte aligned): its op and sources, whether it was
     * entered (scratch) or realized (buf), and its structure's digest. A
     * graph-cache hit on a 1000-op chain read five lines of each node
     * (shape, view parameters), more than the second-level cache holds. */
    _Alignas(64) graph_op op;
    int nsrc;
    graph_node **src;  /* src_inline when nsrc <= GRAPH_SRC_INLINE */
    graph_buffer *buf; /* set once realized; the node then reads as a leaf */
    void *scratch;     /* owned by whichever pass is running */
    /* A digest of what the node is apart from its sources (op, dtype,
     * shape, parameters), computed as it is made: a capture's signature
     * (capture.c) takes it in their place. 0 for buffer nodes. */
    uint64_t sig;
    graph_node *src_inline[GRAPH_SRC_INLINE];
    int64_t refs;
    kiln_dtype dtype;
    int ndim;
    uint64_t hash;
    graph_node *hnext; /* a dying node's link; a free node's, in its slab */
    /* Hash-consing without the table where it cannot hit (node.c): the one
     * node made while this one had no other consumer, kept out of the table;
     * whether any node was ever made from this one; whether this one is in
     * the table. */
    graph_node *pending;
    bool consumed;
    bool listed;
    bool memo; /* in its context's memo of constants broadcast (node.c) */
    graph_ctx *g;
    int64_t id; /* creation order within its graph_ctx */
    int64_t shape[KILN_MAX_DIMS];
    struct {
        graph_scalar value; /* GRAPH_CONST; GRAPH_ARANGE start (.f) */
        double step;        /* GRAPH_ARANGE */
        uint64_t seed;      /* GRAPH_RAND, GRAPH_RANDN */
        uint32_t axes;      /* reductions: bit d set = axis d reduced */
        int axis;           /* GRAPH_CAT, GRAPH_GATHER, GRAPH_ALL_GATHER, GRAPH_REDUCE_SCATTER */
        int reduce;         /* GRAPH_ALL_REDUCE, GRAPH_REDUCE_SCATTER: a kiln_reduce_op;
                               GRAPH_SCATTER: GRAPH_SCATTER_ASSIGN or a kiln_scatter_reduction */
        bool include_self;  /* GRAPH_SCATTER */
        int root;           /* GRAPH_BROADCAST */
        graph_view view;    /* GRAPH_VIEW */
        double scale;       /* GRAPH_ATTENTION* */
        bool causal;        /* GRAPH_ATTENTION* */
    } p;
};

/* ---- contexts and references ---- */
graph_ctx *graph_ctx_new(void);

/* Who runs a context's collectives: set by api/ when the context joins a
 * job (dist/'s world), absent before. The reference evaluator calls run for
 * each collective node n, with its source's data in src and n's in dst (host
 * memory, contiguous, row-major, each in its node's dtype); jit/ hands
 * whole programs' collectives to dist/ through `world` instead. */
typedef struct graph_comm {
    void *world;
    int rank, size;
    kiln_status (*run)(void *world, const graph_node *n, const void *src, void *dst,
                       char *msg, size_t cap);
} graph_comm;
/* Copies *c into g (NULL: no job). */
void graph_ctx_set_comm(graph_ctx *g, const graph_comm *c);
/* g's job, or NULL. */
const graph_comm *graph_ctx_comm(const graph_ctx *g);
/* Frees the context; every node must already be gone. */
void graph_ctx_free(graph_ctx *g);
int64_t graph_ctx_live_nodes(const graph_ctx *g);

graph_node *graph_ref(graph_node *n);
/* Drops a reference; frees the node (and, in turn, its sources) at zero. */
void graph_unref(graph_node *n);

int64_t graph_numel(const graph_node *n);
int64_t graph_shape_numel(int ndim, const int64_t *shape);
bool graph_is_realized(const graph_node *n);
const char *graph_op_name(graph_op op);
bool graph_op_is_unary(graph_op op);
bool graph_op_is_binary(graph_op op);
bool graph_op_is_compare(graph_op op);
bool graph_op_is_reduce(graph_op op);
bool graph_op_is_collective(graph_op op);
/* Whether op computes values (a kernel in eager mode): views and constants
 * do not, the op that reads them does. */
bool graph_op_computes(graph_op op);
/* Whether n is an identity: a one-source cat, the same values as its
 * source (what autograd's detach and no-grad record). */
bool graph_is_identity(const graph_node *n);

/* Turns a realized node into a plain buffer leaf and lets go of the graph
 * that computed it: for values nothing will differentiate through, such as
 * an optimiser's updates, whose history would otherwise grow by a training
 * step's graph per step. */
void graph_forget_sources(graph_node *n);

/* ---- buffers ---- */
/* An uninitialised, 64-byte-aligned buffer of nbytes (NULL on failure): every
 * producer writes all of it, so clearing it first would only cost time. */
graph_buffer *graph_buffer_new(size_t nbytes);
/* A buffer over memory that owner allocated and release frees (NULL on
 * failure, data then untouched). */
graph_buffer *graph_buffer_adopt(void *data, size_t nbytes, void *owner,
                                 graph_buffer_release release);
graph_buffer *graph_buffer_ref(graph_buffer *b);
void graph_buffer_unref(graph_buffer *b);

/* ---- constructors (each returns a new reference, NULL when out of memory) ---- */
/* A leaf bound to buf (the node takes a reference of its own). */
graph_node *graph_buffer_node(graph_ctx *g, kiln_dtype dt, int ndim, const int64_t *shape,
                              graph_buffer *buf);
graph_node *graph_const(graph_ctx *g, kiln_dtype dt, graph_scalar v);
/* A constant broadcast to a shape (a view of a 0-d constant). */
graph_node *graph_full(graph_ctx *g, kiln_dtype dt, int ndim, const int64_t *shape,
                       graph_scalar v);
graph_node *graph_arange(graph_ctx *g, kiln_dtype dt, int64_t n, double start, double step);
graph_node *graph_rand(graph_ctx *g, graph_op op, kiln_dtype dt, int ndim,
                       const int64_t *shape, uint64_t seed);
/* A random node whose Philox key is the value of key, a 0-d i64 node (a
 * bound input): the key is data, not structure, so a new seed per step
 * reuses the compiled program. */
graph_node *graph_rand_keyed(graph_node *key, graph_op op, kiln_dtype dt, int ndim,
                             const int64_t *shape);
graph_node *graph_unary(graph_op op, graph_node *a);
graph_node *graph_cast(graph_node *a, kiln_dtype dt);
/* a's bits as dt, which must have a's size (the caller checks) */
graph_node *graph_bitcast(graph_node *a, kiln_dtype dt);
graph_node *graph_binary(graph_op op, graph_node *a, graph_node *b);
graph_node *graph_where(graph_node *c, graph_node *a, graph_node *b);
/* dt is the result dtype (i64 for the arg reductions). */
graph_node *graph_reduce(graph_op op, graph_node *a, uint32_t axes, kiln_dtype dt);
graph_node *graph_cat(int n, graph_node *const *srcs, int axis);
graph_node *graph_matmul(graph_node *a, graph_node *b);
/* GRAPH_ATTENTION (srcs q, k, v) or one of its backward ops (q, k, v, go, lse,
 * delta), of shapes and dtypes as GRAPH_ATTENTION says (the caller checks). */
graph_node *graph_attention(graph_op op, int nsrc, graph_node *const *srcs, double scale,
                            bool causal);
bool graph_op_is_attention(graph_op op);
/* A gather of a along axis by index (i32, i64 or u8; index->ndim == a->ndim),
 * of index's shape and a's dtype: see GRAPH_GATHER. */
graph_node *graph_gather(graph_node *a, int axis, graph_node *index);
/* GRAPH_SCATTER's combination that is no reduction: the last element wins. */
enum { GRAPH_SCATTER_ASSIGN = -1 };
/* A scatter into t along axis by index of src's elements (see GRAPH_SCATTER:
 * index and src of one shape, equal to t's off the axis; src of t's dtype). */
graph_node *graph_scatter(graph_node *t, int axis, graph_node *index, graph_node *src, int reduce,
                          bool include_self);
/* A collective op over a's graph_ctx's job of `size` ranks: reduce (a
 * kiln_reduce_op) for an all-reduce or reduce-scatter, axis for an
 * all-gather or reduce-scatter (whose a->shape[axis] size divides), root for
 * a broadcast; the other arguments are ignored. */
graph_node *graph_collective(graph_op op, graph_node *a, int reduce, int axis, int root,
                             int size);

/* Movement ops. Each composes with a view source into one view when the
 * result can be expressed over the same base, and otherwise views the source
 * node itself (which an executor then materialises). */
graph_node *graph_reshape(graph_node *a, int ndim, const int64_t *shape);
graph_node *graph_permute(graph_node *a, const int *perm);
graph_node *graph_expand(graph_node *a, const int64_t *shape); /* same ndim */
/* a broadcast to shape (ndim >= a's; a's dims align with shape's last ones,
 * each equal or 1): one view, as graph_reshape then graph_expand would make
 * it, without the reshape's own node in between. */
graph_node *graph_broadcast(graph_node *a, int ndim, const int64_t *shape);
/* Per axis: element j of the result is element start[d] + j*step[d]. */
graph_node *graph_slice(graph_node *a, const int64_t *start, const int64_t *step,
                        const int64_t *len);
/* Zero padding: before[d] and after[d] elements on each axis. */
graph_node *graph_pad(graph_node *a, const int64_t *before, const int64_t *after);
graph_node *graph_flip(graph_node *a, uint32_t axes);
/* Sliding windows along axis (1 <= size <= its length, step >= 1, a->ndim <
 * KILN_MAX_DIMS): the axis becomes its (len - size) / step + 1 windows and a
 * new last axis of size holds each window's elements, element (.., w, .., j)
 * being a's (.., w*step + j, ..). Windows may overlap: the view then reads
 * source elements more than once. */
graph_node *graph_unfold(graph_node *a, int axis, int64_t size, int64_t step);
/* View node v's view over base, a node of v's source's shape and dtype (an
 * identity of that source). */
graph_node *graph_view_over(const graph_node *v, graph_node *base);
/* Whether a view node is a plain reshape: it reads all of its source in
 * row-major order, so its flat index is the source's. */
bool graph_view_is_reshape(const graph_node *v);

/* ---- dtypes and scalar semantics (shared by folding and the evaluator) ---- */
/* Bytes per element (0 for a value outside kiln_dtype). */
size_t graph_dtype_size(kiln_dtype dt);
/* "f32", "bf16", ... ("?" for a value outside kiln_dtype). */
const char *graph_dtype_name(kiln_dtype dt);
/* The dtype of a binary op's result (see kiln.h): bool < u8, i8 < i32 < i64 <
 * f16, bf16 < f32 < f64; f16 with bf16 gives f32, u8 with i8 gives i32. */
kiln_dtype graph_dtype_promote(kiln_dtype a, kiln_dtype b);
bool graph_dtype_is_float(kiln_dtype dt);
/* i8, i32 and i64 (u8 and bool are unsigned; floats are neither). */
bool graph_dtype_is_signed(kiln_dtype dt);
/* Rounds/wraps a scalar to what dt can hold; from_float says which member of
 * v is meaningful on input (the result is in dt's own representation). */
graph_scalar graph_scalar_convert(graph_scalar v, bool from_float, kiln_dtype dt);
graph_scalar graph_scalar_from_double(double v, kiln_dtype dt);
double graph_scalar_to_double(graph_scalar v, kiln_dtype dt);
graph_scalar graph_scalar_unary(graph_op op, kiln_dtype in, kiln_dtype out, graph_scalar a);
/* dt is the sources' dtype; comparisons give a bool (i = 0 or 1). */
graph_scalar graph_scalar_binary(graph_op op, kiln_dtype dt, graph_scalar a, graph_scalar b);
graph_scalar graph_scalar_load(const void *data, kiln_dtype dt, int64_t index);
void graph_scalar_store(void *data, kiln_dtype dt, int64_t index, graph_scalar v);
uint16_t graph_f32_to_f16(float f);
float graph_f16_to_f32(uint16_t h);
uint16_t graph_f32_to_bf16(float f);
float graph_bf16_to_f32(uint16_t h);
/* Rounds a double to the nearest f16 (bf16) value, without double rounding. */
double graph_round_f16(double v);
double graph_round_bf16(double v);

/* ---- Philox4x32-10 ---- */
void graph_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* Element `index` of kiln_rand / kiln_randn with `seed`, rounded to dt. */
double graph_rand_value(graph_op op, kiln_dtype dt, uint64_t seed, uint64_t index);

/* ---- traversal ---- */
/* The nodes below the n roots (roots included), each once, in post-order:
 * every source before its consumers. With stop_at_realized, realized nodes
 * are neither listed nor looked through. *order is malloc'd (NULL when
 * empty). Uses and clears every node's scratch; KILN_ERR_OOM on failure. */
kiln_status graph_postorder(int n, graph_node *const *roots, bool stop_at_realized,
                            graph_node ***order, int64_t *count);
/* The same walk, for a pass that works as it lists: visit(ctx, node, i) is
 * called as each node is listed as the i-th; listed nodes' scratch then holds
 * i + 1 (a node still being walked holds a mark), so that a node's sources'
 * places are known when it is visited. A visit returning false stops the walk
 * (KILN_ERR_OOM). On success the listed nodes keep their scratch for the
 * caller to clear; on failure the walk clears it. */
typedef bool (*graph_visit)(void *ctx, graph_node *n, int64_t i);
kiln_status graph_walk(int n, graph_node *const *roots, bool stop_at_realized,
                       graph_visit visit, void *ctx, graph_node ***order, int64_t *count);

/* ---- capture ---- */
/* The graph below some targets as a sync point captures it: the pending nodes
 * in post-order, then the realized nodes they read (leaves, whose buffers are
 * bound at run time), and a signature that two captures share exactly when
 * their structure is the same: ops, dtypes, shapes, parameters (views,
 * constants, seeds), how the nodes connect and which of them are the targets,
 * never the data. A compiled program is reused for every capture with its
 * signature; node i of one capture plays the part of node i of the other.
 * Each pending node enters the signature as its 64-bit digest (graph_node.sig)
 * and its sources' places, not as the bytes the digest was made from: two
 * nodes that differ share a digest with a chance of about 2^-64, the price of
 * a cache hit reading one cache line a node. */
typedef struct graph_capture {
    int64_t npending, nleaves;
    graph_node **nodes; /* npending pending nodes, then nleaves leaves */
    int ntargets;
    int64_t *targets;   /* each target's index in nodes */
    unsigned char *sig;
    size_t siglen;
} graph_capture;

kiln_status graph_capture_new(int n, graph_node *const *targets, graph_capture *c);
void graph_capture_free(graph_capture *c);

/* ---- the reference evaluator ---- */
/* Realizes the n nodes (each gets a buffer). On failure returns the status and
 * writes a message to msg; nodes already realized stay so. */
kiln_status graph_eval(int n, graph_node *const *nodes, char *msg, size_t msgcap);

/* ---- debugging ---- */
void graph_dump_dot(FILE *f, int n, graph_node *const *roots);
/* Writes a shape as "[3,4]" ("[]" when 0-d) into out. */
void graph_format_shape(char *out, size_t cap, int ndim, const int64_t *shape);

#endif /* KILN_GRAPH_H */
