/* world.c — a world's life: joining the job (MPI initialised once per
 * process, a communicator of its own per world), leaving it, and waiting for
 * a collective without ever hanging: every collective is nonblocking and is
 * polled until the world's deadline, after which the world is broken. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "dist/internal.h"

/* The process's share of MPI, which every world uses. */
static struct {
    pthread_mutex_t mu; /* held around every MPI call (dist_mpi_lock) */
    int worlds;         /* live MPI worlds */
    bool we_initialised;
    bool finalised;
    /* Some world broke: a peer may be dead or stuck, and MPI_Finalize, which
     * is collective, would wait for it forever. */
    bool broken;
} proc = {.mu = PTHREAD_MUTEX_INITIALIZER};

void dist_mpi_lock(void) { pthread_mutex_lock(&proc.mu); }
void dist_mpi_unlock(void) { pthread_mutex_unlock(&proc.mu); }

int dist_rank(const dist_world *w) { return w->rank; }
int dist_size(const dist_world *w) { return w->size; }
kiln_dist_backend dist_backend(const dist_world *w) { return w->backend; }

/* A positive, finite number of seconds (or MB) from the environment: *out
 * keeps def when unset; KILN_ERR_ARG naming the value when it is not one. */
static kiln_status env_positive(const char *name, double def, double *out, char *msg,
                                size_t cap) {
    *out = def;
    const char *s = getenv(name);
    if (!s || !*s)
        return KILN_OK;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    while (end && (*end == ' ' || *end == '\t'))
        end++;
    if (errno || end == s || *end || !isfinite(v) || v <= 0) {
        snprintf(msg, cap, "kiln_dist_init: %s=\"%s\" is not a positive number", name, s);
        return KILN_ERR_ARG;
    }
    *out = v;
    return KILN_OK;
}

static kiln_status mpi_fail(const kmpi_shim *mpi, int rc, const char *step, char *msg,
                            size_t cap) {
    char e[256];
    mpi->error_string(rc, e, sizeof e);
    snprintf(msg, cap, "kiln_dist_init: MPI is not available: %s failed: %s", step, e);
    return KILN_ERR_DIST;
}

/* Initialises MPI unless it is already (call with proc.mu held). */
static kiln_status mpi_start(const kmpi_shim *mpi, char *msg, size_t cap) {
    int flag = 0, rc;
    if ((rc = mpi->finalized(&flag)) != 0)
        return mpi_fail(mpi, rc, "MPI_Finalized", msg, cap);
    if (flag) {
        snprintf(msg, cap,
                 "kiln_dist_init: MPI is not available: it was finalised already in this "
                 "process, and MPI cannot start twice");
        return KILN_ERR_DIST;
    }
    if ((rc = mpi->initialized(&flag)) != 0)
        return mpi_fail(mpi, rc, "MPI_Initialized", msg, cap);
    if (flag)
        return KILN_OK;
    /* Whatever thread level MPI grants, proc.mu lets only one thread into
     * it at a time, which is all SERIALIZED asks for. */
    int serialized = 0;
    if ((rc = mpi->init_thread(&serialized)) != 0)
        return mpi_fail(mpi, rc, "MPI_Init_thread", msg, cap);
    proc.we_initialised = true;
    return KILN_OK;
}

static kiln_status mpi_world_new(dist_world *w, char *msg, size_t cap) {
    const kmpi_shim *mpi = NULL;
    kiln_status st = dist_load_mpi(&mpi, msg, cap);
    if (st != KILN_OK)
        return st;
    w->mpi = mpi;
    dist_mpi_lock();
    st = mpi_start(mpi, msg, cap);
    int rc = 0;
    const char *step = NULL;
    if (st == KILN_OK) {
        if ((rc = mpi->comm_dup_world(&w->comm)) != 0)
            step = "MPI_Comm_dup";
        else if ((rc = mpi->comm_rank(&w->comm, &w->rank)) != 0 ||
                 (rc = mpi->comm_size(&w->comm, &w->size)) != 0) {
            step = "MPI_Comm_rank";
            mpi->comm_free(&w->comm);
        }
        if (step)
            st = mpi_fail(mpi, rc, step, msg, cap);
        else
            proc.worlds++;
    }
    dist_mpi_unlock();
    return st;
}

kiln_status dist_world_new(kiln_dist_backend backend, bool gpu, dist_world **out, char *msg,
                           size_t cap) {
    *out = NULL;
    if (backend != KILN_DIST_MPI && backend != KILN_DIST_NCCL) {
        snprintf(msg, cap, "kiln_dist_init: backend %d is neither KILN_DIST_MPI nor KILN_DIST_NCCL",
                 (int)backend);
        return KILN_ERR_ARG;
    }
    double timeout = 0, bucket_mb = 0;
    kiln_status st = env_positive("KILN_DIST_TIMEOUT", 300, &timeout, msg, cap);
    if (st == KILN_OK)
        st = env_positive("KILN_DIST_BUCKET_MB", 25, &bucket_mb, msg, cap);
    if (st != KILN_OK)
        return st;
    if (backend == KILN_DIST_NCCL) {
        /* kiln's CUDA runtime cannot hand NCCL device buffers yet, so NCCL is
         * loaded only to say whether it is there, which version, and where. */
        char version[32], path[512];
        st = dist_nccl_load(version, sizeof version, path, sizeof path, msg, cap);
        if (st != KILN_OK)
            return st;
        if (!gpu)
            snprintf(msg, cap,
                     "kiln_dist_init: KILN_DIST_NCCL needs a KILN_CUDA context (NCCL %s found "
                     "at %s)",
                     version, path);
        else
            snprintf(msg, cap,
                     "kiln_dist_init: KILN_DIST_NCCL cannot run collectives yet: kiln's CUDA "
                     "runtime cannot hand NCCL device buffers (NCCL %s found at %s); use "
                     "KILN_DIST_MPI with a KILN_CPU context",
                     version, path);
        return KILN_ERR_DEVICE;
    }
    dist_world *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(msg, cap, "kiln_dist_init: out of memory");
        return KILN_ERR_OOM;
    }
    w->backend = backend;
    w->timeout_s = timeout;
    double bytes = bucket_mb * 1024.0 * 1024.0;
    w->bucket_bytes = bytes >= (double)(SIZE_MAX / 2) ? SIZE_MAX / 2 : (size_t)bytes;
    st = mpi_world_new(w, msg, cap);
    if (st != KILN_OK) {
        free(w);
        return st;
    }
    pthread_mutex_init(&w->mu, NULL);
    *out = w;
    return KILN_OK;
}

void dist_world_free(dist_world *w) {
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    bool broken = w->broken;
    pthread_mutex_unlock(&w->mu);
    dist_mpi_lock();
    /* A broken world's communicator is left as it is: freeing it could wait
     * on the rank that broke it. */
    if (!broken)
        w->mpi->comm_free(&w->comm);
    else
        proc.broken = true;
    proc.worlds--;
    if (proc.worlds == 0 && proc.we_initialised && !proc.broken && !proc.finalised) {
        w->mpi->finalize();
        proc.finalised = true;
    }
    dist_mpi_unlock();
    pthread_mutex_destroy(&w->mu);
    free(w);
}

kiln_status dist_check_broken(dist_world *w, const char *what, char *msg, size_t cap) {
    if (!w->broken)
        return KILN_OK;
    snprintf(msg, cap, "%s: the job's collectives fail since an earlier one did: %s", what,
             w->broken_msg);
    return KILN_ERR_DIST;
}

/* Breaks w with the text in msg, which the caller formatted. */
static kiln_status breaks(dist_world *w, char *msg) {
    if (!w->broken) {
        w->broken = true;
        snprintf(w->broken_msg, sizeof w->broken_msg, "%s", msg);
    }
    return KILN_ERR_DIST;
}

kiln_status dist_fail_mpi(dist_world *w, int rc, const char *what, const char *step, char *msg,
                          size_t cap) {
    char e[256];
    w->mpi->error_string(rc, e, sizeof e);
    snprintf(msg, cap, "%s: rank %d of %d: %s failed: %s; the job's collectives fail from now on",
             what, w->rank, w->size, step, e);
    return breaks(w, msg);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A wait tests in a loop, yielding the core between tests, for the first
 * SPIN_S seconds (a 256 MB all-reduce takes a third of one here), then
 * sleeps between tests, from 10 us doubling to 1 ms.
 * Open MPI moves a message only inside MPI calls, a fragment at a time, so any
 * sleep while data flows stalls it: a spin of 300 tests followed by sleeps
 * ran a 1 MB all-reduce over 2 ranks at 0.19 GB/s of bus bandwidth against
 * MPI_Allreduce's 5.5. The yield keeps an oversubscribed machine (the tests
 * run 4 ranks on 2 cores) fair: the rank being waited for gets the core. A
 * wait longer than the spin (a peer still computing, or gone) costs at most
 * a sleep's length of latency, and little CPU. */
#define SPIN_S 1.0
enum { MAX_SLEEP_NS = 1000000 };

kiln_status dist_finish(dist_world *w, int rc, const char *step, kmpi_handle *req,
                        const char *what, char *msg, size_t cap) {
    if (rc != 0)
        return dist_fail_mpi(w, rc, what, step, msg, cap);
    return dist_wait(w, req, what, msg, cap);
}

kiln_status dist_wait(dist_world *w, kmpi_handle *req, const char *what, char *msg, size_t cap) {
    double start = now_s(), deadline = start + w->timeout_s;
    long sleep_ns = 10000;
    for (;;) {
        int done = 0;
        dist_mpi_lock();
        int rc = w->mpi->test(req, &done);
        dist_mpi_unlock();
        if (rc != 0)
            return dist_fail_mpi(w, rc, what, "MPI_Test", msg, cap);
        if (done)
            return KILN_OK;
        double t = now_s();
        if (t > deadline) {
            w->abandoned = true;
            snprintf(msg, cap,
                     "%s: rank %d of %d had no answer from every rank within %g s "
                     "(KILN_DIST_TIMEOUT): a rank died, or stopped taking part in the job's "
                     "collectives; the job's collectives fail from now on",
                     what, w->rank, w->size, w->timeout_s);
            return breaks(w, msg);
        }
        if (t - start < SPIN_S) {
            sched_yield();
        } else {
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < MAX_SLEEP_NS)
                sleep_ns = sleep_ns * 2 > MAX_SLEEP_NS ? MAX_SLEEP_NS : sleep_ns * 2;
        }
    }
}
