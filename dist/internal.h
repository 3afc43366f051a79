/* internal.h — what dist/'s files share and nothing outside dist/ sees: the
 * world's layout, the process-wide MPI state, the loaders, and the waits. */
#ifndef KILN_DIST_INTERNAL_H
#define KILN_DIST_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/dist.h"
#include "dist/mpi_shim.h"

struct dist_world {
    kiln_dist_backend backend;
    const kmpi_shim *mpi;
    kmpi_handle comm; /* this world's own MPI_Comm_dup of MPI_COMM_WORLD */
    int rank, size;
    double timeout_s;    /* KILN_DIST_TIMEOUT, read once at dist_world_new */
    size_t bucket_bytes; /* KILN_DIST_BUCKET_MB, likewise */
    /* Held through each dist_agree and dist_run: kiln may sync from several
     * threads, and one world's collectives must start in one order. */
    pthread_mutex_t mu;
    bool broken;
    /* A collective timed out with its request still pending: MPI may yet
     * write into the buffers it was given, so they are never freed. */
    bool abandoned;
    /* dist_agree's digests and count live here, not on its stack, for the
     * same reason. */
    uint64_t agree_buf[2];
    int64_t agree_count;
    char broken_msg[640];
    dist_counts counts;
};

/* Opens libkiln_mpi.so (once per process; it is never closed, as MPI
 * cannot be unloaded safely). KILN_ERR_DIST with every place tried. */
kiln_status dist_load_mpi(const kmpi_shim **out, char *msg, size_t cap);

/* Guards every call into MPI from any world: MPI_THREAD_SERIALIZED allows
 * one thread in MPI at a time, and the worlds of one process share it. */
void dist_mpi_lock(void);
void dist_mpi_unlock(void);

/* Waits for req until the world's timeout, polling with backoff. On a
 * timeout or an MPI error the world is broken and the status KILN_ERR_DIST. */
kiln_status dist_wait(dist_world *w, kmpi_handle *req, const char *what, char *msg, size_t cap);
/* dist_wait for the request that `step` (an MPI call that returned rc)
 * started, or its failure when rc is not 0. */
kiln_status dist_finish(dist_world *w, int rc, const char *step, kmpi_handle *req,
                        const char *what, char *msg, size_t cap);
/* The world broke or failed from an MPI code rc (call with w->mu held). */
kiln_status dist_fail_mpi(dist_world *w, int rc, const char *what, const char *step, char *msg,
                          size_t cap);
/* KILN_ERR_DIST quoting the first failure when w is broken, else KILN_OK. */
kiln_status dist_check_broken(dist_world *w, const char *what, char *msg, size_t cap);

/* Validity of one descriptor in w (as api/ checks it before): KILN_ERR_ARG
 * naming collective i of n when not. */
kiln_status dist_check_desc(const dist_world *w, const dist_desc *d, int i, int n,
                            const char *what, char *msg, size_t cap);
/* Elements of d's source (shape product); d must be valid. */
int64_t dist_numel(const dist_desc *d);

/* NCCL: loaded on first use, never closed. On success version gets
 * "2.18.3" and path the library's file. */
kiln_status dist_nccl_load(char *version, size_t vcap, char *path, size_t pcap, char *msg,
                           size_t cap);

#endif /* KILN_DIST_INTERNAL_H */
