/* cuda_device_test.c — the CUDA device's host side, on a fake driver
 * (tests/fake_cuda.c, through KILN_CUDA_DRIVER) that has no GPU behind it:
 * what a missing driver says, data in and out through the device's
 * allocator and staged copies, buffer reuse, out-of-memory recovery and its
 * message, and that a kernel the device cannot load is an error naming the
 * program, after which the context still works. Kernels themselves run
 * only where there is a GPU (bench/gpu_check.sh). Opening the device needs
 * NVRTC; without it every case here is skipped, saying so. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <dlfcn.h>
#include <unistd.h>

#include <dlpack/dlpack.h>

#include "test_util.h"

#define FAKE "tests/libfake_cuda.so"

/* The fake's call counters (the same handle kiln's dlopen got). */
static long fake_counter(const char *name) {
    void *h = dlopen(FAKE, RTLD_NOW | RTLD_NOLOAD);
    cr_assert(h, "the fake driver is not loaded: %s", dlerror());
    long *p = dlsym(h, name);
    cr_assert(p, "fake driver lacks %s", name);
    long v = *p;
    dlclose(h);
    return v;
}

static kiln_ctx *open_fake(const char *mem_bytes) {
    setenv("KILN_CUDA_DRIVER", FAKE, 1);
    if (mem_bytes)
        setenv("FAKE_CUDA_MEM", mem_bytes, 1);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CUDA);
    if (!ctx && strstr(kiln_last_ctx_error(), "compiler"))
        cr_skip_test("no NVRTC, so no CUDA device opens: %s", kiln_last_ctx_error());
    cr_assert(ctx, "the fake device did not open: %s", kiln_last_ctx_error());
    return ctx;
}

/* A random tensor of n floats on ctx, its values in v. */
static kiln_tensor *random_f32(kiln_ctx *ctx, tu_rng *r, int64_t n, float *v) {
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)tu_unif(r, -100, 100);
    return kiln_from_data(ctx, KILN_F32, 1, &n, v);
}

static void expect_roundtrip(kiln_tensor *t, const float *v, int64_t n) {
    float *back = malloc((size_t)n * sizeof *back);
    cr_assert_eq(kiln_to_host(t, back, (size_t)n * sizeof *back), KILN_OK, "%s",
                 kiln_error_message(t));
    cr_assert(memcmp(back, v, (size_t)n * sizeof *v) == 0, "%lld floats came back changed",
              (long long)n);
    free(back);
}

Test(cuda_device, no_driver_is_an_error_naming_it) {
    setenv("KILN_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    cr_assert_null(kiln_ctx_new(KILN_CUDA));
    const char *e = kiln_last_ctx_error();
    cr_assert(strstr(e, "KILN_CUDA") && strstr(e, "no CUDA driver") &&
                  strstr(e, "/nonexistent/libcuda.so.1"),
              "message: %s", e);
}

Test(cuda_device, a_bad_device_ordinal_is_an_error) {
    setenv("KILN_CUDA_DRIVER", FAKE, 1);
    setenv("KILN_CUDA_DEVICE", "first", 1);
    cr_assert_null(kiln_ctx_new(KILN_CUDA));
    cr_assert(strstr(kiln_last_ctx_error(), "KILN_CUDA_DEVICE"), "message: %s",
              kiln_last_ctx_error());
}

/* Small, odd-sized and large (staged through pinned memory) tensors of
 * several dtypes come back bit for bit. */
Test(cuda_device, data_round_trips) {
    kiln_ctx *ctx = open_fake(NULL);
    TU_RNG(r);
    const int64_t sizes[] = {1, 517, (int64_t)3 << 20}; /* the last is 12 MiB */
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        float *v = malloc((size_t)sizes[k] * sizeof *v);
        kiln_tensor *t = random_f32(ctx, &r, sizes[k], v);
        expect_roundtrip(t, v, sizes[k]);
        free(v);
    }
    int64_t iv[7], back[7];
    for (int i = 0; i < 7; i++)
        iv[i] = tu_int(&r, INT64_MIN / 2, INT64_MAX / 2);
    int64_t n = 7;
    kiln_tensor *t = kiln_from_data(ctx, KILN_I64, 1, &n, iv);
    cr_assert_eq(kiln_to_host(t, back, sizeof back), KILN_OK, "%s", kiln_error_message(t));
    cr_assert(memcmp(iv, back, sizeof iv) == 0);
    kiln_ctx_free(ctx);
    cr_assert_eq(fake_counter("fake_cuda_allocs"), fake_counter("fake_cuda_frees"),
                 "device memory left allocated after kiln_ctx_free");
}

/* A released tensor's memory serves the next one of its size: the driver
 * allocates once. */
Test(cuda_device, released_buffers_are_reused) {
    kiln_ctx *ctx = open_fake(NULL);
    TU_RNG(r);
    int64_t n = 1 << 18; /* 1 MiB */
    float *v = malloc((size_t)n * sizeof *v);
    long before = 0;
    for (int step = 0; step < 4; step++) {
        kiln_tensor *t = random_f32(ctx, &r, n, v);
        expect_roundtrip(t, v, n);
        kiln_release(t);
        if (step == 0)
            before = fake_counter("fake_cuda_allocs");
    }
    cr_assert_eq(fake_counter("fake_cuda_allocs"), before, "a reused size was allocated again");
    kiln_stats s = kiln_ctx_stats(ctx);
    cr_assert(s.buffer_reuses >= 3, "buffer_reuses %lld", (long long)s.buffer_reuses);
    cr_assert(s.pooled_bytes >= n * 4, "pooled_bytes %lld", (long long)s.pooled_bytes);
    free(v);
    kiln_ctx_free(ctx);
}

/* With 8 MiB of device memory: a cached 4 MiB block is given back to make
 * room for 6 MiB; 16 MiB fails with a message saying how much was asked,
 * and the context keeps working. */
Test(cuda_device, out_of_memory_frees_the_cache_then_fails_clearly) {
    kiln_ctx *ctx = open_fake("8388608");
    TU_RNG(r);
    int64_t n4 = 1 << 20, n6 = 3 << 19, n16 = 4 << 20;
    float *v = malloc((size_t)n16 * sizeof *v);
    kiln_tensor *a = random_f32(ctx, &r, n4, v);
    expect_roundtrip(a, v, n4);
    kiln_release(a); /* 4 MiB now cached by the pool */
    kiln_tensor *b = random_f32(ctx, &r, n6, v);
    expect_roundtrip(b, v, n6);
    cr_assert(fake_counter("fake_cuda_failed_allocs") >= 1,
              "the 6 MiB should have needed the cached block back");
    kiln_stats s = kiln_ctx_stats(ctx);
    cr_assert_eq(s.memory_retries, 1);
    cr_assert(s.live_bytes >= n6 * 4 && s.peak_bytes >= s.live_bytes, "live %lld, peak %lld",
              (long long)s.live_bytes, (long long)s.peak_bytes);
    kiln_release(b);
    kiln_tensor *c = random_f32(ctx, &r, n16, v);
    TU_ASSERT_ERROR(c, KILN_ERR_OOM, "CUDA device memory", "16777216 bytes");
    cr_assert_eq(kiln_ctx_stats(ctx).memory_retries, 2);
    kiln_tensor *d = random_f32(ctx, &r, 100, v);
    expect_roundtrip(d, v, 100);
    free(v);
    kiln_ctx_free(ctx);
}

/* The program compiles (NVRTC is real) but the fake refuses to load it: the
 * sync fails naming the program's kernels, the inputs stay readable, and a
 * later sync of data works. */
Test(cuda_device, a_refused_module_is_an_error_and_the_context_survives) {
    kiln_ctx *ctx = open_fake(NULL);
    TU_RNG(r);
    float va[33], vb[33];
    kiln_tensor *a = random_f32(ctx, &r, 33, va);
    kiln_tensor *b = random_f32(ctx, &r, 33, vb);
    kiln_tensor *s = kiln_add(kiln_mul(a, b), a);
    float out[33];
    kiln_status st = kiln_to_host(s, out, sizeof out);
    cr_assert_neq(st, KILN_OK);
    const char *m = kiln_ctx_last_error(ctx);
    cr_assert(strstr(m, "CUDA") && strstr(m, "no kernel image"), "message: %s", m);
    cr_assert(fake_counter("fake_cuda_module_loads") >= 1);
    expect_roundtrip(a, va, 33);
    expect_roundtrip(b, vb, 33);
    kiln_ctx_free(ctx);
}

/* A sum of 2^21 floats: one row, too few for one block per row, so it is
 * split across 256 blocks (chunks of 8192 elements, lower/plan.c) of 256
 * threads, launched with the kernel's two buffers and nothing else. Its
 * partials and per-row count are arrays of the module (the PTX declares
 * them in .global), which the driver allocates and zeroes when it loads
 * the module and the kernel leaves zeroed: the later runs of the program
 * load nothing, take no device memory, and pass the same arguments. */
Test(cuda_device, a_long_row_is_split_across_blocks_with_module_scratch) {
    setenv("FAKE_CUDA_KERNELS", "1", 1);
    setenv("FAKE_CUDA_LOG", "1", 1);
    kiln_ctx *ctx = open_fake(NULL);
    void *h = dlopen(FAKE, RTLD_NOW | RTLD_NOLOAD);
    cr_assert(h, "%s", dlerror());
    void (*reset)(void) = (void (*)(void))(uintptr_t)dlsym(h, "fake_cuda_log_reset");
    const char *(*module_text)(void) =
        (const char *(*)(void))(uintptr_t)dlsym(h, "fake_cuda_module_text");
    char **log = dlsym(h, "fake_cuda_log");
    cr_assert(reset && module_text && log);
    TU_RNG(r);
    enum { N = 1 << 21 };
    static float v[N];
    kiln_tensor *x = random_f32(ctx, &r, N, v);
    reset();
    long loads = 0, allocs = 0;
    for (int step = 0; step < 3; step++) {
        kiln_tensor *s = kiln_sum(x, 0, NULL, false);
        cr_assert_eq(kiln_realize(s), KILN_OK, "step %d: %s", step, kiln_error_message(s));
        cr_assert_eq(fake_counter("fake_cuda_last_grid"), 256, "step %d: a grid of %ld blocks",
                     step, fake_counter("fake_cuda_last_grid"));
        cr_assert_eq(fake_counter("fake_cuda_last_block"), 256);
        if (step == 0) {
            const char *ptx = module_text();
            cr_assert(strstr(ptx, ".global") && strstr(ptx, "kh_n_") && strstr(ptx, "kh_p0_"),
                      "the module declares no scratch:\n%s", ptx);
            cr_assert(strstr(ptx, "atom.global.add.u32"), "no count taken:\n%s", ptx);
            allocs = fake_counter("fake_cuda_allocs");
            loads = fake_counter("fake_cuda_module_loads");
        }
        kiln_release(s);
    }
    cr_assert_eq(fake_counter("fake_cuda_module_loads"), loads, "the module loaded again");
    cr_assert_eq(fake_counter("fake_cuda_allocs"), allocs, "later runs allocated device memory");
    /* three launches, each "name out in", with the same arguments */
    int lines = 0;
    for (const char *p = *log; *p; p++)
        lines += *p == '\n';
    cr_assert_eq(lines, 3, "%d launches:\n%s", lines, *log);
    const char *l1 = *log, *l2 = strchr(l1, '\n');
    size_t len = (size_t)(l2 - l1) + 1;
    cr_assert(!strncmp(l1, l1 + len, len) && !strncmp(l1, l1 + 2 * len, len),
              "the runs' arguments differ:\n%s", *log);
    int spaces = 0;
    for (const char *p = l1; p < l2; p++)
        spaces += *p == ' ';
    cr_assert_eq(spaces, 2, "not two arguments: %.*s", (int)(l2 - l1), l1);
    dlclose(h);
    kiln_ctx_free(ctx);
}

/* The profiler on a device whose launches return before their kernels ran:
 * each launch is timed by the device's events (the fake's clock moves 250
 * us per launch; the host's would say a few microseconds), and rated
 * against the device's own limits, its f32 peak from its properties (132
 * SMs x 128 lanes x 2 flops at 1.98 GHz) and a device-to-device copy timed
 * the same way (the fake's runs at 2000 GB/s), not the host CPU's. */
Test(cuda_device, kernels_are_timed_by_device_events_against_device_limits) {
    setenv("FAKE_CUDA_KERNELS", "1", 1);
    setenv("FAKE_CUDA_KERNEL_US", "250", 1);
    setenv("FAKE_CUDA_GBPS", "2000", 1);
    kiln_ctx *ctx = open_fake(NULL);
    kiln_machine m;
    cr_assert_eq(kiln_machine_info(ctx, &m), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    cr_assert_str_eq(m.cpu, "kiln fake device");
    cr_assert_eq(m.threads, 132);
    double peak = 2.0 * 128 * 132 * 1.98e9 * 1e-9;
    cr_assert(fabs(m.gflops - peak) <= 1e-9 * peak, "gflops %g, expected %g", m.gflops, peak);
    cr_assert(fabs(m.gbps - 2000) <= 1e-3, "gbps %g, expected the copy's 2000", m.gbps);
    TU_RNG(r);
    enum { N = 1 << 16 };
    static float va[N], vb[N];
    kiln_tensor *a = random_f32(ctx, &r, N, va);
    kiln_tensor *b = random_f32(ctx, &r, N, vb);
    long launches0 = fake_counter("fake_cuda_launches");
    cr_assert_eq(kiln_profile_begin(ctx), KILN_OK);
    for (int step = 0; step < 3; step++) {
        kiln_tensor *y = kiln_add(kiln_mul(a, b), a);
        kiln_tensor *s = kiln_sum(kiln_exp(y), 0, NULL, false);
        cr_assert_eq(kiln_realize(s), KILN_OK, "%s", kiln_error_message(s));
        kiln_release(s);
        kiln_release(y);
    }
    cr_assert_eq(kiln_profile_end(ctx), KILN_OK);
    long launched = fake_counter("fake_cuda_launches") - launches0;
    int n = kiln_profile_count(ctx);
    cr_assert(n >= 1 && launched == 3L * n, "%d kernels in the profile, %ld launches", n,
              launched);
    for (int i = 0; i < n; i++) {
        kiln_kernel_profile k;
        cr_assert_eq(kiln_profile_kernel(ctx, i, &k), KILN_OK, "%s", kiln_ctx_last_error(ctx));
        cr_assert_eq(k.launches, 3, "%s: %lld launches", k.name, (long long)k.launches);
        cr_assert(fabs(k.mean_ms - 0.25) < 1e-6 && fabs(k.min_ms - 0.25) < 1e-6 &&
                      fabs(k.max_ms - 0.25) < 1e-6,
                  "%s: %g ms (min %g, max %g); the device's events say 0.25", k.name, k.mean_ms,
                  k.min_ms, k.max_ms);
        double gbps = k.bytes / 0.25 * 1e-6, gflops = k.flops / 0.25 * 1e-6;
        double want = 100 * fmax(gbps / m.gbps, gflops / m.gflops);
        cr_assert(k.bytes > 0 && fabs(k.pct_of_limit - want) <= 1e-6 * want,
                  "%s: %g%% of the limit, expected %g%% of the device's", k.name,
                  k.pct_of_limit, want);
    }
    kiln_ctx_free(ctx);
}

/* Five steps of one program, each step's input fresh and its results kept
 * until the next step's are made (so that buffers alternate and a replay
 * must rebind them), on the fake device that runs no kernel but logs each
 * one with its arguments; the log, and the launches made directly and as
 * graphs. */
static char *run_steps(const char *graphs, bool blas, long *direct, long *graphed, int *lines) {
    setenv("FAKE_CUDA_KERNELS", "1", 1);
    setenv("FAKE_CUDA_LOG", "1", 1);
    setenv("KILN_CUDA_GRAPHS", graphs, 1);
    if (blas) { /* the product between two segments of kernels */
        setenv("KILN_CUBLAS", "tests/libfake_cublas.so", 1);
        setenv("KILN_CUDA_MATMUL", "blas", 1);
    }
    kiln_ctx *ctx = open_fake(NULL);
    void *h = dlopen(FAKE, RTLD_NOW | RTLD_NOLOAD);
    cr_assert(h, "%s", dlerror());
    void (*reset)(void) = (void (*)(void))(uintptr_t)dlsym(h, "fake_cuda_log_reset");
    char **log = dlsym(h, "fake_cuda_log");
    cr_assert(reset && log);
    reset();
    long d0 = fake_counter("fake_cuda_launches"), g0 = fake_counter("fake_cuda_graph_launches");
    TU_RNG(r);
    enum { N = 64, K = 48, M = 40 };
    static float vx[N * K], vw[K * M], vb[M];
    kiln_tensor *w = random_f32(ctx, &r, K * M, vw), *b = random_f32(ctx, &r, M, vb);
    w = kiln_reshape(w, 2, (int64_t[]){K, M});
    kiln_tensor *keep[3] = {NULL, NULL, NULL};
    for (int step = 0; step < 5; step++) {
        kiln_tensor *x = kiln_reshape(random_f32(ctx, &r, N * K, vx), 2, (int64_t[]){N, K});
        /* with blas: the softmax of x minus its column means (kernels of their own),
         * the product, softmax */
        int ax0 = 0;
        kiln_tensor *xc = kiln_sub(kiln_tanh(x), kiln_mean(kiln_tanh(x), 1, &ax0, true));
        kiln_tensor *y = blas ? kiln_softmax(kiln_matmul(kiln_softmax(xc, -1), w), -1)
                              : kiln_softmax(kiln_tanh(kiln_add(kiln_matmul(x, w), b)), -1);
        kiln_tensor *s = kiln_sum(kiln_mul(y, y), 0, NULL, false);
        cr_assert_eq(kiln_realize(s), KILN_OK, "step %d: %s", step, kiln_error_message(s));
        for (int i = 0; i < 3; i++)
            kiln_release(keep[i]);
        keep[0] = x, keep[1] = y, keep[2] = s;
    }
    *direct = fake_counter("fake_cuda_launches") - d0;
    *graphed = fake_counter("fake_cuda_graph_launches") - g0;
    char *out = strdup(*log ? *log : "");
    kiln_ctx_free(ctx);
    dlclose(h);
    *lines = 0;
    for (const char *p = out; *p; p++)
        *lines += *p == '\n';
    return out;
}

/* A replayed step goes to the device as one CUDA graph, built when the same
 * launches come a second time and rebound where a step's buffers differ:
 * every kernel runs with exactly the arguments it runs with when each is
 * launched on its own (the fake's memory is laid out the same in both
 * contexts), and the buffers do change between steps, so a graph that kept
 * its first arguments would fail here. */
Test(cuda_device, a_replayed_step_is_one_cuda_graph_with_its_buffers_rebound) {
    long d_off, g_off, d_on, g_on;
    int lines_off, lines_on;
    char *off = run_steps("0", false, &d_off, &g_off, &lines_off);
    char *on = run_steps("1", false, &d_on, &g_on, &lines_on);
    int per_step = lines_off / 5;
    cr_assert(per_step >= 2 && lines_off == 5 * per_step, "%d kernels ran in 5 steps:\n%s",
              lines_off, off);
    cr_assert_eq(g_off, 0, "KILN_CUDA_GRAPHS=0 launched %ld graphs", g_off);
    cr_assert_eq(d_off, lines_off);
    cr_assert(g_on == 4 && d_on == per_step,
              "with graphs: %ld direct launches and %ld graph launches over 5 steps of %d "
              "kernels (expected the first step direct, the other four as graphs)",
              d_on, g_on, per_step);
    cr_assert_str_eq(on, off, "the kernels ran with other arguments through graphs");
    /* step 2's arguments differ from step 3's somewhere */
    const char *p = off;
    for (int i = 0; i < 2 * per_step; i++)
        p = strchr(p, '\n') + 1;
    const char *q = p;
    for (int i = 0; i < per_step; i++)
        q = strchr(q, '\n') + 1;
    cr_assert(strncmp(p, q, (size_t)(q - p)) != 0,
              "steps 3 and 4 used the same buffers; the test needs them to differ:\n%s", off);
    free(off);
    free(on);
}

/* ---- plain products through cuBLAS (a fake one computing on the host) ---- */

/* Products the fake cuBLAS and cuBLASLt computed (0 before kiln first
 * loads them). */
static long cublas_counter(const char *name) {
    void *h = dlopen("tests/libfake_cublas.so", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return 0;
    long *p = dlsym(h, name);
    cr_assert(p, "the fake cuBLAS lacks %s", name);
    long v = *p;
    dlclose(h);
    return v;
}

static long cublas_calls(void) {
    return cublas_counter("fake_cublas_calls") + cublas_counter("fake_cublaslt_calls");
}

/* x (rows x cols) from v, given as its transpose when `t` (a view whose rows
 * are contiguous: cuBLAS's op T). */
static kiln_tensor *matrix(kiln_ctx *ctx, kiln_dtype dt, int64_t batch, int64_t rows,
                           int64_t cols, bool t, const double *v) {
    int64_t n = batch * rows * cols;
    double *data = malloc(sizeof *data * (size_t)n);
    for (int64_t p = 0; p < batch; p++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                data[p * rows * cols + (t ? j * rows + i : i * cols + j)] =
                    v[p * rows * cols + i * cols + j];
    int64_t dims[3] = {batch, t ? cols : rows, t ? rows : cols};
    kiln_tensor *x = batch > 1 ? tu_tensor(ctx, dt, 3, dims, data)
                               : tu_tensor(ctx, dt, 2, dims + 1, data);
    free(data);
    return t ? kiln_transpose(x, -2, -1) : x;
}

/* One product on the fake device, checked against f64 arithmetic on the
 * same (rounded) values; whether it went to cuBLAS. */
enum { EPI_NONE, EPI_RELU, EPI_BIAS, EPI_RESIDUAL, EPI_BIAS_RELU };

/* kiln's relu: a NaN kept. */
static double relu_ref(double x) { return x > 0 || isnan(x) ? x : 0; }

static bool blas_case(kiln_ctx *ctx, kiln_dtype dt, int64_t batch, bool bcast_b, int64_t n,
                      int64_t k, int64_t m, bool ta, bool tb, int epi) {
    TU_RNG(r);
    int64_t bb = bcast_b ? 1 : batch;
    double *a = malloc(sizeof *a * (size_t)(batch * n * k)), *b = malloc(sizeof *b * (size_t)(bb * k * m));
    for (int64_t i = 0; i < batch * n * k; i++)
        a[i] = tu_round(dt, tu_unif(&r, -1, 1));
    for (int64_t i = 0; i < bb * k * m; i++)
        b[i] = tu_round(dt, tu_unif(&r, -1, 1));
    long calls = cublas_calls();
    double *e = malloc(sizeof *e * (size_t)(batch * n * m));
    for (int64_t i = 0; i < batch * n * m; i++)
        e[i] = tu_round(dt, tu_unif(&r, -1, 1));
    kiln_tensor *c = kiln_matmul(matrix(ctx, dt, batch, n, k, ta, a), matrix(ctx, dt, bb, k, m, tb, b));
    if (epi == EPI_RELU)
        c = kiln_relu(c);
    else if (epi == EPI_BIAS)
        c = kiln_add(c, tu_tensor(ctx, dt, 1, &m, e));
    else if (epi == EPI_RESIDUAL)
        c = kiln_add(c, matrix(ctx, dt, batch, n, m, false, e));
    else if (epi == EPI_BIAS_RELU)
        c = kiln_relu(kiln_add(c, tu_tensor(ctx, dt, 1, &m, e)));
    double *got = malloc(sizeof *got * (size_t)(batch * n * m));
    TU_READ(c, got, batch * n * m);
    bool used = cublas_calls() > calls;
    double tol = dt == KILN_F64 ? 1e-12 : dt == KILN_F32 ? 1e-5 : dt == KILN_F16 ? 2e-3 : 1.6e-2;
    for (int64_t p = 0; used && p < batch; p++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++) {
                double want = 0;
                for (int64_t q = 0; q < k; q++)
                    want += a[(p * n + i) * k + q] * b[((bcast_b ? 0 : p) * k + q) * m + j];
                want += epi == EPI_BIAS || epi == EPI_BIAS_RELU ? e[j]
                        : epi == EPI_RESIDUAL                     ? e[(p * n + i) * m + j]
                                                                  : 0;
                if (epi == EPI_RELU || epi == EPI_BIAS_RELU)
                    want = relu_ref(want);
                double g = got[(p * n + i) * m + j];
                cr_assert(fabs(g - want) <= tol * fmax(1, fabs(want)),
                          "%s [%lld]%lldx%lldx%lld%s%s%s: C[%lld][%lld][%lld] = %g, expected %g",
                          kiln_dtype_name(dt), (long long)batch, (long long)n, (long long)k,
                          (long long)m, ta ? " A^T" : "", tb ? " B^T" : "",
                          bcast_b ? " B broadcast" : "", (long long)p, (long long)i,
                          (long long)j, g, want);
            }
    free(a), free(b), free(e), free(got);
    return used;
}

/* A product (operands read in place, transposed or batched or broadcast
 * over the batch) goes to cuBLAS with the right operands, ops, leading
 * dimensions and strides, and with a bias or a residual added to cuBLASLt's
 * bias epilogue or its C: the fake computes it, and its values must be the
 * product's. A product with other fused work keeps its generated kernel. */
Test(cuda_device, products_go_to_cublas_with_the_right_layout_and_epilogue) {
    setenv("FAKE_CUDA_KERNELS", "1", 1);
    setenv("KILN_CUBLAS", "tests/libfake_cublas.so", 1);
    setenv("KILN_CUBLASLT", "tests/libfake_cublas.so", 1);
    setenv("KILN_CUDA_MATMUL", "blas", 1); /* one call per product, none measuring */
    kiln_ctx *ctx = open_fake(NULL);
    struct {
        kiln_dtype dt;
        int64_t batch;
        bool bcast, ta, tb;
    } cases[] = {
        {KILN_F32, 1, false, false, false}, {KILN_F32, 1, false, true, false},
        {KILN_F32, 1, false, false, true},  {KILN_F32, 1, false, true, true},
        {KILN_F32, 3, false, false, false}, {KILN_F32, 3, true, false, false},
        {KILN_F32, 3, false, true, true},   {KILN_F64, 1, false, false, true},
        {KILN_F16, 2, false, false, false}, {KILN_BF16, 1, false, true, false},
    };
    /* none, bias, residual; a half product with an addition rounds the
     * product to its dtype before adding (the reference does), which
     * cuBLASLt's epilogue would not: those keep their kernels */
    const int epis[] = {EPI_NONE, EPI_BIAS, EPI_RESIDUAL};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int e = 0; e < 3; e++) {
            int epi = epis[e];
            bool half = cases[i].dt == KILN_F16 || cases[i].dt == KILN_BF16;
            bool used = blas_case(ctx, cases[i].dt, cases[i].batch, cases[i].bcast, 33, 17, 29,
                                  cases[i].ta, cases[i].tb, epi);
            cr_assert(used == (epi == EPI_NONE || !half), "case %zu (%s, epilogue %d) %s", i,
                      kiln_dtype_name(cases[i].dt), epi,
                      used ? "went to cuBLAS" : "did not go to cuBLAS");
        }
    cr_assert(cublas_counter("fake_cublaslt_calls") == 16,
              "%ld products with a bias or residual went through cuBLASLt, not 16",
              cublas_counter("fake_cublaslt_calls"));
    /* relu after the product, with or without a bias (kiln_linear's weight
     * read transposed), keeps its kernel: cuBLASLt's RELU and RELU_BIAS are
     * not kiln's relu (jit/cuda/blas.c's epilogue_of) */
    const int acts[] = {EPI_RELU, EPI_BIAS_RELU};
    const kiln_dtype act_dts[] = {KILN_F32, KILN_F64};
    for (int a = 0; a < 2; a++)
        for (int d = 0; d < 2; d++)
            for (int tb = 0; tb < 2; tb++)
                cr_assert(!blas_case(ctx, act_dts[d], 1, false, 8, 8, 8, false, tb, acts[a]),
                          "matmul%s + %srelu (%s) went to cuBLAS, losing its fused relu",
                          tb ? " of B^T" : "", acts[a] == EPI_BIAS_RELU ? "bias + " : "",
                          kiln_dtype_name(act_dts[d]));
    kiln_ctx_free(ctx);
}

/* Checkpoints from and to device tensors: a computed tensor and a bound one
 * saved from a CUDA context come back bit for bit into another CUDA context
 * (and kiln_load_into overwrites a device tensor in place). The product is
 * cuBLAS's (the fake's, on the host), so the saved values are computed ones. */
Test(cuda_device, checkpoints_save_and_load_device_tensors) {
    setenv("FAKE_CUDA_KERNELS", "1", 1);
    setenv("KILN_CUBLAS", "tests/libfake_cublas.so", 1);
    kiln_ctx *ctx = open_fake(NULL);
    TU_RNG(r);
    static float va[40 * 30], vb[30 * 20], prod[40 * 20];
    kiln_tensor *a = kiln_reshape(random_f32(ctx, &r, 40 * 30, va), 2, (int64_t[]){40, 30});
    kiln_tensor *b = kiln_reshape(random_f32(ctx, &r, 30 * 20, vb), 2, (int64_t[]){30, 20});
    kiln_tensor *c = kiln_matmul(a, b);
    cr_assert_eq(kiln_to_host(c, prod, sizeof prod), KILN_OK, "%s", kiln_error_message(c));
    char path[] = "/tmp/kiln_cuda_ckpt_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    const char *names[] = {"a", "c"};
    kiln_tensor *ts[] = {a, c};
    cr_assert_eq(kiln_save(path, 2, names, ts), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    kiln_ctx *other = open_fake(NULL);
    int n = 0;
    char **got_names = NULL;
    kiln_tensor **got = NULL;
    cr_assert_eq(kiln_load(other, path, &n, &got_names, &got), KILN_OK, "%s",
                 kiln_ctx_last_error(other));
    cr_assert_eq(n, 2);
    cr_assert_str_eq(got_names[1], "c");
    cr_assert_eq(kiln_ctx_of(got[1]), other);
    expect_roundtrip(got[0], va, 40 * 30);
    expect_roundtrip(got[1], prod, 40 * 20);
    /* into an existing device tensor */
    kiln_tensor *into = kiln_zeros(other, KILN_F32, 2, (int64_t[]){40, 20});
    cr_assert_eq(kiln_load_into(path, 1, &names[1], &into), KILN_OK, "%s",
                 kiln_ctx_last_error(other));
    expect_roundtrip(into, prod, 40 * 20);
    kiln_free_names(n, got_names);
    for (int i = 0; i < n; i++)
        kiln_release(got[i]);
    free(got);
    unlink(path);
    kiln_ctx_free(other);
    kiln_ctx_free(ctx);
}

/* One product twice in a context, then once in a new one over the same disk
 * cache: its driver launches and cuBLAS calls. */
static void choice_run(const char *dir, int64_t n, long *launches, long *calls) {
    setenv("KILN_CACHE_DIR", dir, 1);
    for (int ctxs = 0; ctxs < 2; ctxs++) {
        kiln_ctx *ctx = open_fake(NULL);
        TU_RNG(r);
        static float va[64 * 64], vb[64 * 64];
        kiln_tensor *a = kiln_reshape(random_f32(ctx, &r, n * n, va), 2, (int64_t[]){n, n});
        kiln_tensor *b = kiln_reshape(random_f32(ctx, &r, n * n, vb), 2, (int64_t[]){n, n});
        for (int rep = 0; rep < (ctxs ? 1 : 2); rep++) {
            long l0 = fake_counter("fake_cuda_launches"), c0 = cublas_calls();
            kiln_tensor *c = kiln_matmul(a, b);
            cr_assert_eq(kiln_realize(c), KILN_OK, "%s", kiln_error_message(c));
            kiln_release(c);
            *launches++ = fake_counter("fake_cuda_launches") - l0;
            *calls++ = cublas_calls() - c0;
        }
        kiln_ctx_free(ctx);
    }
}

/* Whether a product runs through cuBLAS or its generated kernel is measured
 * at its first launch (each twice, the second timed: here the fake's
 * kernel takes 250 us and its cuBLAS 100 us, then 400), kept, and found on
 * disk by a new process, which measures nothing. */
Test(cuda_device, a_products_path_is_measured_once_and_kept_on_disk) {
    setenv("FAKE_CUDA_KERNELS", "1", 1);
    setenv("KILN_CUBLAS", "tests/libfake_cublas.so", 1);
    char d1[] = "/tmp/kiln_choice_XXXXXX", d2[] = "/tmp/kiln_choice_XXXXXX";
    cr_assert(mkdtemp(d1) && mkdtemp(d2));
    long launches[3], calls[3];
    setenv("FAKE_CUBLAS_US", "100", 1);
    choice_run(d1, 48, launches, calls);
    cr_assert(launches[0] == 2 && calls[0] == 2, "measuring: %ld kernels, %ld cuBLAS calls",
              launches[0], calls[0]);
    cr_assert(launches[1] == 0 && calls[1] == 1, "cuBLAS kept: %ld kernels, %ld calls",
              launches[1], calls[1]);
    cr_assert(launches[2] == 0 && calls[2] == 1, "a new context: %ld kernels, %ld calls",
              launches[2], calls[2]);
    setenv("FAKE_CUBLAS_US", "400", 1);
    choice_run(d2, 40, launches, calls);
    cr_assert(launches[0] == 2 && calls[0] == 2, "measuring: %ld kernels, %ld cuBLAS calls",
              launches[0], calls[0]);
    cr_assert(launches[1] == 1 && calls[1] == 0, "the kernel kept: %ld kernels, %ld calls",
              launches[1], calls[1]);
    cr_assert(launches[2] == 1 && calls[2] == 0, "a new context: %ld kernels, %ld calls",
              launches[2], calls[2]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", d1, d2);
    cr_assert_eq(system(cmd), 0);
}

/* A product through cuBLAS cuts a step's launches in two segments (the
 * softmax of x minus its column means before it; softmax and the sum
 * after): each becomes a graph of its own. */
Test(cuda_device, each_segment_between_cublas_products_is_a_graph) {
    long d_off, g_off, d_on, g_on;
    int lines_off, lines_on;
    char *off = run_steps("0", true, &d_off, &g_off, &lines_off);
    char *on = run_steps("1", true, &d_on, &g_on, &lines_on);
    int per_step = lines_off / 5;
    cr_assert(per_step >= 3 && lines_off == 5 * per_step && lines_on == lines_off,
              "%d and %d kernels ran in 5 steps:\n%s", lines_off, lines_on, off);
    cr_assert(g_on == 8 && d_on == per_step,
              "with graphs: %ld direct launches and %ld graph launches over 5 steps of %d "
              "kernels in two segments (expected the first step direct, then two graphs a "
              "step):\n%s",
              d_on, g_on, per_step, off);
    cr_assert_str_eq(on, off, "the kernels ran with other arguments through graphs");
    free(off);
    free(on);
}

/* DLPack on the GPU: an export is kDLCUDA, the device's own memory (the
 * fake's is host memory, so the test reads it directly), shared with the
 * tensor; imported into another CUDA context it is used in place, and a
 * product (the fake cuBLAS's) reads it there. The deleter runs once, when
 * the importing context lets go; a strided GPU tensor is refused. */
Test(cuda_device, dlpack_exchanges_gpu_memory_in_place) {
    setenv("FAKE_CUDA_KERNELS", "1", 1);
    setenv("KILN_CUBLAS", "tests/libfake_cublas.so", 1);
    setenv("KILN_CUDA_MATMUL", "blas", 1);
    kiln_ctx *ctx = open_fake(NULL);
    TU_RNG(r);
    static float va[12 * 10], vb[10 * 8];
    kiln_tensor *a = kiln_reshape(random_f32(ctx, &r, 12 * 10, va), 2, (int64_t[]){12, 10});
    kiln_tensor *b = kiln_reshape(random_f32(ctx, &r, 10 * 8, vb), 2, (int64_t[]){10, 8});
    DLManagedTensor *ma, *mb;
    cr_assert_eq(kiln_to_dlpack(a, &ma), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    cr_assert_eq(kiln_to_dlpack(b, &mb), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    cr_assert_eq(ma->dl_tensor.device.device_type, kDLCUDA);
    cr_assert_eq(ma->dl_tensor.device.device_id, 0);
    cr_assert(memcmp(ma->dl_tensor.data, va, sizeof va) == 0, "the export is not a's memory");
    kiln_ctx *other = open_fake(NULL);
    kiln_tensor *ia = kiln_from_dlpack(other, ma), *ib = kiln_from_dlpack(other, mb);
    TU_ASSERT_OK(ia);
    TU_ASSERT_OK(ib);
    expect_roundtrip(ia, va, 12 * 10);
    float c[12 * 8];
    kiln_tensor *p = kiln_matmul(ia, ib);
    cr_assert_eq(kiln_to_host(p, c, sizeof c), KILN_OK, "%s", kiln_error_message(p));
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 8; j++) {
            double want = 0;
            for (int q = 0; q < 10; q++)
                want += (double)va[i * 10 + q] * vb[q * 8 + j];
            cr_assert(fabs(c[i * 8 + j] - want) <= 1e-4 * fmax(1, fabs(want)),
                      "C[%d][%d] = %g, expected %g", i, j, c[i * 8 + j], want);
        }
    /* a strided export of another library is refused, its deleter run */
    DLManagedTensor *mc;
    cr_assert_eq(kiln_to_dlpack(a, &mc), KILN_OK);
    int64_t strides[2] = {1, 12};
    mc->dl_tensor.strides = strides;
    TU_ASSERT_ERROR(kiln_from_dlpack(other, mc), KILN_ERR_ARG, "strided kDLCUDA");
    kiln_ctx_free(other);
    kiln_ctx_free(ctx);
}

/* A context the machine cannot give is refused with a message saying why,
 * after every resource its opening took is given back: the driver's
 * context released (the fake counts retains), no device memory left. */
static void expect_refusal(const char *why, const char *also) {
    setenv("KILN_CUDA_DRIVER", FAKE, 1);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CUDA);
    const char *e = kiln_last_ctx_error();
    if (!ctx && strstr(e, "has no compiler"))
        cr_skip_test("no NVRTC, so no CUDA device opens: %s", e);
    cr_assert_null(ctx, "a context opened where it should have been refused for %s", why);
    cr_assert(strstr(e, "kiln_ctx_new: KILN_CUDA") && strstr(e, why) && (!also || strstr(e, also)),
              "message: %s", e);
    cr_assert_eq(fake_counter("fake_cuda_ctx_retained"), 0, "the driver's context is still held");
    cr_assert_eq(fake_counter("fake_cuda_allocs"), fake_counter("fake_cuda_frees"));
}

/* The same machine, asked again with what it has, opens: a refusal leaves
 * nothing behind that stops the next context. */
static void expect_next_opens(void) {
    unsetenv("FAKE_CUDA_DEVICES");
    unsetenv("FAKE_CUDA_CC");
    unsetenv("KILN_CUDA_DEVICE");
    kiln_ctx *ctx = open_fake(NULL);
    TU_RNG(r);
    float v[5];
    expect_roundtrip(random_f32(ctx, &r, 5, v), v, 5);
    kiln_ctx_free(ctx);
    cr_assert_eq(fake_counter("fake_cuda_ctx_retained"), 0);
}

Test(cuda_device, a_driver_without_a_gpu_is_refused_saying_so) {
    setenv("FAKE_CUDA_DEVICES", "0", 1);
    expect_refusal("no device", "no CUDA device is usable");
    /* what KILN_DEVICE=cuda's default context says too */
    setenv("KILN_DEVICE", "cuda", 1);
    cr_assert_null(kiln_ctx_new(KILN_DEVICE_DEFAULT));
    cr_assert(strstr(kiln_last_ctx_error(), "no device"), "message: %s", kiln_last_ctx_error());
    unsetenv("KILN_DEVICE");
    expect_next_opens();
}

Test(cuda_device, an_ordinal_beyond_the_devices_is_refused_naming_both) {
    setenv("FAKE_CUDA_DEVICES", "2", 1);
    setenv("KILN_CUDA_DEVICE", "2", 1);
    expect_refusal("no CUDA device 2", "there are 2");
    expect_next_opens();
}

/* A Kepler (sm_35), which NVRTC no longer compiles for since CUDA 12: the
 * message names the device, its architecture and those NVRTC knows. */
Test(cuda_device, an_architecture_nvrtc_cannot_compile_for_is_refused) {
    setenv("FAKE_CUDA_CC", "35", 1);
    expect_refusal("sm_35", "kiln fake device");
    cr_assert(strstr(kiln_last_ctx_error(), "cannot compile for") &&
                  strstr(kiln_last_ctx_error(), "it knows sm_"),
              "message: %s", kiln_last_ctx_error());
    expect_next_opens();
}

/* ---- matmul epilogues and the limits products are rated against ---- */

/* x [6, 9], w [5, 9] and b [5] of f32 on ctx, a NaN in x's row 2. */
static void linear_operands(kiln_ctx *ctx, kiln_tensor **x, kiln_tensor **w, kiln_tensor **b,
                            float *vx, float *vw, float *vb) {
    TU_RNG(r);
    for (int i = 0; i < 6 * 9; i++)
        vx[i] = (float)tu_unif(&r, -1, 1);
    for (int i = 0; i < 5 * 9; i++)
        vw[i] = (float)tu_unif(&r, -1, 1);
    for (int i = 0; i < 5; i++)
        vb[i] = (float)tu_unif(&r, -1, 1);
    vx[2 * 9 + 4] = NAN;
    *x = kiln_from_data(ctx, KILN_F32, 2, (int64_t[]){6, 9}, vx);
    *w = kiln_from_data(ctx, KILN_F32, 2, (int64_t[]){5, 9}, vw);
    *b = kiln_from_data(ctx, KILN_F32, 1, (int64_t[]){5}, vb);
}

/* kiln_linear goes to cuBLASLt's bias epilogue, the fake computing it: its
 * values are the reference's element by element, the NaN in x carried to
 * its row. Followed by kiln_relu, which keeps that NaN, it keeps its
 * generated kernel: cuBLASLt's RELU_BIAS is documented as max(x, 0), which
 * may make the NaN 0 (jit/cuda/blas.c's epilogue_of). */
Test(cuda_device, linear_goes_to_cublaslt_and_linear_relu_keeps_its_kernel) {
    setenv("FAKE_CUDA_KERNELS", "1", 1);
    setenv("KILN_CUBLAS", "tests/libfake_cublas.so", 1);
    setenv("KILN_CUBLASLT", "tests/libfake_cublas.so", 1);
    setenv("KILN_CUDA_MATMUL", "blas", 1);
    kiln_ctx *ctx = open_fake(NULL);
    float vx[6 * 9], vw[5 * 9], vb[5], y[6 * 5];
    kiln_tensor *x, *w, *b;
    linear_operands(ctx, &x, &w, &b, vx, vw, vb);
    long lt = cublas_counter("fake_cublaslt_calls");
    kiln_tensor *lin = kiln_linear(x, w, b);
    cr_assert_eq(kiln_to_host(lin, y, sizeof y), KILN_OK, "%s", kiln_error_message(lin));
    cr_assert_eq(cublas_counter("fake_cublaslt_calls") - lt, 1,
                 "kiln_linear did not go to cuBLASLt's bias epilogue");
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 5; j++) {
            double want = vb[j];
            for (int q = 0; q < 9; q++)
                want += (double)vx[i * 9 + q] * vw[j * 9 + q];
            double got = y[i * 5 + j];
            cr_assert(isnan(want) ? isnan(got) : fabs(got - want) <= 1e-5 * fmax(1, fabs(want)),
                      "linear[%d][%d] = %g, expected %g", i, j, got, want);
        }
    /* fresh operands: the product must not be the one realized above */
    linear_operands(ctx, &x, &w, &b, vx, vw, vb);
    long calls = cublas_calls();
    kiln_tensor *act = kiln_relu(kiln_linear(x, w, b));
    cr_assert_eq(kiln_realize(act), KILN_OK, "%s", kiln_error_message(act));
    cr_assert_eq(cublas_calls(), calls,
                 "kiln_relu(kiln_linear) went to cuBLAS, whose relu may make a NaN 0");
    kiln_ctx_free(ctx);
}

/* The fake device's tensor-core peak for `rate` dense f16 multiply-adds per
 * clock per multiprocessor: 132 of them at 1.98 GHz, 2 flops each. */
static double tensor_peak(int rate) { return 2.0 * rate * 132 * 1.98e9 * 1e-9; }

typedef struct product_profile {
    double pct, gflops, gbps;
    bool compute; /* the compute term binds */
} product_profile;

/* One n x n x n product of two dt operands made by kiln_rand and realized
 * first (so that the profile holds the product alone), profiled on a fresh
 * fake device; its line, and the device's limits in *m. */
static product_profile profile_product(kiln_dtype dt, int64_t n, kiln_machine *m) {
    kiln_ctx *ctx = open_fake("268435456");
    cr_assert_eq(kiln_machine_info(ctx, m), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    int64_t dims[2] = {n, n};
    kiln_tensor *a = kiln_rand(ctx, dt, 2, dims, 1), *b = kiln_rand(ctx, dt, 2, dims, 2);
    cr_assert_eq(kiln_realize(a), KILN_OK, "%s", kiln_error_message(a));
    cr_assert_eq(kiln_realize(b), KILN_OK, "%s", kiln_error_message(b));
    cr_assert_eq(kiln_profile_begin(ctx), KILN_OK);
    kiln_tensor *c = kiln_matmul(a, b);
    cr_assert_eq(kiln_realize(c), KILN_OK, "%s", kiln_error_message(c));
    cr_assert_eq(kiln_profile_end(ctx), KILN_OK);
    cr_assert_eq(kiln_profile_count(ctx), 1, "%d kernels profiled", kiln_profile_count(ctx));
    kiln_kernel_profile k;
    cr_assert_eq(kiln_profile_kernel(ctx, 0, &k), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    double flops = 2.0 * (double)n * (double)n * (double)n;
    cr_assert(fabs(k.flops - flops) <= 1e-9 * flops && fabs(k.mean_ms - 0.25) < 1e-6,
              "%s: %g flops in %g ms, expected the product's %g in 0.25", k.name, k.flops,
              k.mean_ms, flops);
    product_profile p = {k.pct_of_limit, k.gflops, k.gbps, !strcmp(k.bound, "compute")};
    kiln_ctx_free(ctx);
    return p;
}

/* The share that the roofline of bandwidth m->gbps and compute peak `peak`
 * gives a profiled product. */
static double roofline_pct(product_profile p, const kiln_machine *m, double peak) {
    return 100 * fmax(p.gbps / m->gbps, p.gflops / peak);
}

/* A generated product whose plan runs it on the tensor cores (f16 and bf16,
 * f32 through TF32 under KILN_ALLOW_TF32=1) is rated against their peak by
 * compute capability: sm_90 2048 f16 multiply-adds per clock and SM, sm_80
 * 1024, TF32 half; an f32 product without TF32 against the f32 peak. At
 * 2048^3 in 250 us each binds on compute, so the percentage is the peak's. */
Test(cuda_device, products_on_tensor_cores_are_rated_against_their_peak) {
    setenv("FAKE_CUDA_KERNELS", "1", 1);
    setenv("FAKE_CUDA_KERNEL_US", "250", 1);
    setenv("FAKE_CUDA_GBPS", "2000", 1);
    setenv("KILN_CUDA_MATMUL", "kernel", 1);
    struct {
        kiln_dtype dt;
        const char *cc, *tf32;
        int rate; /* 0: the f32 peak */
    } cases[] = {
        {KILN_F16, "90", "0", 2048}, {KILN_BF16, "90", "0", 2048}, {KILN_F32, "90", "1", 1024},
        {KILN_F32, "90", "0", 0},    {KILN_F16, "80", "0", 1024},  {KILN_F32, "80", "1", 512},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("FAKE_CUDA_CC", cases[i].cc, 1);
        setenv("KILN_ALLOW_TF32", cases[i].tf32, 1);
        kiln_machine m;
        product_profile p = profile_product(cases[i].dt, 2048, &m);
        double peak = cases[i].rate ? tensor_peak(cases[i].rate) : m.gflops;
        double want = roofline_pct(p, &m, peak);
        cr_assert(p.compute && fabs(p.pct - want) <= 1e-6 * want,
                  "%s on sm_%s (TF32 %s): %g%% of the limit (%s bound), expected %g%% of a "
                  "%g GFLOP/s peak", kiln_dtype_name(cases[i].dt), cases[i].cc, cases[i].tf32,
                  p.pct, p.compute ? "compute" : "memory", want, peak);
    }
}

/* Products through cuBLAS are rated the same way by their dtype: f16 on the
 * tensor cores, f32 through TF32 when allowed, else on the FMA lanes. At
 * 256^3 in 250 us the tensor cores' products bind on memory, and would bind
 * on compute, with another percentage, against the f32 peak. */
Test(cuda_device, cublas_products_are_rated_against_the_peak_of_their_dtype) {
    setenv("FAKE_CUDA_KERNELS", "1", 1);
    setenv("FAKE_CUBLAS_US", "250", 1);
    setenv("FAKE_CUDA_GBPS", "2000", 1);
    setenv("KILN_CUBLAS", "tests/libfake_cublas.so", 1);
    setenv("KILN_CUDA_MATMUL", "blas", 1);
    struct {
        kiln_dtype dt;
        const char *tf32;
        int rate;
    } cases[] = {{KILN_F16, "0", 2048}, {KILN_F32, "1", 1024}, {KILN_F32, "0", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("KILN_ALLOW_TF32", cases[i].tf32, 1);
        kiln_machine m;
        long calls = cublas_calls();
        product_profile p = profile_product(cases[i].dt, 256, &m);
        cr_assert_eq(cublas_calls() - calls, 1, "the %s product did not go to cuBLAS",
                     kiln_dtype_name(cases[i].dt));
        double peak = cases[i].rate ? tensor_peak(cases[i].rate) : m.gflops;
        double want = roofline_pct(p, &m, peak);
        cr_assert(p.compute == !cases[i].rate && fabs(p.pct - want) <= 1e-6 * want,
                  "cuBLAS %s (TF32 %s): %g%% of the limit (%s bound), expected %g%% of a %g "
                  "GFLOP/s peak", kiln_dtype_name(cases[i].dt), cases[i].tf32, p.pct,
                  p.compute ? "compute" : "memory", want, peak);
    }
}
