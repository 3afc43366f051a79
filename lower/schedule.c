/* schedule.c — the scheduler's driver: one run cuts the graph below some
 * targets into kernels. It collects the pending nodes in post-order with
 * their side tables (sched.h), has fuse.c decide the kernels and emit.c
 * lower them, and repeats the emission when it names a fused node that must
 * be materialised after all. The run owns every table and frees them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower/sched.h"

bool sched_pending(const graph_node *n) { return !n->buf && n->op != GRAPH_BUFFER; }

bool sched_same_shape(const graph_node *a, const graph_node *b) {
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

bool sched_elementwise(const graph_node *x) {
    return graph_op_is_unary(x->op) || graph_op_is_binary(x->op) || x->op == GRAPH_WHERE ||
           graph_is_identity(x);
}

static size_t index_hash(const graph_node *n) {
    uint64_t h = (uint64_t)(uintptr_t)n * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29));
}

int64_t sched_pos(const sched *s, const graph_node *n) {
    if (!s->index_cap)
        return -1;
    size_t mask = s->index_cap - 1;
    for (size_t i = index_hash(n) & mask;; i = (i + 1) & mask) {
        int64_t at = s->index[i];
        if (at < 0 || s->order[at] == n)
            return at;
    }
}

sched_node *sched_of(const sched *s, const graph_node *n) {
    int64_t at = sched_pos(s, n);
    return at < 0 ? NULL : &s->nodes[at];
}

static void sched_free(sched *s) {
    free(s->order);
    free(s->nodes);
    free(s->index);
}

/* The pending nodes below the targets in post-order, each with its state
 * and its count of distinct consumers; false when out of memory. */
static bool collect(sched *s, int n, graph_node *const *targets) {
    memset(s, 0, sizeof *s);
    if (graph_postorder(n, targets, true, &s->order, &s->count) != KILN_OK)
        return false;
    if (!s->count)
        return true;
    size_t cap = 16;
    while (cap < (size_t)s->count * 2)
        cap *= 2;
    s->nodes = calloc((size_t)s->count, sizeof *s->nodes);
    s->index = malloc(sizeof *s->index * cap);
    if (!s->nodes || !s->index)
        return false;
    memset(s->index, 0xff, sizeof *s->index * cap); /* every slot -1 */
    s->index_cap = cap;
    for (int64_t i = 0; i < s->count; i++) {
        size_t at = index_hash(s->order[i]) & (cap - 1);
        while (s->index[at] >= 0)
            at = (at + 1) & (cap - 1);
        s->index[at] = i;
        s->nodes[i].sibling_group = -1;
    }
    for (int64_t i = 0; i < s->count; i++) {
        graph_node *x = s->order[i];
        for (int j = 0; j < x->nsrc; j++) {
            sched_node *src = sched_of(s, x->src[j]);
            if (src && src->last_consumer != x) {
                src->nconsumers++;
                src->last_consumer = x;
            }
        }
    }
    return true;
}

/* The runtime holds a collective back until a kernel reads its result, and
 * then sends every held one together (jit/backend.c), which buckets small
 * all-reduces into one message. So kernels that read no collective's result
 * go first wherever the data allows: a backward pass's gradient all-reduces
 * then end up side by side, the optimiser's updates after them, instead of
 * each update right behind its own gradient's all-reduce (a data-parallel
 * MLP step sent its 7 collectives as 6 messages; now as 1). The order stays
 * a topological one, and otherwise the scheduler's. false when out of
 * memory (the order is then left as it was). */
static bool delay_collective_readers(lower_program *p) {
    int n = p->nkernels, ncoll = 0;
    for (int i = 0; i < n; i++)
        ncoll += p->kernels[i].kind == LOWER_COLLECTIVE;
    if (!ncoll)
        return true;
    int *order = malloc(sizeof *order * (size_t)n);
    bool *placed = calloc((size_t)n, sizeof *placed), *reads = calloc((size_t)n, sizeof *reads);
    lower_kernel *ks = malloc(sizeof *ks * (size_t)n);
    bool ok = order && placed && reads && ks;
    /* each output names its kernel through scratch while the pass runs */
    for (int i = 0; ok && i < n; i++)
        for (int o = 0; o < p->kernels[i].nouts; o++)
            p->kernels[i].outs[o]->scratch = (void *)(intptr_t)(i + 1);
    for (int i = 0; ok && i < n; i++)
        for (int in = 0; in < p->kernels[i].ninputs; in++) {
            intptr_t by = (intptr_t)p->kernels[i].inputs[in]->scratch - 1;
            reads[i] = reads[i] || (by >= 0 && by < n && p->kernels[by].kind == LOWER_COLLECTIVE);
        }
    for (int at = 0; ok && at < n; at++) {
        int pick = -1;
        for (int pass = 0; pass < 2 && pick < 0; pass++)
            for (int i = 0; i < n && pick < 0; i++) {
                if (placed[i] || (pass == 0 && reads[i]))
                    continue;
                /* a cat's regions stay in order, its first allocating its output */
                bool ready = !p->kernels[i].region || placed[i - 1];
                for (int in = 0; in < p->kernels[i].ninputs && ready; in++) {
                    intptr_t by = (intptr_t)p->kernels[i].inputs[in]->scratch - 1;
                    ready = by < 0 || by >= n || placed[by];
                }
                if (ready)
                    pick = i;
            }
        if (pick < 0) { /* not a DAG: cannot happen, and is not papered over */
            ok = false;
            break;
        }
        placed[pick] = true;
        order[at] = pick;
    }
    for (int i = 0; i < n; i++)
        for (int o = 0; o < p->kernels[i].nouts; o++)
            p->kernels[i].outs[o]->scratch = NULL;
    if (ok) {
        for (int at = 0; at < n; at++)
            ks[at] = p->kernels[order[at]];
        memcpy(p->kernels, ks, sizeof *ks * (size_t)n);
    }
    free(order);
    free(placed);
    free(reads);
    free(ks);
    return ok;
}

kiln_status lower_schedule_program(int n, graph_node *const *targets, unsigned flags,
                                   lower_program **out, char *msg, size_t cap) {
    *out = NULL;
    sched s;
    if (!collect(&s, n, targets)) {
        snprintf(msg, cap, "kiln: out of memory while scheduling %lld nodes",
                 (long long)s.count);
        sched_free(&s);
        return KILN_ERR_OOM;
    }
    bool fuse = flags & LOWER_FUSE;
    s.joint_attention = fuse && (flags & LOWER_JOINT_ATTENTION_GRADS);
    s.split_operands = fuse && (flags & LOWER_SPLIT_OPERANDS);
    s.row_tiles = flags & LOWER_ROW_TILES;
    sched_fuse(&s, n, targets, fuse);
    kiln_status st;
    graph_node *retry;
    while ((st = sched_emit_program(&s, out, &retry, msg, cap)) == KILN_OK && retry) {
        if (!sched_unfuse(&s, retry)) {
            snprintf(msg, cap, "kiln: scheduling: a %s fits neither its kernel nor one of its own",
                     graph_op_name(retry->op));
            st = KILN_ERR_COMPILE;
            break;
        }
    }
    sched_free(&s);
    if (st == KILN_OK && !delay_collective_readers(*out)) {
        lower_program_free(*out);
        *out = NULL;
        snprintf(msg, cap, "kiln: out of memory while ordering the kernels");
        st = KILN_ERR_OOM;
    }
    return st;
}

lower_program *lower_schedule(int n, graph_node *const *targets, unsigned flags) {
    lower_program *p;
    char msg[256];
    return lower_schedule_program(n, targets, flags, &p, msg, sizeof msg) == KILN_OK ? p : NULL;
}
