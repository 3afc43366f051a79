/* compiler_test.c — the C compiler as a process that can misbehave: one that
 * never returns is killed after KILN_COMPILE_TIMEOUT, one that is missing or
 * killed is reported as such (not as "status -1" with an empty log), and one
 * that exits 0 but writes garbage has nothing stored in the cache. Each case
 * runs in its own process (Criterion's), with its own cache directory and a
 * KILN_CC script written here; the sync point fails with KILN_ERR_COMPILE and
 * a message, and the process carries on. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/kiln.h"

static char dir[256];

static void fresh_dir(void) {
    const char *t = getenv("TEST_TMPDIR");
    snprintf(dir, sizeof dir, "%s/kiln-cc-XXXXXX", t && *t ? t : "/tmp");
    cr_assert(mkdtemp(dir));
    char cache[300];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    setenv("KILN_CACHE_DIR", cache, 1);
}

/* A KILN_CC script named name: answers --version with version, then runs
 * body. */
static void fake_cc_version(const char *name, const char *version, const char *body) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "#!/bin/sh\ncase \"$1\" in --version) echo '%s'; exit 0;; esac\n%s\n", version,
            body);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(path, 0700), 0);
    setenv("KILN_CC", path, 1);
}

static void fake_cc_named(const char *name, const char *body) {
    fake_cc_version(name, "fake-cc 1.0", body);
}

static void fake_cc(const char *body) { fake_cc_named("cc.sh", body); }

static int count_so(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    static int n;
    if (!path) {
        int r = n;
        n = 0;
        return r;
    }
    size_t len = strlen(path);
    if (flag == FTW_F && len > 3 && strcmp(path + len - 3, ".so") == 0)
        n++;
    return 0;
}

static int objects_in_cache(void) {
    char cache[300];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    count_so(NULL, NULL, 0, NULL);
    nftw(cache, count_so, 16, FTW_PHYS);
    return count_so(NULL, NULL, 0, NULL);
}

/* A fresh program (its own constant) on a new context: fails to compile with
 * a message holding every one of want. */
static void expect_compile_failure(const char *const *want) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    cr_assert(ctx, "%s", kiln_last_ctx_error());
    kiln_tensor *a = kiln_randn(ctx, KILN_F32, 1, (const int64_t[]){1000}, 11);
    float v[1000];
    kiln_status st = kiln_to_host(kiln_exp(a), v, sizeof v);
    cr_assert_eq(st, KILN_ERR_COMPILE, "status %d: %s", (int)st, kiln_ctx_last_error(ctx));
    const char *m = kiln_ctx_last_error(ctx);
    for (int i = 0; want[i]; i++)
        cr_assert(strstr(m, want[i]), "\"%s\" not in: %s", want[i], m);
    kiln_ctx_free(ctx);
}

Test(compiler, hanging_compiler_is_killed_after_the_timeout, .timeout = 60) {
    fresh_dir();
    fake_cc("sleep 1000");
    setenv("KILN_COMPILE_TIMEOUT", "1", 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    expect_compile_failure((const char *[]){"did not finish within 1 s", "KILN_COMPILE_TIMEOUT", NULL});
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_assert(s < 20, "the sync took %.1f s", s);
}

Test(compiler, missing_compiler_is_named) {
    fresh_dir();
    setenv("KILN_CC", "/nonexistent/kiln-cc", 1);
    expect_compile_failure((const char *[]){"/nonexistent/kiln-cc", "could not be started", NULL});
}

Test(compiler, killed_compiler_is_reported) {
    fresh_dir();
    fake_cc("echo dying >&2; kill -9 $$");
    expect_compile_failure((const char *[]){"killed by signal 9", "dying", NULL});
}

Test(compiler, garbage_output_never_reaches_the_cache) {
    fresh_dir();
    fake_cc("while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then echo garbage > \"$2\"; fi; shift; done; exit 0");
    expect_compile_failure((const char *[]){"cannot load", NULL});
    cr_assert_eq(objects_in_cache(), 0, "an object that does not load was cached");
    /* the real compiler afterwards: the program compiles, runs and is cached */
    unsetenv("KILN_CC");
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    kiln_tensor *a = kiln_randn(ctx, KILN_F32, 1, (const int64_t[]){1000}, 11);
    float v[1000];
    cr_assert_eq(kiln_to_host(kiln_exp(a), v, sizeof v), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    cr_assert(v[0] > 0 && v[999] > 0);
    kiln_ctx_free(ctx);
    cr_assert(objects_in_cache() >= 1, "the good object was not cached");
}

/* Two compilers that print the same --version, one adding -ffast-math: the
 * cache keys differ (they once shared entries, and the fast-math objects
 * poisoned NaN semantics for every later process). */
static kiln_stats run_program(void) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    kiln_tensor *a = kiln_randn(ctx, KILN_F32, 1, (const int64_t[]){1000}, 11);
    float v[1000];
    cr_assert_eq(kiln_to_host(kiln_sqrt(kiln_exp(a)), v, sizeof v), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    kiln_stats s = kiln_ctx_stats(ctx);
    kiln_ctx_free(ctx);
    return s;
}

Test(compiler, wrappers_with_other_flags_get_other_keys) {
    fresh_dir();
    fake_cc_named("plain.sh", "exec cc \"$@\"");
    kiln_stats first = run_program();
    cr_assert(first.compiles >= 1);
    kiln_stats again = run_program();
    cr_assert(again.compiles == 0 && again.disk_hits >= 1, "the same compiler: %lld compiles, %lld disk hits",
              (long long)again.compiles, (long long)again.disk_hits);
    fake_cc_named("fast.sh", "exec cc -ffast-math \"$@\"");
    kiln_stats fast = run_program();
    cr_assert(fast.disk_hits == 0 && fast.compiles >= 1,
              "a -ffast-math wrapper reused %lld cached objects", (long long)fast.disk_hits);
}

/* A cache directory too deep for a build directory inside it (its path 11
 * characters short of PATH_MAX) once failed every new graph with KILN_ERR_COMPILE: the code is
 * now built under $TMPDIR or /tmp, and the program runs. */
Test(compiler, unusable_cache_directory_falls_back) {
    fresh_dir();
    char deep[4200];
    int n = snprintf(deep, sizeof deep, "%s", dir);
    char part[201];
    memset(part, 'd', 200);
    part[200] = 0;
    /* 4085 characters: a valid directory, but no room for kiln-build-XXXXXX */
    while (n < 4085) {
        int len = 4085 - n - 1 < 200 ? 4085 - n - 1 : 200;
        n += snprintf(deep + n, sizeof deep - (size_t)n, "/%.*s", len, part);
        cr_assert(mkdir(deep, 0700) == 0 || errno == EEXIST, "mkdir %d chars: %s", n, strerror(errno));
    }
    setenv("KILN_CACHE_DIR", deep, 1);
    kiln_stats s = run_program();
    cr_assert(s.compiles >= 1);
}

/* A disk cache that is off is said, once, at KILN_DEBUG=1, with the reason. */
/* Lines of /proc/self/maps that map a file of a private build directory
 * (where objects are built when the disk cache cannot keep them). */
static int build_mappings(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "/kiln-build-") != NULL;
    fclose(f);
    return n;
}

/* A memory-only cache (the disk level off) once built and mapped each
 * program again for every context, and the mappings of RTLD_NODELETE
 * objects are never undone: a process making contexts in a loop grew
 * without bound. The process now keeps one mapping per program. */
Test(compiler, memory_only_contexts_share_their_objects) {
    fresh_dir();
    setenv("KILN_CACHE_MAX_BYTES", "lots", 1);
    kiln_stats first = run_program();
    cr_assert(first.compiles >= 1);
    int after_one = build_mappings();
    cr_assert(after_one >= 1, "the object is not mapped from a build directory");
    for (int i = 0; i < 4; i++) {
        kiln_stats again = run_program();
        cr_assert_eq(again.compiles, 0, "context %d compiled again", i + 2);
    }
    cr_assert_eq(build_mappings(), after_one, "mappings grew from %d to %d", after_one,
                 build_mappings());
}

Test(compiler, disk_cache_off_is_said_once) {
    fresh_dir();
    setenv("KILN_CACHE_MAX_BYTES", "lots", 1);
    setenv("KILN_DEBUG", "1", 1);
    char log[300];
    snprintf(log, sizeof log, "%s/stderr", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    kiln_stats s1 = run_program(), s2 = run_program();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    cr_assert(s1.compiles >= 1 && s2.compiles >= 0);
    FILE *f = fopen(log, "r");
    cr_assert(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *first = strstr(text, "the disk cache is off");
    cr_assert(first, "nothing said: %s", text);
    cr_assert(strstr(first, "KILN_CACHE_MAX_BYTES"), "no reason: %s", text);
    cr_assert_null(strstr(first + 1, "the disk cache is off"), "said twice: %s", text);
}

/* One sync of 30 independent row sums and their cat: 31 kernels, so with
 * KILN_COMPILE_JOBS=3 the program is compiled as 3 translation units at once
 * and linked. Returns the status; the values go to out (30 x 7). */
static kiln_status many_kernels(kiln_ctx *ctx, float *out) {
    kiln_tensor *rows[30];
    int ax = 1;
    for (int i = 0; i < 30; i++)
        /* rows of different lengths: kernels of different texts (equal
         * ones would compile once, fold_twins) */
        rows[i] = kiln_sum(kiln_mul_scalar(kiln_randn(ctx, KILN_F32, 2, (const int64_t[]){7, 19 + i},
                                                      100 + (uint64_t)i), 1.0 + i),
                           1, &ax, false);
    return kiln_to_host(kiln_cat(30, rows, 0), out, sizeof(float) * 30 * 7);
}

Test(compiler, a_large_program_compiles_in_parts_that_agree_with_the_reference) {
    fresh_dir();
    unsetenv("KILN_CC");
    setenv("KILN_COMPILE_JOBS", "3", 1);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    static float got[210], want[210];
    cr_assert_eq(many_kernels(ctx, got), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    cr_assert_eq(many_kernels(ref, want), KILN_OK, "%s", kiln_ctx_last_error(ref));
    for (int i = 0; i < 210; i++)
        cr_assert(fabsf(got[i] - want[i]) <= 1e-4f * (1 + fabsf(want[i])), "%d: %g vs %g", i,
                  (double)got[i], (double)want[i]);
    cr_assert_eq(kiln_ctx_stats(ctx).kernels, 31);
    cr_assert_eq(objects_in_cache(), 1, "the parts are one cached object");
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
    unsetenv("KILN_COMPILE_JOBS");
}

/* The units of a program compiled in parts are dealt by expected compile
 * time, not cut into runs of equal text: two products (the costly kernels)
 * and 30 row sums with their cat, in two units, put one product in each.
 * Cut by text, the products (the program's first kernels, a third of its
 * text) shared the first unit. A logging KILN_CC counts the products in
 * each unit it compiles, then runs the real cc. */
/* A fresh context on 2 compile jobs whose compiler, a logging KILN_CC that
 * then runs the real cc, appends `per_unit`'s output (a shell command of
 * "$a", the unit's source) to dir/parts for each translation unit. */
static kiln_ctx *logging_units(const char *per_unit) {
    fresh_dir();
    char body[600];
    snprintf(body, sizeof body,
             "for a; do case \"$a\" in *part*.c) %s >> %s/parts;; esac; done\nexec cc \"$@\"",
             per_unit, dir);
    fake_cc(body);
    setenv("KILN_COMPILE_JOBS", "2", 1);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    cr_assert(ctx);
    return ctx;
}

Test(compiler, costly_kernels_are_dealt_to_different_units) {
    kiln_ctx *ctx = logging_units("grep -c '^void matmul' \"$a\"");
    kiln_tensor *parts[32];
    for (int i = 0; i < 2; i++) {
        /* of two shapes: equal products would compile once (fold_twins) */
        const int64_t ad[2] = {64, 96}, bd[2] = {96, 80 - 8 * i}, flat = 64 * (80 - 8 * i);
        parts[i] = kiln_reshape(kiln_matmul(kiln_randn(ctx, KILN_F32, 2, ad, 1 + 2 * (uint64_t)i),
                                            kiln_randn(ctx, KILN_F32, 2, bd, 2 + 2 * (uint64_t)i)),
                                1, &flat);
    }
    int ax = 1;
    for (int i = 0; i < 30; i++)
        parts[2 + i] = kiln_sum(kiln_randn(ctx, KILN_F32, 2, (const int64_t[]){3 + i, 5}, 10 + (uint64_t)i),
                                1, &ax, false);
    cr_assert_eq(kiln_realize(kiln_cat(32, parts, 0)), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    kiln_ctx_free(ctx);
    unsetenv("KILN_COMPILE_JOBS");
    unsetenv("KILN_CC");
    char path[300];
    snprintf(path, sizeof path, "%s/parts", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "the program was not compiled in parts");
    int counts[8], n = 0;
    while (n < 8 && fscanf(f, "%d", &counts[n]) == 1)
        n++;
    fclose(f);
    cr_assert_eq(n, 2, "%d units", n);
    cr_assert(counts[0] == 1 && counts[1] == 1, "products per unit: %d and %d", counts[0],
              counts[1]);
}

/* More units than cores come in whole rounds of them: 150 kernels need 3
 * units of at most 64, and on 2 cores are 4, so that no unit compiles
 * alone at the end (GPT-2's step: 9 units took 12.7 s, 10 units 11.2). */
Test(compiler, units_past_the_cores_come_in_whole_rounds) {
    kiln_ctx *ctx = logging_units("echo \"$a\"");
    enum { N = 75 }; /* a sum each, and a region of the cat each */
    kiln_tensor *rows[N];
    int ax = 1;
    for (int i = 0; i < N; i++)
        rows[i] = kiln_sum(kiln_randn(ctx, KILN_F32, 2, (const int64_t[]){2 + i % 7, 65 + i},
                                      300 + (uint64_t)i),
                           1, &ax, false);
    int64_t before = kiln_ctx_stats(ctx).kernels;
    cr_assert_eq(kiln_realize(kiln_cat(N, rows, 0)), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    int64_t kernels = kiln_ctx_stats(ctx).kernels - before;
    kiln_ctx_free(ctx);
    unsetenv("KILN_COMPILE_JOBS");
    unsetenv("KILN_CC");
    cr_assert(kernels > 128 && kernels <= 192, "%lld kernels", (long long)kernels);
    char path[300];
    snprintf(path, sizeof path, "%s/parts", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "the program was not compiled in parts");
    int units = 0;
    char line[512];
    while (fgets(line, sizeof line, f))
        units++;
    fclose(f);
    cr_assert_eq(units, 4, "%d units", units);
}

/* A part that fails to compile fails the sync with the compiler's words;
 * the parts that compiled are not cached. */
Test(compiler, a_failing_part_is_reported) {
    fresh_dir();
    setenv("KILN_COMPILE_JOBS", "3", 1);
    fake_cc("for a in \"$@\"; do case \"$a\" in *part1.c) echo \"part1.c:1: error: nope\" >&2; "
            "exit 1;; esac; done; exec cc \"$@\"");
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    static float got[210];
    kiln_status st = many_kernels(ctx, got);
    cr_assert_eq(st, KILN_ERR_COMPILE, "status %d: %s", (int)st, kiln_ctx_last_error(ctx));
    cr_assert(strstr(kiln_ctx_last_error(ctx), "part1.c:1: error: nope"), "%s",
              kiln_ctx_last_error(ctx));
    cr_assert_eq(objects_in_cache(), 0);
    kiln_ctx_free(ctx);
    unsetenv("KILN_COMPILE_JOBS");
    unsetenv("KILN_CC");
}

/* The optimisation, vector-width and tuning flags a logging KILN_CC answering
 * --version with version (that then runs the real cc) was given while a
 * program of n elements of exp compiled, into opt. */
static void flags_for(const char *version, int64_t n, char *opt, size_t cap) {
    fresh_dir();
    char body[600];
    snprintf(body, sizeof body,
             "for a; do case \"$a\" in -O*|-mprefer*|-mtune-ctrl*) echo \"$a\" >> %s/opt;; esac; done\n"
             "exec cc \"$@\"",
             dir);
    fake_cc_version(version[0] == 'c' ? "clang.sh" : "cc.sh", version, body);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    cr_assert(ctx);
    kiln_tensor *a = kiln_randn(ctx, KILN_F32, 1, &n, 12);
    cr_assert_eq(kiln_realize(kiln_exp(a)), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    kiln_ctx_free(ctx);
    char path[300];
    snprintf(path, sizeof path, "%s/opt", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "the compiler never ran");
    size_t got = fread(opt, 1, cap - 1, f);
    opt[got] = 0;
    fclose(f);
    unsetenv("KILN_CC");
}

/* A unit of only tiny kernels (the plan leaves them scalar) compiles at -O1,
 * in two thirds of -O3's time; any other at -O3. */
Test(compiler, tiny_kernels_compile_at_O1) {
    char opt[256];
    flags_for("fake-cc 1.0", 21, opt, sizeof opt);
    cr_assert(strstr(opt, "-O1") && !strstr(opt, "-O3"), "a tiny program compiled with: %s", opt);
    flags_for("fake-cc 1.0", 100000, opt, sizeof opt);
    cr_assert(strstr(opt, "-O3") && !strstr(opt, "-O1"), "a large program compiled with: %s", opt);
}

/* The compiler `told` compiles with flag on this host (host; else the test
 * is skipped for skip's reason), and the compiler `untold` does not. */
static void host_flag_case(bool host, const char *skip, const char *told, const char *untold,
                           const char *flag) {
    if (!host)
        cr_skip_test("%s", skip);
    char opt[256];
    flags_for(told, 100000, opt, sizeof opt);
    cr_assert(strstr(opt, flag), "%s compiled with: %s", told, opt);
    flags_for(untold, 100000, opt, sizeof opt);
    cr_assert(!strstr(opt, flag), "%s compiled with: %s", untold, opt);
}

static bool host_is(bool amd, bool avx512) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return (!amd || __builtin_cpu_is("amd")) && !!__builtin_cpu_supports("avx512f") == avx512;
#else
    (void)amd;
    (void)avx512;
    return false;
#endif
}

/* clang on an AVX-512 host is told -mprefer-vector-width=512 (its
 * -march=native prefers 256-bit vectors for the loops it vectorises; gcc is
 * told per kernel in the source), and no other compiler is. */
Test(compiler, clang_is_told_512_bit_vectors) {
    host_flag_case(host_is(false, true), "no AVX-512 on this host",
                   "clang version 99.0.0, a stand-in", "fake-cc 1.0", "-mprefer-vector-width=512");
}

/* gcc on an AMD host without AVX-512 (Zen 3) is told not to vectorise
 * through gathers (its tuning turns them on, and there they made the CNN's
 * pooling backward 4x slower than scalar loads); clang is not told (the
 * flag is gcc's). Skipped on other hosts. */
Test(compiler, gcc_on_zen3_vectorises_without_gathers) {
    host_flag_case(host_is(true, false), "not an AMD host without AVX-512", "fake-cc 1.0",
                   "clang version 99.0.0, a stand-in", "-mtune-ctrl=^use_gather");
}

/* Kernels whose text is the same but for their names (a model's repeated
 * layers) are compiled once: the later ones become aliases of the first
 * (compile.c, fold_twins). Eight chains alike over eight inputs, at one sync
 * through eight assignments: each output still comes from its own input. */
Test(compiler, repeated_kernels_compile_once) {
    fresh_dir();
    char body[600];
    snprintf(body, sizeof body,
             "for a; do case \"$a\" in *.c) cat \"$a\" >> %s/src;; esac; done\nexec cc \"$@\"", dir);
    fake_cc(body);
    enum { N = 8, E = 1000 };
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    cr_assert(ctx && ref);
    const int64_t e = E;
    static float got[N][E], want[N][E];
    kiln_ctx *both[2] = {ctx, ref};
    for (int c = 0; c < 2; c++) {
        kiln_tensor *dst[N], *x[N], *w[N];
        for (int i = 0; i < N; i++) {
            /* products: elementwise chains of one shape would fuse into
             * one kernel */
            x[i] = kiln_randn(both[c], KILN_F32, 2, (const int64_t[]){E / 10, 10}, 40 + (uint64_t)i);
            w[i] = kiln_randn(both[c], KILN_F32, 2, (const int64_t[]){10, 10}, 80 + (uint64_t)i);
            dst[i] = kiln_zeros(both[c], KILN_F32, 1, &e);
            cr_assert_eq(kiln_realize(x[i]), KILN_OK);
            cr_assert_eq(kiln_realize(w[i]), KILN_OK);
            cr_assert_eq(kiln_realize(dst[i]), KILN_OK);
        }
        /* (a realize would run the assignments made before it) */
        for (int i = 0; i < N; i++) {
            kiln_tensor *y = kiln_reshape(kiln_tanh(kiln_matmul(x[i], w[i])), 1, &e);
            cr_assert_eq(kiln_assign(dst[i], y), KILN_OK, "%s", kiln_ctx_last_error(both[c]));
        }
        cr_assert_eq(kiln_sync(both[c]), KILN_OK, "%s", kiln_ctx_last_error(both[c]));
        for (int i = 0; i < N; i++)
            cr_assert_eq(kiln_to_host(dst[i], c ? want[i] : got[i], sizeof got[i]), KILN_OK);
    }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < E; j++)
            cr_assert(fabsf(got[i][j] - want[i][j]) <= 1e-5f * (1 + fabsf(want[i][j])),
                      "output %d, element %d: %g, the reference %g", i, j, (double)got[i][j],
                      (double)want[i][j]);
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
    unsetenv("KILN_CC");
    char path[300];
    snprintf(path, sizeof path, "%s/src", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f, "nothing was compiled");
    char line[4096];
    int aliases = 0;
    while (fgets(line, sizeof line, f))
        aliases += strstr(line, "__attribute__((alias(") != NULL;
    fclose(f);
    cr_assert_geq(aliases, N - 1, "%d kernels compiled as aliases of an equal one", aliases);
}
