/* selftest.c — //jit/cuda:cuda_selftest, the one-shot check of the CUDA
 * target on a machine with a GPU: a few real programs (an elementwise chain
 * with broadcasting, softmax rows, reductions with ties and NaN, a matmul
 * with a bias and relu epilogue, f16 and bf16, random numbers, integer
 * division) are scheduled with lower_schedule, compiled for the device's
 * architecture, run on it, and compared with the reference evaluator. It
 * prints each case's largest error and exits 1 if any is out of tolerance;
 * without NVRTC, a driver or a device it says why and exits 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "jit/cuda/cuda.h"
#include "lower/lower.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

/* A leaf of random values in [lo, hi) (integers: whole numbers). */
static graph_node *leaf(graph_ctx *g, kiln_dtype dt, int ndim, const int64_t *shape, double lo,
                        double hi) {
    int64_t n = graph_shape_numel(ndim, shape);
    graph_buffer *b = graph_buffer_new((size_t)(n ? n : 1) * graph_dtype_size(dt));
    if (!b)
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        double v = lo + (hi - lo) * uniform();
        graph_scalar_store(b->data, dt, i,
                           graph_scalar_from_double(graph_dtype_is_float(dt) ? v : floor(v), dt));
    }
    graph_node *x = graph_buffer_node(g, dt, ndim, shape, b);
    graph_buffer_unref(b);
    return x;
}

/* Device copies of the nodes a program touches. */
typedef struct dev_map {
    int n;
    const graph_node *node[256];
    jit_cuda_ptr ptr[256];
    bool owned[256];
} dev_map;

static jit_cuda_ptr lookup(const dev_map *m, const graph_node *x) {
    for (int i = 0; i < m->n; i++)
        if (m->node[i] == x)
            return m->ptr[i];
    return 0;
}

static size_t node_bytes(const graph_node *x) {
    return (size_t)graph_numel(x) * graph_dtype_size(x->dtype);
}

/* Runs program p on the device; the target's result lands in host. */
static kiln_status run_on_device(jit_cuda_device *d, const lower_program *p,
                                 const graph_node *target, void *host, char *msg, size_t cap) {
    lower_plan *plans = lower_plan_program(p, jit_cuda_target());
    char *src = NULL;
    kiln_status rst = KILN_ERR_OOM;
    if (plans)
        rst = jit_cuda_render(p, plans, &src, msg, cap);
    else
        snprintf(msg, cap, "out of memory planning");
    if (rst != KILN_OK) {
        lower_plans_free(plans, p->nkernels);
        return rst;
    }
    jit_cuda_binary bin;
    kiln_status st = jit_cuda_compile(src, jit_cuda_device_arch(d), true, &bin, msg, cap);
    free(src);
    jit_cuda_module *mod = st == KILN_OK ? jit_cuda_module_load(d, &bin, msg, cap) : NULL;
    if (st == KILN_OK)
        jit_cuda_binary_free(&bin);
    if (!mod) {
        lower_plans_free(plans, p->nkernels);
        return st == KILN_OK ? KILN_ERR_DEVICE : st;
    }
    dev_map m = {0};
    for (int i = 0; st == KILN_OK && i < p->nkernels; i++) {
        const lower_kernel *k = &p->kernels[i];
        jit_cuda_ptr bufs[64];
        int nb = k->nouts + k->ninputs;
        if (nb > 64 || m.n + nb > 256) {
            snprintf(msg, cap, "selftest: program too large");
            st = KILN_ERR_ARG;
            break;
        }
        for (int j = 0; st == KILN_OK && j < k->ninputs; j++) {
            const graph_node *x = k->inputs[j];
            bufs[k->nouts + j] = lookup(&m, x);
            if (bufs[k->nouts + j])
                continue;
            if (!x->buf) {
                snprintf(msg, cap, "selftest: input of %s was never computed", k->name);
                st = KILN_ERR_ARG;
                break;
            }
            st = jit_cuda_alloc(d, node_bytes(x), &bufs[k->nouts + j], msg, cap);
            if (st == KILN_OK) {
                m.node[m.n] = x, m.ptr[m.n] = bufs[k->nouts + j], m.owned[m.n++] = true;
                st = jit_cuda_to_device(d, bufs[k->nouts + j], x->buf->data, node_bytes(x), msg,
                                        cap);
            }
        }
        if (st != KILN_OK)
            break;
        if (k->kind == LOWER_ALIAS) {
            m.node[m.n] = k->outs[0], m.ptr[m.n] = bufs[1], m.owned[m.n++] = false;
            continue;
        }
        if (k->kind == LOWER_COLLECTIVE) {
            snprintf(msg, cap, "selftest: %s is a collective, which the self-test does not run",
                     k->name);
            st = KILN_ERR_ARG;
            break;
        }
        for (int o = 0; st == KILN_OK && o < k->nouts; o++) {
            st = jit_cuda_alloc(d, node_bytes(k->outs[o]), &bufs[o], msg, cap);
            if (st == KILN_OK)
                m.node[m.n] = k->outs[o], m.ptr[m.n] = bufs[o], m.owned[m.n++] = true;
        }
        if (st == KILN_OK && k->numel > 0)
            st = jit_cuda_launch(mod, k->name, jit_cuda_launch_dims(&plans[i]), nb, bufs, msg,
                                 cap);
    }
    if (st == KILN_OK) {
        jit_cuda_ptr out = lookup(&m, target);
        if (out)
            st = jit_cuda_to_host(d, host, out, node_bytes(target), msg, cap);
        else
            snprintf(msg, cap, "selftest: the target was not computed"), st = KILN_ERR_ARG;
    }
    for (int i = 0; i < m.n; i++)
        if (m.owned[i])
            jit_cuda_free(d, m.ptr[i]);
    jit_cuda_module_unload(mod);
    lower_plans_free(plans, p->nkernels);
    return st;
}

/* Schedules target, runs it on the device and on the reference evaluator,
 * and prints the largest error relative to 1 + |reference|. */
static bool check_case(jit_cuda_device *d, const char *name, graph_node *target, double tol) {
    char msg[8192];
    if (!target) {
        printf("%-28s FAIL out of memory building the graph\n", name);
        return false;
    }
    lower_program *p = lower_schedule(1, &target, true);
    void *host = malloc(node_bytes(target) + 1);
    kiln_status st = p && host ? KILN_OK : KILN_ERR_OOM;
    if (st != KILN_OK)
        snprintf(msg, sizeof msg, "out of memory");
    if (st == KILN_OK)
        st = run_on_device(d, p, target, host, msg, sizeof msg);
    if (st == KILN_OK)
        st = graph_eval(1, &target, msg, sizeof msg);
    double worst = 0;
    int64_t mismatches = 0;
    if (st == KILN_OK) {
        for (int64_t i = 0; i < graph_numel(target); i++) {
            double got = graph_scalar_to_double(graph_scalar_load(host, target->dtype, i),
                                                target->dtype);
            double want = graph_scalar_to_double(
                graph_scalar_load(target->buf->data, target->dtype, i), target->dtype);
            double err = isnan(want) ? (isnan(got) ? 0 : INFINITY)
                         : want == got ? 0
                                       : fabs(got - want) / (1 + fabs(want));
            if (err > tol)
                mismatches++;
            if (err > worst || isnan(err))
                worst = err;
        }
    }
    bool ok = st == KILN_OK && mismatches == 0;
    if (st != KILN_OK)
        printf("%-28s FAIL %s\n", name, msg);
    else
        printf("%-28s %s kernels %d, max error %.3g (tolerance %.3g), %lld mismatches\n", name,
               ok ? "ok  " : "FAIL", p->nkernels, worst, tol, (long long)mismatches);
    lower_program_free(p);
    free(host);
    graph_unref(target);
    return ok;
}

static graph_node *bin(graph_op op, graph_node *a, graph_node *b) {
    graph_node *r = a && b ? graph_binary(op, a, b) : NULL;
    graph_unref(a);
    graph_unref(b);
    return r;
}

static graph_node *un(graph_op op, graph_node *a) {
    graph_node *r = a ? graph_unary(op, a) : NULL;
    graph_unref(a);
    return r;
}

static graph_node *expand(graph_node *a, int ndim, const int64_t *shape) {
    (void)ndim;
    graph_node *r = a ? graph_expand(a, shape) : NULL;
    graph_unref(a);
    return r;
}

static graph_node *reduce(graph_op op, graph_node *a, uint32_t axes, kiln_dtype dt) {
    graph_node *r = a ? graph_reduce(op, a, axes, dt) : NULL;
    graph_unref(a);
    return r;
}

static graph_node *cast(graph_node *a, kiln_dtype dt) {
    graph_node *r = a ? graph_cast(a, dt) : NULL;
    graph_unref(a);
    return r;
}

static graph_node *elementwise_chain(graph_ctx *g) {
    int64_t s[2] = {1000, 37}, row[2] = {1, 37};
    graph_node *x = leaf(g, KILN_F32, 2, s, -3, 3);
    graph_node *y = expand(leaf(g, KILN_F32, 2, row, -2, 2), 2, s);
    graph_node *e = bin(GRAPH_MUL, un(GRAPH_EXP, graph_ref(x)), graph_ref(y));
    graph_node *t = bin(GRAPH_ADD, e, un(GRAPH_SIN, graph_ref(x)));
    t = bin(GRAPH_SUB, t, un(GRAPH_RELU, y));
    return bin(GRAPH_MAXIMUM, un(GRAPH_TANH, t), un(GRAPH_GELU, x));
}

static graph_node *softmax_rows(graph_ctx *g) {
    int64_t s[2] = {300, 1000};
    graph_node *x = leaf(g, KILN_F32, 2, s, -8, 8);
    graph_node *m = expand(reduce(GRAPH_RMAX, graph_ref(x), 2, KILN_F32), 2, s);
    graph_node *e = un(GRAPH_EXP, bin(GRAPH_SUB, x, m));
    graph_node *sum = expand(reduce(GRAPH_SUM, graph_ref(e), 2, KILN_F32), 2, s);
    return bin(GRAPH_DIV, e, sum);
}

static graph_node *column_sum(graph_ctx *g) {
    int64_t s[2] = {2000, 50};
    return reduce(GRAPH_SUM, leaf(g, KILN_F32, 2, s, -1, 1), 1, KILN_F32);
}

/* Small integers make ties; a few NaNs must win wherever they are. */
static graph_node *argmax_ties_nan(graph_ctx *g) {
    int64_t s[2] = {64, 777};
    graph_node *x = leaf(g, KILN_F32, 2, s, 0, 5);
    float *v = x->buf->data;
    for (int64_t i = 0; i < 64 * 777; i++)
        v[i] = floorf(v[i]);
    v[5 * 777 + 400] = NAN;
    v[9 * 777 + 3] = NAN;
    v[9 * 777 + 700] = NAN;
    return reduce(GRAPH_ARGMAX, x, 2, KILN_I64);
}

static graph_node *int_argmin(graph_ctx *g) {
    int64_t s[2] = {33, 1500};
    return reduce(GRAPH_ARGMIN, leaf(g, KILN_I32, 2, s, -20, 20), 2, KILN_I64);
}

static graph_node *matmul_bias_relu(graph_ctx *g) {
    int64_t sa[2] = {130, 70}, sb[2] = {70, 90}, so[2] = {130, 90}, row[2] = {1, 90};
    graph_node *a = leaf(g, KILN_F32, 2, sa, -1, 1), *b = leaf(g, KILN_F32, 2, sb, -1, 1);
    graph_node *mm = a && b ? graph_matmul(a, b) : NULL;
    graph_unref(a);
    graph_unref(b);
    graph_node *bias = expand(leaf(g, KILN_F32, 2, row, -1, 1), 2, so);
    return un(GRAPH_RELU, bin(GRAPH_ADD, mm, bias));
}

static graph_node *batched_matmul_f16(graph_ctx *g) {
    int64_t sa[3] = {3, 33, 65}, sb[3] = {3, 65, 17};
    graph_node *a = leaf(g, KILN_F16, 3, sa, -1, 1), *b = leaf(g, KILN_F16, 3, sb, -1, 1);
    graph_node *mm = a && b ? graph_matmul(a, b) : NULL;
    graph_unref(a);
    graph_unref(b);
    return mm;
}

static graph_node *half_chain(graph_ctx *g) {
    int64_t s[1] = {5000};
    graph_node *x = leaf(g, KILN_F16, 1, s, -6, 6);
    graph_node *y = bin(GRAPH_MUL, un(GRAPH_SIGMOID, graph_ref(x)), x);
    return cast(bin(GRAPH_ADD, cast(y, KILN_BF16), leaf(g, KILN_BF16, 1, s, -1, 1)), KILN_F16);
}

static graph_node *bf16_row_sum(graph_ctx *g) {
    int64_t s[2] = {40, 3000};
    return reduce(GRAPH_SUM, leaf(g, KILN_BF16, 2, s, -1, 1), 2, KILN_BF16);
}

static graph_node *randn(graph_ctx *g) {
    int64_t s[1] = {10000};
    return graph_rand(g, GRAPH_RANDN, KILN_F32, 1, s, 1234);
}

static graph_node *int_floordiv(graph_ctx *g) {
    int64_t s[1] = {4096};
    graph_node *a = leaf(g, KILN_I32, 1, s, -1000, 1000), *b = leaf(g, KILN_I32, 1, s, -9, 9);
    return bin(GRAPH_ADD, bin(GRAPH_DIV, graph_ref(a), graph_ref(b)), bin(GRAPH_MUL, a, b));
}

int main(void) {
    char msg[1024];
    if (!jit_cuda_nvrtc_available(msg, sizeof msg)) {
        printf("cuda_selftest: skipped: %s\n", msg);
        return 0;
    }
    jit_cuda_device *d = jit_cuda_device_open(0, msg, sizeof msg);
    if (!d) {
        printf("cuda_selftest: skipped: %s\n", msg);
        return 0;
    }
    printf("cuda_selftest: %s (sm_%d), %s\n", jit_cuda_device_name(d), jit_cuda_device_arch(d),
           jit_cuda_nvrtc_version());
    graph_ctx *g = graph_ctx_new();
    if (!g) {
        jit_cuda_device_close(d);
        printf("cuda_selftest: out of memory\n");
        return 1;
    }
    static const struct {
        const char *name;
        graph_node *(*build)(graph_ctx *);
        double tol;
    } cases[] = {
        {"elementwise chain f32", elementwise_chain, 1e-5},
        {"softmax rows f32", softmax_rows, 1e-5},
        {"column sum f32", column_sum, 1e-5},
        {"argmax ties and NaN", argmax_ties_nan, 0},
        {"argmin i32", int_argmin, 0},
        {"matmul + bias + relu f32", matmul_bias_relu, 1e-5},
        {"batched matmul f16", batched_matmul_f16, 1e-2},
        {"f16/bf16 chain", half_chain, 1e-2},
        {"row sum bf16", bf16_row_sum, 1e-2},
        {"randn f32", randn, 1e-6},
        {"i32 floor division", int_floordiv, 0},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        failed += !check_case(d, cases[i].name, cases[i].build(g), cases[i].tol);
    graph_ctx_free(g);
    jit_cuda_device_close(d);
    printf("cuda_selftest: %s (%d of %zu cases failed)\n", failed ? "FAILED" : "passed", failed,
           sizeof cases / sizeof cases[0]);
    return failed ? 1 : 0;
}
