/* cnn_epoch.c — an epoch of examples/fashion_mnist.c's CNN trained with
 * kiln, timed, for the goal "Fashion-MNIST CNN epoch >= 1.5x PyTorch eager";
 * bench/peers/cnn_torch.py is the same epoch in PyTorch eager and
 * bench/cnn_epoch.py runs the two alternately.
 *
 * The model, its initialisation and its training are the example's: conv 3x3
 * (1 -> 16, pad 1) -> ReLU -> max-pool 2 -> conv 3x3 (16 -> 32, pad 1) ->
 * ReLU -> max-pool 2 -> linear (32*7*7 -> 10), parameters drawn
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as PyTorch draws them, mean
 * cross-entropy, AdamW (lr 3e-3, betas 0.9 and 0.999, eps 1e-8, weight decay
 * 1e-2) under a cosine schedule over the epoch, batches of 128 normalised
 * images from a fixed-seed shuffle of the training set. Each step is built
 * lazily and runs at one sync point, the reading of its loss.
 *
 * An epoch here is its 468 full batches (59904 of the 60000 images): the
 * last, smaller batch would be a second program shape, compiled mid-epoch,
 * and a peer's epoch leaves it out the same way. Step 1 compiles (or loads
 * from the disk cache) and is not timed; steps 2..N are, and their mean times
 * the epoch's N steps is the warm epoch. The program checks that no step
 * after the first built a program (every one must replay the first's).
 *
 * Usage: cnn_epoch [--batches N] [--data DIR] [--profile]
 *   --batches N  train on only the first N batches (default: the epoch's 468)
 *   --profile    also print the kernels of the last PROFILED warm steps, with
 *                their times, on stderr (kiln_profile_print): where a step's
 *                time goes. The profiler's own cost is then inside the timed
 *                steps, so bench/cnn_epoch.py never passes it.
 * One line on stdout:
 *   cnn_epoch kiln: 468 batches of 128, first step 0.06 s, 467 warm steps
 *   12.58 s: 26.94 ms/step, 4751 img/s, warm epoch 12.61 s, 37 kernels per
 *   step, loss 2.360 -> 0.320
 * (the first step on a warm disk cache; into an empty one it compiles, 0.9 s). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/kiln.h"
#include "bench/bench.h"
#include "examples/idx.h"

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

enum { SIDE = 28, PIXELS = SIDE * SIDE, CLASSES = 10, BATCH = 128, C1 = 16, C2 = 32, NPARAMS = 6 };

/* The example's recipe for the CNN (examples/fashion_mnist.c, RECIPES). */
static const double LR = 3e-3, WEIGHT_DECAY = 1e-2;
/* The training set's pixel mean and standard deviation (of values in [0, 1]). */
static const float PIXEL_MEAN = 0.2860f, PIXEL_STD = 0.3530f;
/* The loss reported at the end is the mean over this many last steps: one
 * step's loss is too noisy to compare with the peer's. */
enum { TAIL = 20 };
/* Warm steps profiled with --profile: enough for stable per-kernel means. */
enum { PROFILED = 20 };

static void die(kiln_ctx *ctx, const char *what) {
    fprintf(stderr, "cnn_epoch: %s: %s\n", what,
            ctx ? kiln_ctx_last_error(ctx) : kiln_last_ctx_error());
    exit(1);
}

#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* A parameter as PyTorch initialises nn.Conv2d and nn.Linear, weight and
 * bias alike: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), marked for gradients.
 * Realized here so that the first step's time is the step's own. */
static kiln_tensor *param(kiln_ctx *ctx, int ndim, const int64_t *dims, int64_t fan_in,
                          uint64_t seed) {
    double bound = 1 / sqrt((double)fan_in);
    kiln_tensor *u = kiln_rand(ctx, KILN_F32, ndim, dims, seed);
    kiln_tensor *p = kiln_add_scalar(kiln_mul_scalar(u, 2 * bound), -bound);
    if (kiln_realize(p) != KILN_OK || kiln_requires_grad(p, true) != KILN_OK)
        die(ctx, "initialising the parameters");
    kiln_release(u);
    return p;
}

static kiln_tensor *conv_block(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b) {
    kiln_tensor *c = kiln_relu(kiln_conv2d(x, w, b, 1, 1, 1, 1, 1, 1, 1));
    return kiln_max_pool2d(c, 2, 2, 2, 2, 0, 0);
}

/* Logits [B, 10] of a batch x [B, 784]. */
static kiln_tensor *forward(kiln_tensor *const *p, kiln_tensor *x) {
    const int64_t batch = kiln_shape(x)[0];
    kiln_tensor *h = kiln_reshape(x, DIMS(batch, 1, SIDE, SIDE));
    h = conv_block(h, p[0], p[1]);
    h = conv_block(h, p[2], p[3]);
    return kiln_linear(kiln_reshape(h, DIMS(batch, -1)), p[4], p[5]);
}

static int load(const char *dir, const char *name, int ndim, idx_array *out) {
    char path[4096], err[4352];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (idx_load(path, ndim, out, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "cnn_epoch: %s (Debian's package dataset-fashion-mnist has the data)\n", err);
    return -1;
}

int main(int argc, char **argv) {
    const char *data_dir = DEFAULT_DATA_DIR;
    long batches = 0; /* 0: every full batch of the epoch */
    bool profile = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--data") == 0 && i + 1 < argc)
            data_dir = argv[++i];
        else if (strcmp(argv[i], "--profile") == 0)
            profile = true;
        else if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            batches = strtol(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || batches < 2) {
                fprintf(stderr, "cnn_epoch: --batches wants an integer >= 2 (one step is "
                                "untimed), got %s\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: cnn_epoch [--batches N] [--data DIR] [--profile]\n");
            return 2;
        }
    }

    idx_array images = {0}, labels = {0};
    if (load(data_dir, "train-images-idx3-ubyte.gz", 3, &images) != 0 ||
        load(data_dir, "train-labels-idx1-ubyte.gz", 1, &labels) != 0)
        return 1;
    const int64_t n = images.dims[0];
    if (images.dims[1] != SIDE || images.dims[2] != SIDE || labels.dims[0] != n) {
        fprintf(stderr, "cnn_epoch: %s: expected as many labels as 28x28 images\n", data_dir);
        return 1;
    }
    for (size_t i = 0; i < labels.count; i++)
        if (labels.data[i] >= CLASSES) {
            fprintf(stderr, "cnn_epoch: label %d of image %zu is not a class\n", labels.data[i], i);
            return 1;
        }
    const int64_t epoch_steps = n / BATCH;
    if (batches > epoch_steps) {
        fprintf(stderr, "cnn_epoch: --batches %ld: the epoch has %lld full batches\n", batches,
                (long long)epoch_steps);
        return 2;
    }
    const int64_t steps = batches ? batches : epoch_steps;

    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    if (!ctx)
        die(NULL, "kiln_ctx_new");
    /* The example's parameters and seeds (1000 + the parameter's index). */
    kiln_tensor *p[NPARAMS] = {
        param(ctx, DIMS(C1, 1, 3, 3), 9, 1000),
        param(ctx, DIMS(C1), 9, 1001),
        param(ctx, DIMS(C2, C1, 3, 3), C1 * 9, 1002),
        param(ctx, DIMS(C2), C1 * 9, 1003),
        param(ctx, DIMS(CLASSES, C2 * 7 * 7), C2 * 7 * 7, 1004),
        param(ctx, DIMS(CLASSES), C2 * 7 * 7, 1005),
    };
    kiln_optim *o;
    if (kiln_adamw_new(ctx, NPARAMS, p, LR, 0.9, 0.999, 1e-8, WEIGHT_DECAY, &o) != KILN_OK)
        die(ctx, "kiln_adamw_new");

    float *x = malloc((size_t)BATCH * PIXELS * sizeof *x);
    int32_t *y = malloc((size_t)BATCH * sizeof *y);
    int64_t *order = malloc((size_t)n * sizeof *order);
    if (!x || !y || !order) {
        fprintf(stderr, "cnn_epoch: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    idx_shuffle(order, n, 1); /* the example's first epoch */

    double first_step = 0, t_warm = 0, first_loss = NAN, tail = 0;
    int64_t built = 0, kernels = 0;
    for (int64_t s = 0; s < steps; s++) {
        if (s == 1)
            t_warm = bench_now();
        if (profile && s == (steps - PROFILED > 1 ? steps - PROFILED : 1) &&
            kiln_profile_begin(ctx) != KILN_OK)
            die(ctx, "kiln_profile_begin");
        double t0 = bench_now();
        /* Gathering and normalising the batch is part of the step, as it is
         * of the peer's: a real epoch pays for it. */
        for (int i = 0; i < BATCH; i++) {
            const int64_t img = order[s * BATCH + i];
            const uint8_t *px = images.data + img * PIXELS;
            for (int j = 0; j < PIXELS; j++)
                x[(size_t)i * PIXELS + j] = ((float)px[j] / 255.0f - PIXEL_MEAN) / PIXEL_STD;
            y[i] = labels.data[img];
        }
        if (kiln_optim_set_lr(o, kiln_lr_cosine(LR, s, steps, 0)) != KILN_OK)
            die(ctx, "kiln_optim_set_lr");
        kiln_scope_begin(ctx);
        kiln_stats before = kiln_ctx_stats(ctx);
        kiln_tensor *xt = kiln_from_data(ctx, KILN_F32, DIMS(BATCH, PIXELS), x);
        kiln_tensor *yt = kiln_from_data(ctx, KILN_I32, DIMS(BATCH), y);
        kiln_tensor *loss = kiln_cross_entropy(forward(p, xt), yt, KILN_REDUCTION_MEAN);
        double l;
        const char *what;
        if (bench_train_step(loss, o, &l, &what) != KILN_OK) { /* the step's one sync point */
            fprintf(stderr, "cnn_epoch: step %lld: %s failed: %s\n", (long long)s + 1, what,
                    kiln_ctx_last_error(ctx));
            return 1;
        }
        kiln_stats after = kiln_ctx_stats(ctx);
        kiln_scope_end(ctx);
        if (s == 0) {
            first_step = bench_now() - t0;
            first_loss = l;
        } else {
            built += (after.compiles - before.compiles) + (after.disk_hits - before.disk_hits);
            kernels = after.kernels - before.kernels;
        }
        if (s >= steps - TAIL)
            tail += l;
    }
    const double warm = bench_now() - t_warm;
    if (profile && (kiln_profile_end(ctx) != KILN_OK || kiln_profile_print(ctx, stderr) != KILN_OK))
        die(ctx, "the profile");
    const int64_t warm_steps = steps - 1;
    const int64_t tail_n = steps < TAIL ? steps : TAIL;

    printf("cnn_epoch kiln: %lld batches of %d, first step %.2f s, %lld warm steps %.2f s: "
           "%.2f ms/step, %.0f img/s, warm epoch %.2f s, %lld kernels per step, "
           "loss %.3f -> %.3f\n",
           (long long)steps, BATCH, first_step, (long long)warm_steps, warm,
           1e3 * warm / (double)warm_steps, (double)(warm_steps * BATCH) / warm,
           warm / (double)warm_steps * (double)steps, (long long)kernels, first_loss,
           tail / (double)tail_n);
    int status = 0;
    if (built) {
        fprintf(stderr, "cnn_epoch: %lld programs were built after the first step: every warm "
                        "step should replay the first one's\n", (long long)built);
        status = 1;
    }
    free(x);
    free(y);
    free(order);
    kiln_optim_free(o);
    for (int i = 0; i < NPARAMS; i++)
        kiln_release(p[i]);
    kiln_ctx_free(ctx);
    idx_free(&images);
    idx_free(&labels);
    return status;
}
