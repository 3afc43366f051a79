/* ref_eval.c — the float64 reference evaluator (graph_eval): realizes nodes
 * by walking the graph below them one node at a time on the CPU. It is the
 * oracle every other executor is tested against, so each op is written in
 * the plainest form that is obviously right (every output element gathered
 * from its sources) rather than the fastest; the element-level semantics come
 * from dtype.c.
 *
 * A pass: take the unrealized nodes below the requested ones in post-order
 * (graph_postorder), then evaluate them in that order. Unrequested nodes hold their values as an
 * array of graph_scalar, freed once their last consumer of the pass is done;
 * requested nodes are stored straight into their new buffer and are read
 * back from it. n->scratch points to the pass's ev_state of every node the
 * walk reached, and is NULL again when graph_eval returns. */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

#include "graph/graph.h"

typedef struct ev_state {
    graph_scalar *vals; /* an unrequested node's values, once evaluated */
    int64_t consumers;  /* source slots of this pass's nodes not yet evaluated */
    bool requested;
} ev_state;

typedef struct ev_pass {
    graph_node **order; /* post-order: sources before their consumers */
    int64_t norder;
    char *msg;
    size_t msgcap;
} ev_pass;

/* Where a node's values go: its pass array, or its new buffer. */
typedef struct ev_out {
    graph_scalar *vals;
    void *data;
    kiln_dtype dt;
} ev_out;

static ev_state *state_of(const graph_node *n)
{
    return (ev_state *)n->scratch;
}

static graph_scalar get(const graph_node *s, int64_t i)
{
    if (s->buf)
        return graph_scalar_load(s->buf->data, s->dtype, i);
    return state_of(s)->vals[i];
}

static void put(const ev_out *o, int64_t i, graph_scalar v)
{
    if (o->vals)
        o->vals[i] = v;
    else
        graph_scalar_store(o->data, o->dt, i, v);
}

static void fail(ev_pass *P, const char *fmt, ...)
{
    if (!P->msg || P->msgcap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->msg, P->msgcap, fmt, ap);
    va_end(ap);
}

static kiln_status fail_oom(ev_pass *P, bool overflow, size_t bytes, const graph_node *n)
{
    char shape[16 + KILN_MAX_DIMS * 21];
    graph_format_shape(shape, sizeof shape, n->ndim, n->shape);
    if (overflow)
        fail(P, "kiln_realize: out of memory: a %s tensor of shape %s needs more than %zu bytes",
             graph_dtype_name(n->dtype), shape, (size_t)SIZE_MAX);
    else
        fail(P, "kiln_realize: out of memory allocating %zu bytes for a %s tensor of shape %s",
             bytes, graph_dtype_name(n->dtype), shape);
    return KILN_ERR_OOM;
}

static bool size_of_array(int64_t count, size_t elsize, size_t *bytes)
{
    if (count < 0 || (uint64_t)count > SIZE_MAX / elsize)
        return false;
    *bytes = (size_t)count * elsize;
    return true;
}

/* Advances a row-major multi-index over shape by one element. */
static void next_index(int ndim, const int64_t *shape, int64_t *idx)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d])
            return;
        idx[d] = 0;
    }
}

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d];
    }
}

static void eval_view(const graph_node *n, const ev_out *o)
{
    const graph_view *v = &n->p.view;
    const graph_node *s = n->src[0];
    graph_scalar zero = graph_scalar_from_double(0.0, n->dtype);
    int64_t idx[KILN_MAX_DIMS] = {0};
    int64_t numel = graph_numel(n);
    for (int64_t i = 0; i < numel; i++) {
        bool inside = true;
        int64_t off = v->offset;
        for (int d = 0; d < n->ndim; d++) {
            if (v->masked && (idx[d] < v->mask_lo[d] || idx[d] >= v->mask_hi[d]))
                inside = false;
            off += idx[d] * v->strides[d];
        }
        if (inside) {
            assert(off >= 0 && off < graph_numel(s));
            put(o, i, get(s, off));
        } else {
            put(o, i, zero);
        }
        next_index(n->ndim, n->shape, idx);
    }
}

static void eval_cat(const graph_node *n, const ev_out *o)
{
    int ax = n->p.axis;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++)
        outer *= n->shape[d];
    for (int d = ax + 1; d < n->ndim; d++)
        inner *= n->shape[d];
    int64_t at = 0;
    for (int64_t b = 0; b < outer; b++) {
        for (int j = 0; j < n->nsrc; j++) {
            const graph_node *s = n->src[j];
            int64_t len = s->shape[ax] * inner;
            for (int64_t t = 0; t < len; t++)
                put(o, at + t, get(s, b * len + t));
            at += len;
        }
    }
}

/* Element i of the result reads the source at i's coordinates, with the
 * index's value on the axis (coordinates off the axis fit the source: the
 * index is at most its size there). */
static void eval_gather(const graph_node *n, const ev_out *o)
{
    const graph_node *s = n->src[0], *idx = n->src[1];
    int ax = n->p.axis;
    int64_t numel = graph_numel(n), K = s->shape[ax];
    for (int64_t i = 0; i < numel; i++) {
        int64_t rest = i, at = 0, stride = 1;
        int64_t k = get(idx, i).i; /* integers are held as int64 */
        for (int d = n->ndim - 1; d >= 0; d--) {
            int64_t c = rest % n->shape[d];
            rest /= n->shape[d];
            at += (d == ax ? k : c) * stride;
            stride *= s->shape[d];
        }
        put(o, i, k >= 0 && k < K ? get(s, at) : graph_scalar_from_double(0, n->dtype));
    }
}

/* The combination a scatter applies at a place (assignment: the new value). */
static graph_op scatter_combine(int reduce)
{
    switch (reduce) {
    case KILN_SCATTER_SUM: return GRAPH_ADD;
    case KILN_SCATTER_PROD: return GRAPH_MUL;
    case KILN_SCATTER_AMAX: return GRAPH_MAXIMUM;
    case KILN_SCATTER_AMIN: return GRAPH_MINIMUM;
    default: return GRAPH_NUM_OPS;
    }
}

/* t copied, then each source element in order along the axis combined into
 * the place its index names; without include_self a place's first element
 * replaces t's value (what starting from the combination's identity gives). */
static bool eval_scatter(const graph_node *n, const ev_out *o)
{
    const graph_node *t = n->src[0], *idx = n->src[1], *src = n->src[2];
    int ax = n->p.axis;
    int64_t numel = graph_numel(n), K = n->shape[ax], J = idx->shape[ax];
    int64_t inner = 1;
    for (int d = ax + 1; d < n->ndim; d++)
        inner *= n->shape[d];
    graph_scalar *acc = malloc(sizeof *acc * (size_t)(numel ? numel : 1));
    bool *fresh = calloc((size_t)(numel ? numel : 1), sizeof *fresh);
    if (!acc || !fresh) {
        free(acc);
        free(fresh);
        return false;
    }
    for (int64_t i = 0; i < numel; i++)
        acc[i] = get(t, i);
    graph_op op = scatter_combine(n->p.reduce);
    int64_t nsrc = graph_numel(idx);
    /* row by row (the positions before and after the axis), j in order */
    int64_t outer = J ? nsrc / (J * inner) : 0;
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < inner; c++)
            for (int64_t j = 0; j < J; j++) {
                int64_t s = (a * J + j) * inner + c;
                int64_t k = get(idx, s).i;
                if (k < 0 || k >= K)
                    continue;
                int64_t at = (a * K + k) * inner + c;
                graph_scalar v = get(src, s);
                if (op == GRAPH_NUM_OPS || (!n->p.include_self && !fresh[at]))
                    acc[at] = v;
                else
                    acc[at] = graph_scalar_binary(op, n->dtype, acc[at], v);
                fresh[at] = true;
            }
    for (int64_t i = 0; i < numel; i++)
        put(o, i, acc[i]);
    free(acc);
    free(fresh);
    return true;
}

static void eval_matmul(const graph_node *n, const ev_out *o)
{
    const graph_node *a = n->src[0], *b = n->src[1];
    int nd = n->ndim;
    int64_t rows = n->shape[nd - 2], cols = n->shape[nd - 1], inner = a->shape[nd - 1];
    int64_t batch = 1;
    for (int d = 0; d < nd - 2; d++)
        batch *= n->shape[d];
    bool fl = graph_dtype_is_float(a->dtype);
    for (int64_t bt = 0; bt < batch; bt++) {
        int64_t abase = bt * rows * inner, bbase = bt * inner * cols, obase = bt * rows * cols;
        for (int64_t i = 0; i < rows; i++) {
            for (int64_t j = 0; j < cols; j++) {
                double facc = 0.0;
                graph_scalar iacc = {.i = 0};
                for (int64_t k = 0; k < inner; k++) {
                    graph_scalar x = get(a, abase + i * inner + k);
                    graph_scalar y = get(b, bbase + k * cols + j);
                    if (fl)
                        facc += x.f * y.f;
                    else
                        iacc = graph_scalar_binary(GRAPH_ADD, KILN_I64, iacc,
                                                   graph_scalar_binary(GRAPH_MUL, KILN_I64, x, y));
                }
                graph_scalar r = fl ? graph_scalar_from_double(facc, n->dtype)
                                    : graph_scalar_convert(iacc, false, n->dtype);
                put(o, obase + i * cols + j, r);
            }
        }
    }
}

/* GRAPH_ATTENTION and its backward ops (graph.h), directly from their
 * definitions: per query row its scores, their log-sum-exp and P, in double.
 * false when out of memory (a row of scores). */
static bool eval_attention(const graph_node *n, const ev_out *o)
{
    const graph_node *q = n->src[0], *k = n->src[1], *v = n->src[2];
    int nd = n->ndim;
    int64_t L = q->shape[nd - 2], D = q->shape[nd - 1], S = k->shape[nd - 2], DV = v->shape[nd - 1];
    int64_t batch = 1;
    for (int d = 0; d < nd - 2; d++)
        batch *= n->shape[d];
    double sc = n->p.scale;
    int64_t width = n->shape[nd - 1];
    double *p = malloc(sizeof *p * (size_t)(S ? S : 1));
    double *acc = calloc((size_t)(graph_numel(n) ? graph_numel(n) : 1), sizeof *acc);
    if (!p || !acc) {
        free(p);
        free(acc);
        return false;
    }
    for (int64_t bt = 0; bt < batch; bt++) {
        const int64_t qb = bt * L * D, kb = bt * S * D, vb = bt * S * DV, rb = bt * L;
        for (int64_t i = 0; i < L; i++) {
            int64_t sn = n->p.causal ? (i + 1 < S ? i + 1 : S) : S;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < sn; j++) {
                double dot = 0;
                for (int64_t c = 0; c < D; c++)
                    dot += get(q, qb + i * D + c).f * get(k, kb + j * D + c).f;
                p[j] = dot * sc;
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int64_t j = 0; j < sn; j++)
                sum += exp(p[j] - mx);
            double lse = mx + log(sum);
            if (n->op != GRAPH_ATTENTION) /* the backward's P uses the forward's lse */
                lse = get(n->src[4], rb + i).f;
            for (int64_t j = 0; j < sn; j++)
                p[j] = exp(p[j] - lse);
            if (n->op == GRAPH_ATTENTION) {
                double *out = acc + (bt * L + i) * width;
                for (int64_t j = 0; j < sn; j++)
                    for (int64_t c = 0; c < DV; c++)
                        out[c] += p[j] * get(v, vb + j * DV + c).f;
                out[DV] = lse;
                continue;
            }
            const graph_node *go = n->src[3];
            double delta = get(n->src[5], rb + i).f;
            for (int64_t j = 0; j < sn; j++) {
                double dp = 0;
                for (int64_t c = 0; c < DV; c++)
                    dp += get(go, rb * DV + i * DV + c).f * get(v, vb + j * DV + c).f;
                double ds = p[j] * (dp - delta) * sc;
                if (n->op == GRAPH_ATTENTION_DQ) {
                    for (int64_t c = 0; c < D; c++)
                        acc[(bt * L + i) * D + c] += ds * get(k, kb + j * D + c).f;
                } else {
                    double *row = acc + (bt * S + j) * width;
                    for (int64_t c = 0; c < D; c++)
                        row[c] += ds * get(q, qb + i * D + c).f;
                    for (int64_t c = 0; c < DV; c++)
                        row[D + c] += p[j] * get(go, rb * DV + i * DV + c).f;
                }
            }
        }
    }
    for (int64_t i = 0; i < graph_numel(n); i++)
        put(o, i, graph_scalar_from_double(acc[i], n->dtype));
    free(p);
    free(acc);
    return true;
}

/* Whether v replaces best as the extreme so far: the first NaN wins and
 * stays, otherwise the first strictly greater (smaller) element. */
static bool more_extreme(graph_op op, bool fl, graph_scalar v, graph_scalar best)
{
    bool want_max = op == GRAPH_RMAX || op == GRAPH_ARGMAX;
    if (fl) {
        if (isnan(best.f))
            return false;
        if (isnan(v.f))
            return true;
        return want_max ? v.f > best.f : v.f < best.f;
    }
    return want_max ? v.i > best.i : v.i < best.i;
}

typedef struct reduced_axes {
    int n;
    int64_t size[KILN_MAX_DIMS];
    int64_t stride[KILN_MAX_DIMS];
    int64_t count;
} reduced_axes;

/* Reduces the elements of s at base + the offsets of the reduced axes, taken
 * row-major in increasing axis order (the order argmax counts in). */
static graph_scalar reduce_one(const graph_node *n, const graph_node *s, int64_t base,
                               const reduced_axes *ra)
{
    bool fl = graph_dtype_is_float(s->dtype);
    double facc = 0.0;
    graph_scalar iacc = {.i = 0};
    graph_scalar best = {.i = 0}; /* all-zero bits: 0 as either member */
    int64_t best_k = 0;
    int64_t ridx[KILN_MAX_DIMS] = {0};
    int64_t off = 0;
    for (int64_t k = 0; k < ra->count; k++) {
        graph_scalar v = get(s, base + off);
        if (n->op == GRAPH_SUM) {
            if (fl)
                facc += v.f;
            else
                iacc = graph_scalar_binary(GRAPH_ADD, KILN_I64, iacc, v);
        } else if (k == 0 || more_extreme(n->op, fl, v, best)) {
            best = v;
            best_k = k;
        }
        for (int j = ra->n - 1; j >= 0; j--) {
            off += ra->stride[j];
            if (++ridx[j] < ra->size[j])
                break;
            off -= ra->stride[j] * ra->size[j];
            ridx[j] = 0;
        }
    }
    switch (n->op) {
    case GRAPH_SUM:
        return fl ? graph_scalar_from_double(facc, n->dtype)
                  : graph_scalar_convert(iacc, false, n->dtype);
    case GRAPH_ARGMAX:
    case GRAPH_ARGMIN: {
        graph_scalar k = {.i = best_k};
        return graph_scalar_convert(k, false, n->dtype);
    }
    default:
        return graph_scalar_convert(best, fl, n->dtype);
    }
}

static void eval_reduce(const graph_node *n, const ev_out *o)
{
    const graph_node *s = n->src[0];
    int64_t strides[KILN_MAX_DIMS];
    contiguous_strides(s->ndim, s->shape, strides);
    reduced_axes ra = {.n = 0, .count = 1};
    for (int d = 0; d < s->ndim; d++) {
        if (n->p.axes & (UINT32_C(1) << d)) {
            ra.size[ra.n] = s->shape[d];
            ra.stride[ra.n] = strides[d];
            ra.n++;
            ra.count *= s->shape[d];
        }
    }
    /* Reduced axes have size 1 in n, so their index stays 0 in the base. */
    int64_t idx[KILN_MAX_DIMS] = {0};
    int64_t numel = graph_numel(n);
    for (int64_t i = 0; i < numel; i++) {
        int64_t base = 0;
        for (int d = 0; d < n->ndim; d++)
            base += idx[d] * strides[d];
        put(o, i, reduce_one(n, s, base, &ra));
        next_index(n->ndim, n->shape, idx);
    }
}

/* Computes every element of n into o; false for a node it cannot compute
 * (a buffer leaf without data). */
static bool compute(const graph_node *n, const ev_out *o)
{
    int64_t numel = graph_numel(n);
    kiln_dtype dt = n->dtype;
    switch (n->op) {
    case GRAPH_CONST: {
        graph_scalar v = graph_scalar_convert(n->p.value, graph_dtype_is_float(dt), dt);
        for (int64_t i = 0; i < numel; i++)
            put(o, i, v);
        return true;
    }
    case GRAPH_ARANGE:
        for (int64_t i = 0; i < numel; i++)
            put(o, i, graph_scalar_from_double(n->p.value.f + (double)i * n->p.step, dt));
        return true;
    case GRAPH_RAND:
    case GRAPH_RANDN: {
        uint64_t key = n->nsrc ? (uint64_t)get(n->src[0], 0).i : n->p.seed;
        for (int64_t i = 0; i < numel; i++)
            put(o, i, graph_scalar_from_double(graph_rand_value(n->op, dt, key, (uint64_t)i), dt));
        return true;
    }
    case GRAPH_WHERE: {
        const graph_node *c = n->src[0];
        bool cf = graph_dtype_is_float(c->dtype);
        for (int64_t i = 0; i < numel; i++) {
            bool t = graph_scalar_convert(get(c, i), cf, KILN_BOOL).i != 0;
            put(o, i, get(n->src[t ? 1 : 2], i));
        }
        return true;
    }
    case GRAPH_SUM:
    case GRAPH_RMAX:
    case GRAPH_RMIN:
    case GRAPH_ARGMAX:
    case GRAPH_ARGMIN:
        eval_reduce(n, o);
        return true;
    case GRAPH_VIEW:
        eval_view(n, o);
        return true;
    case GRAPH_CAT:
        eval_cat(n, o);
        return true;
    case GRAPH_MATMUL:
        eval_matmul(n, o);
        return true;
    case GRAPH_GATHER:
        eval_gather(n, o);
        return true;
    case GRAPH_SCATTER:
        return eval_scatter(n, o);
    case GRAPH_ATTENTION:
    case GRAPH_ATTENTION_DQ:
    case GRAPH_ATTENTION_DKV:
        return eval_attention(n, o);
    default:
        break;
    }
    if (graph_op_is_unary(n->op)) {
        const graph_node *a = n->src[0];
        for (int64_t i = 0; i < numel; i++)
            put(o, i, graph_scalar_unary(n->op, a->dtype, dt, get(a, i)));
        return true;
    }
    if (graph_op_is_binary(n->op)) {
        const graph_node *a = n->src[0], *b = n->src[1];
        for (int64_t i = 0; i < numel; i++)
            put(o, i, graph_scalar_binary(n->op, a->dtype, get(a, i), get(b, i)));
        return true;
    }
    return false;
}

/* A collective runs in the job's world, over the source's values stored in
 * its dtype, as every rank's executor hands them over. */
static kiln_status eval_collective(ev_pass *P, const graph_node *n, const ev_out *o)
{
    const graph_comm *comm = graph_ctx_comm(n->g);
    const graph_node *a = n->src[0];
    if (!comm) {
        fail(P, "kiln_realize: a %s outside a job (kiln_dist_init)", graph_op_name(n->op));
        return KILN_ERR_ARG;
    }
    int64_t na = graph_numel(a), nn = graph_numel(n);
    size_t sa = (size_t)na * graph_dtype_size(a->dtype), sn = (size_t)nn * graph_dtype_size(n->dtype);
    void *src = malloc(sa ? sa : 1), *dst = malloc(sn ? sn : 1);
    if (!src || !dst) {
        free(src);
        free(dst);
        return fail_oom(P, false, sa + sn, n);
    }
    for (int64_t i = 0; i < na; i++)
        graph_scalar_store(src, a->dtype, i, get(a, i));
    kiln_status st = comm->run(comm->world, n, src, dst, P->msg, P->msgcap);
    for (int64_t i = 0; st == KILN_OK && i < nn; i++)
        put(o, i, graph_scalar_load(dst, n->dtype, i));
    free(src);
    free(dst);
    return st;
}

static kiln_status eval_node(ev_pass *P, graph_node *n)
{
    ev_state *st = state_of(n);
    int64_t numel = graph_numel(n);
    ev_out o = {.vals = NULL, .data = NULL, .dt = n->dtype};
    graph_buffer *buf = NULL;
    size_t bytes;
    if (st->requested) {
        if (!size_of_array(numel, graph_dtype_size(n->dtype), &bytes))
            return fail_oom(P, true, 0, n);
        buf = graph_buffer_new(bytes);
        if (!buf)
            return fail_oom(P, false, bytes, n);
        o.data = buf->data;
    } else {
        if (!size_of_array(numel, sizeof(graph_scalar), &bytes))
            return fail_oom(P, true, 0, n);
        o.vals = malloc(bytes);
        if (!o.vals && bytes > 0)
            return fail_oom(P, false, bytes, n);
    }
    if (graph_op_is_collective(n->op)) {
        kiln_status cst = eval_collective(P, n, &o);
        if (cst != KILN_OK) {
            graph_buffer_unref(buf);
            free(o.vals);
            return cst;
        }
    } else if (!compute(n, &o)) {
        graph_buffer_unref(buf);
        free(o.vals);
        fail(P, "kiln_realize: node %lld (%s) has nothing to evaluate", (long long)n->id,
             graph_op_name(n->op));
        return KILN_ERR_ARG;
    }
    if (buf)
        n->buf = buf;
    else
        st->vals = o.vals;
    return KILN_OK;
}

/* Frees the values of sources that no node of the pass still needs. */
static void release_sources(graph_node *n)
{
    for (int j = 0; j < n->nsrc; j++) {
        ev_state *s = state_of(n->src[j]);
        if (s && --s->consumers == 0) {
            free(s->vals);
            s->vals = NULL;
        }
    }
}

static void drop_states(graph_node **nodes, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        ev_state *s = state_of(nodes[i]);
        if (s) {
            free(s->vals);
            free(s);
        }
        nodes[i]->scratch = NULL;
    }
}

/* Hangs an ev_state on every node of the pass and counts its consumers. */
static kiln_status prepare(ev_pass *P, int n, graph_node *const *nodes)
{
    for (int64_t i = 0; i < P->norder; i++) {
        ev_state *s = calloc(1, sizeof *s);
        if (!s) {
            fail(P, "kiln_realize: out of memory allocating %zu bytes to walk the graph",
                 sizeof *s);
            return KILN_ERR_OOM;
        }
        P->order[i]->scratch = s;
    }
    for (int r = 0; r < n; r++)
        if (nodes[r]->scratch)
            state_of(nodes[r])->requested = true;
    for (int64_t i = 0; i < P->norder; i++) {
        graph_node *node = P->order[i];
        for (int j = 0; j < node->nsrc; j++) {
            ev_state *s = state_of(node->src[j]);
            if (s)
                s->consumers++;
        }
    }
    return KILN_OK;
}

kiln_status graph_eval(int n, graph_node *const *nodes, char *msg, size_t msgcap)
{
    ev_pass P = {.msg = msg, .msgcap = msgcap};
    kiln_status st = graph_postorder(n, nodes, true, &P.order, &P.norder);
    if (st != KILN_OK) {
        fail(&P, "kiln_realize: out of memory while walking the graph");
        return st;
    }
    st = prepare(&P, n, nodes);
    for (int64_t i = 0; i < P.norder && st == KILN_OK; i++) {
        st = eval_node(&P, P.order[i]);
        if (st == KILN_OK)
            release_sources(P.order[i]);
    }
    drop_states(P.order, P.norder);
    free(P.order);
    return st;
}
