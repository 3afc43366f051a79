/* ops_softmax_rows_test.c — kiln_softmax and kiln_log_softmax on rows whose
 * maximum sits in the last element, where a row maximum that skips an element
 * overflows exp; and on rows holding NaN and infinities. Expected values are
 * computed here in long double, not by the reference executor. */
#include "test_util.h"

/* Softmax (or log-softmax) of each row of x[rows][n] into out, in long double;
 * a row with NaN, +inf, or only -inf gives NaN throughout, as x - max(x) does. */
static void host_softmax(const double *x, int64_t rows, int64_t n, bool log, double *out) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * n;
        long double mx = -INFINITY;
        bool nan = false;
        for (int64_t i = 0; i < n; i++) {
            nan |= isnan(xr[i]);
            if (xr[i] > mx)
                mx = xr[i];
        }
        long double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += expl(xr[i] - mx);
        for (int64_t i = 0; i < n; i++) {
            long double z = xr[i] - mx;
            double v = (double)(log ? z - logl(s) : expl(z) / s);
            out[r * n + i] = nan || isinf(mx) ? NAN : v;
        }
    }
}

static void check_rows(kiln_ctx *ctx, kiln_dtype dt, const double *x, int64_t rows, int64_t n) {
    double *want = malloc((size_t)(rows * n) * sizeof *want);
    kiln_tensor *t = tu_tensor(ctx, dt, 2, TU_DIMS(rows, n), x);
    for (int log = 0; log < 2; log++) {
        host_softmax(x, rows, n, log, want);
        kiln_tensor *y = log ? kiln_log_softmax(t, -1) : kiln_softmax(t, -1);
        TU_EXPECT(y, dt, want, rows * n);
    }
    free(want);
}

TU_TEST(softmax_rows, max_in_the_last_element) {
    const double x[] = {
        0,     0, 1000, /* exp(1000) overflows unless 1000 is the max */
        -1000, 0, 1000, /* */
        1,     2, 3,    /* */
        -5,    -3, 80,  /* */
    };
    check_rows(ctx, KILN_F32, x, 4, 3);
    check_rows(ctx, KILN_F64, x, 4, 3);
    TU_EXPECT_VALS(kiln_softmax(tu_tensor(ctx, KILN_F32, 1, TU_DIMS(3), x), 0), KILN_F32, 0, 0, 1);
    TU_EXPECT_VALS(kiln_softmax(tu_tensor(ctx, KILN_F64, 1, TU_DIMS(3), x + 3), 0), KILN_F64, 0,
                   0, 1);
}

/* Longer rows (past a vector's width, and past the length at which a row is
 * split across threads), each with its maximum last and far above the rest. */
TU_TEST(softmax_rows, long_rows_max_last) {
    TU_RNG(r);
    const int64_t lens[] = {17, 257, 5000};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        int64_t n = lens[k], rows = 3;
        double *x = malloc((size_t)(rows * n) * sizeof *x);
        for (int64_t i = 0; i < rows * n; i++)
            x[i] = tu_unif(&r, -4, 4);
        for (int64_t q = 0; q < rows; q++)
            x[q * n + n - 1] = 200 + (double)q;
        check_rows(ctx, KILN_F32, x, rows, n);
        free(x);
    }
}

TU_TEST(softmax_rows, nan_and_infinities) {
    const double x[] = {
        NAN,       0,         1,         /* NaN anywhere: NaN throughout */
        0,         1,         NAN,       /* */
        0,         INFINITY,  1,         /* inf - inf is NaN */
        -INFINITY, 0,         0,         /* -inf is a zero weight */
        -INFINITY, -INFINITY, -INFINITY, /* no finite max: NaN */
        -INFINITY, 2,         -1,        /* */
    };
    double want[18];
    host_softmax(x, 6, 3, false, want);
    const double hand[18] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, 0, 0.5, 0.5,
                             NAN, NAN, NAN, 0,   0,   0};
    for (int i = 0; i < 15; i++)
        cr_assert(tu_same_value(want[i], hand[i]), "host softmax element %d", i);
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, 2, TU_DIMS(6, 3), x);
    TU_EXPECT(kiln_softmax(t, 1), KILN_F32, want, 18);
    host_softmax(x, 6, 3, true, want);
    TU_EXPECT(kiln_log_softmax(t, 1), KILN_F32, want, 18);
}

/* Causal attention with 16 keys a row in f64 (two vectors of 8 int lanes on
 * AVX-512): softmax(q k^T / sqrt(8)) with key j > query i at -inf, times v.
 * gcc 12 vectorised the row max's NaN flag into a masked load past its
 * OpenMP lane array (see vector_extreme_pass in jit/cpu/render_c.c), and
 * every row with an unmasked key past the eighth came out NaN on the C path;
 * it is the transformer block's softmax. v is not the identity: kiln_eye
 * would share the mask's index ramps, which are then computed once into
 * buffers instead of inside the softmax, where the fault was. */
TU_TEST(softmax_rows, causal_attention_rows_of_16) {
    enum { NB = 2, NH = 4, L = 16, DH = 8, N = NB * NH * L * DH };
    TU_RNG(r);
    double *q = malloc(sizeof *q * N), *k = malloc(sizeof *k * N), *v = malloc(sizeof *v * N);
    double *want = malloc(sizeof *want * N);
    for (int i = 0; i < N; i++) {
        q[i] = tu_unif(&r, -2, 2);
        k[i] = tu_unif(&r, -2, 2);
        v[i] = tu_unif(&r, -2, 2);
    }
    for (int h = 0; h < NB * NH; h++)
        for (int i = 0; i < L; i++) {
            long double s[L], mx = -INFINITY, sum = 0, o[DH] = {0};
            for (int j = 0; j <= i; j++) {
                s[j] = 0;
                for (int d = 0; d < DH; d++)
                    s[j] += (long double)q[(h * L + i) * DH + d] * k[(h * L + j) * DH + d];
                s[j] /= sqrtl(DH);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j <= i; j++)
                sum += expl(s[j] - mx);
            for (int j = 0; j <= i; j++)
                for (int d = 0; d < DH; d++)
                    o[d] += expl(s[j] - mx) / sum * v[(h * L + j) * DH + d];
            for (int d = 0; d < DH; d++)
                want[(h * L + i) * DH + d] = (double)o[d];
        }
    const int64_t *dims = TU_DIMS(NB, NH, L, DH);
    kiln_tensor *p = kiln_scaled_dot_product_attention(tu_tensor(ctx, KILN_F64, 4, dims, q),
                                                       tu_tensor(ctx, KILN_F64, 4, dims, k),
                                                       tu_tensor(ctx, KILN_F64, 4, dims, v), true, 0);
    TU_EXPECT(p, KILN_F64, want, N);
    free(q);
    free(k);
    free(v);
    free(want);
}
