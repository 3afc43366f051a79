/* io.c — the disk level's file handling: entry names, the header, opening
 * only files that nobody else could have written, and writes that appear
 * whole or not at all. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/internal.h"

static const unsigned char magic[8] = {'K', 'I', 'L', 'N', 'C', 'A', 'C', 'H'};

static void put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void cache_header_encode(const cache_header *h, unsigned char out[CACHE_HEADER_BYTES]) {
    memcpy(out, magic, 8);
    put_le(out + 8, CACHE_FORMAT_VERSION, 4);
    put_le(out + 12, h->key.hi, 8);
    put_le(out + 20, h->key.lo, 8);
    put_le(out + 28, h->size, 8);
    put_le(out + 36, h->checksum, 8);
}

bool cache_header_decode(const unsigned char in[CACHE_HEADER_BYTES], cache_header *h) {
    if (memcmp(in, magic, 8) != 0 || get_le(in + 8, 4) != CACHE_FORMAT_VERSION)
        return false;
    h->key.hi = get_le(in + 12, 8);
    h->key.lo = get_le(in + 20, 8);
    h->size = get_le(in + 28, 8);
    h->checksum = get_le(in + 36, 8);
    return true;
}

/* Kinds become part of file names: no '/', no '.', nothing a shell or the
 * eviction's name parser could misread. */
static bool valid_kind(const char *kind) {
    size_t n = kind ? strlen(kind) : 0;
    if (n == 0 || n > CACHE_KIND_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = kind[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_'))
            return false;
    }
    return true;
}

bool cache_disk_usable(const cache *c, const char *kind) {
    return c->dir && valid_kind(kind) && cache_dir_trusted(c->dir, NULL, 0);
}

bool cache_entry_path(const cache *c, cache_key key, const char *kind, const char *suffix,
                      char *out) {
    char hex[33];
    cache_key_hex(key, hex);
    int n = snprintf(out, PATH_MAX, "%s/%s.%s%s", c->dir, hex, kind, suffix);
    return n > 0 && n < PATH_MAX;
}

static bool trusted_file(const struct stat *st) {
    return S_ISREG(st->st_mode) && st->st_uid == geteuid() && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

int cache_open_trusted(const char *path, struct stat *st) {
    /* O_NOFOLLOW: a link could point at a file that other users can write.
     * O_NONBLOCK: a FIFO under an entry's name must not hang the open. */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) != 0 || !trusted_file(st)) {
        close(fd);
        return -1;
    }
    return fd;
}

bool cache_read_full(int fd, void *buf, size_t n) {
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        p += got;
        n -= (size_t)got;
    }
    return true;
}

void cache_touch(int fd) {
    const struct timespec times[2] = {{.tv_nsec = UTIME_NOW}, {.tv_nsec = UTIME_OMIT}};
    futimens(fd, times);
}

bool cache_tmp_create(const cache *c, const char *dest, cache_tmp *t) {
    const char *name = dest + strlen(c->dir) + 1;
    int n = snprintf(t->path, sizeof t->path, "%s/" CACHE_TMP_PREFIX "%s-XXXXXX", c->dir, name);
    if (n < 0 || (size_t)n >= sizeof t->path)
        return false;
    /* mkstemp's mode 0600 is what the trust checks want. */
    t->fd = mkstemp(t->path);
    return t->fd >= 0;
}

bool cache_tmp_write(cache_tmp *t, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t put = write(t->fd, p, n);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return false;
        p += put;
        n -= (size_t)put;
    }
    return true;
}

/* No fsync: after a crash an entry may hold garbage, which its checksum turns
 * into a miss; syncing every kernel would slow every compile. */
/* A directory where an entry belongs (left by anything but kiln) once made
 * every put of that entry fail, for good: an empty one is removed, another
 * moved aside (its contents are not kiln's to delete). */
static void clear_directory_at(const char *dest) {
    struct stat st;
    if (lstat(dest, &st) != 0 || !S_ISDIR(st.st_mode) || rmdir(dest) == 0)
        return;
    char aside[PATH_MAX];
    int n = snprintf(aside, sizeof aside, "%s.not-an-entry.%ld", dest, (long)getpid());
    if (n > 0 && (size_t)n < sizeof aside)
        rename(dest, aside);
}

bool cache_tmp_commit(cache_tmp *t, const char *dest) {
    bool ok = close(t->fd) == 0;
    if (ok && rename(t->path, dest) != 0) {
        ok = false;
        if (errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST) {
            clear_directory_at(dest);
            ok = rename(t->path, dest) == 0;
        }
    }
    if (!ok)
        unlink(t->path);
    return ok;
}

void cache_tmp_discard(cache_tmp *t) {
    close(t->fd);
    unlink(t->path);
}
