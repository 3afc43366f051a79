/* Tests of checkpoints (kiln_save, kiln_load, kiln_load_into): round trips
 * of every dtype on every executor, the bytes of the file checked against
 * the safetensors layout by the test's own reading, CPU-computed values
 * loaded into the reference evaluator, and damaged files, each of which must
 * give its status and a message that says what is wrong. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <pthread.h>
#include <json-c/json.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

/* A path unique to the test process, under Bazel's test directory. */
static void tmp_path(char *out, size_t cap, const char *tag) {
    const char *dir = getenv("TEST_TMPDIR");
    snprintf(out, cap, "%s/ckpt_%s_%ld.safetensors", dir && *dir ? dir : "/tmp", tag,
             (long)getpid());
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* A file with the given header text (its length written as the format says)
 * followed by ndata bytes of data. */
static void write_st(const char *path, const char *header, const void *data, size_t ndata) {
    size_t h = strlen(header);
    unsigned char *buf = malloc(8 + h + ndata + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    if (ndata)
        memcpy(buf + 8 + h, data, ndata);
    write_bytes(path, buf, 8 + h + ndata);
    free(buf);
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len + 1);
    cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* ---- round trips ---------------------------------------------------------- */

TU_TEST(checkpoint, round_trip_every_dtype) {
    TU_RNG(r);
    char path[512];
    tmp_path(path, sizeof path, "round_trip");
    int nd;
    const kiln_dtype *all = tu_all_dtypes(&nd);
    kiln_tensor *ts[KILN_NUM_DTYPES + 2];
    double vals[KILN_NUM_DTYPES][24];
    char namebuf[KILN_NUM_DTYPES + 2][32];
    const char *names[KILN_NUM_DTYPES + 2];
    for (int k = 0; k < nd; k++) {
        ts[k] = tu_rand_tensor(ctx, &r, all[k], TU_S(2, 3, 4), -100, 100, vals[k]);
        snprintf(namebuf[k], sizeof namebuf[k], "layer.%d/%s", k, tu_dt_name(all[k]));
        names[k] = namebuf[k];
    }
    /* a 0-d tensor, computed lazily, and an empty one */
    double s = tu_unif(&r, -3, 3);
    ts[nd] = kiln_exp(kiln_scalar(ctx, KILN_F64, s));
    names[nd] = "scalar";
    ts[nd + 1] = kiln_zeros(ctx, KILN_F32, TU_S(3, 0));
    names[nd + 1] = "empty";
    cr_assert_eq(kiln_save(path, nd + 2, names, ts), KILN_OK, "[%s] %s", tu_exec_name(),
                 kiln_ctx_last_error(ctx));

    int n;
    char **lnames;
    kiln_tensor **lts;
    cr_assert_eq(kiln_load(ctx, path, &n, &lnames, &lts), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    cr_assert_eq(n, nd + 2);
    for (int k = 0; k < nd; k++) {
        cr_assert_str_eq(lnames[k], names[k]);
        TU_ASSERT_SHAPE(lts[k], 2, 3, 4);
        TU_ASSERT_DTYPE(lts[k], all[k]);
        TU_EXPECT_EXACT(lts[k], all[k], vals[k], 24);
    }
    cr_assert_str_eq(lnames[nd], "scalar");
    TU_ASSERT_SCALAR_SHAPE(lts[nd]);
    cr_assert_float_eq(TU_ITEM(lts[nd]), exp(s), 1e-12 * exp(s));
    cr_assert_str_eq(lnames[nd + 1], "empty");
    TU_ASSERT_SHAPE(lts[nd + 1], 3, 0);
    kiln_free_names(n, lnames);
    free(lts);
    unlink(path);
}

/* The file read back by the test itself: length prefix, JSON header with
 * the format's dtype names, shapes and contiguous offsets, 8-byte aligned
 * data with the widest dtypes first, and each tensor's bytes
 * little-endian. */
TU_TEST(checkpoint, file_layout) {
    TU_RNG(r);
    char path[512];
    tmp_path(path, sizeof path, "layout");
    double a[6], b[5];
    int32_t bi[5];
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3), -10, 10, a);
    tu_fill(&r, KILN_I32, b, 5, -1000000, 1000000);
    for (int i = 0; i < 5; i++)
        bi[i] = (int32_t)b[i];
    kiln_tensor *tb = kiln_from_data(ctx, KILN_I32, TU_S(5), bi);
    kiln_tensor *ts[] = {ta, kiln_cast(tb, KILN_BF16), tb};
    const char *names[] = {"w", "w_bf16", "idx"};
    cr_assert_eq(kiln_save(path, 3, names, ts), KILN_OK, "%s", kiln_ctx_last_error(ctx));

    size_t len;
    unsigned char *f = read_all(path, &len);
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h |= (uint64_t)f[i] << (8 * i);
    cr_assert((8 + h) % 8 == 0, "data start %llu is not 8-byte aligned", (unsigned long long)h);
    cr_assert_eq(len, 8 + h + 6 * 4 + 5 * 2 + 5 * 4);
    char *text = strndup((char *)f + 8, h);
    json_object *root = json_tokener_parse(text);
    free(text);
    cr_assert(root != NULL, "the header is not JSON");
    const char *want_dt[] = {"F32", "BF16", "I32"};
    /* data widest first: w, idx, then w_bf16 */
    const int64_t want_n[] = {6, 5, 5}, want_b[] = {0, 44, 24}, want_e[] = {24, 54, 44};
    for (int k = 0; k < 3; k++) {
        json_object *e, *v;
        cr_assert(json_object_object_get_ex(root, names[k], &e), "no entry %s", names[k]);
        cr_assert(json_object_object_get_ex(e, "dtype", &v));
        cr_assert_str_eq(json_object_get_string(v), want_dt[k]);
        cr_assert(json_object_object_get_ex(e, "shape", &v));
        int64_t numel = 1;
        for (size_t d = 0; d < json_object_array_length(v); d++)
            numel *= json_object_get_int64(json_object_array_get_idx(v, d));
        cr_assert_eq(numel, want_n[k]);
        cr_assert(json_object_object_get_ex(e, "data_offsets", &v));
        cr_assert_eq(json_object_get_int64(json_object_array_get_idx(v, 0)), want_b[k]);
        cr_assert_eq(json_object_get_int64(json_object_array_get_idx(v, 1)), want_e[k]);
    }
    json_object_put(root);
    const unsigned char *data = f + 8 + h;
    for (int i = 0; i < 6; i++) {
        uint32_t bits = 0;
        for (int j = 0; j < 4; j++)
            bits |= (uint32_t)data[4 * i + j] << (8 * j);
        float x;
        memcpy(&x, &bits, 4);
        cr_assert_eq((double)x, a[i], "w[%d]: %g in the file, %g saved", i, x, a[i]);
    }
    for (int i = 0; i < 5; i++) {
        uint16_t bf = (uint16_t)(data[44 + 2 * i] | data[44 + 2 * i + 1] << 8);
        cr_assert_eq(tu_bf16_value(bf), tu_round(KILN_BF16, b[i]));
        uint32_t u = 0;
        for (int j = 0; j < 4; j++)
            u |= (uint32_t)data[24 + 4 * i + j] << (8 * j);
        cr_assert_eq((int32_t)u, bi[i]);
    }
    free(f);
    unlink(path);
}

/* Values computed and saved by the compiler, loaded into the float64
 * reference evaluator and compared with its own computation. */
Test(checkpoint, cpu_to_reference) {
    kiln_ctx *cpu = kiln_ctx_new(KILN_CPU);
    kiln_ctx *ref = kiln_ctx_new(KILN_REF);
    cr_assert(ref != NULL);
    if (!cpu) {
        kiln_ctx_free(ref);
        cr_skip_test("no CPU compiler: %s", kiln_last_ctx_error());
    }
    char path[512];
    tmp_path(path, sizeof path, "cpu_ref");
    const int64_t dims[] = {7, 5};
    kiln_ctx *cs[2] = {cpu, ref};
    kiln_tensor *y[2];
    for (int c = 0; c < 2; c++) {
        kiln_tensor *x = kiln_randn(cs[c], KILN_F64, 2, dims, 42);
        y[c] = kiln_add(kiln_tanh(x), kiln_mul_scalar(kiln_exp(x), 0.25));
    }
    const char *name = "y";
    cr_assert_eq(kiln_save(path, 1, &name, &y[0]), KILN_OK, "%s", kiln_ctx_last_error(cpu));
    int n;
    char **names;
    kiln_tensor **ts;
    cr_assert_eq(kiln_load(ref, path, &n, &names, &ts), KILN_OK, "%s", kiln_ctx_last_error(ref));
    cr_assert_eq(n, 1);
    double got[35], want[35];
    cr_assert_eq(kiln_to_host(ts[0], got, sizeof got), KILN_OK);
    cr_assert_eq(kiln_to_host(y[1], want, sizeof want), KILN_OK);
    for (int i = 0; i < 35; i++)
        cr_assert(fabs(got[i] - want[i]) <= 1e-12 * (1 + fabs(want[i])), "y[%d]: %.17g vs %.17g",
                  i, got[i], want[i]);

    /* and into an existing tensor of the reference context */
    kiln_tensor *dst = kiln_zeros(ref, KILN_F64, 2, dims);
    cr_assert_eq(kiln_load_into(path, 1, &name, &dst), KILN_OK, "%s", kiln_ctx_last_error(ref));
    double got2[35];
    cr_assert_eq(kiln_to_host(dst, got2, sizeof got2), KILN_OK);
    cr_assert_eq(memcmp(got, got2, sizeof got), 0);
    kiln_free_names(n, names);
    free(ts);
    unlink(path);
    kiln_ctx_free(cpu);
    kiln_ctx_free(ref);
}

/* Saving realizes pending assignments first: the file holds the new value. */
TU_TEST(checkpoint, save_is_a_sync_point) {
    TU_RNG(r);
    char path[512];
    tmp_path(path, sizeof path, "sync");
    double a[4], b[4];
    kiln_tensor *p = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(4), -1, 1, a);
    kiln_tensor *q = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(4), -1, 1, b);
    cr_assert_eq(kiln_assign(p, kiln_add(p, q)), KILN_OK);
    const char *name = "p";
    cr_assert_eq(kiln_save(path, 1, &name, &p), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    kiln_tensor *back = kiln_zeros(ctx, KILN_F32, TU_S(4));
    cr_assert_eq(kiln_load_into(path, 1, &name, &back), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    double want[4];
    for (int i = 0; i < 4; i++)
        want[i] = tu_round(KILN_F32, a[i] + b[i]);
    TU_EXPECT_EXACT(back, KILN_F32, want, 4);
    unlink(path);
}

/* ---- kiln_load_into ------------------------------------------------------- */

Test(checkpoint, load_into_mismatch) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    char path[512];
    tmp_path(path, sizeof path, "into");
    const int64_t d23[] = {2, 3}, d32[] = {3, 2};
    kiln_tensor *w = kiln_randn(ctx, KILN_F32, 2, d23, 1);
    kiln_tensor *b = kiln_randn(ctx, KILN_F32, 1, d23, 2);
    const char *names[] = {"w", "b"};
    kiln_tensor *src[] = {w, b};
    cr_assert_eq(kiln_save(path, 2, names, src), KILN_OK);

    float before[2];
    kiln_tensor *ok = kiln_zeros(ctx, KILN_F32, 1, d23);
    kiln_tensor *wrong_dt = kiln_zeros(ctx, KILN_F16, 2, d23);
    kiln_tensor *dsts[] = {ok, wrong_dt};
    cr_assert_eq(kiln_load_into(path, 2, (const char *[]){"b", "w"}, dsts), KILN_ERR_DTYPE);
    const char *m = kiln_ctx_last_error(ctx);
    cr_assert(strstr(m, "\"w\"") && strstr(m, "f16") && strstr(m, "f32") && strstr(m, "[2,3]"),
              "%s", m);
    /* the first, valid one was not assigned either */
    cr_assert_eq(kiln_to_host(ok, before, sizeof before), KILN_OK);
    cr_assert(before[0] == 0 && before[1] == 0);

    kiln_tensor *wrong_shape = kiln_zeros(ctx, KILN_F32, 2, d32);
    cr_assert_eq(kiln_load_into(path, 1, names, &wrong_shape), KILN_ERR_SHAPE);
    m = kiln_ctx_last_error(ctx);
    cr_assert(strstr(m, "\"w\"") && strstr(m, "[3,2]") && strstr(m, "[2,3]"), "%s", m);

    cr_assert_eq(kiln_load_into(path, 1, (const char *[]){"nope"}, &ok), KILN_ERR_IO);
    m = kiln_ctx_last_error(ctx);
    cr_assert(strstr(m, "nope") && strstr(m, path), "%s", m);
    unlink(path);
    kiln_ctx_free(ctx);
}

/* ---- saving safely --------------------------------------------------------- */

/* A symlink planted at the name the temporary file once had (path.tmp.PID)
 * must not redirect the save: the victim keeps its bytes, the save lands. */
Test(checkpoint, save_ignores_planted_symlinks) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    char path[512], victim[560], planted[600];
    tmp_path(path, sizeof path, "planted");
    snprintf(victim, sizeof victim, "%s.victim", path);
    snprintf(planted, sizeof planted, "%s.tmp.%ld", path, (long)getpid());
    write_bytes(victim, "precious", 8);
    unlink(planted);
    cr_assert_eq(symlink(victim, planted), 0);
    const int64_t d[] = {4};
    kiln_tensor *w = kiln_randn(ctx, KILN_F32, 1, d, 3);
    cr_assert_eq(kiln_save(path, 1, (const char *[]){"w"}, &w), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    size_t n;
    unsigned char *v = read_all(victim, &n);
    cr_assert(n == 8 && memcmp(v, "precious", 8) == 0, "the save wrote through the symlink");
    free(v);
    kiln_tensor *back = kiln_zeros(ctx, KILN_F32, 1, d);
    cr_assert_eq(kiln_load_into(path, 1, (const char *[]){"w"}, &back), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    unlink(planted);
    unlink(victim);
    unlink(path);
    kiln_ctx_free(ctx);
}

/* Two threads saving to one path, each with its own context: every save
 * succeeds (a shared temporary name once failed a quarter of them) and the
 * file is always one whole checkpoint. */
typedef struct saver {
    const char *path;
    int failures;
} saver;

static void *save_loop(void *arg) {
    saver *s = arg;
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    const int64_t d[] = {256};
    kiln_tensor *w = kiln_randn(ctx, KILN_F32, 1, d, 5);
    for (int i = 0; i < 40; i++)
        s->failures += kiln_save(s->path, 1, (const char *[]){"w"}, &w) != KILN_OK;
    kiln_ctx_free(ctx);
    return NULL;
}

Test(checkpoint, threads_saving_to_one_path) {
    char path[512];
    tmp_path(path, sizeof path, "threads");
    saver s[2] = {{path, 0}, {path, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, save_loop, &s[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(s[0].failures + s[1].failures, 0, "%d of 80 saves failed",
                 s[0].failures + s[1].failures);
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    const int64_t d[] = {256};
    kiln_tensor *back = kiln_zeros(ctx, KILN_F32, 1, d);
    cr_assert_eq(kiln_load_into(path, 1, (const char *[]){"w"}, &back), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    kiln_ctx_free(ctx);
    unlink(path);
}

/* A FIFO given to kiln_load once blocked in open() until a writer came. */
Test(checkpoint, load_refuses_a_fifo, .timeout = 20) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    char path[512];
    tmp_path(path, sizeof path, "fifo");
    unlink(path);
    cr_assert_eq(mkfifo(path, 0600), 0);
    int n = 0;
    char **names = NULL;
    kiln_tensor **ts = NULL;
    cr_assert_eq(kiln_load(ctx, path, &n, &names, &ts), KILN_ERR_IO);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "not a regular file"), "%s",
              kiln_ctx_last_error(ctx));
    unlink(path);
    kiln_ctx_free(ctx);
}

/* ---- bad arguments to kiln_save ------------------------------------------ */

Test(checkpoint, save_errors) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    char path[512];
    tmp_path(path, sizeof path, "save_errors");
    const int64_t d[] = {3};
    kiln_tensor *a = kiln_ones(ctx, KILN_F32, 1, d), *b = kiln_zeros(ctx, KILN_F32, 1, d);
    kiln_tensor *ts[] = {a, b};
    cr_assert_eq(kiln_save(path, 2, (const char *[]){"x", "x"}, ts), KILN_ERR_ARG);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "\"x\" is given twice"), "%s",
              kiln_ctx_last_error(ctx));
    cr_assert_eq(kiln_save(path, 2, (const char *[]){"x", "__metadata__"}, ts), KILN_ERR_ARG);
    cr_assert_eq(kiln_save(path, 2, (const char *[]){"x", ""}, ts), KILN_ERR_ARG);
    /* names that are not UTF-8 were saved, and the file could not be loaded */
    const char *not_utf8[] = {"w\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf5\x80\x80\x80"};
    for (size_t i = 0; i < sizeof not_utf8 / sizeof *not_utf8; i++) {
        cr_assert_eq(kiln_save(path, 2, (const char *[]){"x", not_utf8[i]}, ts), KILN_ERR_ARG,
                     "name %zu was taken", i);
        cr_assert(strstr(kiln_ctx_last_error(ctx), "UTF-8"), "%s", kiln_ctx_last_error(ctx));
    }
    cr_assert_eq(access(path, F_OK), -1, "a failed save left a file");
    /* well-formed UTF-8 of every length is fine */
    cr_assert_eq(kiln_save(path, 2, (const char *[]){"w\xc3\xa9", "\xe2\x82\xac\xf0\x9f\x98\x80"}, ts),
                 KILN_OK, "%s", kiln_ctx_last_error(ctx));
    int nback = 0;
    char **back_names = NULL;
    kiln_tensor **back = NULL;
    cr_assert_eq(kiln_load(ctx, path, &nback, &back_names, &back), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    cr_assert_eq(nback, 2);
    kiln_free_names(nback, back_names);
    free(back);
    unlink(path);

    kiln_tensor *bad = kiln_add(a, kiln_ones(ctx, KILN_F32, 1, (const int64_t[]){4}));
    cr_assert_eq(kiln_save(path, 1, (const char *[]){"bad"}, &bad), KILN_ERR_SHAPE);

    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s.missing/dir/x.safetensors", path);
    cr_assert_eq(kiln_save(nodir, 2, (const char *[]){"a", "b"}, ts), KILN_ERR_IO);
    cr_assert(strstr(kiln_ctx_last_error(ctx), ".missing/dir"), "%s", kiln_ctx_last_error(ctx));

    /* a successful save leaves no temporary file behind */
    cr_assert_eq(kiln_save(path, 2, (const char *[]){"a", "b"}, ts), KILN_OK);
    const char *dir = getenv("TEST_TMPDIR");
    DIR *dd = opendir(dir && *dir ? dir : "/tmp");
    cr_assert(dd != NULL);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "ckpt_save_errors_%ld.safetensors.tmp", (long)getpid());
    for (struct dirent *e; (e = readdir(dd));)
        cr_assert(strncmp(e->d_name, prefix, strlen(prefix)) != 0, "left behind: %s", e->d_name);
    closedir(dd);
    unlink(path);
    kiln_ctx_free(ctx);
}

/* ---- damaged files ------------------------------------------------------- */

/* Loads path into a fresh reference context; expects st and every fragment
 * in the message. */
static void expect_load_error(const char *path, kiln_status st, const char *frag1,
                              const char *frag2) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    int n = -1;
    char **names = (char **)1;
    kiln_tensor **ts = (kiln_tensor **)1;
    cr_assert_eq(kiln_load(ctx, path, &n, &names, &ts), st, "%s: %s", frag1,
                 kiln_ctx_last_error(ctx));
    cr_assert(n == 0 && names == NULL && ts == NULL);
    const char *m = kiln_ctx_last_error(ctx);
    cr_assert(strstr(m, path), "the message does not name the file: %s", m);
    cr_assert(strstr(m, frag1), "expected \"%s\" in: %s", frag1, m);
    cr_assert(!frag2 || strstr(m, frag2), "expected \"%s\" in: %s", frag2, m);
    /* no handle was left behind in the context */
    cr_assert_eq(kiln_ctx_live_nodes(ctx), 0);
    kiln_ctx_free(ctx);
}

#define HDR(body) "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" body "}}"

Test(checkpoint, damaged_files) {
    char path[512];
    tmp_path(path, sizeof path, "damaged");
    const float data[4] = {1.5f, -2.25f, 3, 4};

    expect_load_error("/nonexistent/kiln/x.safetensors", KILN_ERR_IO, "cannot open", NULL);

    write_bytes(path, "\x10\x00\x00", 3);
    expect_load_error(path, KILN_ERR_IO, "truncated", "8-byte");

    /* a header length far beyond any real header */
    write_bytes(path, "\x00\x00\x00\x00\x00\x01\x00\x00{}", 10);
    expect_load_error(path, KILN_ERR_IO, "absurd", NULL);

    /* a header length beyond the end of the file */
    write_bytes(path, "\x40\x00\x00\x00\x00\x00\x00\x00{}", 10);
    expect_load_error(path, KILN_ERR_IO, "truncated", "64");

    write_st(path, "{\"t\": {\"dtype\": \"F32\", ", data, 8);
    expect_load_error(path, KILN_ERR_IO, "not valid JSON", NULL);
    write_st(path, "{\"t\": 1} trailing", NULL, 0);
    expect_load_error(path, KILN_ERR_IO, "not valid JSON", NULL);
    write_st(path, "[1, 2]", NULL, 0);
    expect_load_error(path, KILN_ERR_IO, "not a JSON object", NULL);

    write_st(path, "{\"t\":{\"dtype\":\"C64\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    expect_load_error(path, KILN_ERR_IO, "\"C64\"", "\"t\"");
    write_st(path, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2, -1],\"data_offsets\":[0,8]}}", data,
             8);
    expect_load_error(path, KILN_ERR_IO, "dimension 1", "\"t\"");
    write_st(path, "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", data, 8);
    expect_load_error(path, KILN_ERR_IO, "data_offsets", "\"t\"");

    /* offsets: past the data, not the tensor's size, reversed, overlapping */
    write_st(path, HDR("[8,16]"), data, 8);
    expect_load_error(path, KILN_ERR_IO, "past the end", "\"t\"");
    write_st(path, HDR("[0,12]"), data, 12);
    expect_load_error(path, KILN_ERR_IO, "needs 8 bytes", "\"t\"");
    write_st(path, HDR("[8,0]"), data, 8);
    expect_load_error(path, KILN_ERR_IO, "begin <= end", "\"t\"");
    write_st(path,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             data, 12);
    expect_load_error(path, KILN_ERR_IO, "overlaps", "\"a\"");

    /* a name given twice, with other offsets ... */
    write_st(path,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
             data, 16);
    expect_load_error(path, KILN_ERR_IO, "\"a\" is given twice", "ambiguous");
    /* ... and with the same offsets, which json-c would take as one */
    write_st(path,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"x\":[\"a\",{\"a\":\"}\\\"\"}]}, \"a\" : "
             "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             data, 8);
    expect_load_error(path, KILN_ERR_IO, "\"a\" is given twice", NULL);
    write_st(path,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"\\u0061\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             data, 8);
    expect_load_error(path, KILN_ERR_IO, "given twice", "escapes");
    /* trailing bytes nobody owns */
    write_st(path, HDR("[0,8]"), data, 12);
    expect_load_error(path, KILN_ERR_IO, "last 4 bytes", NULL);

    write_st(path,
             "{\"__metadata__\":{\"step\":3},"
             "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             data, 8);
    expect_load_error(path, KILN_ERR_IO, "__metadata__", NULL);

    /* truncating a valid file anywhere is an error, never a short tensor */
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    kiln_tensor *t = kiln_randn(ctx, KILN_F64, 1, (const int64_t[]){16}, 3);
    const char *name = "t";
    cr_assert_eq(kiln_save(path, 1, &name, &t), KILN_OK);
    size_t len;
    unsigned char *whole = read_all(path, &len);
    for (size_t cut = 0; cut < len; cut += 7) {
        write_bytes(path, whole, cut);
        int n;
        char **names;
        kiln_tensor **ts;
        cr_assert_eq(kiln_load(ctx, path, &n, &names, &ts), KILN_ERR_IO, "cut at %zu", cut);
        cr_assert(strstr(kiln_ctx_last_error(ctx), "truncated"), "cut at %zu: %s", cut,
                  kiln_ctx_last_error(ctx));
    }
    free(whole);
    kiln_ctx_free(ctx);
    unlink(path);
}

/* Metadata of strings is accepted and skipped; entries come in the
 * header's order; BOOL bytes other than 0 and 1 read as true. */
Test(checkpoint, foreign_file) {
    char path[512];
    tmp_path(path, sizeof path, "foreign");
    const unsigned char data[] = {0, 0, 0xc0, 0x3f, 0, 0, 0x20, 0xc0, /* f32 1.5, -2.5 */
                                  0, 7, 1};                           /* bool */
    write_st(path,
             "{\"__metadata__\":{\"format\":\"pt\"},"
             "\"z\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[8,11]}}  ",
             data, sizeof data);
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    int n;
    char **names;
    kiln_tensor **ts;
    cr_assert_eq(kiln_load(ctx, path, &n, &names, &ts), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    cr_assert_eq(n, 2);
    cr_assert_str_eq(names[0], "z");
    cr_assert_str_eq(names[1], "m");
    float z[2];
    unsigned char m[3];
    cr_assert_eq(kiln_to_host(ts[0], z, sizeof z), KILN_OK);
    cr_assert_eq(kiln_to_host(ts[1], m, sizeof m), KILN_OK);
    cr_assert(z[0] == 1.5f && z[1] == -2.5f);
    cr_assert(m[0] == 0 && m[1] == 1 && m[2] == 1);
    kiln_free_names(n, names);
    free(ts);
    kiln_ctx_free(ctx);
    unlink(path);
}
