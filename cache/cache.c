/* cache.c — the cache object's life: opening with or without a disk level,
 * the byte budget, closing. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cache/internal.h"

/* max_bytes, else KILN_CACHE_MAX_BYTES, else the default; false if the
 * variable is set but is not a positive decimal number of bytes. */
static bool budget(uint64_t max_bytes, uint64_t *out, char *msg, size_t msgcap) {
    const char *env = getenv("KILN_CACHE_MAX_BYTES");
    *out = max_bytes ? max_bytes : CACHE_DEFAULT_MAX_BYTES;
    if (max_bytes || !env || !env[0])
        return true;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(env, &end, 10);
    if (env[0] < '0' || env[0] > '9' || errno || *end || v == 0) {
        snprintf(msg, msgcap, "kiln cache: KILN_CACHE_MAX_BYTES=%s is not a number of bytes", env);
        return false;
    }
    *out = v;
    return true;
}

cache *cache_open_memory_only(void) {
    cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return NULL;
    }
    if (!cache_mem_init(c)) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return NULL;
    }
    return c;
}

cache *cache_open(const char *dir, uint64_t max_bytes, char *msg, size_t msgcap) {
    uint64_t bytes;
    if (!budget(max_bytes, &bytes, msg, msgcap))
        return NULL;
    char *path = cache_dir_prepare(dir, msg, msgcap);
    if (!path)
        return NULL;
    if (!cache_dir_trusted(path, msg, msgcap)) {
        free(path);
        return NULL;
    }
    cache *c = cache_open_memory_only();
    if (!c) {
        snprintf(msg, msgcap, "kiln cache: out of memory");
        free(path);
        return NULL;
    }
    c->dir = path;
    c->max_bytes = bytes;
    return c;
}

void cache_close(cache *c) {
    if (!c)
        return;
    cache_mem_free(c);
    pthread_mutex_destroy(&c->lock);
    free(c->dir);
    free(c);
}

const char *cache_dir(const cache *c) { return c->dir; }
