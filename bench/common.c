/* common.c — options, clocks, JSON lines and the lazy/eager runner shared by
 * kiln's benchmark programs (see bench.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"

static kiln_device device_named(const char *s) {
    return s && strcmp(s, "cuda") == 0 ? KILN_CUDA : KILN_CPU;
}

bench_opts bench_parse_opts(int argc, char **argv) {
    bench_opts o = {.steps = 0, .warmup = 1};
    const char *q = getenv("KILN_BENCH_QUICK");
    o.quick = q && q[0] && strcmp(q, "0") != 0;
    const char *s = getenv("KILN_BENCH_STEPS");
    if (s && atoi(s) > 0)
        o.steps = atoi(s);
    o.device = device_named(getenv("KILN_BENCH_DEVICE"));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            o.device = device_named(argv[++i]);
        else if (strcmp(argv[i], "--quick") == 0)
            o.quick = true;
        else if (strcmp(argv[i], "--full") == 0)
            o.full = true;
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            o.steps = atoi(argv[++i]);
    }
    if (o.quick)
        o.full = false;
    if (o.steps == 0)
        o.steps = o.quick ? 3 : 9;
    return o;
}

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void field(const char *key, double v) {
    if (v != 0)
        printf(",\"%s\":%.6g", key, v);
}

void bench_emit(const bench_record *r) {
    printf("{\"suite\":\"%s\",\"workload\":\"%s\",\"impl\":\"%s\"", r->suite, r->workload, r->impl);
    if (r->shape)
        printf(",\"shape\":\"%s\"", r->shape);
    printf(",\"dtype\":\"f32\"");
    if (r->metric)
        printf(",\"metric\":\"%s\"", r->metric);
    printf(",\"median_ms\":%.6g", r->median_ms);
    field("min_ms", r->min_ms);
    field("steps", r->steps);
    field("kernels", r->kernels);
    field("bytes", r->bytes);
    field("flops", r->flops);
    field("gbps", r->gbps);
    field("gflops", r->gflops);
    field("pct_bw", r->pct_bw);
    field("pct_peak", r->pct_peak);
    if (r->has_diff)
        printf(",\"max_abs_diff\":%.6g", r->max_abs_diff);
    field("eager_over_lazy", r->ratio);
    field("compiles", r->compiles);
    field("memory_hits", r->memory_hits);
    field("disk_hits", r->disk_hits);
    printf("}\n");
    fflush(stdout);
    fprintf(stderr, "%-8s %-22s %-18s %-11s %10.3f ms", r->suite, r->workload,
            r->shape ? r->shape : "", r->impl, r->median_ms);
    if (r->kernels > 0)
        fprintf(stderr, "  %5.1f krn", r->kernels);
    if (r->gbps > 0)
        fprintf(stderr, "  %7.1f GB/s (%3.0f%%)", r->gbps, r->pct_bw);
    if (r->gflops > 0)
        fprintf(stderr, "  %7.1f GFLOP/s (%3.0f%%)", r->gflops, r->pct_peak);
    if (r->ratio > 0)
        fprintf(stderr, "  eager/lazy %.2f", r->ratio);
    if (r->compiles > 0 || r->disk_hits > 0)
        fprintf(stderr, "  %.0f compiled, %.0f from disk", r->compiles, r->disk_hits);
    if (r->has_diff)
        fprintf(stderr, "  diff %.2g", r->max_abs_diff);
    fprintf(stderr, "\n");
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void bench_emit_error(const char *suite, const char *workload, const char *shape,
                      const char *impl, const char *message) {
    printf("{\"suite\":\"%s\",\"workload\":\"%s\",\"impl\":\"%s\",\"shape\":\"%s\","
           "\"dtype\":\"f32\",\"error\":",
           suite, workload, impl, shape ? shape : "");
    json_string(stdout, message);
    printf("}\n");
    fflush(stdout);
    fprintf(stderr, "%-8s %-22s %-18s %-11s FAILED: %s\n", suite, workload, shape ? shape : "",
            impl, message);
}

void bench_emit_machine(const kiln_machine *m) {
    printf("{\"suite\":\"machine\",\"cpu\":\"%s\",\"threads\":%d,\"triad_gbps\":%.4g,"
           "\"triad_elems\":%lld,\"fma_gflops\":%.4g,\"vector_bits\":%d}\n",
           m->cpu, m->threads, m->gbps, (long long)m->triad_elems, m->gflops,
           m->vector_bits);
    fflush(stdout);
    fprintf(stderr, "machine: %s, %d threads: triad %.1f GB/s, FMA %.1f GFLOP/s (%d-bit)\n",
            m->cpu, m->threads, m->gbps, m->gflops, m->vector_bits);
}

typedef struct mode_run {
    kiln_mode mode;
    double *t;
    int64_t kernels;
    float *out;
    size_t n;
} mode_run;

/* One step: build, realize, and on the last step copy the output out. */
static int step(kiln_ctx *ctx, const bench_workload *w, mode_run *r, double *secs, bool keep) {
    kiln_ctx_set_mode(ctx, r->mode);
    kiln_scope_begin(ctx);
    int64_t k0 = kiln_ctx_stats(ctx).kernels;
    double t0 = bench_now();
    kiln_tensor *y = w->build(w->inputs, w->arg);
    kiln_status st = kiln_realize(y);
    double t1 = bench_now();
    r->kernels += kiln_ctx_stats(ctx).kernels - k0;
    if (st == KILN_OK && keep) {
        r->n = (size_t)kiln_numel(y);
        free(r->out);
        r->out = malloc(r->n * sizeof(float));
        st = r->out ? kiln_to_host(y, r->out, r->n * sizeof(float)) : KILN_ERR_OOM;
    }
    if (st != KILN_OK)
        bench_emit_error(w->suite, w->name, w->shape,
                         r->mode == KILN_LAZY ? "kiln-lazy" : "kiln-eager",
                         kiln_error_message(y)[0] ? kiln_error_message(y)
                                                  : kiln_ctx_last_error(ctx));
    kiln_scope_end(ctx);
    *secs = t1 - t0;
    return st != KILN_OK;
}

static void emit_mode(const bench_workload *w, int steps, const kiln_machine *m,
                      const mode_run *r, double diff, double ratio) {
    double min = r->t[0];
    for (int i = 1; i < steps; i++)
        if (r->t[i] < min)
            min = r->t[i];
    double med = bench_median(r->t, steps);
    bench_record rec = {
        .suite = w->suite,
        .workload = w->name,
        .shape = w->shape,
        .impl = r->mode == KILN_LAZY ? "kiln-lazy" : "kiln-eager",
        .median_ms = med * 1e3,
        .min_ms = min * 1e3,
        .steps = steps,
        .kernels = (double)r->kernels / steps,
        .bytes = w->bytes,
        .flops = w->flops,
        .has_diff = true,
        .max_abs_diff = diff,
        .ratio = ratio,
    };
    if (w->bytes > 0) {
        rec.gbps = w->bytes / med * 1e-9;
        rec.pct_bw = 100.0 * rec.gbps / m->gbps;
    }
    if (w->flops > 0) {
        rec.gflops = w->flops / med * 1e-9;
        rec.pct_peak = 100.0 * rec.gflops / m->gflops;
    }
    bench_emit(&rec);
}

int bench_lazy_eager(kiln_ctx *ctx, const bench_workload *w, const bench_opts *o,
                     const kiln_machine *m, double tol) {
    mode_run runs[2] = {{.mode = KILN_LAZY}, {.mode = KILN_EAGER}};
    int rc = 0;
    double dummy;
    for (int k = 0; k < 2 && rc == 0; k++) {
        runs[k].t = calloc(BENCH_MAX_STEPS > o->steps ? BENCH_MAX_STEPS : (size_t)o->steps,
                           sizeof(double));
        rc = !runs[k].t;
        for (int s = 0; s < o->warmup && rc == 0; s++)
            rc = step(ctx, w, &runs[k], &dummy, false);
        runs[k].kernels = 0;
    }
    /* o->steps at least; more while the slower mode's steps sum to less than
     * BENCH_MIN_SECONDS. The last step of each mode keeps its output. */
    int steps = 0;
    double spent[2] = {0, 0};
    for (bool more = true; more && rc == 0; steps++) {
        more = steps + 1 < o->steps ||
               (steps + 1 < BENCH_MAX_STEPS &&
                (spent[0] > spent[1] ? spent[0] : spent[1]) < BENCH_MIN_SECONDS);
        for (int k = 0; k < 2 && rc == 0; k++) {
            rc = step(ctx, w, &runs[k], &runs[k].t[steps], !more);
            spent[k] += runs[k].t[steps];
        }
    }
    if (rc == 0 && runs[0].n != runs[1].n) {
        bench_emit_error(w->suite, w->name, w->shape, "kiln-lazy",
                         "lazy and eager outputs differ in size");
        rc = 1;
    }
    if (rc == 0) {
        double diff = 0, scale = 1;
        for (size_t i = 0; i < runs[0].n; i++) {
            double d = fabs((double)runs[0].out[i] - (double)runs[1].out[i]);
            if (!(d <= diff))
                diff = d;
            if (fabs((double)runs[1].out[i]) > scale)
                scale = fabs((double)runs[1].out[i]);
        }
        double tl = bench_median(runs[0].t, steps), te = bench_median(runs[1].t, steps);
        emit_mode(w, steps, m, &runs[0], diff, te / tl);
        emit_mode(w, steps, m, &runs[1], diff, 0);
        if (!(diff <= tol * scale)) {
            char msg[128];
            snprintf(msg, sizeof msg, "lazy and eager differ by %g (largest output %g)", diff,
                     scale);
            bench_emit_error(w->suite, w->name, w->shape, "kiln-lazy", msg);
            rc = 1;
        }
    }
    for (int k = 0; k < 2; k++) {
        free(runs[k].t);
        free(runs[k].out);
    }
    kiln_ctx_set_mode(ctx, KILN_LAZY);
    return rc;
}

kiln_status bench_train_step(kiln_tensor *loss, kiln_optim *o, double *l, const char **what) {
    kiln_status st;
    if ((st = kiln_backward(loss)) != KILN_OK) {
        *what = "the backward pass";
        return st;
    }
    if ((st = kiln_optim_step(o)) != KILN_OK) {
        *what = "the optimiser step";
        return st;
    }
    kiln_optim_zero_grad(o);
    *what = "the step";
    return kiln_item(loss, l);
}

kiln_tensor *bench_gradients_joined(kiln_tensor *y, int n, kiln_tensor *const *xs) {
    kiln_tensor *g[16];
    if (n > 16 || kiln_gradients(y, NULL, n, xs, g) != KILN_OK)
        return y;
    for (int i = 0; i < n; i++) {
        const int64_t len = kiln_numel(g[i]);
        g[i] = kiln_reshape(g[i], 1, &len);
    }
    return kiln_cat(n, g, 0);
}
