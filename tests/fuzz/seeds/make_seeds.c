/* make_seeds.c — writes the seed inputs of tests/fuzz/corpus/ that must be
 * real kiln files: a checkpoint written by kiln_save, and a blob entry and a
 * loadable file's sidecar and file written by the disk cache itself, under
 * the key cache_entry reads. tests/fuzz/build.sh builds it;
 *
 *   make_seeds CORPUS_DIR     (tests/fuzz/corpus)
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln.h"
#include "tests/fuzz/fuzz.h"

static size_t slurp(const char *path, unsigned char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap, f) : 0;
    if (!f || ferror(f) || n == cap) {
        fprintf(stderr, "make_seeds: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    return n;
}

static void spill(const char *path, const unsigned char *a, size_t na, const unsigned char *b,
                  size_t nb) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(a, 1, na, f) != na || fwrite(b, 1, nb, f) != nb || fclose(f) != 0) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
        exit(1);
    }
}

static unsigned char buf[1 << 16], buf2[1 << 16];
static char path[8192];

static void checkpoints(const char *out) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    const int64_t wdims[] = {2, 3}, bdims[] = {3};
    const float w[] = {1, -2, 3.5f, 0, 1e-3f, -7};
    const int64_t bias[] = {1, -1, 1LL << 40};
    kiln_tensor *ts[] = {kiln_from_data(ctx, KILN_F32, 2, wdims, w),
                         kiln_from_data(ctx, KILN_I64, 1, bdims, bias),
                         kiln_full(ctx, KILN_BF16, 0, NULL, 0.5)};
    const char *const names[] = {"weight", "bias", "scale"};
    for (int n = 1; n <= 3; n++) {
        snprintf(path, sizeof path, "%s/checkpoint/kiln_save_%d.safetensors", out, n);
        if (kiln_save(path, n, names, ts) != KILN_OK) {
            fprintf(stderr, "make_seeds: kiln_save: %s\n", kiln_ctx_last_error(ctx));
            exit(1);
        }
    }
    kiln_ctx_free(ctx);
}

static void cache_entries(const char *out) {
    char msg[256] = "", hex[33], entry[8192];
    const char *dir = fuzz_tmpdir("seeds");
    cache *c = cache_open(dir, 0, msg, sizeof msg);
    if (!c) {
        fprintf(stderr, "make_seeds: cache_open: %s\n", msg);
        exit(1);
    }
    cache_key_hex(FUZZ_CACHE_KEY, hex);
    const unsigned char even = 0, odd = 1;
    static const char payload[] = "a serialized plan, say";
    const size_t sizes[] = {0, sizeof payload - 1};
    for (int i = 0; i < 2; i++) {
        if (cache_disk_put(c, FUZZ_CACHE_KEY, FUZZ_BLOB_KIND, payload, sizes[i]) != 0)
            exit(1);
        snprintf(entry, sizeof entry, "%s/%s." FUZZ_BLOB_KIND, cache_dir(c), hex);
        size_t n = slurp(entry, buf, sizeof buf);
        unlink(entry);
        snprintf(path, sizeof path, "%s/cache_entry/blob_%zu", out, sizes[i]);
        spill(path, &even, 1, buf, n);
    }
    snprintf(path, sizeof path, "%s/lib.so", dir);
    spill(path, (const unsigned char *)"\177ELF not really", 16, NULL, 0);
    if (cache_disk_put_file(c, FUZZ_CACHE_KEY, FUZZ_FILE_KIND, path) != 0)
        exit(1);
    unlink(path);
    snprintf(entry, sizeof entry, "%s/%s." FUZZ_FILE_KIND ".meta", cache_dir(c), hex);
    size_t m = slurp(entry, buf, sizeof buf);
    unlink(entry);
    snprintf(entry, sizeof entry, "%s/%s." FUZZ_FILE_KIND, cache_dir(c), hex);
    size_t n = slurp(entry, buf2, sizeof buf2);
    unlink(entry);
    memmove(buf + m, buf2, n);
    snprintf(path, sizeof path, "%s/cache_entry/file", out);
    spill(path, &odd, 1, buf, m + n);
    cache_close(c);
    rmdir(dir);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
        return 2;
    }
    checkpoints(argv[1]);
    cache_entries(argv[1]);
    return 0;
}
