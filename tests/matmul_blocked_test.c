/* Tests of matmuls large enough for the CPU kernel's blocking: k longer than
 * one k block (partial sums carried between blocks), rows and columns that
 * leave partial register tiles, several row and column blocks, batches,
 * transposed and sliced operands (packed rather than read in place), every
 * dtype family, and an epilogue applied to the finished sums. */
#include "test_util.h"

/* c[b][i][j] = sum_p a(b, i, p) * b(b, p, j) over logical values given with
 * their strides, in long double for floats and wrapping for integers. */
typedef struct mm_view {
    const double *v;
    int64_t bs, rs, cs;
} mm_view;

static void ref_mm(kiln_dtype ct, int64_t nb, int64_t n, int64_t k, int64_t m, mm_view a,
                   mm_view b, double *out) {
    for (int64_t t = 0; t < nb; t++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++) {
                long double s = 0;
                int64_t si = 0;
                for (int64_t p = 0; p < k; p++) {
                    double x = a.v[t * a.bs + i * a.rs + p * a.cs];
                    double y = b.v[t * b.bs + p * b.rs + j * b.cs];
                    if (tu_is_float(ct))
                        s += (long double)x * y;
                    else
                        si = (int64_t)((uint64_t)si + (uint64_t)(int64_t)x * (uint64_t)(int64_t)y);
                }
                out[(t * n + i) * m + j] = tu_is_float(ct) ? (double)s : (double)tu_wrap(ct, si);
            }
}

static double mm_tol(kiln_dtype dt, int64_t k) { return tu_tol(dt) * (double)k / 100; }

/* [nb, n, k] @ [k, m] (b shared by the batch) with contiguous operands. */
static void check_plain(kiln_ctx *ctx, kiln_dtype dt, int64_t nb, int64_t n, int64_t k, int64_t m,
                        double lo, double hi) {
    TU_RNG(r);
    double *va = malloc((size_t)(nb * n * k) * sizeof(double));
    double *vb = malloc((size_t)(k * m) * sizeof(double));
    double *want = malloc((size_t)(nb * n * m) * sizeof(double));
    kiln_tensor *a = tu_rand_tensor(ctx, &r, dt, TU_S(nb, n, k), lo, hi, va);
    kiln_tensor *b = tu_rand_tensor(ctx, &r, dt, TU_S(k, m), lo, hi, vb);
    ref_mm(dt, nb, n, k, m, (mm_view){va, n * k, k, 1}, (mm_view){vb, 0, m, 1}, want);
    kiln_tensor *c = kiln_matmul(a, b);
    TU_ASSERT_SHAPE(c, nb, n, m);
    TU_EXPECT_TOL(c, dt, want, nb * n * m, mm_tol(dt, k));
    free(va);
    free(vb);
    free(want);
}

TU_TEST(matmul_blocked, long_k_and_partial_tiles) {
    check_plain(ctx, KILN_F32, 1, 67, 530, 75, -1, 1);
    check_plain(ctx, KILN_F32, 1, 13, 1100, 3, -1, 1);
    check_plain(ctx, KILN_F64, 1, 61, 300, 37, -1, 1);
}

/* Partial register tiles run micro-kernels of their own sizes (lower.h's
 * lower_mm_edges): the last rows (32 = 5 x 6 + 2), the last columns (196 =
 * 3 x 64 + one vector) and the corner, over a batch (a convolution's
 * products), and with a k that takes several blocks (the partial sums
 * added into the C block by the same edge kernel). */
TU_TEST(matmul_blocked, edge_tiles_of_their_own_size) {
    check_plain(ctx, KILN_F32, 3, 32, 144, 196, -1, 1);
    check_plain(ctx, KILN_F32, 1, 20, 900, 100, -1, 1);
    check_plain(ctx, KILN_F64, 2, 7, 50, 41, -1, 1);
}

/* Narrow outputs take a taller, narrower register tile; a single row pads
 * the tile with zero rows. */
TU_TEST(matmul_blocked, narrow_outputs) {
    check_plain(ctx, KILN_F32, 1, 50, 700, 1, -1, 1);
    check_plain(ctx, KILN_F64, 1, 29, 300, 5, -1, 1);
    check_plain(ctx, KILN_F32, 1, 1, 600, 130, -1, 1);
}

TU_TEST(matmul_blocked, many_blocks_and_batches) {
    check_plain(ctx, KILN_F32, 1, 400, 70, 300, -1, 1);
    check_plain(ctx, KILN_F32, 3, 50, 260, 40, -1, 1);
    check_plain(ctx, KILN_F64, 2, 31, 270, 70, -1, 1);
}

TU_TEST(matmul_blocked, halves) {
    check_plain(ctx, KILN_F16, 1, 20, 300, 33, -1, 1);
    check_plain(ctx, KILN_BF16, 2, 9, 280, 40, -1, 1);
}

TU_TEST(matmul_blocked, integers_wrap) {
    check_plain(ctx, KILN_I32, 1, 19, 300, 35, -100000, 100000);
    check_plain(ctx, KILN_I64, 2, 7, 270, 20, -3000000000.0, 3000000000.0);
    check_plain(ctx, KILN_U8, 1, 9, 290, 17, 0, 255);
}

/* A^T @ B^T with both operands made as their transposes, so that neither is
 * read along rows; and a column slice with a step, so that B's columns are
 * not contiguous. */
TU_TEST(matmul_blocked, transposed_and_strided_operands) {
    TU_RNG(r);
    const int64_t n = 45, k = 310, m = 70;
    double *va = malloc((size_t)(k * n) * sizeof(double));
    double *vb = malloc((size_t)(m * k) * sizeof(double));
    double *want = malloc((size_t)(n * m) * sizeof(double));
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(k, n), -1, 1, va);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(m, k), -1, 1, vb);
    ref_mm(KILN_F32, 1, n, k, m, (mm_view){va, 0, 1, n}, (mm_view){vb, 0, 1, k}, want);
    kiln_tensor *c = kiln_matmul(kiln_transpose(ta, 0, 1), kiln_transpose(tb, 0, 1));
    TU_ASSERT_SHAPE(c, n, m);
    TU_EXPECT_TOL(c, KILN_F32, want, n * m, mm_tol(KILN_F32, k));

    double *vs = malloc((size_t)(k * 2 * m) * sizeof(double));
    kiln_tensor *wide = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(k, 2 * m), -1, 1, vs);
    kiln_tensor *a = kiln_transpose(ta, 0, 1);
    ref_mm(KILN_F32, 1, n, k, m, (mm_view){va, 0, 1, n}, (mm_view){vs + 1, 0, 2 * m, 2}, want);
    kiln_tensor *d = kiln_matmul(a, kiln_slice(wide, 1, 1, KILN_END, 2));
    TU_ASSERT_SHAPE(d, n, m);
    TU_EXPECT_TOL(d, KILN_F32, want, n * m, mm_tol(KILN_F32, k));
    free(va);
    free(vb);
    free(vs);
    free(want);
}

/* relu(a @ b + bias): the epilogue runs once on each finished sum, after
 * every k block, whatever the tiling. */
TU_TEST(matmul_blocked, epilogue_after_the_last_k_block) {
    TU_RNG(r);
    const int64_t n = 70, k = 520, m = 90;
    double *va = malloc((size_t)(n * k) * sizeof(double));
    double *vb = malloc((size_t)(k * m) * sizeof(double));
    double *vbias = malloc((size_t)m * sizeof(double));
    double *want = malloc((size_t)(n * m) * sizeof(double));
    kiln_tensor *a = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(n, k), -1, 1, va);
    kiln_tensor *b = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(k, m), -1, 1, vb);
    kiln_tensor *bias = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(m), -3, 3, vbias);
    ref_mm(KILN_F32, 1, n, k, m, (mm_view){va, 0, k, 1}, (mm_view){vb, 0, m, 1}, want);
    for (int64_t i = 0; i < n * m; i++) {
        double x = (double)(float)want[i] + (double)(float)vbias[i % m];
        want[i] = x > 0 ? x : 0;
    }
    kiln_tensor *c = kiln_relu(kiln_add(kiln_matmul(a, b), bias));
    TU_ASSERT_SHAPE(c, n, m);
    TU_EXPECT_TOL(c, KILN_F32, want, n * m, mm_tol(KILN_F32, k));
    free(va);
    free(vb);
    free(vbias);
    free(want);
}
