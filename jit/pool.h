/* pool.h — a caching allocator for a device's buffers, over whatever raw
 * allocator the device has (host memory here; device memory for CUDA).
 *
 * Why: a replayed step's outputs are fresh allocations, and a large fresh
 * allocation is fresh pages: a 64 MB output cost 16,384 page faults (each a
 * zeroed 4 KiB page) per step, more than the kernel that fills it. Blocks of
 * at least JIT_POOL_MIN bytes are rounded up to a size class (8 per power of
 * two, so at most 12.5% is wasted) and, when released, kept for the next
 * request of their class instead of being returned, up to a byte budget
 * (KILN_POOL_MAX_BYTES, default a quarter of physical memory).
 *
 * A pool is reference-counted: the device holds one reference and every
 * block it handed out another, so buffers may outlive their device (kiln_ctx
 * frees the runtime before the graph's last buffers); once the device has
 * closed it, returned blocks are freed at once. Thread-safe. */
#ifndef KILN_JIT_POOL_H
#define KILN_JIT_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { JIT_POOL_MIN = 64 * 1024 };

typedef struct jit_pool jit_pool;

typedef struct jit_pool_raw {
    void *(*alloc)(void *user, size_t nbytes); /* NULL when out of memory */
    void (*free)(void *user, void *mem, size_t nbytes);
    void *user;
    bool host; /* blocks are host memory: under AddressSanitizer a kept block is
                  poisoned, so a use after release is still reported */
} jit_pool_raw;

typedef struct jit_pool_stats {
    int64_t reuses;      /* requests served by a kept block */
    int64_t allocations; /* requests that reached the raw allocator */
    int64_t held_bytes;  /* bytes kept for reuse now */
    int64_t live_bytes;  /* bytes handed out and not yet put back (class sizes) */
    int64_t peak_bytes;  /* the most live_bytes has been */
    int64_t retries;     /* raw allocations that failed, so that the kept blocks were freed
                            and the raw allocator asked once more */
} jit_pool_stats;

/* A pool over raw; max_bytes 0 takes KILN_POOL_MAX_BYTES or the default.
 * NULL when out of memory. */
jit_pool *jit_pool_new(jit_pool_raw raw, size_t max_bytes);
/* The byte count a request of nbytes is served with. */
size_t jit_pool_class(size_t nbytes);
/* A block of jit_pool_class(nbytes) bytes, a kept one if there is one. When
 * the raw allocator fails, the kept blocks are freed and it is tried once
 * more; NULL if that fails too. */
void *jit_pool_get(jit_pool *p, size_t nbytes);
/* Returns a block jit_pool_get gave for nbytes. */
void jit_pool_put(jit_pool *p, void *mem, size_t nbytes);
/* Frees every kept block. */
void jit_pool_trim(jit_pool *p);
jit_pool_stats jit_pool_get_stats(jit_pool *p);
/* The device's reference: frees the kept blocks; the pool itself goes when
 * the last block handed out is returned. */
void jit_pool_close(jit_pool *p);

#endif /* KILN_JIT_POOL_H */
