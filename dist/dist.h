/* dist.h — dist/'s face: a world of processes (the job mpirun started) and
 * the collectives that run in it, over MPI between CPU processes or NCCL
 * between GPUs.
 *
 * graph/ knows collectives only as node ops; who runs them is the world a
 * context joined (kiln_dist_init). Data here is host memory, row-major and
 * contiguous, of the descriptor's dtype: jit/ and the reference evaluator
 * hand over a collective's source that way and take its result back.
 *
 * Every rank of a job must run the same collectives in the same order; the
 * world checks that before the data moves (dist_agree) and reports a mismatch
 * on every rank with the ranks named. No call waits longer than the world's
 * timeout (KILN_DIST_TIMEOUT seconds, default 300): a rank that died or
 * stopped taking part makes the others fail with KILN_ERR_DIST, and the world
 * is then broken: every later call fails at once, saying why. */
#ifndef KILN_DIST_H
#define KILN_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/kiln.h"

typedef enum dist_op {
    DIST_ALL_REDUCE,     /* every rank gets the reduction of every rank's tensor */
    DIST_ALL_GATHER,     /* every rank gets the ranks' tensors joined along axis, rank order */
    DIST_REDUCE_SCATTER, /* the reduction, cut along axis in size equal pieces: rank r gets piece r */
    DIST_BROADCAST       /* every rank gets root's tensor */
} dist_op;

/* One collective as this rank sees it. shape is the source's, on this rank;
 * the result's is the same, except along axis: times the world size for an
 * all-gather, divided by it for a reduce-scatter (shape[axis] must divide). */
typedef struct dist_desc {
    dist_op op;
    kiln_reduce_op reduce; /* DIST_ALL_REDUCE, DIST_REDUCE_SCATTER */
    int root;              /* DIST_BROADCAST */
    int axis;              /* DIST_ALL_GATHER, DIST_REDUCE_SCATTER */
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
} dist_desc;

typedef struct dist_world dist_world;

/* Joins the job: for KILN_DIST_MPI, initialises MPI unless the program
 * already did (and then leaves it initialised at the end); for
 * KILN_DIST_NCCL, also needs a GPU context (gpu says whether the caller's
 * context is one) and bootstraps NCCL over MPI. On failure (no MPI
 * installed, not started by mpirun in a way MPI accepts, no GPU for NCCL)
 * *out is NULL, msg says why, and the status is KILN_ERR_DIST (or
 * KILN_ERR_DEVICE for a missing GPU, KILN_ERR_ARG for a KILN_DIST_TIMEOUT or
 * KILN_DIST_BUCKET_MB that is not a positive number). */
kiln_status dist_world_new(kiln_dist_backend backend, bool gpu, dist_world **out, char *msg,
                           size_t cap);
/* Leaves the job: finalises MPI if dist_world_new initialised it and no
 * other world of the process still uses it, and if the world is not broken
 * (finalising is collective, and would wait for a stuck rank forever). */
void dist_world_free(dist_world *w);
int dist_rank(const dist_world *w);
int dist_size(const dist_world *w);
kiln_dist_backend dist_backend(const dist_world *w);

/* The descriptor of collective node n (GRAPH_ALL_REDUCE …) over its source. */
struct graph_node;
void dist_desc_of(const struct graph_node *n, dist_desc *d);

/* The result's shape of d (as above) into shape (ndim is d's). */
void dist_result_shape(const dist_world *w, const dist_desc *d, int64_t *shape);

/* Checks that every rank is about to run the same n collectives, in the same
 * order (n may be 0: a rank with nothing to run then fails the ranks that
 * have). `what` names the caller in messages ("kiln_all_reduce"). On a
 * mismatch every rank gets KILN_ERR_DIST and a message naming the first
 * collective that differs and the ranks on each side, with what each holds:
 * "kiln_all_reduce: the ranks disagree on collective 1 of 2: ranks 0, 2 have
 * all_reduce(sum) f32 [4,3], rank 1 has all_reduce(sum) f32 [4,5]". */
kiln_status dist_agree(dist_world *w, int n, const dist_desc *d, const char *what, char *msg,
                       size_t cap);

/* Runs n collectives that dist_agree accepted: src[i] is the source's data
 * (d[i]'s shape and dtype), dst[i] receives the result: for an all-reduce or
 * a broadcast it may be src[i] itself (in place), otherwise it overlaps no
 * source. Consecutive all-reduces of one dtype and reduce op are
 * bucketed into one message of up to KILN_DIST_BUCKET_MB (default 25) MB.
 * Every dtype: floats reduce in their own type (f16 and bf16 in f32, rounded
 * once at the end), integers wrap, bool's sum and max are "or", its min
 * "and"; KILN_REDUCE_MEAN is for floats only (api/ refuses the rest). */
kiln_status dist_run(dist_world *w, int n, const dist_desc *d, const void *const *src,
                     void *const *dst, const char *what, char *msg, size_t cap);

/* What a world has sent so far: collectives run, and the messages they
 * travelled in (bucketed all-reduces share one; a very large one is cut in
 * several). dist_agree's own small messages are not counted. */
typedef struct dist_counts {
    int64_t collectives, messages;
} dist_counts;
dist_counts dist_get_counts(const dist_world *w);

/* "all_reduce(sum)", "all_gather(axis 1)", "broadcast(root 0)" ... into out. */
void dist_desc_name(const dist_desc *d, char *out, size_t cap);

/* Whether NCCL can be loaded (for tests and diagnostics; starts nothing):
 * KILN_OK with its version ("2.18.3") and the library's path, or
 * KILN_ERR_DIST with msg naming every place tried. */
kiln_status dist_nccl_probe(char *version, size_t vcap, char *path, size_t pcap, char *msg,
                            size_t cap);

#endif /* KILN_DIST_H */
