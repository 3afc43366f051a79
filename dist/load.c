/* load.c — finds and opens libkiln_mpi.so, the MPI shim (mpi_shim.h says why
 * libkiln never links MPI itself).
 *
 * The shim is looked for in this order:
 *  1. $KILN_DIST_MPI_SHIM, a path. When it is set it is the only place
 *     tried: a setting that names a wrong file is an error to report, not a
 *     hint to fall back on some other shim.
 *  2. the directory of the object that holds libkiln (dladdr on one of
 *     dist/'s functions): libkiln_mpi.so is installed next to libkiln.so.
 *  3. dlopen("libkiln_mpi.so"): the library path. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/internal.h"

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static const kmpi_shim *loaded;

/* Appends "path (why)" to the list of places tried. */
static void tried_add(char *tried, size_t cap, const char *path, const char *why) {
    size_t len = strlen(tried);
    if (len + 1 >= cap)
        return;
    snprintf(tried + len, cap - len, "%s%s (%s)", len ? "; " : "", path, why);
}

/* Opens path and checks its table; NULL with the reason in tried otherwise.
 * RTLD_GLOBAL because Open MPI's own plugins, which it dlopens in turn,
 * expect libmpi's symbols to be visible to them. */
static const kmpi_shim *try_open(const char *path, char *tried, size_t cap) {
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *e = dlerror();
        tried_add(tried, cap, path, e ? e : "dlopen failed");
        return NULL;
    }
    void *sym = dlsym(h, KMPI_SHIM_ENTRY);
    if (!sym) {
        tried_add(tried, cap, path, "it has no " KMPI_SHIM_ENTRY);
        dlclose(h);
        return NULL;
    }
    kmpi_shim_get_fn get;
    memcpy(&get, &sym, sizeof get);
    const kmpi_shim *s = get();
    if (!s || s->version != KMPI_SHIM_VERSION || s->struct_size < sizeof(kmpi_shim)) {
        char why[96];
        snprintf(why, sizeof why, "its table is version %u, this libkiln needs %d",
                 s ? s->version : 0u, KMPI_SHIM_VERSION);
        tried_add(tried, cap, path, why);
        /* Left open: a libmpi it pulled in may not survive being unloaded. */
        return NULL;
    }
    return s;
}

/* The directory of the object dist/ was linked into ("" when unknown). */
static void own_dir(char *out, size_t cap) {
    Dl_info info;
    void *self;
    kiln_status (*fn)(const kmpi_shim **, char *, size_t) = dist_load_mpi;
    memcpy(&self, &fn, sizeof self);
    out[0] = '\0';
    if (!dladdr(self, &info) || !info.dli_fname || !strchr(info.dli_fname, '/'))
        return;
    /* The executable's own name may be relative to a directory it has left. */
    char *real = realpath(info.dli_fname, NULL);
    snprintf(out, cap, "%s", real ? real : info.dli_fname);
    free(real);
    char *slash = strrchr(out, '/');
    if (slash)
        *slash = '\0';
}

kiln_status dist_load_mpi(const kmpi_shim **out, char *msg, size_t cap) {
    pthread_mutex_lock(&load_mu);
    if (loaded) {
        *out = loaded;
        pthread_mutex_unlock(&load_mu);
        return KILN_OK;
    }
    char tried[2048] = "";
    const kmpi_shim *s = NULL;
    const char *env = getenv("KILN_DIST_MPI_SHIM");
    if (env && *env) {
        s = try_open(env, tried, sizeof tried);
    } else {
        char dir[1024], path[1100];
        own_dir(dir, sizeof dir);
        if (dir[0]) {
            snprintf(path, sizeof path, "%s/libkiln_mpi.so", dir);
            s = try_open(path, tried, sizeof tried);
        }
        if (!s)
            s = try_open("libkiln_mpi.so", tried, sizeof tried);
    }
    if (s)
        loaded = s;
    pthread_mutex_unlock(&load_mu);
    if (!s) {
        snprintf(msg, cap,
                 "kiln_dist_init: MPI is not available: could not load kiln's MPI shim; tried %s",
                 tried);
        return KILN_ERR_DIST;
    }
    *out = s;
    return KILN_OK;
}
