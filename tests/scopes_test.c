/* Tests of ownership: scopes release what they made, kiln_keep and
 * kiln_release, no node leaks (kiln_ctx_live_nodes returns to its baseline),
 * hash-consing of equal nodes, constant folding and simplification. Node
 * identity is not public, so sharing is seen through the live node count. */
#include "test_util.h"

#define LIVE() kiln_ctx_live_nodes(ctx)

#define ASSERT_LIVE(want)                                                                          \
    do {                                                                                           \
        int64_t got_ = LIVE(), want_ = (want);                                                     \
        cr_assert(got_ == want_, "[%s] line %d: %lld live nodes, expected %lld", tu_exec_name(),   \
                  __LINE__, (long long)got_, (long long)want_);                                    \
    } while (0)

TU_TEST(scopes, scope_end_releases_everything_made_inside) {
    int64_t base = LIVE();
    kiln_scope_begin(ctx);
    kiln_tensor *x = kiln_arange(ctx, KILN_F32, 0, 6, 1);
    kiln_tensor *y = kiln_exp(kiln_reshape(x, TU_S(2, 3)));
    kiln_tensor *z = kiln_sum(kiln_mul(y, y), TU_AXES(1), false);
    kiln_tensor *m = kiln_matmul(y, kiln_transpose(y, 0, 1));
    kiln_tensor *e = kiln_add(x, kiln_ones(ctx, KILN_F32, TU_S(7))); /* an error handle */
    cr_assert_neq(kiln_error(e), KILN_OK);
    cr_assert(LIVE() > base);
    cr_assert_eq(kiln_realize(z), KILN_OK);
    cr_assert_eq(kiln_realize(m), KILN_OK);
    kiln_scope_end(ctx);
    ASSERT_LIVE(base);
}

TU_TEST(scopes, keep_survives) {
    int64_t base = LIVE();
    kiln_scope_begin(ctx);
    kiln_tensor *x = kiln_arange(ctx, KILN_F64, 0, 4, 1);
    kiln_tensor *y = kiln_keep(kiln_mul_scalar(kiln_exp(x), 2));
    cr_assert(kiln_keep(NULL) == NULL);
    kiln_scope_end(ctx);
    /* y is still there, lazily or not, with the sources it needs */
    TU_EXPECT_NEAR_VALS(y, KILN_F64, 2, 2 * exp(1.0), 2 * exp(2.0), 2 * exp(3.0));
    cr_assert(LIVE() > base);
    kiln_release(y);
    ASSERT_LIVE(base);
}

TU_TEST(scopes, keep_before_realize_keeps_pending_graph) {
    int64_t base = LIVE();
    kiln_tensor *y;
    kiln_scope_begin(ctx);
    {
        kiln_tensor *a = kiln_full(ctx, KILN_I32, TU_S(3), 4);
        kiln_tensor *b = kiln_arange(ctx, KILN_I32, 0, 3, 1);
        y = kiln_keep(kiln_add(kiln_mul(a, b), b));
    }
    kiln_scope_end(ctx);
    TU_EXPECT_VALS(y, KILN_I32, 0, 5, 10);
    kiln_release(y);
    ASSERT_LIVE(base);
}

TU_TEST(scopes, nested) {
    int64_t base = LIVE();
    kiln_scope_begin(ctx); /* A */
    kiln_tensor *x = kiln_arange(ctx, KILN_F32, 1, 5, 1);
    int64_t after_x = LIVE();
    kiln_tensor *z;
    kiln_scope_begin(ctx); /* B */
    {
        kiln_tensor *y = kiln_sqrt(x);
        z = kiln_keep(kiln_add_scalar(y, 1)); /* to A */
        (void)kiln_neg(y);
    }
    kiln_scope_end(ctx); /* B */
    TU_EXPECT_NEAR_VALS(z, KILN_F32, 2, 1 + sqrt(2.0), 1 + sqrt(3.0), 3);
    TU_EXPECT_VALS(x, KILN_F32, 1, 2, 3, 4);
    cr_assert(LIVE() >= after_x);
    kiln_scope_end(ctx); /* A releases x and z */
    ASSERT_LIVE(base);

    /* keep twice from two levels deep reaches the outermost level */
    kiln_tensor *w;
    kiln_scope_begin(ctx);
    kiln_scope_begin(ctx);
    w = kiln_keep(kiln_keep(kiln_full(ctx, KILN_F32, TU_S(2), 3)));
    kiln_scope_end(ctx);
    kiln_scope_end(ctx);
    TU_EXPECT_VALS(w, KILN_F32, 3, 3);
    kiln_release(w);
    ASSERT_LIVE(base);
}

TU_TEST(scopes, handles_outside_scopes_live_until_released) {
    int64_t base = LIVE();
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(3));
    kiln_scope_begin(ctx);
    kiln_tensor *y = kiln_add(x, x);
    kiln_scope_end(ctx);
    (void)y;
    /* x was made outside the scope: untouched */
    TU_EXPECT_VALS(x, KILN_F32, 1, 1, 1);
    kiln_tensor *k = kiln_keep(kiln_mul_scalar(x, 5)); /* keep at the outermost level */
    TU_EXPECT_VALS(k, KILN_F32, 5, 5, 5);
    kiln_release(k);
    kiln_release(x);
    ASSERT_LIVE(base);
}

TU_TEST(scopes, release_early) {
    int64_t base = LIVE();
    kiln_tensor *x = kiln_arange(ctx, KILN_F64, 0, 3, 1);
    kiln_tensor *y = kiln_add_scalar(kiln_mul_scalar(x, 2), 1);
    /* the handles of the intermediates and of x go; y still needs their nodes */
    kiln_release(x);
    TU_EXPECT_VALS(y, KILN_F64, 1, 3, 5);
    kiln_release(y);
    /* one intermediate handle (the mul) is still alive until the end */
    cr_assert(LIVE() >= base);

    kiln_scope_begin(ctx);
    kiln_tensor *a = kiln_arange(ctx, KILN_F32, 0, 4, 1);
    kiln_tensor *b = kiln_exp(a);
    cr_assert_eq(kiln_realize(b), KILN_OK);
    kiln_release(a);
    kiln_release(b); /* released inside a scope: the scope's end must not free it again */
    kiln_tensor *c = kiln_neg(kiln_ones(ctx, KILN_I32, TU_S(2)));
    TU_EXPECT_VALS(c, KILN_I32, -1, -1);
    kiln_scope_end(ctx);
}

TU_TEST(scopes, no_growth_over_iterations) {
    int64_t base = LIVE();
    kiln_tensor *w = kiln_full(ctx, KILN_F32, TU_S(4, 4), 0.5);
    int64_t with_w = LIVE();
    for (int it = 0; it < 30; it++) {
        kiln_scope_begin(ctx);
        kiln_tensor *x = kiln_rand(ctx, KILN_F32, TU_S(3, 4), (uint64_t)it);
        kiln_tensor *y = kiln_relu(kiln_matmul(x, w));
        kiln_tensor *s = kiln_sum(y, 0, NULL, false);
        double v = TU_ITEM(s);
        cr_assert(v >= 0);
        kiln_scope_end(ctx);
        ASSERT_LIVE(with_w);
    }
    kiln_release(w);
    ASSERT_LIVE(base);
}

TU_TEST(scopes, assignments_inside_scopes) {
    int64_t base = LIVE();
    kiln_tensor *p = kiln_zeros(ctx, KILN_F32, TU_S(3));
    for (int it = 1; it <= 5; it++) {
        kiln_scope_begin(ctx);
        kiln_tensor *g = kiln_full(ctx, KILN_F32, TU_S(3), 1);
        cr_assert_eq(kiln_assign(p, kiln_add(p, g)), KILN_OK);
        kiln_scope_end(ctx);
        cr_assert_eq(kiln_sync(ctx), KILN_OK);
    }
    TU_EXPECT_VALS(p, KILN_F32, 5, 5, 5);
    kiln_release(p);
    ASSERT_LIVE(base);
}

TU_TEST(scopes, hash_consing) {
    kiln_tensor *a = kiln_arange(ctx, KILN_F32, 0, 5, 1);
    kiln_tensor *b = kiln_full(ctx, KILN_F32, TU_S(5), 2);
    cr_assert_eq(kiln_realize(a), KILN_OK);
    int64_t n0 = LIVE();
    kiln_tensor *s1 = kiln_add(a, b);
    int64_t n1 = LIVE();
    cr_assert(n1 > n0, "[%s] kiln_add made no node", tu_exec_name());
    kiln_tensor *s2 = kiln_add(a, b);
    ASSERT_LIVE(n1);
    kiln_tensor *e1 = kiln_exp(s1);
    int64_t n2 = LIVE();
    kiln_tensor *e2 = kiln_exp(s2);
    ASSERT_LIVE(n2);
    kiln_tensor *r1 = kiln_sum(e1, TU_AXES(0), false);
    int64_t n3 = LIVE();
    kiln_tensor *r2 = kiln_sum(e2, TU_AXES(-1), false);
    ASSERT_LIVE(n3);
    /* handles stay distinct: releasing one leaves the other working */
    kiln_release(s1);
    kiln_release(e1);
    kiln_release(r1);
    TU_EXPECT_VALS(s2, KILN_F32, 2, 3, 4, 5, 6);
    double want = exp(2) + exp(3) + exp(4) + exp(5) + exp(6);
    TU_EXPECT(r2, KILN_F32, &want, 1);
    /* a different op, or different data, is a different node */
    int64_t n4 = LIVE();
    kiln_tensor *m = kiln_mul(a, b);
    cr_assert(LIVE() > n4);
    int64_t n5 = LIVE();
    kiln_tensor *a2 = kiln_arange(ctx, KILN_F32, 0, 5, 1);
    (void)kiln_from_data(ctx, KILN_F32, TU_S(1), (float[1]){1});
    (void)kiln_from_data(ctx, KILN_F32, TU_S(1), (float[1]){1});
    cr_assert(LIVE() >= n5 + 2, "[%s] two bound buffers share a node", tu_exec_name());
    TU_EXPECT_VALS(m, KILN_F32, 0, 2, 4, 6, 8);
    TU_EXPECT_VALS(a2, KILN_F32, 0, 1, 2, 3, 4);
}

TU_TEST(scopes, constants_fold) {
    int64_t base = LIVE();
    kiln_tensor *w = kiln_full(ctx, KILN_F32, TU_S(2, 3), 5);
    int64_t full_nodes = LIVE() - base;
    kiln_release(w);
    ASSERT_LIVE(base);

    kiln_tensor *x = kiln_full(ctx, KILN_F32, TU_S(2, 3), 2);
    kiln_tensor *y = kiln_full(ctx, KILN_F32, TU_S(2, 3), 3);
    kiln_tensor *z = kiln_add(x, y);
    kiln_release(x);
    kiln_release(y);
    /* what is left is one constant: no bigger than a kiln_full */
    cr_assert(LIVE() - base <= full_nodes, "[%s] 2 + 3 left %lld nodes, a full has %lld",
              tu_exec_name(), (long long)(LIVE() - base), (long long)full_nodes);
    /* and it is the same constant as a kiln_full of 5 */
    int64_t before = LIVE();
    kiln_tensor *five = kiln_full(ctx, KILN_F32, TU_S(2, 3), 5);
    ASSERT_LIVE(before);
    TU_EXPECT_VALS(z, KILN_F32, 5, 5, 5, 5, 5, 5);
    TU_EXPECT_VALS(five, KILN_F32, 5, 5, 5, 5, 5, 5);

    /* folding follows the dtype's rules */
    kiln_tensor *i =
        kiln_div(kiln_full(ctx, KILN_I32, TU_S(2), -7), kiln_full(ctx, KILN_I32, TU_S(2), 2));
    TU_EXPECT_VALS(i, KILN_I32, -4, -4);
    kiln_tensor *u = kiln_add_scalar(kiln_full(ctx, KILN_U8, TU_S(1), 250), 10);
    TU_EXPECT_VALS(u, KILN_U8, 4);
    kiln_tensor *h =
        kiln_add(kiln_full(ctx, KILN_F16, TU_S(1), 2048), kiln_full(ctx, KILN_F16, TU_S(1), 1));
    TU_EXPECT_VALS(h, KILN_F16, 2048);
    kiln_tensor *mx = kiln_maximum(kiln_scalar(ctx, KILN_F32, NAN), kiln_scalar(ctx, KILN_F32, 1));
    cr_assert(isnan(TU_ITEM(mx)));
}

TU_TEST(scopes, simplifications) {
    TU_RNG(r);
    double v[6];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3), -5, 5, v);
    int64_t n0 = LIVE();

    /* x * 1 and x + 0 are x: no node survives */
    kiln_tensor *a = kiln_mul_scalar(x, 1);
    ASSERT_LIVE(n0);
    kiln_tensor *b = kiln_add_scalar(x, 0);
    ASSERT_LIVE(n0);
    kiln_tensor *one = kiln_ones(ctx, KILN_F32, TU_S(2, 3));
    kiln_tensor *c = kiln_mul(x, one);
    kiln_tensor *zero = kiln_zeros(ctx, KILN_F32, TU_S(2, 3));
    kiln_tensor *d = kiln_add(x, zero);
    kiln_release(one);
    kiln_release(zero);
    ASSERT_LIVE(n0);
    TU_EXPECT_EXACT(a, KILN_F32, v, 6);
    TU_EXPECT_EXACT(b, KILN_F32, v, 6);
    TU_EXPECT_EXACT(c, KILN_F32, v, 6);
    TU_EXPECT_EXACT(d, KILN_F32, v, 6);

    /* neg(neg(x)) is x (in eager mode neg(x) is already computed, and
     * whether the rewrite looks through it is the executor's choice) */
    n0 = LIVE();
    kiln_tensor *n1 = kiln_neg(x);
    int64_t with_neg = LIVE();
    cr_assert(with_neg > n0);
    kiln_tensor *n2 = kiln_neg(n1);
    if (kiln_ctx_mode(ctx) == KILN_LAZY) {
        ASSERT_LIVE(with_neg);
        kiln_release(n1);
        ASSERT_LIVE(n0);
    }
    TU_EXPECT_EXACT(n2, KILN_F32, v, 6);

    /* simplification must not change the dtype: bool * 1 is i64, i32 + 0.5 f32 */
    kiln_tensor *bo = tu_tensor(ctx, KILN_BOOL, TU_S(3), (double[]){1, 0, 1});
    TU_EXPECT_VALS(kiln_mul_scalar(bo, 1), KILN_I64, 1, 0, 1);
    TU_EXPECT_VALS(kiln_add_scalar(bo, 0), KILN_I64, 1, 0, 1);
    kiln_tensor *iv = tu_tensor(ctx, KILN_I32, TU_S(2), (double[]){3, -3});
    TU_EXPECT_VALS(kiln_add_scalar(iv, 0), KILN_I32, 3, -3);
    TU_EXPECT_VALS(kiln_mul(iv, kiln_ones(ctx, KILN_F16, TU_S(2))), KILN_F16, 3, -3);
    TU_EXPECT_VALS(kiln_mul(kiln_ones(ctx, KILN_I64, TU_S(2)), iv), KILN_I64, 3, -3);
    /* nor broadcasting: x [2,3] * ones [4,2,3] is [4,2,3] */
    kiln_tensor *big = kiln_mul(x, kiln_ones(ctx, KILN_F32, TU_S(4, 2, 3)));
    TU_ASSERT_SHAPE(big, 4, 2, 3);
    /* x * 1 keeps NaN and -0.0 as they are */
    kiln_tensor *sp = tu_tensor(ctx, KILN_F64, TU_S(2), (double[]){NAN, -0.0});
    double got[2];
    TU_READ(kiln_mul_scalar(sp, 1), got, 2);
    cr_assert(isnan(got[0]) && got[1] == 0 && signbit(got[1]));
}

TU_TEST(scopes, context_free_with_everything_outstanding) {
    /* A second context left full of handles, scopes, pending assignments and
     * realized buffers; kiln_ctx_free must take it all (the sanitizer build
     * checks for leaks). */
    kiln_ctx *c = tu_ctx_like_current();
    cr_assert_not_null(c);
    kiln_tensor *x = kiln_rand(c, KILN_F32, TU_S(8, 8), 3);
    kiln_scope_begin(c);
    kiln_tensor *y = kiln_matmul(x, x);
    cr_assert_eq(kiln_realize(y), KILN_OK);
    cr_assert_eq(kiln_assign(x, kiln_exp(y)), KILN_OK);
    kiln_scope_begin(c);
    (void)kiln_keep(kiln_sum(y, 0, NULL, false));
    kiln_ctx_free(c);
    (void)ctx;
}

TU_TEST(scopes, hash_consing_keeps_distinct_constants_apart) {
    /* constants that compare equal as doubles but are not the same value */
    kiln_tensor *pz = kiln_full(ctx, KILN_F64, TU_S(2), 0.0);
    kiln_tensor *nz = kiln_full(ctx, KILN_F64, TU_S(2), -0.0);
    TU_EXPECT_VALS(kiln_recip(nz), KILN_F64, -INFINITY, -INFINITY);
    TU_EXPECT_VALS(kiln_recip(pz), KILN_F64, INFINITY, INFINITY);
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2));
    TU_EXPECT_VALS(kiln_div(x, kiln_scalar(ctx, KILN_F32, -0.0)), KILN_F32, -INFINITY, -INFINITY);
    TU_EXPECT_VALS(kiln_div(x, kiln_scalar(ctx, KILN_F32, 0.0)), KILN_F32, INFINITY, INFINITY);
    TU_EXPECT_VALS(kiln_div_scalar(x, -0.0), KILN_F32, -INFINITY, -INFINITY);
    /* i64 constants beyond 2^53 that are equal as doubles */
    kiln_tensor *base = kiln_full(ctx, KILN_I64, TU_S(1), 9007199254740992.0);
    kiln_tensor *p1 = kiln_add_scalar(base, 1);
    kiln_tensor *p2 = kiln_add_scalar(base, 2);
    kiln_tensor *p1b = kiln_sub_scalar(p2, 1);
    const int64_t w1 = (1ll << 53) + 1, w2 = (1ll << 53) + 2;
    TU_EXPECT_I64(p1, KILN_I64, &w1, 1);
    TU_EXPECT_I64(p2, KILN_I64, &w2, 1);
    TU_EXPECT_I64(p1b, KILN_I64, &w1, 1);
    TU_EXPECT_VALS(kiln_eq(p1, p2), KILN_BOOL, 0);
    /* the same value in different dtypes */
    kiln_tensor *f = kiln_full(ctx, KILN_F32, TU_S(1), 0.1);
    kiln_tensor *d = kiln_full(ctx, KILN_F64, TU_S(1), 0.1);
    kiln_tensor *h = kiln_full(ctx, KILN_F16, TU_S(1), 0.1);
    kiln_tensor *b = kiln_full(ctx, KILN_BF16, TU_S(1), 0.1);
    TU_EXPECT_VALS(kiln_sub(d, f), KILN_F64, 0.1 - (double)0.1f);
    TU_EXPECT_VALS(h, KILN_F16, tu_round(KILN_F16, 0.1));
    TU_EXPECT_VALS(b, KILN_BF16, tu_round(KILN_BF16, 0.1));
    TU_EXPECT_VALS(kiln_full(ctx, KILN_I32, TU_S(1), 2), KILN_I32, 2);
    TU_EXPECT_VALS(
        kiln_div(kiln_full(ctx, KILN_I32, TU_S(1), 7), kiln_full(ctx, KILN_I32, TU_S(1), 2)),
        KILN_I32, 3);
    TU_EXPECT_VALS(
        kiln_div(kiln_full(ctx, KILN_F32, TU_S(1), 7), kiln_full(ctx, KILN_F32, TU_S(1), 2)),
        KILN_F32, 3.5);
    /* NaN constants fold and compare like NaN */
    kiln_tensor *n1 = kiln_full(ctx, KILN_F32, TU_S(1), NAN);
    kiln_tensor *n2 = kiln_full(ctx, KILN_F32, TU_S(1), NAN);
    TU_EXPECT_VALS(kiln_eq(n1, n2), KILN_BOOL, 0);
    TU_EXPECT_VALS(kiln_ne(n1, n1), KILN_BOOL, 1);
    TU_EXPECT_VALS(kiln_sub(n1, n1), KILN_F32, NAN);
    /* x - x and x * 0 are not 0 when x is inf or NaN */
    kiln_tensor *sp = tu_tensor(ctx, KILN_F64, TU_S(3), (double[]){INFINITY, NAN, -2});
    TU_EXPECT_VALS(kiln_sub(sp, sp), KILN_F64, NAN, NAN, 0);
    TU_EXPECT_VALS(kiln_mul_scalar(sp, 0), KILN_F64, NAN, NAN, -0.0);
    double got[3];
    TU_READ(kiln_mul_scalar(sp, 0), got, 3);
    cr_assert(signbit(got[2]), "[%s] -2 * 0 lost its sign", tu_exec_name());
}
