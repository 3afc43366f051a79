/* ir_simplify_test.c — lower/ir.c's index simplifier on its own: x / d and
 * x % d fold by the value range of x only when every value allows it, so the
 * boundaries max(x) == d - 1, d and d + 1 are checked one by one; then a slice
 * of a flattened broadcast that ends on a row boundary, through the scheduler
 * (its kernel's load index) and through every executor (its values). */
#include "lower/ir.h"
#include "test_util.h"

#include "graph/graph.h"

static bool is_op(const ir_builder *b, int id, lower_uop op, int64_t max) {
    return b->ins[id].op == op && b->ins[id].max == max && b->ins[id].min == 0;
}

/* x % d and x / d for x = GIDX over numel elements, in a builder of their own
 * (a kernel has one GIDX). */
static void fold(int64_t numel, int64_t d, bool mod, lower_ins *out, bool *same, bool *zero) {
    ir_builder b;
    ir_init(&b);
    int x = ir_gidx(&b, numel);
    int y = mod ? ir_imod(&b, x, d) : ir_idiv(&b, x, d);
    cr_assert(!b.failed);
    *out = b.ins[y];
    *same = y == x;
    *zero = ir_is_index(&b, y, 0);
    ir_free(&b);
}

Test(ir_simplify, mod_folds_only_below_the_divisor) {
    const int64_t ds[] = {2, 3, 4, 7, 64};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
        int64_t d = ds[k];
        lower_ins y;
        bool same, zero;
        fold(d, d, true, &y, &same, &zero); /* max(x) = d - 1 */
        cr_assert(same, "x %% %lld with max(x) = d-1 not folded", (long long)d);
        fold(d + 1, d, true, &y, &same, &zero); /* max(x) = d */
        cr_assert(!same && y.op == UOP_IMOD && y.min == 0 && y.max == d - 1,
                  "x %% %lld with max(x) = d folded", (long long)d);
        fold(d + 2, d, true, &y, &same, &zero); /* max(x) = d + 1 */
        cr_assert(!same && y.op == UOP_IMOD && y.min == 0 && y.max == d - 1);
    }
}

Test(ir_simplify, div_folds_to_zero_only_below_the_divisor) {
    const int64_t ds[] = {2, 3, 4, 7, 64};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
        int64_t d = ds[k];
        lower_ins y;
        bool same, zero;
        fold(d, d, false, &y, &same, &zero);
        cr_assert(zero, "x / %lld with max(x) = d-1 not folded", (long long)d);
        fold(d + 1, d, false, &y, &same, &zero);
        cr_assert(!zero && y.op == UOP_IDIV && y.min == 0 && y.max == 1,
                  "x / %lld with max(x) = d folded", (long long)d);
        fold(d + 2, d, false, &y, &same, &zero);
        cr_assert(!zero && y.op == UOP_IDIV && y.max == 1);
        fold(3 * d, d, false, &y, &same, &zero);
        cr_assert(!zero && y.op == UOP_IDIV && y.max == 2);
    }
}

Test(ir_simplify, immediates_and_nesting) {
    ir_builder b;
    ir_init(&b);
    cr_assert(ir_is_index(&b, ir_idiv(&b, ir_index(&b, 17), 5), 3));
    cr_assert(ir_is_index(&b, ir_imod(&b, ir_index(&b, 17), 5), 2));
    cr_assert(ir_is_index(&b, ir_imod(&b, ir_index(&b, 20), 5), 0));
    int g = ir_gidx(&b, 1000);
    cr_assert_eq(ir_idiv(&b, g, 1), g);
    cr_assert(ir_is_index(&b, ir_imod(&b, g, 1), 0));
    /* (g / 3) / 4 is g / 12; (g % 12) % 4 is g % 4; (g % 10) % 4 is not */
    cr_assert_eq(ir_idiv(&b, ir_idiv(&b, g, 3), 4), ir_idiv(&b, g, 12));
    cr_assert(is_op(&b, ir_idiv(&b, g, 12), UOP_IDIV, 83));
    cr_assert_eq(ir_imod(&b, ir_imod(&b, g, 12), 4), ir_imod(&b, g, 4));
    int m10 = ir_imod(&b, g, 10);
    int m = ir_imod(&b, m10, 4);
    cr_assert(m != ir_imod(&b, g, 4) && b.ins[m].a == m10);
    /* sums and products carry their ranges */
    int s = ir_iadd(&b, ir_imul(&b, g, 3), ir_index(&b, 5));
    cr_assert_eq(b.ins[s].min, 5);
    cr_assert_eq(b.ins[s].max, 999 * 3 + 5);
    cr_assert_eq(ir_iadd(&b, g, ir_index(&b, 0)), g);
    cr_assert_eq(ir_iadd(&b, s, g), ir_iadd(&b, g, s));
    cr_assert(ir_is_index(&b, ir_imul(&b, g, 0), 0));
    ir_free(&b);
}

/* x < 5 for x = GIDX over numel elements, and 5 < x. */
static void compare(int64_t numel, bool five_first, lower_ins *out) {
    ir_builder b;
    ir_init(&b);
    int x = ir_gidx(&b, numel), five = ir_index(&b, 5);
    *out = b.ins[five_first ? ir_ilt(&b, five, x) : ir_ilt(&b, x, five)];
    ir_free(&b);
}

Test(ir_simplify, compare_folds_by_range) {
    lower_ins y;
    compare(5, false, &y); /* max 4: always below 5 */
    cr_assert(y.op == UOP_IMM && y.imm.i == 1);
    compare(6, false, &y); /* max 5 */
    cr_assert_eq(y.op, UOP_ILT, "x < 5 with max(x) = 5 folded");
    compare(6, true, &y); /* 5 < x never holds when max(x) = 5 */
    cr_assert(y.op == UOP_IMM && y.imm.i == 0);
    compare(7, true, &y);
    cr_assert_eq(y.op, UOP_ILT, "5 < x with max(x) = 6 folded");
}

/* The load index of the one kernel that reads col through
 * reshape(expand(col, [rows, 4]), [rows*4])[start : start+len]. */
static void check_broadcast_slice_ir(int64_t start, int64_t len) {
    graph_ctx *g = graph_ctx_new();
    const int64_t cshape[2] = {3, 1}, eshape[2] = {3, 4}, flat = 12;
    graph_buffer *buf = graph_buffer_new(3 * sizeof(float));
    cr_assert(buf);
    graph_node *col = graph_buffer_node(g, KILN_F32, 2, cshape, buf);
    graph_buffer_unref(buf);
    graph_node *e = graph_expand(col, eshape);
    graph_node *r = graph_reshape(e, 1, &flat);
    const int64_t st = start, step = 1;
    graph_node *s = graph_slice(r, &st, &step, &len);
    graph_node *y = graph_binary(GRAPH_ADD, s, s);
    cr_assert(y);
    lower_program *p = lower_schedule(1, &y, true);
    cr_assert(p && p->nkernels >= 1);
    const lower_kernel *k = &p->kernels[p->nkernels - 1];
    int load = -1;
    for (int i = 0; i < k->nins; i++)
        if (k->ins[i].op == UOP_LOAD)
            load = i;
    cr_assert(load >= 0, "no load in the kernel");
    const lower_ins *ix = &k->ins[k->ins[load].a];
    /* row (start + i) / 4 for i < len: its range is exactly the rows read */
    int64_t first = start / 4, last = (start + len - 1) / 4;
    cr_assert(ix->min == first && ix->max == last, "[%lld:+%lld] index %s in [%lld, %lld]",
              (long long)start, (long long)len, lower_uop_name(ix->op), (long long)ix->min,
              (long long)ix->max);
    if (start == 0 && first == last)
        cr_assert(ix->op == UOP_IMM, "[0:+%lld] index %s", (long long)len, lower_uop_name(ix->op));
    else if (first != last)
        cr_assert(ix->op != UOP_IMM, "[%lld:+%lld] one row", (long long)start, (long long)len);
    lower_program_free(p);
    graph_unref(y);
    graph_unref(s);
    graph_unref(r);
    graph_unref(e);
    graph_unref(col);
    graph_ctx_free(g);
}

Test(ir_simplify, broadcast_slice_kernel_index) {
    const int64_t cases[][2] = {{0, 4}, {0, 5}, {0, 8}, {4, 4}, {4, 5}, {3, 5}, {0, 12}, {8, 4}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        check_broadcast_slice_ir(cases[c][0], cases[c][1]);
}

TU_TEST(ir_simplify, broadcast_slice_values) {
    kiln_tensor *col = tu_tensor(ctx, KILN_F32, 2, TU_DIMS(3, 1), (const double[]){1.5, -2, 7});
    kiln_tensor *flat = kiln_reshape(kiln_expand(col, TU_S(3, 4)), TU_S(12));
    TU_EXPECT_VALS(kiln_slice(flat, 0, 0, 4, 1), KILN_F32, 1.5, 1.5, 1.5, 1.5);
    TU_EXPECT_VALS(kiln_slice(flat, 0, 0, 5, 1), KILN_F32, 1.5, 1.5, 1.5, 1.5, -2);
    TU_EXPECT_VALS(kiln_slice(flat, 0, 0, 8, 1), KILN_F32, 1.5, 1.5, 1.5, 1.5, -2, -2, -2, -2);
    TU_EXPECT_VALS(kiln_slice(flat, 0, 4, 8, 1), KILN_F32, -2, -2, -2, -2);
    TU_EXPECT_VALS(kiln_slice(flat, 0, 3, 8, 1), KILN_F32, 1.5, -2, -2, -2, -2);
    TU_EXPECT_VALS(kiln_slice(flat, 0, 4, 9, 1), KILN_F32, -2, -2, -2, -2, 7);
    TU_EXPECT_VALS(kiln_slice(flat, 0, 8, 12, 1), KILN_F32, 7, 7, 7, 7);
    /* with a per-column term, so that the column index matters too */
    kiln_tensor *row = tu_tensor(ctx, KILN_F32, 1, TU_DIMS(4), (const double[]){0, 10, 20, 30});
    kiln_tensor *grid = kiln_reshape(kiln_add(col, row), TU_S(12));
    TU_EXPECT_VALS(kiln_slice(grid, 0, 0, 5, 1), KILN_F32, 1.5, 11.5, 21.5, 31.5, -2);
    TU_EXPECT_VALS(kiln_slice(grid, 0, 4, 8, 1), KILN_F32, -2, 8, 18, 28);
    TU_EXPECT_VALS(kiln_slice(grid, 0, 3, 9, 1), KILN_F32, 31.5, -2, 8, 18, 28, 7);
    TU_EXPECT_VALS(kiln_sum(kiln_slice(flat, 0, 0, 8, 1), 0, NULL, false), KILN_F32, -2);
}

/* Instructions are interned on every operand: two selects that share their
 * condition and first value but not their second are two instructions (an
 * interning that ignored the third operand made where(m, x, y) + where(m,
 * x, z) twice the first), and so are two loads that differ only in their
 * valid flag. */
Test(ir_simplify, interning_compares_every_operand) {
    ir_builder b;
    ir_init(&b);
    int i = ir_gidx(&b, 64);
    int m = ir_ilt(&b, i, ir_index(&b, 10));
    int x = ir_load(&b, KILN_F32, 0, i, -1), y = ir_load(&b, KILN_F32, 1, i, -1);
    int z = ir_load(&b, KILN_F32, 2, i, -1);
    int w1 = ir_where(&b, KILN_F32, m, x, y), w2 = ir_where(&b, KILN_F32, m, x, z);
    cr_assert_neq(w1, w2, "where(m, x, y) and where(m, x, z) interned as one");
    cr_assert_eq(ir_where(&b, KILN_F32, m, x, y), w1, "the same select twice is one");
    int v1 = ir_load(&b, KILN_F32, 0, i, m);
    cr_assert_neq(v1, x, "a load under a condition interned with the plain load");
    /* The table is probed linearly, so the comparison meets instructions of
     * other hashes too: 2000 selects that differ only in their last operand
     * are 2000 instructions. */
    enum { K = 2000 };
    static int ids[K];
    for (int k = 0; k < K; k++)
        ids[k] = ir_where(&b, KILN_F32, m, x, ir_load(&b, KILN_F32, 3 + k, i, -1));
    for (int k = 1; k < K; k++)
        cr_assert(ids[k] > ids[k - 1], "select %d interned with an earlier one", k);
    cr_assert(!b.failed);
    ir_free(&b);
}

/* A sum splits over a divisor: (a*34 + c + 36) / 34 is a + 1 and its % 34
 * is c + 2 while c + 2 < 34 (a window's coordinate over a pad, recovered
 * from its flat index); with c up to 40 the remainder's quotient stays. */
Test(ir_simplify, sums_split_over_the_divisor) {
    ir_builder b;
    ir_init(&b);
    int g = ir_gidx(&b, 34 * 32);
    int a = ir_idiv(&b, g, 32), c = ir_imod(&b, g, 32);
    int x = ir_iadd(&b, ir_imul(&b, a, 34), ir_iadd(&b, c, ir_index(&b, 36)));
    cr_assert_eq(ir_idiv(&b, x, 34), ir_iadd(&b, a, ir_index(&b, 1)));
    cr_assert_eq(ir_imod(&b, x, 34), ir_iadd(&b, c, ir_index(&b, 2)));
    cr_assert(!b.failed);
    ir_free(&b);
    ir_init(&b);
    g = ir_gidx(&b, 34 * 41);
    a = ir_idiv(&b, g, 41);
    c = ir_imod(&b, g, 41);
    x = ir_iadd(&b, ir_imul(&b, a, 34), c);
    int q = ir_idiv(&b, x, 34);
    cr_assert_eq(q, ir_iadd(&b, a, ir_idiv(&b, c, 34)));
    cr_assert_eq(b.ins[q].max, 34, "max of a + c / 34 is 33 + 1");
    cr_assert_eq(ir_imod(&b, x, 34), ir_imod(&b, c, 34));
    cr_assert(!b.failed);
    ir_free(&b);
}

/* A contiguous [32, 16, 3, 3] operand read in an elementwise kernel: its
 * four coordinates, split from the flat index and put back by its strides,
 * recombine into the flat index itself, summed in either order (an
 * optimiser's update read each such operand as a gather); a digit skipped
 * or a stride wrong leaves the sum alone. */
Test(ir_simplify, digits_recombine_into_the_index) {
    ir_builder b;
    ir_init(&b);
    int g = ir_tiled_gidx(&b, 32 * 16 * 9, 1024);
    int w = ir_imod(&b, g, 3), h = ir_imod(&b, ir_idiv(&b, g, 3), 3);
    int c = ir_imod(&b, ir_idiv(&b, g, 9), 16), n = ir_idiv(&b, g, 144);
    int hs = ir_imul(&b, h, 3), cs = ir_imul(&b, c, 9), ns = ir_imul(&b, n, 144);
    cr_assert_eq(ir_iadd(&b, ir_iadd(&b, ir_iadd(&b, w, hs), cs), ns), g);
    cr_assert_eq(ir_iadd(&b, w, ir_iadd(&b, hs, ir_iadd(&b, cs, ns))), g);
    cr_assert_eq(ir_iadd(&b, ir_iadd(&b, ns, hs), ir_iadd(&b, cs, w)), g);
    /* the low two digits alone: the flat index modulo 9 */
    cr_assert_eq(ir_iadd(&b, hs, w), ir_imod(&b, g, 9));
    /* [32, 16, 3, 3] scaled by 2 throughout: twice the index */
    int two = ir_iadd(&b, ir_iadd(&b, ir_imul(&b, w, 2), ir_imul(&b, h, 6)),
                      ir_iadd(&b, ir_imul(&b, c, 18), ir_imul(&b, n, 288)));
    cr_assert_eq(two, ir_imul(&b, g, 2));
    /* no h: w + c * 9 + n * 144 is no digit chain */
    int skip = ir_iadd(&b, ir_iadd(&b, w, cs), ns);
    cr_assert(skip != g && b.ins[skip].op == UOP_IADD);
    /* a transposed stride (h * 4) does not merge */
    int bad = ir_iadd(&b, w, ir_imul(&b, h, 4));
    cr_assert(b.ins[bad].op == UOP_IADD);
    cr_assert(!b.failed);
    ir_free(&b);
}
