/* fashion_mnist.c — trains a classifier of Fashion-MNIST with kiln, as a
 * user's program would: an MLP or a small CNN, AdamW, cross-entropy, a
 * cosine learning-rate schedule, then the test accuracy.
 *
 *   fashion_mnist mlp|cnn [--epochs N] [--batch B] [--limit N] [--lr X] [--data DIR]
 *                         [--dist] [--print-loss]
 *
 * With --dist, under `mpirun -np N fashion_mnist mlp --dist`, it trains data
 * parallel: each of the N ranks computes the loss of its shard (a contiguous
 * B/N of every global batch of B), kiln_dist_average_gradients averages the
 * gradients over the ranks, and every rank takes the same optimiser step: the
 * run follows the single-process run with the same global batch, to float
 * rounding. The loss printed is the global batch's (all-reduced); rank 0
 * prints, and every rank checks its replays.
 *
 * Each training step (forward, backward and the optimiser's update, all
 * lazy) runs at one sync point, the reading of the loss. Every image of every
 * epoch is trained on: an epoch's last batch may be smaller (60000 images
 * in batches of 128 end with one of 96), and the test set is evaluated in
 * batches of 500 and a last smaller one. A batch size is part of a program's
 * shape, so the first step of each size compiles (two programs for training,
 * at most two for evaluation, all in the first epoch) and every later step
 * of a size seen before replays its program from kiln's compiled-program
 * cache. The program checks that, and exits with status 1 if such a step
 * built a program, or if a full run (no --limit, at least the default
 * epochs) misses the accuracy target. With --dist, a last batch that does
 * not split evenly over the ranks leaves out its last (fewer than N)
 * images. */
#define _POSIX_C_SOURCE 200809L

#include <kiln.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "idx.h"

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

enum { SIDE = 28, PIXELS = SIDE * SIDE, CLASSES = 10, EVAL_BATCH = 500, MAX_PARAMS = 8 };

/* The training set's pixel mean and standard deviation (of values in [0, 1]). */
static const float PIXEL_MEAN = 0.2860f, PIXEL_STD = 0.3530f;

typedef enum model_kind { MODEL_MLP, MODEL_CNN } model_kind;

/* What each model needs to reach its target: defaults of the command line. */
typedef struct recipe {
    const char *name;
    int epochs, batch;
    double lr, weight_decay, target;
} recipe;

static const recipe RECIPES[] = {
    [MODEL_MLP] = {"mlp", 5, 128, 2e-3, 1e-2, 0.88},
    [MODEL_CNN] = {"cnn", 3, 128, 3e-3, 1e-2, 0.90},
};

typedef struct options {
    model_kind kind;
    int epochs, batch;
    long limit; /* 0: the whole dataset */
    double lr;
    const char *data_dir;
    bool dist;       /* data parallel over the ranks mpirun started */
    bool print_loss; /* every step's loss, for comparing runs */
} options;

typedef struct dataset {
    idx_array images, labels;
    int64_t n;
} dataset;

typedef struct model {
    model_kind kind;
    int n;
    kiln_tensor *p[MAX_PARAMS];
} model;

/* What happened to the compiled-program cache over the steps (or evaluation
 * batches) of a batch size seen before, and the sizes seen (a full batch and
 * a last, smaller one at most). */
typedef struct replay {
    int64_t steps, built, hits;
    int64_t sizes[2];
    int nsizes;
} replay;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(void) {
    fprintf(stderr,
            "usage: fashion_mnist mlp|cnn [--epochs N] [--batch B] [--limit N] [--lr X]\n"
            "                             [--data DIR]\n"
            "  --epochs N  passes over the training set (default: mlp %d, cnn %d)\n"
            "  --batch B   training batch size (default %d)\n"
            "  --limit N   use only the first N training and test images (a quick check)\n"
            "  --lr X      peak learning rate of AdamW (default: mlp %g, cnn %g)\n"
            "  --data DIR  where the four *-ubyte.gz files are (default " DEFAULT_DATA_DIR ")\n"
            "  --dist      data parallel over the ranks of `mpirun -np N` (B/N images each)\n"
            "  --print-loss  print every step's loss\n",
            RECIPES[MODEL_MLP].epochs, RECIPES[MODEL_CNN].epochs, RECIPES[MODEL_MLP].batch,
            RECIPES[MODEL_MLP].lr, RECIPES[MODEL_CNN].lr);
    exit(2);
}

static long parse_long(const char *flag, const char *s, long lo) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || *end || end == s || v < lo) {
        fprintf(stderr, "fashion_mnist: %s wants an integer >= %ld, got %s\n", flag, lo,
                s ? s : "nothing");
        usage();
    }
    return v;
}

static options parse_args(int argc, char **argv) {
    if (argc < 2)
        usage();
    options o = {.data_dir = DEFAULT_DATA_DIR};
    if (strcmp(argv[1], "mlp") == 0)
        o.kind = MODEL_MLP;
    else if (strcmp(argv[1], "cnn") == 0)
        o.kind = MODEL_CNN;
    else
        usage();
    o.epochs = RECIPES[o.kind].epochs;
    o.batch = RECIPES[o.kind].batch;
    o.lr = RECIPES[o.kind].lr;
    for (int i = 2; i < argc; i++) {
        const char *flag = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(flag, "--epochs") == 0)
            o.epochs = (int)parse_long(flag, val, 1);
        else if (strcmp(flag, "--batch") == 0)
            o.batch = (int)parse_long(flag, val, 1);
        else if (strcmp(flag, "--limit") == 0)
            o.limit = parse_long(flag, val, 1);
        else if (strcmp(flag, "--data") == 0 && val)
            o.data_dir = val;
        else if (strcmp(flag, "--dist") == 0) {
            o.dist = true;
            continue;
        } else if (strcmp(flag, "--print-loss") == 0) {
            o.print_loss = true;
            continue;
        }
        else if (strcmp(flag, "--lr") == 0 && val) {
            char *end;
            o.lr = strtod(val, &end);
            if (*end || end == val || !(o.lr > 0) || !isfinite(o.lr)) {
                fprintf(stderr, "fashion_mnist: --lr wants a positive number, got %s\n", val);
                usage();
            }
        } else
            usage();
        i++;
    }
    return o;
}

/* ---- data ------------------------------------------------------------------ */

static void dataset_free(dataset *d) {
    idx_free(&d->images);
    idx_free(&d->labels);
}

static int load_file(const char *dir, const char *name, int ndim, idx_array *out) {
    char path[4096], err[4352];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (idx_load(path, ndim, out, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "fashion_mnist: %s\n", err);
    return -1;
}

/* Loads images and labels of one split and checks that they fit together. */
static int dataset_load(const char *dir, const char *split, dataset *d) {
    char images[64], labels[64];
    snprintf(images, sizeof images, "%s-images-idx3-ubyte.gz", split);
    snprintf(labels, sizeof labels, "%s-labels-idx1-ubyte.gz", split);
    memset(d, 0, sizeof *d);
    if (load_file(dir, images, 3, &d->images) != 0 || load_file(dir, labels, 1, &d->labels) != 0)
        goto fail;
    if (d->images.dims[1] != SIDE || d->images.dims[2] != SIDE) {
        fprintf(stderr, "fashion_mnist: %s/%s: images of %lldx%lld pixels, expected %dx%d\n", dir,
                images, (long long)d->images.dims[1], (long long)d->images.dims[2], SIDE, SIDE);
        goto fail;
    }
    if (d->images.dims[0] != d->labels.dims[0]) {
        fprintf(stderr, "fashion_mnist: %s: %lld images but %lld labels\n", dir,
                (long long)d->images.dims[0], (long long)d->labels.dims[0]);
        goto fail;
    }
    for (size_t i = 0; i < d->labels.count; i++)
        if (d->labels.data[i] >= CLASSES) {
            fprintf(stderr, "fashion_mnist: %s/%s: label %d of image %zu is not a class 0-%d\n",
                    dir, labels, d->labels.data[i], i, CLASSES - 1);
            goto fail;
        }
    d->n = d->images.dims[0];
    return 0;
fail:
    fprintf(stderr,
            "fashion_mnist: the Fashion-MNIST dataset comes with Debian's package "
            "dataset-fashion-mnist\n"
            "fashion_mnist: (apt-get install dataset-fashion-mnist), or pass --data DIR\n");
    dataset_free(d);
    return -1;
}

/* Normalised pixels and labels of the images idx[0..n) into a batch. */
static void fill_batch(const dataset *d, const int64_t *idx, int n, float *x, int32_t *y) {
    for (int i = 0; i < n; i++) {
        const uint8_t *img = d->images.data + idx[i] * PIXELS;
        for (int j = 0; j < PIXELS; j++)
            x[(size_t)i * PIXELS + j] = ((float)img[j] / 255.0f - PIXEL_MEAN) / PIXEL_STD;
        y[i] = d->labels.data[idx[i]];
    }
}

/* ---- the model ------------------------------------------------------------- */

static void die_kiln(kiln_ctx *ctx, const char *what) {
    fprintf(stderr, "fashion_mnist: %s failed: %s\n", what, kiln_ctx_last_error(ctx));
    exit(1);
}

/* A parameter as PyTorch initialises nn.Linear and nn.Conv2d (Kaiming-uniform
 * with a = sqrt(5), which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), for biases
 * too), marked for gradients. */
static void add_param(kiln_ctx *ctx, model *m, int ndim, const int64_t *dims, int64_t fan_in) {
    double bound = 1 / sqrt((double)fan_in);
    kiln_tensor *u = kiln_rand(ctx, KILN_F32, ndim, dims, 1000 + (uint64_t)m->n);
    kiln_tensor *p = kiln_add_scalar(kiln_mul_scalar(u, 2 * bound), -bound);
    if (kiln_requires_grad(p, true) != KILN_OK)
        die_kiln(ctx, "initialising the parameters");
    kiln_release(u);
    m->p[m->n++] = p;
}

#define DIMS(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* MLP: 784 -> 256 -> 128 -> 10 with ReLU. CNN: conv 3x3 (1 -> C1) -> ReLU ->
 * max-pool 2 -> conv 3x3 (C1 -> C2) -> ReLU -> max-pool 2 -> linear (C2*7*7
 * -> 10). */
enum { H1 = 256, H2 = 128, C1 = 16, C2 = 32 };

static model model_new(kiln_ctx *ctx, model_kind kind) {
    model m = {.kind = kind};
    if (kind == MODEL_MLP) {
        add_param(ctx, &m, DIMS(H1, PIXELS), PIXELS);
        add_param(ctx, &m, DIMS(H1), PIXELS);
        add_param(ctx, &m, DIMS(H2, H1), H1);
        add_param(ctx, &m, DIMS(H2), H1);
        add_param(ctx, &m, DIMS(CLASSES, H2), H2);
        add_param(ctx, &m, DIMS(CLASSES), H2);
    } else {
        add_param(ctx, &m, DIMS(C1, 1, 3, 3), 9);
        add_param(ctx, &m, DIMS(C1), 9);
        add_param(ctx, &m, DIMS(C2, C1, 3, 3), C1 * 9);
        add_param(ctx, &m, DIMS(C2), C1 * 9);
        add_param(ctx, &m, DIMS(CLASSES, C2 * 7 * 7), C2 * 7 * 7);
        add_param(ctx, &m, DIMS(CLASSES), C2 * 7 * 7);
    }
    return m;
}

static kiln_tensor *conv_block(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b) {
    kiln_tensor *c = kiln_relu(kiln_conv2d(x, w, b, 1, 1, 1, 1, 1, 1, 1));
    return kiln_max_pool2d(c, 2, 2, 2, 2, 0, 0);
}

/* Logits [B, 10] of a batch x [B, 784]. */
static kiln_tensor *forward(const model *m, kiln_tensor *x) {
    const int64_t batch = kiln_shape(x)[0];
    kiln_tensor *const *p = m->p;
    if (m->kind == MODEL_MLP) {
        kiln_tensor *h = kiln_relu(kiln_linear(x, p[0], p[1]));
        h = kiln_relu(kiln_linear(h, p[2], p[3]));
        return kiln_linear(h, p[4], p[5]);
    }
    kiln_tensor *h = kiln_reshape(x, DIMS(batch, 1, SIDE, SIDE));
    h = conv_block(h, p[0], p[1]);
    h = conv_block(h, p[2], p[3]);
    return kiln_linear(kiln_reshape(h, DIMS(batch, -1)), p[4], p[5]);
}

/* ---- training and evaluation ----------------------------------------------- */

/* Counts what one sync of a batch of `size` did to the cache into r, unless
 * it was the first of its size (which compiles). */
static void note_replay(replay *r, int64_t size, kiln_stats before, kiln_stats after) {
    for (int i = 0; i < r->nsizes; i++)
        if (r->sizes[i] == size) {
            r->steps++;
            r->built += (after.compiles - before.compiles) + (after.disk_hits - before.disk_hits);
            r->hits += after.graph_hits - before.graph_hits;
            return;
        }
    if (r->nsizes < 2)
        r->sizes[r->nsizes++] = size;
}

/* The fraction of the first n test images the model classifies right, in
 * batches of eval_batch (the last one smaller) under no-grad. */
static double evaluate(kiln_ctx *ctx, const model *m, const dataset *test, int64_t n,
                       int eval_batch, replay *r) {
    float *x = malloc((size_t)eval_batch * PIXELS * sizeof *x);
    int32_t *y = malloc((size_t)eval_batch * sizeof *y);
    int64_t *idx = malloc((size_t)eval_batch * sizeof *idx);
    int64_t *pred = malloc((size_t)eval_batch * sizeof *pred);
    if (!x || !y || !idx || !pred) {
        fprintf(stderr, "fashion_mnist: out of memory\n");
        exit(1);
    }
    int64_t right = 0;
    kiln_no_grad_begin(ctx);
    for (int64_t start = 0; start < n; start += eval_batch) {
        const int bs = n - start < eval_batch ? (int)(n - start) : eval_batch;
        for (int i = 0; i < bs; i++)
            idx[i] = start + i;
        fill_batch(test, idx, bs, x, y);
        kiln_scope_begin(ctx);
        kiln_stats before = kiln_ctx_stats(ctx);
        kiln_tensor *xt = kiln_from_data(ctx, KILN_F32, DIMS(bs, PIXELS), x);
        kiln_tensor *am = kiln_argmax(forward(m, xt), 1, (int[]){1}, false);
        kiln_status st = kiln_to_host(am, pred, (size_t)bs * sizeof *pred);
        if (st != KILN_OK) {
            fprintf(stderr, "fashion_mnist: evaluation failed: %s\n", kiln_error_message(am));
            exit(1);
        }
        note_replay(r, bs, before, kiln_ctx_stats(ctx));
        kiln_scope_end(ctx);
        for (int i = 0; i < bs; i++)
            right += pred[i] == y[i];
    }
    kiln_no_grad_end(ctx);
    free(x);
    free(y);
    free(idx);
    free(pred);
    return (double)right / (double)n;
}

/* The progress bar: carriage-return updated, on stderr, when stderr is a
 * terminal; into a file or a pipe (a CI log) a plain line at most every 10
 * seconds instead, so that logs stay short. */
static void progress(int epoch, int epochs, int64_t done, int64_t total, double loss,
                     double rate) {
    enum { WIDTH = 30 };
    static int tty = -1;
    static double last_line;
    if (tty < 0)
        tty = isatty(fileno(stderr));
    if (!tty) {
        double t = now();
        if (t - last_line >= 10.0 && done < total) {
            fprintf(stderr, "epoch %d/%d: %lld/%lld images, loss %.4f, %.0f img/s\n", epoch, epochs,
                    (long long)done, (long long)total, loss, rate);
            last_line = t;
        }
        return;
    }
    int fill = (int)(WIDTH * done / total);
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++)
        bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[WIDTH] = '\0';
    fprintf(stderr, "\repoch %d/%d [%s] %6lld/%lld  loss %.4f  %6.0f img/s ", epoch, epochs, bar,
            (long long)done, (long long)total, loss, rate);
    fflush(stderr);
}

static void progress_clear(void) {
    if (isatty(fileno(stderr)))
        fprintf(stderr, "\r%90s\r", "");
}

int main(int argc, char **argv) {
    options opt = parse_args(argc, argv);
    const recipe *rc = &RECIPES[opt.kind];
    setvbuf(stdout, NULL, _IOLBF, 0);

    dataset train, test;
    if (dataset_load(opt.data_dir, "train", &train) != 0)
        return 1;
    if (dataset_load(opt.data_dir, "t10k", &test) != 0) {
        dataset_free(&train);
        return 1;
    }
    int64_t ntrain = opt.limit && opt.limit < train.n ? opt.limit : train.n;
    int64_t ntest = opt.limit && opt.limit < test.n ? opt.limit : test.n;
    int eval_batch = ntest < EVAL_BATCH ? (int)ntest : EVAL_BATCH;

    kiln_ctx *ctx = kiln_ctx_new(KILN_DEVICE_DEFAULT);
    if (!ctx) {
        fprintf(stderr, "fashion_mnist: no kiln context: %s\n", kiln_last_ctx_error());
        return 1;
    }
    /* Data parallel: this rank's shard is images [rank * local, (rank + 1)
     * * local) of every global batch. Every rank initialises the same
     * parameters (fixed seeds), and takes the same steps. */
    int rank = 0, ranks = 1;
    if (opt.dist) {
        if (kiln_dist_init(ctx, KILN_DIST_MPI) != KILN_OK)
            die_kiln(ctx, "joining the job (kiln_dist_init)");
        rank = kiln_dist_rank(ctx);
        ranks = kiln_dist_world_size(ctx);
        if (opt.batch % ranks) {
            fprintf(stderr, "fashion_mnist: a batch of %d does not split over %d ranks\n",
                    opt.batch, ranks);
            return 2;
        }
        if (rank != 0 && !freopen("/dev/null", "w", stdout))
            return 1;
    }
    /* Every batch but an epoch's last is full; the last is what is left,
     * cut to a multiple of the ranks. */
    const int64_t last_batch = (ntrain - (ntrain - 1) / opt.batch * opt.batch) / ranks * ranks;
    const int64_t steps_per_epoch = (ntrain - 1) / opt.batch + (last_batch > 0);
    const int64_t images_per_epoch = (ntrain - 1) / opt.batch * opt.batch + last_batch;
    if (ntrain < ranks) {
        fprintf(stderr, "fashion_mnist: %lld training images make no batch for %d ranks\n",
                (long long)ntrain, ranks);
        return 2;
    }
    model m = model_new(ctx, opt.kind);
    kiln_optim *o;
    if (kiln_adamw_new(ctx, m.n, m.p, opt.lr, 0.9, 0.999, 1e-8, rc->weight_decay, &o) != KILN_OK)
        die_kiln(ctx, "making the optimiser");

    printf("%s: %lld training images in %lld batches of %d (the last of %lld), %lld test images "
           "in batches of %d, %d epochs, AdamW lr %g (cosine)\n",
           rc->name, (long long)images_per_epoch, (long long)steps_per_epoch, opt.batch,
           (long long)(last_batch ? last_batch : opt.batch), (long long)ntest, eval_batch,
           opt.epochs, opt.lr);
    if (opt.dist)
        printf("%s: data parallel over %d ranks, 1/%d of each batch per rank\n", rc->name,
               ranks, ranks);

    float *x = malloc((size_t)opt.batch * PIXELS * sizeof *x);
    int32_t *y = malloc((size_t)opt.batch * sizeof *y);
    int64_t *order = malloc((size_t)ntrain * sizeof *order);
    if (!x || !y || !order) {
        fprintf(stderr, "fashion_mnist: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < ntrain; i++)
        order[i] = i;

    const int64_t total_steps = steps_per_epoch * opt.epochs;
    replay train_replay = {0}, eval_replay = {0};
    int64_t step = 0, kernels_per_step = -1;
    double first_loss = NAN, last_losses = 0, train_seconds = 0, accuracy = 0;
    enum { TAIL = 10 };
    int64_t tail_n = 0;
    for (int epoch = 1; epoch <= opt.epochs; epoch++) {
        idx_shuffle(order, ntrain, (uint64_t)epoch);
        double t0 = now(), shown = 0, loss_sum = 0;
        for (int64_t s = 0; s < steps_per_epoch; s++, step++) {
            const int64_t batch = s + 1 < steps_per_epoch || !last_batch ? opt.batch : last_batch;
            const int local = (int)(batch / ranks);
            fill_batch(&train, order + s * opt.batch + rank * local, local, x, y);
            if (kiln_optim_set_lr(o, kiln_lr_cosine(opt.lr, step, total_steps, 0)) != KILN_OK)
                die_kiln(ctx, "setting the learning rate");
            kiln_scope_begin(ctx);
            kiln_stats before = kiln_ctx_stats(ctx);
            kiln_tensor *xt = kiln_from_data(ctx, KILN_F32, DIMS(local, PIXELS), x);
            kiln_tensor *yt = kiln_from_data(ctx, KILN_I32, DIMS(local), y);
            kiln_tensor *loss = kiln_cross_entropy(forward(&m, xt), yt, KILN_REDUCTION_MEAN);
            if (kiln_backward(loss) != KILN_OK)
                die_kiln(ctx, "the backward pass");
            /* The shards are equal, so the global batch's mean loss is the
             * mean of the ranks' and its gradient the mean of theirs. */
            if (opt.dist) {
                if (kiln_dist_average_gradients(m.n, m.p) != KILN_OK)
                    die_kiln(ctx, "averaging the gradients");
                loss = kiln_all_reduce(loss, KILN_REDUCE_MEAN);
            }
            if (kiln_optim_step(o) != KILN_OK)
                die_kiln(ctx, "the optimiser step");
            kiln_optim_zero_grad(o);
            double l;
            if (kiln_item(loss, &l) != KILN_OK) { /* the step's one sync point */
                fprintf(stderr, "fashion_mnist: training step %lld failed: %s\n",
                        (long long)step + 1, kiln_error_message(loss));
                return 1;
            }
            kiln_stats after = kiln_ctx_stats(ctx);
            kiln_scope_end(ctx);
            if (opt.print_loss)
                printf("step %lld loss %.9g\n", (long long)step + 1, l);

            if (step == 0)
                first_loss = l;
            note_replay(&train_replay, batch, before, after);
            if (step == 1)
                kernels_per_step = after.kernels - before.kernels;
            if (step >= total_steps - TAIL) {
                last_losses += l;
                tail_n++;
            }
            loss_sum += l;
            double t = now();
            if (t - shown >= 0.2 || s + 1 == steps_per_epoch) {
                int64_t done = s * opt.batch + batch;
                progress(epoch, opt.epochs, done, images_per_epoch, loss_sum / (double)(s + 1),
                         (double)done / (t - t0));
                shown = t;
            }
        }
        double seconds = now() - t0;
        train_seconds += seconds;
        double t1 = now();
        accuracy = evaluate(ctx, &m, &test, ntest, eval_batch, &eval_replay);
        progress_clear();
        printf("epoch %d/%d: %.1f s (%.0f img/s), train loss %.4f, test accuracy %.2f%% "
               "(evaluated in %.1f s)\n",
               epoch, opt.epochs, seconds, (double)images_per_epoch / seconds,
               loss_sum / (double)steps_per_epoch, 100 * accuracy, now() - t1);
    }

    bool full = opt.limit == 0 && opt.epochs >= rc->epochs;
    bool reached = accuracy >= rc->target;
    printf("%s: test accuracy %.2f%% (target %.0f%%: %s)\n", rc->name, 100 * accuracy,
           100 * rc->target,
           reached ? "reached" : full ? "MISSED" : "not checked: not a full run");
    printf("%s: %.2f s per epoch of training, %lld kernels per training step\n", rc->name,
           train_seconds / opt.epochs, (long long)kernels_per_step);
    printf("%s: loss %.4f at step 1, %.4f over the last %lld steps\n", rc->name, first_loss,
           last_losses / (double)tail_n, (long long)tail_n);
    printf("%s: %d training and %d evaluation batch sizes, each compiled at its first step; "
           "steps of a size seen before: %lld programs built, %lld graph-cache hits in %lld "
           "training steps; %lld built, %lld hits in %lld evaluation batches\n",
           rc->name, train_replay.nsizes, eval_replay.nsizes, (long long)train_replay.built,
           (long long)train_replay.hits, (long long)train_replay.steps,
           (long long)eval_replay.built, (long long)eval_replay.hits,
           (long long)eval_replay.steps);

    int status = 0;
    if (train_replay.built || eval_replay.built) {
        fprintf(stderr, "fashion_mnist: programs were built for a batch size seen before: every "
                        "such step should replay the first one's\n");
        status = 1;
    }
    if (full && !reached) {
        fprintf(stderr, "fashion_mnist: the test accuracy %.2f%% missed the target %.0f%%\n",
                100 * accuracy, 100 * rc->target);
        status = 1;
    }
    free(x);
    free(y);
    free(order);
    kiln_optim_free(o);
    kiln_ctx_free(ctx);
    dataset_free(&train);
    dataset_free(&test);
    return status;
}
