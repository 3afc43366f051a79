/* ops_einsum_test.c — kiln_einsum on every executor against a brute-force
 * einsum done here (every assignment of every letter, products summed, in
 * doubles) and against loops written out by hand for the ellipsis cases:
 * matrix products, batches, outer products, traces, diagonals, transposes,
 * sums, a bilinear form, broadcasting, three operands, integers, empty and
 * 0-d operands, and every error. */
#include "test_util.h"

typedef struct ref_op {
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    const double *v;
} ref_op;

/* Explicit subscripts of letters only ("ij,jk->ik"); a size-1 axis
 * broadcasts against its letter's size. out holds the output's elements. */
static int64_t ref_einsum(const char *subs, int n, const ref_op *ops, double *out) {
    char terms[8][16] = {{0}}, outt[16] = {0};
    int t = 0, k = 0;
    const char *p = subs;
    for (; *p && *p != '-'; p++) {
        if (*p == ',') {
            t++;
            k = 0;
        } else {
            terms[t][k++] = *p;
        }
    }
    cr_assert(t + 1 == n && *p == '-', "ref_einsum: bad subscripts %s", subs);
    snprintf(outt, sizeof outt, "%s", p + 2);
    int64_t size[128] = {0};
    char letters[64];
    int nl = 0;
    for (int i = 0; i < n; i++)
        for (int d = 0; terms[i][d]; d++) {
            int c = terms[i][d];
            if (!size[c])
                letters[nl++] = (char)c;
            if (ops[i].dims[d] > size[c] || !size[c])
                size[c] = ops[i].dims[d] ? ops[i].dims[d] : -1;
        }
    for (int c = 0; c < 128; c++)
        if (size[c] < 0)
            size[c] = 0;
    int64_t nout = 1;
    for (int d = 0; outt[d]; d++)
        nout *= size[(int)outt[d]];
    for (int64_t i = 0; i < nout; i++)
        out[i] = 0;
    int64_t combos = 1;
    for (int l = 0; l < nl; l++)
        combos *= size[(int)letters[l]];
    int64_t at[128] = {0};
    for (int64_t c = 0; c < combos; c++) {
        int64_t rest = c;
        for (int l = nl - 1; l >= 0; l--) {
            at[(int)letters[l]] = rest % size[(int)letters[l]];
            rest /= size[(int)letters[l]];
        }
        double prod = 1;
        for (int i = 0; i < n; i++) {
            int64_t f = 0;
            for (int d = 0; terms[i][d]; d++)
                f = f * ops[i].dims[d] + (ops[i].dims[d] == 1 ? 0 : at[(int)terms[i][d]]);
            prod *= ops[i].v[f];
        }
        int64_t o = 0;
        for (int d = 0; outt[d]; d++)
            o = o * size[(int)outt[d]] + at[(int)outt[d]];
        out[o] += prod;
    }
    return nout;
}

/* Random operands of the given shapes (2 at most per call site, up to 3),
 * kiln_einsum(kiln_subs) against ref_einsum(ref_subs). */
static void check(kiln_ctx *ctx, tu_rng *r, kiln_dtype dt, const char *kiln_subs,
                  const char *ref_subs, int n, const int *nd, const int64_t (*dims)[KILN_MAX_DIMS]) {
    double *vals[4];
    ref_op ops[4];
    kiln_tensor *ts[4];
    for (int i = 0; i < n; i++) {
        int64_t m = tu_numel(nd[i], dims[i]);
        vals[i] = malloc(sizeof(double) * (size_t)(m ? m : 1));
        ts[i] = tu_rand_tensor(ctx, r, dt, nd[i], dims[i], -3, 3, vals[i]);
        ops[i].nd = nd[i];
        memcpy(ops[i].dims, dims[i], sizeof(int64_t) * (size_t)nd[i]);
        ops[i].v = vals[i];
    }
    double want[512];
    int64_t nout = ref_einsum(ref_subs, n, ops, want);
    kiln_tensor *got = kiln_einsum(kiln_subs, n, ts);
    TU_ASSERT_OK(got);
    cr_assert(kiln_numel(got) == nout, "[%s] %s: %lld elements, expected %lld", tu_exec_name(),
              kiln_subs, (long long)kiln_numel(got), (long long)nout);
    TU_EXPECT(got, dt, want, nout);
    for (int i = 0; i < n; i++)
        free(vals[i]);
}

#define SHAPES(...) ((const int64_t[][KILN_MAX_DIMS]){__VA_ARGS__})
#define NDS(...) ((const int[]){__VA_ARGS__})

TU_TEST(einsum, two_operands) {
    TU_RNG(r);
    check(ctx, &r, KILN_F32, "ij,jk->ik", "ij,jk->ik", 2, NDS(2, 2), SHAPES({3, 4}, {4, 5}));
    check(ctx, &r, KILN_F64, "ij,jk", "ij,jk->ik", 2, NDS(2, 2), SHAPES({3, 4}, {4, 5}));
    check(ctx, &r, KILN_F32, " i j , j k -> k i ", "ij,jk->ki", 2, NDS(2, 2), SHAPES({3, 4}, {4, 2}));
    check(ctx, &r, KILN_F32, "bij,bjk->bik", "bij,bjk->bik", 2, NDS(3, 3), SHAPES({2, 3, 4}, {2, 4, 5}));
    check(ctx, &r, KILN_F64, "bij,bkj->bki", "bij,bkj->bki", 2, NDS(3, 3), SHAPES({2, 3, 4}, {2, 5, 4}));
    check(ctx, &r, KILN_F32, "i,j->ij", "i,j->ij", 2, NDS(1, 1), SHAPES({3}, {4}));
    check(ctx, &r, KILN_F32, "i,j", "i,j->ij", 2, NDS(1, 1), SHAPES({3}, {4}));
    check(ctx, &r, KILN_F64, "i,i->", "i,i->", 2, NDS(1, 1), SHAPES({7}, {7}));
    check(ctx, &r, KILN_F64, "ij,ij->ij", "ij,ij->ij", 2, NDS(2, 2), SHAPES({3, 4}, {3, 4}));
    /* letters in one operand only, summed before the product */
    check(ctx, &r, KILN_F64, "abc,cd->d", "abc,cd->d", 2, NDS(3, 2), SHAPES({2, 3, 4}, {4, 3}));
    /* upper-case letters sort before lower-case in the implicit output */
    check(ctx, &r, KILN_F64, "bA,Cb", "bA,Cb->AC", 2, NDS(2, 2), SHAPES({3, 2}, {4, 3}));
    /* a size-1 axis broadcasts, on a kept letter and on a contracted one */
    check(ctx, &r, KILN_F64, "ij,ij->ij", "ij,ij->ij", 2, NDS(2, 2), SHAPES({1, 4}, {3, 4}));
    check(ctx, &r, KILN_F64, "ij,jk->ik", "ij,jk->ik", 2, NDS(2, 2), SHAPES({3, 1}, {4, 2}));
    /* integers wrap in their dtype; mixed dtypes promote */
    check(ctx, &r, KILN_I32, "ij,jk->ik", "ij,jk->ik", 2, NDS(2, 2), SHAPES({3, 4}, {4, 2}));
    kiln_tensor *a = tu_tensor(ctx, KILN_I32, TU_S(2, 2), (double[]){1, 2, 3, 4});
    kiln_tensor *b = tu_tensor(ctx, KILN_F32, TU_S(2), (double[]){0.5, -1});
    TU_EXPECT_VALS(kiln_einsum("ij,j->i", 2, (kiln_tensor *[]){a, b}), KILN_F32, -1.5, -2.5);
    TU_EXPECT_VALS(kiln_einsum("ii", 1, &a), KILN_I32, 5);
}

TU_TEST(einsum, one_operand) {
    TU_RNG(r);
    check(ctx, &r, KILN_F64, "ii->", "ii->", 1, NDS(2), SHAPES({4, 4}));
    check(ctx, &r, KILN_F32, "ii", "ii->", 1, NDS(2), SHAPES({5, 5}));
    check(ctx, &r, KILN_F64, "ii->i", "ii->i", 1, NDS(2), SHAPES({4, 4}));
    check(ctx, &r, KILN_F64, "iij->ji", "iij->ji", 1, NDS(3), SHAPES({3, 3, 2}));
    check(ctx, &r, KILN_F64, "iii->i", "iii->i", 1, NDS(3), SHAPES({3, 3, 3}));
    check(ctx, &r, KILN_F64, "ijij->ij", "ijij->ij", 1, NDS(4), SHAPES({2, 3, 2, 3}));
    check(ctx, &r, KILN_F32, "ij->ji", "ij->ji", 1, NDS(2), SHAPES({3, 4}));
    check(ctx, &r, KILN_F32, "ji", "ji->ij", 1, NDS(2), SHAPES({3, 4})); /* implicit: a transpose */
    check(ctx, &r, KILN_F64, "ij->", "ij->", 1, NDS(2), SHAPES({3, 4}));
    check(ctx, &r, KILN_F64, "ijk->j", "ijk->j", 1, NDS(3), SHAPES({2, 3, 4}));
    check(ctx, &r, KILN_F64, "ijk->kij", "ijk->kij", 1, NDS(3), SHAPES({2, 3, 4}));
    /* nothing to do: still a handle of its own */
    double x[6];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3), -1, 1, x);
    kiln_tensor *same = kiln_einsum("ij->ij", 1, &t);
    cr_assert(same != t);
    kiln_release(same);
    TU_EXPECT(t, KILN_F32, x, 6);
}

TU_TEST(einsum, bilinear_and_three_operands) {
    TU_RNG(r);
    check(ctx, &r, KILN_F64, "bn,anm,bm->ba", "bn,anm,bm->ba", 3, NDS(2, 3, 2),
          SHAPES({2, 4}, {3, 4, 5}, {2, 5}));
    check(ctx, &r, KILN_F32, "bn,anm,bm->ba", "bn,anm,bm->ba", 3, NDS(2, 3, 2),
          SHAPES({3, 2}, {2, 2, 3}, {3, 3}));
    check(ctx, &r, KILN_F64, "ij,jk,kl->il", "ij,jk,kl->il", 3, NDS(2, 2, 2),
          SHAPES({2, 3}, {3, 4}, {4, 2}));
    check(ctx, &r, KILN_F64, "ij,jk,kl", "ij,jk,kl->il", 3, NDS(2, 2, 2),
          SHAPES({2, 3}, {3, 4}, {4, 2}));
    /* a letter shared by the first and last operands only stays to the end */
    check(ctx, &r, KILN_F64, "ia,ab,bi->i", "ia,ab,bi->i", 3, NDS(2, 2, 2),
          SHAPES({3, 2}, {2, 4}, {4, 3}));
    check(ctx, &r, KILN_F64, "i,i,i->", "i,i,i->", 3, NDS(1, 1, 1), SHAPES({5}, {5}, {5}));
    check(ctx, &r, KILN_F64, "ab,c,ab->cab", "ab,c,ab->cab", 3, NDS(2, 1, 2),
          SHAPES({2, 3}, {2}, {2, 3}));
}

TU_TEST(einsum, ellipsis_broadcasts) {
    TU_RNG(r);
    /* [2,1,3,4] @ [4,4,2]: batch [2,1] with [4] broadcasts to [2,4] */
    double a[2 * 3 * 4], b[4 * 4 * 2], want[2 * 4 * 3 * 2];
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 1, 3, 4), -2, 2, a);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(4, 4, 2), -2, 2, b);
    for (int p = 0; p < 2; p++)
        for (int q = 0; q < 4; q++)
            for (int i = 0; i < 3; i++)
                for (int k = 0; k < 2; k++) {
                    double s = 0;
                    for (int j = 0; j < 4; j++)
                        s += a[(p * 3 + i) * 4 + j] * b[(q * 4 + j) * 2 + k];
                    want[((p * 4 + q) * 3 + i) * 2 + k] = s;
                }
    kiln_tensor *ab[2] = {ta, tb};
    kiln_tensor *got = kiln_einsum("...ij,...jk->...ik", 2, ab);
    TU_ASSERT_SHAPE(got, 2, 4, 3, 2);
    TU_EXPECT(got, KILN_F64, want, 48);
    TU_EXPECT(kiln_einsum("...ij,...jk", 2, ab), KILN_F64, want, 48);
    /* an ellipsis in the middle, a batched diagonal, a sum over it */
    double x[2 * 3 * 3 * 4], diag[2 * 3 * 4], tot[4];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(4, 2, 3, 3), -2, 2, x);
    for (int i = 0; i < 4; i++) {
        tot[i] = 0;
        for (int p = 0; p < 2; p++)
            for (int j = 0; j < 3; j++) {
                diag[(i * 2 + p) * 3 + j] = x[((i * 2 + p) * 3 + j) * 3 + j];
                for (int k = 0; k < 3; k++)
                    tot[i] += x[((i * 2 + p) * 3 + j) * 3 + k];
            }
    }
    TU_EXPECT(kiln_einsum("i...jj->i...j", 1, &tx), KILN_F32, diag, 24);
    TU_EXPECT(kiln_einsum("i...->i", 1, &tx), KILN_F32, tot, 4); /* not in the output: summed */
    /* an ellipsis that covers nothing */
    double m[6];
    kiln_tensor *tm = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3), -2, 2, m);
    TU_EXPECT(kiln_einsum("...ij->...ij", 1, &tm), KILN_F32, m, 6);
    TU_ASSERT_SHAPE(kiln_einsum("ij...->...ji", 1, &tm), 3, 2);
}

TU_TEST(einsum, empty_and_0d) {
    TU_RNG(r);
    /* an empty contraction is zeros; an empty free axis an empty result */
    kiln_tensor *e[2] = {kiln_zeros(ctx, KILN_F32, TU_S(3, 0)), kiln_zeros(ctx, KILN_F32, TU_S(0, 2))};
    TU_EXPECT_VALS(kiln_einsum("ij,jk->ik", 2, e), KILN_F32, 0, 0, 0, 0, 0, 0);
    kiln_tensor *f[2] = {kiln_zeros(ctx, KILN_F32, TU_S(0, 4)), kiln_ones(ctx, KILN_F32, TU_S(4, 2))};
    TU_ASSERT_SHAPE(kiln_einsum("ij,jk->ik", 2, f), 0, 2);
    /* 0-d operands: a product, a scaling */
    double s[2], v[3];
    kiln_tensor *a = tu_rand_tensor(ctx, &r, KILN_F64, 0, NULL, -2, 2, &s[0]);
    kiln_tensor *b = tu_rand_tensor(ctx, &r, KILN_F64, 0, NULL, -2, 2, &s[1]);
    kiln_tensor *tv = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3), -2, 2, v);
    kiln_tensor *p = kiln_einsum(",->", 2, (kiln_tensor *[]){a, b});
    TU_ASSERT_SCALAR_SHAPE(p);
    TU_EXPECT_VALS(p, KILN_F64, s[0] * s[1]);
    TU_EXPECT(kiln_einsum("i,->i", 2, (kiln_tensor *[]){tv, a}), KILN_F64,
              ((double[]){v[0] * s[0], v[1] * s[0], v[2] * s[0]}), 3);
    TU_EXPECT(kiln_einsum("->", 1, &a), KILN_F64, &s[0], 1);
}

TU_TEST(einsum, errors) {
    kiln_tensor *a = kiln_ones(ctx, KILN_F32, TU_S(3, 4)), *b = kiln_ones(ctx, KILN_F32, TU_S(4, 5));
    kiln_tensor *ab[2] = {a, b};
    TU_ASSERT_ERROR(kiln_einsum("ij;jk->ik", 2, ab), KILN_ERR_ARG, "kiln_einsum", "ij;jk->ik",
                    "[3,4], [4,5]", "';'");
    TU_ASSERT_ERROR(kiln_einsum("i.j,jk", 2, ab), KILN_ERR_ARG, "kiln_einsum", "'.'");
    TU_ASSERT_ERROR(kiln_einsum("ij,jk->i-k", 2, ab), KILN_ERR_ARG, "kiln_einsum", "'-'");
    TU_ASSERT_ERROR(kiln_einsum("ij,jk->ik->i", 2, ab), KILN_ERR_ARG, "kiln_einsum");
    TU_ASSERT_ERROR(kiln_einsum("ij,jk->i,k", 2, ab), KILN_ERR_ARG, "kiln_einsum", "','");
    TU_ASSERT_ERROR(kiln_einsum("ij->ij", 2, ab), KILN_ERR_ARG, "kiln_einsum", "1 term for 2");
    TU_ASSERT_ERROR(kiln_einsum("ij,jk,kl", 2, ab), KILN_ERR_ARG, "kiln_einsum", "more terms");
    TU_ASSERT_ERROR(kiln_einsum("...i...j,jk", 2, ab), KILN_ERR_ARG, "kiln_einsum", "second");
    TU_ASSERT_ERROR(kiln_einsum("ij,jk->iz", 2, ab), KILN_ERR_ARG, "kiln_einsum", "'z'",
                    "no input");
    TU_ASSERT_ERROR(kiln_einsum("ij,jk->kk", 2, ab), KILN_ERR_ARG, "kiln_einsum", "'k'",
                    "repeated");
    TU_ASSERT_ERROR(kiln_einsum(NULL, 2, ab), KILN_ERR_ARG, "kiln_einsum", "[3,4]");
    /* a letter with two sizes, neither 1 */
    TU_ASSERT_ERROR(kiln_einsum("ij,ik->jk", 2, ab), KILN_ERR_SHAPE, "kiln_einsum", "'i'", "3",
                    "4", "[3,4], [4,5]");
    TU_ASSERT_ERROR(kiln_einsum("ii", 1, &a), KILN_ERR_SHAPE, "kiln_einsum", "'i'", "diagonal");
    /* letters against dimensions */
    TU_ASSERT_ERROR(kiln_einsum("ijk,jk", 2, ab), KILN_ERR_SHAPE, "kiln_einsum", "term 0");
    TU_ASSERT_ERROR(kiln_einsum("i,jk", 2, ab), KILN_ERR_SHAPE, "kiln_einsum", "term 0");
    TU_ASSERT_ERROR(kiln_einsum("ijk...,jk", 2, ab), KILN_ERR_SHAPE, "kiln_einsum", "at least");
    TU_ASSERT_ERROR(kiln_einsum("abcdefghi", 1, &a), KILN_ERR_SHAPE, "kiln_einsum", "more than 8");
    /* too many output dimensions */
    kiln_tensor *vs[9];
    for (int i = 0; i < 9; i++)
        vs[i] = kiln_ones(ctx, KILN_F32, TU_S(2));
    TU_ASSERT_ERROR(kiln_einsum("a,b,c,d,e,f,g,h,i", 9, vs), KILN_ERR_SHAPE, "kiln_einsum",
                    "9 dimensions");
    TU_ASSERT_ERROR(kiln_einsum("a,b,c,d,e,f,g,h,i->abcdefghi", 9, vs), KILN_ERR_SHAPE,
                    "kiln_einsum", "more than 8");
    /* dtypes, NULL and error operands, contexts */
    kiln_tensor *m = kiln_ones(ctx, KILN_BOOL, TU_S(4));
    TU_ASSERT_ERROR(kiln_einsum("ij,j", 2, (kiln_tensor *[]){a, m}), KILN_ERR_DTYPE,
                    "kiln_einsum", "bool");
    TU_ASSERT_ERROR(kiln_einsum("ij,jk", 2, (kiln_tensor *[]){a, NULL}), KILN_ERR_ARG,
                    "kiln_einsum");
    kiln_tensor *bad = kiln_add(a, b);
    TU_ASSERT_ERROR(kiln_einsum("ij,jk", 2, (kiln_tensor *[]){bad, b}), KILN_ERR_SHAPE,
                    "kiln_add");
    cr_assert(kiln_einsum("ij", 0, &a) == NULL && kiln_einsum("ij", 1, NULL) == NULL);
    kiln_ctx *other = tu_ctx_like_current();
    kiln_tensor *o = kiln_ones(other, KILN_F32, TU_S(4, 5));
    TU_ASSERT_ERROR(kiln_einsum("ij,jk", 2, (kiln_tensor *[]){a, o}), KILN_ERR_ARG,
                    "kiln_einsum", "context");
    kiln_ctx_free(other);
}
