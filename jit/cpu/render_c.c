/* render_c.c — kernel IR to C with OpenMP: one translation unit per program,
 * a function per kernel. A program instance is an OpenMP iteration over a
 * tile of output elements whose inner loop is marked `omp simd`; reductions
 * loop over the reduced elements inside each output element; matmuls are
 * register-blocked tiles of the output accumulated over k. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cpu/cpu.h"
#include "jit/cpu/prelude.h"

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool failed;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->failed = true;
            return;
        }
        if (b->s && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)w;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* The C type a dtype computes in, and the type it is stored as. */
static const char *ctype(kiln_dtype dt) {
    switch (dt) {
    case KILN_F64:
        return "double";
    case KILN_F32:
    case KILN_F16:
    case KILN_BF16:
        return "float";
    case KILN_I32:
        return "int32_t";
    case KILN_I64:
        return "int64_t";
    default:
        return "uint8_t";
    }
}

static const char *stype(kiln_dtype dt) {
    return dt == KILN_F16 || dt == KILN_BF16 ? "uint16_t" : ctype(dt);
}

static bool is_float(kiln_dtype dt) { return graph_dtype_is_float(dt); }

/* Rounds a float-computed value of a half type to that type. */
static const char *rnd(kiln_dtype dt) {
    return dt == KILN_F16 ? "kh_rh" : dt == KILN_BF16 ? "kh_rb" : "";
}

static void load_expr(sbuf *b, kiln_dtype dt, int buf, const char *idx) {
    if (dt == KILN_F16)
        put(b, "kh_h2f(in%d[%s])", buf, idx);
    else if (dt == KILN_BF16)
        put(b, "kh_b2f(in%d[%s])", buf, idx);
    else
        put(b, "in%d[%s]", buf, idx);
}

static void store_expr(sbuf *b, kiln_dtype dt, const char *val) {
    if (dt == KILN_F16)
        put(b, "kh_f2h(%s)", val);
    else if (dt == KILN_BF16)
        put(b, "kh_f2b(%s)", val);
    else
        put(b, "%s", val);
}

static void imm_expr(sbuf *b, kiln_dtype dt, graph_scalar v) {
    if (is_float(dt)) {
        if (v.f != v.f)
            put(b, "((%s)NAN)", ctype(dt));
        else if (v.f == __builtin_inf() || v.f == -__builtin_inf())
            put(b, "((%s)%sINFINITY)", ctype(dt), v.f < 0 ? "-" : "");
        else
            put(b, "((%s)%a)", ctype(dt), v.f);
    } else if (dt == KILN_I64) {
        put(b, "((int64_t)%lldLL)", (long long)v.i);
    } else {
        put(b, "((%s)%lld)", ctype(dt), (long long)v.i);
    }
}

/* Integer range of a dtype for saturating float-to-int casts. */
static void int_range(kiln_dtype dt, const char **lo, const char **hi) {
    switch (dt) {
    case KILN_I32:
        *lo = "-2147483648.0";
        *hi = "2147483647.0";
        break;
    case KILN_U8:
        *lo = "0.0";
        *hi = "255.0";
        break;
    default:
        *lo = "-9223372036854775808.0";
        *hi = "9223372036854775808.0";
        break;
    }
}

static void cast_expr(sbuf *b, kiln_dtype from, kiln_dtype to, int a) {
    if (to == KILN_BOOL) {
        put(b, "(uint8_t)(v%d != 0)", a);
    } else if (to == KILN_F16 || to == KILN_BF16) {
        put(b, "%s(kh_odd((double)v%d))", rnd(to), a);
    } else if (is_float(to)) {
        put(b, "%s((%s)v%d)", rnd(to), ctype(to), a);
    } else if (is_float(from)) {
        const char *lo, *hi;
        int_range(to, &lo, &hi);
        put(b, "(%s)kh_sat((double)v%d, %s, %s)", ctype(to), a, lo, hi);
    } else if (to == KILN_I32) {
        put(b, "(int32_t)(uint32_t)(uint64_t)v%d", a);
    } else {
        put(b, "(%s)(uint64_t)v%d", ctype(to), a);
    }
}

static const char *fn(graph_op op, kiln_dtype dt) {
    bool f = dt != KILN_F64;
    switch (op) {
    case GRAPH_EXP:
        return f ? "expf" : "exp";
    case GRAPH_LOG:
        return f ? "logf" : "log";
    case GRAPH_SQRT:
        return f ? "sqrtf" : "sqrt";
    case GRAPH_SIN:
        return f ? "sinf" : "sin";
    case GRAPH_COS:
        return f ? "cosf" : "cos";
    case GRAPH_TANH:
        return f ? "tanhf" : "tanh";
    case GRAPH_ABS:
        return f ? "fabsf" : "fabs";
    case GRAPH_SIGMOID:
        return f ? "kh_sigmoidf" : "kh_sigmoid";
    case GRAPH_GELU:
        return f ? "kh_geluf" : "kh_gelu";
    case GRAPH_SILU:
        return f ? "kh_siluf" : "kh_silu";
    case GRAPH_POW:
        return f ? "powf" : "pow";
    default:
        return "";
    }
}

static const char *cmp_op(graph_op op) {
    switch (op) {
    case GRAPH_LT:
        return "<";
    case GRAPH_LE:
        return "<=";
    case GRAPH_GT:
        return ">";
    case GRAPH_GE:
        return ">=";
    case GRAPH_EQ:
        return "==";
    default:
        return "!=";
    }
}

/* Wraps a 64-bit integer expression to dt's width. */
static void wrap_open(sbuf *b, kiln_dtype dt) {
    if (dt == KILN_BOOL)
        put(b, "(uint8_t)((");
    else if (dt == KILN_I32)
        put(b, "(int32_t)(uint32_t)(");
    else
        put(b, "(%s)(", ctype(dt));
}

static void wrap_close(sbuf *b, kiln_dtype dt) { put(b, dt == KILN_BOOL ? ") != 0)" : ")"); }

static void alu_expr(sbuf *b, const lower_ins *x, const lower_ins *ins) {
    kiln_dtype dt = x->dt, in = ins[x->a].dt;
    int a = x->a, c = x->b;
    graph_op op = x->gop;
    if (op == GRAPH_CAST) {
        cast_expr(b, in, dt, a);
        return;
    }
    if (graph_op_is_compare(op)) {
        put(b, "(uint8_t)(v%d %s v%d)", a, cmp_op(op), c);
        return;
    }
    if (is_float(dt)) {
        const char *r = rnd(dt), *t = ctype(dt);
        switch (op) {
        case GRAPH_NEG:
            put(b, "(-v%d)", a);
            return;
        case GRAPH_RELU:
            put(b, "((v%d > 0 || v%d != v%d) ? v%d : (%s)0)", a, a, a, a, t);
            return;
        case GRAPH_RSQRT:
            put(b, "%s((%s)1 / %s(v%d))", r, t, fn(GRAPH_SQRT, dt), a);
            return;
        case GRAPH_RECIP:
            put(b, "%s((%s)1 / v%d)", r, t, a);
            return;
        case GRAPH_ADD:
            put(b, "%s(v%d + v%d)", r, a, c);
            return;
        case GRAPH_SUB:
            put(b, "%s(v%d - v%d)", r, a, c);
            return;
        case GRAPH_MUL:
            put(b, "%s(v%d * v%d)", r, a, c);
            return;
        case GRAPH_DIV:
            put(b, "%s(v%d / v%d)", r, a, c);
            return;
        case GRAPH_MAXIMUM:
            put(b, "KH_FMAX(v%d, v%d)", a, c);
            return;
        case GRAPH_MINIMUM:
            put(b, "KH_FMIN(v%d, v%d)", a, c);
            return;
        case GRAPH_POW:
            put(b, "%s(%s(v%d, v%d))", r, fn(op, dt), a, c);
            return;
        default:
            put(b, "%s(%s(v%d))", r, fn(op, dt), a);
            return;
        }
    }
    switch (op) {
    case GRAPH_NEG:
        wrap_open(b, dt);
        put(b, "0 - (uint64_t)v%d", a);
        wrap_close(b, dt);
        return;
    case GRAPH_ABS:
        wrap_open(b, dt);
        put(b, "v%d < 0 ? 0 - (uint64_t)v%d : (uint64_t)v%d", a, a, a);
        wrap_close(b, dt);
        return;
    case GRAPH_RELU:
        put(b, "(v%d > 0 ? v%d : (%s)0)", a, a, ctype(dt));
        return;
    case GRAPH_MAXIMUM:
        put(b, "(v%d > v%d ? v%d : v%d)", a, c, a, c);
        return;
    case GRAPH_MINIMUM:
        put(b, "(v%d < v%d ? v%d : v%d)", a, c, a, c);
        return;
    default:
        break;
    }
    wrap_open(b, dt);
    switch (op) {
    case GRAPH_ADD:
        put(b, "(uint64_t)v%d + (uint64_t)v%d", a, c);
        break;
    case GRAPH_SUB:
        put(b, "(uint64_t)v%d - (uint64_t)v%d", a, c);
        break;
    case GRAPH_MUL:
        put(b, "(uint64_t)v%d * (uint64_t)v%d", a, c);
        break;
    case GRAPH_DIV:
        put(b, "(uint64_t)kh_floordiv(v%d, v%d)", a, c);
        break;
    case GRAPH_POW:
        put(b, "kh_ipow(v%d, v%d)", a, c);
        break;
    default:
        put(b, "0");
        break;
    }
    wrap_close(b, dt);
}

static void ins_stmt(sbuf *b, const lower_ins *ins, int i) {
    const lower_ins *x = &ins[i];
    put(b, "      %s v%d = ", x->op <= UOP_IMOD && x->op != UOP_IMM ? "int64_t" : ctype(x->dt), i);
    switch (x->op) {
    case UOP_GIDX:
        put(b, "g");
        break;
    case UOP_RIDX:
        put(b, "r");
        break;
    case UOP_IMM:
        imm_expr(b, x->dt, x->imm);
        break;
    case UOP_IADD:
        put(b, "v%d + v%d", x->a, x->b);
        break;
    case UOP_IMUL:
        put(b, "v%d * v%d", x->a, x->b);
        break;
    case UOP_IDIV:
        put(b, "v%d / v%d", x->a, x->b);
        break;
    case UOP_IMOD:
        put(b, "v%d %% v%d", x->a, x->b);
        break;
    case UOP_ILT:
        put(b, "(uint8_t)(v%d < v%d)", x->a, x->b);
        break;
    case UOP_AND:
        put(b, "(uint8_t)(v%d && v%d)", x->a, x->b);
        break;
    case UOP_LOAD: {
        char idx[32];
        snprintf(idx, sizeof idx, "v%d", x->a);
        if (x->b >= 0) {
            /* A masked load reads index 0 where invalid, never out of bounds. */
            snprintf(idx, sizeof idx, "v%d ? v%d : 0", x->b, x->a);
            put(b, "v%d ? ", x->b);
            load_expr(b, x->dt, x->buf, idx);
            put(b, " : (%s)0", ctype(x->dt));
        } else {
            load_expr(b, x->dt, x->buf, idx);
        }
        break;
    }
    case UOP_ALU:
        alu_expr(b, x, ins);
        break;
    case UOP_WHERE:
        put(b, "v%d ? v%d : v%d", x->a, x->b, x->c);
        break;
    case UOP_RAND:
        put(b, "(%s)%s(%s(kh_rand(%d, %d, %lluULL, (uint64_t)v%d)))", ctype(x->dt), rnd(x->dt),
            x->dt == KILN_F16 || x->dt == KILN_BF16 ? "kh_odd" : "", x->gop == GRAPH_RANDN,
            (int)x->dt, (unsigned long long)x->imm.i, x->a);
        break;
    case UOP_REDUCE:
        put(b, "acc");
        break;
    case UOP_ACC:
        put(b, "(%s)%s(dot)", ctype(x->dt),
            is_float(x->dt) ? rnd(x->dt) : (x->dt == KILN_I32 ? "(int32_t)(uint32_t)" : ""));
        break;
    }
    put(b, ";\n");
}

/* Marks in `in` the instructions that `target` needs (dead ones are never
 * rendered, so a load that simplification left unused cannot read out of
 * bounds). With inner_only, only the inner ones: a pass over the reduced
 * elements recomputes those, while outer values are already in scope. */
static void needs(const lower_kernel *k, int target, bool inner_only, bool *in) {
    if (inner_only && !k->ins[target].inner)
        return;
    in[target] = true;
    for (int i = target; i >= 0; i--) {
        if (!in[i])
            continue;
        const lower_ins *x = &k->ins[i];
        int ops[3] = {x->a, x->b, x->c};
        for (int j = 0; j < 3; j++)
            if (ops[j] >= 0 && (!inner_only || k->ins[ops[j]].inner))
                in[ops[j]] = true;
    }
}

static void params(sbuf *b, const lower_kernel *k) {
    put(b, "void %s(char **bufs, int nthreads) {\n", k->name);
    for (int o = 0; o < k->nouts; o++)
        put(b, "  %s *restrict out%d = (%s *)bufs[%d];\n", stype(k->outs[o]->dtype), o,
            stype(k->outs[o]->dtype), o);
    for (int i = 0; i < k->ninputs; i++)
        put(b, "  const %s *restrict in%d = (const %s *)bufs[%d];\n", stype(k->inputs[i]->dtype),
            k->nouts + i, stype(k->inputs[i]->dtype), k->nouts + i);
    put(b, "  (void)nthreads;\n");
}

static void reduce_init(sbuf *b, const lower_ins *red, kiln_dtype in) {
    graph_op op = red->gop;
    const char *acc = is_float(in) ? "double" : "int64_t";
    if (op == GRAPH_SUM) {
        put(b, "      %s acc = 0;\n", is_float(in) ? "double" : "uint64_t");
    } else {
        put(b, "      %s best = 0; int64_t at = -1;\n", acc);
    }
}

static void reduce_step(sbuf *b, const lower_ins *red, kiln_dtype in) {
    int v = red->a;
    switch (red->gop) {
    case GRAPH_SUM:
        put(b, is_float(in) ? "        acc += (double)v%d;\n" : "        acc += (uint64_t)v%d;\n", v);
        return;
    default: {
        bool mx = red->gop == GRAPH_RMAX || red->gop == GRAPH_ARGMAX;
        if (is_float(in))
            put(b,
                "        if (at < 0 || (best == best && (v%d != v%d || v%d %s best))) "
                "{ best = v%d; at = r; }\n",
                v, v, v, mx ? ">" : "<", v);
        else
            put(b, "        if (at < 0 || v%d %s best) { best = v%d; at = r; }\n", v,
                mx ? ">" : "<", v);
        return;
    }
    }
}

/* Assigns the finished reduction to v<id>, declared before its pass. */
static void reduce_result(sbuf *b, const lower_ins *red, int id) {
    kiln_dtype dt = red->dt;
    if (red->gop == GRAPH_ARGMAX || red->gop == GRAPH_ARGMIN)
        put(b, "        v%d = at < 0 ? 0 : at;\n", id);
    else if (red->gop == GRAPH_SUM && is_float(dt))
        put(b, "        v%d = %s((%s)acc);\n", id, rnd(dt), ctype(dt));
    else
        put(b, "        v%d = (%s)%s;\n", id, ctype(dt), red->gop == GRAPH_SUM ? "acc" : "best");
}

static void store_stmt(sbuf *b, const lower_kernel *k, const char *indent) {
    for (int o = 0; o < k->nouts; o++) {
        char val[32];
        snprintf(val, sizeof val, "v%d", k->results[o]);
        put(b, "%sout%d[v%d] = ", indent, o, k->store);
        store_expr(b, k->outs[o]->dtype, val);
        put(b, ";\n");
    }
}

/* Elementwise: a tile of output elements per program instance, its loop
 * vectorised. */
static void render_elementwise(sbuf *b, const lower_kernel *k, bool *live) {
    for (int o = 0; o < k->nouts; o++)
        needs(k, k->results[o], false, live);
    needs(k, k->store, false, live);
    put(b, "  const int64_t N = %lldLL, T = %lldLL;\n", (long long)k->numel, (long long)k->tile);
    put(b, "  #pragma omp parallel for schedule(static) num_threads(nthreads) if(N >= 32768)\n");
    put(b, "  for (int64_t t = 0; t < (N + T - 1) / T; t++) {\n");
    put(b, "    const int64_t lo = t * T, hi = lo + T < N ? lo + T : N;\n");
    put(b, "    #pragma omp simd\n");
    put(b, "    for (int64_t g = lo; g < hi; g++) {\n");
    for (int i = 0; i < k->nins; i++)
        if (live[i])
            ins_stmt(b, k->ins, i);
    store_stmt(b, k, "      ");
    put(b, "    }\n  }\n}\n\n");
}

/* One pass over the reduced elements: the inner instructions that target
 * (and also, if not negative, target2) need. */
static void render_pass(sbuf *b, const lower_kernel *k, int target, int target2, bool *pass) {
    memset(pass, 0, sizeof *pass * (size_t)k->nins);
    needs(k, target, true, pass);
    if (target2 >= 0)
        needs(k, target2, true, pass);
    for (int i = 0; i < k->nins; i++)
        if (pass[i])
            ins_stmt(b, k->ins, i);
}

/* Rows at least this long are split across threads when there are few. */
#define SPLIT_MIN ((int64_t)1 << 18)

/* A max/min/arg pass split across threads: each reduces a contiguous chunk
 * of the row, then the chunks combine in order, so the first of equal values
 * (and the first NaN) still wins. */
static void split_ordered_pass(sbuf *b, const lower_kernel *k, const lower_ins *x,
                               kiln_dtype in, bool *pass) {
    const char *acc = is_float(in) ? "double" : "int64_t";
    put(b, "      enum { KT = 256 };\n");
    put(b, "      %s pbest[KT]; int64_t pat[KT];\n", acc);
    put(b, "      for (int t = 0; t < KT; t++) pat[t] = -1;\n");
    put(b, "      #pragma omp parallel num_threads(nthreads < KT ? nthreads : KT)\n");
    put(b, "      {\n");
    put(b, "        const int t = omp_get_thread_num(), T = omp_get_num_threads();\n");
    put(b, "        const int64_t lo = R * t / T, hi = R * (t + 1) / T;\n");
    reduce_init(b, x, in);
    put(b, "        for (int64_t r = lo; r < hi; r++) {\n");
    render_pass(b, k, x->a, -1, pass);
    reduce_step(b, x, in);
    put(b, "        }\n");
    put(b, "        pbest[t] = best; pat[t] = at;\n");
    put(b, "      }\n");
    put(b, "      for (int t = 0; t < KT; t++) {\n");
    put(b, "        if (pat[t] < 0) continue;\n");
    put(b, "        const int64_t r = pat[t];\n");
    put(b, "        const %s v%d = (%s)pbest[t];\n", ctype(k->ins[x->a].dt), x->a,
        ctype(k->ins[x->a].dt));
    reduce_step(b, x, in);
    put(b, "      }\n");
}

/* Reductions and row kernels: a program instance per output row, which
 * passes over its reduced elements once per reduction, in order (each may
 * read the ones before), then, in a row kernel, once more to store. Outer
 * values are computed as soon as the reductions they read are done. */
static void render_phased(sbuf *b, const lower_kernel *k, bool *live) {
    int n = k->nins;
    int *stage = calloc((size_t)n, sizeof *stage);
    bool *pass = calloc((size_t)n, sizeof *pass);
    if (!stage || !pass) {
        free(stage);
        free(pass);
        b->failed = true;
        return;
    }
    needs(k, k->result, false, live);
    needs(k, k->store, false, live);
    int nred = 0;
    for (int i = 0; i < n; i++) {
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
    /* Few rows, each long (a full sum): the rows would leave cores idle, so
     * each pass over a row is split across the threads instead. */
    bool split = k->numel <= 4 && k->rnumel >= SPLIT_MIN;
    put(b, "  const int64_t N = %lldLL, R = %lldLL;\n", (long long)k->numel, (long long)k->rnumel);
    if (!split)
        put(b, "  #pragma omp parallel for schedule(static) num_threads(nthreads) "
               "if(N * R >= 32768)\n");
    put(b, "  for (int64_t g = 0; g < N; g++) {\n");
    for (int s = 0, done = 0; s <= nred; s++) {
        for (int i = 0; i < n; i++)
            if (live[i] && !k->ins[i].inner && k->ins[i].op != UOP_REDUCE && stage[i] == s)
                ins_stmt(b, k->ins, i);
        if (s == nred)
            break;
        int red = done;
        while (!(live[red] && k->ins[red].op == UOP_REDUCE))
            red++;
        done = red + 1;
        const lower_ins *x = &k->ins[red];
        kiln_dtype in = k->ins[x->a].dt;
        put(b, "    %s v%d;\n    {\n", ctype(x->dt), red);
        reduce_init(b, x, in);
        /* A sum may run in SIMD lanes (a different order of additions, in
         * double, well inside every float tolerance); max/min and the arg
         * reductions keep their order, which decides ties and NaN. */
        if (x->gop != GRAPH_SUM && split) {
            split_ordered_pass(b, k, x, in, pass);
        } else {
            if (x->gop == GRAPH_SUM)
                put(b, split ? "      #pragma omp parallel for simd reduction(+:acc) "
                               "schedule(static) num_threads(nthreads)\n"
                             : "      #pragma omp simd reduction(+:acc)\n");
            put(b, "      for (int64_t r = 0; r < R; r++) {\n");
            render_pass(b, k, x->a, -1, pass);
            reduce_step(b, x, in);
            put(b, "      }\n");
        }
        reduce_result(b, x, red);
        put(b, "    }\n");
    }
    if (k->ins[k->result].inner || k->ins[k->store].inner) {
        put(b, split ? "    #pragma omp parallel for simd schedule(static) num_threads(nthreads)\n"
                     : "    #pragma omp simd\n");
        put(b, "    for (int64_t r = 0; r < R; r++) {\n");
        render_pass(b, k, k->result, k->store, pass);
        store_stmt(b, k, "      ");
        put(b, "    }\n");
    } else {
        store_stmt(b, k, "    ");
    }
    put(b, "  }\n}\n\n");
    free(stage);
    free(pass);
}

static void render_ir_kernel(sbuf *b, const lower_kernel *k) {
    bool *live = calloc((size_t)(k->nins ? k->nins : 1), sizeof *live);
    if (!live) {
        b->failed = true;
        return;
    }
    params(b, k);
    if (k->kind == LOWER_ELEMENTWISE)
        render_elementwise(b, k, live);
    else
        render_phased(b, k, live);
    free(live);
}

static void operand_offset(sbuf *b, const char *name, const lower_kernel *k,
                           const lower_operand *o) {
    put(b, "      int64_t %s = %lldLL", name, (long long)o->offset);
    int64_t inner = 1;
    for (int d = k->nbatch - 1; d >= 0; d--) {
        if (o->batch_strides[d] && k->batch[d] > 1)
            put(b, " + ((bt / %lldLL) %% %lldLL) * %lldLL", (long long)inner,
                (long long)k->batch[d], (long long)o->batch_strides[d]);
        inner *= k->batch[d];
    }
    put(b, ";\n");
}

/* A register-blocked tile: MR rows by NR columns of the output live in
 * accumulators while k runs; a row of B is loaded once per k and reused for
 * all MR rows. */
static void render_matmul(sbuf *b, const lower_kernel *k) {
    kiln_dtype dt = k->out->dtype;
    kiln_dtype at = k->inputs[k->a.buf - 1]->dtype, bt = k->inputs[k->b.buf - 1]->dtype;
    const char *acc = is_float(dt) ? (dt == KILN_F64 ? "double" : "float") : "uint64_t";
    bool *live = calloc((size_t)k->nins, sizeof *live);
    if (!live) {
        b->failed = true;
        return;
    }
    needs(k, k->result, false, live);
    needs(k, k->store, false, live);
    int64_t nb = 1;
    for (int d = 0; d < k->nbatch; d++)
        nb *= k->batch[d];
    params(b, k);
    put(b, "  enum { MR = 4, NR = 64 };\n");
    put(b, "  const int64_t NB = %lldLL, N = %lldLL, K = %lldLL, M = %lldLL;\n", (long long)nb,
        (long long)k->n, (long long)k->k, (long long)k->m);
    put(b, "  #pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads) "
           "if(NB * N * M * K >= 65536)\n");
    put(b, "  for (int64_t bt = 0; bt < NB; bt++)\n");
    put(b, "    for (int64_t i0 = 0; i0 < N; i0 += MR) {\n");
    operand_offset(b, "oa", k, &k->a);
    operand_offset(b, "ob", k, &k->b);
    put(b, "      const int64_t mr = N - i0 < MR ? N - i0 : MR;\n");
    put(b, "      for (int64_t j0 = 0; j0 < M; j0 += NR) {\n");
    put(b, "        const int64_t nr = M - j0 < NR ? M - j0 : NR;\n");
    put(b, "        %s acc[MR][NR];\n", acc);
    put(b, "        memset(acc, 0, sizeof acc);\n");
    put(b, "        for (int64_t kk = 0; kk < K; kk++) {\n");
    put(b, "          %s brow[NR];\n", acc);
    put(b, "          for (int64_t j = 0; j < NR; j++) {\n");
    put(b, "            int64_t bi = ob + kk * %lldLL + (j0 + (j < nr ? j : 0)) * %lldLL;\n",
        (long long)k->b.row_stride, (long long)k->b.col_stride);
    put(b, "            brow[j] = (%s)", acc);
    load_expr(b, bt, k->b.buf, "bi");
    put(b, ";\n          }\n");
    put(b, "          for (int64_t i = 0; i < MR; i++) {\n");
    put(b, "            int64_t ai = oa + (i0 + (i < mr ? i : 0)) * %lldLL + kk * %lldLL;\n",
        (long long)k->a.row_stride, (long long)k->a.col_stride);
    put(b, "            %s av = (%s)", acc, acc);
    load_expr(b, at, k->a.buf, "ai");
    put(b, ";\n            #pragma omp simd\n");
    put(b, "            for (int64_t j = 0; j < NR; j++) acc[i][j] += av * brow[j];\n");
    put(b, "          }\n        }\n");
    put(b, "        for (int64_t i = 0; i < mr; i++)\n");
    put(b, "          for (int64_t j = 0; j < nr; j++) {\n");
    put(b, "            const int64_t g = bt * N * M + (i0 + i) * M + j0 + j;\n");
    put(b, "            const %s dot = acc[i][j];\n", acc);
    for (int i = 0; i < k->nins; i++)
        if (live[i])
            ins_stmt(b, k->ins, i);
    store_stmt(b, k, "            ");
    put(b, "          }\n      }\n    }\n}\n\n");
    free(live);
}

char *jit_cpu_render(const lower_program *p) {
    sbuf b = {0};
    put(&b, "%s\n", jit_cpu_prelude);
    for (int i = 0; i < p->nkernels; i++) {
        const lower_kernel *k = &p->kernels[i];
        if (k->kind == LOWER_MATMUL)
            render_matmul(&b, k);
        else if (k->kind != LOWER_ALIAS)
            render_ir_kernel(&b, k);
    }
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
