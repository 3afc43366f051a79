/* blob.c — the disk level's blobs: a header and the payload in one file,
 * read back into memory whole. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <unistd.h>

#include "cache/internal.h"

typedef enum { VALID, INVALID, NO_MEMORY } check;

/* Removes an invalid entry, unless path no longer names the file that was
 * checked (st): a writer has renamed a new one into place meanwhile. */
static void remove_checked(const char *path, const struct stat *st) {
    struct stat now;
    if (lstat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino)
        unlink(path);
}

/* Reads and checks the entry open on fd, the payload into *data. */
static check read_entry(int fd, const struct stat *st, cache_key key, void **data, size_t *n) {
    unsigned char head[CACHE_HEADER_BYTES];
    cache_header h;
    if (st->st_size < CACHE_HEADER_BYTES || !cache_read_full(fd, head, sizeof head) ||
        !cache_header_decode(head, &h) || h.key.hi != key.hi || h.key.lo != key.lo ||
        h.size != (uint64_t)st->st_size - CACHE_HEADER_BYTES || h.size > SIZE_MAX - 1)
        return INVALID;
    /* One byte more, so that an empty payload is not a NULL "failure". */
    *data = malloc((size_t)h.size + 1);
    if (!*data)
        return NO_MEMORY;
    if (!cache_read_full(fd, *data, (size_t)h.size) ||
        XXH3_64bits(*data, (size_t)h.size) != h.checksum) {
        free(*data);
        return INVALID;
    }
    *n = (size_t)h.size;
    return VALID;
}

int cache_disk_get(cache *c, cache_key key, const char *kind, void **data, size_t *n) {
    char path[PATH_MAX];
    if (!cache_disk_usable(c, kind) || !cache_entry_path(c, key, kind, "", path))
        return -1;
    struct stat st;
    int fd = cache_open_trusted(path, &st);
    if (fd < 0)
        return -1;
    check r = read_entry(fd, &st, key, data, n);
    if (r == VALID)
        cache_touch(fd);
    else if (r == INVALID)
        remove_checked(path, &st);
    close(fd);
    return r == VALID ? 0 : -1;
}

int cache_disk_put(cache *c, cache_key key, const char *kind, const void *data, size_t n) {
    char path[PATH_MAX];
    cache_tmp t;
    if (!cache_disk_usable(c, kind) || !cache_entry_path(c, key, kind, "", path) ||
        !cache_tmp_create(c, path, &t))
        return -1;
    cache_header h = {.key = key, .size = n, .checksum = XXH3_64bits(data, n)};
    unsigned char head[CACHE_HEADER_BYTES];
    cache_header_encode(&h, head);
    if (!cache_tmp_write(&t, head, sizeof head) || !cache_tmp_write(&t, data, n)) {
        cache_tmp_discard(&t);
        return -1;
    }
    if (!cache_tmp_commit(&t, path))
        return -1;
    cache_evict(c);
    return 0;
}
