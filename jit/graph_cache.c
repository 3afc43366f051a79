/* graph_cache.c — the bounded whole-graph cache: chained buckets for lookup,
 * a doubly linked list in order of use for eviction. */
#include <stdlib.h>

#include "jit/graph_cache.h"

typedef struct entry {
    cache_key key;
    void *value;
    struct entry *hnext;       /* bucket chain */
    struct entry *newer, *older; /* use order */
} entry;

struct jit_graph_cache {
    int64_t max, count;
    size_t mask; /* buckets - 1, a power of two minus one */
    entry **buckets;
    entry *newest, *oldest;
    void (*destroy)(void *);
};

jit_graph_cache *jit_graph_cache_new(int64_t max, void (*destroy)(void *value)) {
    jit_graph_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->max = max < 1 ? 1 : max;
    size_t n = 16;
    while ((int64_t)n < c->max && n < ((size_t)1 << 16))
        n *= 2;
    c->mask = n - 1;
    c->destroy = destroy;
    if (!(c->buckets = calloc(n, sizeof *c->buckets))) {
        free(c);
        return NULL;
    }
    return c;
}

void jit_graph_cache_free(jit_graph_cache *c) {
    if (!c)
        return;
    for (entry *e = c->newest, *next; e; e = next) {
        next = e->older;
        if (c->destroy)
            c->destroy(e->value);
        free(e);
    }
    free(c->buckets);
    free(c);
}

static entry **slot(jit_graph_cache *c, cache_key key) { return &c->buckets[key.lo & c->mask]; }

static void unlink_use(jit_graph_cache *c, entry *e) {
    if (e->newer)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
}

static void push_newest(jit_graph_cache *c, entry *e) {
    e->newer = NULL;
    e->older = c->newest;
    if (c->newest)
        c->newest->newer = e;
    c->newest = e;
    if (!c->oldest)
        c->oldest = e;
}

void *jit_graph_cache_get(jit_graph_cache *c, cache_key key) {
    for (entry *e = *slot(c, key); e; e = e->hnext)
        if (e->key.hi == key.hi && e->key.lo == key.lo) {
            if (c->newest != e) {
                unlink_use(c, e);
                push_newest(c, e);
            }
            return e->value;
        }
    return NULL;
}

static void evict_oldest(jit_graph_cache *c) {
    entry *e = c->oldest;
    unlink_use(c, e);
    entry **p = slot(c, e->key);
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    if (c->destroy)
        c->destroy(e->value);
    free(e);
    c->count--;
}

bool jit_graph_cache_put(jit_graph_cache *c, cache_key key, void *value) {
    entry *e = malloc(sizeof *e);
    if (!e)
        return false;
    while (c->count >= c->max)
        evict_oldest(c);
    e->key = key;
    e->value = value;
    entry **s = slot(c, key);
    e->hnext = *s;
    *s = e;
    push_newest(c, e);
    c->count++;
    return true;
}

int64_t jit_graph_cache_count(const jit_graph_cache *c) { return c->count; }
