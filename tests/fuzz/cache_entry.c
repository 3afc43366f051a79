/* cache_entry.c — fuzzes the disk cache's entry readers (cache/blob.c,
 * cache/file.c) in a private cache directory. The first byte picks the
 * reader: even, the rest is a blob entry file read by cache_disk_get; odd,
 * its first 44 bytes (a header's size) are a loadable file's sidecar and the
 * rest the file, checked by cache_disk_path. A hit must hand back exactly
 * the payload (or the path) that the bytes hold; anything else is a miss,
 * never a crash. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "tests/fuzz/fuzz.h"

enum { HEADER = 44 }; /* CACHE_HEADER_BYTES, a private constant of cache/ */

static cache *c;
static char dir[4096], blob[PATH_MAX], file[PATH_MAX], meta[PATH_MAX];

static void cleanup(void) {
    cache_close(c);
    unlink(blob);
    unlink(file);
    unlink(meta);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char msg[256] = "";
    snprintf(dir, sizeof dir, "%s", fuzz_tmpdir("cache"));
    c = cache_open(dir, 0, msg, sizeof msg);
    if (!c) {
        fprintf(stderr, "cache_entry: cache_open: %s\n", msg);
        exit(1);
    }
    char hex[33];
    cache_key_hex(FUZZ_CACHE_KEY, hex);
    /* cache_dir is the resolved path, which the entries' names start with. */
    snprintf(blob, sizeof blob, "%s/%s." FUZZ_BLOB_KIND, cache_dir(c), hex);
    snprintf(file, sizeof file, "%s/%s." FUZZ_FILE_KIND, cache_dir(c), hex);
    snprintf(meta, sizeof meta, "%s.meta", file);
    atexit(cleanup);
    return 0;
}

static void put(const char *path, const uint8_t *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size) || close(fd) != 0) {
        perror("cache_entry: writing the input");
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0)
        return 0;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    if (data[0] % 2 == 0) {
        put(blob, rest, n);
        void *got = NULL;
        size_t len = 0;
        if (cache_disk_get(c, FUZZ_CACHE_KEY, FUZZ_BLOB_KIND, &got, &len) == 0) {
            if (n < HEADER || len != n - HEADER || memcmp(got, rest + HEADER, len) != 0) {
                fprintf(stderr, "cache_disk_get: a hit of %zu bytes from a %zu-byte entry\n",
                        len, n);
                abort();
            }
            free(got);
        }
        unlink(blob);
    } else {
        size_t m = n < HEADER ? n : HEADER;
        put(meta, rest, m);
        put(file, rest + m, n - m);
        char out[PATH_MAX];
        if (cache_disk_path(c, FUZZ_CACHE_KEY, FUZZ_FILE_KIND, out, sizeof out) == 0 &&
            strcmp(out, file) != 0) {
            fprintf(stderr, "cache_disk_path: a hit at %s, not %s\n", out, file);
            abort();
        }
        unlink(meta);
        unlink(file);
    }
    return 0;
}
