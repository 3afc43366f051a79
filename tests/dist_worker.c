/* dist_worker.c — one rank of the distributed tests: tests/dist_test.c starts
 * it with `mpirun -np N dist_worker MODE` and reads what it prints. Every rank
 * checks its own results against values computed in double from what every
 * rank holds (each rank's inputs are a function of its rank that every rank
 * can make), prints "rank R: ok C checks" or the failures, and exits non-zero
 * on any failure.
 *
 * Modes:
 *   collectives  every collective and reduce op, every dtype, contiguous and
 *                strided sources, on the reference evaluator and the CPU,
 *                lazy and eager
 *   grad         gradients through every collective against central finite
 *                differences of the total loss over the ranks
 *   replay       a step with collectives, run again: compiled once, replayed
 *   mismatch     the last rank records a different shape, then a different
 *                dtype: every rank fails with KILN_ERR_DIST naming the ranks
 *   dead         the last rank exits before a collective: the others fail
 *                with KILN_ERR_DIST within KILN_DIST_TIMEOUT, and at once after
 *   errors       argument errors before and after kiln_dist_init */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/kiln.h"

static int rank_, size_, checks_, failures_;

#define CHECK(cond, ...)                                                                         \
    do {                                                                                         \
        checks_++;                                                                               \
        if (!(cond)) {                                                                           \
            if (failures_++ < 12) {                                                              \
                printf("rank %d: FAILED %s:%d: ", rank_, __FILE__, __LINE__);                   \
                printf(__VA_ARGS__);                                                             \
                printf("\n");                                                                    \
            }                                                                                    \
        }                                                                                        \
    } while (0)

static const kiln_dtype dtypes[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16,
                                    KILN_I32, KILN_I64, KILN_U8,  KILN_BOOL};

static bool is_float(kiln_dtype dt) {
    return dt == KILN_F32 || dt == KILN_F64 || dt == KILN_F16 || dt == KILN_BF16;
}

/* Element i of rank r's input, before rounding to dt: u8 values large enough
 * that sums wrap; bool about a third true. */
static double input_value(kiln_dtype dt, int r, int64_t i) {
    switch (dt) {
    case KILN_BOOL: return (double)((r + i) % 3 == 0);
    case KILN_U8: return (double)((r * 97 + i * 13) % 256);
    case KILN_I32:
    case KILN_I64: return (double)((r * 7 + i * 5) % 23 - 11);
    default: return sin(1.3 * r + 0.7 * (double)i) * 4.0 + 0.01 * r;
    }
}

enum { D0 = 12, D1 = 3, D2 = 12, NUMEL = D0 * D1 * D2 };
static const int64_t shape3[3] = {D0, D1, D2};

/* Rank r's input as a tensor of dt in ctx (made from doubles, so f16 and
 * bf16 round as kiln rounds them). */
static kiln_tensor *input(kiln_ctx *ctx, kiln_dtype dt, int r) {
    double v[NUMEL];
    for (int64_t i = 0; i < NUMEL; i++)
        v[i] = input_value(dt, r, i);
    return kiln_cast(kiln_from_data(ctx, KILN_F64, 3, shape3, v), dt);
}

static bool read_f64(kiln_tensor *t, double *out, int64_t n) {
    kiln_status st = kiln_to_host(kiln_cast(t, KILN_F64), out, sizeof(double) * (size_t)n);
    if (st != KILN_OK)
        printf("rank %d: read failed: %s\n", rank_, kiln_error_message(t));
    return st == KILN_OK;
}

static double reduce2(kiln_reduce_op op, kiln_dtype dt, double a, double b) {
    if (dt == KILN_BOOL)
        return op == KILN_REDUCE_MIN ? (double)(a && b) : (double)(a || b);
    switch (op) {
    case KILN_REDUCE_MAX: return a > b ? a : b;
    case KILN_REDUCE_MIN: return a < b ? a : b;
    default: return a + b;
    }
}

static double round_to(kiln_dtype dt, double v) {
    if (dt == KILN_U8)
        return fmod(fmod(v, 256) + 256, 256);
    if (dt == KILN_F32)
        return (float)v;
    return v;
}

static bool close_to(kiln_dtype dt, double got, double want) {
    double tol = dt == KILN_F64 ? 1e-12 : dt == KILN_F32 ? 1e-5 : is_float(dt) ? 1.5e-2 : 0;
    return fabs(got - want) <= tol * (1 + fabs(want));
}

/* all[r][i]: every rank's input, read back through kiln (rounded to dt). */
static double all_in[4][NUMEL];

static void expected_reduce(kiln_dtype dt, kiln_reduce_op op, double *out) {
    for (int64_t i = 0; i < NUMEL; i++) {
        double acc = all_in[0][i];
        for (int r = 1; r < size_; r++)
            acc = reduce2(op, dt, acc, all_in[r][i]);
        if (op == KILN_REDUCE_MEAN)
            acc /= size_;
        out[i] = round_to(dt, acc);
    }
}

/* Flat index in a [D0,D1,D2] array of (a, b, c). */
static int64_t at3(const int64_t *dims, int64_t a, int64_t b, int64_t c) {
    return (a * dims[1] + b) * dims[2] + c;
}

/* The collectives of one dtype on one context: each result is checked. */
static void collectives_of(kiln_ctx *ctx, kiln_dtype dt, const char *where) {
    for (int r = 0; r < size_; r++)
        if (!read_f64(input(ctx, dt, r), all_in[r], NUMEL))
            return;
    kiln_tensor *x = input(ctx, dt, rank_);
    static double got[4 * NUMEL], want[4 * NUMEL];
    const kiln_reduce_op ops[] = {KILN_REDUCE_SUM, KILN_REDUCE_MEAN, KILN_REDUCE_MAX,
                                  KILN_REDUCE_MIN};
    for (int o = 0; o < 4; o++) {
        if (ops[o] == KILN_REDUCE_MEAN && !is_float(dt))
            continue;
        expected_reduce(dt, ops[o], want);
        /* all_reduce */
        if (read_f64(kiln_all_reduce(x, ops[o]), got, NUMEL)) {
            int bad = 0;
            for (int64_t i = 0; i < NUMEL; i++)
                bad += !close_to(dt, got[i], want[i]);
            CHECK(!bad, "%s %s all_reduce op %d: %d of %d wrong (e.g. [0] %g, want %g)", where,
                  kiln_dtype_name(dt), o, bad, NUMEL, got[0], want[0]);
        }
        /* reduce_scatter along each axis that divides */
        for (int ax = 0; ax < 3; ax++) {
            if (shape3[ax] % size_)
                continue;
            int64_t piece = shape3[ax] / size_;
            int64_t dims[3] = {D0, D1, D2};
            dims[ax] = piece;
            if (!read_f64(kiln_reduce_scatter(x, ops[o], ax), got, NUMEL / size_))
                continue;
            int bad = 0;
            for (int64_t a = 0; a < dims[0]; a++)
                for (int64_t b = 0; b < dims[1]; b++)
                    for (int64_t c = 0; c < dims[2]; c++) {
                        int64_t s[3] = {a, b, c};
                        s[ax] += rank_ * piece;
                        double w = want[at3(shape3, s[0], s[1], s[2])];
                        bad += !close_to(dt, got[at3(dims, a, b, c)], w);
                    }
            CHECK(!bad, "%s %s reduce_scatter op %d axis %d: %d wrong", where,
                  kiln_dtype_name(dt), o, ax, bad);
        }
    }
    /* all_gather along each axis, of a strided view too */
    for (int ax = 0; ax < 3; ax++) {
        int64_t dims[3] = {D0, D1, D2};
        dims[ax] *= size_;
        if (read_f64(kiln_all_gather(x, ax), got, NUMEL * size_)) {
            int bad = 0;
            for (int64_t a = 0; a < dims[0]; a++)
                for (int64_t b = 0; b < dims[1]; b++)
                    for (int64_t c = 0; c < dims[2]; c++) {
                        int64_t s[3] = {a, b, c};
                        int r = (int)(s[ax] / shape3[ax]);
                        s[ax] %= shape3[ax];
                        bad += got[at3(dims, a, b, c)] != all_in[r][at3(shape3, s[0], s[1], s[2])];
                    }
            CHECK(!bad, "%s %s all_gather axis %d: %d wrong", where, kiln_dtype_name(dt), ax, bad);
        }
    }
    /* a strided source: the transpose [D2, D1, D0], gathered along axis 0 */
    const int perm[3] = {2, 1, 0};
    if (read_f64(kiln_all_gather(kiln_permute(x, perm), 0), got, NUMEL * size_)) {
        int bad = 0;
        for (int r = 0; r < size_; r++)
            for (int64_t c = 0; c < D2; c++)
                for (int64_t b = 0; b < D1; b++)
                    for (int64_t a = 0; a < D0; a++)
                        bad += got[((r * D2 + c) * D1 + b) * D0 + a] != all_in[r][at3(shape3, a, b, c)];
        CHECK(!bad, "%s %s all_gather of a transpose: %d wrong", where, kiln_dtype_name(dt), bad);
    }
    /* broadcast from every root, of a slice with a step */
    for (int root = 0; root < size_; root++) {
        kiln_tensor *sl = kiln_slice(x, 2, 1, D2, 2);
        if (!read_f64(kiln_broadcast(sl, root), got, D0 * D1 * (D2 / 2)))
            continue;
        int bad = 0;
        for (int64_t a = 0; a < D0; a++)
            for (int64_t b = 0; b < D1; b++)
                for (int64_t c = 0; c < D2 / 2; c++)
                    bad += got[(a * D1 + b) * (D2 / 2) + c] != all_in[root][at3(shape3, a, b, 2 * c + 1)];
        CHECK(!bad, "%s %s broadcast root %d: %d wrong", where, kiln_dtype_name(dt), root, bad);
    }
    /* zero elements, and a 0-d tensor */
    kiln_tensor *empty = kiln_slice(x, 0, 0, 0, 1);
    CHECK(kiln_realize(kiln_all_reduce(empty, KILN_REDUCE_MAX)) == KILN_OK, "%s %s empty: %s",
          where, kiln_dtype_name(dt), kiln_ctx_last_error(ctx));
    double one;
    if (kiln_item(kiln_cast(kiln_all_reduce(kiln_sum(kiln_cast(x, KILN_F64), 0, NULL, false),
                                            KILN_REDUCE_SUM), KILN_F64), &one) == KILN_OK) {
        double w = 0;
        for (int r = 0; r < size_; r++)
            for (int64_t i = 0; i < NUMEL; i++)
                w += all_in[r][i];
        CHECK(fabs(one - w) <= 1e-9 * (1 + fabs(w)), "%s %s 0-d sum %g, want %g", where,
              kiln_dtype_name(dt), one, w);
    }
}

static kiln_ctx *join(kiln_device dev, kiln_mode mode) {
    kiln_ctx *ctx = kiln_ctx_new(dev);
    if (!ctx) {
        printf("rank ?: no context: %s\n", kiln_last_ctx_error());
        exit(1);
    }
    kiln_ctx_set_mode(ctx, mode);
    kiln_status st = kiln_dist_init(ctx, KILN_DIST_MPI);
    if (st != KILN_OK) {
        printf("rank ?: kiln_dist_init: %s\n", kiln_ctx_last_error(ctx));
        exit(1);
    }
    rank_ = kiln_dist_rank(ctx);
    size_ = kiln_dist_world_size(ctx);
    return ctx;
}

/* Every executor's context joins first: MPI cannot start again in a
 * process once the last context that joined has left. */
static void mode_collectives(void) {
    const struct {
        kiln_device dev;
        kiln_mode mode;
        const char *name;
    } ex[] = {{KILN_CPU, KILN_LAZY, "cpu/lazy"},
              {KILN_REF, KILN_LAZY, "ref/lazy"},
              {KILN_CPU, KILN_EAGER, "cpu/eager"}};
    enum { NEX = sizeof ex / sizeof *ex };
    kiln_ctx *ctx[NEX];
    for (int e = 0; e < NEX; e++)
        ctx[e] = join(ex[e].dev, ex[e].mode);
    for (int e = 0; e < NEX; e++)
        for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++) {
            kiln_scope_begin(ctx[e]);
            collectives_of(ctx[e], dtypes[d], ex[e].name);
            kiln_scope_end(ctx[e]);
        }
    for (int e = 0; e < NEX; e++)
        kiln_ctx_free(ctx[e]);
}

/* ---- gradients ---- */

enum { G0 = 4, G1 = 3, GN = G0 * G1 };

/* The local loss of one collective: sum(w_r * f(x_r)^2) with a per-rank w,
 * so that every element's gradient differs. */
static kiln_tensor *local_loss(kiln_ctx *ctx, int which, kiln_tensor *x) {
    kiln_tensor *y;
    switch (which) {
    case 0: y = kiln_all_reduce(x, KILN_REDUCE_SUM); break;
    case 1: y = kiln_all_reduce(x, KILN_REDUCE_MEAN); break;
    case 2: y = kiln_all_reduce(x, KILN_REDUCE_MAX); break;
    case 3: y = kiln_all_reduce(x, KILN_REDUCE_MIN); break;
    case 4: y = kiln_all_gather(x, 1); break;
    case 5: y = kiln_reduce_scatter(kiln_all_gather(x, 0), KILN_REDUCE_SUM, 0); break;
    case 6: y = kiln_reduce_scatter(kiln_all_gather(x, 0), KILN_REDUCE_MEAN, 0); break;
    case 7: y = kiln_reduce_scatter(kiln_all_gather(x, 0), KILN_REDUCE_MAX, 0); break;
    default: y = kiln_broadcast(x, size_ - 1); break;
    }
    int64_t n = kiln_numel(y);
    double w[4 * GN * 4];
    for (int64_t i = 0; i < n; i++)
        w[i] = cos(0.9 * (double)i + 2.1 * rank_) + 1.5;
    int64_t dims[8];
    for (int d = 0; d < kiln_ndim(y); d++)
        dims[d] = kiln_shape(y)[d];
    kiln_tensor *wt = kiln_from_data(ctx, KILN_F64, kiln_ndim(y), dims, w);
    return kiln_sum(kiln_mul(wt, kiln_mul(y, y)), 0, NULL, false);
}

static const char *grad_names[] = {"all_reduce(sum)", "all_reduce(mean)", "all_reduce(max)",
                                   "all_reduce(min)", "all_gather", "reduce_scatter(sum)",
                                   "reduce_scatter(mean)", "reduce_scatter(max)", "broadcast"};

static void mode_grad(void) {
    kiln_ctx *ctx = join(KILN_CPU, KILN_LAZY);
    const int64_t dims[2] = {G0, G1};
    double x0[GN];
    for (int which = 0; which < 9; which++) {
        for (int i = 0; i < GN; i++) /* distinct values: no ties for max and min */
            x0[i] = sin(1.7 * i + 0.37 * rank_ + which) * 2 + 0.05 * rank_;
        kiln_scope_begin(ctx);
        kiln_tensor *x = kiln_from_data(ctx, KILN_F64, 2, dims, x0);
        kiln_requires_grad(x, true);
        kiln_tensor *loss = local_loss(ctx, which, x);
        double grad[GN];
        kiln_status st = kiln_backward(loss);
        if (st == KILN_OK)
            st = kiln_to_host(kiln_grad(x), grad, sizeof grad);
        CHECK(st == KILN_OK, "grad %s: %s", grad_names[which], kiln_ctx_last_error(ctx));
        kiln_scope_end(ctx);
        if (st != KILN_OK)
            continue;
        /* Every rank perturbs in turn, in step with the others: the total
         * loss over the ranks, whose derivative is what each rank's
         * gradient is. */
        const double h = 1e-6;
        int bad = 0;
        double worst = 0;
        for (int r = 0; r < size_; r++)
            for (int i = 0; i < GN; i++) {
                double tot[2];
                for (int s = 0; s < 2; s++) {
                    double xp[GN];
                    memcpy(xp, x0, sizeof xp);
                    if (r == rank_)
                        xp[i] += s ? -h : h;
                    kiln_scope_begin(ctx);
                    kiln_tensor *l = local_loss(ctx, which, kiln_from_data(ctx, KILN_F64, 2, dims, xp));
                    st = kiln_item(kiln_all_reduce(l, KILN_REDUCE_SUM), &tot[s]);
                    kiln_scope_end(ctx);
                    if (st != KILN_OK)
                        break;
                }
                if (st != KILN_OK || r != rank_)
                    continue;
                double fd = (tot[0] - tot[1]) / (2 * h);
                double err = fabs(fd - grad[i]) / (1 + fabs(fd));
                if (err > worst)
                    worst = err;
                bad += err > 1e-6;
            }
        CHECK(st == KILN_OK && !bad, "grad %s: %d of %d elements off (worst %.2g): %s",
              grad_names[which], bad, GN, worst, st == KILN_OK ? "" : kiln_ctx_last_error(ctx));
    }
    kiln_ctx_free(ctx);
}

/* ---- replay ---- */

static void mode_replay(void) {
    kiln_ctx *ctx = join(KILN_CPU, KILN_LAZY);
    const int64_t dims[2] = {64, 33};
    double v[64 * 33];
    kiln_stats before = {0};
    for (int step = 0; step < 5; step++) {
        for (int i = 0; i < 64 * 33; i++)
            v[i] = sin(i * 0.01 + step + rank_);
        kiln_scope_begin(ctx);
        kiln_tensor *x = kiln_from_data(ctx, KILN_F32, 2, dims, v);
        kiln_tensor *a = kiln_all_reduce(kiln_mul(x, x), KILN_REDUCE_SUM);
        kiln_tensor *b = kiln_all_reduce(kiln_add_scalar(x, 1), KILN_REDUCE_MAX);
        kiln_tensor *c = kiln_all_gather(kiln_sum(x, 1, (const int[]){1}, true), 1);
        double total;
        kiln_status st = kiln_item(kiln_sum(kiln_add(kiln_add(a, b), kiln_sum(c, 0, NULL, false)),
                                            0, NULL, false), &total);
        CHECK(st == KILN_OK, "replay step %d: %s", step, kiln_ctx_last_error(ctx));
        kiln_scope_end(ctx);
        if (step == 0)
            before = kiln_ctx_stats(ctx);
    }
    kiln_stats after = kiln_ctx_stats(ctx);
    CHECK(after.compiles == before.compiles && after.graph_hits - before.graph_hits == 4,
          "replay: %lld compiles and %lld graph hits after the first step (want 0 and 4)",
          (long long)(after.compiles - before.compiles),
          (long long)(after.graph_hits - before.graph_hits));

    /* A data-parallel step: four parameters' gradients averaged, then an
     * optimiser's updates. The scheduler puts the updates after every
     * all-reduce, so the four travel as one message. */
    kiln_tensor *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = kiln_rand(ctx, KILN_F32, 2, (const int64_t[]){8 + i, 5}, 40 + (uint64_t)i);
        kiln_requires_grad(p[i], true);
    }
    kiln_optim *o;
    CHECK(kiln_sgd_new(ctx, 4, p, 0.1, 0.9, 0, false, &o) == KILN_OK, "sgd: %s", kiln_ctx_last_error(ctx));
    for (int step = 0; step < 3; step++) {
        kiln_stats s0 = kiln_ctx_stats(ctx);
        kiln_scope_begin(ctx);
        kiln_tensor *loss = kiln_scalar(ctx, KILN_F32, rank_);
        for (int i = 0; i < 4; i++)
            loss = kiln_add(loss, kiln_sum(kiln_mul(kiln_tanh(p[i]), kiln_mul_scalar(p[i], step + rank_ + 1)), 0, NULL, false));
        double l;
        kiln_status st = kiln_backward(loss);
        if (st == KILN_OK)
            st = kiln_dist_average_gradients(4, p);
        if (st == KILN_OK)
            st = kiln_optim_step(o);
        kiln_optim_zero_grad(o);
        if (st == KILN_OK)
            st = kiln_item(loss, &l);
        kiln_scope_end(ctx);
        kiln_stats s1 = kiln_ctx_stats(ctx);
        CHECK(st == KILN_OK, "data-parallel step %d: %s", step, kiln_ctx_last_error(ctx));
        CHECK(s1.collectives - s0.collectives == 4 && s1.collective_messages - s0.collective_messages == 1,
              "data-parallel step %d: %lld collectives in %lld messages (want 4 in 1)", step,
              (long long)(s1.collectives - s0.collectives),
              (long long)(s1.collective_messages - s0.collective_messages));
    }
    /* every rank took the same steps: the parameters agree */
    for (int i = 0; i < 4; i++) {
        double mine, lo, hi;
        kiln_tensor *s = kiln_sum(kiln_cast(p[i], KILN_F64), 0, NULL, false);
        if (kiln_item(s, &mine) == KILN_OK && kiln_item(kiln_all_reduce(s, KILN_REDUCE_MIN), &lo) == KILN_OK &&
            kiln_item(kiln_all_reduce(s, KILN_REDUCE_MAX), &hi) == KILN_OK)
            CHECK(lo == hi, "parameter %d differs between ranks: %.17g to %.17g", i, lo, hi);
    }
    kiln_optim_free(o);
    kiln_ctx_free(ctx);
}

/* ---- errors ---- */

static void expect_dist_error(kiln_tensor *t, const char *what, const char *needle) {
    kiln_status st = kiln_realize(t);
    const char *msg = kiln_error_message(t);
    CHECK(st == KILN_ERR_DIST, "%s: status %s (%s), want KILN_ERR_DIST", what,
          kiln_status_string(st), msg ? msg : "");
    CHECK(msg && strstr(msg, needle), "%s: message \"%s\" lacks \"%s\"", what, msg ? msg : "",
          needle);
    if (msg && rank_ == 0)
        printf("rank %d: %s: %s\n", rank_, what, msg);
}

static void mode_mismatch(void) {
    kiln_ctx *ctx = join(KILN_CPU, KILN_LAZY);
    int last = size_ - 1;
    kiln_tensor *x = kiln_full(ctx, KILN_F32, 2, (const int64_t[]){4, rank_ == last ? 5 : 3}, 1);
    char want[64];
    snprintf(want, sizeof want, "rank%s %d", last == 1 ? "" : "s", last);
    expect_dist_error(kiln_all_reduce(x, KILN_REDUCE_SUM), "shape mismatch", "[4,5]");
    kiln_tensor *y = kiln_full(ctx, rank_ == last ? KILN_F64 : KILN_F32, 1, (const int64_t[]){8}, 1);
    expect_dist_error(kiln_all_reduce(y, KILN_REDUCE_SUM), "dtype mismatch", "f64");
    /* The world is not broken by a mismatch: the next agreed collective runs. */
    double s;
    kiln_status st = kiln_item(kiln_all_reduce(kiln_full(ctx, KILN_F32, 0, NULL, 2), KILN_REDUCE_SUM), &s);
    CHECK(st == KILN_OK && s == 2.0 * size_, "after a mismatch: %s, %g", kiln_status_string(st), s);
    kiln_ctx_free(ctx);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void mode_dead(void) {
    kiln_ctx *ctx = join(KILN_CPU, KILN_LAZY);
    double s;
    kiln_status st = kiln_item(kiln_all_reduce(kiln_full(ctx, KILN_F32, 0, NULL, 1), KILN_REDUCE_SUM), &s);
    CHECK(st == KILN_OK && s == size_, "before the death: %s", kiln_ctx_last_error(ctx));
    fflush(stdout);
    if (rank_ == size_ - 1)
        _exit(0); /* dies without leaving the job */
    double t0 = now_s();
    kiln_tensor *t = kiln_all_reduce(kiln_full(ctx, KILN_F32, 1, (const int64_t[]){1000}, 1),
                                     KILN_REDUCE_SUM);
    expect_dist_error(t, "a dead rank", "KILN_DIST_TIMEOUT");
    double waited = now_s() - t0;
    const char *limit = getenv("KILN_DIST_TIMEOUT");
    double want = limit ? atof(limit) : 300;
    CHECK(waited < want + 5, "the error came after %.1f s (timeout %.1f s)", waited, want);
    t0 = now_s();
    /* (a value of its own: the all-reduce of 1 is realized already) */
    expect_dist_error(kiln_all_reduce(kiln_full(ctx, KILN_F32, 0, NULL, 3), KILN_REDUCE_SUM),
                      "after the timeout", "KILN_DIST_TIMEOUT");
    CHECK(now_s() - t0 < 1, "a broken job's collective took %.1f s", now_s() - t0);
    kiln_ctx_free(ctx);
}

static void mode_errors(void) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    CHECK(kiln_dist_rank(ctx) == -1 && kiln_dist_world_size(ctx) == 1, "before init: %d, %d",
          kiln_dist_rank(ctx), kiln_dist_world_size(ctx));
    kiln_tensor *x = kiln_full(ctx, KILN_I32, 2, (const int64_t[]){3, 5}, 1);
    CHECK(kiln_error(kiln_all_reduce(x, KILN_REDUCE_SUM)) == KILN_ERR_ARG, "before init");
    CHECK(kiln_dist_init(ctx, (kiln_dist_backend)7) == KILN_ERR_ARG, "backend 7");
    CHECK(kiln_dist_init(ctx, KILN_DIST_MPI) == KILN_OK, "init: %s", kiln_ctx_last_error(ctx));
    rank_ = kiln_dist_rank(ctx);
    size_ = kiln_dist_world_size(ctx);
    CHECK(kiln_dist_init(ctx, KILN_DIST_MPI) == KILN_ERR_ARG, "init twice");
    CHECK(kiln_error(kiln_all_reduce(x, KILN_REDUCE_MEAN)) == KILN_ERR_DTYPE, "mean of i32");
    CHECK(kiln_error(kiln_all_reduce(x, (kiln_reduce_op)9)) == KILN_ERR_ARG, "reduce op 9");
    CHECK(kiln_error(kiln_all_gather(x, 2)) == KILN_ERR_ARG, "axis 2");
    CHECK(kiln_error(kiln_all_gather(kiln_full(ctx, KILN_F32, 0, NULL, 1), 0)) == KILN_ERR_SHAPE,
          "0-d gather");
    CHECK(kiln_error(kiln_broadcast(x, size_)) == KILN_ERR_ARG, "root %d", size_);
    CHECK(kiln_error(kiln_broadcast(x, -1)) == KILN_ERR_ARG, "root -1");
    if (size_ > 1) {
        kiln_tensor *e = kiln_reduce_scatter(kiln_full(ctx, KILN_F32, 1, (const int64_t[]){size_ + 1}, 1),
                                             KILN_REDUCE_SUM, 0);
        CHECK(kiln_error(e) == KILN_ERR_SHAPE, "reduce_scatter of %d over %d", size_ + 1, size_);
        CHECK(strstr(kiln_error_message(e), "kiln_reduce_scatter"), "message: %s",
              kiln_error_message(e));
    }
    /* The same context still works. */
    double s;
    CHECK(kiln_item(kiln_sum(kiln_all_reduce(kiln_cast(x, KILN_F32), KILN_REDUCE_SUM), 0, NULL,
                             false), &s) == KILN_OK && s == 15.0 * size_,
          "sum %g, want %g", s, 15.0 * size_);
    /* NCCL: loaded, and refused without a GPU context. */
    kiln_ctx *c2 = kiln_ctx_new(KILN_CPU);
    kiln_status st = kiln_dist_init(c2, KILN_DIST_NCCL);
    CHECK(st == KILN_ERR_DEVICE || st == KILN_ERR_DIST, "NCCL on a CPU context: %s",
          kiln_status_string(st));
    CHECK(kiln_dist_rank(c2) == -1, "a refused context has rank %d", kiln_dist_rank(c2));
    if (rank_ == 0)
        printf("rank 0: NCCL on a CPU context: %s\n", kiln_ctx_last_error(c2));
    kiln_ctx_free(c2);
    kiln_ctx_free(ctx);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "collectives"))
        mode_collectives();
    else if (!strcmp(mode, "grad"))
        mode_grad();
    else if (!strcmp(mode, "replay"))
        mode_replay();
    else if (!strcmp(mode, "mismatch"))
        mode_mismatch();
    else if (!strcmp(mode, "dead"))
        mode_dead();
    else if (!strcmp(mode, "errors"))
        mode_errors();
    else {
        fprintf(stderr, "usage: dist_worker collectives|grad|replay|mismatch|dead|errors\n");
        return 2;
    }
    if (failures_)
        printf("rank %d: %d of %d checks FAILED\n", rank_, failures_, checks_);
    else
        printf("rank %d: ok %d checks\n", rank_, checks_);
    return failures_ != 0;
}
