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

bool sched_elementwise(graph_op op) {
    return graph_op_is_unary(op) || graph_op_is_binary(op) || op == GRAPH_WHERE;
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

kiln_status lower_schedule_program(int n, graph_node *const *targets, bool fuse,
                                   lower_program **out, char *msg, size_t cap) {
    *out = NULL;
    sched s;
    if (!collect(&s, n, targets)) {
        snprintf(msg, cap, "kiln: out of memory while scheduling %lld nodes",
                 (long long)s.count);
        sched_free(&s);
        return KILN_ERR_OOM;
    }
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
    return st;
}

lower_program *lower_schedule(int n, graph_node *const *targets, bool fuse) {
    lower_program *p;
    char msg[256];
    return lower_schedule_program(n, targets, fuse, &p, msg, sizeof msg) == KILN_OK ? p : NULL;
}
