/* sched.h — lower/'s private scheduler state: one run's view of the graph
 * and its decisions, shared by fuse.c (which node is a kernel boundary and
 * what fuses into what), emit.c (kernel IR from those decisions) and
 * schedule.c (the driver, which owns a run). A run keeps its state in side
 * tables indexed by a node's position in the run's post-order; graph nodes
 * carry none of it. */
#ifndef KILN_LOWER_SCHED_H
#define KILN_LOWER_SCHED_H

#include "lower/lower.h"

/* How a kernel root's program instances cover its output. */
typedef enum sched_form {
    SCHED_PLAIN,       /* each output element computed once; no reduction fused in
                          (a reduction root reduces each of its rows once) */
    SCHED_ROWS,        /* a row kernel: one instance per row, a pass over the row per
                          fused reduction and one more to store (softmax, layer-norm);
                          a reduction root: reductions over its rows fused in */
    SCHED_PER_ELEMENT  /* one instance per output element, which reduces each fused
                          reduction's row before the elementwise ops over the results
                          (a mean's division, a variance from two sums) */
} sched_form;

/* What a run knows and decides of one pending node. */
typedef struct sched_node {
    /* the graph, as collected */
    int nconsumers;              /* distinct pending nodes that read it */
    graph_node *last_consumer;   /* the last of them in post-order */
    bool requested;              /* one of the run's targets */
    /* boundaries and membership */
    bool materialized;           /* stored in a buffer of its own: a kernel's output,
                                    or an alias */
    bool alias;                  /* a reshape sharing its source's buffer */
    graph_node *root;            /* the kernel root it is computed in (itself when
                                    materialised; NULL for leaves' views and constants,
                                    which every kernel reads again) */
    bool split_consumers;        /* its consumers are in different kernels */
    /* as a kernel root */
    sched_form form;
    uint32_t row_axes;                /* SCHED_ROWS: the axes a row spans */
    const graph_node *reduced_source; /* SCHED_PER_ELEMENT: the fused reductions' source */
    uint32_t reduced_axes;            /* and the axes they reduce */
    graph_node *epilogue_of;     /* the matmul whose dot products its kernel finishes */
    int sibling_group;           /* the multi-output kernel it is an output of; -1: none */
    bool lowers_group;           /* the group's last member, where its kernel is lowered */
    bool unstored;               /* a member only its own group's kernel reads: computed
                                    there, stored nowhere (fuse.c, unstored_members) */
} sched_node;

typedef struct sched {
    graph_node **order;  /* the pending nodes below the targets, in post-order */
    int64_t count;
    sched_node *nodes;   /* nodes[i] describes order[i] */
    int64_t *index;      /* open addressing from a node to its position; -1: empty */
    size_t index_cap;    /* a power of two, or 0 when nothing is pending */
    bool joint_attention; /* LOWER_JOINT_ATTENTION_GRADS */
    bool split_operands;  /* LOWER_SPLIT_OPERANDS */
    bool row_tiles;       /* LOWER_ROW_TILES */
} sched;

/* n's position in the run's post-order; -1 when n is not pending below the
 * targets (a realized node). */
int64_t sched_pos(const sched *s, const graph_node *n);
/* n's state, or NULL where sched_pos is -1. */
sched_node *sched_of(const sched *s, const graph_node *n);

bool sched_pending(const graph_node *n);
bool sched_same_shape(const graph_node *a, const graph_node *b);
/* Whether x computes each element from its sources' elements at the same
 * index: an elementwise op (broadcasts are views below it), or a cat of one
 * source, the identity that kiln_detach and every op under no-grad record
 * (an optimiser's whole update is made of them). */
bool sched_elementwise(const graph_node *x);

/* ---- fuse.c ---- */

/* Makes every fusion decision of a run (with fuse false, every op that
 * computes is its own kernel). */
void sched_fuse(sched *s, int n, graph_node *const *targets, bool fuse);
/* A fused node that emission found cannot be computed where it was put
 * becomes its own kernel, and the decisions that depend on it are made
 * again. false when it already was one (the schedule cannot be repaired). */
bool sched_unfuse(sched *s, graph_node *x);
/* The materialised node (or leaf) that matmul operand o reads as strides,
 * with o's layout over it; NULL while o cannot be read so. */
graph_node *sched_operand_base(const sched *s, graph_node *o, lower_operand *layout);
/* As sched_operand_base for source j of matmul x, and where that fails and
 * the target takes them, a split operand over the buffer its view reads
 * (lower.h's lower_operand); NULL while neither reads it. */
graph_node *sched_matmul_operand(const sched *s, const graph_node *x, int j,
                                 lower_operand *layout);

/* ---- stores.c ---- */

/* Whether cat x is stored whole by the joint attention backward of a pair
 * (*dkv, *dq) instead of copied from them: every source of x a chain of
 * views of dk, dv or dq read by nothing else, mapping each one-to-one into
 * its region. Then store[0..2] place dk, dv and dq in x's buffer (buf 0),
 * as lower_attention.store does. */
bool sched_cat_attention_stores(const sched *s, const graph_node *x, graph_node **dkv,
                                graph_node **dq, lower_operand store[3]);

/* Whether view x is materialised only to copy the forward attention output
 * o from *att's (a chain of views read by nothing else, one-to-one); then
 * *store places o in x's buffer, as the attention kernel's second output
 * (buf 1). */
bool sched_view_attention_copy(const sched *s, const graph_node *x, graph_node **att,
                               lower_operand *store);

/* Piece *at of attention output x in its own buffer (outs[buf]), row-major:
 * its columns from c0 on, of each of x's rows. */
void sched_attention_own_piece(const graph_node *x, int buf, int64_t c0, lower_operand *at);

/* ---- emit.c ---- */

/* The partner of attention backward node i for one joint kernel
 * (LOWER_JOINT_ATTENTION_GRADS): the materialised dq of a dkv, or dkv of a
 * dq, of the same sources and parameters; -1 when there is none. */
int64_t sched_attention_partner(const sched *s, int64_t i);

/* Lowers every kernel of the run into *out. KILN_OK with *out NULL and
 * *retry set when a fused node turned out not to fit its kernel (then
 * sched_unfuse it and emit again); otherwise a failure with msg naming it. */
kiln_status sched_emit_program(const sched *s, lower_program **out, graph_node **retry,
                               char *msg, size_t cap);

#endif /* KILN_LOWER_SCHED_H */
