/* graph_cache.h — the whole-graph cache in memory: a captured structure's
 * key to its compiled program, at most `max` of them, the least recently
 * used evicted first (as the disk cache is kept under its budget). */
#ifndef KILN_JIT_GRAPH_CACHE_H
#define KILN_JIT_GRAPH_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/cache.h"

/* KILN_GRAPH_CACHE_MAX when unset. */
#define JIT_GRAPH_CACHE_DEFAULT_MAX 256

typedef struct jit_graph_cache jit_graph_cache;

/* destroy frees an evicted value and, at jit_graph_cache_free, every one left.
 * NULL when out of memory. */
jit_graph_cache *jit_graph_cache_new(int64_t max, void (*destroy)(void *value));
void jit_graph_cache_free(jit_graph_cache *c);
/* The value under key, now the most recently used; NULL if none. */
void *jit_graph_cache_get(jit_graph_cache *c, cache_key key);
/* Stores value under key (which holds none), evicting the least recently
 * used beyond the bound; never value itself. false when out of memory (value
 * then stays the caller's). */
bool jit_graph_cache_put(jit_graph_cache *c, cache_key key, void *value);
int64_t jit_graph_cache_count(const jit_graph_cache *c);

#endif /* KILN_JIT_GRAPH_CACHE_H */
