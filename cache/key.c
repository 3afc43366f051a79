/* key.c — cache keys: XXH3-128 over length-framed parts, and their hex
 * spelling (the disk level's file names). */
#include <string.h>

#include "cache/cache.h"

void cache_key_begin(cache_key_builder *b) { XXH3_128bits_reset(&b->state); }

static void add_le64(cache_key_builder *b, uint64_t v) {
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(v >> (8 * i));
    XXH3_128bits_update(&b->state, le, sizeof le);
}

/* The length goes first, so that the parts ("ab", "c") and ("a", "bc") give
 * different keys. */
void cache_key_add(cache_key_builder *b, const void *data, size_t n) {
    add_le64(b, (uint64_t)n);
    XXH3_128bits_update(&b->state, data, n);
}

void cache_key_add_str(cache_key_builder *b, const char *s) { cache_key_add(b, s, strlen(s)); }

void cache_key_add_u64(cache_key_builder *b, uint64_t v) {
    add_le64(b, 8);
    add_le64(b, v);
}

cache_key cache_key_end(const cache_key_builder *b) {
    XXH128_hash_t h = XXH3_128bits_digest(&b->state);
    return (cache_key){.hi = h.high64, .lo = h.low64};
}

void cache_key_hex(cache_key key, char out[33]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[i] = digits[(key.hi >> (60 - 4 * i)) & 15];
        out[16 + i] = digits[(key.lo >> (60 - 4 * i)) & 15];
    }
    out[32] = '\0';
}
