/* mem.c — the memory level: an open-addressing map from key to value, under
 * the cache's lock. Values are never replaced, so a pointer a caller got
 * stays valid while other threads put. */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <stdlib.h>

#include "cache/internal.h"

#define INITIAL_CAP 64

bool cache_mem_init(cache *c) {
    c->slots = calloc(INITIAL_CAP, sizeof *c->slots);
    c->cap = INITIAL_CAP;
    c->count = 0;
    return c->slots != NULL;
}

void cache_mem_free(cache *c) {
    for (size_t i = 0; i < c->cap; i++)
        if (c->slots[i].value && c->slots[i].destroy)
            c->slots[i].destroy(c->slots[i].value);
    free(c->slots);
}

/* Keys are uniformly random already: their low bits index the table. */
static cache_slot *find(cache_slot *slots, size_t cap, cache_key key) {
    size_t i = (size_t)key.lo & (cap - 1);
    while (slots[i].value && (slots[i].key.hi != key.hi || slots[i].key.lo != key.lo))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

/* Keeps the table at most half full, so probe chains stay short. */
static bool grow(cache *c) {
    size_t cap = c->cap * 2;
    cache_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < c->cap; i++)
        if (c->slots[i].value)
            *find(slots, cap, c->slots[i].key) = c->slots[i];
    free(c->slots);
    c->slots = slots;
    c->cap = cap;
    return true;
}

void *cache_mem_get(cache *c, cache_key key) {
    pthread_mutex_lock(&c->lock);
    void *value = find(c->slots, c->cap, key)->value;
    pthread_mutex_unlock(&c->lock);
    return value;
}

void *cache_mem_put(cache *c, cache_key key, void *value, void (*destroy)(void *value)) {
    assert(value);
    pthread_mutex_lock(&c->lock);
    void *stored = NULL;
    if ((c->count + 1) * 2 <= c->cap || grow(c)) {
        cache_slot *s = find(c->slots, c->cap, key);
        if (!s->value) {
            *s = (cache_slot){.key = key, .value = value, .destroy = destroy};
            c->count++;
        }
        stored = s->value;
    }
    pthread_mutex_unlock(&c->lock);
    /* Outside the lock: a destructor may take time (dlclose) or locks of its
     * own. */
    if (stored != value && destroy)
        destroy(value);
    return stored;
}
