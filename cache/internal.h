/* internal.h — what cache/'s own files share and nobody else sees: the cache
 * object, the on-disk header, and the file handling every disk access goes
 * through. */
#ifndef KILN_CACHE_INTERNAL_H
#define KILN_CACHE_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "cache/cache.h"

typedef struct cache_slot {
    cache_key key;
    void *value; /* NULL: an empty slot */
    void (*destroy)(void *value);
} cache_slot;

struct cache {
    /* Guards the memory level only: the disk level is safe across processes
     * by construction, and so across threads too. */
    pthread_mutex_t lock;
    cache_slot *slots;
    size_t cap; /* power of two */
    size_t count;
    char *dir; /* NULL: memory only */
    uint64_t max_bytes;
};

/* ---- mem.c ---- */
bool cache_mem_init(cache *c);
/* Destroys every value and frees the table. */
void cache_mem_free(cache *c);

/* ---- dir.c ---- */
/* The directory cache_open documents, created if missing and made absolute;
 * malloc'd. NULL with a message on failure. */
char *cache_dir_prepare(const char *dir, char *msg, size_t msgcap);
/* Whether dir is a directory that the user owns and that group and others
 * cannot write; if not, says why in msg (NULL when msgcap is 0). */
bool cache_dir_trusted(const char *dir, char *msg, size_t msgcap);

/* ---- io.c ---- */

/* Every entry and sidecar starts with this header, stored little-endian:
 * magic "KILNCACH", format version (u32), key hi and lo (u64 each), payload
 * size (u64), XXH3-64 of the payload (u64). A sidecar is a header alone,
 * describing its loadable file. */
#define CACHE_HEADER_BYTES 44
#define CACHE_FORMAT_VERSION 1

typedef struct cache_header {
    cache_key key;
    uint64_t size;
    uint64_t checksum;
} cache_header;

void cache_header_encode(const cache_header *h, unsigned char out[CACHE_HEADER_BYTES]);
/* False for a foreign header: wrong magic or version. */
bool cache_header_decode(const unsigned char in[CACHE_HEADER_BYTES], cache_header *h);

/* Whether the disk level may be used now: there is one, its directory is
 * still trusted, and kind is a valid kind. */
bool cache_disk_usable(const cache *c, const char *kind);

/* <dir>/<hex>.<kind><suffix> into out (PATH_MAX bytes); false if too long. */
bool cache_entry_path(const cache *c, cache_key key, const char *kind, const char *suffix,
                      char *out);

/* Opens path for reading if it is a regular file that the user owns and that
 * group and others cannot write; *st receives its status. -1 otherwise. */
int cache_open_trusted(const char *path, struct stat *st);

/* Reads exactly n bytes; false on a short read or an error. */
bool cache_read_full(int fd, void *buf, size_t n);

/* Marks the open entry used now, for eviction's least-recently-used order:
 * explicitly, since relatime mounts update access times at most daily and
 * noatime mounts never. */
void cache_touch(int fd);

/* A file written under a temporary name in the cache directory, then renamed
 * to its final name so that it appears whole or not at all. */
typedef struct cache_tmp {
    int fd;
    char path[PATH_MAX];
} cache_tmp;

/* Creates the temporary for dest, a path from cache_entry_path; false on
 * failure. */
bool cache_tmp_create(const cache *c, const char *dest, cache_tmp *t);
bool cache_tmp_write(cache_tmp *t, const void *data, size_t n);
/* Closes and renames the temporary to dest; on failure removes it. */
bool cache_tmp_commit(cache_tmp *t, const char *dest);
/* Closes and removes the temporary. */
void cache_tmp_discard(cache_tmp *t);

/* Temporaries are named .tmp-<final name>-XXXXXX: eviction recognises those a
 * crashed writer left behind by the prefix. */
#define CACHE_TMP_PREFIX ".tmp-"

/* ---- evict.c ---- */
/* Removes least recently used entries until the directory's entries fit the
 * budget, and temporaries left by crashed writers. */
void cache_evict(const cache *c);

#endif /* KILN_CACHE_INTERNAL_H */
