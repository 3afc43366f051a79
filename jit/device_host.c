/* device_host.c — what devices whose buffers are host memory share: their
 * buffers (graph_buffer_new's 64-byte-aligned memory, owned by the device),
 * copies as memcpy, a sync that has nothing to wait for; and the device key
 * every device builds from its parts. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "jit/device.h"

enum { HUGE_FROM = 4 << 20, HUGE_PAGE = 2 << 20 };

static void *host_raw_alloc(void *user, size_t n) {
    (void)user;
    size_t align = n >= HUGE_FROM ? HUGE_PAGE : 64;
    size_t rounded = (n + align - 1) & ~(align - 1);
    if (rounded < n)
        return NULL;
    void *m = aligned_alloc(align, rounded ? rounded : align);
    if (m && align == HUGE_PAGE)
        madvise(m, rounded, MADV_HUGEPAGE); /* advice only: no huge pages is no error */
    return m;
}

static void host_raw_free(void *user, void *mem, size_t n) {
    (void)user;
    (void)n;
    free(mem);
}

kiln_status jit_host_pool_open(jit_device *d, char *msg, size_t cap) {
    d->pool = jit_pool_new((jit_pool_raw){host_raw_alloc, host_raw_free, NULL, true}, 0);
    if (d->pool)
        return KILN_OK;
    snprintf(msg, cap, "kiln: out of memory opening the %s device", d->ops->name);
    return KILN_ERR_OOM;
}

kiln_status jit_host_alloc(jit_device *d, size_t nbytes, graph_buffer **out, char *msg,
                           size_t cap) {
    void *data = jit_pool_get(d->pool, nbytes);
    graph_buffer *b = data ? graph_buffer_adopt(data, nbytes, d, jit_host_free) : NULL;
    if (!b) {
        if (data)
            jit_pool_put(d->pool, data, nbytes);
        snprintf(msg, cap, "out of memory allocating %zu bytes", nbytes);
        return KILN_ERR_OOM;
    }
    b->release_arg = d->pool; /* the buffer may outlive d; the pool waits for it */
    *out = b;
    return KILN_OK;
}

void jit_host_free(void *owner, graph_buffer *b) { jit_pool_put(owner, b->data, b->nbytes); }

kiln_status jit_host_copy_in(jit_device *d, graph_buffer *dst, size_t offset, const void *src,
                             size_t n, char *msg, size_t cap) {
    (void)d;
    (void)msg;
    (void)cap;
    if (n)
        memcpy((char *)dst->data + offset, src, n);
    return KILN_OK;
}

kiln_status jit_host_copy_out(jit_device *d, void *dst, const graph_buffer *src, size_t offset,
                              size_t n, char *msg, size_t cap) {
    (void)d;
    (void)msg;
    (void)cap;
    if (n)
        memcpy(dst, (const char *)src->data + offset, n);
    return KILN_OK;
}

kiln_status jit_host_sync(jit_device *d, char *msg, size_t cap) {
    (void)d;
    (void)msg;
    (void)cap;
    return KILN_OK;
}

cache_key jit_device_key(const lower_target *t, const char *compiler_id,
                         const char *const *flags) {
    cache_key_builder b;
    cache_key_begin(&b);
    cache_key_add_str(&b, "kiln device");
    cache_key_add_str(&b, t->name);
    cache_key_add_u64(&b, (uint64_t)t->gpu);
    cache_key_add_u64(&b, (uint64_t)t->vector_bytes);
    cache_key_add_u64(&b, (uint64_t)t->block_threads);
    cache_key_add_str(&b, compiler_id);
    for (int i = 0; flags && flags[i]; i++)
        cache_key_add_str(&b, flags[i]);
    cache_key_add_u64(&b, KILN_VERSION_MAJOR * 1000000 + KILN_VERSION_MINOR * 1000 +
                              KILN_VERSION_PATCH);
    return cache_key_end(&b);
}

cache_key jit_text_key(const jit_device *d, const char *kind, const char *text) {
    cache_key_builder b;
    cache_key_begin(&b);
    cache_key_add_str(&b, kind);
    cache_key_add(&b, &d->key, sizeof d->key);
    cache_key_add_str(&b, text);
    return cache_key_end(&b);
}
