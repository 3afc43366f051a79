/* cache.h — cache/'s face to the rest of kiln: 128-bit keys, and a cache
 * object with two levels that the compiler consults before building anything.
 *
 * - Keys are XXH3-128 over a sequence of parts (canonical kernel IR, target,
 *   compiler identity and flags, kiln's version, …), each part framed by its
 *   length so that no two different sequences of parts run together into the
 *   same bytes.
 * - The memory level maps a key to any pointer (a compiled program, a dlopen
 *   handle). Values are never replaced or evicted: a pointer handed out stays
 *   valid until cache_close.
 * - The disk level lives in one directory and holds two kinds of entries,
 *   both named <32 hex digits of the key>.<kind>:
 *     blobs (a cubin, a serialized plan), read back into memory whole; and
 *     loadable files (a shared object for dlopen), used in place, with a
 *     sidecar <hex>.<kind>.meta holding their header.
 *   Every entry is written under a temporary name and renamed, so readers in
 *   any process see a whole entry or none. Every read checks a header (magic,
 *   format version, the full key, size, XXH3-64 checksum) against the bytes:
 *   a truncated, corrupt or foreign entry is a miss, never trusted (a blob is
 *   removed too; a loadable file waits for the put that follows the miss,
 *   since it may be a put in progress). Nothing is read from a directory or
 *   file that another user owns or that group or others may write: that too
 *   is a miss.
 *   The directory is kept under a byte budget by removing the least recently
 *   used entries (by access time, which every hit sets) after each put.
 *
 * Only successes are stored: the caller puts an entry once its build has
 * succeeded, so a failed build is simply tried again next time.
 *
 * A cache object may be shared by threads. The disk level may be shared by
 * any number of processes at once, each with its own cache object. */
#ifndef KILN_CACHE_H
#define KILN_CACHE_H

#include <stddef.h>
#include <stdint.h>
#define XXH_STATIC_LINKING_ONLY /* for XXH3_state_t, so builders live on the stack */
#include <xxhash.h>

/* The budget of the disk level when neither cache_open's argument nor
 * KILN_CACHE_MAX_BYTES gives one. */
#define CACHE_DEFAULT_MAX_BYTES ((uint64_t)1 << 30)

/* Longest kind: letters, digits and '_' only ("so", "cubin", "plan"). */
#define CACHE_KIND_MAX 16

/* ---- keys ---------------------------------------------------------------- */

typedef struct cache_key {
    uint64_t hi, lo;
} cache_key;

/* A key under construction. Keep builders in automatic storage: the hash
 * state needs 64-byte alignment, which malloc does not promise. */
typedef struct cache_key_builder {
    XXH3_state_t state;
} cache_key_builder;

void cache_key_begin(cache_key_builder *b);
/* Adds one part of n bytes. */
void cache_key_add(cache_key_builder *b, const void *data, size_t n);
/* Adds the string's bytes (without the NUL) as one part; the same as
 * cache_key_add(b, s, strlen(s)). */
void cache_key_add_str(cache_key_builder *b, const char *s);
/* Adds v as one part of 8 little-endian bytes, so that a key does not depend
 * on the host's byte order. */
void cache_key_add_u64(cache_key_builder *b, uint64_t v);
/* The key of the parts added so far; the builder may take more parts. */
cache_key cache_key_end(const cache_key_builder *b);
/* 32 lowercase hex digits, hi then lo, and a NUL. */
void cache_key_hex(cache_key key, char out[33]);

/* ---- the cache object ---------------------------------------------------- */

typedef struct cache cache;

/* Opens a cache with both levels. The directory is dir if not NULL, else
 * $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; missing
 * directories on the way are created with mode 0700. The budget is max_bytes
 * if not 0, else $KILN_CACHE_MAX_BYTES (decimal bytes), else
 * CACHE_DEFAULT_MAX_BYTES.
 *
 * Returns NULL, with a message in msg (msgcap bytes, may be 0), when the
 * directory cannot be created, is not owned by the user, is writable by group
 * or others, or KILN_CACHE_MAX_BYTES is not a number, or memory runs out. Such
 * a failure must stop nothing: the caller then uses cache_open_memory_only. */
cache *cache_open(const char *dir, uint64_t max_bytes, char *msg, size_t msgcap);

/* A cache without a disk level: the cache_disk_* calls miss and store nothing.
 * NULL only when out of memory. */
cache *cache_open_memory_only(void);

/* Destroys every memory-level value (in no particular order) and frees the
 * cache. The disk level stays on disk. NULL is allowed. */
void cache_close(cache *c);

/* The disk level's directory as an absolute path without symbolic links, or
 * NULL for a memory-only cache. */
const char *cache_dir(const cache *c);

/* ---- memory level -------------------------------------------------------- */

/* The value stored under key, or NULL. */
void *cache_mem_get(cache *c, cache_key key);

/* Stores value (not NULL) under key and takes ownership of it: destroy (may
 * be NULL) is called on it exactly once, at cache_close or earlier as below.
 * Returns the value now stored under key: value itself, or — when another put
 * of the same key came first, as when two threads build the same kernel —
 * the earlier value, value having been destroyed. Returns NULL, value having
 * been destroyed, when out of memory. */
void *cache_mem_put(cache *c, cache_key key, void *value, void (*destroy)(void *value));

/* ---- disk level: blobs --------------------------------------------------- */

/* On a hit returns 0 with *data a malloc'd copy of the payload (the caller
 * frees it) and *n its size, and marks the entry used. Otherwise returns -1:
 * no such entry, an invalid entry (removed), an untrusted directory or file,
 * an invalid kind, no disk level, or an I/O error. */
int cache_disk_get(cache *c, cache_key key, const char *kind, void **data, size_t *n);

/* Stores n bytes under key and kind, replacing any entry there, then evicts
 * down to the budget. Returns 0, or -1 when nothing was stored (no disk level,
 * an untrusted directory, an invalid kind, an I/O error); the caller goes on
 * without the disk level. */
int cache_disk_put(cache *c, cache_key key, const char *kind, const void *data, size_t n);

/* ---- disk level: loadable files ------------------------------------------ */

/* Copies the finished file at src_path (src_path itself is left alone) into
 * the cache under key and kind, with its sidecar, replacing any entry there,
 * then evicts down to the budget. Returns 0, or -1 as cache_disk_put. */
int cache_disk_put_file(cache *c, cache_key key, const char *kind, const char *src_path);

/* On a hit writes the entry's absolute path (for dlopen) to out, which holds
 * cap bytes, marks the entry used and returns 0. A hit needs a sidecar whose
 * header matches the key and the file's size and checksum, and a directory,
 * file and sidecar that the user owns and that group and others cannot
 * write. Otherwise returns -1, as cache_disk_get, except that an invalid
 * entry is left for the caller's next put to replace; a path longer than cap
 * is a miss too. Until the caller loads it, the path may be replaced by
 * another process's put of the same key (another whole, checked file) or
 * removed by an eviction: if loading fails, treat it as a miss. */
int cache_disk_path(cache *c, cache_key key, const char *kind, char *out, size_t cap);

#endif /* KILN_CACHE_H */
