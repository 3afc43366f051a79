/* emit.c — kernel IR from the scheduler's decisions: for each kernel root
 * (or group of siblings) the instructions that compute its outputs, walking
 * down from them through every node fused into the kernel to the loads of
 * materialised nodes and leaves. Emission decides nothing; where a fused node
 * turns out not to fit (a reduction whose row would move with the reduced
 * index, a matmul whose epilogue kernel changed), it names the node for the
 * driver to materialise, and the program is emitted again. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower/ir.h"
#include "lower/sched.h"

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
    const sched *s; /* the run whose decisions are lowered */
    ir_builder b;
    lower_kernel *k;
    /* A kernel with reduced elements: the reduced index, its axes, and its
     * decomposition per axis of the kernel's domain. */
    int ridx;
    uint32_t axes;
    int rd[KILN_MAX_DIMS];
    graph_node *retry; /* a fused node that must be materialised after all */
    graph_node *epilogue_of; /* the matmul whose dot products this kernel finishes */
    graph_node *unreadable_operand; /* a matmul operand strides cannot describe */
    int ninputs_cap;
    memo_entry *memo; /* open addressing, a power of two in size */
    int nmemo, memo_cap;
    graph_node **fused; /* the nodes computed in the kernel, each once */
    int *repeats;       /* per fused node, how often it was lowered */
    int nfused, fused_cap;
    int region; /* a cat's region kernel: the source it stores (lower_kernel.region); -1 */
    int64_t tile; /* an elementwise kernel's tile (ELEMENTWISE_TILE, or a row: row_tile) */
    const struct cat_store *cat_store; /* where an attention kernel also stores; NULL */
    bool failed;
} emitter;

/* A cat that the joint attention backward of dkv and dq stores whole
 * (sched_cat_attention_stores): the kernel lowered for the cat is theirs.
 * Or, dkv NULL, `copy`: a view that the forward attention lowered here
 * fills beside its own output (sched_view_attention_copy), at store[0]. */
typedef struct cat_store {
    graph_node *dkv, *dq;
    lower_operand store[3];
    graph_node *copy;
} cat_store;

/* How often a fused node may be lowered at different indices in one kernel
 * before it is materialised instead. A row kernel legitimately computes a
 * shared node once per pass over its row (softmax: 3 passes), and a cat or
 * pad reads its source at a few offsets; but a chain of nodes each reading
 * the one before at two indices (a bitonic sorting network's stages, fused
 * into a row kernel after it) doubles per link: 2^k copies of the first.
 * Past this many, computing it once in its own kernel is both faster and the
 * only way the kernel's IR stays finite. */
enum { EMIT_REPEAT_LIMIT = 16 };

/* Whether arange n, of i32 or i64, is computed exactly in its own dtype:
 * integral start and step and every value within the dtype (and below 2^53,
 * where the f64 definition is exact too), so that both give the same
 * integers. */
static bool integer_arange(const graph_node *n) {
    double lim = n->dtype == KILN_I32 ? 2147483647.0 : n->dtype == KILN_I64 ? 9007199254740992.0 : 0;
    double a = n->p.value.f, step = n->p.step;
    double last = a + step * (double)(n->shape[0] > 0 ? n->shape[0] - 1 : 0);
    return lim > 0 && a == floor(a) && step == floor(step) && fabs(a) <= lim && fabs(step) <= lim &&
           fabs(last) <= lim && fabs(last - a) <= lim;
}

/* Lists n among the kernel's fused nodes (out of memory, the description
 * lists fewer) and counts how often it was lowered: past EMIT_REPEAT_LIMIT,
 * names it for the driver to materialise. */
static void note_fused(emitter *e, graph_node *n) {
    for (int i = 0; i < e->nfused; i++)
        if (e->fused[i] == n) {
            if (++e->repeats[i] > EMIT_REPEAT_LIMIT && n->op != GRAPH_VIEW &&
                n->op != GRAPH_CONST && !sched_of(e->s, n)->materialized && !e->retry) {
                e->retry = n;
                e->failed = true;
            }
            return;
        }
    if (e->nfused == e->fused_cap) {
        int cap = e->fused_cap ? e->fused_cap * 2 : 16;
        graph_node **f = realloc(e->fused, sizeof *f * (size_t)cap);
        if (f)
            e->fused = f;
        int *r = realloc(e->repeats, sizeof *r * (size_t)cap);
        if (r)
            e->repeats = r;
        if (!f || !r)
            return;
        e->fused_cap = cap;
    }
    e->repeats[e->nfused] = 1;
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

/* A gather reads its index at `at`, then its source (materialised or a leaf,
 * fuse.c sees to it) at `at` with that value on the axis: one load each. An
 * index outside the axis reads 0, through the load's validity (a leaf that
 * is no load, a constant, is masked by the where). */
static int emit_gather(emitter *e, graph_node *n, const ix *at, int valid) {
    ir_builder *b = &e->b;
    graph_node *s = n->src[0];
    int ax = n->p.axis;
    int64_t K = s->shape[ax];
    int i = emit(e, n->src[1], at, valid);
    int inside = ir_ivalid(b, i, K);
    ix sat = *at;
    sat.flat = -1;
    sat.d[ax] = ir_iclamp(b, i, K);
    int mask = ir_and(b, valid, inside);
    int val = emit(e, s, &sat, mask);
    if (!b->failed && b->ins[val].op == UOP_LOAD && b->ins[val].b == mask)
        return val;
    return ir_where(b, n->dtype, inside, val, ir_imm(b, n->dtype, (graph_scalar){.i = 0}));
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

/* Whether materialised node n is computed in the kernel rather than loaded:
 * one of its outputs, or a member of its sibling group that is stored
 * nowhere. */
static bool computed_here(const emitter *e, const graph_node *n) {
    const sched_node *ns = sched_of(e->s, n);
    return is_output(e->k, n) ||
           (ns->unstored && ns->sibling_group == sched_of(e->s, e->k->out)->sibling_group);
}

static int emit_node(emitter *e, graph_node *n, const ix *at, int valid) {
    ir_builder *b = &e->b;
    if (n == e->epilogue_of)
        return ir_acc(b, n->dtype);
    if (!sched_pending(n) || (sched_of(e->s, n)->materialized && !computed_here(e, n))) {
        int slot = input_slot(e, n);
        return ir_load(b, n->dtype, slot, flatten(e, at, n->ndim, n->shape), valid);
    }
    note_fused(e, n);
    switch (n->op) {
    case GRAPH_CONST:
        return ir_imm(b, n->dtype, n->p.value);
    case GRAPH_ARANGE: {
        if (integer_arange(n)) {
            /* exact in the dtype itself: the f64 path's saturating cast
             * back cost about 15 double-width operations an element (the
             * one-hot targets of a cross-entropy over 50257 classes) */
            kiln_dtype dt = n->dtype;
            int i = ir_alu(b, GRAPH_CAST, dt, at->d[0], -1);
            int v = ir_alu(b, GRAPH_MUL, dt, i, ir_imm(b, dt, (graph_scalar){.i = (int64_t)n->p.step}));
            return ir_alu(b, GRAPH_ADD, dt, ir_imm(b, dt, (graph_scalar){.i = (int64_t)n->p.value.f}), v);
        }
        int i = ir_alu(b, GRAPH_CAST, KILN_F64, at->d[0], -1);
        int v = ir_alu(b, GRAPH_MUL, KILN_F64, i, ir_imm(b, KILN_F64, (graph_scalar){.f = n->p.step}));
        v = ir_alu(b, GRAPH_ADD, KILN_F64, ir_imm(b, KILN_F64, n->p.value), v);
        return n->dtype == KILN_F64 ? v : ir_alu(b, GRAPH_CAST, n->dtype, v, -1);
    }
    case GRAPH_RAND:
    case GRAPH_RANDN:
        if (n->nsrc) { /* the key is a bound 0-d input, read once per element */
            ix zero = {.ndim = 0, .flat = ir_index(b, 0)};
            int key = emit(e, n->src[0], &zero, -1);
            return ir_rand_keyed(b, n->op, n->dtype, flatten(e, at, n->ndim, n->shape), key);
        }
        return ir_rand(b, n->op, n->dtype, flatten(e, at, n->ndim, n->shape), n->p.seed);
    case GRAPH_VIEW:
        return emit_view(e, n, at, valid);
    case GRAPH_CAT:
        return emit_cat(e, n, at, valid);
    case GRAPH_GATHER:
        return emit_gather(e, n, at, valid);
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
    if (e->failed) /* the program is lowered again: stop walking */
        return 0;
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

/* "[9,16]", for messages. */
static void describe_shape(char *out, size_t cap, const graph_node *n) {
    size_t len = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < n->ndim && len < cap; d++)
        len += (size_t)snprintf(out + len, cap - len, "%s%lld", d ? "," : "", (long long)n->shape[d]);
    if (len < cap)
        snprintf(out + len, cap - len, "]");
}

static void name_kernel(const sched *s, lower_kernel *k) {
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
    while (shown->op == GRAPH_VIEW && sched_pending(shown->src[0]) &&
           !sched_of(s, shown->src[0])->materialized)
        shown = shown->src[0];
    const graph_node *mm = sched_of(s, n)->epilogue_of;
    if (mm) {
        /* matmul_add_relu_...: the epilogue's ops from the matmul up */
        char ops[32] = "matmul";
        size_t at = strlen(ops);
        for (const graph_node *x = sched_of(s, mm)->last_consumer; at < sizeof ops - 1;
             x = sched_of(s, x)->last_consumer) {
            at += (size_t)snprintf(ops + at, sizeof ops - at, "_%s", graph_op_name(x->op));
            if (x == n)
                break;
        }
        snprintf(k->name, sizeof k->name, "%s_%s", ops, dims);
        k->dims_at = (int)strlen(ops) + 1;
        k->dims_len = (int)strlen(dims);
        return;
    }
    const char *kind = k->kind == LOWER_REDUCE ? "r" : k->kind == LOWER_ELEMENTWISE ? "e" : "";
    /* a joint attention backward storing into a cat: its op, the cat's sizes */
    const char *op = graph_op_name(k->kind == LOWER_ATTENTION ? k->att.op : shown->op);
    snprintf(k->name, sizeof k->name, "%s_%s%s", op, kind, dims);
    k->dims_at = (int)(strlen(op) + 1 + strlen(kind));
    k->dims_len = (int)strlen(dims);
    len = strlen(k->name);
    if (k->nouts > 1)
        snprintf(k->name + len, sizeof k->name - len, "_%douts", k->nouts);
    else if (k->kind == LOWER_ATTENTION && n->op == GRAPH_CAT)
        snprintf(k->name + len, sizeof k->name - len, "_into_cat");
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
    graph_node *ab = sched_matmul_operand(e->s, x, 0, &k->a);
    graph_node *bb = sched_matmul_operand(e->s, x, 1, &k->b);
    if (!ab || !bb) {
        e->unreadable_operand = ab ? x->src[1] : x->src[0];
        return false;
    }
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

/* A fused attention kernel (LOWER_ATTENTION): its sources as strides, its
 * sizes, where it stores each piece of its values (lower_attention.store),
 * and the one function its loops need from lower/, e^x, lowered here by the
 * same rule as every exp. */
static bool lower_attention_kernel(lower_kernel *k, emitter *e, graph_node *x) {
    k->kind = LOWER_ATTENTION;
    int nd = x->ndim;
    lower_attention *a = &k->att;
    a->op = x->op;
    a->nsrc = x->nsrc;
    a->l = x->src[0]->shape[nd - 2];
    a->d = x->src[0]->shape[nd - 1];
    a->s = x->src[1]->shape[nd - 2];
    a->dv = x->src[2]->shape[nd - 1];
    a->scale = x->p.scale;
    a->causal = x->p.causal;
    k->nbatch = nd - 2;
    memcpy(k->batch, x->shape, sizeof(int64_t) * (size_t)k->nbatch);
    for (int j = 0; j < x->nsrc; j++) {
        graph_node *base = sched_operand_base(e->s, x->src[j], &a->src[j]);
        if (!base) {
            e->unreadable_operand = x->src[j];
            return false;
        }
        a->src[j].buf = input_slot(e, base);
    }
    k->numel = graph_numel(x);
    const cat_store *cs = e->cat_store && e->cat_store->dkv ? e->cat_store : NULL;
    a->joint = cs || (x->op == GRAPH_ATTENTION_DKV && k->nouts == 2);
    if (cs) {
        /* "attention_dkv attention_dq view... cat": the pair, then what it
         * stores through */
        note_fused(e, cs->dkv);
        note_fused(e, cs->dq);
        for (int j = 0; j < k->out->nsrc; j++)
            for (graph_node *v = k->out->src[j]; v->op == GRAPH_VIEW; v = v->src[0])
                note_fused(e, v);
        note_fused(e, k->out);
        a->nstores = 3;
        memcpy(a->store, cs->store, sizeof a->store);
    } else {
        for (int o = 0; o < k->nouts; o++) /* a joint backward: "attention_dkv attention_dq" */
            note_fused(e, k->outs[o]);
        /* the forward's o and lse, dq, dkv's dk and dv, then the joint dq */
        sched_attention_own_piece(x, 0, 0, &a->store[a->nstores++]);
        if (x->op != GRAPH_ATTENTION_DQ)
            sched_attention_own_piece(x, 0, lower_att_piece_cols(a, 0), &a->store[a->nstores++]);
        if (a->joint)
            sched_attention_own_piece(k->outs[1], 1, 0, &a->store[a->nstores++]);
        if (x->op == GRAPH_ATTENTION && k->nouts == 2) /* o again, into the view it copies */
            a->store[a->nstores++] = e->cat_store->store[0];
    }
    /* Halves compute in f32 (the CUDA renderer stages their tiles as f32):
     * e^x rounded to bf16 would put an error of 2^-9 on every weight. */
    kiln_dtype dt = x->dtype == KILN_F16 || x->dtype == KILN_BF16 ? KILN_F32 : x->dtype;
    int acc = ir_acc(&e->b, dt);
    k->store = acc;
    k->result = ir_alu(&e->b, GRAPH_EXP, dt, acc, -1);
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

/* The value every place a scatter without include_self points at starts
 * from: the identity of its combination in dt. */
static graph_scalar scatter_identity(int reduce, kiln_dtype dt) {
    bool f = graph_dtype_is_float(dt);
    bool lowest = reduce == KILN_SCATTER_AMAX;
    switch (reduce) {
    case KILN_SCATTER_PROD:
        return f ? (graph_scalar){.f = 1} : (graph_scalar){.i = 1};
    case KILN_SCATTER_AMAX:
    case KILN_SCATTER_AMIN:
        if (f)
            return (graph_scalar){.f = lowest ? -INFINITY : INFINITY};
        switch (dt) {
        case KILN_I8: return (graph_scalar){.i = lowest ? INT8_MIN : INT8_MAX};
        case KILN_I32: return (graph_scalar){.i = lowest ? INT32_MIN : INT32_MAX};
        case KILN_I64: return (graph_scalar){.i = lowest ? INT64_MIN : INT64_MAX};
        case KILN_U8: return (graph_scalar){.i = lowest ? 0 : UINT8_MAX};
        default: return (graph_scalar){.i = lowest ? 0 : 1};
        }
    default:
        return f ? (graph_scalar){.f = 0} : (graph_scalar){.i = 0};
    }
}

static graph_op scatter_combine(int reduce) {
    switch (reduce) {
    case KILN_SCATTER_SUM: return GRAPH_ADD;
    case KILN_SCATTER_PROD: return GRAPH_MUL;
    case KILN_SCATTER_AMAX: return GRAPH_MAXIMUM;
    default: return GRAPH_MINIMUM;
    }
}

/* How many consecutive positions after the axis one scatter row covers: all
 * of them when few (a scatter along the last axis: 1), else a divisor of
 * them from 16 to 64, so that a row's passes touch whole cache lines (the
 * places of an embedding's gradient are rows of D) while there are still
 * rows enough for the threads. */
static int64_t scatter_chunk(int64_t inner) {
    if (inner <= 64)
        return inner;
    for (int64_t c = 64; c >= 16; c--)
        if (inner % c == 0)
            return c;
    return inner;
}

/* A scatter kernel (LOWER_SCATTER) over t as [outer, K, inner] and the
 * index and source as [outer, J, inner]: a row is one outer position and one
 * chunk of C inner positions. Its copy pass computes t at the row's K x C
 * places (t's elementwise producers fuse into it); its scatter passes read
 * the index and the source at the row's J x C positions, j-major, so that
 * the elements reaching one place come in their order along the axis (the
 * index's and source's producers fuse likewise). Without include_self a
 * first scatter pass resets every place pointed at to the identity. */
static void lower_scatter(lower_kernel *k, emitter *e) {
    ir_builder *b = &e->b;
    graph_node *out = k->out, *idx = out->src[1];
    int ax = out->p.axis, reduce = out->p.reduce;
    int64_t K = out->shape[ax], J = idx->shape[ax], outer = 1, inner = 1;
    for (int d = 0; d < ax; d++)
        outer *= out->shape[d];
    for (int d = ax + 1; d < out->ndim; d++)
        inner *= out->shape[d];
    int64_t C = scatter_chunk(inner), nb = C ? inner / C : 0;
    k->kind = LOWER_SCATTER;
    k->numel = outer * nb;
    k->rnumel = K * C;
    k->snumel = J * C;
    int gidx = ir_gidx(b, k->numel);
    int o = ir_idiv(b, gidx, nb ? nb : 1), lo = ir_imul(b, ir_imod(b, gidx, nb ? nb : 1), C);
    /* the flat index of [o, a, lo + c] over [outer, n, inner] */
    int r = ir_ridx(b, k->rnumel);
    int c = ir_imod(b, r, C ? C : 1);
    int f = ir_iadd(b, ir_imul(b, ir_iadd(b, ir_imul(b, o, K), ir_idiv(b, r, C ? C : 1)), inner),
                    ir_iadd(b, lo, c));
    ix at = unflatten(e, f, out->ndim, out->shape);
    k->result = emit(e, out->src[0], &at, -1);
    k->store = f;
    int s = ir_ridx(b, k->snumel);
    int sc = ir_iadd(b, lo, ir_imod(b, s, C ? C : 1));
    int sf = ir_iadd(b, ir_imul(b, ir_iadd(b, ir_imul(b, o, J), ir_idiv(b, s, C ? C : 1)), inner), sc);
    ix sat = unflatten(e, sf, idx->ndim, idx->shape);
    int i = emit(e, idx, &sat, -1);
    int inside = ir_ivalid(b, i, K);
    int p = ir_iadd(b, ir_imul(b, ir_iadd(b, ir_imul(b, o, K), ir_iclamp(b, i, K)), inner), sc);
    k->nscatter = 0;
    if (!out->p.include_self && reduce != GRAPH_SCATTER_ASSIGN)
        k->scatter[k->nscatter++] =
            (lower_scatter_store){ir_imm(b, out->dtype, scatter_identity(reduce, out->dtype)), p,
                                  inside};
    int v = emit(e, out->src[2], &sat, inside);
    if (reduce != GRAPH_SCATTER_ASSIGN)
        v = ir_alu(b, scatter_combine(reduce), out->dtype, ir_load(b, out->dtype, 0, p, inside), v);
    k->scatter[k->nscatter++] = (lower_scatter_store){v, p, inside};
}

/* An elementwise kernel's program instances cover this many elements each:
 * OpenMP iterations large enough to amortise their start, and a power of
 * two, so that the trailing axes of power-of-two shapes (a 32 x 32 image)
 * lie within a tile and fold to lane arithmetic (ir_tiled_gidx). Fixed, not
 * chosen per shape, so that graphs that differ in sizes keep one tile and
 * can share a program (lower/sizes.c). */
enum { ELEMENTWISE_TILE = 1024 };

static bool lower_kernel_ir(lower_kernel *k, emitter *e) {
    graph_node *out = k->out;
    ir_builder *b = &e->b;
    const sched_node *oi = sched_of(e->s, out);
    k->rnumel = 1;
    e->ridx = -1;
    /* A scatter or a plain reduction lowers its sources, never itself
     * through emit(): listed here, its op leads the kernel's description. */
    if (out->op == GRAPH_SCATTER || graph_op_is_reduce(out->op))
        note_fused(e, out);
    if (out->op == GRAPH_SCATTER) {
        lower_scatter(k, e);
    } else if (graph_op_is_reduce(out->op)) {
        k->kind = LOWER_REDUCE;
        k->numel = graph_numel(out);
        int gidx = ir_gidx(b, k->numel);
        ix oat = unflatten(e, gidx, out->ndim, out->shape), sat;
        reduced_index(e, out->src[0], out->p.axes, gidx, &oat, &sat);
        k->result = ir_reduce(b, out->op, out->dtype, emit(e, out->src[0], &sat, -1), e->ridx);
        k->store = gidx;
    } else if (oi->form == SCHED_PER_ELEMENT) {
        /* one program instance per output element, which reduces each fused
         * reduction's row before the elementwise ops over the results */
        k->kind = LOWER_REDUCE;
        k->numel = graph_numel(out);
        int gidx = ir_gidx(b, k->numel);
        ix oat = unflatten(e, gidx, out->ndim, out->shape);
        ix rowat = {.ndim = oi->reduced_source->ndim, .flat = -1}, at;
        for (int d = 0; d < rowat.ndim; d++)
            rowat.d[d] = gidx; /* unused: each reduction names its own row */
        reduced_index(e, oi->reduced_source, oi->reduced_axes, gidx, &rowat, &at);
        k->result = emit(e, out, &oat, -1);
        k->store = gidx;
    } else if (oi->form == SCHED_ROWS) {
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
    } else if (e->region >= 0) {
        /* One source's region of a cat: the source's elements in order, each
         * loaded (or computed) once, stored at its place in the cat. Its
         * index there is the source's own with the axis moved by the sizes
         * before it: linear in the element along a leading axis, a plain
         * vector store. */
        graph_node *src = out->src[e->region];
        int ax = out->p.axis;
        int64_t lo = 0;
        for (int j = 0; j < e->region; j++)
            lo += out->src[j]->shape[ax];
        note_fused(e, out);
        k->kind = LOWER_ELEMENTWISE;
        k->region = e->region;
        k->numel = graph_numel(src);
        k->tile = e->tile;
        int gidx = ir_tiled_gidx(b, k->numel, k->tile);
        ix sat = unflatten(e, gidx, src->ndim, src->shape), oat = sat;
        k->result = emit(e, src, &sat, -1);
        oat.flat = -1;
        oat.d[ax] = ir_iadd(b, sat.d[ax], ir_index(b, lo));
        k->store = flatten(e, &oat, out->ndim, out->shape);
    } else {
        /* siblings too: every output is elementwise over the same shape */
        k->kind = LOWER_ELEMENTWISE;
        k->numel = graph_numel(out);
        k->tile = e->tile;
        int gidx = ir_tiled_gidx(b, k->numel, k->tile);
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

/* A collective's one input is its source, which fuse.c materialised. */
static bool lower_collective(lower_kernel *k, emitter *e) {
    k->kind = LOWER_COLLECTIVE;
    k->numel = graph_numel(k->out);
    k->rnumel = 1;
    input_slot(e, k->out->src[0]);
    return true;
}

/* Lowers the kernel whose outputs are outs[0..n): one root, or siblings.
 * KILN_OK with *retry NULL: k's IR is complete (see the end). */
static kiln_status lower_one(const sched *s, lower_kernel *k, graph_node **outs, int n,
                             int region, int64_t tile, const cat_store *cs, graph_node **retry,
                             char *msg, size_t cap) {
    emitter e;
    memset(&e, 0, sizeof e);
    ir_init(&e.b);
    e.k = k;
    e.s = s;
    e.ridx = -1;
    e.region = region;
    e.tile = tile;
    e.cat_store = cs;
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
    const sched_node *os = sched_of(s, out);
    graph_node *mm = out->op == GRAPH_MATMUL ? out : os->epilogue_of;
    bool ok = e.failed    ? false
              : os->alias ? lower_alias(k, &e)
              : graph_op_is_collective(out->op) ? lower_collective(k, &e)
              : mm        ? lower_matmul(k, &e, mm)
              : cs && cs->dkv ? lower_attention_kernel(k, &e, cs->dkv)
              : graph_op_is_attention(out->op) ? lower_attention_kernel(k, &e, out)
                          : lower_kernel_ir(k, &e);
    ok = ok && !e.failed && !e.b.failed;
    if (ok && (k->nouts == 1 || k->kind == LOWER_ATTENTION))
        for (int o = 0; o < k->nouts; o++)
            k->results[o] = k->result;
    k->ins = e.b.ins;
    k->nins = e.b.n;
    e.b.ins = NULL;
    ir_free(&e.b);
    /* Composite ops become primitives once, here, for every target. */
    ok = ok && lower_rules(k);
    free(e.memo);
    if (k->kind == LOWER_COLLECTIVE)
        lower_describe_fused(k, 1, &k->out);
    else
        lower_describe_fused(k, e.nfused, e.fused);
    free(e.fused);
    free(e.repeats);
    *retry = e.retry;
    if (k->kind != LOWER_ELEMENTWISE)
        k->tile = 1; /* an elementwise kernel's is set where its index is made */
    if (ok) {
        name_kernel(s, k);
        /* k's IR is complete here: every instruction (primitives only), its
         * inputs, results and store index. */
        return KILN_OK;
    }
    if (e.retry)
        return KILN_OK;
    char shape[64];
    describe_shape(shape, sizeof shape, out);
    if (e.unreadable_operand) {
        char os_shape[64];
        describe_shape(os_shape, sizeof os_shape, e.unreadable_operand);
        snprintf(msg, cap,
                 "kiln: scheduling: the matmul operand %s %s of kernel %s %s cannot be read "
                 "as strides over a buffer",
                 graph_op_name(e.unreadable_operand->op), os_shape, graph_op_name(out->op),
                 shape);
        return KILN_ERR_COMPILE;
    }
    snprintf(msg, cap, "kiln: out of memory while lowering the kernel of %s %s",
             graph_op_name(out->op), shape);
    return KILN_ERR_OOM;
}

static void kernel_free(lower_kernel *k) {
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
    free(k->size_at);
    free(k->size_value);
}

void lower_program_free(lower_program *p) {
    if (!p)
        return;
    for (int i = 0; i < p->nkernels; i++)
        kernel_free(&p->kernels[i]);
    free(p->kernels);
    free(p);
}

/* Whether instruction i of k is an elementwise kernel's flat index, tile *
 * T + lane (ir_tiled_gidx). */
static bool is_flat_index(const lower_kernel *k, int i) {
    const lower_ins *x = &k->ins[i];
    if (x->op != UOP_IADD)
        return false;
    int l = k->ins[x->a].op == UOP_LANE ? x->b : k->ins[x->b].op == UOP_LANE ? x->a : -1;
    return l >= 0 && k->ins[l].op == UOP_IMUL &&
           (k->ins[k->ins[l].a].op == UOP_TILE || k->ins[k->ins[l].b].op == UOP_TILE);
}

/* The divisions an elementwise kernel's index arithmetic takes per element:
 * divisions and remainders, among the instructions its stores need, of
 * values that depend on the element's place in its tile (UOP_LANE); in
 * *least the smallest divisor of the flat index or of the lane itself among
 * them (the view's innermost axes it recovers), or 0. -1 out of memory. */
static int lane_divisions(const lower_kernel *k, int64_t *least) {
    int n = 0;
    *least = 0;
    bool *live = calloc((size_t)(k->nins ? k->nins : 1), sizeof *live);
    if (!live)
        return -1;
    lower_live(k, live);
    for (int i = 0; i < k->nins; i++) {
        const lower_ins *x = &k->ins[i];
        if (!live[i] || (x->op != UOP_IDIV && x->op != UOP_IMOD) || !x->lane)
            continue;
        n++;
        /* the flat index's, or the lane's where the tile's part split off
         * (ir_idiv: a divisor of the tile, say 64) */
        if (k->ins[x->b].op != UOP_IMM || k->ins[x->b].sized ||
            !(is_flat_index(k, x->a) || k->ins[x->a].op == UOP_LANE))
            continue;
        int64_t d = k->ins[x->b].imm.i;
        if (d > 1 && (!*least || d < *least))
            *least = d;
    }
    free(live);
    return n;
}

/* The row an elementwise kernel k (of tile ELEMENTWISE_TILE) would rather
 * take as its tile (LOWER_ROW_TILES), or 0; *divisions, k's count of them
 * (lane_divisions). Where its index arithmetic divides an element's place
 * in the tile: the least divisor of the flat index (or of the lane), where
 * it divides the kernel's elements (rows of at least 8, the view's
 * innermost run: the output's rows, or a 1-d cat region's source's), so
 * that every element of a tile shares its quotients. The caller keeps
 * that lowering only where it divides less per element. Measured on the
 * CNN's im2col, [128,16,3,3,14,14] from [128,16,14,14] padded: 2.9 -> 1.0
 * ms (the divisions and a gather per element, against a row's divisions
 * once and a vector load); the regions of attention's joined dk and dv,
 * columns of one [.., 256, 128] output, 0.98 -> 0.71 ms each. */
enum { ROW_TILE_MIN = 8, ROW_TILE_MAX = 1 << 16 };
static int64_t row_tile(const lower_kernel *k, int *divisions) {
    int64_t least;
    if (k->kind != LOWER_ELEMENTWISE || k->nsizes)
        return 0;
    *divisions = lane_divisions(k, &least);
    /* A divisor under 8 that divides the output's last axis (a max-pool
     * backward's x / 2 in rows of 28) leaves that axis the row: the CNN's
     * [128, 16, 28, 28] 2.6 -> 1.5 ms (Zen 3). Not one across axes: a last
     * axis of 6 beside one of n would make rows of 6 n, and programs shared
     * by sizes of n could not share that (dynamic_test). */
    const graph_node *o = k->out;
    int64_t last = o->ndim > 0 ? o->shape[o->ndim - 1] : 0;
    if (least > 1 && least < ROW_TILE_MIN && last >= ROW_TILE_MIN && last % least == 0)
        least = last;
    if (*divisions <= 0 || least < ROW_TILE_MIN || least > ROW_TILE_MAX || least == k->tile)
        return 0;
    return k->numel % least == 0 ? least : 0;
}

/* How many kernels materialised node x is lowered as: a cat of several
 * sources computed plainly (no reduction fused in, no sibling outputs, no
 * matmul it finishes) is one per source (lower_kernel.region); the rest one.
 * The select chain (emit_cat) stays for cats fused into their consumers, and
 * for small cats of few sources, whose sources average under a tile each:
 * there a launch per source (and a function per source to compile) costs
 * more than the chain's masked loads of a few thousand elements save. Past
 * CAT_CHAIN_MAX sources the chain's one function grows too long for the
 * compiler: a cat of 1000 scalars took gcc 100 s (256: 4.9 s, 64: 1.0 s,
 * with the scalars' own kernels). */
#define CAT_CHAIN_MAX 64
static int cat_regions(const sched *s, const graph_node *x) {
    const sched_node *xs = sched_of(s, x);
    if (x->op != GRAPH_CAT || x->nsrc < 2 || xs->alias || xs->form != SCHED_PLAIN ||
        xs->sibling_group >= 0 || xs->epilogue_of ||
        (graph_numel(x) < (int64_t)x->nsrc * ELEMENTWISE_TILE && x->nsrc <= CAT_CHAIN_MAX))
        return 1;
    return x->nsrc;
}

int64_t sched_attention_partner(const sched *s, int64_t i) {
    const graph_node *x = s->order[i];
    if (!s->joint_attention || (x->op != GRAPH_ATTENTION_DKV && x->op != GRAPH_ATTENTION_DQ))
        return -1;
    int64_t nb = 1;
    for (int d = 0; d < x->ndim - 2; d++)
        nb *= x->shape[d];
    if (nb < LOWER_JOINT_ATTENTION_BATCH)
        return -1;
    graph_op other = x->op == GRAPH_ATTENTION_DKV ? GRAPH_ATTENTION_DQ : GRAPH_ATTENTION_DKV;
    for (int64_t j = 0; j < s->count; j++) {
        const graph_node *y = s->order[j];
        const sched_node *ys = &s->nodes[j];
        if (y->op != other || !ys->materialized || ys->alias || ys->sibling_group >= 0 ||
            y->nsrc != x->nsrc || y->p.scale != x->p.scale || y->p.causal != x->p.causal ||
            y->dtype != x->dtype)
            continue;
        bool same = true;
        for (int k = 0; k < x->nsrc && same; k++)
            same = y->src[k] == x->src[k];
        if (same)
            return j;
    }
    return -1;
}

kiln_status sched_emit_program(const sched *s, lower_program **out, graph_node **retry,
                               char *msg, size_t cap) {
    *out = NULL;
    *retry = NULL;
    lower_program *p = calloc(1, sizeof *p);
    int nk = 0;
    for (int64_t i = 0; i < s->count; i++)
        nk += s->nodes[i].materialized ? cat_regions(s, s->order[i]) : 0;
    kiln_status st = KILN_OK;
    if (!p || !(p->kernels = calloc((size_t)(nk ? nk : 1), sizeof *p->kernels))) {
        snprintf(msg, cap, "kiln: out of memory while scheduling %d kernels", nk);
        st = KILN_ERR_OOM;
    }
    /* Each sibling group's stored members, chained back from the last: the
     * group is lowered at its last member, which walks the chain (one pass
     * here, not a scan of every earlier node per group: a graph of many small
     * groups took seconds). */
    int64_t ngid = 0;
    for (int64_t i = 0; i < s->count; i++)
        if (s->nodes[i].sibling_group >= ngid)
            ngid = s->nodes[i].sibling_group + 1;
    int64_t *prev_member = ngid ? malloc(sizeof *prev_member * (size_t)s->count) : NULL;
    int64_t *last_member = ngid ? malloc(sizeof *last_member * (size_t)ngid) : NULL;
    if (ngid && (!prev_member || !last_member) && st == KILN_OK) {
        snprintf(msg, cap, "kiln: out of memory while scheduling %d kernels", nk);
        st = KILN_ERR_OOM;
    }
    for (int64_t g = 0; st == KILN_OK && g < ngid; g++)
        last_member[g] = -1;
    for (int64_t i = 0; st == KILN_OK && ngid && i < s->count; i++) {
        int g = s->nodes[i].sibling_group;
        prev_member[i] = -1;
        if (g >= 0 && !s->nodes[i].unstored) {
            prev_member[i] = last_member[g];
            last_member[g] = i;
        }
    }
    /* the later of a joint attention backward's two nodes, lowered with the
     * first, and both nodes of a pair that stores into a cat, lowered at the
     * cat (allocated at the first pair; out of memory, pairs stay apart) */
    bool *joined = NULL;
    cat_store *stores = NULL; /* per node: the pair storing it, where it is such a cat */
    for (int64_t i = 0; st == KILN_OK && s->joint_attention && i < s->count; i++) {
        cat_store cs = {0};
        graph_node *att = NULL;
        bool into_cat = s->order[i]->op == GRAPH_CAT &&
                        sched_cat_attention_stores(s, s->order[i], &cs.dkv, &cs.dq, cs.store);
        if (!into_cat && (s->order[i]->op != GRAPH_VIEW ||
                          !sched_view_attention_copy(s, s->order[i], &att, cs.store)))
            continue;
        if (!joined)
            joined = calloc((size_t)s->count, sizeof *joined);
        if (!stores)
            stores = calloc((size_t)s->count, sizeof *stores);
        if (!joined || !stores)
            break;
        if (into_cat) {
            stores[i] = cs;
            joined[sched_pos(s, cs.dkv)] = joined[sched_pos(s, cs.dq)] = true;
        } else if (!stores[sched_pos(s, att)].copy) { /* one copy per forward */
            cs.copy = s->order[i];
            stores[sched_pos(s, att)] = cs;
            joined[i] = true;
        }
    }
    for (int64_t i = 0; st == KILN_OK && !*retry && i < s->count; i++) {
        const sched_node *xs = &s->nodes[i];
        if (!xs->materialized || (xs->sibling_group >= 0 && !xs->lowers_group) ||
            (joined && joined[i]))
            continue;
        graph_node *outs[8] = {s->order[i]};
        int n = 1;
        const cat_store *cs = stores && (stores[i].dkv || stores[i].copy) ? &stores[i] : NULL;
        int64_t partner = xs->sibling_group >= 0 || cs ? -1 : sched_attention_partner(s, i);
        if (cs && cs->copy) {
            outs[n++] = cs->copy;
        } else if (xs->sibling_group >= 0) {
            /* its members in post-order: the chain back from the last, reversed */
            n = 0;
            for (int64_t j = last_member[xs->sibling_group]; j >= 0 && n < 8; j = prev_member[j])
                outs[n++] = s->order[j];
            for (int a = 0, z = n - 1; a < z; a++, z--) {
                graph_node *t = outs[a];
                outs[a] = outs[z];
                outs[z] = t;
            }
        } else if (partner >= 0) {
            if (!joined)
                joined = calloc((size_t)s->count, sizeof *joined);
            if (joined) {
                joined[partner] = true;
                bool dkv_first = s->order[i]->op == GRAPH_ATTENTION_DKV;
                outs[0] = dkv_first ? s->order[i] : s->order[partner];
                outs[1] = dkv_first ? s->order[partner] : s->order[i];
                n = 2;
            }
        }
        int regions = n == 1 && !cs ? cat_regions(s, outs[0]) : 1;
        for (int r = 0; st == KILN_OK && !*retry && r < regions; r++) {
            lower_kernel *k = &p->kernels[p->nkernels];
            st = lower_one(s, k, outs, n, regions > 1 ? r : -1, ELEMENTWISE_TILE, cs, retry, msg,
                           cap);
            int divisions = 0;
            int64_t row = st == KILN_OK && !*retry && s->row_tiles ? row_tile(k, &divisions) : 0;
            if (row) {
                /* lowered again with the row as its tile; kept where that
                 * divides less per element */
                lower_kernel rk;
                memset(&rk, 0, sizeof rk);
                graph_node *rretry = NULL;
                int64_t least;
                int fewer = -1;
                if (lower_one(s, &rk, outs, n, regions > 1 ? r : -1, row, cs, &rretry, msg,
                              cap) ==
                        KILN_OK &&
                    !rretry)
                    fewer = lane_divisions(&rk, &least);
                if (fewer >= 0 && fewer < divisions) {
                    kernel_free(k);
                    *k = rk;
                } else {
                    kernel_free(&rk);
                }
            }
            /* Names are unique within a program: they are its symbols. */
            size_t len = strlen(k->name);
            if (len > sizeof k->name - 16)
                k->name[len = sizeof k->name - 16] = 0;
            snprintf(k->name + len, sizeof k->name - len, "_k%d", p->nkernels++);
        }
    }
    free(joined);
    free(stores);
    free(prev_member);
    free(last_member);
    if (st != KILN_OK || *retry) {
        lower_program_free(p);
        return st;
    }
    *out = p;
    return KILN_OK;
}
