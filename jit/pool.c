/* pool.c — the caching allocator of pool.h: one free list per size class,
 * a byte budget, and a reference count that lets blocks outlive the device. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "jit/pool.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, m, n) ((p)->raw.host ? ASAN_POISON_MEMORY_REGION(m, n) : (void)0)
#define UNPOISON(p, m, n) ((p)->raw.host ? ASAN_UNPOISON_MEMORY_REGION(m, n) : (void)0)
#else
#define POISON(p, m, n) ((void)(p), (void)(m), (void)(n))
#define UNPOISON(p, m, n) ((void)(p), (void)(m), (void)(n))
#endif

enum { STEPS = 8, OCTAVES = 64, NCLASS = STEPS * OCTAVES };

typedef struct kept {
    void *mem;
    size_t bytes;
    struct kept *next;
} kept;

struct jit_pool {
    pthread_mutex_t lock;
    jit_pool_raw raw;
    size_t max_bytes;
    int64_t refs; /* the device's (until closed) plus one per block handed out */
    bool closed;
    jit_pool_stats stats;
    kept *lists[NCLASS];
};

static size_t default_budget(void) {
    const char *e = getenv("KILN_POOL_MAX_BYTES");
    if (e && *e) {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (*end == '\0')
            return (size_t)v;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page / 4 : (size_t)1 << 30;
}

jit_pool *jit_pool_new(jit_pool_raw raw, size_t max_bytes) {
    jit_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return NULL;
    }
    p->raw = raw;
    p->max_bytes = max_bytes ? max_bytes : default_budget();
    p->refs = 1;
    return p;
}

/* The octave (floor of log2) of n > 0. */
static int octave(size_t n) { return 63 - __builtin_clzll((unsigned long long)n); }

size_t jit_pool_class(size_t nbytes) {
    if (nbytes < JIT_POOL_MIN)
        return nbytes;
    size_t step = (size_t)1 << (octave(nbytes) - 3); /* 8 steps per octave */
    size_t c = (nbytes + step - 1) & ~(step - 1);
    return c < nbytes ? nbytes : c; /* no class above SIZE_MAX's octave */
}

/* The free list of a class size c (>= JIT_POOL_MIN). */
static int class_index(size_t c) {
    int o = octave(c);
    return o * STEPS + (int)((c >> (o - 3)) & (STEPS - 1));
}

static void pool_free(jit_pool *p) {
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* Counts bytes handed out (n > 0) or put back (n < 0); the lock is held. */
static void live(jit_pool *p, int64_t n) {
    p->stats.live_bytes += n;
    if (p->stats.live_bytes > p->stats.peak_bytes)
        p->stats.peak_bytes = p->stats.live_bytes;
}

void *jit_pool_get(jit_pool *p, size_t nbytes) {
    size_t c = jit_pool_class(nbytes);
    void *mem = NULL;
    pthread_mutex_lock(&p->lock);
    if (c >= JIT_POOL_MIN) {
        kept **head = &p->lists[class_index(c)];
        kept *k = *head;
        if (k) {
            *head = k->next;
            mem = k->mem;
            free(k);
            p->stats.held_bytes -= (int64_t)c;
            p->stats.reuses++;
        }
    }
    if (mem) {
        p->refs++;
        live(p, (int64_t)c);
    }
    pthread_mutex_unlock(&p->lock);
    if (mem) {
        UNPOISON(p, mem, c);
        return mem;
    }
    mem = p->raw.alloc(p->raw.user, c);
    bool retried = !mem;
    if (!mem) {
        jit_pool_trim(p);
        mem = p->raw.alloc(p->raw.user, c);
    }
    pthread_mutex_lock(&p->lock);
    p->stats.retries += retried;
    if (mem) {
        p->refs++;
        p->stats.allocations += c >= JIT_POOL_MIN;
        live(p, (int64_t)c);
    }
    pthread_mutex_unlock(&p->lock);
    return mem;
}

void jit_pool_put(jit_pool *p, void *mem, size_t nbytes) {
    size_t c = jit_pool_class(nbytes);
    kept *k = NULL;
    pthread_mutex_lock(&p->lock);
    bool keep = !p->closed && c >= JIT_POOL_MIN && (size_t)p->stats.held_bytes + c <= p->max_bytes;
    pthread_mutex_unlock(&p->lock);
    if (keep && (k = malloc(sizeof *k)) == NULL)
        keep = false;
    pthread_mutex_lock(&p->lock);
    if (keep) {
        POISON(p, mem, c);
        kept **head = &p->lists[class_index(c)];
        k->mem = mem;
        k->bytes = c;
        k->next = *head;
        *head = k;
        p->stats.held_bytes += (int64_t)c;
    }
    live(p, -(int64_t)c);
    bool last = --p->refs == 0;
    pthread_mutex_unlock(&p->lock);
    if (!keep)
        p->raw.free(p->raw.user, mem, c);
    if (last)
        pool_free(p);
}

void jit_pool_trim(jit_pool *p) {
    kept *all = NULL;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < NCLASS; i++) {
        while (p->lists[i]) {
            kept *k = p->lists[i];
            p->lists[i] = k->next;
            k->next = all;
            all = k;
        }
    }
    p->stats.held_bytes = 0;
    pthread_mutex_unlock(&p->lock);
    while (all) {
        kept *k = all;
        all = k->next;
        UNPOISON(p, k->mem, k->bytes);
        p->raw.free(p->raw.user, k->mem, k->bytes);
        free(k);
    }
}

jit_pool_stats jit_pool_get_stats(jit_pool *p) {
    pthread_mutex_lock(&p->lock);
    jit_pool_stats s = p->stats;
    pthread_mutex_unlock(&p->lock);
    return s;
}

void jit_pool_close(jit_pool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->closed = true;
    pthread_mutex_unlock(&p->lock);
    jit_pool_trim(p);
    pthread_mutex_lock(&p->lock);
    bool last = --p->refs == 0;
    pthread_mutex_unlock(&p->lock);
    if (last)
        pool_free(p);
}
