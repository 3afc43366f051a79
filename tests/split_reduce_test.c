/* split_reduce_test.c — reductions whose rows are split across threads. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include "api/kiln.h"
/* Full reductions long enough to be split across threads agree with the
 * reference evaluator, and the arg reductions still pick the first of equal
 * values. */
static void check(int op) {
    const int64_t n = 1 << 20;
    float *d = malloc(sizeof *d * n);
    uint64_t s = 12345;
    for (int64_t i = 0; i < n; i++) { s = s * 6364136223846793005ull + 1442695040888963407ull; d[i] = (float)((s >> 11) * 0x1p-53) * 4 - 2; }
    d[777777] = 9; d[999999] = 9; /* ties: the first wins */
    kiln_ctx *c = kiln_ctx_new(KILN_CPU), *r = kiln_ctx_new(KILN_REF);
    kiln_tensor *x = kiln_from_data(c, KILN_F32, 1, &n, d), *xr = kiln_from_data(r, KILN_F32, 1, &n, d);
    kiln_tensor *y = op == 0 ? kiln_sum(kiln_exp(x), 0, NULL, false) : op == 1 ? kiln_cast(kiln_argmax(x, 0, NULL, false), KILN_F64) : kiln_min(x, 0, NULL, false);
    kiln_tensor *yr = op == 0 ? kiln_sum(kiln_exp(xr), 0, NULL, false) : op == 1 ? kiln_cast(kiln_argmax(xr, 0, NULL, false), KILN_F64) : kiln_min(xr, 0, NULL, false);
    double a, b;
    cr_assert_eq(kiln_item(y, &a), KILN_OK, "%s", kiln_error_message(y));
    cr_assert_eq(kiln_item(yr, &b), KILN_OK, "%s", kiln_error_message(yr));
    cr_assert(fabs(a - b) <= 1e-6 * fabs(b), "op %d: %.17g vs %.17g", op, a, b);
    if (op == 1) cr_assert_eq(a, 777777.0);
    kiln_ctx_free(c); kiln_ctx_free(r); free(d);
}
Test(split, sum) { check(0); }
Test(split, argmax) { check(1); }
Test(split, min) { check(2); }

/* Rows whose threads' shares are not whole multiples of the streams a share
 * is read in (lower_plan.split_streams): two rows of 300007, their sums and
 * their softmax (its sum pass also stores e^x), against the reference. */
Test(split, uneven_shares_and_stored_passes) {
    enum { W = 300007 };
    const int64_t shape[2] = {2, W};
    float *d = malloc(sizeof *d * 2 * W);
    cr_assert(d);
    uint64_t s = 987654321;
    for (int64_t i = 0; i < 2 * W; i++) { s = s * 6364136223846793005ull + 1442695040888963407ull; d[i] = (float)((s >> 11) * 0x1p-53) * 6 - 3; }
    kiln_ctx *c = kiln_ctx_new(KILN_CPU), *r = kiln_ctx_new(KILN_REF);
    kiln_tensor *x = kiln_from_data(c, KILN_F32, 2, shape, d), *xr = kiln_from_data(r, KILN_F32, 2, shape, d);
    int ax = 1;
    double got[2], want[2];
    cr_assert_eq(kiln_to_host(kiln_cast(kiln_sum(x, 1, &ax, false), KILN_F64), got, sizeof got), KILN_OK);
    cr_assert_eq(kiln_to_host(kiln_cast(kiln_sum(xr, 1, &ax, false), KILN_F64), want, sizeof want), KILN_OK);
    for (int i = 0; i < 2; i++)
        cr_assert(fabs(got[i] - want[i]) <= 1e-3, "row %d: %.17g vs %.17g", i, got[i], want[i]);
    float *sm = malloc(sizeof *sm * 2 * W), *smr = malloc(sizeof *smr * 2 * W);
    cr_assert(sm && smr);
    cr_assert_eq(kiln_to_host(kiln_softmax(x, 1), sm, sizeof *sm * 2 * W), KILN_OK);
    cr_assert_eq(kiln_to_host(kiln_softmax(xr, 1), smr, sizeof *smr * 2 * W), KILN_OK);
    for (int64_t i = 0; i < 2 * W; i++)
        cr_assert(fabs(sm[i] - smr[i]) <= 1e-6 * smr[i] + 1e-12, "at %lld: %.9g vs %.9g", (long long)i, sm[i], smr[i]);
    kiln_ctx_free(c); kiln_ctx_free(r); free(d); free(sm); free(smr);
}
