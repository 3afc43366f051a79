/* cache_test.c — cache/: keys, the memory level, and the disk level's blobs
 * and loadable files: round trips; truncated, corrupt, foreign and untrusted
 * entries and directories (all misses, never trusted); several processes
 * writing, reading and evicting at once; LRU eviction under a byte budget;
 * and where the directory comes from. Every disk test works in a fresh
 * temporary directory. */
#define _GNU_SOURCE /* dladdr */
#include <criterion/criterion.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"

/* ---- helpers ---------------------------------------------------------------- */

static cache_key key_of(uint64_t i) {
    cache_key_builder b;
    cache_key_begin(&b);
    cache_key_add_str(&b, "cache_test");
    cache_key_add_u64(&b, i);
    return cache_key_end(&b);
}

static bool key_eq(cache_key a, cache_key b) { return a.hi == b.hi && a.lo == b.lo; }

/* The test's temporary directory; the cache lives in base/c, files to put
 * into it in base/src. */
static char base[1024], cdir[1100], srcdir[1100];

static void make_tmp(void) {
    const char *t = getenv("TEST_TMPDIR");
    snprintf(base, sizeof base, "%s/cache_test-XXXXXX", t && t[0] ? t : "/tmp");
    cr_assert_not_null(mkdtemp(base), "mkdtemp: %s", strerror(errno));
    snprintf(cdir, sizeof cdir, "%s/c", base);
    snprintf(srcdir, sizeof srcdir, "%s/src", base);
    cr_assert_eq(mkdir(srcdir, 0700), 0);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tmp(void) {
    chmod(cdir, 0700);
    nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static cache *open_cache(uint64_t max_bytes) {
    char msg[512] = "";
    cache *c = cache_open(cdir, max_bytes, msg, sizeof msg);
    cr_assert_not_null(c, "cache_open: %s", msg);
    return c;
}

/* <cache dir>/<hex>.<kind><suffix> */
static const char *entry(cache_key key, const char *kind, const char *suffix) {
    static char path[4][PATH_MAX];
    static int next;
    char hex[33];
    cache_key_hex(key, hex);
    char *p = path[next++ % 4];
    snprintf(p, PATH_MAX, "%s/%s.%s%s", cdir, hex, kind, suffix);
    return p;
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static off_t file_size(const char *path) {
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
    return st.st_size;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* The whole file, malloc'd; NULL if it cannot be read. */
static unsigned char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = malloc((size_t)size + 1);
    *n = fread(data, 1, (size_t)size, f);
    fclose(f);
    return data;
}

static void flip_byte(const char *path, off_t at) {
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
    unsigned char b;
    cr_assert_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    cr_assert_eq(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (unsigned char)(seed >> 16);
    }
}

/* Makes the file look last used `ago` seconds ago, and modified long before:
 * a relatime mount would then not update its access time on a read, so a hit
 * must. */
static void set_used(const char *path, time_t ago) {
    time_t now = time(NULL);
    const struct timespec t[2] = {{.tv_sec = now - ago}, {.tv_sec = now - ago - 100000}};
    cr_assert_eq(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

static time_t atime_of(const char *path) {
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return st.st_atim.tv_sec;
}

static struct timespec atime_ns(const char *path) {
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return st.st_atim;
}

static bool later(struct timespec a, struct timespec b) {
    return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec);
}

/* Puts n pseudo-random bytes (from seed) as a blob and checks them back. */
static void put_blob(cache *c, cache_key key, const char *kind, size_t n, unsigned seed) {
    unsigned char *data = malloc(n + 1);
    fill(data, n, seed);
    cr_assert_eq(cache_disk_put(c, key, kind, data, n), 0);
    free(data);
}

static bool blob_is(cache *c, cache_key key, const char *kind, size_t n, unsigned seed) {
    void *got;
    size_t m;
    if (cache_disk_get(c, key, kind, &got, &m) != 0)
        return false;
    unsigned char *want = malloc(n + 1);
    fill(want, n, seed);
    bool same = m == n && memcmp(got, want, n) == 0;
    free(want);
    free(got);
    return same;
}

/* Writes n pseudo-random bytes (from seed) to srcdir/name and returns its
 * path, or NULL. No assertions: forked children use it too. */
static const char *try_make_src(const char *name, size_t n, unsigned seed) {
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", srcdir, name);
    unsigned char *data = malloc(n + 1);
    fill(data, n, seed);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(data, 1, n, f) == n;
    ok = f && fclose(f) == 0 && ok;
    free(data);
    return ok ? path : NULL;
}

static const char *make_src(const char *name, size_t n, unsigned seed) {
    const char *path = try_make_src(name, n, seed);
    cr_assert_not_null(path, "%s: %s", name, strerror(errno));
    return path;
}

/* Whether the file at path holds the n bytes fill makes from seed. */
static bool file_is(const char *path, size_t n, unsigned seed) {
    size_t m;
    unsigned char *got = read_file(path, &m);
    if (!got)
        return false;
    unsigned char *want = malloc(n + 1);
    fill(want, n, seed);
    bool same = m == n && memcmp(got, want, n) == 0;
    free(want);
    free(got);
    return same;
}

static bool path_hit(cache *c, cache_key key, const char *kind) {
    char p[PATH_MAX];
    return cache_disk_path(c, key, kind, p, sizeof p) == 0;
}

/* ---- keys ------------------------------------------------------------------- */

Test(cache_key, deterministic) {
    cache_key a = key_of(42), b = key_of(42);
    cr_assert(key_eq(a, b));
    cache_key_builder x;
    cache_key_begin(&x);
    cache_key_add(&x, "ir", 2);
    cache_key key1 = cache_key_end(&x);
    /* The builder keeps going after cache_key_end. */
    cache_key_add_str(&x, "flags");
    cache_key key2 = cache_key_end(&x);
    cache_key_begin(&x);
    cache_key_add(&x, "ir", 2);
    cr_assert(key_eq(cache_key_end(&x), key1));
    cache_key_add_str(&x, "flags");
    cr_assert(key_eq(cache_key_end(&x), key2));
}

/* Each of these differs from the others somewhere: a byte, a boundary between
 * parts, the order of parts, a part more. */
Test(cache_key, sensitive) {
    const char *parts[][3] = {
        {"ab", "c", NULL}, {"a", "bc", NULL}, {"abc", NULL, NULL}, {"c", "ab", NULL},
        {"ab", "d", NULL}, {"ab", "c", ""},   {"", "ab", "c"},     {"", NULL, NULL},
    };
    enum { N = sizeof parts / sizeof parts[0] };
    cache_key keys[N + 3];
    for (int i = 0; i < N; i++) {
        cache_key_builder b;
        cache_key_begin(&b);
        for (int j = 0; j < 3 && parts[i][j]; j++)
            cache_key_add_str(&b, parts[i][j]);
        keys[i] = cache_key_end(&b);
    }
    cache_key_builder b;
    cache_key_begin(&b);
    keys[N] = cache_key_end(&b); /* no parts at all */
    keys[N + 1] = key_of(1);
    keys[N + 2] = key_of((uint64_t)1 << 63);
    for (int i = 0; i < N + 3; i++)
        for (int j = i + 1; j < N + 3; j++)
            cr_assert(!key_eq(keys[i], keys[j]), "keys %d and %d collide", i, j);
}

/* Pins the framing: each part is its length as 8 little-endian bytes, then
 * its bytes; a u64 is a part of 8 little-endian bytes. */
Test(cache_key, framing) {
    const unsigned char framed[] = {
        3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c',                /* "abc" */
        8, 0, 0, 0, 0, 0, 0, 0, 8,   7,   6,   5, 4, 3, 2, 1, /* 0x0102030405060708 */
    };
    XXH128_hash_t h = XXH3_128bits(framed, sizeof framed);
    cache_key_builder b;
    cache_key_begin(&b);
    cache_key_add_str(&b, "abc");
    cache_key_add_u64(&b, 0x0102030405060708u);
    cache_key k = cache_key_end(&b);
    cr_assert_eq(k.hi, h.high64);
    cr_assert_eq(k.lo, h.low64);
    cache_key_begin(&b);
    cache_key_add(&b, "abc", 3);
    const unsigned char le[8] = {8, 7, 6, 5, 4, 3, 2, 1};
    cache_key_add(&b, le, 8);
    cr_assert(key_eq(cache_key_end(&b), k));
}

Test(cache_key, hex) {
    char hex[33];
    cache_key_hex((cache_key){.hi = 0x0123456789abcdefu, .lo = 0xfedcba9876543210u}, hex);
    cr_assert_str_eq(hex, "0123456789abcdeffedcba9876543210");
    cache_key_hex((cache_key){0, 1}, hex);
    cr_assert_str_eq(hex, "00000000000000000000000000000001");
}

/* ---- memory level ----------------------------------------------------------- */

static atomic_int destroyed;

static void destroy_int(void *p) {
    atomic_fetch_add(&destroyed, 1);
    free(p);
}

static int *new_int(int v) {
    int *p = malloc(sizeof *p);
    *p = v;
    return p;
}

Test(cache_mem, put_get_close) {
    atomic_store(&destroyed, 0);
    cache *c = cache_open_memory_only();
    cr_assert_not_null(c);
    cr_assert_null(cache_mem_get(c, key_of(1)));
    int *one = new_int(1);
    cr_assert_eq(cache_mem_put(c, key_of(1), one, destroy_int), one);
    static int unowned = 2;
    cr_assert_eq(cache_mem_put(c, key_of(2), &unowned, NULL), &unowned);
    cr_assert_eq(cache_mem_get(c, key_of(1)), one);
    cr_assert_eq(cache_mem_get(c, key_of(2)), &unowned);
    cr_assert_null(cache_mem_get(c, key_of(3)));
    cr_assert_eq(atomic_load(&destroyed), 0);
    cache_close(c);
    cr_assert_eq(atomic_load(&destroyed), 1);
    cache_close(NULL);
}

Test(cache_mem, first_put_wins) {
    atomic_store(&destroyed, 0);
    cache *c = cache_open_memory_only();
    int *first = new_int(1), *second = new_int(2);
    cr_assert_eq(cache_mem_put(c, key_of(7), first, destroy_int), first);
    cr_assert_eq(cache_mem_put(c, key_of(7), second, destroy_int), first);
    cr_assert_eq(atomic_load(&destroyed), 1, "the losing value is destroyed at once");
    cr_assert_eq(cache_mem_get(c, key_of(7)), first);
    cache_close(c);
    cr_assert_eq(atomic_load(&destroyed), 2);
}

Test(cache_mem, many) {
    atomic_store(&destroyed, 0);
    cache *c = cache_open_memory_only();
    enum { N = 20000 };
    for (int i = 0; i < N; i++) {
        int *v = new_int(i);
        cr_assert_eq(cache_mem_put(c, key_of((uint64_t)i), v, destroy_int), v);
    }
    for (int i = 0; i < N; i++) {
        int *v = cache_mem_get(c, key_of((uint64_t)i));
        cr_assert_not_null(v);
        cr_assert_eq(*v, i);
    }
    cache_close(c);
    cr_assert_eq(atomic_load(&destroyed), N);
}

enum { THREADS = 8, THREAD_KEYS = 2000 };

typedef struct racer {
    cache *c;
    int id;
    int *seen[THREAD_KEYS];
} racer;

static void *race(void *arg) {
    racer *r = arg;
    for (int i = 0; i < THREAD_KEYS; i++)
        r->seen[i] =
            cache_mem_put(r->c, key_of((uint64_t)i), new_int(r->id * THREAD_KEYS + i), destroy_int);
    return NULL;
}

/* Threads putting the same keys at once all end up with one value per key. */
Test(cache_mem, threads) {
    atomic_store(&destroyed, 0);
    cache *c = cache_open_memory_only();
    static racer r[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        r[i].c = c;
        r[i].id = i;
        cr_assert_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(atomic_load(&destroyed), (THREADS - 1) * THREAD_KEYS);
    for (int k = 0; k < THREAD_KEYS; k++) {
        int *v = cache_mem_get(c, key_of((uint64_t)k));
        cr_assert_eq(*v % THREAD_KEYS, k);
        for (int i = 0; i < THREADS; i++)
            cr_assert_eq(r[i].seen[k], v, "thread %d key %d", i, k);
    }
    cache_close(c);
    cr_assert_eq(atomic_load(&destroyed), THREADS * THREAD_KEYS);
}

Test(cache_mem, memory_only_has_no_disk) {
    cache *c = cache_open_memory_only();
    cr_assert_null(cache_dir(c));
    void *data;
    size_t n;
    char path[PATH_MAX];
    cr_assert_eq(cache_disk_put(c, key_of(1), "bin", "x", 1), -1);
    cr_assert_eq(cache_disk_get(c, key_of(1), "bin", &data, &n), -1);
    cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", "/dev/null"), -1);
    cr_assert_eq(cache_disk_path(c, key_of(1), "so", path, sizeof path), -1);
    cache_close(c);
}

/* ---- disk level: blobs ------------------------------------------------------ */

TestSuite(cache_disk, .init = make_tmp, .fini = remove_tmp);

Test(cache_disk, blob_round_trip) {
    cache *c = open_cache(0);
    cr_assert_eq(cache_dir(c)[0], '/');
    put_blob(c, key_of(1), "bin", 0, 1);
    put_blob(c, key_of(2), "bin", 1, 2);
    put_blob(c, key_of(3), "bin", 300000, 3);
    put_blob(c, key_of(3), "plan", 17, 4);
    cr_assert(blob_is(c, key_of(1), "bin", 0, 1));
    cr_assert(blob_is(c, key_of(2), "bin", 1, 2));
    cr_assert(blob_is(c, key_of(3), "bin", 300000, 3));
    cr_assert(blob_is(c, key_of(3), "plan", 17, 4), "kinds are separate entries");
    cr_assert_eq(file_size(entry(key_of(3), "bin", "")), 300000 + 44);
    /* A put replaces the entry. */
    put_blob(c, key_of(2), "bin", 5000, 5);
    cr_assert(blob_is(c, key_of(2), "bin", 5000, 5));
    void *data;
    size_t n;
    cr_assert_eq(cache_disk_get(c, key_of(4), "bin", &data, &n), -1);
    cache_close(c);
    /* Another cache object (another process, later) finds the entries. */
    c = open_cache(0);
    cr_assert(blob_is(c, key_of(3), "bin", 300000, 3));
    cache_close(c);
}

/* A directory at an entry's name (empty, or holding files) no longer makes
 * every put of that entry fail: the put lands and is found. */
Test(cache_disk, directory_at_an_entry_is_replaced) {
    cache *c = open_cache(0);
    const char *empty = entry(key_of(7), "bin", ""), *full = entry(key_of(8), "bin", "");
    cr_assert_eq(mkdir(empty, 0700), 0);
    cr_assert_eq(mkdir(full, 0700), 0);
    char inside[PATH_MAX + 8];
    snprintf(inside, sizeof inside, "%s/x", full);
    write_file(inside, "x", 1);
    put_blob(c, key_of(7), "bin", 100, 7);
    put_blob(c, key_of(8), "bin", 100, 8);
    cr_assert(blob_is(c, key_of(7), "bin", 100, 7));
    cr_assert(blob_is(c, key_of(8), "bin", 100, 8));
    cache_close(c);
}

Test(cache_disk, blob_header) {
    cache *c = open_cache(0);
    put_blob(c, key_of(1), "bin", 10, 1);
    size_t n;
    unsigned char *f = read_file(entry(key_of(1), "bin", ""), &n);
    cr_assert_eq(n, 54);
    cr_assert_eq(memcmp(f, "KILNCACH", 8), 0);
    cr_assert_eq(f[8], 1, "format version 1, little-endian");
    uint64_t hi = 0;
    for (int i = 0; i < 8; i++)
        hi |= (uint64_t)f[12 + i] << (8 * i);
    cr_assert_eq(hi, key_of(1).hi);
    cr_assert_eq(f[28], 10, "payload size");
    free(f);
    cache_close(c);
}

Test(cache_disk, invalid_kinds) {
    cache *c = open_cache(0);
    const char *bad[] = {"", "a.b", "a/b", "../x", "so meta", "abcdefghijklmnopq", NULL};
    for (int i = 0; i < 7; i++) {
        void *data;
        size_t n;
        char path[PATH_MAX];
        cr_assert_eq(cache_disk_put(c, key_of(1), bad[i], "x", 1), -1, "kind %d", i);
        cr_assert_eq(cache_disk_get(c, key_of(1), bad[i], &data, &n), -1);
        cr_assert_eq(cache_disk_put_file(c, key_of(1), bad[i], make_src("s", 10, 1)), -1);
        cr_assert_eq(cache_disk_path(c, key_of(1), bad[i], path, sizeof path), -1);
    }
    put_blob(c, key_of(1), "abcdefghijklmnop", 1, 1);
    put_blob(c, key_of(1), "A_9", 1, 1);
    cache_close(c);
}

Test(cache_disk, blob_corrupt) {
    cache *c = open_cache(0);
    const char *p = entry(key_of(1), "bin", "");
    /* A byte of the payload, of the key, of the magic, of the version, of the
     * size, of the checksum. */
    const off_t at[] = {44 + 500, 12, 25, 0, 8, 30, 40};
    for (int i = 0; i < 7; i++) {
        put_blob(c, key_of(1), "bin", 1000, 1);
        flip_byte(p, at[i]);
        void *data;
        size_t n;
        cr_assert_eq(cache_disk_get(c, key_of(1), "bin", &data, &n), -1, "flip at %d", (int)at[i]);
        cr_assert(!exists(p), "an invalid entry is removed");
    }
    put_blob(c, key_of(1), "bin", 1000, 1);
    cr_assert(blob_is(c, key_of(1), "bin", 1000, 1));
    cache_close(c);
}

Test(cache_disk, blob_truncated) {
    cache *c = open_cache(0);
    const char *p = entry(key_of(1), "bin", "");
    const off_t len[] = {0, 20, 43, 44, 44 + 999};
    for (int i = 0; i < 5; i++) {
        put_blob(c, key_of(1), "bin", 1000, 1);
        cr_assert_eq(truncate(p, len[i]), 0);
        void *data;
        size_t n;
        cr_assert_eq(cache_disk_get(c, key_of(1), "bin", &data, &n), -1, "length %d", (int)len[i]);
        cr_assert(!exists(p));
    }
    /* Longer than its header says is no better. */
    put_blob(c, key_of(1), "bin", 1000, 1);
    int fd = open(p, O_WRONLY | O_APPEND);
    cr_assert_eq(write(fd, "x", 1), 1);
    close(fd);
    cr_assert(!blob_is(c, key_of(1), "bin", 1000, 1));
    cr_assert(!exists(p));
    cache_close(c);
}

Test(cache_disk, blob_foreign) {
    cache *c = open_cache(0);
    const char *p = entry(key_of(1), "bin", "");
    unsigned char junk[2000];
    fill(junk, sizeof junk, 99);
    write_file(p, junk, sizeof junk);
    void *data;
    size_t n;
    cr_assert_eq(cache_disk_get(c, key_of(1), "bin", &data, &n), -1);
    cr_assert(!exists(p));
    /* A whole, valid entry of another key, under this key's name. */
    put_blob(c, key_of(2), "bin", 100, 2);
    cr_assert_eq(rename(entry(key_of(2), "bin", ""), p), 0);
    cr_assert_eq(cache_disk_get(c, key_of(1), "bin", &data, &n), -1);
    cr_assert(!exists(p));
    /* Another kind's entry of the same key. */
    put_blob(c, key_of(1), "plan", 100, 2);
    cr_assert_eq(rename(entry(key_of(1), "plan", ""), p), 0);
    cr_assert(blob_is(c, key_of(1), "bin", 100, 2), "the header does not name the kind");
    cache_close(c);
}

Test(cache_disk, blob_untrusted_file) {
    cache *c = open_cache(0);
    const char *p = entry(key_of(1), "bin", "");
    put_blob(c, key_of(1), "bin", 100, 1);
    const mode_t modes[] = {0620, 0602, 0666};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(chmod(p, modes[i]), 0);
        cr_assert(!blob_is(c, key_of(1), "bin", 100, 1), "mode %o", (unsigned)modes[i]);
        cr_assert(exists(p), "an untrusted entry is not corrupt: it stays");
    }
    cr_assert_eq(chmod(p, 0400), 0);
    cr_assert(blob_is(c, key_of(1), "bin", 100, 1));
    /* A link, even to a valid entry. */
    char elsewhere[PATH_MAX];
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", srcdir);
    cr_assert_eq(rename(p, elsewhere), 0);
    cr_assert_eq(symlink(elsewhere, p), 0);
    cr_assert(!blob_is(c, key_of(1), "bin", 100, 1));
    cr_assert_eq(unlink(p), 0);
    if (geteuid() == 0) {
        put_blob(c, key_of(1), "bin", 100, 1);
        cr_assert_eq(chown(p, 65534, 65534), 0);
        cr_assert(!blob_is(c, key_of(1), "bin", 100, 1), "another user's file");
    }
    cache_close(c);
}

/* ---- disk level: the directory ---------------------------------------------- */

Test(cache_disk, untrusted_dir_at_open) {
    cr_assert_eq(mkdir(cdir, 0700), 0);
    char msg[512];
    const mode_t modes[] = {0777, 0770, 0702, 01777};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(chmod(cdir, modes[i]), 0);
        msg[0] = '\0';
        cr_assert_null(cache_open(cdir, 0, msg, sizeof msg), "mode %o", (unsigned)modes[i]);
        cr_assert(strstr(msg, "writable by group or others"), "message: %s", msg);
        cr_assert(strstr(msg, cdir), "message: %s", msg);
        cr_assert_null(cache_open(cdir, 0, NULL, 0), "no room for a message is fine");
    }
    cr_assert_eq(chmod(cdir, 0755), 0);
    cache *c = open_cache(0);
    cache_close(c);
    if (geteuid() != 0)
        cr_skip_test("chown to another user needs root");
    cr_assert_eq(chown(cdir, 65534, 65534), 0);
    cr_assert_null(cache_open(cdir, 0, msg, sizeof msg));
    cr_assert(strstr(msg, "owned by uid 65534"), "message: %s", msg);
}

/* A directory that becomes untrusted after cache_open: every use misses, and
 * nothing is removed, so the entries are there again once it is fixed. */
Test(cache_disk, untrusted_dir_later) {
    cache *c = open_cache(0);
    put_blob(c, key_of(1), "bin", 100, 1);
    cr_assert_eq(cache_disk_put_file(c, key_of(2), "so", make_src("lib", 1000, 2)), 0);
    cr_assert_eq(chmod(cdir, 0777), 0);
    cr_assert(!blob_is(c, key_of(1), "bin", 100, 1));
    cr_assert(!path_hit(c, key_of(2), "so"));
    cr_assert_eq(cache_disk_put(c, key_of(3), "bin", "x", 1), -1);
    cr_assert_eq(cache_disk_put_file(c, key_of(4), "so", make_src("lib", 1000, 2)), -1);
    cr_assert(!exists(entry(key_of(3), "bin", "")));
    cr_assert_eq(chmod(cdir, 0700), 0);
    cr_assert(blob_is(c, key_of(1), "bin", 100, 1));
    cr_assert(path_hit(c, key_of(2), "so"));
    if (geteuid() == 0) {
        cr_assert_eq(chown(cdir, 65534, 65534), 0);
        cr_assert(!blob_is(c, key_of(1), "bin", 100, 1));
        cr_assert(!path_hit(c, key_of(2), "so"));
        cr_assert_eq(chown(cdir, 0, 0), 0);
    }
    /* The directory replaced by a link to an untrusted one. */
    char other[PATH_MAX];
    snprintf(other, sizeof other, "%s/other", base);
    cr_assert_eq(rename(cdir, other), 0);
    cr_assert_eq(chmod(other, 0777), 0);
    cr_assert_eq(symlink(other, cdir), 0);
    cr_assert(!blob_is(c, key_of(1), "bin", 100, 1));
    cr_assert(!path_hit(c, key_of(2), "so"));
    cr_assert_eq(unlink(cdir), 0);
    cr_assert_eq(chmod(other, 0700), 0);
    cr_assert_eq(rename(other, cdir), 0);
    cache_close(c);
}

Test(cache_disk, open_errors) {
    char msg[512], path[PATH_MAX];
    snprintf(path, sizeof path, "%s/file", base);
    write_file(path, "x", 1);
    msg[0] = '\0';
    cr_assert_null(cache_open(path, 0, msg, sizeof msg));
    cr_assert(strstr(msg, path), "message: %s", msg);
    snprintf(path, sizeof path, "%s/file/sub", base);
    msg[0] = '\0';
    cr_assert_null(cache_open(path, 0, msg, sizeof msg));
    cr_assert(strstr(msg, "cannot create"), "message: %s", msg);
    cr_assert_null(cache_open(path, 0, NULL, 0));
}

/* The directory: the argument, else KILN_CACHE_DIR, else XDG_CACHE_HOME/kiln
 * (if absolute), else ~/.cache/kiln; what is missing is created, mode 0700. */
Test(cache_disk, where) {
    char want[PATH_MAX], env[PATH_MAX], arg[PATH_MAX];
    struct stat st;
    cache *c;

    snprintf(env, sizeof env, "%s/env/a/b", base);
    setenv("KILN_CACHE_DIR", env, 1);
    setenv("XDG_CACHE_HOME", "/nonexistent-xdg", 1);
    c = open_cache(0);
    cr_assert_str_eq(cache_dir(c), cdir, "the argument comes first");
    cache_close(c);
    char msg[256];
    c = cache_open(NULL, 0, msg, sizeof msg);
    cr_assert_not_null(c, "%s", msg);
    cr_assert_str_eq(cache_dir(c), env);
    cache_close(c);
    snprintf(want, sizeof want, "%s/env", base);
    cr_assert_eq(stat(want, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0700);
    cr_assert_eq(stat(env, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0700);

    unsetenv("KILN_CACHE_DIR");
    snprintf(env, sizeof env, "%s/xdg", base);
    setenv("XDG_CACHE_HOME", env, 1);
    c = cache_open(NULL, 0, msg, sizeof msg);
    cr_assert_not_null(c, "%s", msg);
    snprintf(want, sizeof want, "%s/xdg/kiln", base);
    cr_assert_str_eq(cache_dir(c), want);
    cache_close(c);

    setenv("XDG_CACHE_HOME", "relative/xdg", 1);
    snprintf(env, sizeof env, "%s/home", base);
    setenv("HOME", env, 1);
    c = cache_open(NULL, 0, msg, sizeof msg);
    cr_assert_not_null(c, "%s", msg);
    snprintf(want, sizeof want, "%s/home/.cache/kiln", base);
    cr_assert_str_eq(cache_dir(c), want);
    cache_close(c);

    /* A relative directory comes back absolute, for dlopen. */
    cr_assert_eq(chdir(base), 0);
    snprintf(arg, sizeof arg, "rel");
    c = cache_open(arg, 0, msg, sizeof msg);
    cr_assert_not_null(c, "%s", msg);
    snprintf(want, sizeof want, "%s/rel", base);
    cr_assert_str_eq(cache_dir(c), want);
    cache_close(c);
}

/* ---- disk level: loadable files --------------------------------------------- */

Test(cache_disk, file_round_trip) {
    cache *c = open_cache(0);
    const char *src = make_src("lib.so", 5000, 7);
    cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", src), 0);
    cr_assert(exists(src), "the source is left alone");
    char path[PATH_MAX];
    cr_assert_eq(cache_disk_path(c, key_of(1), "so", path, sizeof path), 0);
    cr_assert_str_eq(path, entry(key_of(1), "so", ""));
    size_t n, m;
    unsigned char *a = read_file(src, &n), *b = read_file(path, &m);
    cr_assert_eq(n, m);
    cr_assert_eq(memcmp(a, b, n), 0);
    free(a);
    free(b);
    cr_assert_eq(file_size(entry(key_of(1), "so", ".meta")), 44);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 077, 0, "mode %o", (unsigned)st.st_mode);
    /* Exactly room for the path, and one byte less. */
    size_t len = strlen(path);
    cr_assert_eq(cache_disk_path(c, key_of(1), "so", path, len + 1), 0);
    cr_assert_eq(cache_disk_path(c, key_of(1), "so", path, len), -1);
    cr_assert(!path_hit(c, key_of(2), "so"));
    cr_assert(!path_hit(c, key_of(1), "dylib"));
    /* A put replaces the entry. */
    cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", make_src("lib.so", 300000, 8)), 0);
    cr_assert(path_hit(c, key_of(1), "so"));
    cr_assert_eq(file_size(entry(key_of(1), "so", "")), 300000);
    /* A build that failed left nothing to put. */
    cr_assert_eq(cache_disk_put_file(c, key_of(3), "so", "/nonexistent/lib.so"), -1);
    cr_assert(!exists(entry(key_of(3), "so", "")));
    cr_assert(!exists(entry(key_of(3), "so", ".meta")));
    cache_close(c);
}

/* What the compiler will do with a hit: dlopen it. A copy of a real shared
 * library stands in for a compiled kernel. */
Test(cache_disk, file_dlopen) {
    Dl_info info;
    cr_assert(dladdr((void *)XXH3_64bits, &info) && info.dli_fname);
    if (!strstr(info.dli_fname, ".so"))
        cr_skip_test("libxxhash is linked statically");
    cache *c = open_cache(0);
    cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", info.dli_fname), 0);
    char path[PATH_MAX];
    cr_assert_eq(cache_disk_path(c, key_of(1), "so", path, sizeof path), 0);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(h, "%s", dlerror());
    XXH64_hash_t (*fn)(const void *, size_t) =
        (XXH64_hash_t(*)(const void *, size_t))dlsym(h, "XXH3_64bits");
    cr_assert_not_null(fn);
    cr_assert_eq(fn("kiln", 4), XXH3_64bits("kiln", 4));
    dlclose(h);
    cache_close(c);
}

Test(cache_disk, file_invalid) {
    cache *c = open_cache(0);
    const char *src = make_src("lib.so", 5000, 7);
    const char *f = entry(key_of(1), "so", ""), *meta = entry(key_of(1), "so", ".meta");

    /* No sidecar (as while a writer is between its two renames). */
    cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", src), 0);
    cr_assert_eq(unlink(meta), 0);
    cr_assert(!path_hit(c, key_of(1), "so"));
    cr_assert(exists(f));

    /* A sidecar but no file. */
    cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", src), 0);
    cr_assert_eq(unlink(f), 0);
    cr_assert(!path_hit(c, key_of(1), "so"));

    /* The file changed: one byte, shorter, longer. A miss leaves the files
     * alone (they may be a put in progress); the put that follows the miss
     * repairs the entry. */
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", src), 0);
        if (i == 0)
            flip_byte(f, 2500);
        else
            cr_assert_eq(truncate(f, i == 1 ? 4999 : 5001), 0);
        cr_assert(!path_hit(c, key_of(1), "so"), "case %d", i);
        cr_assert(exists(f) && exists(meta));
        cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", src), 0);
        cr_assert(path_hit(c, key_of(1), "so"), "case %d", i);
    }

    /* The sidecar changed: a byte of the key, of the size, of the checksum,
     * truncated, foreign bytes. */
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", src), 0);
        if (i < 3) {
            flip_byte(meta, i == 0 ? 13 : i == 1 ? 29 : 39);
        } else if (i == 3) {
            cr_assert_eq(truncate(meta, 43), 0);
        } else {
            unsigned char junk[44];
            fill(junk, sizeof junk, 5);
            write_file(meta, junk, sizeof junk);
        }
        cr_assert(!path_hit(c, key_of(1), "so"), "case %d", i);
        cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", src), 0);
        cr_assert(path_hit(c, key_of(1), "so"), "case %d", i);
    }

    /* Another key's valid sidecar. */
    cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", src), 0);
    cr_assert_eq(cache_disk_put_file(c, key_of(2), "so", src), 0);
    cr_assert_eq(rename(entry(key_of(2), "so", ".meta"), meta), 0);
    cr_assert(!path_hit(c, key_of(1), "so"));

    /* Untrusted modes, of the file and of the sidecar. */
    cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", src), 0);
    cr_assert_eq(chmod(f, 0660), 0);
    cr_assert(!path_hit(c, key_of(1), "so"));
    cr_assert_eq(chmod(f, 0500), 0);
    cr_assert(path_hit(c, key_of(1), "so"));
    cr_assert_eq(chmod(meta, 0606), 0);
    cr_assert(!path_hit(c, key_of(1), "so"));
    cr_assert_eq(chmod(meta, 0600), 0);
    cr_assert(path_hit(c, key_of(1), "so"));
    if (geteuid() == 0) {
        cr_assert_eq(chown(f, 65534, 65534), 0);
        cr_assert(!path_hit(c, key_of(1), "so"), "another user's file");
        cr_assert_eq(chown(f, 0, 0), 0);
        cr_assert_eq(chown(meta, 65534, 65534), 0);
        cr_assert(!path_hit(c, key_of(1), "so"), "another user's sidecar");
    }
    cache_close(c);
}

/* ---- eviction --------------------------------------------------------------- */

/* Entries of 1000-byte payloads are 1044 bytes on disk. */
Test(cache_disk, evict_lru) {
    cache *c = open_cache(3200);
    for (int i = 1; i <= 3; i++)
        put_blob(c, key_of((uint64_t)i), "bin", 1000, (unsigned)i);
    for (int i = 1; i <= 3; i++)
        set_used(entry(key_of((uint64_t)i), "bin", ""), 4000 - 1000 * i);
    /* A hit marks the entry used, whatever the mount's atime policy. */
    cr_assert(blob_is(c, key_of(1), "bin", 1000, 1));
    cr_assert_geq(atime_of(entry(key_of(1), "bin", "")), time(NULL) - 60);
    put_blob(c, key_of(4), "bin", 1000, 4);
    cr_assert(!exists(entry(key_of(2), "bin", "")), "the least recently used goes");
    cr_assert(exists(entry(key_of(1), "bin", "")));
    cr_assert(exists(entry(key_of(3), "bin", "")));
    cr_assert(exists(entry(key_of(4), "bin", "")));
    put_blob(c, key_of(5), "bin", 1000, 5);
    cr_assert(!exists(entry(key_of(3), "bin", "")));
    cr_assert(exists(entry(key_of(1), "bin", "")));
    cr_assert(exists(entry(key_of(4), "bin", "")));
    cr_assert(exists(entry(key_of(5), "bin", "")));
    /* An entry larger than the whole budget does not stay. */
    put_blob(c, key_of(6), "bin", 4000, 6);
    cr_assert(!exists(entry(key_of(6), "bin", "")));
    cache_close(c);
}

/* Every hit marks its entry used, even where the mount would not: relatime
 * updates an access time on a read only when it is older than the last
 * modification or change, which after one read it no longer is. */
Test(cache_disk, hit_marks_use) {
    cache *c = open_cache(0);
    put_blob(c, key_of(1), "bin", 100, 1);
    cr_assert_eq(cache_disk_put_file(c, key_of(2), "so", make_src("lib", 100, 2)), 0);
    const char *blob = entry(key_of(1), "bin", ""), *file = entry(key_of(2), "so", "");
    cr_assert(blob_is(c, key_of(1), "bin", 100, 1));
    cr_assert(path_hit(c, key_of(2), "so"));
    struct timespec b0 = atime_ns(blob), f0 = atime_ns(file);
    usleep(50000);
    cr_assert(blob_is(c, key_of(1), "bin", 100, 1));
    cr_assert(path_hit(c, key_of(2), "so"));
    cr_assert(later(atime_ns(blob), b0));
    cr_assert(later(atime_ns(file), f0));
    cache_close(c);
}

/* A loadable file and its sidecar are counted and removed together, by the
 * file's use; files that are not entries are left alone. */
Test(cache_disk, evict_whole_entries) {
    cache *c = open_cache(2100);
    write_file(entry(key_of(9), "bin", ".txt"), "not an entry", 12);
    char notes[PATH_MAX];
    snprintf(notes, sizeof notes, "%s/notes", cdir);
    write_file(notes, "mine", 4);
    cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", make_src("lib", 1000, 1)), 0);
    put_blob(c, key_of(2), "bin", 1000, 2);
    set_used(entry(key_of(1), "so", ""), 3000);
    set_used(entry(key_of(1), "so", ".meta"), 1000); /* the sidecar's time does not count */
    set_used(entry(key_of(2), "bin", ""), 2000);
    put_blob(c, key_of(3), "bin", 1000, 3);
    cr_assert(!exists(entry(key_of(1), "so", "")));
    cr_assert(!exists(entry(key_of(1), "so", ".meta")));
    cr_assert(exists(entry(key_of(2), "bin", "")));
    cr_assert(exists(entry(key_of(3), "bin", "")));
    cr_assert(exists(notes));
    cr_assert(exists(entry(key_of(9), "bin", ".txt")));
    /* A hit on a loadable file protects it. */
    cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", make_src("lib", 1000, 1)), 0);
    cr_assert(!exists(entry(key_of(2), "bin", "")));
    set_used(entry(key_of(1), "so", ""), 3000);
    set_used(entry(key_of(3), "bin", ""), 2000);
    cr_assert(path_hit(c, key_of(1), "so"));
    put_blob(c, key_of(4), "bin", 1000, 4);
    cr_assert(!exists(entry(key_of(3), "bin", "")));
    cr_assert(path_hit(c, key_of(1), "so"));
    cache_close(c);
}

/* A loadable file's bytes and its sidecar's both count against the budget:
 * with the budget between the file alone and file plus sidecar (next to
 * the newest entry), evicting the oldest entry is not enough and the file
 * must go too; counting either part alone keeps it. */
Test(cache_disk, evict_counts_file_and_sidecar) {
    cache *c0 = open_cache(0);
    put_blob(c0, key_of(1), "bin", 1000, 1);
    cr_assert_eq(cache_disk_put_file(c0, key_of(2), "so", make_src("lib", 1100, 2)), 0);
    set_used(entry(key_of(1), "bin", ""), 3000);
    set_used(entry(key_of(2), "so", ""), 2000);
    off_t blob = file_size(entry(key_of(1), "bin", ""));
    off_t file = file_size(entry(key_of(2), "so", "")), meta = file_size(entry(key_of(2), "so", ".meta"));
    cr_assert(meta >= 2, "a sidecar of %lld bytes", (long long)meta);
    cache_close(c0);
    /* the next blob is as large as the first */
    cache *c = open_cache((uint64_t)(blob + file + meta / 2));
    put_blob(c, key_of(3), "bin", 1000, 3);
    cr_assert(!exists(entry(key_of(1), "bin", "")), "the oldest goes first");
    cr_assert(!exists(entry(key_of(2), "so", "")), "file + sidecar %lld + %lld bytes were not "
              "counted whole", (long long)file, (long long)meta);
    cr_assert(!exists(entry(key_of(2), "so", ".meta")));
    cr_assert(exists(entry(key_of(3), "bin", "")));
    cache_close(c);
}

Test(cache_disk, evict_stale_temporaries) {
    cache *c = open_cache(0);
    char old[PATH_MAX], young[PATH_MAX];
    snprintf(old, sizeof old, "%s/.tmp-%s-AAAAAA", cdir, "0123.bin");
    snprintf(young, sizeof young, "%s/.tmp-%s-BBBBBB", cdir, "0123.bin");
    write_file(old, "x", 1);
    write_file(young, "x", 1);
    const struct timespec t[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = time(NULL) - 7200}};
    cr_assert_eq(utimensat(AT_FDCWD, old, t, 0), 0);
    put_blob(c, key_of(1), "bin", 10, 1);
    cr_assert(!exists(old), "left by a writer that died");
    cr_assert(exists(young), "a writer may be busy with it");
    cache_close(c);
}

Test(cache_disk, budget_from_environment) {
    char msg[256];
    setenv("KILN_CACHE_MAX_BYTES", "2100", 1);
    cache *c = cache_open(cdir, 0, msg, sizeof msg);
    cr_assert_not_null(c, "%s", msg);
    for (int i = 1; i <= 3; i++) {
        put_blob(c, key_of((uint64_t)i), "bin", 1000, (unsigned)i);
        set_used(entry(key_of((uint64_t)i), "bin", ""), 4000 - 1000 * i);
    }
    cr_assert(!exists(entry(key_of(1), "bin", "")));
    cr_assert(exists(entry(key_of(3), "bin", "")));
    cache_close(c);
    /* The argument comes first. */
    c = open_cache(1 << 20);
    for (int i = 4; i <= 6; i++)
        put_blob(c, key_of((uint64_t)i), "bin", 1000, (unsigned)i);
    for (int i = 2; i <= 6; i++)
        cr_assert(exists(entry(key_of((uint64_t)i), "bin", "")), "entry %d", i);
    cache_close(c);
    const char *bad[] = {"lots", "12k", "-5", "0", " 7", "99999999999999999999999"};
    for (int i = 0; i < 6; i++) {
        setenv("KILN_CACHE_MAX_BYTES", bad[i], 1);
        msg[0] = '\0';
        cr_assert_null(cache_open(cdir, 0, msg, sizeof msg), "%s", bad[i]);
        cr_assert(strstr(msg, "KILN_CACHE_MAX_BYTES"), "message: %s", msg);
    }
}

/* ---- several processes at once --------------------------------------------- */

enum { PROCS = 8, SHARED_KEYS = 12, OWN_KEYS = 6, ROUNDS = 4 };

/* Writers of a shared key write different bytes: a reader must see exactly
 * one writer's whole payload. The first 8 bytes name the key, the next 8 the
 * writer; the length depends on both. */
static size_t payload(uint64_t k, uint64_t w, unsigned char *buf) {
    size_t n = 16 + 20000 + 1000 * (size_t)(k % 7) + 13 * (size_t)w;
    memcpy(buf, &k, 8);
    memcpy(buf + 8, &w, 8);
    fill(buf + 16, n - 16, (unsigned)(k * 131 + w));
    return n;
}

static bool payload_ok(uint64_t k, const unsigned char *data, size_t n) {
    static unsigned char want[64000];
    uint64_t w;
    if (n < 16 || memcmp(data, &k, 8) != 0)
        return false;
    memcpy(&w, data + 8, 8);
    return w < PROCS && payload(k, w, want) == n && memcmp(data, want, n) == 0;
}

/* A child's work; its exit status says whether all it saw was right. */
static int writer(uint64_t w, uint64_t max_bytes) {
    static unsigned char buf[64000];
    cache *c = cache_open(cdir, max_bytes, NULL, 0);
    if (!c)
        return 2;
    int bad = 0;
    for (int r = 0; r < ROUNDS; r++) {
        for (uint64_t k = 0; k < SHARED_KEYS + OWN_KEYS; k++) {
            uint64_t key = k < SHARED_KEYS ? k : 1000 * (w + 1) + k;
            size_t n = payload(key, w, buf);
            if (cache_disk_put(c, key_of(key), "bin", buf, n) != 0)
                bad = 3;
            void *got;
            size_t m;
            uint64_t other = (key * 7 + (uint64_t)r) % SHARED_KEYS;
            if (cache_disk_get(c, key_of(other), "bin", &got, &m) == 0) {
                if (!payload_ok(other, got, m))
                    bad = 4;
                free(got);
            }
        }
    }
    cache_close(c);
    return bad;
}

static void run_children(uint64_t max_bytes) {
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0)
            _exit(writer((uint64_t)i, max_bytes));
    }
    for (int i = 0; i < PROCS; i++) {
        int status;
        cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer %d: status %d", i, status);
    }
}

/* Checks that the directory holds nothing but whole, valid entries and no
 * temporaries; returns their bytes and, in *entries, their number. */
static uint64_t check_dir(cache *c, int *entries) {
    uint64_t total = 0;
    *entries = 0;
    for (uint64_t i = 0; i < SHARED_KEYS + PROCS * OWN_KEYS; i++) {
        uint64_t key = i < SHARED_KEYS ? i
                                       : 1000 * ((i - SHARED_KEYS) / OWN_KEYS + 1) + SHARED_KEYS +
                                             (i - SHARED_KEYS) % OWN_KEYS;
        const char *p = entry(key_of(key), "bin", "");
        if (!exists(p))
            continue;
        total += (uint64_t)file_size(p);
        void *got;
        size_t m;
        cr_assert_eq(cache_disk_get(c, key_of(key), "bin", &got, &m), 0, "key %d", (int)key);
        cr_assert(payload_ok(key, got, m), "key %d", (int)key);
        free(got);
        ++*entries;
    }
    DIR *d = opendir(cdir);
    cr_assert_not_null(d);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        cr_assert(strncmp(e->d_name, ".tmp-", 5) != 0, "left behind: %s", e->d_name);
        files += e->d_name[0] != '.';
    }
    closedir(d);
    cr_assert_eq(files, *entries, "only entries");
    return total;
}

Test(cache_disk, concurrent_writers) {
    cache_close(open_cache(0));
    run_children(0);
    cache *c = open_cache(0);
    int entries;
    check_dir(c, &entries);
    cr_assert_eq(entries, SHARED_KEYS + PROCS * OWN_KEYS, "every entry is there");
    cache_close(c);
}

/* Every writer evicts after every put, all at once. */
Test(cache_disk, concurrent_evictors) {
    const uint64_t budget = 200000;
    cache_close(open_cache(budget));
    run_children(budget);
    cache *c = open_cache(budget);
    int entries;
    uint64_t total = check_dir(c, &entries);
    cr_assert_leq(total, budget);
    cr_assert_gt(entries, 0);
    cache_close(c);
}

/* Processes building the same kernel put the same file at once, and load it
 * as soon as their own put is done. */
Test(cache_disk, concurrent_files) {
    cache_close(open_cache(0));
    enum { FILE_KEYS = 6 };
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0) {
            cache *c = cache_open(cdir, 0, NULL, 0);
            int bad = c ? 0 : 2;
            for (int r = 0; r < ROUNDS && !bad; r++)
                for (uint64_t k = 0; k < FILE_KEYS; k++) {
                    char name[64], path[PATH_MAX];
                    snprintf(name, sizeof name, "lib-%d-%d.so", i, (int)k);
                    const char *src = try_make_src(name, 40000 + 1000 * k, (unsigned)k);
                    if (!src || cache_disk_put_file(c, key_of(k), "so", src) != 0)
                        bad = 3;
                    else if (cache_disk_path(c, key_of(k), "so", path, sizeof path) != 0)
                        bad = 4;
                    else if (!file_is(path, 40000 + 1000 * k, (unsigned)k))
                        bad = 5;
                }
            cache_close(c);
            _exit(bad);
        }
    }
    for (int i = 0; i < PROCS; i++) {
        int status;
        cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "process %d: status %d", i,
                  status);
    }
    cache *c = open_cache(0);
    for (uint64_t k = 0; k < FILE_KEYS; k++)
        cr_assert(path_hit(c, key_of(k), "so"), "key %d", (int)k);
    cache_close(c);
}

enum { VERSIONS = 200 };

/* Version v of a file: its number, then bytes from fill; the length varies. */
static size_t version(uint32_t v, unsigned char *buf) {
    size_t n = 30000 + 100 * (v % 7);
    fill(buf, n, v);
    memcpy(buf, &v, 4);
    return n;
}

static bool version_ok(const unsigned char *got, size_t n) {
    static unsigned char want[40000];
    uint32_t v;
    if (n < 4)
        return false;
    memcpy(&v, got, 4);
    return v < VERSIONS && version(v, want) == n && memcmp(got, want, n) == 0;
}

/* One process replaces a loadable entry again and again with different bytes
 * while others look it up: every hit is one whole version, and no reader
 * undoes a put. */
Test(cache_disk, concurrent_file_replacement) {
    enum { READERS = 6 };
    cache *c = open_cache(0);
    char done[PATH_MAX];
    snprintf(done, sizeof done, "%s/done", base);
    pid_t pids[READERS];
    for (int i = 0; i < READERS; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0) {
            cache *rc = cache_open(cdir, 0, NULL, 0);
            int bad = rc ? 0 : 2;
            while (!bad && !exists(done)) {
                char path[PATH_MAX];
                if (cache_disk_path(rc, key_of(1), "so", path, sizeof path) != 0)
                    continue;
                size_t n;
                unsigned char *got = read_file(path, &n);
                if (!got || !version_ok(got, n))
                    bad = 3;
                free(got);
            }
            cache_close(rc);
            _exit(bad);
        }
    }
    static unsigned char data[40000];
    char src[PATH_MAX];
    snprintf(src, sizeof src, "%s/lib.so", srcdir);
    for (uint32_t v = 0; v < VERSIONS; v++) {
        size_t n = version(v, data);
        write_file(src, data, n);
        cr_assert_eq(cache_disk_put_file(c, key_of(1), "so", src), 0);
        char path[PATH_MAX];
        cr_assert_eq(cache_disk_path(c, key_of(1), "so", path, sizeof path), 0, "version %u", v);
        size_t m;
        unsigned char *got = read_file(path, &m);
        cr_assert(m == n && memcmp(got, data, n) == 0, "version %u", v);
        free(got);
    }
    write_file(done, "", 0);
    for (int i = 0; i < READERS; i++) {
        int status;
        cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reader %d: status %d", i, status);
    }
    cache_close(c);
}
