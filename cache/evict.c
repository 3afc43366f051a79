/* evict.c — keeping the disk level under its byte budget: least recently used
 * entries go first, a loadable file together with its sidecar.
 *
 * Any number of processes may evict at once: a file another one removed
 * first (ENOENT) is simply gone, and the worst race removes a little more
 * than needed. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/internal.h"

/* A temporary older than this belongs to a writer that died. */
#define STALE_TMP_SECONDS 3600

/* One file of an entry, then (after merging) one whole entry. */
typedef struct item {
    char base[32 + 1 + CACHE_KIND_MAX + 1]; /* <hex>.<kind> */
    bool meta;                              /* the sidecar, not the file */
    uint64_t bytes;
    struct timespec atime;
} item;

/* The length of <hex>.<kind> at the start of name when name is an entry's
 * file or sidecar, else 0; *meta says which. */
static size_t entry_base(const char *name, bool *meta) {
    for (int i = 0; i < 32; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return 0;
    if (name[32] != '.')
        return 0;
    size_t kind =
        strspn(name + 33, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    if (kind == 0 || kind > CACHE_KIND_MAX)
        return 0;
    const char *rest = name + 33 + kind;
    *meta = strcmp(rest, ".meta") == 0;
    return *meta || rest[0] == '\0' ? 33 + kind : 0;
}

static int by_base(const void *a, const void *b) {
    return strcmp(((const item *)a)->base, ((const item *)b)->base);
}

static int by_atime(const void *a, const void *b) {
    const struct timespec *x = &((const item *)a)->atime, *y = &((const item *)b)->atime;
    if (x->tv_sec != y->tv_sec)
        return x->tv_sec < y->tv_sec ? -1 : 1;
    return (x->tv_nsec > y->tv_nsec) - (x->tv_nsec < y->tv_nsec);
}

/* Lists the directory's entry files, removing stale temporaries on the way.
 * NULL when the directory cannot be read or memory runs out: eviction then
 * waits for the next put. */
static item *scan(DIR *d, size_t *count) {
    int dfd = dirfd(d);
    time_t now = time(NULL);
    item *items = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        bool meta;
        size_t base = entry_base(e->d_name, &meta);
        bool tmp = strncmp(e->d_name, CACHE_TMP_PREFIX, strlen(CACHE_TMP_PREFIX)) == 0;
        if ((!base && !tmp) || fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (tmp) {
            if (now - st.st_mtime > STALE_TMP_SECONDS)
                unlinkat(dfd, e->d_name, 0);
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            item *grown = realloc(items, cap * sizeof *items);
            if (!grown) {
                free(items);
                return NULL;
            }
            items = grown;
        }
        item *it = &items[n++];
        memcpy(it->base, e->d_name, base);
        it->base[base] = '\0';
        it->meta = meta;
        it->bytes = (uint64_t)st.st_size;
        it->atime = st.st_atim;
    }
    *count = n;
    return items;
}

/* Merges each file with its sidecar into one entry, last used when its file
 * was (a sidecar's own time counts only when its file is gone). */
static size_t merge(item *items, size_t n) {
    qsort(items, n, sizeof *items, by_base);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && strcmp(items[m - 1].base, items[i].base) == 0) {
            items[m - 1].bytes += items[i].bytes;
            if (!items[i].meta)
                items[m - 1].atime = items[i].atime;
        } else {
            items[m++] = items[i];
        }
    }
    return m;
}

void cache_evict(const cache *c) {
    DIR *d = opendir(c->dir);
    if (!d)
        return;
    size_t n = 0;
    item *items = scan(d, &n);
    if (items) {
        n = merge(items, n);
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++)
            total += items[i].bytes;
        qsort(items, n, sizeof *items, by_atime);
        char meta[sizeof items->base + 5];
        for (size_t i = 0; i < n && total > c->max_bytes; i++) {
            /* The sidecar first: a put writes it last (see file.c). */
            snprintf(meta, sizeof meta, "%s.meta", items[i].base);
            unlinkat(dirfd(d), meta, 0);
            unlinkat(dirfd(d), items[i].base, 0);
            total -= items[i].bytes;
        }
        free(items);
    }
    closedir(d);
}
