/* file.c — the disk level's loadable files: a file used in place (dlopen
 * needs a path) and a sidecar <hex>.<kind>.meta holding its header.
 *
 * The sidecar is the entry's commit record: a writer renames the file into
 * place first and its sidecar second, and a reader trusts the file only if
 * its bytes match the sidecar. A reader therefore sees the old pair, the new
 * pair, or the new file beside the old sidecar (a mismatch, so a miss); so
 * does it when two writers of one key interleave, or a writer dies between
 * its renames. Readers remove nothing: a mismatch may be a put in progress,
 * which a reader must not undo, and the miss makes the caller build and put
 * the entry again, which repairs it. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "cache/internal.h"

/* Small enough for any thread's stack. */
enum { CHUNK = 16384 };

/* Copies src into the temporary, returning the bytes' size and checksum:
 * those of the copy, since the source might change while it is read. */
static bool copy(int src, cache_tmp *t, cache_header *h) {
    unsigned char buf[CHUNK];
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    h->size = 0;
    for (;;) {
        ssize_t got = read(src, buf, sizeof buf);
        if (got == 0)
            break;
        if (got < 0 || !cache_tmp_write(t, buf, (size_t)got))
            return false;
        XXH3_64bits_update(&state, buf, (size_t)got);
        h->size += (uint64_t)got;
    }
    h->checksum = XXH3_64bits_digest(&state);
    return true;
}

static bool write_sidecar(const cache *c, const char *path, const cache_header *h) {
    unsigned char head[CACHE_HEADER_BYTES];
    cache_tmp t;
    cache_header_encode(h, head);
    if (!cache_tmp_create(c, path, &t))
        return false;
    if (!cache_tmp_write(&t, head, sizeof head)) {
        cache_tmp_discard(&t);
        return false;
    }
    return cache_tmp_commit(&t, path);
}

int cache_disk_put_file(cache *c, cache_key key, const char *kind, const char *src_path) {
    char path[PATH_MAX], meta[PATH_MAX];
    if (!cache_disk_usable(c, kind) || !cache_entry_path(c, key, kind, "", path) ||
        !cache_entry_path(c, key, kind, ".meta", meta))
        return -1;
    int src = open(src_path, O_RDONLY | O_CLOEXEC);
    if (src < 0)
        return -1;
    cache_tmp t;
    if (!cache_tmp_create(c, path, &t)) {
        close(src);
        return -1;
    }
    cache_header h = {.key = key};
    bool copied = copy(src, &t, &h);
    close(src);
    if (!copied) {
        cache_tmp_discard(&t);
        return -1;
    }
    if (!cache_tmp_commit(&t, path) || !write_sidecar(c, meta, &h))
        return -1;
    cache_evict(c);
    return 0;
}

/* Whether the file open on fd has h's size and checksum. */
static bool matches(int fd, const struct stat *st, const cache_header *h) {
    unsigned char buf[CHUNK];
    if ((uint64_t)st->st_size != h->size)
        return false;
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    for (uint64_t left = h->size; left > 0;) {
        size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
        if (!cache_read_full(fd, buf, n))
            return false;
        XXH3_64bits_update(&state, buf, n);
        left -= n;
    }
    return XXH3_64bits_digest(&state) == h->checksum;
}

int cache_disk_path(cache *c, cache_key key, const char *kind, char *out, size_t cap) {
    char path[PATH_MAX], meta[PATH_MAX];
    if (!cache_disk_usable(c, kind) || !cache_entry_path(c, key, kind, "", path) ||
        !cache_entry_path(c, key, kind, ".meta", meta) || strlen(path) >= cap)
        return -1;
    struct stat st;
    int fd = cache_open_trusted(meta, &st);
    if (fd < 0)
        return -1;
    unsigned char head[CACHE_HEADER_BYTES];
    cache_header h;
    bool ok = st.st_size == CACHE_HEADER_BYTES && cache_read_full(fd, head, sizeof head) &&
              cache_header_decode(head, &h) && h.key.hi == key.hi && h.key.lo == key.lo;
    close(fd);
    if (!ok || (fd = cache_open_trusted(path, &st)) < 0)
        return -1;
    ok = matches(fd, &st, &h);
    if (ok)
        cache_touch(fd);
    close(fd);
    if (!ok)
        return -1;
    memcpy(out, path, strlen(path) + 1);
    return 0;
}
