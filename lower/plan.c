/* plan.c — every decision a renderer needs, made once for every target: which
 * instructions are live and in which block (per element, per pass over the
 * reduced elements, after a reduction), whether index arithmetic fits 32
 * bits, whether a long row is split across threads (on a GPU, across
 * blocks), how much work is worth threads, the grid, and how a matmul is
 * blocked. A renderer walks the plan and prints or emits what it says; it
 * decides nothing. */
#include <stdlib.h>
#include <string.h>

#include "lower/lower.h"

/* Parallel loops below this much work run on one thread: spawning the team
 * costs more than the loop (measured on 2 cores, elementwise and row kernels;
 * a matmul's tasks pay for packing as well, hence its larger threshold). */
#define PAR_MIN_WORK ((int64_t)1 << 15)
#define PAR_MIN_MATMUL ((int64_t)1 << 18)
/* Products of fewer multiply-adds run in tens of microseconds: too short to
 * time apart, and not worth a compile (lower_plan_variants). */
#define TUNE_MIN_MATMUL ((int64_t)1 << 22)
/* Rows at least this long are split across threads when there are few. */
#define SPLIT_MIN ((int64_t)1 << 18)
#define SPLIT_MAX_ROWS 4
/* Streams a thread reads a split sum's share of a row in (lower_plan.
 * split_streams): one stream a core did not keep the memory busy. A sum of
 * 64M floats on the 2-core Zen 3 EPYC, its kernel by hand, alternating four
 * runs each: 12.8-14.2 ms one stream, 11.0-11.6 two, 10.2-11.3 four. */
#define SPLIT_STREAMS 4
/* GPU: threads of a reduction block at most, the matmul's output tile (its
 * 16 x 16 threads each hold 4 x 4 outputs) and k step, and the grid's cap
 * (blocks loop over the rest). */
#define GPU_RED_THREADS 256
#define GPU_MM_TILE 64
#define GPU_MM_K 16
#define GPU_MM_THREADS 256
#define GPU_MMA_THREADS 128 /* tensor cores: 4 warps of 32 x 32 outputs */
#define GPU_GRID_CAP ((int64_t)1 << 21)
/* GPU: rows too few to fill the device are split across blocks. About 1024
 * blocks of 256 threads fill an H100 (132 SMs, 8 such blocks resident on
 * each), so a row gets blocks until the kernel has about that many; a block
 * takes at least GPU_SPLIT_CHUNK elements (32 per thread), so that its fixed
 * cost (a block-wide combine, a fence and an atomic, its share of the last
 * block's combine) stays small beside its loads. A 64M-element sum thus
 * runs on 1024 blocks of 64K elements instead of one block. */
#define GPU_SPLIT_BLOCKS 1024
#define GPU_SPLIT_CHUNK ((int64_t)8192)
/* CPU matmul cache blocks: MC rows of A share each packing of B; the KC x NC
 * slice of packed B stays in L2 while the micro-kernel walks it with one
 * MR-row panel of A, which stays in L1. Measured on AVX-512 f32 at 1024 and
 * 2048. */
#define MM_MC 720
#define MM_NC 512
#define MM_MIN_MC_LONG_K 24

/* Marks in `in` the instructions that `target` needs. Dead ones are never
 * rendered: a load that simplification left unused cannot read out of bounds.
 * With inner_only, only the inner ones: a pass over the reduced elements
 * recomputes those, while outer values are already in scope. */
static void needs_upto(const lower_kernel *k, int target, bool inner_only, int leaf, bool *in) {
    if (inner_only && !k->ins[target].inner)
        return;
    in[target] = true;
    for (int i = target; i >= 0; i--) {
        if (!in[i] || i == leaf)
            continue;
        const lower_ins *x = &k->ins[i];
        int ops[3] = {x->a, x->b, x->c};
        for (int j = 0; j < 3; j++)
            if (ops[j] >= 0 && (!inner_only || k->ins[ops[j]].inner))
                in[ops[j]] = true;
    }
}

static void needs(const lower_kernel *k, int target, bool inner_only, bool *in) {
    needs_upto(k, target, inner_only, -1, in);
}

/* Everything the stores need: each output's value and the index; with a
 * leaf >= 0, that instruction's value is had without its operands. */
static void needs_stores_upto(const lower_kernel *k, bool inner_only, int leaf, bool *in) {
    for (int o = 0; o < k->nouts; o++)
        needs_upto(k, k->results[o], inner_only, leaf, in);
    needs_upto(k, k->store, inner_only, leaf, in);
}

static void needs_stores(const lower_kernel *k, bool inner_only, bool *in) {
    needs_stores_upto(k, inner_only, -1, in);
}

bool lower_tiles_whole(const lower_kernel *k) {
    return k->kind == LOWER_ELEMENTWISE && lower_size_index(k, &k->numel) < 0 && k->tile > 0 &&
           k->numel % k->tile == 0;
}

void lower_live(const lower_kernel *k, bool *live) {
    needs_stores(k, false, live);
}

static bool stores_inner(const lower_kernel *k) {
    for (int o = 0; o < k->nouts; o++)
        if (k->ins[k->results[o]].inner)
            return true;
    return k->ins[k->store].inner;
}

/* Appends a block of the instructions marked in `pick`, in order; an outer
 * block with nothing in it is left out. */
static bool add_block(lower_plan *p, const lower_kernel *k, lower_block_kind kind, int reduce,
                      const bool *pick) {
    int n = 0;
    for (int i = 0; i < k->nins; i++)
        n += pick[i];
    if (n == 0 && kind == LOWER_BLOCK_OUTER)
        return true;
    lower_block *blocks = realloc(p->blocks, sizeof *blocks * (size_t)(p->nblocks + 1));
    if (!blocks)
        return false;
    p->blocks = blocks;
    lower_block *b = &blocks[p->nblocks];
    b->kind = kind;
    b->reduce = reduce;
    b->stash = -1;
    b->n = n;
    b->ins = malloc(sizeof *b->ins * (size_t)(n ? n : 1));
    if (!b->ins)
        return false;
    p->nblocks++;
    n = 0;
    for (int i = 0; i < k->nins; i++)
        if (pick[i])
            b->ins[n++] = i;
    return true;
}

/* Elementwise kernels and matmul epilogues: one block, per output element. */
static bool plan_flat(lower_plan *p, const lower_kernel *k, bool *live) {
    needs_stores(k, false, live);
    return add_block(p, k, LOWER_BLOCK_OUTER, -1, live);
}

/* Reductions and row kernels: per output row, a pass over its reduced
 * elements per reduction, in order (each may read the ones before); outer
 * values as soon as the reductions they read are done; then, in a row
 * kernel, a last pass that stores. */
static bool plan_phased(lower_plan *p, const lower_kernel *k, bool *live) {
    int n = k->nins;
    int *stage = calloc((size_t)n, sizeof *stage);
    bool *pick = calloc((size_t)n, sizeof *pick);
    bool ok = stage && pick;
    if (ok)
        needs_stores(k, false, live);
    int nred = 0;
    for (int i = 0; ok && i < n; i++) {
        const lower_ins *x = &k->ins[i];
        if (!live[i] || x->inner)
            continue;
        if (x->op == UOP_REDUCE) {
            stage[i] = ++nred;
            continue;
        }
        int ops[3] = {x->a, x->b, x->c};
        for (int j = 0; j < 3; j++)
            if (ops[j] >= 0 && stage[ops[j]] > stage[i])
                stage[i] = stage[ops[j]];
    }
    for (int s = 0, next = 0; ok && s <= nred; s++) {
        for (int i = 0; i < n; i++)
            pick[i] = live[i] && !k->ins[i].inner && k->ins[i].op != UOP_REDUCE && stage[i] == s;
        ok = add_block(p, k, LOWER_BLOCK_OUTER, -1, pick);
        if (!ok || s == nred)
            break;
        int red = next;
        while (!(live[red] && k->ins[red].op == UOP_REDUCE))
            red++;
        next = red + 1;
        memset(pick, 0, sizeof *pick * (size_t)n);
        needs(k, k->ins[red].a, true, pick);
        ok = add_block(p, k, LOWER_BLOCK_REDUCE, red, pick);
    }
    if (ok && stores_inner(k)) {
        memset(pick, 0, sizeof *pick * (size_t)n);
        needs_stores(k, true, pick);
        ok = add_block(p, k, LOWER_BLOCK_STORE, -1, pick);
    }
    free(stage);
    free(pick);
    return ok;
}

/* A scatter kernel: per row, the outer values, the pass over the row's
 * places that stores the destination, then each scatter pass over the row's
 * source elements, which recomputes its inner values. */
static bool plan_scatter(lower_plan *p, const lower_kernel *k, bool *live) {
    int n = k->nins;
    bool *pick = calloc((size_t)(n ? n : 1), sizeof *pick);
    if (!pick)
        return false;
    needs_stores(k, false, live);
    for (int j = 0; j < k->nscatter; j++) {
        const lower_scatter_store *st = &k->scatter[j];
        needs(k, st->value, false, live);
        needs(k, st->at, false, live);
        if (st->valid >= 0)
            needs(k, st->valid, false, live);
    }
    for (int i = 0; i < n; i++)
        pick[i] = live[i] && !k->ins[i].inner;
    bool ok = add_block(p, k, LOWER_BLOCK_OUTER, -1, pick);
    memset(pick, 0, sizeof *pick * (size_t)n);
    needs_stores(k, true, pick);
    ok = ok && add_block(p, k, LOWER_BLOCK_STORE, -1, pick);
    for (int j = 0; ok && j < k->nscatter; j++) {
        const lower_scatter_store *st = &k->scatter[j];
        memset(pick, 0, sizeof *pick * (size_t)n);
        needs(k, st->value, true, pick);
        needs(k, st->at, true, pick);
        if (st->valid >= 0)
            needs(k, st->valid, true, pick);
        ok = add_block(p, k, LOWER_BLOCK_SCATTER, j, pick);
    }
    free(pick);
    return ok;
}

/* Whether every index value of k, in every lane (masked ones too), lies well
 * inside int32 — and so do the immediates index arithmetic uses. 64-bit
 * division by a constant does not vectorise, and views make kernels full of
 * it. */
static bool narrow_indices(const lower_kernel *k) {
    const int64_t lim = INT32_MAX / 2;
    if (k->numel > lim || k->rnumel > lim || k->snumel > lim)
        return false;
    for (int i = 0; i < k->nins; i++) {
        const lower_ins *x = &k->ins[i];
        bool index = lower_uop_is_index(x->op);
        if (index && (x->min < -lim || x->max > lim))
            return false;
        if (x->op >= UOP_IADD && x->op <= UOP_ILT)
            for (int j = 0; j < 2; j++) {
                const lower_ins *o = &k->ins[j ? x->b : x->a];
                if (o->min < -lim || o->max > lim)
                    return false;
            }
    }
    return true;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* A block size of about `target`, a multiple of `unit`, that splits n into
 * blocks of nearly equal size. */
static int64_t even_block(int64_t n, int64_t target, int64_t unit) {
    if (n < 1)
        n = 1;
    int64_t nblocks = ceil_div(n, target);
    return ceil_div(ceil_div(n, nblocks), unit) * unit;
}

static int64_t batch_count(const lower_kernel *k) {
    int64_t nb = 1;
    for (int d = 0; d < k->nbatch; d++)
        nb *= k->batch[d];
    return nb;
}

static kiln_dtype mm_acc_type(const lower_kernel *k) {
    kiln_dtype dt = k->out->dtype;
    for (int i = 0; i < k->nins; i++)
        if (k->ins[i].op == UOP_ACC)
            dt = k->ins[i].dt;
    /* Halves accumulate in float, integers in wrapping 64 bits. */
    if (dt == KILN_F16 || dt == KILN_BF16)
        return KILN_F32;
    return graph_dtype_is_float(dt) ? dt : KILN_I64;
}

static kiln_dtype operand_dtype(const lower_kernel *k, const lower_operand *o) {
    return k->inputs[o->buf - k->nouts]->dtype;
}

int lower_mm_tensor_dtype(const lower_kernel *k) {
    if (k->kind != LOWER_MATMUL)
        return -1;
    kiln_dtype a = operand_dtype(k, &k->a), b = operand_dtype(k, &k->b);
    return a == b && mm_acc_type(k) == KILN_F32 &&
                   (a == KILN_F32 || a == KILN_F16 || a == KILN_BF16)
               ? (int)a
               : -1;
}

static void mm_tasks(lower_plan *p, const lower_kernel *k);
static int mm_pack_tr(const lower_kernel *k, const lower_mm_plan *mm, int vector_bytes);
static void attention_tasks(lower_plan *p, const lower_kernel *k);

/* A GotoBLAS-style blocking for a CPU. The register tile: MR x NV vector
 * accumulators, NV loads of B and a broadcast of A fit the vector register
 * file (6 x 4 with AVX-512's 32 registers, 6 x 2 with 16). The output is cut
 * into MC x NC blocks, and the blocks of every batch are the tasks, so that
 * both long and skinny shapes give every thread work. */
/* Bytes of a CPU product's accumulator: f32, or f64 and u64. */
static int acc_bytes(kiln_dtype acc) { return acc == KILN_F32 ? 4 : 8; }

static void plan_cpu_matmul(lower_plan *p, const lower_kernel *k, const lower_target *t) {
    lower_mm_plan *mm = &p->mm;
    mm->acc = mm_acc_type(k);
    int esz = acc_bytes(mm->acc);
    int vbytes = t->vector_bytes >= 16 ? t->vector_bytes : 16;
    mm->mr = 6;
    mm->nv = vbytes >= 64 ? 4 : 2;
    mm->lanes = vbytes / esz;
    /* Narrow outputs (a matrix times a vector, a projection to a few
     * features) take fewer vectors per row and more rows, in the same
     * registers, rather than computing columns that do not exist. */
    if (k->m > 0 && ceil_div(k->m, mm->lanes) < mm->nv) {
        int nv = (int)ceil_div(k->m, mm->lanes);
        mm->mr = mm->mr * mm->nv / nv < 12 ? mm->mr * mm->nv / nv : 12;
        mm->nv = nv;
    }
    /* Wide outputs: 8 rows of 3 vectors where that pads the columns by a
     * tenth less than 6 rows of 4 (144 columns are 3 panels of 48, or 2.25
     * of 64): the same 24 accumulators. A conv weight gradient 32 x 25088 @
     * 25088 x 144 2.1 -> 1.4 ms; where it saves less, 6x4 ran a few percent
     * faster (64 x 4096 @ 4096^2). Columns only: the rows are what a
     * sequence or a batch changes, and a plan that changed with them would
     * part programs that differ only in those sizes (dynamic_test). */
    if (mm->nv == 4 && k->m > 0) {
        int64_t l = mm->lanes;
        int64_t pad64 = ceil_div(k->m, 4 * l) * 4 * l, pad83 = ceil_div(k->m, 3 * l) * 3 * l;
        if (10 * pad83 < 9 * pad64) {
            mm->mr = 8;
            mm->nv = 3;
        }
    }
    int64_t nr = (int64_t)mm->lanes * mm->nv;
    /* KC x NR of B is about 64 KiB: long enough runs of k to hide the C
     * tile's load and store. */
    int64_t kc = 65536 / (nr * esz);
    kc = kc < 64 ? 64 : kc > 512 ? 512 : kc;
    mm->kc = even_block(k->k, kc, 1);
    mm->mc = even_block(k->n, MM_MC, mm->mr);
    mm->nc = even_block(k->m, MM_NC, nr);
    /* Blocks shrink until there are enough tasks to balance the threads.
     * Where k takes several KC blocks, a task repacks its B panel for each,
     * once per mc rows of A: rows of at least MM_MIN_MC_LONG_K keep that
     * packing below the products (a weight gradient, 32 x 25088 @ 25088 x
     * 144, cut to 6-row tasks ran at 40 GFLOP/s, its B packed 6 times over). */
    int64_t nb = batch_count(k);
    int64_t min_mc = k->k > mm->kc ? MM_MIN_MC_LONG_K : 0;
    for (int it = 0; it < 16 && nb * ceil_div(k->n, mm->mc) * ceil_div(k->m, mm->nc) < 8; it++) {
        if (mm->mc >= mm->nc / 2 && mm->mc > 2 * mm->mr && mm->mc / 2 >= min_mc)
            mm->mc = even_block(k->n, mm->mc / 2, mm->mr);
        else if (mm->nc > nr)
            mm->nc = even_block(k->m, mm->nc / 2, nr);
        else if (mm->mc > mm->mr && mm->mc / 2 >= min_mc)
            mm->mc = even_block(k->n, mm->mc / 2, mm->mr);
        else
            break;
    }
    /* A of the accumulation type whose rows are contiguous feeds the
     * micro-kernel where it lies (measured: faster than packing it, while a
     * transposed A is faster packed). */
    kiln_dtype at = operand_dtype(k, &k->a);
    mm->a_direct = at == mm->acc && (at == KILN_F32 || at == KILN_F64) && k->a.col_stride == 1 &&
                   !lower_operand_split(&k->a);
    mm->pack_tr = mm_pack_tr(k, mm, vbytes);
    mm_tasks(p, k);
}

/* The register transposes a CPU matmul's B packs through (lower_mm_plan.
 * pack_tr): f32 B read along k (a w^T: every kiln_linear's forward), into f32
 * panels whose lanes x nv columns are whole blocks of the target's vectors.
 * Its scalar copy, 16 k steps of 64 rows at a time, waited on 64 rows' lines
 * at once: the product's function body 28% of a 256 x 768 @ 768 x 3072's
 * time, against 7% for a plain B; all of w packed 16 rows at a time 0.94 ->
 * 0.54 ms (AVX-512); 8 x 8 on AVX2: 256 x 768 @ w^T 18.5-21.7 -> 15.5-16.5 ms
 * (Zen 3). */
static int mm_pack_tr(const lower_kernel *k, const lower_mm_plan *mm, int vector_bytes) {
    int tr = vector_bytes >= 64 ? 16 : vector_bytes >= 32 ? 8 : 0;
    const lower_operand *b = &k->b;
    bool along_k = b->row_stride == 1 && b->col_stride != 1 &&
                   lower_size_index(k, &b->row_stride) < 0 && !lower_operand_split(b);
    if (!tr || !along_k || mm->acc != KILN_F32 || operand_dtype(k, b) != KILN_F32 ||
        (mm->lanes * mm->nv) % tr != 0)
        return 0;
    return tr;
}

/* A CPU matmul's grid (its MC x NC blocks of every batch) and whether they
 * are worth spreading over threads, from its blocking. */
static void mm_tasks(lower_plan *p, const lower_kernel *k) {
    const lower_mm_plan *mm = &p->mm;
    int64_t nb = batch_count(k);
    int64_t tasks = nb * ceil_div(k->n, mm->mc) * ceil_div(k->m, mm->nc);
    p->grid = k->n > 0 && k->m > 0 ? tasks : 0;
    p->parallel = nb * k->n * k->m * k->k >= PAR_MIN_MATMUL && tasks > 1;
}

void lower_plan_blocking(const lower_plan *p, int64_t *out) {
    const lower_mm_plan *mm = &p->mm;
    const lower_att_plan *at = &p->att;
    int64_t v[LOWER_BLOCKING_LEN] = {mm->mr, mm->nv, mm->lanes, mm->mc, mm->nc, mm->kc,
                                     mm->a_direct, at->bq, at->bk, at->mr, at->nv};
    memcpy(out, v, sizeof v);
}

/* Adds variant v (base with other blocks) to out[0..*n), its grid worked
 * out, unless one there has its blocking. */
static void add_plan(const lower_kernel *k, const lower_plan *v, lower_plan *out, int *n,
                     int max) {
    int64_t mine[LOWER_BLOCKING_LEN], theirs[LOWER_BLOCKING_LEN];
    lower_plan_blocking(v, mine);
    for (int i = 0; i < *n; i++) {
        lower_plan_blocking(&out[i], theirs);
        if (!memcmp(mine, theirs, sizeof mine))
            return;
    }
    if (*n >= max)
        return;
    out[*n] = *v;
    if (k->kind == LOWER_ATTENTION)
        attention_tasks(&out[*n], k);
    else
        mm_tasks(&out[*n], k);
    (*n)++;
}

/* Adds base with blocking mm (its blocks evened to the shape). */
static void add_variant(const lower_kernel *k, const lower_plan *base, lower_mm_plan mm,
                        lower_plan *out, int *n, int max) {
    int64_t nr = (int64_t)mm.lanes * mm.nv;
    mm.mc = even_block(k->n, mm.mc, mm.mr);
    mm.nc = even_block(k->m, mm.nc, nr);
    mm.kc = even_block(k->k, mm.kc, 1);
    mm.pack_tr = mm_pack_tr(k, &mm, base->vector_bytes);
    lower_plan v = *base;
    v.mm = mm;
    add_plan(k, &v, out, n, max);
}

/* Adds base with attention blocks att. */
static void add_att_variant(const lower_kernel *k, const lower_plan *base, lower_att_plan att,
                            lower_plan *out, int *n, int max) {
    lower_plan v = *base;
    v.att = att;
    add_plan(k, &v, out, n, max);
}

/* Fused attention's variants: blocks of queries and tiles of keys from 32
 * to 128 (keys to 256), none much past the sequence. */
static int attention_variants(const lower_kernel *k, const lower_plan *base, lower_plan *out,
                              int max) {
    const lower_attention *a = &k->att;
    if (batch_count(k) * a->l * a->s * (a->d + a->dv) < TUNE_MIN_MATMUL)
        return 0;
    int n = 0;
    add_att_variant(k, base, base->att, out, &n, max); /* the heuristics' own, first */
    static const int64_t bqs[] = {32, 64, 128}, bks[] = {32, 64, 128, 256};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            if ((bqs[i] == 32 || bqs[i] / 2 < a->l) && (bks[j] == 32 || bks[j] / 2 < a->s)) {
                lower_att_plan att = base->att;
                att.bq = bqs[i];
                att.bk = bks[j];
                add_att_variant(k, base, att, out, &n, max);
            }
    return n;
}

int lower_plan_variants(const lower_kernel *k, const lower_target *t, const lower_plan *base,
                        lower_plan *out, int max) {
    const lower_mm_plan *b = &base->mm;
    if (t->gpu || k->nsizes || max < 1)
        return 0;
    if (k->kind == LOWER_ATTENTION)
        return attention_variants(k, base, out, max);
    if (k->kind != LOWER_MATMUL || b->tile ||
        batch_count(k) * k->n * k->m * k->k < TUNE_MIN_MATMUL)
        return 0;
    int n = 0;
    add_variant(k, base, *b, out, &n, max); /* the heuristics' own, first */
    /* Cache blocks: rows of A per packing of B, columns of B per task. */
    static const int64_t mcs[] = {96, 192, 384, 720}, ncs[] = {128, 256, 512, 1024};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            lower_mm_plan mm = *b;
            mm.mc = mcs[i];
            mm.nc = ncs[j];
            add_variant(k, base, mm, out, &n, max);
        }
    /* Runs of k: half and twice the heuristics' (the C tile's loads and
     * stores against B's share of L2). */
    for (int f = 0; f < 2; f++) {
        lower_mm_plan mm = *b;
        mm.kc = f ? b->kc * 2 : b->kc / 2 > 16 ? b->kc / 2 : 16;
        add_variant(k, base, mm, out, &n, max);
    }
    /* The other register tile of 24 accumulators (6 x 4 <-> 8 x 3), with
     * blocks as close as its panels allow. */
    if (b->nv == 4 && b->mr == 6) {
        lower_mm_plan mm = *b;
        mm.mr = 8;
        mm.nv = 3;
        add_variant(k, base, mm, out, &n, max);
    } else if (b->nv == 3 && b->mr == 8) {
        lower_mm_plan mm = *b;
        mm.mr = 6;
        mm.nv = 4;
        add_variant(k, base, mm, out, &n, max);
    }
    /* Half-width vectors in the same registers (on AVX-512: 256-bit ones,
     * which some cores run without lowering their clock). */
    if (b->lanes >= 8 && b->lanes * acc_bytes(b->acc) >= 64) {
        lower_mm_plan mm = *b;
        mm.lanes = b->lanes / 2;
        add_variant(k, base, mm, out, &n, max);
    }
    /* A packed where the heuristics read it in place (long rows of A far
     * apart cost a TLB entry each). */
    if (b->a_direct) {
        lower_mm_plan mm = *b;
        mm.a_direct = false;
        add_variant(k, base, mm, out, &n, max);
    }
    return n;
}

static int64_t gpu_grid(int64_t units) {
    return units <= 0 ? 0 : units > GPU_GRID_CAP ? GPU_GRID_CAP : units;
}

/* Index instruction i at output element g and reduced element r (the index
 * uops only); false if it is not index arithmetic of g and r. */
static bool index_at(const lower_kernel *k, int i, int64_t g, int64_t r, int64_t *out) {
    const lower_ins *x = &k->ins[i];
    int64_t a, b;
    switch (x->op) {
    case UOP_GIDX:
        *out = g;
        return true;
    case UOP_RIDX:
        *out = r;
        return true;
    case UOP_TILE:
        *out = g / (k->tile > 0 ? k->tile : 1);
        return true;
    case UOP_LANE:
        *out = g % (k->tile > 0 ? k->tile : 1);
        return true;
    case UOP_IMM:
        *out = x->imm.i;
        return true;
    case UOP_IADD:
    case UOP_IMUL:
    case UOP_IDIV:
    case UOP_IMOD:
        if (!index_at(k, x->a, g, r, &a) || !index_at(k, x->b, g, r, &b))
            return false;
        if ((x->op == UOP_IDIV || x->op == UOP_IMOD) && b == 0)
            return false;
        *out = x->op == UOP_IADD ? a + b : x->op == UOP_IMUL ? a * b : x->op == UOP_IDIV ? a / b : a % b;
        return true;
    default:
        return false;
    }
}

/* Whether every load of the reduce pass steps by 1 along the outputs and by
 * more along the reduced elements, or reads one value per reduced element
 * (a row statistic broadcast along the row: the mean and rstd in a
 * layer-norm weight's gradient, which otherwise ran as a strided pass per
 * output at 4% of bandwidth: 7.7 ms of a transformer block's 170) or one
 * per output (a per-column weight); at least one load runs down the
 * columns. Checked at a few points. */
static bool loads_run_down_columns(const lower_kernel *k, const lower_block *blk) {
    const int64_t pts[3][2] = {{0, 0}, {k->numel / 2, k->rnumel / 2}, {k->numel - 2, k->rnumel - 2}};
    int down = 0;
    for (int i = 0; i < blk->n; i++) {
        const lower_ins *x = &k->ins[blk->ins[i]];
        if (x->op != UOP_LOAD)
            continue;
        if (x->b >= 0)
            return false; /* masked (padding): left to the general pass */
        bool columns = true, per_row = true, per_output = true;
        for (int p = 0; p < 3; p++) {
            int64_t v, vg, vr, g = pts[p][0], r = pts[p][1];
            if (!index_at(k, x->a, g, r, &v) || !index_at(k, x->a, g + 1, r, &vg) ||
                !index_at(k, x->a, g, r + 1, &vr))
                return false;
            columns = columns && vg - v == 1 && vr - v > 1;
            per_row = per_row && vg == v;
            per_output = per_output && vg - v == 1 && vr == v;
        }
        if (!columns && !per_row && !per_output)
            return false;
        down += columns;
    }
    return down > 0;
}

/* Outputs per chunk down columns: each row's run of a chunk is contiguous,
 * and 1024 floats are a 4 KiB page. Column sums of 4096 x 4096 on the 2-core
 * AMD EPYC (Zen 3): 5.2-7.4 ms in chunks of 256 (a kilobyte of each row, the
 * next row's 16 KiB on), 5.2-6.0 in 512, 3.6-4.3 in 1024 (88% of the triad),
 * 3.5-3.9 in 2048, which leaves half the chunks for the threads. The partial
 * sums, 8 KiB of doubles, stay in L1. */
enum { COLUMN_CHUNK = 1024, COLUMN_MIN_OUTPUTS = 16, WINDOW_MAX = 16 };

/* Rows taken into a chunk per pass over it (lower_plan.column_step): one
 * row a pass loaded and stored each partial result per element read, and
 * read one stream a thread. The column sums of 4096 x 4096 (Zen 3, its
 * kernel by hand, alternating, four runs): 4.1-4.9 ms a row a pass,
 * 3.3-3.4 four (bit for bit the same sums), 3.0-3.5 eight, 3.2-3.4 two. */
enum { COLUMN_STEP = 4 };

/* A plain sum, max or min (one reduce pass, no store pass) taken down
 * columns: see columns. A sum whose loads run down columns; or any of the
 * three over a small window of a fixed few elements (pooling's kh x kw, a
 * max-pool's backward counting its ties), where a pass per output was a
 * loop of 4 behind the index arithmetic of each output: a 2x2 max-pool of
 * [128, 16, 28, 28] ran at 3 GB/s. Down columns the loop over outputs is
 * the vector one, each of the few rows read at a stride. */
static int64_t plan_columns(const lower_plan *p, const lower_kernel *k) {
    /* A window is taken down columns however few its outputs (but one: a
     * batch's mean loss, whose count of elements is the batch): a plan that
     * changed with the outputs' count (a batch of rows, each reducing its
     * 10 classes) would part programs that differ only in the batch. A
     * window that grows past WINDOW_MAX does change the plan: its own
     * program, as a batch of one is (dynamic_test). Plans come before any
     * size is read at run time; a window's count that later is one still
     * runs right here, the columns loop reading it. */
    bool window = k->numel >= 2 && k->rnumel <= WINDOW_MAX;
    if (p->split || (k->numel < COLUMN_MIN_OUTPUTS && !window) || k->rnumel < 2)
        return 0;
    const lower_block *red = NULL;
    for (int b = 0; b < p->nblocks; b++) {
        if (p->blocks[b].kind == LOWER_BLOCK_STORE)
            return 0;
        if (p->blocks[b].kind == LOWER_BLOCK_REDUCE) {
            if (red)
                return 0;
            red = &p->blocks[b];
        }
    }
    if (!red)
        return 0;
    graph_op op = k->ins[red->reduce].gop;
    if (op == GRAPH_SUM ? !window && !loads_run_down_columns(k, red)
                        : !window || (op != GRAPH_RMAX && op != GRAPH_RMIN))
        return 0;
    return COLUMN_CHUNK;
}

/* The rows a columns kernel's outputs are walked in (lower_plan.rows): the
 * least divisor of the flat output index (UOP_GIDX) among its divisions,
 * where it is at least a vector of f32 (8) and divides the outputs. Not a
 * larger one past a smaller: a 7 x 7 output's rows of 49 left its
 * divisions by 7 per element, and the CNN's two pooling kernels on it took
 * 0.94 and 1.17 ms, against 0.56-0.61 and 0.76-0.83 flat (a profile each).
 * The CNN's max-pool backward fused with the second convolution's col2im,
 * [128, 16, 14, 14] outputs over windows of 4, its coordinates and 13
 * loads' places divisions by 14, 196 and 3136 per element: 6.0-6.3 ->
 * 3.2-4.5 ms walked in rows of 14 (the same C by hand, Zen 3, alternating);
 * in the CNN's profile 6.7 -> 3.7-4.5 ms. None for run-time sizes (a literal row length), nor
 * on AVX-512 machines until measured there: their gathers are cheap (the
 * same kernel took 1.4 ms flat on the Xeon) and an earlier form of rows for
 * pooling (each row a tile) measured worse there. */
enum { ROWS_MIN = 8 };
static int64_t plan_rows(const lower_plan *p, const lower_kernel *k) {
    if (!p->columns || k->nsizes || p->vector_bytes >= 64)
        return 0;
    int64_t least = 0;
    for (int i = 0; i < k->nins; i++) {
        const lower_ins *x = &k->ins[i];
        if ((x->op != UOP_IDIV && x->op != UOP_IMOD) || k->ins[x->a].op != UOP_GIDX ||
            k->ins[x->b].op != UOP_IMM || k->ins[x->b].sized)
            continue;
        int64_t d = k->ins[x->b].imm.i;
        if (d > 1 && (!least || d < least))
            least = d;
    }
    return least >= ROWS_MIN && least <= p->columns && k->numel % least == 0 ? least : 0;
}

/* What recomputing an instruction costs, roughly in vector operations: a
 * libm call (erfc, tan …) far more than an add; index arithmetic, loads and
 * immediates nothing (a reloaded value costs a load too). */
static int ins_cost(const lower_ins *x) {
    if (x->op == UOP_PRIM)
        return lower_prim_libm(x->prim) ? 20 : x->prim == PRIM_DIV || x->prim == PRIM_SQRT ? 4 : 1;
    return x->op == UOP_ALU || x->op == UOP_WHERE || x->op == UOP_RAND ? 1 : 0;
}

/* A columns kernel's rows a pass (lower_plan.column_step): COLUMN_STEP
 * where what each row's element computes is cheap (loads, index arithmetic,
 * a few operations: a bias gradient's sum of its incoming gradient), one
 * where it is not: each row of a pass is its own copy of that code, and a
 * kernel that computes much per element (random numbers made in place, 13
 * KB of C) gains nothing from reading more streams at once. */
enum { COLUMN_STEP_MAX_COST = 16 };
static int column_step(const lower_plan *p, const lower_kernel *k) {
    int cost = 0;
    for (int b = 0; b < p->nblocks; b++) {
        const lower_block *blk = &p->blocks[b];
        for (int i = 0; i < blk->n; i++)
            cost += ins_cost(&k->ins[blk->ins[i]]);
        if (blk->kind == LOWER_BLOCK_REDUCE)
            break;
    }
    return cost <= COLUMN_STEP_MAX_COST ? COLUMN_STEP : 1;
}

static int picked_cost(const lower_kernel *k, const bool *pick) {
    int c = 0;
    for (int i = 0; i < k->nins; i++)
        c += pick[i] ? ins_cost(&k->ins[i]) : 0;
    return c;
}

/* A stash must save at least this much per element (softmax's exp, about
 * 30 operations as rules_math writes it, saves all of it). */
enum { STASH_MIN_SAVING = 8 };

/* A row kernel's store pass recomputes what its passes computed (softmax:
 * exp(x - max) in the sum pass and again for the quotient). Where one value
 * carries most of that work, the sum pass stores it into output 0 at the
 * store index, and the store pass loads it back: the row is in cache (or
 * costs one write and read of the output, still less than an exp), and the
 * output is written there anyway. 4096x4096 softmax, the C path, one thread,
 * the same kernel with and without the stash: 2.2x faster with 256-bit
 * vectors, 1.6x with 512-bit ones (load 2.6). Only for float outputs in
 * their own dtype (a half output would round the value), sum passes, and
 * rows not split across threads (each chunk's writes would need ordering
 * against the store pass's reads on every target). */
static bool plan_stash(lower_plan *p, const lower_kernel *k) {
    if (p->split || p->columns || p->nblocks < 2 || k->nouts < 1)
        return true;
    lower_block *st = &p->blocks[p->nblocks - 1];
    kiln_dtype dt = k->outs[0]->dtype;
    if (st->kind != LOWER_BLOCK_STORE || (dt != KILN_F32 && dt != KILN_F64))
        return true;
    bool *full = calloc((size_t)k->nins, sizeof *full), *cut = calloc((size_t)k->nins, sizeof *cut);
    bool ok = full && cut;
    int best = -1, best_block = -1, best_saving = STASH_MIN_SAVING - 1;
    if (ok) {
        needs_stores(k, true, full);
        int whole = picked_cost(k, full);
        for (int b = 0; b < p->nblocks - 1; b++) {
            const lower_block *rb = &p->blocks[b];
            if (rb->kind != LOWER_BLOCK_REDUCE || k->ins[rb->reduce].gop != GRAPH_SUM)
                continue;
            for (int j = 0; j < rb->n; j++) {
                int c = rb->ins[j];
                const lower_ins *x = &k->ins[c];
                if (!full[c] || c <= k->store || x->dt != dt || x->op == UOP_LOAD || x->op == UOP_IMM)
                    continue;
                memset(cut, 0, sizeof *cut * (size_t)k->nins);
                needs_stores_upto(k, true, c, cut);
                int saving = whole - picked_cost(k, cut);
                if (saving >= best_saving) { /* ties: the later pass, the later value */
                    best = c;
                    best_block = b;
                    best_saving = saving;
                }
            }
        }
    }
    if (ok && best >= 0) {
        /* The store pass without the stash's operands; the sum pass with the
         * store index as well. */
        memset(cut, 0, sizeof *cut * (size_t)k->nins);
        needs_stores_upto(k, true, best, cut);
        lower_block *rb = &p->blocks[best_block];
        memset(full, 0, sizeof *full * (size_t)k->nins);
        for (int j = 0; j < rb->n; j++)
            full[rb->ins[j]] = true;
        needs(k, k->store, true, full);
        int nst = 0, nrb = 0;
        for (int i = 0; i < k->nins; i++) {
            nst += cut[i];
            nrb += full[i];
        }
        int *sti = malloc(sizeof *sti * (size_t)(nst ? nst : 1));
        int *rbi = malloc(sizeof *rbi * (size_t)(nrb ? nrb : 1));
        ok = sti && rbi;
        if (ok) {
            nst = nrb = 0;
            for (int i = 0; i < k->nins; i++) {
                if (cut[i])
                    sti[nst++] = i;
                if (full[i])
                    rbi[nrb++] = i;
            }
            free(st->ins);
            st->ins = sti;
            st->n = nst;
            st->stash = best;
            free(rb->ins);
            rb->ins = rbi;
            rb->n = nrb;
            rb->stash = best;
        } else {
            free(sti);
            free(rbi);
        }
    }
    free(full);
    free(cut);
    return ok;
}

/* Fused attention's blocks. CPU: a program instance owns ATT_BQ queries
 * (the forward and dq: a tile of scores ATT_BQ x ATT_BK, with q's rows,
 * k's and v's tile and the output rows in L1 and L2 at head widths of
 * 64-128) or ATT_BK keys (dkv), and walks the other side in tiles. Fixed,
 * not fitted to small sizes, so that graphs differing in a sequence length
 * share one program (lower/sizes.c); the loops stop at the real sizes. GPU:
 * 64 x 64 tiles over 128 threads (render_attention.c). */
#define ATT_BQ 64
#define ATT_BK 64
/* dkv's own block of keys: 128 repacks each query tile half as often
 * (dkv 251 -> 274 GFLOP/s at b8 h8 s256 d64, where 128 for the walked
 * tiles made the forward and dq 2-5% slower) */
#define ATT_BK_DKV 128
#define GPU_ATT_TILE 64
#define GPU_ATT_THREADS 128

/* Program instances of an attention kernel whose blocks are bq queries
 * (bk keys for dkv). */
static int64_t attention_units(const lower_kernel *k, int64_t bq, int64_t bk) {
    const lower_attention *a = &k->att;
    if (lower_joint_attention(k)) /* the joint backward: one per matrix, dq summed over its key blocks */
        return batch_count(k);
    return batch_count(k) *
           (a->op == GRAPH_ATTENTION_DKV ? ceil_div(a->s, bk) : ceil_div(a->l, bq));
}

/* A CPU attention kernel's grid (its blocks of every batch) and whether
 * they are worth spreading over threads, from its blocking. */
static void attention_tasks(lower_plan *p, const lower_kernel *k) {
    const lower_attention *a = &k->att;
    p->grid = attention_units(k, p->att.bq, p->att.bk);
    p->parallel = p->grid > 1 && batch_count(k) * a->l * a->s * (a->d + a->dv) >= PAR_MIN_MATMUL;
}

/* Whether every pass of a reduction kernel can run split across blocks:
 * one or more reduce passes, none reading what a reduction computes (a
 * variance's second pass reads the mean: it would need the whole grid to
 * wait between passes), and no store pass. Row kernels (softmax, layer
 * norm: a STORE pass) stay one block per row: their store pass needs every
 * reduction of the row finished in every block, which the last-block scheme
 * cannot give without a grid-wide barrier, and their rows are seldom few
 * and long. */
static bool passes_split(const lower_plan *p, const lower_kernel *k) {
    bool *after = calloc((size_t)(k->nins ? k->nins : 1), sizeof *after);
    if (!after)
        return false; /* only a missed speed-up */
    for (int i = 0; i < k->nins; i++) {
        const lower_ins *x = &k->ins[i];
        int ops[3] = {x->a, x->b, x->c};
        after[i] = x->op == UOP_REDUCE;
        for (int j = 0; j < 3; j++)
            after[i] = after[i] || (ops[j] >= 0 && after[ops[j]]);
    }
    bool ok = false;
    for (int b = 0; b < p->nblocks; b++) {
        const lower_block *blk = &p->blocks[b];
        if (blk->kind == LOWER_BLOCK_STORE || blk->kind == LOWER_BLOCK_SCATTER) {
            ok = false;
            break;
        }
        if (blk->kind != LOWER_BLOCK_REDUCE)
            continue;
        ok = true;
        for (int i = 0; i < blk->n && ok; i++)
            ok = !after[blk->ins[i]];
        if (!ok)
            break;
    }
    free(after);
    return ok;
}

/* GPU: a reduction with rows too few to fill the device (see
 * GPU_SPLIT_BLOCKS) gives each row row_blocks blocks, each reducing a chunk
 * of row_chunk contiguous elements (a multiple of the block's threads, so
 * that chunks start aligned); the last block of a row to finish combines
 * the partials and stores. */
static void plan_gpu_split(lower_plan *p, const lower_kernel *k) {
    if (k->numel <= 0 || k->rnumel < 2 * GPU_SPLIT_CHUNK || !passes_split(p, k))
        return;
    int64_t fill = ceil_div(GPU_SPLIT_BLOCKS, k->numel), most = k->rnumel / GPU_SPLIT_CHUNK;
    int64_t blocks = fill < most ? fill : most;
    if (blocks < 2)
        return;
    p->split = true;
    p->row_chunk = ceil_div(ceil_div(k->rnumel, blocks), GPU_RED_THREADS) * GPU_RED_THREADS;
    p->row_blocks = ceil_div(k->rnumel, p->row_chunk);
    p->grid = gpu_grid(k->numel * p->row_blocks);
}

/* The loop nest: grid, threads, splits, and the matmul's blocking. */
static void plan_loops(lower_plan *p, const lower_kernel *k, const lower_target *t) {
    int64_t tile = k->tile > 0 ? k->tile : 1;
    p->vector_bytes = t->vector_bytes;
    if (t->gpu) {
        switch (k->kind) {
        case LOWER_ELEMENTWISE:
            p->grid = gpu_grid(k->numel > 0 ? ceil_div(k->numel, tile) : 0);
            p->block_threads = t->block_threads;
            break;
        case LOWER_SCATTER:
        case LOWER_REDUCE: {
            /* No more threads than reduced elements, in whole warps (a
             * scatter's: the places its threads store t at; one thread then
             * walks the source elements in order). */
            int64_t r = k->rnumel < 1 ? 1 : k->rnumel;
            p->grid = gpu_grid(k->numel);
            p->block_threads = r >= GPU_RED_THREADS ? GPU_RED_THREADS : (int)ceil_div(r, 32) * 32;
            if (k->kind == LOWER_REDUCE)
                plan_gpu_split(p, k);
            break;
        }
        case LOWER_MATMUL:
            p->mm.acc = mm_acc_type(k);
            p->mm.tile = GPU_MM_TILE;
            p->mm.ktile = GPU_MM_K;
            p->grid = gpu_grid(batch_count(k) * ceil_div(k->n, GPU_MM_TILE) *
                               ceil_div(k->m, GPU_MM_TILE));
            p->block_threads = GPU_MM_THREADS;
            {
                int pd = lower_mm_tensor_dtype(k);
                p->mm.mma = t->mma && pd >= 0 && (pd != KILN_F32 || t->tf32);
                if (p->mm.mma)
                    p->block_threads = GPU_MMA_THREADS;
            }
            break;
        case LOWER_ATTENTION:
            p->att.bq = p->att.bk = GPU_ATT_TILE;
            p->grid = gpu_grid(attention_units(k, GPU_ATT_TILE, GPU_ATT_TILE));
            p->block_threads = GPU_ATT_THREADS;
            break;
        case LOWER_ALIAS:
        case LOWER_COLLECTIVE:
            break;
        }
        p->parallel = p->grid > 0;
        return;
    }
    switch (k->kind) {
    case LOWER_ELEMENTWISE:
        p->grid = k->numel > 0 ? ceil_div(k->numel, tile) : 0;
        p->parallel = k->numel >= PAR_MIN_WORK;
        break;
    case LOWER_REDUCE:
        p->grid = k->numel;
        /* Few rows, each long (a full sum): the rows would leave cores idle,
         * so each pass over a row is split across the threads instead. */
        p->split = k->numel <= SPLIT_MAX_ROWS && k->rnumel >= SPLIT_MIN;
        p->parallel = !p->split && k->numel * k->rnumel >= PAR_MIN_WORK;
        p->split_streams = p->split ? SPLIT_STREAMS : 0;
        p->columns = plan_columns(p, k);
        p->column_step = p->columns ? column_step(p, k) : 0;
        p->rows = plan_rows(p, k);
        if (p->rows)
            p->columns -= p->columns % p->rows;
        break;
    case LOWER_SCATTER:
        /* rows in parallel: each owns its places; never split, since a
         * row's scatter passes are serial */
        p->grid = k->numel;
        p->parallel = k->numel > 1 && k->numel * (k->rnumel + k->snumel) >= PAR_MIN_WORK;
        break;
    case LOWER_MATMUL:
        plan_cpu_matmul(p, k, t);
        break;
    case LOWER_ATTENTION: {
        const lower_attention *a = &k->att;
        p->att.bq = ATT_BQ;
        p->att.bk = a->op == GRAPH_ATTENTION_DKV ? ATT_BK_DKV : ATT_BK;
        /* 6 rows of 4 vectors: 24 accumulators, 4 B vectors and a broadcast
         * in AVX-512's 32 registers, 10 loads per 24 FMAs where 4 rows took
         * 8 per 16 (b8 s256 d64 h8: the forward 5.6-6.1 -> 5.4-5.7 ms, the
         * joint backward 10.9-12.1 -> 11.0-11.5); 4 x 2 in AVX2's 16 */
        p->att.mr = p->vector_bytes >= 64 ? 6 : 4;
        p->att.nv = p->vector_bytes >= 64 ? 4 : 2;
        attention_tasks(p, k);
        break;
    }
    case LOWER_ALIAS:
    case LOWER_COLLECTIVE:
        break;
    }
}

/* A CPU row kernel of several passes reads its row from memory in the first
 * and finds it in cache in the later ones, which compute: memory idled
 * through them, and the next row's first pass waited on it (the prefetchers
 * do not run ahead into a row not yet touched). So the first later pass
 * that is a sum or the store pass prefetches the next row's first-pass
 * loads, a chunk of PREFETCH_CHUNK elements at a time. kiln_softmax over
 * 4096x4096, 2 threads: 7.4 -> 6.1-6.2 ms through C (10.3 -> 7.7-8.6
 * through LLVM); the written-out softmax, with a division an element,
 * 9.0-9.7 -> 7.2-7.5. Prefetching the whole next row at once (256
 * prefetches in a burst) gained a fifth of that. Decided from the blocks
 * alone, so that programs shared by several sizes keep one plan. */
#define PREFETCH_CHUNK 256

static void plan_prefetch(lower_plan *p, const lower_kernel *k, const lower_target *t) {
    if (t->gpu || k->kind != LOWER_REDUCE || p->split || p->columns)
        return;
    int first = -1;
    for (int i = 0; i < p->nblocks; i++) {
        const lower_block *blk = &p->blocks[i];
        if (blk->kind == LOWER_BLOCK_OUTER)
            continue;
        if (first < 0) {
            if (blk->kind != LOWER_BLOCK_REDUCE)
                return;
            first = i;
        } else if (blk->kind == LOWER_BLOCK_STORE ||
                   (blk->kind == LOWER_BLOCK_REDUCE && k->ins[blk->reduce].gop == GRAPH_SUM)) {
            p->prefetch = PREFETCH_CHUNK;
            p->prefetch_from = first;
            p->prefetch_in = i;
            return;
        }
    }
}

/* Whether index value id is computed from the row, the element and
 * immediates alone (no loaded value: a gather's coordinate is not), marking
 * what computes it in need. */
static bool index_only(const lower_kernel *k, int id, bool *need) {
    const lower_ins *x = &k->ins[id];
    bool ok;
    switch (x->op) {
    case UOP_GIDX:
    case UOP_RIDX:
        ok = true;
        break;
    case UOP_IMM:
        ok = !graph_dtype_is_float(x->dt);
        break;
    case UOP_IADD:
    case UOP_IMUL:
    case UOP_IDIV:
    case UOP_IMOD:
    case UOP_ILT:
    case UOP_AND:
        ok = index_only(k, x->a, need) && index_only(k, x->b, need);
        break;
    default:
        ok = false;
    }
    if (ok)
        need[id] = true;
    return ok;
}

int lower_prefetch_loads(const lower_kernel *k, const lower_plan *p, bool *need, int *loads,
                         int *step) {
    const lower_block *from = &p->blocks[p->prefetch_from];
    int n = 0, size = 1;
    for (int i = 0; i < from->n; i++) {
        const lower_ins *x = &k->ins[from->ins[i]];
        if (x->op == UOP_LOAD && index_only(k, x->a, need) && (x->b < 0 || index_only(k, x->b, need))) {
            loads[n++] = from->ins[i];
            int s = (int)graph_dtype_size(x->dt);
            size = s > size ? s : size;
        }
    }
    *step = 64 / size;
    return n;
}

void lower_mm_edges(const lower_kernel *k, const lower_plan *p, int *rows, int *vecs) {
    const lower_mm_plan *mm = &p->mm;
    int64_t nr = (int64_t)mm->lanes * mm->nv;
    *rows = *vecs = 0;
    if (k->kind != LOWER_MATMUL || mm->mr < 1 || nr < 1)
        return;
    /* only where the padding is a tenth of the tiles' work or more: each
     * micro-kernel more is compiled too (an MLP step's cold compile took
     * 5-15% longer with one for every partial tile) */
    if (k->n > 0 && lower_size_index(k, &k->n) < 0) {
        int r = (int)(k->n % mm->mr);
        int64_t padded = ceil_div(k->n, mm->mr) * mm->mr;
        *rows = r && 10 * (mm->mr - r) >= padded ? r : 0;
    }
    if (k->m > 0 && lower_size_index(k, &k->m) < 0) {
        int v = (int)ceil_div(k->m % nr, mm->lanes);
        int64_t padded = ceil_div(k->m, nr) * nr;
        *vecs = v && v < mm->nv && 10 * (mm->nv - v) * mm->lanes >= padded ? v : 0;
    }
}

int64_t lower_split_row_period(const lower_kernel *k, const lower_operand *o, int *first) {
    *first = -1;
    if (!o->nmasks || !o->nrdims)
        return 0;
    for (int d = 0; d < o->nrdims && *first < 0; d++)
        if (o->rmask[d] >= 0)
            *first = d;
    int64_t period = *first < 0 ? 0 : 1;
    for (int d = *first; d >= 0 && d < o->nrdims && period > 0; d++)
        period = lower_size_index(k, &o->rsize[d]) < 0 ? period * o->rsize[d] : 0;
    if (!period)
        *first = -1;
    return period;
}

bool lower_mm_stores_direct(const lower_kernel *k, const lower_plan *p) {
    return k->kind == LOWER_MATMUL && k->nouts == 1 && k->result >= 0 && k->store >= 0 &&
           k->ins[k->result].op == UOP_ACC && k->ins[k->store].op == UOP_GIDX &&
           k->out->dtype == p->mm.acc && (p->mm.acc == KILN_F32 || p->mm.acc == KILN_F64);
}

bool lower_plan_prefetches(const lower_kernel *k, const lower_plan *p, int block) {
    return p->prefetch && p->prefetch_in == block && !lower_plan_scalar(k, p);
}

/* A sum adds in float when its values are floats (f16 and bf16 values are
 * computed in float) that are never below zero (lower_ins.nonneg): with
 * values of both signs, a float partial sum that holds a large value loses
 * the small ones added while it does (ops_sum_accuracy_test's data), which
 * double does not. */
static bool float_sum(const lower_kernel *k, const lower_block *blk) {
    if (blk->kind != LOWER_BLOCK_REDUCE || k->ins[blk->reduce].gop != GRAPH_SUM ||
        !k->ins[blk->reduce].nonneg)
        return false;
    kiln_dtype in = k->ins[k->ins[blk->reduce].a].dt;
    return graph_dtype_is_float(in) && in != KILN_F64;
}

bool lower_pass_fsum(const lower_kernel *k, const lower_plan *p, int block) {
    return p->fsum && float_sum(k, &p->blocks[block]);
}

int64_t lower_pass_chunk(const lower_kernel *k, const lower_plan *p, int block) {
    return lower_plan_prefetches(k, p, block) ? p->prefetch
           : lower_pass_fsum(k, p, block)     ? p->fsum
                                              : 0;
}

/* A CPU row kernel's sums of float values add each chunk of a row in float
 * and the chunk's sum in double (lower_plan.fsum). Every element widened to
 * double took two conversions, a lane exchange and two adds a vector of 8
 * floats where float takes one add: beside e^x's ~25 operations that was
 * what bound the softmax's sum pass (throughput, not latency).
 * kiln_softmax over 4096x4096 on the 2-core Zen 3, 2 threads: 15.2-17.6 ->
 * 12.6-14.5 ms. A chunk of 256 is 32 additions in each of 8 lanes: rounding
 * error about 32 float ulps of the chunk's magnitude at worst, where the
 * chunks then add exactly enough (double); a whole row in float would be a
 * row's length / 8 of them. The chunk is the prefetch's (PREFETCH_CHUNK),
 * so that a pass doing both runs one loop of chunks. Not for rows split
 * across threads (a sum of 64M is memory-bound either way) nor columns
 * (their partial sums are a row, not a chain).
 *
 * Float partial sums make the order of additions show in the result's
 * bits, where a double sum of a few floats is exact in any order: so a
 * program that reads its sizes at run time must add in the order of the one
 * compiled for its size (dynamic_test). The decision is the blocks' alone;
 * such a kernel is never left scalar when tiny (lower_plan_scalar: lanes,
 * not one running sum), and the renderers hide each chunk's end from the
 * compiler, so that a literal row length and a run-time one vectorise the
 * chunk's loop alike. */
static void plan_fsum(lower_plan *p, const lower_kernel *k, const lower_target *t) {
    if (t->gpu || k->kind != LOWER_REDUCE || p->split || p->columns)
        return;
    for (int i = 0; i < p->nblocks; i++)
        if (float_sum(k, &p->blocks[i]))
            p->fsum = PREFETCH_CHUNK;
}

static bool plan_kernel(lower_plan *p, const lower_kernel *k, const lower_target *t) {
    memset(p, 0, sizeof *p);
    if (!lower_kind_has_code(k->kind))
        return true;
    bool *live = calloc((size_t)(k->nins ? k->nins : 1), sizeof *live);
    if (!live)
        return false;
    bool ok = k->kind == LOWER_REDUCE    ? plan_phased(p, k, live)
              : k->kind == LOWER_SCATTER ? plan_scatter(p, k, live)
                                         : plan_flat(p, k, live);
    free(live);
    p->narrow = narrow_indices(k);
    plan_loops(p, k, t);
    if (!ok || (k->kind == LOWER_REDUCE && !plan_stash(p, k)))
        return false;
    plan_prefetch(p, k, t);
    plan_fsum(p, k, t);
    return true;
}

void lower_plans_free(lower_plan *plans, int n) {
    if (!plans)
        return;
    for (int i = 0; i < n; i++) {
        for (int b = 0; b < plans[i].nblocks; b++)
            free(plans[i].blocks[b].ins);
        free(plans[i].blocks);
    }
    free(plans);
}

lower_plan *lower_plan_program(const lower_program *p, const lower_target *t) {
    lower_plan *plans = calloc((size_t)(p->nkernels ? p->nkernels : 1), sizeof *plans);
    if (!plans)
        return NULL;
    for (int i = 0; i < p->nkernels; i++)
        if (!plan_kernel(&plans[i], &p->kernels[i], t)) {
            lower_plans_free(plans, p->nkernels);
            return NULL;
        }
    return plans;
}

/* Kernels of at most TINY_WORK elements of work (outputs times reduced
 * elements) run in well under a microsecond scalar or not, while compiling
 * their `omp simd` loops cost gcc 12% more time (1000 small reductions of
 * random inputs at one sync, each a kernel with the Philox generator
 * inlined: 0.59 -> 0.51 s of cc1 per 32 kernels; an MLP training step at
 * batch 128, whose loss and bias kernels are this small, measured level). */
enum { TINY_WORK = 4096 };

bool lower_plan_scalar(const lower_kernel *k, const lower_plan *plan) {
    return plan->block_threads == 0 && !plan->fsum &&
           (k->kind == LOWER_ELEMENTWISE || k->kind == LOWER_REDUCE) && k->nsizes == 0 &&
           k->numel >= 0 && k->rnumel >= 0 &&
           (double)k->numel * (double)(k->rnumel > 0 ? k->rnumel : 1) <= TINY_WORK;
}

static const char *const block_names[] = {
    [LOWER_BLOCK_OUTER] = "outer",
    [LOWER_BLOCK_REDUCE] = "reduce",
    [LOWER_BLOCK_STORE] = "store pass",
    [LOWER_BLOCK_SCATTER] = "scatter pass",
};
_Static_assert(sizeof block_names / sizeof *block_names == LOWER_BLOCK_SCATTER + 1,
               "a block kind without a name");

void lower_print_blocking(FILE *f, const lower_kernel *k, const lower_plan *p) {
    if (k->kind == LOWER_MATMUL) {
        const lower_mm_plan *mm = &p->mm;
        if (mm->tile) {
            fprintf(f, "  matmul: %s accumulators, %d x %d output tile per block, k steps of %d%s\n",
                    graph_dtype_name(mm->acc), mm->tile, mm->tile, mm->ktile,
                    mm->mma ? ", tensor cores" : "");
        } else {
            fprintf(f,
                    "  matmul: %s accumulators, register tile %d x %d vectors of %d, blocks "
                    "%lld x %lld over k steps of %lld, A %s",
                    graph_dtype_name(mm->acc), mm->mr, mm->nv, mm->lanes, (long long)mm->mc,
                    (long long)mm->nc, (long long)mm->kc, mm->a_direct ? "in place" : "packed");
            if (mm->pack_tr)
                fprintf(f, ", B packed through %d x %d register transposes", mm->pack_tr,
                        mm->pack_tr);
            fputc('\n', f);
        }
    }
    if (k->kind == LOWER_ATTENTION)
        fprintf(f, "  attention: blocks of %lld queries, tiles of %lld keys, register tiles of %d rows "
                   "by %d vectors\n", (long long)p->att.bq, (long long)p->att.bk, p->att.mr, p->att.nv);
}

void lower_print_plan(FILE *f, const lower_kernel *k, const lower_plan *p) {
    fprintf(f, "plan %s: grid %lld%s%s, %d-byte vectors, %s indices", k->name,
            (long long)p->grid, p->parallel ? ", parallel" : "", p->split ? ", rows split" : "",
            p->vector_bytes, p->narrow ? "int32" : "int64");
    if (p->prefetch)
        fprintf(f, ", the next row's pass %d prefetched during pass %d, %lld at a time",
                p->prefetch_from, p->prefetch_in, (long long)p->prefetch);
    if (p->fsum)
        fprintf(f, ", float sums in chunks of %lld", (long long)p->fsum);
    if (p->columns)
        fprintf(f, ", down columns in chunks of %lld, %d rows a pass", (long long)p->columns,
                p->column_step);
    if (p->rows)
        fprintf(f, " in rows of %lld", (long long)p->rows);
    if (lower_plan_scalar(k, p))
        fprintf(f, ", scalar");
    if (p->row_blocks)
        fprintf(f, ", %lld blocks per row, chunks of %lld", (long long)p->row_blocks,
                (long long)p->row_chunk);
    if (p->block_threads)
        fprintf(f, ", %d threads per block", p->block_threads);
    fprintf(f, "\n");
    lower_print_blocking(f, k, p);
    for (int b = 0; b < p->nblocks; b++) {
        const lower_block *x = &p->blocks[b];
        fprintf(f, "  %s", block_names[x->kind]);
        if (x->kind == LOWER_BLOCK_REDUCE)
            fprintf(f, " -> %%%d", x->reduce);
        if (x->stash >= 0)
            fprintf(f, x->kind == LOWER_BLOCK_STORE ? " (%%%d loaded from output 0)"
                                                    : " (%%%d stored into output 0)", x->stash);
        if (x->kind == LOWER_BLOCK_SCATTER) {
            const lower_scatter_store *st = &k->scatter[x->reduce];
            fprintf(f, " %lld elements, buf0[%%%d] = %%%d where %%%d", (long long)k->snumel, st->at,
                    st->value, st->valid);
        }
        fprintf(f, ":");
        for (int i = 0; i < x->n; i++)
            fprintf(f, " %%%d", x->ins[i]);
        fprintf(f, "\n");
    }
}
