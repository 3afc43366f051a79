/* jit.h — jit/'s face: the runtime that compiles and runs a captured graph's
 * kernels on a device (jit/device.h), the device's buffers, the counters,
 * debug output, profiler and the machine's limits. api/ makes one backend
 * per context, whatever its device. */
#ifndef KILN_JIT_H
#define KILN_JIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "api/kiln.h"
#include "graph/graph.h"

typedef struct jit_backend jit_backend;

/* A backend on the device serving dev (jit/devices.c; for KILN_CPU the one
 * KILN_CPU_COMPILER names). NULL with a message and *st when unavailable:
 * KILN_ERR_DEVICE for a device that cannot be opened or a bad
 * KILN_CPU_COMPILER, KILN_ERR_OOM. */
jit_backend *jit_backend_new(kiln_device dev, kiln_status *st, char *msg, size_t msgcap);
void jit_backend_free(jit_backend *j);

/* A context that joined a job of local_ranks processes on this machine gives
 * each its share of the cores (unless KILN_THREADS says otherwise): OpenMP
 * threads of several processes on too few cores wait for each other at every
 * barrier (a data-parallel MLP step over 2 ranks on 2 cores ran 17 times
 * slower with 2 threads per rank than with 1). */
void jit_backend_share_cores(jit_backend *j, int local_ranks);
/* Whether graphs that differ only in sizes share compiled programs
 * (kiln_ctx_set_dynamic; KILN_DYNAMIC=0 starts a context with it off). */
void jit_backend_set_dynamic(jit_backend *j, bool on);

/* Whether the device runs generated code that debug output, the profiler
 * and the machine's limits describe (false for the reference evaluator). */
bool jit_backend_watched(const jit_backend *j);

/* A buffer of the backend's device holding a copy of src's nbytes (zeros
 * when src is NULL). */
kiln_status jit_buffer_new(jit_backend *j, size_t nbytes, const void *src, graph_buffer **out,
                           char *msg, size_t msgcap);
/* Copies n bytes at offset of b out to dst through the device that owns b. */
kiln_status jit_buffer_read(const graph_buffer *b, size_t offset, void *dst, size_t n,
                            char *msg, size_t msgcap);
/* Whether b's data is a host address the caller may read directly: memory of
 * a device whose buffers are host memory (KILN_CPU, KILN_REF), or of none. */
bool jit_buffer_is_host(const graph_buffer *b);
/* Whether the backend's device keeps its buffers in host memory, so that a
 * host buffer of no device (graph_buffer_adopt'ed, owner NULL) can be bound
 * to its kernels as it is. */
bool jit_backend_host_memory(const jit_backend *j);
/* The device b's memory belongs to and which one of its kind; false for a
 * buffer of no device (host memory). */
bool jit_buffer_device(const graph_buffer *b, kiln_device *kind, int *ordinal);
/* Whether the backend's device computes graph op `op` with result dtype dt
 * (api/ records another form of an op that it does not: fused attention). */
bool jit_backend_supports(const jit_backend *j, graph_op op, kiln_dtype dt);
/* The backend's device and which one of its kind. */
kiln_device jit_backend_device(const jit_backend *j, int *ordinal);
/* Memory of the backend's own device that someone else allocated (a DLPack
 * import), as a buffer its kernels read in place; release(arg, b) gives it
 * back when the last reference goes. NULL when out of memory. */
graph_buffer *jit_backend_adopt(jit_backend *j, void *data, size_t nbytes,
                                void (*release)(void *, graph_buffer *), void *arg);

/* Realizes the n nodes by compiling and running kernels: fused, or with
 * fuse false one kernel per op (eager mode). Nodes already realized stay so
 * on failure, and the message names what failed. forgets[i] (NULL: none)
 * promises that nodes[i] drops its sources once this succeeds (an assigned
 * update without history): a leaf read only through such nodes dies with
 * the run, and an output may take its buffer (jit/donate.c). */
kiln_status jit_realize(jit_backend *j, int n, graph_node *const *nodes, const bool *forgets,
                        bool fuse, char *msg, size_t msgcap);

kiln_stats jit_stats(const jit_backend *j);
/* Compiled programs kept in the whole-graph cache (at most
 * KILN_GRAPH_CACHE_MAX, default 256; the least recently used go first). */
int64_t jit_graph_cache_size(const jit_backend *j);

/* ---- watching programs run (jit/profile.c, jit/machine.c) ---- */

void jit_set_debug(jit_backend *j, int level);
int jit_debug(const jit_backend *j);
/* The machine's measured limits, as kiln_machine_info reports them. */
kiln_status jit_machine_limits(jit_backend *j, kiln_machine *m, char *msg, size_t msgcap);
kiln_status jit_machine_remeasure(jit_backend *j, kiln_machine *m, char *msg, size_t msgcap);

/* A profile records every launch and sync from begin to end; a new begin
 * starts a fresh one. The reports read the last one recorded (empty if none). */
kiln_status jit_profile_begin(jit_backend *j, char *msg, size_t msgcap);
void jit_profile_end(jit_backend *j);

/* Kernels in the profile, in order of first launch. Kernel i's line (its
 * strings live as long as the profile) needs the machine's limits: when they
 * cannot be had it comes without pct_of_limit, with the reason's status and
 * message (KILN_ERR_ARG: no kernel i, and *r is left as it was). */
int jit_profile_count(jit_backend *j);
kiln_status jit_profile_kernel(jit_backend *j, int i, kiln_kernel_profile *r, char *msg,
                               size_t msgcap);
kiln_status jit_profile_print(jit_backend *j, FILE *f, char *msg, size_t msgcap);
kiln_status jit_profile_write_json(jit_backend *j, const char *path, char *msg, size_t msgcap);
kiln_status jit_profile_write_trace(jit_backend *j, const char *path, char *msg, size_t msgcap);

#endif /* KILN_JIT_H */
