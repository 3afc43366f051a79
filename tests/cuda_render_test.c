/* cuda_render_test.c — the CUDA target without a GPU: the f16/bf16 storage
 * conversions of generated code (expanded here as host C from the same
 * macro) against graph/dtype.c on every bit pattern; known programs compile
 * through NVRTC with no warning; a kernel with a bad construct, and a source
 * with only a warning, are reported as compile failures carrying the log;
 * the rendered source names every kernel. Tests that need NVRTC are skipped
 * where it is not installed. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "jit/cuda/cuda.h"
#include "jit/cuda/half.h"
#include "lower/lower.h"

#include "graph_util.h"

typedef uint16_t kh_u16;
typedef uint32_t kh_u32;
typedef int32_t kh_i32;

static kh_u32 kh_fbits(float f) {
    kh_u32 u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float kh_bitsf(kh_u32 u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

JIT_CUDA_HALF_CODE(static)

Test(cuda_half, f16_to_f32_every_pattern) {
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t got = kh_fbits(kh_h2f((kh_u16)h));
        uint32_t want = kh_fbits(graph_f16_to_f32((uint16_t)h));
        cr_assert_eq(got, want, "f16 0x%04x: 0x%08x, want 0x%08x", h, got, want);
    }
}

Test(cuda_half, bf16_to_f32_every_pattern) {
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t got = kh_fbits(kh_b2f((kh_u16)h));
        uint32_t want = kh_fbits(graph_bf16_to_f32((uint16_t)h));
        cr_assert_eq(got, want, "bf16 0x%04x: 0x%08x, want 0x%08x", h, got, want);
    }
}

/* Every half pattern back from float, and each float between neighbouring
 * half values (the ties and the values just around them), and random float
 * patterns of every exponent. */
static void check_f32_to_halves(float f) {
    cr_assert_eq(kh_f2h(f), graph_f32_to_f16(f), "f32 0x%08x to f16: 0x%04x, want 0x%04x",
                 kh_fbits(f), kh_f2h(f), graph_f32_to_f16(f));
    cr_assert_eq(kh_f2b(f), graph_f32_to_bf16(f), "f32 0x%08x to bf16: 0x%04x, want 0x%04x",
                 kh_fbits(f), kh_f2b(f), graph_f32_to_bf16(f));
}

Test(cuda_half, f32_to_halves) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = graph_f16_to_f32((uint16_t)h), b = graph_bf16_to_f32((uint16_t)h);
        check_f32_to_halves(f);
        check_f32_to_halves(b);
        if (isfinite(f) && h != 0x7bff && h != 0xfbff) {
            float next = graph_f16_to_f32((uint16_t)(h + 1));
            if (isfinite(next)) {
                float mid = (f + next) / 2;
                check_f32_to_halves(mid);
                check_f32_to_halves(nextafterf(mid, INFINITY));
                check_f32_to_halves(nextafterf(mid, -INFINITY));
            }
        }
        uint32_t bu = kh_fbits(b);
        for (uint32_t low = 0x7fff; low <= 0x8001; low++)
            check_f32_to_halves(kh_bitsf(bu | low));
    }
    uint64_t s = 0x243F6A8885A308D3ull;
    for (int i = 0; i < 1 << 20; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        check_f32_to_halves(kh_bitsf((kh_u32)(s >> 16)));
    }
}

/* ---- programs -------------------------------------------------------------- */

static bool have_nvrtc(void) {
    char msg[512];
    if (jit_cuda_nvrtc_available(msg, sizeof msg))
        return true;
    cr_log_warn("%s", msg);
    return false;
}

static graph_ctx *g;

static void setup(void) { g = graph_ctx_new(); }

static void teardown(void) {
    cr_assert_eq(graph_ctx_live_nodes(g), 0, "nodes leaked");
    graph_ctx_free(g);
}

static graph_node *leaf(kiln_dtype dt, int ndim, const int64_t *shape) {
    return tu_leaf(g, dt, ndim, shape);
}

/* Takes the reference to target; returns its program. */
static lower_program *schedule(graph_node *target) {
    cr_assert(target);
    lower_program *p = lower_schedule(1, &target, true);
    graph_unref(target);
    cr_assert(p);
    return p;
}

static void assert_compiles(lower_program *p, const char *what) {
    char msg[16384];
    lower_plan *plans = lower_plan_program(p, jit_cuda_target());
    cr_assert(plans);
    char *src = NULL;
    cr_assert_eq(jit_cuda_render(p, plans, &src, msg, sizeof msg), KILN_OK, "%s: %s", what, msg);
    /* A real compile: jit_cuda_check_program may answer from the disk cache. */
    cr_assert_eq(jit_cuda_compile(src, 90, true, NULL, msg, sizeof msg), KILN_OK, "%s: %s", what,
                 msg);
    cr_assert_eq(jit_cuda_check_program(p, msg, sizeof msg), KILN_OK, "%s: %s", what, msg);
    for (int i = 0; i < p->nkernels; i++) {
        if (!lower_kind_has_code(p->kernels[i].kind))
            continue;
        char decl[160];
        snprintf(decl, sizeof decl, ") %s(", p->kernels[i].name);
        cr_assert(strstr(src, decl), "%s: kernel %s not rendered", what, p->kernels[i].name);
        jit_cuda_dims d = jit_cuda_launch_dims(&plans[i]);
        cr_assert(d.block >= 32 && d.block % 32 == 0 && d.block <= 1024);
        cr_assert(p->kernels[i].numel == 0 || d.grid > 0);
    }
    free(src);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
}

static graph_node *binary(graph_op op, graph_node *a, graph_node *b) {
    graph_node *r = graph_binary(op, a, b);
    graph_unref(a);
    graph_unref(b);
    return r;
}

static graph_node *unary(graph_op op, graph_node *a) {
    graph_node *r = graph_unary(op, a);
    graph_unref(a);
    return r;
}

static graph_node *reduce(graph_op op, graph_node *a, uint32_t axes, kiln_dtype dt) {
    graph_node *r = graph_reduce(op, a, axes, dt);
    graph_unref(a);
    return r;
}

static graph_node *gather(graph_node *a, int axis, graph_node *index) {
    graph_node *r = graph_gather(a, axis, index);
    graph_unref(a);
    graph_unref(index);
    return r;
}

static graph_node *scatter(graph_node *t, int axis, graph_node *index, graph_node *src,
                           int reduce, bool include_self) {
    graph_node *r = graph_scatter(t, axis, index, src, reduce, include_self);
    graph_unref(t);
    graph_unref(index);
    graph_unref(src);
    return r;
}

static graph_node *expand(graph_node *a, const int64_t *shape) {
    graph_node *r = graph_expand(a, shape);
    graph_unref(a);
    return r;
}

TestSuite(cuda_program, .init = setup, .fini = teardown);

Test(cuda_program, known_programs_compile) {
    if (!have_nvrtc())
        cr_skip_test("NVRTC is not installed");
    int64_t s[2] = {37, 129}, row[2] = {1, 129};
    kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_I64, KILN_U8};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        kiln_dtype dt = dts[i];
        graph_node *x = leaf(dt, 2, s), *y = leaf(dt, 2, row);
        assert_compiles(schedule(binary(GRAPH_DIV, binary(GRAPH_MAXIMUM, graph_ref(x),
                                                          expand(graph_ref(y), s)),
                                        graph_ref(x))),
                        "elementwise");
        assert_compiles(schedule(reduce(GRAPH_ARGMIN, graph_ref(x), 1, KILN_I64)), "argmin");
        assert_compiles(schedule(reduce(GRAPH_RMAX, graph_ref(x), 2, dt)), "max");
        assert_compiles(schedule(reduce(GRAPH_SUM, graph_ref(x), 3, dt)), "sum");
        graph_unref(x);
        graph_unref(y);
    }
    graph_node *x = leaf(KILN_F32, 2, s);
    graph_node *m = expand(reduce(GRAPH_RMAX, graph_ref(x), 2, KILN_F32), s);
    graph_node *e = unary(GRAPH_EXP, binary(GRAPH_SUB, x, m));
    graph_node *sum = expand(reduce(GRAPH_SUM, graph_ref(e), 2, KILN_F32), s);
    assert_compiles(schedule(binary(GRAPH_DIV, e, sum)), "softmax");
    int64_t sb[2] = {129, 20}, so[2] = {37, 20}, bias[2] = {1, 20};
    graph_node *a = leaf(KILN_F16, 2, s), *b = leaf(KILN_F16, 2, sb);
    graph_node *mm = graph_matmul(a, b);
    graph_unref(a);
    graph_unref(b);
    assert_compiles(
        schedule(unary(GRAPH_RELU, binary(GRAPH_ADD, mm, expand(leaf(KILN_F16, 2, bias), so)))),
        "matmul with epilogue");
    assert_compiles(schedule(graph_rand(g, GRAPH_RANDN, KILN_BF16, 2, s, 7)), "randn");
    /* gathers: an embedding's rows by i64 indices broadcast over D, and an
     * f16 gather by i32 and u8 indices computed in the kernel, then exp'd */
    int64_t table[2] = {50257, 64}, tok[2] = {9, 1}, rows[2] = {9, 64};
    assert_compiles(
        schedule(gather(leaf(KILN_F32, 2, table), 0, expand(leaf(KILN_I64, 2, tok), rows))),
        "embedding gather");
    kiln_dtype its[2] = {KILN_I32, KILN_U8};
    for (int i = 0; i < 2; i++) {
        int64_t is[2] = {37, 40};
        graph_node *idx = binary(GRAPH_ADD, leaf(its[i], 2, is),
                                 graph_full(g, its[i], 2, is, (graph_scalar){.i = 3}));
        assert_compiles(schedule(unary(GRAPH_EXP, gather(leaf(KILN_F16, 2, s), 1, idx))),
                        "gather with work around it");
    }
    /* scatters: an embedding's table gradient (zeros, rows by broadcast
     * indices), and every combination with and without include_self in a
     * float, a half and an integer dtype, t computed in the kernel */
    assert_compiles(schedule(scatter(graph_full(g, KILN_F32, 2, table, (graph_scalar){.f = 0}), 0,
                                     expand(leaf(KILN_I64, 2, tok), rows),
                                     leaf(KILN_F32, 2, rows), KILN_SCATTER_SUM, true)),
                    "embedding gradient scatter");
    kiln_dtype sdts[3] = {KILN_F32, KILN_F16, KILN_I32};
    int64_t ts[2] = {6, 50}, is[2] = {6, 70};
    for (int d = 0; d < 3; d++)
        for (int r = GRAPH_SCATTER_ASSIGN; r <= KILN_SCATTER_AMIN; r++)
            for (int self = 0; self < 2; self++) {
                graph_node *t = unary(GRAPH_ABS, leaf(sdts[d], 2, ts));
                assert_compiles(schedule(scatter(t, 1, leaf(KILN_U8, 2, is), leaf(sdts[d], 2, is),
                                                 r, self)),
                                "scatter");
            }
}

/* Points every load of p's last kernel at a buffer it does not have (b7),
 * which the CUDA compiler refuses. */
static void tamper_loads(lower_program *p) {
    lower_kernel *k = &p->kernels[p->nkernels - 1];
    bool tampered = false;
    for (int i = 0; i < k->nins; i++)
        if (k->ins[i].op == UOP_LOAD) {
            k->ins[i].buf = 7;
            tampered = true;
        }
    cr_assert(tampered);
}

/* A load from a buffer the kernel does not have: the compiler's error comes
 * back as a compile failure with its log. */
Test(cuda_program, bad_construct_is_a_compile_error) {
    if (!have_nvrtc())
        cr_skip_test("NVRTC is not installed");
    int64_t s[1] = {100};
    lower_program *p = schedule(unary(GRAPH_EXP, leaf(KILN_F32, 1, s)));
    tamper_loads(p);
    char msg[16384];
    cr_assert_eq(jit_cuda_check_program(p, msg, sizeof msg), KILN_ERR_COMPILE);
    cr_assert(strstr(msg, "error"), "no log in: %s", msg);
    cr_assert(strstr(msg, "b7"), "the log does not name the construct: %s", msg);
    lower_program_free(p);
}

Test(cuda_program, warnings_are_errors) {
    if (!have_nvrtc())
        cr_skip_test("NVRTC is not installed");
    char msg[8192];
    const char *clean = "extern \"C\" __global__ void f(float *o) { o[threadIdx.x] = 1.0f; }\n";
    jit_cuda_binary bin;
    cr_assert_eq(jit_cuda_compile(clean, 90, true, &bin, msg, sizeof msg), KILN_OK, "%s", msg);
    cr_assert(bin.ptx && strstr(bin.ptx, ".entry f"), "no PTX for f");
    cr_assert(bin.cubin && bin.cubin_size > 0);
    jit_cuda_binary_free(&bin);
    cr_assert_eq(jit_cuda_compile(clean, 80, false, &bin, msg, sizeof msg), KILN_OK, "%s", msg);
    cr_assert(bin.ptx && strstr(bin.ptx, ".target sm_80") && !bin.cubin);
    jit_cuda_binary_free(&bin);
    const char *unused =
        "extern \"C\" __global__ void f(float *o) { int unused; o[threadIdx.x] = 1.0f; }\n";
    cr_assert_eq(jit_cuda_compile(unused, 90, true, &bin, msg, sizeof msg), KILN_ERR_COMPILE);
    cr_assert(strstr(msg, "warning"), "no warning in: %s", msg);
    cr_assert(!bin.ptx && !bin.cubin && !bin.log);
}

/* ---- fused attention ------------------------------------------------------- */

static graph_node *permute(graph_node *a, const int *perm) {
    graph_node *r = graph_permute(a, perm);
    graph_unref(a);
    return r;
}

/* graph_attention over srcs (their references taken). */
static graph_node *attention(graph_op op, int nsrc, graph_node **srcs, double scale,
                             bool causal) {
    graph_node *r = graph_attention(op, nsrc, srcs, scale, causal);
    for (int i = 0; i < nsrc; i++)
        graph_unref(srcs[i]);
    return r;
}

/* A program holding a LOWER_ATTENTION kernel of op: its source names the
 * kernel and the e^x function its loops call, and the whole compiles. */
static void assert_attention_compiles(lower_program *p, graph_op op, const char *what) {
    const lower_kernel *att = NULL;
    for (int i = 0; i < p->nkernels; i++)
        if (p->kernels[i].kind == LOWER_ATTENTION)
            att = &p->kernels[i];
    cr_assert(att, "%s: no attention kernel", what);
    cr_assert_eq(att->att.op, op, "%s", what);
    char msg[16384];
    lower_plan *plans = lower_plan_program(p, jit_cuda_target());
    cr_assert(plans);
    char *src = NULL;
    cr_assert_eq(jit_cuda_render(p, plans, &src, msg, sizeof msg), KILN_OK, "%s: %s", what, msg);
    char want[160];
    snprintf(want, sizeof want, ") %s(", att->name);
    cr_assert(strstr(src, want), "%s: kernel %s not rendered", what, att->name);
    snprintf(want, sizeof want, "%s_exp(", lower_kernel_symbol(att));
    cr_assert(strstr(src, want), "%s: no %s in the source", what, want);
    free(src);
    lower_plans_free(plans, p->nkernels);
    assert_compiles(p, what);
}

/* q [.., L, D], k [.., S, D], v [.., S, DV] of dt (leaves), and for the
 * backward go, lse and delta: op's node, scheduled. */
static void attention_case(graph_op op, kiln_dtype dt, int nd, const int64_t *batch, int64_t l,
                           int64_t s, int64_t d, int64_t dv, bool causal, const char *what) {
    int64_t sq[6], sk[6], sv[6], sg[6], sr[6];
    for (int i = 0; i < nd - 2; i++)
        sq[i] = sk[i] = sv[i] = sg[i] = sr[i] = batch[i];
    sq[nd - 2] = sg[nd - 2] = sr[nd - 2] = l;
    sk[nd - 2] = sv[nd - 2] = s;
    sq[nd - 1] = sk[nd - 1] = d;
    sv[nd - 1] = sg[nd - 1] = dv;
    sr[nd - 1] = 1;
    graph_node *srcs[6] = {leaf(dt, nd, sq), leaf(dt, nd, sk), leaf(dt, nd, sv),
                           leaf(dt, nd, sg), leaf(dt, nd, sr), leaf(dt, nd, sr)};
    int n = op == GRAPH_ATTENTION ? 3 : 6;
    for (int i = n; i < 6; i++)
        graph_unref(srcs[i]);
    assert_attention_compiles(schedule(attention(op, n, srcs, 1 / sqrt((double)d), causal)), op,
                              what);
}

static const graph_op att_ops[3] = {GRAPH_ATTENTION, GRAPH_ATTENTION_DQ, GRAPH_ATTENTION_DKV};

Test(cuda_program, attention_compiles) {
    if (!have_nvrtc())
        cr_skip_test("NVRTC is not installed");
    const int64_t batch[2] = {2, 3};
    kiln_dtype dts[2] = {KILN_F32, KILN_F64};
    for (int t = 0; t < 2; t++)
        for (int causal = 0; causal < 2; causal++)
            for (int o = 0; o < 3; o++) {
                /* sizes off every tile: 17 queries, 33 keys, widths 5 and 7 */
                attention_case(att_ops[o], dts[t], 4, batch, 17, 33, 5, 7, causal, "attention");
                /* more queries than keys, several blocks of each, head width 64 */
                attention_case(att_ops[o], dts[t], 3, batch, 200, 70, 64, 64, causal,
                               "attention 200x70x64");
            }
    /* wide heads: the accumulator in several groups, D and DV apart */
    for (int o = 0; o < 3; o++) {
        attention_case(att_ops[o], KILN_F32, 3, batch, 40, 50, 1024, 1024, true, "D = DV = 1024");
        attention_case(att_ops[o], KILN_F64, 3, batch, 40, 50, 512, 1024, false,
                       "D 512, DV 1024 f64");
        attention_case(att_ops[o], KILN_F32, 2, batch, 1, 1, 1, 2000, false, "one query, DV 2000");
    }
}

/* Sources as views: k and v broadcast over a batch dim (stride 0), q a
 * permutation of [B, L, H, D] and v's rows strided (its transpose read). */
Test(cuda_program, attention_views_compile) {
    if (!have_nvrtc())
        cr_skip_test("NVRTC is not installed");
    for (int o = 0; o < 3; o++)
        for (int t = 0; t < 2; t++) {
            kiln_dtype dt = t ? KILN_F64 : KILN_F32;
            int64_t sqb[4] = {2, 17, 3, 5}, skb[4] = {2, 1, 33, 5}, svb[4] = {2, 1, 7, 33};
            int64_t sk[4] = {2, 3, 33, 5}, sv[4] = {2, 3, 33, 7};
            int64_t sg[4] = {2, 3, 17, 7}, sr[4] = {2, 3, 17, 1};
            const int perm[4] = {0, 2, 1, 3}, tr[4] = {0, 1, 3, 2};
            graph_node *srcs[6] = {permute(leaf(dt, 4, sqb), perm), expand(leaf(dt, 4, skb), sk),
                                   expand(permute(leaf(dt, 4, svb), tr), sv), leaf(dt, 4, sg),
                                   leaf(dt, 4, sr), leaf(dt, 4, sr)};
            int n = att_ops[o] == GRAPH_ATTENTION ? 3 : 6;
            for (int i = n; i < 6; i++)
                graph_unref(srcs[i]);
            assert_attention_compiles(schedule(attention(att_ops[o], n, srcs, 0.125, o == 1)),
                                      att_ops[o], "attention over views");
        }
}

/* Products of f16 and bf16 operands go through the tensor cores (mma.sync
 * m16n8k16) on a target that has them, f32 ones through TF32 (m16n8k8) only
 * where the user allowed it, and the FMA kernel otherwise; each with an
 * epilogue, odd sizes (tails in every direction) and a transposed operand,
 * compiled for sm_90. */
static void assert_product_uses(kiln_dtype dt, const lower_target *t, const char *want,
                                const char *not_want) {
    int64_t sa[3] = {2, 37, 70}, sbt[3] = {2, 45, 70}, so[3] = {2, 37, 45}, bias[3] = {1, 1, 45};
    graph_node *a = leaf(dt, 3, sa), *bt = leaf(dt, 3, sbt);
    const int perm[3] = {0, 2, 1};
    graph_node *b = graph_permute(bt, perm);
    graph_unref(bt);
    graph_node *mm = graph_matmul(a, b);
    graph_unref(a);
    graph_unref(b);
    lower_program *p =
        schedule(unary(GRAPH_RELU, binary(GRAPH_ADD, mm, expand(leaf(dt, 3, bias), so))));
    lower_plan *plans = lower_plan_program(p, t);
    cr_assert(plans);
    char msg[4096], *src = NULL;
    cr_assert_eq(jit_cuda_render(p, plans, &src, msg, sizeof msg), KILN_OK, "%s", msg);
    cr_assert(strstr(src, want), "%s product: no %s in\n%s", kiln_dtype_name(dt), want, src);
    cr_assert(!not_want || !strstr(src, not_want), "%s product: %s", kiln_dtype_name(dt), not_want);
    cr_assert_eq(jit_cuda_compile(src, 90, true, NULL, msg, sizeof msg), KILN_OK, "%s", msg);
    free(src);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
}

Test(cuda_program, tensor_core_products_compile) {
    if (!have_nvrtc())
        cr_skip_test("NVRTC is not installed");
    lower_target t = *jit_cuda_target(), old = t, tf32 = t;
    old.mma = false;
    tf32.tf32 = true;
    assert_product_uses(KILN_F16, &t, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", NULL);
    assert_product_uses(KILN_BF16, &t, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", NULL);
    assert_product_uses(KILN_F32, &t, "kh_fma(", "mma.sync");
    assert_product_uses(KILN_F32, &tf32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", NULL);
    assert_product_uses(KILN_F16, &old, "kh_fma(", "mma.sync");
}

/* Attention of f16 and bf16 sources: staged and computed in float, each
 * output element (and the forward's lse column) rounded to the half type
 * by the storage helpers; forward, dq and dkv compile for sm_90, causal or
 * not, over sizes off every tile and over views. */
static void assert_half_attention_source(kiln_dtype dt, graph_op op) {
    int64_t s[3] = {2, 17, 5}, sv[3] = {2, 17, 7}, sr[3] = {2, 17, 1};
    graph_node *srcs[6] = {leaf(dt, 3, s), leaf(dt, 3, s), leaf(dt, 3, sv),
                           leaf(dt, 3, sv), leaf(dt, 3, sr), leaf(dt, 3, sr)};
    int n = op == GRAPH_ATTENTION ? 3 : 6;
    for (int i = n; i < 6; i++)
        graph_unref(srcs[i]);
    lower_program *p = schedule(attention(op, n, srcs, 0.5, false));
    /* e^x in f32, not rounded to the half type on the way */
    for (int i = 0; i < p->nkernels; i++)
        if (p->kernels[i].kind == LOWER_ATTENTION)
            for (int j = 0; j < p->kernels[i].nins; j++)
                cr_assert(p->kernels[i].ins[j].dt != dt, "%s %s: instruction %d in %s",
                          kiln_dtype_name(dt), graph_op_name(op), j, kiln_dtype_name(dt));
    lower_plan *plans = lower_plan_program(p, jit_cuda_target());
    cr_assert(plans);
    char msg[4096], *src = NULL;
    cr_assert_eq(jit_cuda_render(p, plans, &src, msg, sizeof msg), KILN_OK, "%s", msg);
    bool f16 = dt == KILN_F16;
    const char *want[] = {"typedef float T;", f16 ? "= kh_f2h(" : "= kh_f2b(",
                          f16 ? "kh_h2f(b" : "kh_b2f(b", op == GRAPH_ATTENTION ? "logf(" : "sDel["};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(src, want[i]), "%s %s: no '%s' in\n%s", kiln_dtype_name(dt),
                  graph_op_name(op), want[i], src);
    free(src);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
}

Test(cuda_program, half_attention_compiles) {
    if (!have_nvrtc())
        cr_skip_test("NVRTC is not installed");
    const int64_t batch[2] = {2, 3};
    const kiln_dtype dts[2] = {KILN_F16, KILN_BF16};
    for (int t = 0; t < 2; t++)
        for (int o = 0; o < 3; o++) {
            assert_half_attention_source(dts[t], att_ops[o]);
            attention_case(att_ops[o], dts[t], 4, batch, 17, 33, 5, 7, o != 1, "half attention");
            attention_case(att_ops[o], dts[t], 3, batch, 200, 70, 64, 64, o == 1,
                           "half attention 200x70x64");
        }
    /* views: k broadcast over a batch dim, q permuted, v's rows strided */
    for (int o = 0; o < 3; o++) {
        kiln_dtype dt = dts[o % 2];
        int64_t sqb[4] = {2, 17, 3, 5}, skb[4] = {2, 1, 33, 5}, svb[4] = {2, 3, 7, 33};
        int64_t sk[4] = {2, 3, 33, 5}, sg[4] = {2, 3, 17, 7}, sr[4] = {2, 3, 17, 1};
        const int perm[4] = {0, 2, 1, 3}, tr[4] = {0, 1, 3, 2};
        graph_node *srcs[6] = {permute(leaf(dt, 4, sqb), perm), expand(leaf(dt, 4, skb), sk),
                               permute(leaf(dt, 4, svb), tr), leaf(dt, 4, sg), leaf(dt, 4, sr),
                               leaf(dt, 4, sr)};
        int n = att_ops[o] == GRAPH_ATTENTION ? 3 : 6;
        for (int i = n; i < 6; i++)
            graph_unref(srcs[i]);
        assert_attention_compiles(schedule(attention(att_ops[o], n, srcs, 0.125, o == 2)),
                                  att_ops[o], "half attention over views");
    }
}

/* ---- reductions split across blocks ------------------------------------------ */

/* What a CPU planner is told (the plan there must not change). */
static const lower_target cpu_target = {.name = "cpu", .vector_bytes = 32};

static bool plan_text_has(const lower_kernel *k, const lower_plan *plan, const char *want) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert(f);
    lower_print_plan(f, k, plan);
    fclose(f);
    bool has = strstr(text, want) != NULL;
    free(text);
    return has;
}

/* Every reduction kernel of p is split across blocks on the GPU, or none is
 * (want_split): its plan (a grid of numel x row_blocks, chunks that are a
 * multiple of the block and cover the row with none empty, said in the
 * plan's text), its source (the module's count and partial arrays, the
 * count taken and cleared), and the CPU's plan of the same kernel, which
 * knows nothing of it. Then the program compiles through NVRTC, warnings
 * failing it: that compile is of the split code, never of the plain row
 * loop instead. Takes p. */
static void assert_split(lower_program *p, bool want_split, const char *what) {
    lower_plan *plans = lower_plan_program(p, jit_cuda_target());
    lower_plan *cpu = lower_plan_program(p, &cpu_target);
    cr_assert(plans && cpu);
    char msg[16384], *src = NULL;
    cr_assert_eq(jit_cuda_render(p, plans, &src, msg, sizeof msg), KILN_OK, "%s: %s", what, msg);
    int reductions = 0;
    for (int i = 0; i < p->nkernels; i++) {
        const lower_kernel *k = &p->kernels[i];
        const lower_plan *pl = &plans[i];
        cr_assert_eq(cpu[i].row_blocks, 0, "%s: a CPU plan split across blocks", what);
        cr_assert(!plan_text_has(k, &cpu[i], "blocks per row"), "%s", what);
        if (k->kind != LOWER_REDUCE)
            continue;
        reductions++;
        char count[160], clear[160];
        snprintf(count, sizeof count, "atomicAdd(&kh_n_%s[g], 1u)", k->name);
        snprintf(clear, sizeof clear, "kh_n_%s[g] = 0;", k->name);
        if (!want_split) {
            cr_assert(!pl->split && pl->row_blocks == 0 && !strstr(src, count),
                      "%s: %s split across blocks", what, k->name);
            continue;
        }
        cr_assert(pl->split && pl->row_blocks >= 2, "%s: %s (%lld rows of %lld) not split", what,
                  k->name, (long long)k->numel, (long long)k->rnumel);
        cr_assert_eq(pl->grid, k->numel * pl->row_blocks, "%s", what);
        cr_assert(pl->row_chunk % pl->block_threads == 0, "%s: chunk %lld", what,
                  (long long)pl->row_chunk);
        cr_assert((pl->row_blocks - 1) * pl->row_chunk < k->rnumel &&
                      k->rnumel <= pl->row_blocks * pl->row_chunk,
                  "%s: %lld chunks of %lld for %lld elements", what, (long long)pl->row_blocks,
                  (long long)pl->row_chunk, (long long)k->rnumel);
        cr_assert(plan_text_has(k, pl, "blocks per row"), "%s: the plan's text omits the split",
                  what);
        cr_assert(strstr(src, count) && strstr(src, clear), "%s: %s:\n%s", what, k->name, src);
        char decl[160];
        snprintf(decl, sizeof decl, "__device__ kh_u32 kh_n_%s[%lld];", k->name,
                 (long long)k->numel);
        cr_assert(strstr(src, decl), "%s: no %s in\n%s", what, decl, src);
        jit_cuda_dims d = jit_cuda_launch_dims(pl);
        cr_assert_eq(d.grid, (unsigned)pl->grid, "%s", what);
    }
    cr_assert(reductions > 0, "%s: no reduction kernel", what);
    free(src);
    lower_plans_free(plans, p->nkernels);
    lower_plans_free(cpu, p->nkernels);
    assert_compiles(p, what);
}

/* n / the reduction's size, after it: a mean's post-reduction op. */
static graph_node *mean_of(graph_node *x, uint32_t axes, int64_t n) {
    graph_node *s = reduce(GRAPH_SUM, x, axes, KILN_F32);
    graph_node *c = graph_full(g, KILN_F32, s->ndim, s->shape, (graph_scalar){.f = (double)n});
    return binary(GRAPH_DIV, s, c);
}

Test(cuda_program, few_long_rows_split_across_blocks) {
    if (!have_nvrtc())
        cr_skip_test("NVRTC is not installed");
    int64_t flat[1] = {1 << 20}, rows3[2] = {3, 1 << 18}, odd[2] = {2, 300001};
    assert_split(schedule(reduce(GRAPH_SUM, leaf(KILN_F32, 1, flat), 1, KILN_F32)), true,
                 "f32 sum");
    assert_split(schedule(reduce(GRAPH_RMAX, leaf(KILN_F32, 2, rows3), 2, KILN_F32)), true,
                 "f32 max of 3 rows");
    assert_split(schedule(reduce(GRAPH_ARGMAX, leaf(KILN_F32, 2, odd), 2, KILN_I64)), true,
                 "argmax, the last chunk short");
    assert_split(schedule(reduce(GRAPH_ARGMIN, leaf(KILN_I32, 2, odd), 2, KILN_I64)), true,
                 "i32 argmin");
    assert_split(schedule(reduce(GRAPH_SUM, leaf(KILN_I32, 1, flat), 1, KILN_I64)), true,
                 "i32 sum in wrapping 64 bits");
    assert_split(schedule(mean_of(leaf(KILN_F32, 2, rows3), 2, rows3[1])), true, "mean");
    assert_split(schedule(reduce(GRAPH_SUM, leaf(KILN_F16, 1, flat), 1, KILN_F16)), true,
                 "f16 sum");
    assert_split(schedule(reduce(GRAPH_RMIN, leaf(KILN_BF16, 2, rows3), 2, KILN_BF16)), true,
                 "bf16 min");
    /* elementwise work before the reduction: exp(x) * 2 summed */
    graph_node *x = leaf(KILN_F32, 1, flat);
    graph_node *two = graph_full(g, KILN_F32, 1, flat, (graph_scalar){.f = 2});
    assert_split(
        schedule(reduce(GRAPH_SUM, binary(GRAPH_MUL, unary(GRAPH_EXP, x), two), 1, KILN_F32)),
        true, "sum of exp(x) * 2");
    /* two reductions of one row, neither reading the other, in one kernel:
     * sum(y) + max(y), each with a partial array of its own */
    graph_node *y = leaf(KILN_F32, 2, rows3);
    lower_program *p = schedule(binary(GRAPH_ADD, reduce(GRAPH_SUM, graph_ref(y), 2, KILN_F32),
                                       reduce(GRAPH_RMAX, y, 2, KILN_F32)));
    cr_assert_eq(p->nkernels, 1, "sum(y) + max(y) is %d kernels; the test wants one",
                 p->nkernels);
    assert_split(p, true, "sum and max of the same rows");
}

/* What stays one block per row: rows that fill the device, short rows, a
 * row kernel (its store pass needs the row's reductions finished), and a
 * pass that reads an earlier reduction (a variance reads the mean). */
Test(cuda_program, rows_that_stay_whole) {
    if (!have_nvrtc())
        cr_skip_test("NVRTC is not installed");
    int64_t many[2] = {4096, 1 << 12}, shortrow[1] = {8192}, row[2] = {1, 1 << 20};
    assert_split(schedule(reduce(GRAPH_SUM, leaf(KILN_F32, 2, many), 2, KILN_F32)), false,
                 "4096 rows");
    assert_split(schedule(reduce(GRAPH_SUM, leaf(KILN_F32, 1, shortrow), 1, KILN_F32)), false,
                 "8192 elements");
    graph_node *x = leaf(KILN_F32, 2, row);
    graph_node *m = expand(reduce(GRAPH_RMAX, graph_ref(x), 2, KILN_F32), row);
    graph_node *e = unary(GRAPH_EXP, binary(GRAPH_SUB, x, m));
    graph_node *sum = expand(reduce(GRAPH_SUM, graph_ref(e), 2, KILN_F32), row);
    assert_split(schedule(binary(GRAPH_DIV, e, sum)), false, "softmax of one long row");
    graph_node *v = leaf(KILN_F32, 2, row);
    graph_node *d = binary(GRAPH_SUB, graph_ref(v), expand(mean_of(graph_ref(v), 2, row[1]), row));
    graph_unref(v);
    lower_program *p = schedule(reduce(GRAPH_SUM, binary(GRAPH_MUL, graph_ref(d), d), 2, KILN_F32));
    bool one = p->nkernels == 1;
    cr_assert(one, "the variance is %d kernels; the test wants its two passes in one", p->nkernels);
    assert_split(p, false, "a variance's two passes");
}

/* A bad construct inside a split kernel's partial pass is a compile error:
 * the split code is what NVRTC compiles. */
Test(cuda_program, split_kernels_are_what_compiles) {
    if (!have_nvrtc())
        cr_skip_test("NVRTC is not installed");
    int64_t flat[1] = {1 << 20};
    lower_program *p = schedule(reduce(GRAPH_SUM, leaf(KILN_F32, 1, flat), 1, KILN_F32));
    lower_plan *plans = lower_plan_program(p, jit_cuda_target());
    cr_assert(plans && plans[p->nkernels - 1].row_blocks >= 2);
    lower_plans_free(plans, p->nkernels);
    tamper_loads(p);
    char msg[16384];
    cr_assert_eq(jit_cuda_check_program(p, msg, sizeof msg), KILN_ERR_COMPILE);
    cr_assert(strstr(msg, "b7"), "the log does not name the construct: %s", msg);
    lower_program_free(p);
}
