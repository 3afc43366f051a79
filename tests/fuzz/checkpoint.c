/* checkpoint.c — fuzzes the safetensors reader (api/checkpoint.c): each input
 * is written to a file and given to kiln_load, then to kiln_load_into with
 * the names and shapes of the seeds' tensors. Whatever the bytes, both must
 * return a status (with a message when it is an error), and what kiln_load
 * returns must be readable whole. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "tests/fuzz/fuzz.h"

static char dir[4096], path[4200];

static void cleanup(void) {
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "%s", fuzz_tmpdir("checkpoint"));
    snprintf(path, sizeof path, "%s/input.safetensors", dir);
    atexit(cleanup);
    return 0;
}

static void write_input(const uint8_t *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size) || close(fd) != 0) {
        perror("checkpoint: writing the input");
        abort();
    }
}

/* An error status must come with a message saying why. */
static void check_status(kiln_ctx *ctx, kiln_status st, const char *op) {
    if (st > 0 || st < KILN_ERR_DIST) {
        fprintf(stderr, "%s returned %d, not a kiln_status\n", op, (int)st);
        abort();
    }
    if (st != KILN_OK && !kiln_ctx_last_error(ctx)[0]) {
        fprintf(stderr, "%s failed (%s) without a message\n", op, kiln_status_string(st));
        abort();
    }
}

static void load(kiln_ctx *ctx) {
    int n = -1;
    char **names = NULL;
    kiln_tensor **ts = NULL;
    kiln_status st = kiln_load(ctx, path, &n, &names, &ts);
    check_status(ctx, st, "kiln_load");
    if (st != KILN_OK) {
        if (n != 0 || names || ts)
            abort();
        return;
    }
    for (int i = 0; i < n; i++) {
        if (!names[i] || !ts[i] || kiln_error(ts[i]) != KILN_OK)
            abort();
        size_t nbytes = (size_t)kiln_numel(ts[i]) * kiln_dtype_size(kiln_dtype_of(ts[i]));
        void *buf = malloc(nbytes ? nbytes : 1);
        if (!buf)
            abort();
        if (kiln_to_host(ts[i], buf, nbytes) != KILN_OK) {
            fprintf(stderr, "tensor \"%s\" loaded but cannot be read: %s\n", names[i],
                    kiln_error_message(ts[i]));
            abort();
        }
        free(buf);
        kiln_release(ts[i]);
    }
    free(ts);
    kiln_free_names(n, names);
}

/* The tensors of the seeds (tests/fuzz/seeds/make_seeds.c). */
static void load_into(kiln_ctx *ctx) {
    const int64_t wdims[] = {2, 3}, bdims[] = {3};
    kiln_tensor *ts[] = {kiln_zeros(ctx, KILN_F32, 2, wdims), kiln_zeros(ctx, KILN_I64, 1, bdims),
                         kiln_zeros(ctx, KILN_BF16, 0, NULL)};
    const char *const names[] = {"weight", "bias", "scale"};
    kiln_status st = kiln_load_into(path, 3, names, ts);
    check_status(ctx, st, "kiln_load_into");
    float w[6];
    if (st == KILN_OK && kiln_to_host(ts[0], w, sizeof w) != KILN_OK)
        abort();
    for (int i = 0; i < 3; i++)
        kiln_release(ts[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_input(data, size);
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    if (!ctx) {
        fprintf(stderr, "no reference context: %s\n", kiln_last_ctx_error());
        abort();
    }
    load(ctx);
    load_into(ctx);
    kiln_ctx_free(ctx);
    return 0;
}
