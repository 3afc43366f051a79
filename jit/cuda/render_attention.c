/* render_attention.c — fused scaled dot-product attention (LOWER_ATTENTION)
 * as CUDA C: graph.h's GRAPH_ATTENTION, _DQ and _DKV, each one kernel that
 * never writes a score to global memory.
 *
 * Shapes, per batch matrix bt (the kernel's batch dims flattened; a source's
 * batch strides may be 0, a broadcast): q [NQ, DK], k [NK, DK], v [NK, DV],
 * and for the backward go [NQ, DV], lse [NQ, 1], delta [NQ, 1], each read
 * through its own offset, row and column strides. s = scale q k^T, masked
 * (-inf) where causal and key > query; P = e^(s - lse).
 *   forward: out [NQ, DV + 1] = (P v, lse), lse = log sum_j e^s over the
 *            unmasked keys, by online softmax: per row a running max m and
 *            sum l, the accumulator rescaled by e^(m_old - m_new) per tile.
 *   dq:      dS = P (go v^T - delta); out [NQ, DK] = scale dS k.
 *   dkv:     out [NK, DK + DV] = (scale dS^T q, P^T go).
 *
 * A thread block owns plan->att.bq queries of one batch matrix (forward,
 * dq) or plan->att.bk keys (dkv) and walks the other side (its "walked
 * rows": keys, or for dkv queries) in tiles; blocks loop over the units
 * grid-stride, since the planner caps the grid. Its owned rows are taken R
 * at a time (a pass) so that the accumulator fits in registers whatever the
 * widths are. For each tile of KT walked rows a pass:
 *   1. contracts: the scores (and for the backward dp = go v^T) of its R x
 *      KT pairs, each pair owned by one thread (NSC pairs per thread, in
 *      registers), over the width in chunks of DC columns staged in shared
 *      memory (sA: the owned rows' chunk, sB: the walked rows');
 *   2. turns them into weights in shared memory sW[R][KT] (forward: P after
 *      the running max is updated, one thread per row; dq and dkv: dS, and
 *      for dkv also P in sP), exactly 0 where masked or outside the sizes;
 *   3. accumulates sum_j W[r][j] X[j][c] into the accumulator, whose R x CG
 *      entries (a group of CG output columns) are spread over the threads,
 *      NA per thread: X's tile staged CC columns at a time in sC, and every
 *      entry's sum stops at the causal diagonal, so that a masked row of X
 *      (even one holding inf) contributes nothing.
 * Outputs wider than CG columns take several groups, each walking the other
 * side again (only at widths beyond the register budget). Every size is
 * chosen here from the dtype, the widths and the plan, so that shared
 * memory stays within ATT_SHARED bytes (below the 48 KB static limit) and
 * the registers within ATT_REGS per thread for each of the scores and the
 * accumulator, for any width.
 *
 * f16 and bf16: T, the type everything here computes and stages in, is
 * float (the target's type of a half dtype): sources widen to f32 as they
 * are staged into shared memory, the scores, the online softmax and the
 * accumulators are f32, and only the stores round, to the output's half
 * type, by the same helpers as every other kernel's. The lse column is part
 * of that output, so it is stored in the half type too (graph.h's
 * GRAPH_ATTENTION), and the backward reads it back widened.
 *
 * Infinities: masked scores are -inf and become weights only through
 * conditionals: e^(-inf - m) is never asked of a row whose max is still
 * -inf (its weights are 0 and its rescale 1), and e^(m_old - m_new) with
 * m_old = -inf is e^-inf = 0. e^x is lower's rule (the kernel's
 * instructions, UOP_ACC the argument) printed as NAME_exp. */
#include <stdio.h>
#include <string.h>

#include "jit/cstyle/cstyle.h"
#include "jit/cuda/cuda.h"

typedef cstyle_buf sbuf;

#define ATT_SHARED 40960 /* bytes of static shared memory at most */
#define ATT_REGS 32      /* 32-bit registers per thread for the scores (each set), and the accumulator */

/* The blocking of one kernel (see the top of the file). */
typedef struct att_blocking {
    int nt;            /* threads per block */
    int64_t own, walk; /* owned rows per block, the plan's walked tile */
    int64_t r, kt;     /* owned rows per pass, walked rows per tile */
    int64_t dc, cc;    /* contraction chunk, accumulator staging chunk (columns) */
    int64_t nsc;       /* pairs per thread */
    int64_t npc, nch;  /* accumulator entries per thread per chunk, chunks per group */
    int64_t ng;        /* groups of output columns */
    int64_t stage;     /* elements of the staging array */
} att_blocking;

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static bool is_fwd(const lower_kernel *k) { return k->att.op == GRAPH_ATTENTION; }
static bool is_dkv(const lower_kernel *k) { return k->att.op == GRAPH_ATTENTION_DKV; }

/* Accumulated (output) columns per owned row. */
static int64_t acc_width(const lower_kernel *k) {
    const lower_attention *a = &k->att;
    return is_fwd(k) ? a->dv : is_dkv(k) ? a->d + a->dv : a->d;
}

static att_blocking blocking(const lower_kernel *k, const lower_plan *plan) {
    const lower_attention *a = &k->att;
    bool fwd = is_fwd(k), dkv = is_dkv(k);
    int64_t tb = k->out->dtype == KILN_F64 ? 8 : 4; /* bytes of T (halves compute in float) */
    int64_t per = ATT_REGS * 4 / tb; /* values per thread */
    att_blocking z = {0};
    z.nt = plan->block_threads;
    z.own = dkv ? plan->att.bk : plan->att.bq;
    z.walk = dkv ? plan->att.bq : plan->att.bk;
    int64_t width = acc_width(k), cw = fwd ? a->d : max64(a->d, a->dv);
    /* rows per pass: the accumulator of R rows fits in per values a thread */
    int64_t r = 1;
    while (r * 2 * max64(width, 1) <= z.nt * per)
        r *= 2;
    r = min64(r, z.own);
    int64_t kt = min64(z.walk, max64(1, z.nt * per / r));
    int64_t dc = min64(32, max64(cw, 1)), cc = min64(64, max64(width, 1));
    /* weights (sW, and sP for dkv), row statistics, the walked rows' lse
     * and delta (dkv), and the staging area, which the contraction's sA and
     * sB and the accumulation's sC share */
    int64_t nw = dkv ? 2 : 1, nrow = fwd ? 3 : dkv ? 0 : 2, nwalk = dkv ? 2 : 0;
    for (;;) {
        int64_t stage = max64((r + kt) * (dc + 1), kt * cc);
        if (tb * (nw * r * (kt + 1) + nrow * r + nwalk * kt + stage) <= ATT_SHARED)
            break;
        if (dc > 16)
            dc = (dc + 1) / 2;
        else if (cc > 32)
            cc = (cc + 1) / 2;
        else if (kt > 32)
            kt = (kt + 1) / 2;
        else if (r > 16)
            r = (r + 1) / 2;
        else if (dc > 8)
            dc = (dc + 1) / 2;
        else if (cc > 8)
            cc = (cc + 1) / 2;
        else if (kt > 1)
            kt = (kt + 1) / 2;
        else if (r > 1)
            r = (r + 1) / 2;
        else if (dc > 1)
            dc = (dc + 1) / 2;
        else if (cc > 1)
            cc = (cc + 1) / 2;
        else
            break;
    }
    z.r = r;
    z.kt = kt;
    z.dc = dc;
    z.cc = cc;
    z.stage = max64((r + kt) * (dc + 1), kt * cc);
    z.nsc = cdiv(r * kt, z.nt);
    z.npc = cdiv(r * cc, z.nt);
    z.nch = max64(1, min64(cdiv(width, cc), per / z.npc));
    z.ng = max64(1, cdiv(width, z.nch * cc));
    return z;
}

static const char *ctype(kiln_dtype dt) { return jit_cuda_cstyle_target()->type[dt]; }

static const graph_node *buf_node(const lower_kernel *k, int buf) {
    return buf < k->nouts ? k->outs[buf] : k->inputs[buf - k->nouts];
}

/* Sources by position, and the suffix of their names in the code. */
enum { SQ, SK, SV, SGO, SLSE, SDEL };
static const char *const src_name[6] = {"q", "k", "v", "g", "l", "d"};

/* Element (row, col) of source x (col NULL: the one value of a row). */
static void load_src(sbuf *b, const lower_kernel *k, int x, const char *row, const char *col) {
    char idx[256], e[320];
    const char *n = src_name[x];
    if (col)
        snprintf(idx, sizeof idx, "o%s + (%s) * RS%s + (%s) * CS%s", n, row, n, col, n);
    else
        snprintf(idx, sizeof idx, "o%s + (%s) * RS%s", n, row, n);
    cstyle_load(jit_cuda_cstyle_target(), k->out->dtype, k->att.src[x].buf, idx, e, sizeof e);
    cstyle_put(b, "%s", e);
}

/* A loop filling shared tile dst[ROWS][...] with rows row0 + r (below
 * rowlim) and columns col0 + c (below collim) of source x, 0 elsewhere; with
 * x2 >= 0, the columns from DK on are source x2's, from its column 0 (dkv's
 * accumulated [q | go]). Consecutive threads take consecutive elements along
 * the source's contiguous axis, so that loads coalesce either way. */
static void stage(sbuf *b, const lower_kernel *k, const char *in, const char *dst, int x, int x2,
                  const char *rows, const char *cols, const char *row0, const char *rowlim,
                  const char *col0, const char *collim) {
    const lower_operand *o = &k->att.src[x];
    bool by_rows = x2 < 0 && (o->row_stride == 1 || o->row_stride == -1) && o->col_stride != 1 &&
                   o->col_stride != -1;
    cstyle_put(b, "%sfor (int e = tid; e < %s * %s; e += NT) {\n", in, rows, cols);
    if (by_rows)
        cstyle_put(b, "%s  const int r = e %% %s, c = e / %s;\n", in, rows, rows);
    else
        cstyle_put(b, "%s  const int r = e / %s, c = e %% %s;\n", in, cols, cols);
    cstyle_put(b, "%s  const kh_i64 row = %s + r, col = %s + c;\n", in, row0, col0);
    cstyle_put(b, "%s  %s[r][c] = row < %s && col < %s ? ", in, dst, rowlim, collim);
    if (x2 >= 0) {
        cstyle_put(b, "(col < DK ? ");
        load_src(b, k, x, "row", "col");
        cstyle_put(b, " : ");
        load_src(b, k, x2, "row", "col - DK");
        cstyle_put(b, ")");
    } else {
        load_src(b, k, x, "row", "col");
    }
    cstyle_put(b, " : (T)0;\n%s}\n", in);
}

/* The head of the loop over a thread's pairs (r, j) of the R x KT tile,
 * pair t being number t * NT + tid; the caller closes it with "}\n}\n". */
static void pairs_begin(sbuf *b, const char *in) {
    cstyle_put(b, "%s#pragma unroll\n", in);
    cstyle_put(b, "%sfor (int t = 0; t < NSC; t++) {\n", in);
    cstyle_put(b, "%s  const int u = t * NT + tid;\n", in);
    cstyle_put(b, "%s  if (u < R * KT) {\n", in);
    cstyle_put(b, "%s    const int r = u / KT, j = u %% KT;\n", in);
}

/* acc[t] (registers, one per pair) = the dot products of owned rows of
 * source xo with walked rows of xw over `width` columns. The pairs are the
 * inner loop, so that each step along the columns is NSC independent FMAs
 * (and a row of sA or sB that several of a thread's pairs share is read
 * once), and the code stays small enough to compile quickly. */
static void contract(sbuf *b, const lower_kernel *k, const char *acc, int xo, int xw,
                     const char *width) {
    const char *in = "        ";
    cstyle_put(b, "%sT %s[NSC];\n", in, acc);
    cstyle_put(b, "%s#pragma unroll\n%sfor (int t = 0; t < NSC; t++) %s[t] = 0;\n", in, in, acc);
    cstyle_put(b, "%sfor (kh_i64 d0 = 0; d0 < %s; d0 += DC) {\n", in, width);
    stage(b, k, "          ", "sA", xo, -1, "R", "DC", "p0", "pend", "d0", width);
    stage(b, k, "          ", "sB", xw, -1, "KT", "DC", "j0", "jend", "d0", width);
    cstyle_put(b, "          __syncthreads();\n");
    cstyle_put(b, "          #pragma unroll 4\n");
    cstyle_put(b, "          for (int c = 0; c < DC; c++) {\n");
    cstyle_put(b, "            #pragma unroll\n");
    cstyle_put(b, "            for (int t = 0; t < NSC; t++) {\n");
    cstyle_put(b, "              const int u = t * NT + tid;\n");
    cstyle_put(b, "              if (u < R * KT) %s[t] = kh_fma(sA[u / KT][c], sB[u %% KT][c], %s[t]);\n",
               acc, acc);
    cstyle_put(b, "            }\n          }\n");
    cstyle_put(b, "          __syncthreads();\n        }\n");
}

/* The head of the loop over a thread's accumulator entries: entry t is
 * element t % NPC * NT + tid of its chunk's (t / NPC) R x CC, owned row
 * r = u / CC, column c = u % CC of the chunk. in_chunk: only those of chunk
 * ch. The caller closes it with "}\n}\n". */
static void entries_begin(sbuf *b, const char *in, bool in_chunk) {
    cstyle_put(b, "%s#pragma unroll\n", in);
    cstyle_put(b, "%sfor (int t = 0; t < NA; t++) {\n", in);
    if (in_chunk)
        cstyle_put(b, "%s  if (t / NPC != ch) continue;\n", in);
    cstyle_put(b, "%s  const int u = t %% NPC * NT + tid;\n", in);
    cstyle_put(b, "%s  if (u < R * CC) {\n", in);
}

/* The walk's accumulation: for every chunk of the group's columns, the
 * walked tile's columns staged in sC, then each entry adds W[r][j] X[j][c]
 * over the tile's rows j, the entries the inner loop (as in contract).
 * Causal, an entry skips the masked rows of X: forward and dq, keys after
 * its query; dkv, queries before its key. The chunk loop unrolls (NCH is a
 * constant), so that the entries of other chunks fold away. */
static void accumulate(sbuf *b, const lower_kernel *k, bool causal) {
    bool fwd = is_fwd(k), dkv = is_dkv(k);
    if (fwd) {
        /* the rescale of what the rows held for their new max */
        entries_begin(b, "        ", false);
        cstyle_put(b, "            acc[t] *= sAl[u / CC];\n          }\n        }\n");
    }
    /* the tile's rows within the walk (causal, the walk already stops at
     * the pass's last query, or for dkv starts at its first key) */
    cstyle_put(b, "        const int jhi = jend - j0 < KT ? (int)(jend - j0) : KT;\n");
    cstyle_put(b, "        #pragma unroll\n");
    cstyle_put(b, "        for (int ch = 0; ch < NCH; ch++) {\n");
    cstyle_put(b, "          const kh_i64 c0 = g0 + (kh_i64)ch * CC;\n");
    if (fwd)
        stage(b, k, "          ", "sC", SV, -1, "KT", "CC", "j0", "jend", "c0", "DV");
    else if (dkv)
        stage(b, k, "          ", "sC", SQ, SGO, "KT", "CC", "j0", "jend", "c0", "W");
    else
        stage(b, k, "          ", "sC", SK, -1, "KT", "CC", "j0", "jend", "c0", "DK");
    cstyle_put(b, "          __syncthreads();\n");
    cstyle_put(b, "          #pragma unroll 2\n");
    cstyle_put(b, "          for (int j = 0; j < jhi; j++) {\n");
    entries_begin(b, "            ", true);
    const char *w = "sW";
    if (dkv) {
        cstyle_put(b, "                T (*const w)[KT + 1] = c0 + u %% CC < DK ? sW : sP;\n");
        w = "w";
    }
    const char *see = !causal ? "" : dkv ? "if (p0 + u / CC <= j0 + j) " : "if (j0 + j <= p0 + u / CC) ";
    cstyle_put(b, "                %sacc[t] = kh_fma(%s[u / CC][j], sC[j][u %% CC], acc[t]);\n", see, w);
    cstyle_put(b, "              }\n            }\n          }\n");
    cstyle_put(b, "          __syncthreads();\n        }\n");
}

static const char *const att_what[3] = {"forward", "dq", "dkv"};

/* Why k cannot be printed, or NULL. */
static const char *refusal(const lower_kernel *k, const lower_plan *plan) {
    const lower_attention *a = &k->att;
    kiln_dtype dt = k->out->dtype;
    if (!graph_dtype_is_float(dt))
        return "kiln: the CUDA renderer computes attention in float dtypes only";
    if (!graph_op_is_attention(a->op) || a->nsrc != (a->op == GRAPH_ATTENTION ? 3 : 6) ||
        k->nouts != 1 || a->joint || k->out->op != a->op)
        /* joint kernels and stores into a cat's regions are the CPU's alone
         * (LOWER_JOINT_ATTENTION_GRADS): here each output is row-major */
        return "kiln: the CUDA renderer was given a malformed attention kernel";
    for (int x = 0; x < a->nsrc; x++)
        if (buf_node(k, a->src[x].buf)->dtype != dt)
            return "kiln: the CUDA renderer's attention needs every source in the output's dtype";
    if (k->nsizes > 0)
        return "kiln: CUDA code reads no run-time sizes";
    if (plan->block_threads < 32 || plan->block_threads % 32 || plan->att.bq < 1 ||
        plan->att.bk < 1)
        return "kiln: the CUDA renderer was given an attention plan without blocks";
    return NULL;
}

void jit_cuda_render_attention_exp(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    const char *why = refusal(k, plan);
    if (why) {
        cstyle_refuse_buf(b, why);
        return;
    }
    const char *T = ctype(k->out->dtype);
    cstyle_put(b, "__device__ __forceinline__ %s %s_exp(%s dot) {\n", T, lower_kernel_symbol(k), T);
    for (int i = 0; i < plan->nblocks; i++) {
        const lower_block *blk = &plan->blocks[i];
        for (int j = 0; j < blk->n; j++) {
            char s[1280], msg[256];
            if (cstyle_ins(jit_cuda_cstyle_target(), k->ins, blk->ins[j], b->narrow, s, sizeof s,
                           msg, sizeof msg))
                cstyle_put(b, "  %s\n", s);
            else
                cstyle_refuse_buf(b, msg);
        }
    }
    cstyle_put(b, "  return v%d;\n}\n", k->results[0]);
}

void jit_cuda_render_attention(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    const char *why = refusal(k, plan);
    if (why) {
        cstyle_refuse_buf(b, why);
        return;
    }
    const lower_attention *a = &k->att;
    const cstyle_target *tg = jit_cuda_cstyle_target();
    kiln_dtype dt = k->out->dtype;
    bool fwd = is_fwd(k), dkv = is_dkv(k), causal = a->causal;
    const char *name = lower_kernel_symbol(k);
    att_blocking z = blocking(k, plan);
    char scale[64];
    cstyle_imm(tg, dt, (graph_scalar){.f = a->scale}, scale, sizeof scale);

    cstyle_put(b, "  /* attention %s%s: blocks of %lld %s, passes of %lld rows over tiles of %lld %s, "
                  "%lld output columns per pass */\n",
               att_what[fwd ? 0 : dkv ? 2 : 1], causal ? " (causal)" : "", (long long)z.own,
               dkv ? "keys" : "queries", (long long)z.r, (long long)z.kt, dkv ? "queries" : "keys",
               (long long)(z.nch * z.cc));
    cstyle_put(b, "  typedef %s T;\n", ctype(dt));
    cstyle_put(b, "  enum { NT = %d, OWN = %lld, R = %lld, KT = %lld, DC = %lld, CC = %lld, NSC = %lld,\n"
                  "         NPC = %lld, NCH = %lld, NA = NPC * NCH, CG = NCH * CC, NG = %lld, "
                  "STAGE = %lld };\n",
               z.nt, (long long)z.own, (long long)z.r, (long long)z.kt, (long long)z.dc,
               (long long)z.cc, (long long)z.nsc, (long long)z.npc, (long long)z.nch,
               (long long)z.ng, (long long)z.stage);
    cstyle_put(b, "  const kh_i64 NB = %s, NQ = %s, NK = %s, DK = %s, DV = %s;\n",
               cstyle_size_product(b, k, k->nbatch, k->batch), cstyle_size(b, k, &a->l),
               cstyle_size(b, k, &a->s), cstyle_size(b, k, &a->d), cstyle_size(b, k, &a->dv));
    if (dkv)
        cstyle_put(b, "  const kh_i64 W = DK + DV;\n");
    cstyle_put(b, "  const T scale = %s;\n", scale);
    if (fwd)
        cstyle_put(b, "  const T NEG = -(T)KH_INF;\n");
    for (int x = 0; x < a->nsrc; x++) {
        const lower_operand *o = &a->src[x];
        if (x == SLSE || x == SDEL)
            cstyle_put(b, "  const kh_i64 RS%s = %s;\n", src_name[x], cstyle_size(b, k, &o->row_stride));
        else
            cstyle_put(b, "  const kh_i64 RS%s = %s, CS%s = %s;\n", src_name[x],
                       cstyle_size(b, k, &o->row_stride), src_name[x],
                       cstyle_size(b, k, &o->col_stride));
    }
    /* shared memory */
    cstyle_put(b, "  __shared__ T stage[STAGE];\n");
    cstyle_put(b, "  __shared__ T sW[R][KT + 1];\n");
    if (dkv)
        cstyle_put(b, "  __shared__ T sP[R][KT + 1], sLse[KT], sDel[KT];\n");
    else if (fwd)
        cstyle_put(b, "  __shared__ T sM[R], sL[R], sAl[R];\n");
    else
        cstyle_put(b, "  __shared__ T sLse[R], sDel[R];\n");
    cstyle_put(b, "  T (*const sA)[DC + 1] = (T (*)[DC + 1])stage;\n");
    cstyle_put(b, "  T (*const sB)[DC + 1] = (T (*)[DC + 1])(stage + R * (DC + 1));\n");
    cstyle_put(b, "  T (*const sC)[CC] = (T (*)[CC])stage;\n");
    cstyle_put(b, "  const int tid = threadIdx.x;\n");

    /* the units: a block of owned rows of one batch matrix */
    cstyle_put(b, "  const kh_i64 NOWN = %s, NWALK = %s, NU = (NOWN + OWN - 1) / OWN;\n",
               dkv ? "NK" : "NQ", dkv ? "NQ" : "NK");
    cstyle_put(b, "  for (kh_i64 unit = blockIdx.x; unit < NB * NU; unit += gridDim.x) {\n");
    cstyle_put(b, "    const kh_i64 bt = unit / NU, u0 = unit %% NU * OWN;\n");
    cstyle_put(b, "    const kh_i64 uend = NOWN - u0 < OWN ? NOWN : u0 + OWN;\n");
    for (int x = 0; x < a->nsrc; x++) {
        char off[8];
        snprintf(off, sizeof off, "o%s", src_name[x]);
        cstyle_operand_offset(b, tg, "    ", off, k, &a->src[x]);
    }
    cstyle_put(b, "    for (kh_i64 p0 = u0; p0 < uend; p0 += R)\n");
    cstyle_put(b, "    for (int grp = 0; grp < NG; grp++) {\n");
    cstyle_put(b, "      const kh_i64 pend = uend - p0 < R ? uend : p0 + R, g0 = (kh_i64)grp * CG;\n");
    /* the walked range: causal forward and dq stop at the pass's last query,
     * causal dkv starts at the pass's first key */
    if (dkv)
        cstyle_put(b, "      const kh_i64 wbegin = %s, jend = NWALK;\n", causal ? "p0" : "0");
    else
        cstyle_put(b, "      const kh_i64 wbegin = 0, jend = %s;\n",
                   causal ? "pend < NWALK ? pend : NWALK" : "NWALK");
    cstyle_put(b, "      T acc[NA];\n");
    cstyle_put(b, "      #pragma unroll\n      for (int t = 0; t < NA; t++) acc[t] = 0;\n");
    if (fwd)
        cstyle_put(b, "      for (int r = tid; r < R; r += NT) { sM[r] = NEG; sL[r] = 0; }\n");
    else if (!dkv) {
        cstyle_put(b, "      for (int r = tid; r < R; r += NT) {\n");
        cstyle_put(b, "        const kh_i64 i = p0 + r;\n");
        cstyle_put(b, "        sLse[r] = i < pend ? ");
        load_src(b, k, SLSE, "i", NULL);
        cstyle_put(b, " : (T)0;\n        sDel[r] = i < pend ? ");
        load_src(b, k, SDEL, "i", NULL);
        cstyle_put(b, " : (T)0;\n      }\n");
    }
    cstyle_put(b, "      __syncthreads();\n");
    cstyle_put(b, "      for (kh_i64 j0 = wbegin; j0 < jend; j0 += KT) {\n");
    if (dkv) {
        cstyle_put(b, "        for (int j = tid; j < KT; j += NT) {\n");
        cstyle_put(b, "          const kh_i64 i = j0 + j;\n");
        cstyle_put(b, "          sLse[j] = i < jend ? ");
        load_src(b, k, SLSE, "i", NULL);
        cstyle_put(b, " : (T)0;\n          sDel[j] = i < jend ? ");
        load_src(b, k, SDEL, "i", NULL);
        cstyle_put(b, " : (T)0;\n        }\n        __syncthreads();\n");
    }
    /* 1. the pairs' dot products */
    if (dkv) {
        contract(b, k, "s", SK, SQ, "DK");
        contract(b, k, "dp", SV, SGO, "DV");
    } else {
        contract(b, k, "s", SQ, SK, "DK");
        if (!fwd)
            contract(b, k, "dp", SGO, SV, "DV");
    }
    /* 2. the weights */
    const char *in = "        ";
    char mask[160];
    if (dkv)
        snprintf(mask, sizeof mask, "p0 + r < pend && j0 + j < jend%s",
                 causal ? " && p0 + r <= j0 + j" : "");
    else
        snprintf(mask, sizeof mask, "p0 + r < pend && j0 + j < jend%s",
                 causal ? " && j0 + j <= p0 + r" : "");
    if (fwd) {
        /* scores, their rows' new max and the rescale of what came before,
         * then P, then the rows' sums */
        pairs_begin(b, in);
        cstyle_put(b, "            s[t] = %s ? scale * s[t] : NEG;\n", mask);
        cstyle_put(b, "            sW[r][j] = s[t];\n          }\n        }\n");
        cstyle_put(b, "        __syncthreads();\n");
        cstyle_put(b, "        for (int r = tid; r < R; r += NT) {\n");
        cstyle_put(b, "          const T mo = sM[r];\n          T mx = mo;\n");
        cstyle_put(b, "          for (int j = 0; j < KT; j++) mx = sW[r][j] > mx ? sW[r][j] : mx;\n");
        cstyle_put(b, "          sAl[r] = mx == NEG ? (T)1 : %s_exp(mo - mx);\n", name);
        cstyle_put(b, "          sM[r] = mx;\n        }\n        __syncthreads();\n");
        pairs_begin(b, in);
        cstyle_put(b, "            sW[r][j] = s[t] == NEG ? (T)0 : %s_exp(s[t] - sM[r]);\n", name);
        cstyle_put(b, "          }\n        }\n        __syncthreads();\n");
        /* read before the accumulation's first barrier, written again only
         * after its last */
        cstyle_put(b, "        for (int r = tid; r < R; r += NT) {\n");
        cstyle_put(b, "          T sum = 0;\n");
        cstyle_put(b, "          for (int j = 0; j < KT; j++) sum += sW[r][j];\n");
        cstyle_put(b, "          sL[r] = sL[r] * sAl[r] + sum;\n        }\n");
    } else {
        const char *lse = dkv ? "sLse[j]" : "sLse[r]", *del = dkv ? "sDel[j]" : "sDel[r]";
        pairs_begin(b, in);
        cstyle_put(b, "            const bool live = %s;\n", mask);
        cstyle_put(b, "            const T p = live ? %s_exp(scale * s[t] - %s) : (T)0;\n", name, lse);
        cstyle_put(b, "            sW[r][j] = live ? p * (dp[t] - %s) : (T)0;\n", del);
        if (dkv)
            cstyle_put(b, "            sP[r][j] = p;\n");
        cstyle_put(b, "          }\n        }\n        __syncthreads();\n");
    }
    /* 3. the accumulation */
    accumulate(b, k, causal);
    cstyle_put(b, "      }\n");

    /* the pass's rows of the output */
    const char *width = fwd ? "(DV + 1)" : dkv ? "W" : "DK";
    entries_begin(b, "      ", false);
    cstyle_put(b, "          const int r = u / CC;\n");
    cstyle_put(b, "          const kh_i64 row = p0 + r, col = g0 + (kh_i64)(t / NPC) * CC + u %% CC;\n");
    cstyle_put(b, "          if (row < pend && col < %s) {\n", fwd ? "DV" : dkv ? "W" : "DK");
    cstyle_put(b, "            const kh_i64 g = (bt * NOWN + row) * %s + col;\n", width);
    char val[64], e[96];
    if (fwd)
        snprintf(val, sizeof val, "sL[r] > 0 ? acc[t] / sL[r] : (T)0");
    else if (dkv)
        snprintf(val, sizeof val, "col < DK ? scale * acc[t] : acc[t]");
    else
        snprintf(val, sizeof val, "scale * acc[t]");
    cstyle_store(dt, val, e, sizeof e);
    cstyle_put(b, "            b0[g] = %s;\n          }\n        }\n      }\n", e);
    if (fwd) {
        cstyle_put(b, "      if (grp == 0)\n");
        cstyle_put(b, "        for (int r = tid; r < R; r += NT) {\n");
        cstyle_put(b, "          const kh_i64 row = p0 + r;\n");
        cstyle_put(b, "          if (row < pend) b0[(bt * NQ + row) * (DV + 1) + DV] = ");
        snprintf(val, sizeof val, "sL[r] > 0 ? sM[r] + %s(sL[r]) : NEG",
                 dt == KILN_F64 ? "log" : "logf");
        cstyle_store(dt, val, e, sizeof e);
        cstyle_put(b, "%s;\n        }\n", e);
    }
    cstyle_put(b, "      __syncthreads();\n    }\n  }\n}\n\n");
}
