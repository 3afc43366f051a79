/* nccl.c — NCCL, opened at run time (kiln never links it, and builds
 * without its header): finding the library, resolving the functions kiln
 * will call, and reporting its version. Collectives over it wait for kiln's
 * CUDA runtime, which cannot run yet. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/internal.h"

/* NCCL's functions with plain types: a communicator and a stream are
 * pointers, ncclUniqueId is 128 bytes, ncclResult_t, ncclDataType_t and
 * ncclRedOp_t are ints. */
typedef struct dist_nccl_id {
    char internal[128];
} dist_nccl_id;

typedef struct dist_nccl {
    int (*get_version)(int *version);
    int (*get_unique_id)(dist_nccl_id *id);
    int (*comm_init_rank)(void **comm, int nranks, dist_nccl_id id, int rank);
    int (*comm_destroy)(void *comm);
    int (*all_reduce)(const void *send, void *recv, size_t count, int type, int op, void *comm,
                      void *stream);
    int (*all_gather)(const void *send, void *recv, size_t count, int type, void *comm,
                      void *stream);
    int (*reduce_scatter)(const void *send, void *recv, size_t count, int type, int op,
                          void *comm, void *stream);
    int (*broadcast)(const void *send, void *recv, size_t count, int type, int root, void *comm,
                     void *stream);
    const char *(*get_error_string)(int result);
    int (*comm_get_async_error)(void *comm, int *async_error);
    int (*comm_abort)(void *comm);
} dist_nccl;

static pthread_mutex_t nccl_mu = PTHREAD_MUTEX_INITIALIZER;
static dist_nccl nccl;
static bool nccl_loaded;
static char nccl_path[512];

static void tried_add(char *tried, size_t cap, const char *path, const char *why) {
    size_t len = strlen(tried);
    if (len + 1 < cap)
        snprintf(tried + len, cap - len, "%s%s (%s)", len ? "; " : "", path, why);
}

/* Resolves every function into nccl from h; the first missing name when
 * one is missing, else NULL. */
static const char *resolve(void *h) {
    static const char *const names[] = {
        "ncclGetVersion",    "ncclGetUniqueId",   "ncclCommInitRank",      "ncclCommDestroy",
        "ncclAllReduce",     "ncclAllGather",     "ncclReduceScatter",     "ncclBroadcast",
        "ncclGetErrorString", "ncclCommGetAsyncError", "ncclCommAbort",
    };
    void *syms[sizeof names / sizeof *names];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!(syms[i] = dlsym(h, names[i])))
            return names[i];
    memcpy(&nccl.get_version, &syms[0], sizeof(void *));
    memcpy(&nccl.get_unique_id, &syms[1], sizeof(void *));
    memcpy(&nccl.comm_init_rank, &syms[2], sizeof(void *));
    memcpy(&nccl.comm_destroy, &syms[3], sizeof(void *));
    memcpy(&nccl.all_reduce, &syms[4], sizeof(void *));
    memcpy(&nccl.all_gather, &syms[5], sizeof(void *));
    memcpy(&nccl.reduce_scatter, &syms[6], sizeof(void *));
    memcpy(&nccl.broadcast, &syms[7], sizeof(void *));
    memcpy(&nccl.get_error_string, &syms[8], sizeof(void *));
    memcpy(&nccl.comm_get_async_error, &syms[9], sizeof(void *));
    memcpy(&nccl.comm_abort, &syms[10], sizeof(void *));
    return NULL;
}

/* The file h came from, by dladdr on one of its functions (name when that
 * fails, as for a plain soname). */
static void path_of(const char *name, char *out, size_t cap) {
    Dl_info info;
    void *fn;
    memcpy(&fn, &nccl.get_version, sizeof fn);
    if (dladdr(fn, &info) && info.dli_fname && info.dli_fname[0])
        snprintf(out, cap, "%s", info.dli_fname);
    else {
        size_t len = strlen(name) < cap ? strlen(name) : cap - 1;
        memcpy(out, name, len);
        out[len] = '\0';
    }
}

static kiln_status load_locked(char *msg, size_t cap) {
    if (nccl_loaded)
        return KILN_OK;
    char cands[3][512];
    int nc = 0;
    snprintf(cands[nc++], sizeof cands[0], "libnccl.so.2");
    const char *home = getenv("CUDA_HOME");
    if (home && *home)
        snprintf(cands[nc++], sizeof cands[0], "%s/lib64/libnccl.so.2", home);
    snprintf(cands[nc++], sizeof cands[0], "/usr/local/cuda/lib64/libnccl.so.2");
    char tried[2048] = "";
    for (int i = 0; i < nc; i++) {
        void *h = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            tried_add(tried, sizeof tried, cands[i], e ? e : "dlopen failed");
            continue;
        }
        const char *missing = resolve(h);
        if (missing) {
            char why[96];
            snprintf(why, sizeof why, "it has no %s", missing);
            tried_add(tried, sizeof tried, cands[i], why);
            dlclose(h);
            continue;
        }
        path_of(cands[i], nccl_path, sizeof nccl_path);
        nccl_loaded = true;
        return KILN_OK;
    }
    snprintf(msg, cap, "kiln_dist_init: NCCL is not available: tried %s", tried);
    return KILN_ERR_DIST;
}

kiln_status dist_nccl_load(char *version, size_t vcap, char *path, size_t pcap, char *msg,
                           size_t cap) {
    pthread_mutex_lock(&nccl_mu);
    kiln_status st = load_locked(msg, cap);
    int v = 0, rc = 0;
    if (st == KILN_OK && (rc = nccl.get_version(&v)) != 0) {
        snprintf(msg, cap, "kiln_dist_init: NCCL at %s: ncclGetVersion failed: %s", nccl_path,
                 nccl.get_error_string(rc));
        st = KILN_ERR_DIST;
    }
    if (st == KILN_OK) {
        /* NCCL_VERSION_CODE is major*10000 + minor*100 + patch since 2.9,
         * major*1000 + minor*100 + patch before. */
        int major = v >= 10000 ? v / 10000 : v / 1000;
        int minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
        snprintf(version, vcap, "%d.%d.%d", major, minor, v % 100);
        snprintf(path, pcap, "%s", nccl_path);
    }
    pthread_mutex_unlock(&nccl_mu);
    return st;
}

kiln_status dist_nccl_probe(char *version, size_t vcap, char *path, size_t pcap, char *msg,
                            size_t cap) {
    return dist_nccl_load(version, vcap, path, pcap, msg, cap);
}
