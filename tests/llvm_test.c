/* llvm_test.c — the LLVM code generator (KILN_CPU_COMPILER=llvm): programs
 * of every op family and dtype built on random inputs, run on a CPU context
 * that compiles through LLVM (lazy and eager) and compared with the float64
 * reference evaluator; Philox streams compared bit for bit with the C path;
 * the generated IR checked for vector loops; a bad KILN_CPU_COMPILER refused. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "graph/graph.h"
#include "jit/cpu/llvm.h"
#include "lower/lower.h"
#include "test_util.h"

static kiln_ctx *cpu_ctx(const char *compiler, kiln_mode mode) {
    setenv("KILN_CPU_COMPILER", compiler, 1);
    kiln_ctx *c = kiln_ctx_new(KILN_CPU);
    cr_assert(c, "a CPU context with KILN_CPU_COMPILER=%s: %s", compiler, kiln_last_ctx_error());
    kiln_ctx_set_mode(c, mode);
    return c;
}

/* A program: builds its output on ctx from inputs drawn from r. */
typedef kiln_tensor *(*program)(kiln_ctx *ctx, tu_rng *r, const void *arg);

static void read_all(kiln_tensor *t, double **out, int64_t *n, const char *what) {
    cr_assert_eq(kiln_error(t), KILN_OK, "%s: %s", what, kiln_error_message(t));
    *n = kiln_numel(t);
    *out = malloc(sizeof **out * (size_t)(*n ? *n : 1));
    cr_assert(*out);
    cr_assert_eq(kiln_realize(t), KILN_OK, "%s: %s", what, kiln_ctx_last_error(kiln_ctx_of(t)));
    TU_READ(t, *out, *n);
}

/* Runs f on the reference evaluator and through LLVM, lazily and eagerly,
 * with the same inputs, and compares (exactly for integers, bool, and where
 * exact is set; else by NMSE within tol, or the dtype's tolerance when 0). */
static void check_arg(const char *what, program f, const void *arg, bool exact, double tol) {
    kiln_ctx *ref = kiln_ctx_new(KILN_REF);
    cr_assert(ref);
    tu_rng r0 = tu_rng_from(what, 1);
    kiln_tensor *e = f(ref, &r0, arg);
    double *exp;
    int64_t n;
    read_all(e, &exp, &n, what);
    kiln_dtype dt = kiln_dtype_of(e);
    kiln_mode modes[2] = {KILN_LAZY, KILN_EAGER};
    for (int m = 0; m < 2; m++) {
        kiln_ctx *c = cpu_ctx("llvm", modes[m]);
        tu_rng r1 = tu_rng_from(what, 1);
        kiln_tensor *g = f(c, &r1, arg);
        double *got;
        int64_t ng;
        read_all(g, &got, &ng, what);
        cr_assert_eq(ng, n, "%s: %lld elements, expected %lld", what, (long long)ng, (long long)n);
        cr_assert_eq(kiln_dtype_of(g), dt, "%s: dtype", what);
        tu_compare_tol_at(got, exp, n, dt, exact, tol > 0 ? tol : tu_tol(dt), what, m);
        free(got);
        kiln_ctx_free(c);
    }
    free(exp);
    kiln_ctx_free(ref);
}

static void check(const char *what, program f, const void *arg) {
    check_arg(what, f, arg, false, 0);
}

static const kiln_dtype float_dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
static const kiln_dtype all_dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16,
                                     KILN_I32, KILN_I64, KILN_U8,  KILN_BOOL};

static kiln_tensor *rand_t(kiln_ctx *c, tu_rng *r, kiln_dtype dt, int ndim, const int64_t *dims,
                           double lo, double hi) {
    int64_t n = tu_numel(ndim, dims);
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    kiln_tensor *t = tu_rand_tensor(c, r, dt, ndim, dims, lo, hi, v);
    free(v);
    return t;
}

/* Joins the results that the ops accept (an op refused on a dtype is an error
 * handle on every executor alike, and is left out) into one flat tensor. */
static kiln_tensor *join(int n, kiln_tensor **ts) {
    kiln_tensor *flat[64];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (kiln_error(ts[i]) == KILN_OK)
            flat[k++] = kiln_reshape(ts[i], 1, (int64_t[]){kiln_numel(ts[i])});
    cr_assert(k > 0);
    return k == 1 ? flat[0] : kiln_cat(k, flat, 0);
}

/* ---- elementwise ---- */

static kiln_tensor *unary_all(kiln_ctx *c, tu_rng *r, const void *arg) {
    kiln_dtype dt = *(const kiln_dtype *)arg;
    kiln_tensor *x = rand_t(c, r, dt, 2, TU_DIMS(37, 41), -4, 4);
    kiln_tensor *pos = kiln_add_scalar(kiln_abs(x), 0.25);
    kiln_tensor *ts[] = {
        kiln_neg(x),     kiln_abs(x),  kiln_exp(x),     kiln_log(pos),  kiln_sqrt(pos),
        kiln_rsqrt(pos), kiln_sin(x),  kiln_cos(x),     kiln_tanh(x),   kiln_sigmoid(x),
        kiln_relu(x),    kiln_gelu(x), kiln_silu(x),    kiln_recip(pos),
    };
    return join((int)(sizeof ts / sizeof ts[0]), ts);
}

Test(llvm, unary_every_float_dtype) {
    for (int i = 0; i < 4; i++)
        check(tu_dt_name(float_dts[i]), unary_all, &float_dts[i]);
}

static kiln_tensor *unary_extremes(kiln_ctx *c, tu_rng *r, const void *arg) {
    (void)r;
    kiln_dtype dt = *(const kiln_dtype *)arg;
    double v[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, -100.0, 100.0, -30.0, 30.0, 1e-3, -1e-3};
    kiln_tensor *x = tu_tensor(c, dt, 1, (int64_t[]){(int64_t)(sizeof v / sizeof v[0])}, v);
    kiln_tensor *ts[] = {kiln_relu(x), kiln_sigmoid(x), kiln_gelu(x), kiln_silu(x), kiln_tanh(x),
                         kiln_exp(x),  kiln_neg(x),     kiln_abs(x)};
    return join((int)(sizeof ts / sizeof ts[0]), ts);
}

Test(llvm, unary_nan_inf_and_saturation) {
    for (int i = 0; i < 4; i++)
        check(tu_dt_name(float_dts[i]), unary_extremes, &float_dts[i]);
}

static kiln_tensor *binary_all(kiln_ctx *c, tu_rng *r, const void *arg) {
    kiln_dtype dt = *(const kiln_dtype *)arg;
    bool fl = tu_is_float(dt);
    kiln_tensor *a = rand_t(c, r, dt, 2, TU_DIMS(29, 33), fl ? -3 : -40, fl ? 3 : 40);
    kiln_tensor *b = rand_t(c, r, dt, 2, TU_DIMS(1, 33), fl ? -3 : -9, fl ? 3 : 9);
    kiln_tensor *p = rand_t(c, r, dt, 2, TU_DIMS(29, 1), fl ? -2 : 0, fl ? 2 : 4);
    kiln_tensor *ts[] = {
        kiln_add(a, b),     kiln_sub(a, b),     kiln_mul(a, b),
        kiln_div(a, b),     kiln_maximum(a, b), kiln_minimum(a, b),
        kiln_pow(fl ? kiln_abs(a) : a, p),      kiln_where(kiln_gt(a, b), a, b),
        kiln_add_scalar(a, 3),                  kiln_mul_scalar(a, -2),
    };
    return join((int)(sizeof ts / sizeof ts[0]), ts);
}

Test(llvm, binary_every_dtype) {
    for (int i = 0; i < 8; i++)
        check(tu_dt_name(all_dts[i]), binary_all, &all_dts[i]);
}

static kiln_tensor *compare_all(kiln_ctx *c, tu_rng *r, const void *arg) {
    kiln_dtype dt = *(const kiln_dtype *)arg;
    int64_t n = 300;
    double *va = malloc(sizeof *va * (size_t)n), *vb = malloc(sizeof *vb * (size_t)n);
    tu_fill(r, dt, va, n, -5, 5);
    tu_fill(r, dt, vb, n, -5, 5);
    for (int64_t i = 0; i < n; i += 7)
        vb[i] = va[i]; /* ties */
    if (tu_is_float(dt))
        for (int64_t i = 3; i < n; i += 11) {
            va[i] = NAN;
            vb[i + 2 < n ? i + 2 : i] = i % 2 ? INFINITY : NAN;
        }
    kiln_tensor *a = tu_tensor(c, dt, 1, &n, va), *b = tu_tensor(c, dt, 1, &n, vb);
    free(va);
    free(vb);
    kiln_tensor *ts[] = {kiln_lt(a, b), kiln_le(a, b), kiln_gt(a, b),
                         kiln_ge(a, b), kiln_eq(a, b), kiln_ne(a, b)};
    kiln_tensor *m[] = {kiln_maximum(a, b), kiln_minimum(a, b)};
    kiln_tensor *cmp = join(6, ts);
    kiln_tensor *mm = join(2, m);
    return kiln_cat(2, (kiln_tensor *[]){kiln_cast(cmp, dt), mm}, 0);
}

Test(llvm, comparisons_max_min_with_nan) {
    for (int i = 0; i < 8; i++)
        check(tu_dt_name(all_dts[i]), compare_all, &all_dts[i]);
}

typedef struct cast_case {
    kiln_dtype from, to;
} cast_case;

static kiln_tensor *cast_one(kiln_ctx *c, tu_rng *r, const void *arg) {
    const cast_case *cc = arg;
    int64_t n = 64;
    double v[64];
    tu_fill(r, cc->from, v, n, tu_is_float(cc->from) ? -3e10 : -1e18, tu_is_float(cc->from) ? 3e10 : 1e18);
    if (tu_is_float(cc->from)) {
        double special[] = {NAN, INFINITY, -INFINITY, -0.0, 0.5, -0.5, 255.5, 256.0, -1.0,
                            2147483647.0, 2147483648.0, -2147483649.0, 1e300, -1e300, 65504.0,
                            65520.0, 3.4e38, 1e-8, -2.5, 127.99};
        for (int i = 0; i < 20; i++)
            v[i] = tu_round_float(cc->from, special[i]);
        for (int i = 20; i < 40; i++)
            v[i] = tu_round_float(cc->from, tu_unif(r, -300, 300));
    }
    kiln_tensor *x = tu_tensor(c, cc->from, 1, &n, v);
    return kiln_cast(x, cc->to);
}

Test(llvm, casts_every_pair_with_saturation_and_nan) {
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            cast_case cc = {all_dts[i], all_dts[j]};
            char what[64];
            snprintf(what, sizeof what, "cast %s to %s", tu_dt_name(cc.from), tu_dt_name(cc.to));
            check_arg(what, cast_one, &cc, true, 0);
        }
}

/* ---- reductions and row kernels ---- */

typedef struct red_case {
    kiln_dtype dt;
    int op; /* 0 sum, 1 mean, 2 max, 3 min, 4 argmax, 5 argmin */
} red_case;

static kiln_tensor *reduce_one(kiln_ctx *c, tu_rng *r, const void *arg) {
    const red_case *rc = arg;
    int64_t dims[3] = {6, 45, 7};
    int64_t n = 6 * 45 * 7;
    double *v = malloc(sizeof *v * (size_t)n);
    bool fl = tu_is_float(rc->dt);
    /* A narrow range makes ties; floats get NaN in some rows. */
    tu_fill(r, rc->dt, v, n, fl ? -2 : 0, fl ? 2 : 3);
    if (fl)
        for (int64_t i = 0; i < n; i += 97)
            v[i] = NAN;
    if (fl && rc->op >= 4)
        for (int64_t i = 1; i < n; i += 5)
            v[i] = 1.5; /* ties of the maximum */
    kiln_tensor *x = tu_tensor(c, rc->dt, 3, dims, v);
    free(v);
    typedef kiln_tensor *(*red_fn)(kiln_tensor *, int, const int *, bool);
    red_fn fns[] = {kiln_sum, kiln_mean, kiln_max, kiln_min, kiln_argmax, kiln_argmin};
    red_fn f = fns[rc->op];
    kiln_tensor *ts[] = {f(x, 1, (int[]){1}, false), f(x, 1, (int[]){2}, true),
                         f(x, 2, (int[]){0, 2}, false), f(x, 0, NULL, false)};
    kiln_tensor *out[4];
    for (int i = 0; i < 4; i++)
        out[i] = kiln_error(ts[i]) == KILN_OK ? kiln_cast(ts[i], KILN_F64) : ts[i];
    return join(4, out);
}

Test(llvm, reductions_ties_and_nan) {
    for (int i = 0; i < 8; i++)
        for (int op = 0; op < 6; op++) {
            red_case rc = {all_dts[i], op};
            char what[64];
            snprintf(what, sizeof what, "reduce %d of %s", op, tu_dt_name(rc.dt));
            check_arg(what, reduce_one, &rc, false, rc.dt == KILN_F16 || rc.dt == KILN_BF16 ? 1e-4 : 1e-9);
        }
}

static kiln_tensor *softmax_rows(kiln_ctx *c, tu_rng *r, const void *arg) {
    kiln_dtype dt = *(const kiln_dtype *)arg;
    kiln_tensor *x = rand_t(c, r, dt, 3, TU_DIMS(3, 17, 129), -6, 6);
    kiln_tensor *w = rand_t(c, r, dt, 1, TU_DIMS(129), 0.5, 1.5);
    kiln_tensor *b = rand_t(c, r, dt, 1, TU_DIMS(129), -1, 1);
    kiln_tensor *ts[] = {kiln_softmax(x, 2), kiln_softmax(x, 1), kiln_layer_norm(x, 1, w, b, 1e-5),
                         kiln_log_softmax(x, 2)};
    return join(4, ts);
}

Test(llvm, softmax_and_layer_norm_rows) {
    for (int i = 0; i < 4; i++)
        check(tu_dt_name(float_dts[i]), softmax_rows, &float_dts[i]);
}

/* ---- views ---- */

static kiln_tensor *views(kiln_ctx *c, tu_rng *r, const void *arg) {
    kiln_dtype dt = *(const kiln_dtype *)arg;
    kiln_tensor *x = rand_t(c, r, dt, 3, TU_DIMS(5, 6, 7), -9, 9);
    kiln_tensor *y = rand_t(c, r, dt, 3, TU_DIMS(5, 2, 7), -9, 9);
    kiln_tensor *p = kiln_permute(x, (int[]){2, 0, 1});
    kiln_tensor *s = kiln_slice(kiln_slice(x, 1, 5, KILN_BEGIN_REV, -2), 2, 1, 7, 3);
    kiln_tensor *f = kiln_flip(x, 1, (int[]){2});
    kiln_tensor *pd = kiln_pad(x, (int64_t[]){1, 0, 2, 3, 0, 1}, 0);
    kiln_tensor *ct = kiln_cat(3, (kiln_tensor *[]){x, y, x}, 1);
    kiln_tensor *ex = kiln_expand(kiln_slice(x, 1, 2, 3, 1), 3, TU_DIMS(5, 4, 7));
    kiln_tensor *mix = kiln_add(kiln_permute(kiln_flip(x, 0, NULL), (int[]){0, 2, 1}),
                                kiln_transpose(x, 1, 2));
    kiln_tensor *ts[] = {p, s, f, pd, ct, ex, mix, kiln_sum(pd, 1, (int[]){1}, false)};
    return join(8, ts);
}

Test(llvm, views_pad_cat) {
    for (int i = 0; i < 8; i++)
        check(tu_dt_name(all_dts[i]), views, &all_dts[i]);
}

/* ---- gathers: indexed loads of every index dtype ---- */

/* Lazily computed indices of index dtype *arg (in range: eager mode checks
 * them; ops_index_test_llvm reads out of range lazily), gathering from every
 * data dtype along two axes, an index_select, and an embedding lookup with
 * work after it (as f64, joined). */
static kiln_tensor *gathers(kiln_ctx *c, tu_rng *r, const void *arg) {
    kiln_dtype it = *(const kiln_dtype *)arg;
    kiln_tensor *ts[20];
    int n = 0;
    for (int i = 0; i < 8; i++) {
        kiln_tensor *x = rand_t(c, r, all_dts[i], 3, TU_DIMS(4, 10, 3), -9, 9);
        kiln_tensor *r1 = rand_t(c, r, KILN_I32, 3, TU_DIMS(3, 12, 2), 2, 11);
        kiln_tensor *r2 = rand_t(c, r, KILN_I32, 3, TU_DIMS(3, 4, 5), 2, 4);
        ts[n++] = kiln_cast(kiln_gather(x, 1, kiln_cast(kiln_add_scalar(r1, -2), it)), KILN_F64);
        ts[n++] = kiln_cast(kiln_gather(x, 2, kiln_cast(kiln_add_scalar(r2, -2), it)), KILN_F64);
    }
    kiln_tensor *w = rand_t(c, r, KILN_F32, 2, TU_DIMS(300, 8), -1, 1);
    kiln_tensor *raw = rand_t(c, r, KILN_I32, 2, TU_DIMS(3, 7), 5, 304);
    kiln_tensor *tok = kiln_cast(kiln_add_scalar(raw, -5), it == KILN_U8 ? KILN_I32 : it);
    ts[n++] = kiln_cast(kiln_mul_scalar(kiln_exp(kiln_embedding(tok, w)), 3), KILN_F64);
    ts[n++] = kiln_cast(kiln_index_select(w, 0, kiln_reshape(tok, 1, TU_DIMS(21))), KILN_F64);
    return join(n, ts);
}

Test(llvm, gather_every_index_dtype) {
    const kiln_dtype its[3] = {KILN_I32, KILN_I64, KILN_U8};
    for (int i = 0; i < 3; i++)
        check_arg(tu_dt_name(its[i]), gathers, &its[i], false, 1e-12); /* f32 exp: an ulp */
}

/* ---- random numbers: the same bits as the C path ---- */

Test(llvm, rand_and_randn_equal_the_c_path_bit_for_bit) {
    kiln_ctx *l = cpu_ctx("llvm", KILN_LAZY), *c = cpu_ctx("cc", KILN_LAZY);
    int64_t dims[2] = {37, 129};
    for (int i = 0; i < 4; i++)
        for (int normal = 0; normal < 2; normal++) {
            kiln_dtype dt = float_dts[i];
            uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) + (uint64_t)normal;
            kiln_tensor *a = normal ? kiln_randn(l, dt, 2, dims, seed) : kiln_rand(l, dt, 2, dims, seed);
            kiln_tensor *b = normal ? kiln_randn(c, dt, 2, dims, seed) : kiln_rand(c, dt, 2, dims, seed);
            /* Fused with arithmetic, as in dropout or an initialiser. */
            a = kiln_mul_scalar(kiln_add_scalar(a, 0.5), 3);
            b = kiln_mul_scalar(kiln_add_scalar(b, 0.5), 3);
            size_t bytes = (size_t)(37 * 129) * kiln_dtype_size(dt);
            char *pa = malloc(bytes), *pb = malloc(bytes);
            cr_assert_eq(kiln_to_host(a, pa, bytes), KILN_OK, "%s", kiln_ctx_last_error(l));
            cr_assert_eq(kiln_to_host(b, pb, bytes), KILN_OK, "%s", kiln_ctx_last_error(c));
            cr_assert(!memcmp(pa, pb, bytes), "%s %s: LLVM and C differ", tu_dt_name(dt),
                      normal ? "randn" : "rand");
            free(pa);
            free(pb);
        }
    kiln_ctx_free(l);
    kiln_ctx_free(c);
}

/* ---- matmul ---- */

typedef struct mm_case {
    kiln_dtype dt;
    int an, bn;
    int64_t ad[4], bd[4];
    bool transpose_b, epilogue;
} mm_case;

static kiln_tensor *matmul_one(kiln_ctx *c, tu_rng *r, const void *arg) {
    const mm_case *m = arg;
    bool fl = tu_is_float(m->dt);
    kiln_tensor *a = rand_t(c, r, m->dt, m->an, m->ad, fl ? -1 : -5, fl ? 1 : 5);
    kiln_tensor *b = rand_t(c, r, m->dt, m->bn, m->bd, fl ? -1 : -5, fl ? 1 : 5);
    if (m->transpose_b)
        b = kiln_transpose(b, m->bn - 2, m->bn - 1);
    kiln_tensor *y = kiln_matmul(a, b);
    if (m->epilogue) {
        int64_t mcols = kiln_shape(y)[kiln_ndim(y) - 1];
        kiln_tensor *bias = rand_t(c, r, m->dt, 1, &mcols, -1, 1);
        y = kiln_relu(kiln_add(y, bias));
    }
    return y;
}

Test(llvm, matmul_shapes_batches_and_epilogues) {
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_I64, KILN_U8};
    const mm_case shapes[] = {
        {KILN_F32, 2, 2, {1, 1}, {1, 1}, false, false},
        {KILN_F32, 2, 2, {5, 7}, {7, 3}, false, true},
        {KILN_F32, 2, 2, {33, 65}, {65, 47}, false, false},
        {KILN_F32, 2, 2, {64, 64}, {64, 64}, true, true},
        {KILN_F32, 2, 2, {70, 130}, {200, 130}, true, false},
        {KILN_F32, 4, 4, {3, 1, 13, 9}, {1, 4, 9, 35}, false, true},
        {KILN_F32, 3, 2, {2, 7, 5}, {5, 1}, false, false},
    };
    for (int d = 0; d < 7; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            mm_case m = shapes[s];
            m.dt = dts[d];
            if (m.dt == KILN_U8)
                m.epilogue = false;
            char what[64];
            snprintf(what, sizeof what, "matmul %zu %s", s, tu_dt_name(m.dt));
            check(what, matmul_one, &m);
        }
}

/* ---- generated code ---- */

Test(llvm, elementwise_loops_vectorise) {
    char msg[512];
    cr_assert(jit_llvm_available(msg, sizeof msg), "%s", msg);
    graph_ctx *g = graph_ctx_new();
    int64_t n = 4096;
    graph_buffer *ba = graph_buffer_new((size_t)n * 4), *bb = graph_buffer_new((size_t)n * 4);
    graph_node *a = graph_buffer_node(g, KILN_F32, 1, &n, ba);
    graph_node *b = graph_buffer_node(g, KILN_F32, 1, &n, bb);
    graph_node *y = graph_binary(GRAPH_MUL, a, b);
    graph_node *z = graph_binary(GRAPH_ADD, y, a);
    lower_program *p = lower_schedule(1, &z, true);
    cr_assert(p);
    const lower_target host = {.name = "cpu", .vector_bytes = 32};
    lower_plan *plans = lower_plan_program(p, &host);
    cr_assert(plans);
    char *ir = jit_llvm_module_text(p, plans, true, msg, sizeof msg);
    cr_assert(ir, "%s", msg);
    cr_assert(strstr(ir, " x float>"), "no vector loop in the optimised IR:\n%s", ir);
    free(ir);
    ir = jit_llvm_module_text(p, plans, false, msg, sizeof msg);
    cr_assert(ir, "%s", msg);
    cr_assert(!strstr(ir, " x float>"), "the unoptimised IR already had vectors");
    free(ir);
    cr_assert(strstr(jit_llvm_identity(), "LLVM 14"), "%s", jit_llvm_identity());
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    graph_unref(z);
    graph_unref(y);
    graph_unref(a);
    graph_unref(b);
    graph_buffer_unref(ba);
    graph_buffer_unref(bb);
    graph_ctx_free(g);
}

Test(llvm, unknown_compiler_is_refused_with_a_message) {
    setenv("KILN_CPU_COMPILER", "gcc-please", 1);
    kiln_ctx *c = kiln_ctx_new(KILN_CPU);
    cr_assert_null(c);
    cr_assert(strstr(kiln_last_ctx_error(), "KILN_CPU_COMPILER"), "%s", kiln_last_ctx_error());
    kiln_ctx_free(cpu_ctx("cc", KILN_LAZY));
}
