/* api.h — what api/'s files share: the context and handle structs, error
 * handles, and argument checks that write the user's messages. */
#ifndef KILN_API_INTERNAL_H
#define KILN_API_INTERNAL_H

#include <stdarg.h>

#include "api/kiln.h"
#include "dist/dist.h"
#include "graph/graph.h"
#include "jit/jit.h"

struct kiln_tensor {
    kiln_ctx *ctx;
    graph_node *node; /* NULL when the handle carries an op error */
    kiln_status err;  /* the op error, or the failure of the last sync */
    char *msg;
    int depth; /* scope depth it belongs to */
    kiln_tensor *prev, *next;
    bool requires_grad; /* autograd: a leaf kiln_backward accumulates into */
    graph_node *grad;   /* autograd: the accumulated gradient, or NULL */
};

struct kiln_ctx {
    kiln_device device;
    kiln_mode mode;
    graph_ctx *g;
    jit_backend *rt;  /* the runtime every sync and every buffer goes through */
    jit_backend *jit; /* rt when its device runs generated code that debug output, the
                         profiler, the counters and the machine's limits describe;
                         NULL for KILN_REF (the reference evaluator) */
    int depth;
    kiln_tensor *handles; /* every live handle */
    graph_node **pending; /* values of assignments not yet realized */
    int npending, cappending;
    char last_error[512]; /* the message of the last error in this context */
    int no_grad;          /* autograd: depth of kiln_no_grad_begin */
    dist_world *world;    /* the job it joined (kiln_dist_init), or NULL */
};

/* A handle owning the reference `node` (NULL node: out of memory while
 * recording `op`, turned into an error handle). Inside a no-grad scope the
 * node is first detached (autograd treats it as a constant). In eager mode
 * the node is realized before the handle is returned. */
kiln_tensor *api_wrap(kiln_ctx *ctx, graph_node *node, const char *op);

/* A handle in an error state with a formatted message. */
kiln_tensor *api_fail(kiln_ctx *ctx, kiln_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A new handle carrying the error of t (the first error passes on). */
kiln_tensor *api_pass(const kiln_tensor *t);

/* Checks the tensor arguments of op: NULL, error state, one context. Returns
 * NULL when all are usable (and sets *ctx), else the handle to return (which
 * may itself be NULL when every argument is NULL). */
kiln_tensor *api_check(const char *op, int n, kiln_tensor *const *ts, kiln_ctx **ctx);

/* Normalises a possibly negative axis; false when out of [-ndim, ndim). */
bool api_axis(int axis, int ndim, int *out);

/* Normalises one axis argument of op over t's dims into *out; NULL when it
 * is in range, else the KILN_ERR_ARG error handle naming it and the shape. */
kiln_tensor *api_one_axis(const char *op, kiln_ctx *ctx, const graph_node *t, int axis,
                          int *out);

/* Turns (naxes, axes) into a bit mask over ndim axes; NULL or naxes 0 with
 * NULL means all. Returns NULL on success, else an error handle for op. */
kiln_tensor *api_axes(const char *op, kiln_ctx *ctx, const graph_node *t, int naxes,
                      const int *axes, uint32_t *mask);

/* Checks (ndim, dims) for a creation op; NULL when valid, else an error. */
kiln_tensor *api_check_shape(const char *op, kiln_ctx *ctx, int ndim, const int64_t *dims);

/* A C double as a value of dt the way scalar arguments convert: floats
 * round, integers truncate toward zero to int64 and then wrap to their width
 * (u8 -3 is 253, as when adding -3), bool is v != 0. */
graph_scalar api_scalar(double v, kiln_dtype dt);
/* kiln_*_scalar with s always a constant of the graph's structure, for
 * kiln's own constants (gelu's, hardswish's 3 and 6, -inf fills, a mean's
 * 1/n): they never change between steps, and a constant folds and fuses as
 * the lowering expects. The public kiln_*_scalar bind most values instead
 * (see kiln.h). */
kiln_tensor *api_add_literal(kiln_tensor *t, double s);
kiln_tensor *api_sub_literal(kiln_tensor *t, double s);
kiln_tensor *api_mul_literal(kiln_tensor *t, double s);
kiln_tensor *api_div_literal(kiln_tensor *t, double s);
kiln_tensor *api_pow_literal(kiln_tensor *t, double s);
kiln_tensor *api_maximum_literal(kiln_tensor *t, double s);
kiln_tensor *api_minimum_literal(kiln_tensor *t, double s);
kiln_tensor *api_lt_literal(kiln_tensor *t, double s);
kiln_tensor *api_le_literal(kiln_tensor *t, double s);
kiln_tensor *api_gt_literal(kiln_tensor *t, double s);
kiln_tensor *api_ge_literal(kiln_tensor *t, double s);
kiln_tensor *api_eq_literal(kiln_tensor *t, double s);
kiln_tensor *api_ne_literal(kiln_tensor *t, double s);

/* Broadcasts node shapes; false when they do not broadcast. */
bool api_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                         int64_t *out);
/* Whether shape (n, s) broadcasts to (nt, t) without enlarging it. */
bool api_broadcasts_to(int n, const int64_t *s, int nt, const int64_t *t);

/* n viewed as shape (ndim, dims), which n's shape broadcasts to (new
 * reference). */
graph_node *api_broadcast_to(graph_node *n, int ndim, const int64_t *dims);

/* "[3,4]" into a static per-call buffer slot (four slots, for messages). */
const char *api_shape_str(const graph_node *n);

/* A leaf of the context's device holding a copy of data (zeros when data
 * is NULL), or NULL with the status and a message naming op. */
graph_node *api_data_node(kiln_ctx *ctx, const char *op, kiln_dtype dt, int ndim,
                          const int64_t *dims, const void *data, kiln_status *st, char *msg,
                          size_t msgcap);

/* Copies a realized node's bytes [offset, offset + n) to host memory at dst,
 * through the device that holds them. */
kiln_status api_read(const graph_node *n, size_t offset, void *dst, size_t nbytes, char *msg,
                     size_t msgcap);

/* Realizes nodes (plus the context's pending assignments); on failure puts
 * the status and message on the handle `who` (if any). */
kiln_status api_realize(kiln_ctx *ctx, int n, graph_node *const *nodes, kiln_tensor *who);

/* Ends the scope a composite op recorded its steps in (kiln_scope_begin),
 * keeping only its result r. */
kiln_tensor *api_finish(kiln_ctx *ctx, kiln_tensor *r);

/* t with axis ax moved last (a permuted view), cut to sizes[d] on the other
 * axes when sizes is not NULL; api_axis_back moves the last axis back to ax. */
kiln_tensor *api_axis_last(kiln_tensor *t, int ax, const int64_t *sizes);
kiln_tensor *api_axis_back(kiln_tensor *t, int ax);

/* The convolution of kiln_conv2d, kiln_conv3d and the transposed ones
 * (api/conv.c): x [N, C, s...] with w [OC, C/groups, k...] over nsp (1 to 3)
 * spatial axes, x padded by lo[d] before and hi[d] after each (negative:
 * cut), b [OC] or NULL; the caller has checked every argument and that the
 * dilated kernel fits. */
kiln_tensor *api_conv(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, int nsp,
                      const int64_t *stride, const int64_t *lo, const int64_t *hi,
                      const int64_t *dil, int64_t groups);

/* Whether dt may hold indices (i32, i64, u8). */
bool api_index_dtype(kiln_dtype dt);
/* When idx is realized: NULL if every element lies in [lo, limit) (or
 * equals *ignore, when ignore is not NULL), else an error for op naming the
 * first that does not (what: "indices"; other: the tensor indexed, for the
 * message). Lazy indices are not read (no sync). */
kiln_tensor *api_check_indices(kiln_ctx *ctx, const char *op, const graph_node *idx, int64_t lo,
                               int64_t limit, const char *what, const graph_node *other,
                               const int64_t *ignore);

/* ---- the neural-network ops' shared checks (api/nn.c) ---- */

typedef struct nn_arg {
    kiln_tensor *t;
    const char *name;
    bool optional;  /* may be NULL */
    bool any_dtype; /* otherwise a float dtype is required */
} nn_arg;

/* NULL when the arguments are usable (then *ctxp is their context, or NULL
 * when every argument is NULL and there is nothing to return), else the
 * handle to return: a NULL required argument, an error passed on, another
 * context, or a non-float dtype. */
kiln_tensor *api_nn_args(const char *op, int n, const nn_arg *a, kiln_ctx **ctxp);
bool api_valid_reduction(kiln_reduction r);
/* t's mean or sum over everything, or t itself (KILN_REDUCTION_NONE). */
kiln_tensor *api_reduce_loss(kiln_tensor *t, kiln_reduction r);
/* The bool one-hot [..., n] of integer indices [...]: true where the index
 * equals the column. */
kiln_tensor *api_one_hot(kiln_tensor *idx, int64_t n);

/* Whether dt is one of kiln_dtype's values. */
bool api_valid_dtype(kiln_dtype dt);

/* The dtypes an elementwise op accepts (api/elementwise.c). API_FLOAT takes
 * integers too and computes them in f32, as kiln_exp does. */
typedef enum api_dtypes { API_ANY, API_FLOAT, API_BITS, API_INTEGER, API_NUMBER } api_dtypes;

/* An elementwise op of one tensor (keeping its dtype, or API_FLOAT's) or of
 * two (promoted and broadcast), with the checks and messages of kiln_exp
 * and kiln_add; a dtype outside c is a KILN_ERR_DTYPE naming op. */
kiln_tensor *api_unary(const char *op, graph_op gop, kiln_tensor *t, api_dtypes c);
kiln_tensor *api_binary(const char *op, graph_op gop, kiln_tensor *a, kiln_tensor *b,
                        api_dtypes c);

#endif /* KILN_API_INTERNAL_H */
