/* plan_test.c — lower/plan.c: the decisions every renderer follows. Blocks
 * hold exactly the live instructions, each once, in order and in the right
 * stage; long few-row reductions split; index widths follow value ranges;
 * matmul blocking follows the target's vectors; a GPU target gets thread
 * counts and tiles instead. Checked on the plans themselves, so that a wrong
 * decision shows here before any renderer runs it. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "lower/lower.h"

#include "graph_util.h"

static const lower_target cpu512 = {.name = "cpu", .vector_bytes = 64};
static const lower_target cpu256 = {.name = "cpu", .vector_bytes = 32};
static const lower_target gpu = {.name = "cuda", .gpu = true, .block_threads = 256};


/* Takes the reference to target; returns its program (one reference kept). */
static lower_program *schedule(graph_node *target) {
    lower_program *p = lower_schedule(1, &target, true);
    cr_assert(p);
    graph_unref(target);
    return p;
}

/* Every block's instructions are in increasing order, no instruction is in
 * two blocks, and each instruction an output needs is in some block. */
static void check_blocks(const lower_kernel *k, const lower_plan *p) {
    int *seen = calloc((size_t)k->nins, sizeof *seen);
    cr_assert(seen);
    for (int b = 0; b < p->nblocks; b++) {
        const lower_block *x = &p->blocks[b];
        for (int i = 0; i < x->n; i++) {
            cr_assert(x->ins[i] >= 0 && x->ins[i] < k->nins);
            cr_assert(i == 0 || x->ins[i] > x->ins[i - 1], "block %d out of order", b);
            bool inner = k->ins[x->ins[i]].inner;
            cr_assert(inner == (x->kind != LOWER_BLOCK_OUTER),
                      "instruction %%%d in a block of the wrong stage", x->ins[i]);
            if (x->kind == LOWER_BLOCK_OUTER)
                cr_assert(!seen[x->ins[i]]++, "%%%d computed twice", x->ins[i]);
        }
    }
    for (int o = 0; o < k->nouts; o++)
        if (!k->ins[k->results[o]].inner)
            cr_assert(seen[k->results[o]] || k->ins[k->results[o]].op == UOP_REDUCE);
    free(seen);
}

Test(plan, elementwise_is_one_outer_block) {
    graph_ctx *g = graph_ctx_new();
    int64_t n = 1 << 16;
    graph_node *a = tu_leaf(g, KILN_F32, 1, &n), *b = tu_leaf(g, KILN_F32, 1, &n);
    lower_program *p = schedule(graph_unary(GRAPH_EXP, graph_binary(GRAPH_MUL, a, b)));
    cr_assert_eq(p->nkernels, 1);
    lower_plan *plans = lower_plan_program(p, &cpu512);
    cr_assert(plans);
    cr_assert_eq(plans[0].nblocks, 1);
    cr_assert_eq(plans[0].blocks[0].kind, LOWER_BLOCK_OUTER);
    check_blocks(&p->kernels[0], &plans[0]);
    cr_assert(plans[0].narrow, "65536 elements fit int32 indices");
    cr_assert(plans[0].parallel);
    cr_assert_eq(plans[0].grid, (n + p->kernels[0].tile - 1) / p->kernels[0].tile);
    cr_assert_eq(plans[0].vector_bytes, 64);
    lower_plans_free(plans, p->nkernels);
    plans = lower_plan_program(p, &gpu);
    cr_assert(plans);
    cr_assert_eq(plans[0].block_threads, 256);
    cr_assert(!plans[0].split);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    graph_unref(a);
    graph_unref(b);
    graph_ctx_free(g);
}

/* Arithmetic instructions (after the rules, all primitives) in a block. */
static int block_prims(const lower_kernel *k, const lower_block *x) {
    int n = 0;
    for (int i = 0; i < x->n; i++)
        n += k->ins[x->ins[i]].op == UOP_PRIM && !(x->kind == LOWER_BLOCK_STORE && x->ins[i] == x->stash);
    return n;
}

/* softmax's exp is computed once: the sum pass stores it into the output
 * (with the store index in its block) and the store pass loads it back, so
 * that pass holds only the quotient's few primitives, not exp's thirty. */
static void check_stash(const lower_kernel *k, const lower_plan *p) {
    const lower_block *sum = &p->blocks[0], *st = &p->blocks[p->nblocks - 1];
    for (int b = 0; b < p->nblocks; b++)
        if (p->blocks[b].kind == LOWER_BLOCK_REDUCE && k->ins[p->blocks[b].reduce].gop == GRAPH_SUM)
            sum = &p->blocks[b];
    cr_assert(st->stash >= 0, "softmax's store pass recomputes exp");
    cr_assert_eq(sum->stash, st->stash);
    cr_assert_eq(k->ins[st->stash].dt, KILN_F32);
    cr_assert(k->ins[st->stash].inner);
    bool has_store = false, has_stash = false;
    for (int i = 0; i < sum->n; i++) {
        has_store |= sum->ins[i] == k->store;
        has_stash |= sum->ins[i] == st->stash;
    }
    cr_assert(has_store && has_stash, "the sum pass cannot store the stash");
    cr_assert(st->stash > k->store, "the store pass would read before its index exists");
    cr_assert(block_prims(k, st) <= 4, "the store pass computes %d primitives", block_prims(k, st));
    cr_assert(block_prims(k, sum) >= 20, "the sum pass computes %d primitives", block_prims(k, sum));
    for (int b = 0; b < p->nblocks; b++)
        if (&p->blocks[b] != sum && &p->blocks[b] != st)
            cr_assert_eq(p->blocks[b].stash, -1);
}

/* softmax over rows: max pass, sum pass, then a store pass, with the outer
 * values between them. */
Test(plan, softmax_is_two_passes_and_a_store) {
    graph_ctx *g = graph_ctx_new();
    int64_t shape[2] = {64, 1000};
    graph_node *x = tu_leaf(g, KILN_F32, 2, shape);
    graph_node *mx = graph_reduce(GRAPH_RMAX, x, 2u, KILN_F32);
    int64_t full[2] = {64, 1000};
    graph_node *mxe = graph_expand(mx, full);
    graph_node *e = graph_unary(GRAPH_EXP, graph_binary(GRAPH_SUB, x, mxe));
    graph_node *s = graph_expand(graph_reduce(GRAPH_SUM, e, 2u, KILN_F32), full);
    lower_program *p = schedule(graph_binary(GRAPH_DIV, e, s));
    cr_assert_eq(p->nkernels, 1);
    const lower_kernel *k = &p->kernels[0];
    lower_plan *plans = lower_plan_program(p, &cpu512);
    cr_assert(plans);
    int reduces = 0, stores = 0;
    for (int b = 0; b < plans[0].nblocks; b++) {
        reduces += plans[0].blocks[b].kind == LOWER_BLOCK_REDUCE;
        stores += plans[0].blocks[b].kind == LOWER_BLOCK_STORE;
        if (plans[0].blocks[b].kind == LOWER_BLOCK_REDUCE)
            cr_assert_eq(k->ins[plans[0].blocks[b].reduce].op, UOP_REDUCE);
    }
    cr_assert_eq(reduces, 2);
    cr_assert_eq(stores, 1);
    cr_assert_eq(plans[0].blocks[plans[0].nblocks - 1].kind, LOWER_BLOCK_STORE);
    check_blocks(k, &plans[0]);
    cr_assert(!plans[0].split, "64 rows keep the threads busy without splitting");
    cr_assert_eq(plans[0].grid, 64);
    check_stash(k, &plans[0]);
    /* the sum pass prefetches the next row's max pass (the first pass) */
    cr_assert_eq(plans[0].prefetch, 256);
    cr_assert_eq(plans[0].blocks[plans[0].prefetch_from].kind, LOWER_BLOCK_REDUCE);
    cr_assert_eq(k->ins[plans[0].blocks[plans[0].prefetch_from].reduce].gop, GRAPH_RMAX);
    cr_assert_eq(k->ins[plans[0].blocks[plans[0].prefetch_in].reduce].gop, GRAPH_SUM);
    /* e^x is never negative: its sum adds in float chunks, the prefetch's */
    cr_assert_eq(plans[0].fsum, 256);
    cr_assert(lower_pass_fsum(k, &plans[0], plans[0].prefetch_in));
    cr_assert_eq(lower_pass_chunk(k, &plans[0], plans[0].prefetch_in), 256);
    cr_assert(!lower_pass_fsum(k, &plans[0], plans[0].prefetch_from), "a max is no sum");
    lower_plans_free(plans, p->nkernels);
    plans = lower_plan_program(p, &gpu);
    cr_assert(plans);
    cr_assert_eq(plans[0].block_threads, 256);
    cr_assert_eq(plans[0].prefetch, 0, "a GPU has no next row to prefetch");
    cr_assert_eq(plans[0].fsum, 0, "a GPU sums as it does");
    check_stash(k, &plans[0]);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    graph_unref(x);
    graph_unref(mx);
    graph_unref(mxe);
    graph_unref(e);
    graph_unref(s);
    graph_ctx_free(g);
}

/* softmax of x along the axes in mask (2u: rows of a matrix, 1u: columns). */
static graph_node *softmax_over(graph_node *x, uint32_t mask) {
    graph_node *mx = graph_reduce(GRAPH_RMAX, x, mask, x->dtype);
    graph_node *mxe = graph_expand(mx, x->shape);
    graph_node *d = graph_binary(GRAPH_SUB, x, mxe);
    graph_node *e = graph_unary(GRAPH_EXP, d);
    graph_node *sr = graph_reduce(GRAPH_SUM, e, mask, x->dtype);
    graph_node *s = graph_expand(sr, x->shape);
    graph_node *y = graph_binary(GRAPH_DIV, e, s);
    graph_node *tmp[6] = {mx, mxe, d, e, sr, s};
    for (int i = 0; i < 6; i++)
        graph_unref(tmp[i]);
    return y;
}

static graph_node *softmax_rows(graph_node *x) { return softmax_over(x, 2u); }
static graph_node *softmax_columns(graph_node *x) { return softmax_over(x, 1u); }

static bool any_stash(const lower_plan *p) {
    for (int b = 0; b < p->nblocks; b++)
        if (p->blocks[b].stash >= 0)
            return true;
    return false;
}

/* No stash where the store pass recomputes little (centring a row: one
 * subtraction), where the output is a half (storing the value would round
 * it), or where the rows are split across threads. */
/* The row sums that add in float chunks (lower_plan.fsum) are those of
 * floats never below zero, by the ops that make them; a sum of values of
 * either sign keeps double, whose partial sums lose no small value beside a
 * large one. Each helper takes the references it is given. */
static graph_node *un(graph_op op, graph_node *a) {
    graph_node *r = graph_unary(op, a);
    graph_unref(a);
    return r;
}

static graph_node *bin(graph_op op, graph_node *a, graph_node *b) {
    graph_node *r = graph_binary(op, a, b);
    graph_unref(a);
    graph_unref(b);
    return r;
}

/* A tiny kernel (lower_plan_scalar) summing in float chunks still runs in
 * lanes, the order of additions of the same kernel at a larger size. */
static int64_t row_sum_fsum(graph_node *v) {
    lower_program *p = schedule(graph_reduce(GRAPH_SUM, v, 2u, v->dtype));
    graph_unref(v);
    cr_assert_eq(p->nkernels, 1);
    lower_plan *plans = lower_plan_program(p, &cpu256);
    cr_assert(plans);
    int64_t f = plans[0].fsum;
    const lower_kernel *k = &p->kernels[0];
    bool tiny = k->numel * k->rnumel <= 4096;
    cr_assert_eq(lower_plan_scalar(k, &plans[0]), tiny && !f);
    for (int b = 0; b < plans[0].nblocks; b++)
        if (plans[0].blocks[b].kind == LOWER_BLOCK_REDUCE)
            cr_assert_eq(lower_pass_fsum(k, &plans[0], b), f != 0);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    return f;
}

Test(plan, float_sums_only_of_values_never_below_zero) {
    graph_ctx *g = graph_ctx_new();
    int64_t shape[2] = {64, 4096};
    graph_node *x = tu_leaf(g, KILN_F32, 2, shape), *y = tu_leaf(g, KILN_F32, 2, shape);
    graph_node *d = tu_leaf(g, KILN_F64, 2, shape);
#define X graph_ref(x)
#define Y graph_ref(y)
    cr_assert_eq(row_sum_fsum(X), 0, "loaded values may have either sign");
    cr_assert_eq(row_sum_fsum(bin(GRAPH_SUB, X, Y)), 0);
    cr_assert_eq(row_sum_fsum(bin(GRAPH_MUL, X, Y)), 0);
    cr_assert_eq(row_sum_fsum(un(GRAPH_EXP, X)), 256);
    cr_assert_eq(row_sum_fsum(bin(GRAPH_MUL, X, X)), 256, "a square");
    cr_assert_eq(row_sum_fsum(bin(GRAPH_ADD, un(GRAPH_ABS, X), un(GRAPH_SIGMOID, Y))), 256);
    cr_assert_eq(row_sum_fsum(bin(GRAPH_SUB, un(GRAPH_EXP, X), un(GRAPH_EXP, Y))), 0,
                 "a difference of two such values");
    cr_assert_eq(row_sum_fsum(un(GRAPH_EXP, graph_ref(d))), 0, "f64 sums in f64");
    int64_t small[2] = {1, 4096}; /* tiny: 4096 elements of work */
    graph_node *t = tu_leaf(g, KILN_F32, 2, small);
    cr_assert_eq(row_sum_fsum(graph_ref(t)), 0);
    cr_assert_eq(row_sum_fsum(un(GRAPH_EXP, graph_ref(t))), 256);
    graph_unref(t);
#undef X
#undef Y
    graph_unref(x);
    graph_unref(y);
    graph_unref(d);
    graph_ctx_free(g);
}

Test(plan, stash_only_where_it_saves_work) {
    graph_ctx *g = graph_ctx_new();
    int64_t shape[2] = {64, 1000}, longrow[2] = {2, 1 << 19};
    graph_node *x = tu_leaf(g, KILN_F32, 2, shape), *h = tu_leaf(g, KILN_F16, 2, shape);
    graph_node *l = tu_leaf(g, KILN_F32, 2, longrow);
    graph_node *m = graph_expand(graph_reduce(GRAPH_SUM, x, 2u, KILN_F32), shape);
    graph_node *c = graph_binary(GRAPH_SUB, x, m);
    lower_program *p = schedule(graph_binary(GRAPH_MUL, c, graph_expand(graph_reduce(GRAPH_SUM, c, 2u, KILN_F32), shape)));
    graph_node *progs_in[3] = {h, l, NULL};
    cr_assert_eq(p->nkernels, 1);
    lower_plan *plans = lower_plan_program(p, &cpu512);
    cr_assert(plans && plans[0].blocks[plans[0].nblocks - 1].kind == LOWER_BLOCK_STORE);
    cr_assert(!any_stash(&plans[0]), "a stash for a subtraction");
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    for (int i = 0; progs_in[i]; i++) {
        p = schedule(softmax_rows(progs_in[i]));
        cr_assert_eq(p->nkernels, 1);
        plans = lower_plan_program(p, &cpu512);
        cr_assert(plans);
        cr_assert(!any_stash(&plans[0]), "a stash for %s",
                  i == 0 ? "a half output" : "rows split across threads");
        lower_plans_free(plans, p->nkernels);
        lower_program_free(p);
    }
    /* Down columns, or through a transposed view, the store index may be
     * computed after the values (renderers compute a block in order): a
     * stash is only taken after its index. */
    int64_t tall[2] = {1000, 64};
    graph_node *t = tu_leaf(g, KILN_F32, 2, tall);
    graph_node *tt = graph_permute(x, (const int[]){1, 0});
    graph_node *cols[3] = {softmax_columns(t), softmax_rows(tt), softmax_columns(tt)};
    graph_unref(t);
    graph_unref(tt);
    for (int i = 0; i < 3; i++) {
        p = schedule(cols[i]);
        plans = lower_plan_program(p, &cpu512);
        cr_assert(plans);
        for (int b = 0; b < plans[0].nblocks; b++)
            if (plans[0].blocks[b].stash >= 0)
                cr_assert(plans[0].blocks[b].stash > p->kernels[0].store,
                          "a stash before its store index");
        lower_plans_free(plans, p->nkernels);
        lower_program_free(p);
    }
    p = schedule(softmax_rows(x));
    plans = lower_plan_program(p, &cpu256);
    cr_assert(plans);
    check_stash(&p->kernels[0], &plans[0]);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    graph_unref(x);
    graph_unref(h);
    graph_unref(l);
    graph_unref(m);
    graph_unref(c);
    graph_ctx_free(g);
}

/* A long row is split across a CPU's threads, and across a GPU's blocks
 * (row_blocks chunks of row_chunk elements, a multiple of the block's
 * threads, that cover the row); a short one is neither. */
Test(plan, long_rows_split_on_cpu_threads_and_gpu_blocks) {
    graph_ctx *g = graph_ctx_new();
    int64_t n = 1 << 20, small = 1000;
    graph_node *x = tu_leaf(g, KILN_F32, 1, &n), *y = tu_leaf(g, KILN_F32, 1, &small);
    lower_program *p = schedule(graph_reduce(GRAPH_SUM, x, 1u, KILN_F32));
    lower_plan *plans = lower_plan_program(p, &cpu512);
    cr_assert(plans[0].split && !plans[0].parallel && plans[0].row_blocks == 0);
    lower_plans_free(plans, p->nkernels);
    plans = lower_plan_program(p, &gpu);
    cr_assert(plans[0].split);
    cr_assert_eq(plans[0].block_threads, 256);
    cr_assert(plans[0].row_blocks > 1 && plans[0].row_chunk % 256 == 0, "%lld blocks of %lld",
              (long long)plans[0].row_blocks, (long long)plans[0].row_chunk);
    cr_assert(plans[0].row_blocks * plans[0].row_chunk >= n &&
              (plans[0].row_blocks - 1) * plans[0].row_chunk < n);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    p = schedule(graph_reduce(GRAPH_SUM, y, 1u, KILN_F32));
    plans = lower_plan_program(p, &cpu512);
    cr_assert(!plans[0].split && !plans[0].parallel, "1000 elements: one thread, no split");
    lower_plans_free(plans, p->nkernels);
    plans = lower_plan_program(p, &gpu);
    cr_assert_eq(plans[0].block_threads, 256);
    cr_assert(!plans[0].split && plans[0].row_blocks == 0, "1000 elements: one block");
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    graph_unref(x);
    graph_unref(y);
    graph_ctx_free(g);
}

/* Sums down columns (the reduced axis outermost, as in a bias gradient) are
 * planned as rows added into chunks of partial sums; sums along rows, a
 * max down columns, and GPU targets are not. */
Test(plan, column_sums_accumulate_rows) {
    graph_ctx *g = graph_ctx_new();
    int64_t shape[2] = {300, 40}, cube[3] = {3, 500, 37}, rows[3] = {3, 500, 1}, cols[3] = {1, 1, 37};
    graph_node *x = tu_leaf(g, KILN_F32, 2, shape), *c = tu_leaf(g, KILN_F32, 3, cube);
    /* a layer-norm weight's gradient: x times a row statistic broadcast
     * along the rows and a per-column weight, summed over the rows */
    graph_node *r = tu_leaf(g, KILN_F32, 3, rows), *w = tu_leaf(g, KILN_F32, 3, cols);
    graph_node *re = graph_expand(r, cube), *we = graph_expand(w, cube);
    graph_node *cr = graph_binary(GRAPH_MUL, c, re), *crw = graph_binary(GRAPH_MUL, cr, we);
    /* and a load that runs along the rows: not down columns */
    graph_node *xt = graph_permute(x, (const int[]){1, 0});
    graph_node *xx = graph_binary(GRAPH_MUL, xt, xt);
    struct {
        graph_node *target;
        bool columns;
        const char *what;
    } cases[] = {
        {graph_reduce(GRAPH_SUM, x, 1u, KILN_F32), true, "sum over axis 0"},
        {graph_binary(GRAPH_MUL, graph_reduce(GRAPH_SUM, x, 1u, KILN_F32), graph_reduce(GRAPH_SUM, x, 1u, KILN_F32)),
         true, "a sum over axis 0 with work after it"},
        {graph_reduce(GRAPH_SUM, c, 3u, KILN_F32), true, "sum over axes 0 and 1"},
        {graph_reduce(GRAPH_SUM, x, 2u, KILN_F32), false, "sum along rows"},
        {graph_reduce(GRAPH_RMAX, x, 1u, KILN_F32), false, "max down columns"},
        {graph_reduce(GRAPH_SUM, crw, 3u, KILN_F32), true,
         "a sum over axes 0 and 1 with a row statistic and a column weight"},
        {graph_reduce(GRAPH_SUM, xx, 1u, KILN_F32), false, "a sum over a transposed view"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        lower_program *p = schedule(cases[i].target);
        const lower_kernel *k = &p->kernels[p->nkernels - 1];
        lower_plan *plans = lower_plan_program(p, &cpu512);
        cr_assert(plans);
        cr_assert_eq(plans[p->nkernels - 1].columns != 0, cases[i].columns, "%s: columns %lld",
                     cases[i].what, (long long)plans[p->nkernels - 1].columns);
        check_blocks(k, &plans[p->nkernels - 1]);
        lower_plans_free(plans, p->nkernels);
        plans = lower_plan_program(p, &gpu);
        cr_assert_eq(plans[p->nkernels - 1].columns, 0, "%s: a GPU plan", cases[i].what);
        lower_plans_free(plans, p->nkernels);
        lower_program_free(p);
    }
    graph_node *tmp[] = {x, c, r, w, re, we, cr, crw, xt, xx};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++)
        graph_unref(tmp[i]);
    graph_ctx_free(g);
}

/* A pooling window's max down columns walks its outputs in rows of the
 * output's innermost axis (lower_plan.rows) where that is at least a vector
 * of f32, in chunks of whole rows, with 256-bit vectors; rows of 7 stay
 * flat, as do AVX-512 plans (not measured there), and a GPU plan has
 * neither. */
Test(plan, pooling_windows_walk_rows) {
    graph_ctx *g = graph_ctx_new();
    int64_t s14[6] = {4, 6, 14, 2, 14, 2}, s7[6] = {4, 6, 7, 2, 7, 2};
    graph_node *a = tu_leaf(g, KILN_F32, 6, s14), *b = tu_leaf(g, KILN_F32, 6, s7);
    const uint32_t window = (1u << 3) | (1u << 5);
    struct {
        graph_node *target;
        int64_t rows;
    } cases[] = {{graph_reduce(GRAPH_RMAX, a, window, KILN_F32), 14},
                 {graph_reduce(GRAPH_RMAX, b, window, KILN_F32), 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        lower_program *p = schedule(cases[i].target);
        lower_plan *plans = lower_plan_program(p, &cpu256);
        const lower_plan *pl = &plans[p->nkernels - 1];
        cr_assert(pl->columns > 0);
        cr_assert_eq(pl->rows, cases[i].rows, "case %zu: rows %lld", i, (long long)pl->rows);
        if (pl->rows)
            cr_assert(pl->columns % pl->rows == 0 && pl->columns > 1000, "chunks of %lld",
                      (long long)pl->columns);
        lower_plans_free(plans, p->nkernels);
        plans = lower_plan_program(p, &cpu512);
        cr_assert(plans[p->nkernels - 1].columns > 0 && plans[p->nkernels - 1].rows == 0);
        lower_plans_free(plans, p->nkernels);
        plans = lower_plan_program(p, &gpu);
        cr_assert(plans[p->nkernels - 1].rows == 0 && plans[p->nkernels - 1].columns == 0);
        lower_plans_free(plans, p->nkernels);
        lower_program_free(p);
    }
    graph_unref(a);
    graph_unref(b);
    graph_ctx_free(g);
}

/* Index values past int32 keep 64-bit index arithmetic. */
Test(plan, wide_indices_stay_64_bit) {
    graph_ctx *g = graph_ctx_new();
    int64_t shape[2] = {(int64_t)1 << 16, (int64_t)1 << 16};
    graph_node *x = tu_leaf(g, KILN_U8, 1, (int64_t[]){1});
    graph_node *big = graph_expand(graph_reshape(x, 2, (int64_t[]){1, 1}), shape);
    lower_program *p = schedule(graph_unary(GRAPH_NEG, graph_cast(big, KILN_I32)));
    lower_plan *plans = lower_plan_program(p, &cpu512);
    cr_assert(!plans[0].narrow, "2^32 elements cannot be indexed in int32");
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    graph_unref(x);
    graph_unref(big);
    graph_ctx_free(g);
}

/* The 512-bit CPU plan of a @ b's kernel. */
static lower_mm_plan cpu_mm_plan(graph_node *a, graph_node *b) {
    lower_program *p = schedule(graph_matmul(a, b));
    lower_plan *plans = lower_plan_program(p, &cpu512);
    lower_mm_plan mm = plans[0].mm;
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    return mm;
}

Test(plan, matmul_blocking_follows_the_vectors) {
    graph_ctx *g = graph_ctx_new();
    int64_t sa[2] = {512, 256}, sb[2] = {256, 384}, sv[2] = {256, 3};
    graph_node *a = tu_leaf(g, KILN_F32, 2, sa), *b = tu_leaf(g, KILN_F32, 2, sb);
    graph_node *v = tu_leaf(g, KILN_F32, 2, sv);
    lower_program *p = schedule(graph_matmul(a, b));
    cr_assert_eq(p->kernels[0].kind, LOWER_MATMUL);
    lower_plan *plans = lower_plan_program(p, &cpu512);
    const lower_mm_plan *mm = &plans[0].mm;
    cr_assert_eq(mm->acc, KILN_F32);
    cr_assert(mm->mr == 6 && mm->nv == 4 && mm->lanes == 16, "%d x %d x %d", mm->mr, mm->nv,
              mm->lanes);
    cr_assert(mm->mc % mm->mr == 0 && mm->nc % (mm->nv * mm->lanes) == 0);
    cr_assert(mm->kc >= 1 && mm->kc <= 512);
    cr_assert(mm->a_direct, "row-major f32 A is read in place");
    cr_assert(plans[0].grid >= 2, "enough tasks for two threads");
    lower_plans_free(plans, p->nkernels);
    plans = lower_plan_program(p, &cpu256);
    cr_assert(plans[0].mm.nv == 2 && plans[0].mm.lanes == 8);
    lower_plans_free(plans, p->nkernels);
    plans = lower_plan_program(p, &gpu);
    cr_assert(plans[0].mm.tile == 64 && plans[0].mm.ktile == 16 && plans[0].block_threads == 256);
    cr_assert_eq(plans[0].grid, (512 / 64) * (384 / 64));
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    /* Three columns: one vector per row and more rows in the same registers. */
    lower_mm_plan q = cpu_mm_plan(a, v);
    cr_assert(q.nv == 1 && q.mr == 12, "%d x %d", q.mr, q.nv);
    /* A conv weight gradient, 32 x 25088 @ 25088 x 144: 8 rows of 3
     * vectors (144 columns are 3 panels of 48), and tasks of at least 24
     * rows, since k takes many blocks and each task repacks B for each;
     * 64 x 4096 @ 4096 x 4096 keeps 6 x 4 (8 x 3 would save too little). */
    int64_t sg[2] = {32, 25088}, sc[2] = {25088, 144}, sw[2] = {64, 4096}, sq[2] = {4096, 4096};
    graph_node *gr = tu_leaf(g, KILN_F32, 2, sg), *co = tu_leaf(g, KILN_F32, 2, sc);
    q = cpu_mm_plan(gr, co);
    cr_assert(q.mr == 8 && q.nv == 3, "%d x %d", q.mr, q.nv);
    cr_assert(q.mc >= 24 && q.kc < 25088, "mc %lld, kc %lld", (long long)q.mc, (long long)q.kc);
    graph_node *wi = tu_leaf(g, KILN_F32, 2, sw), *sqr = tu_leaf(g, KILN_F32, 2, sq);
    q = cpu_mm_plan(wi, sqr);
    cr_assert(q.mr == 6 && q.nv == 4, "%d x %d", q.mr, q.nv);
    graph_unref(gr);
    graph_unref(co);
    graph_unref(wi);
    graph_unref(sqr);
    graph_unref(a);
    graph_unref(b);
    graph_unref(v);
    graph_ctx_free(g);
}

/* The register transposes a w^T's pack goes through are the plan's (lower_mm_plan.pack_tr):
 * 16 x 16 with 64-byte vectors, 8 x 8 with 32-byte ones, for f32 B read along k, in every
 * KILN_TUNE variant too (8 x 3 tiles' 48 columns, half-width vectors' 32); none for a plain B,
 * for f64, or on a GPU. */
Test(plan, wt_pack_transposes_follow_the_vectors) {
    graph_ctx *g = graph_ctx_new();
    int64_t sx[2] = {256, 768}, sw[2] = {1024, 768}, sb[2] = {768, 1024};
    graph_node *x = tu_leaf(g, KILN_F32, 2, sx), *w = tu_leaf(g, KILN_F32, 2, sw);
    graph_node *bp = tu_leaf(g, KILN_F32, 2, sb), *xd = tu_leaf(g, KILN_F64, 2, sx);
    graph_node *wd = tu_leaf(g, KILN_F64, 2, sw);
    const int perm[2] = {1, 0};
    graph_node *wt = graph_permute(w, perm), *wdt = graph_permute(wd, perm);
    cr_assert_eq(cpu_mm_plan(x, wt).pack_tr, 16);
    cr_assert_eq(cpu_mm_plan(x, bp).pack_tr, 0, "a plain B is read along its rows");
    cr_assert_eq(cpu_mm_plan(xd, wdt).pack_tr, 0, "f64 packs by elements");
    lower_program *p = schedule(graph_matmul(x, wt));
    lower_plan *plans = lower_plan_program(p, &cpu256);
    cr_assert_eq(plans[0].mm.pack_tr, 8);
    lower_plans_free(plans, p->nkernels);
    plans = lower_plan_program(p, &cpu512);
    lower_plan var[LOWER_PLAN_VARIANTS_MAX];
    int n = lower_plan_variants(&p->kernels[0], &cpu512, &plans[0], var, LOWER_PLAN_VARIANTS_MAX);
    cr_assert(n > 2);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(var[i].mm.pack_tr, 16, "variant %d: %d x %d vectors of %d", i, var[i].mm.mr,
                     var[i].mm.nv, var[i].mm.lanes);
    }
    lower_plans_free(plans, p->nkernels);
    plans = lower_plan_program(p, &gpu);
    cr_assert_eq(plans[0].mm.pack_tr, 0);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    graph_unref(wt);
    graph_unref(wdt);
    graph_unref(x);
    graph_unref(w);
    graph_unref(bp);
    graph_unref(xd);
    graph_unref(wd);
    graph_ctx_free(g);
}

/* KILN_TUNE's variants of a kernel's plan (lower_plan_variants): the
 * heuristics' plan first, each other one distinct from every other, each a
 * valid blocking (whole register tiles in a block, k blocks within k, the
 * grid its blocks' count), differing from the heuristics' in the matmul
 * blocking alone, one of them with half-width vectors; none for a GPU, a product too small to time, or another
 * kind of kernel. */
static void check_variants(graph_ctx *g, kiln_dtype dt, int64_t nb, int64_t n, int64_t k,
                           int64_t m, int least) {
    graph_node *a = tu_leaf(g, dt, 3, (int64_t[]){nb, n, k});
    graph_node *b = tu_leaf(g, dt, 2, (int64_t[]){k, m});
    lower_program *p = schedule(graph_matmul(a, b));
    const lower_kernel *kr = &p->kernels[0];
    cr_assert_eq(kr->kind, LOWER_MATMUL);
    lower_plan *plans = lower_plan_program(p, &cpu512);
    lower_plan v[LOWER_PLAN_VARIANTS_MAX];
    int nv = lower_plan_variants(kr, &cpu512, &plans[0], v, LOWER_PLAN_VARIANTS_MAX);
    cr_assert(nv >= least && nv <= LOWER_PLAN_VARIANTS_MAX, "%lld x %lld x %lld: %d variants",
              (long long)n, (long long)k, (long long)m, nv);
    cr_assert(!memcmp(&v[0].mm, &plans[0].mm, sizeof v[0].mm), "the heuristics' plan first");
    int half = 0;
    for (int i = 0; i < nv; i++) {
        const lower_mm_plan *mm = &v[i].mm;
        cr_assert(mm->mc % mm->mr == 0 && mm->nc % (mm->nv * mm->lanes) == 0,
                  "variant %d: %lld x %lld blocks of %d x %d tiles", i, (long long)mm->mc,
                  (long long)mm->nc, mm->mr, mm->nv);
        cr_assert(mm->mc >= mm->mr && mm->kc >= 1 && mm->kc <= k);
        cr_assert(mm->mr * mm->nv <= 24, "variant %d: a register tile of %d x %d", i, mm->mr, mm->nv);
        cr_assert_eq(v[i].grid, nb * ((n + mm->mc - 1) / mm->mc) * ((m + mm->nc - 1) / mm->nc));
        cr_assert(v[i].blocks == plans[0].blocks && v[i].nblocks == plans[0].nblocks &&
                  v[i].vector_bytes == plans[0].vector_bytes && v[i].narrow == plans[0].narrow);
        for (int j = 0; j < i; j++) {
            const lower_mm_plan *o = &v[j].mm;
            cr_assert(o->mc != mm->mc || o->nc != mm->nc || o->kc != mm->kc || o->mr != mm->mr ||
                          o->nv != mm->nv || o->lanes != mm->lanes || o->a_direct != mm->a_direct,
                      "variants %d and %d are the same", j, i);
        }
        cr_assert(mm->lanes == plans[0].mm.lanes || mm->lanes == plans[0].mm.lanes / 2);
        half += mm->lanes < plans[0].mm.lanes;
    }
    cr_assert_eq(half, 1, "one variant with half-width vectors");
    cr_assert_eq(lower_plan_variants(kr, &gpu, &plans[0], v, LOWER_PLAN_VARIANTS_MAX), 0);
    cr_assert_eq(lower_plan_variants(kr, &cpu512, &plans[0], v, 1), 1, "max is kept");
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    graph_unref(a);
    graph_unref(b);
}

Test(plan, tune_variants_are_valid_blockings) {
    graph_ctx *g = graph_ctx_new();
    check_variants(g, KILN_F32, 1, 2048, 2048, 512, 12);
    check_variants(g, KILN_F32, 1, 301, 530, 275, 8);
    check_variants(g, KILN_F64, 1, 130, 700, 77, 4);
    check_variants(g, KILN_F32, 2, 64, 1100, 40, 4);
    check_variants(g, KILN_F32, 4, 32, 144, 784, 4);
    /* nothing to time: a small product, a kernel of another kind */
    graph_node *a = tu_leaf(g, KILN_F32, 2, (int64_t[]){64, 64});
    graph_node *b = tu_leaf(g, KILN_F32, 2, (int64_t[]){64, 64});
    lower_program *p = schedule(graph_matmul(a, b));
    lower_plan *plans = lower_plan_program(p, &cpu512);
    lower_plan v[LOWER_PLAN_VARIANTS_MAX];
    cr_assert_eq(lower_plan_variants(&p->kernels[0], &cpu512, &plans[0], v, LOWER_PLAN_VARIANTS_MAX), 0);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    p = schedule(graph_unary(GRAPH_EXP, graph_binary(GRAPH_MUL, a, b)));
    plans = lower_plan_program(p, &cpu512);
    cr_assert_eq(lower_plan_variants(&p->kernels[0], &cpu512, &plans[0], v, LOWER_PLAN_VARIANTS_MAX), 0);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
    graph_unref(a);
    graph_unref(b);
    graph_ctx_free(g);
}

/* Whether index instruction i divides or takes a remainder of a value that
 * depends on the element's lane. */
static bool lane_divided(const lower_kernel *k, int i, bool under_div) {
    const lower_ins *x = &k->ins[i];
    if (x->op == UOP_LANE)
        return under_div;
    if (!lower_uop_is_index(x->op) || x->op == UOP_ICLAMP)
        return false;
    bool div = under_div || x->op == UOP_IDIV || x->op == UOP_IMOD;
    return (x->a >= 0 && lane_divided(k, x->a, div)) || (x->b >= 0 && lane_divided(k, x->b, div));
}

/* An elementwise kernel's element is TILE * tile + LANE: an image's im2col
 * view (a pad, two unfolds and a permute of x [2, 3, 32, 32], as
 * kiln_conv2d reads it) loads at an index linear in the lane, every
 * division by the image's axes folded into the tile's part or the masks,
 * so that the loop's load is a plain (masked) vector load, not a gather. */
Test(plan, image_views_load_linear_in_the_lane) {
    graph_ctx *g = graph_ctx_new();
    graph_node *x = tu_leaf(g, KILN_F32, 4, (int64_t[]){2, 3, 32, 32});
    graph_node *xp = graph_pad(x, (int64_t[]){0, 0, 1, 1}, (int64_t[]){0, 0, 1, 1});
    graph_node *u = graph_unfold(graph_unfold(xp, 2, 3, 1), 3, 3, 1); /* [2,3,32,32,3,3] */
    graph_node *cols = graph_permute(u, (int[]){0, 1, 4, 5, 2, 3});
    lower_program *p = schedule(graph_unary(GRAPH_NEG, cols));
    cr_assert_eq(p->nkernels, 1);
    const lower_kernel *k = &p->kernels[0];
    cr_assert_eq(k->kind, LOWER_ELEMENTWISE);
    int loads = 0;
    for (int i = 0; i < k->nins; i++)
        if (k->ins[i].op == UOP_LOAD) {
            loads++;
            cr_assert(!lane_divided(k, k->ins[i].a, false),
                      "load %%%d's index divides the lane", i);
        }
    cr_assert_eq(loads, 1);
    cr_assert(!lane_divided(k, k->store, false));
    lower_program_free(p);
    graph_unref(x);
    graph_ctx_free(g);
}

/* The im2col of 14 x 14 images: rows of 14 do not tile 1024 elements, so
 * that with the usual tile every element divides its lane (the image's
 * coordinates) and loads through that. A target that takes rows as tiles
 * (LOWER_ROW_TILES) gets the output's rows of 14 as the tile instead, and
 * the load is linear in the lane again; a bias added over [2, 3, 14, 14]
 * takes each channel's plane (196) as its tile, its bias one value per
 * tile; a plain contiguous op keeps the usual tile. A 7 x 7 map read
 * upsampled to 14 x 14 (a max-pool's backward: x / 2 and y / 2, divisors
 * under 8) still takes the rows of 14; [2, 9, 3, 5, 6] permuted to [2, 5,
 * 3, 9, 6] does not take rows of 6 x 9 (across axes: a program shared by
 * sizes of the 9 could not keep them). */
Test(plan, short_rows_become_the_tile_where_the_target_takes_them) {
    graph_ctx *g = graph_ctx_new();
    graph_node *x = tu_leaf(g, KILN_F32, 4, (int64_t[]){2, 3, 14, 14});
    graph_node *bias = tu_leaf(g, KILN_F32, 4, (int64_t[]){1, 3, 1, 1});
    graph_node *xp = graph_pad(x, (int64_t[]){0, 0, 1, 1}, (int64_t[]){0, 0, 1, 1});
    graph_node *u = graph_unfold(graph_unfold(xp, 2, 3, 1), 3, 3, 1); /* [2,3,14,14,3,3] */
    graph_node *cols = graph_permute(u, (int[]){0, 1, 4, 5, 2, 3});
    graph_node *plus = graph_binary(GRAPH_ADD, x, graph_expand(bias, (int64_t[]){2, 3, 14, 14}));
    graph_node *plain = graph_unary(GRAPH_EXP, x);
    graph_node *wide = tu_leaf(g, KILN_F32, 2, (int64_t[]){64, 128});
    graph_node *small = tu_leaf(g, KILN_F32, 4, (int64_t[]){2, 3, 7, 7});
    graph_node *up = graph_reshape(
        graph_expand(graph_reshape(small, 6, (int64_t[]){2, 3, 7, 1, 7, 1}),
                     (int64_t[]){2, 3, 7, 2, 7, 2}),
        4, (int64_t[]){2, 3, 14, 14});
    graph_node *batch = tu_leaf(g, KILN_F32, 5, (int64_t[]){2, 9, 3, 5, 6});
    struct {
        graph_node *target;
        unsigned flags;
        int64_t tile;
        bool divided;
        const char *what;
    } cases[] = {
        {graph_unary(GRAPH_NEG, cols), LOWER_FUSE, 1024, true, "im2col, usual tile"},
        {graph_unary(GRAPH_NEG, cols), LOWER_FUSE | LOWER_ROW_TILES, 14, false, "im2col, rows"},
        {graph_ref(plus), LOWER_FUSE | LOWER_ROW_TILES, 196, false, "bias, rows"},
        {graph_ref(plain), LOWER_FUSE | LOWER_ROW_TILES, 1024, false, "exp, rows"},
        /* the first 64 of each row of 128, flattened (a joined gradient's
         * region): the lane's divisions by 64 go with rows of 64 */
        {graph_unary(GRAPH_NEG, graph_reshape(graph_slice(wide, (int64_t[]){0, 0},
                                                          (int64_t[]){1, 1},
                                                          (int64_t[]){64, 64}),
                                              1, (int64_t[]){64 * 64})),
         LOWER_FUSE | LOWER_ROW_TILES, 64, false, "columns, flattened"},
        {graph_binary(GRAPH_MUL, x, up), LOWER_FUSE | LOWER_ROW_TILES, 14, true,
         "upsampled, rows"},
        {graph_unary(GRAPH_NEG, graph_permute(batch, (int[]){0, 3, 2, 1, 4})),
         LOWER_FUSE | LOWER_ROW_TILES, 1024, true, "rows across axes"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        lower_program *p = lower_schedule(1, &cases[c].target, cases[c].flags);
        cr_assert(p);
        graph_unref(cases[c].target);
        cr_assert_eq(p->nkernels, 1, "%s", cases[c].what);
        const lower_kernel *k = &p->kernels[0];
        cr_assert_eq(k->kind, LOWER_ELEMENTWISE, "%s", cases[c].what);
        cr_assert_eq(k->tile, cases[c].tile, "%s: tile %lld", cases[c].what, (long long)k->tile);
        bool divided = false;
        for (int i = 0; i < k->nins; i++)
            if (k->ins[i].op == UOP_LOAD)
                divided = divided || lane_divided(k, k->ins[i].a, false);
        cr_assert_eq(divided, cases[c].divided, "%s: a load %s the lane", cases[c].what,
                     divided ? "divides" : "does not divide");
        lower_program_free(p);
    }
    graph_unref(plus);
    graph_unref(plain);
    graph_unref(wide);
    graph_unref(small);
    graph_unref(up);
    graph_unref(batch);
    graph_unref(x);
    graph_unref(bias);
    graph_ctx_free(g);
}

/* A float sum over [N, C, H, W]'s N, H and W (a convolution bias's
 * gradient) is two kernels (graph/build.c: split_sum): the rows of H x W
 * summed contiguously, then N of those sums per channel; a sum whose rows
 * are short (H x W = 12) stays one kernel. */
Test(plan, sums_apart_from_their_rows_sum_the_rows_first) {
    graph_ctx *g = graph_ctx_new();
    graph_node *x = tu_leaf(g, KILN_F32, 4, (int64_t[]){8, 4, 16, 16});
    graph_node *y = tu_leaf(g, KILN_F32, 4, (int64_t[]){8, 4, 3, 4});
    const uint32_t axes = 1u | 4u | 8u;
    lower_program *p = schedule(graph_reduce(GRAPH_SUM, x, axes, KILN_F32));
    cr_assert_eq(p->nkernels, 2);
    cr_assert_eq(p->kernels[0].kind, LOWER_REDUCE);
    cr_assert_eq(p->kernels[0].numel, 32);
    cr_assert_eq(p->kernels[0].rnumel, 256);
    cr_assert_eq(p->kernels[1].numel, 4);
    cr_assert_eq(p->kernels[1].rnumel, 8);
    lower_program_free(p);
    p = schedule(graph_reduce(GRAPH_SUM, y, axes, KILN_F32));
    cr_assert_eq(p->nkernels, 1);
    cr_assert_eq(p->kernels[0].rnumel, 96);
    lower_program_free(p);
    graph_unref(x);
    graph_unref(y);
    graph_ctx_free(g);
}

/* The fused attention's register tiles are lower's: 6 rows by 4 vectors in
 * AVX-512's 32 registers, 4 by 2 in AVX2's 16 (the CPU renderer emits what
 * the plan says). */
Test(plan, attention_register_tiles_follow_the_vectors) {
    graph_ctx *g = graph_ctx_new();
    const int64_t s[3] = {2, 64, 32};
    graph_node *src[3];
    for (int i = 0; i < 3; i++)
        src[i] = tu_leaf(g, KILN_F32, 3, s);
    const lower_target *targets[2] = {&cpu512, &cpu256};
    const int mr[2] = {6, 4}, nv[2] = {4, 2};
    for (int t = 0; t < 2; t++) {
        lower_program *p = schedule(graph_attention(GRAPH_ATTENTION, 3, src, 0.125, false));
        cr_assert_eq(p->nkernels, 1);
        lower_plan *plans = lower_plan_program(p, targets[t]);
        cr_assert(plans);
        cr_assert_eq(plans[0].att.mr, mr[t], "%d-byte vectors: %d rows", targets[t]->vector_bytes,
                     plans[0].att.mr);
        cr_assert_eq(plans[0].att.nv, nv[t]);
        lower_plans_free(plans, p->nkernels);
        lower_program_free(p);
    }
    for (int i = 0; i < 3; i++)
        graph_unref(src[i]);
    graph_ctx_free(g);
}

/* A split operand's masked row coordinates repeat with the period of its
 * row axes from the outermost masked one in: a 3x3 convolution's (channel,
 * kh, kw) rows with kh and kw masked repeat every 9 steps, a 2x3x3 kernel's
 * every 18; none without a masked row axis, nor where a size is a run-time
 * one. */
Test(plan, split_rows_repeat_with_the_taps) {
    lower_kernel k;
    memset(&k, 0, sizeof k);
    lower_operand o;
    memset(&o, 0, sizeof o);
    o.nrdims = 3;
    o.nmasks = 2;
    o.rsize[0] = 64, o.rsize[1] = 3, o.rsize[2] = 3;
    o.rmask[0] = -1, o.rmask[1] = 0, o.rmask[2] = 1;
    int first;
    cr_assert_eq(lower_split_row_period(&k, &o, &first), 9);
    cr_assert_eq(first, 1);
    o.nrdims = 4;
    o.nmasks = 3;
    o.rsize[1] = 2, o.rsize[3] = 3;
    o.rmask[1] = 0, o.rmask[2] = 1, o.rmask[3] = 2;
    cr_assert_eq(lower_split_row_period(&k, &o, &first), 18);
    cr_assert_eq(first, 1);
    o.rmask[1] = o.rmask[2] = o.rmask[3] = -1;
    cr_assert_eq(lower_split_row_period(&k, &o, &first), 0);
    cr_assert_eq(first, -1);
    /* a run-time size among the masked axes */
    o.rmask[1] = 0;
    const void *runtime[1] = {&o.rsize[2]};
    k.nsizes = 1;
    k.size_at = runtime;
    cr_assert_eq(lower_split_row_period(&k, &o, &first), 0);
    cr_assert_eq(first, -1);
}
