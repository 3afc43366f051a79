/* sizes.c — the numbers of a program that its code may read at run time (see
 * lower.h: run-time sizes). One walk lists them in a fixed order; the values
 * tell the runtime which numbers differ between two graphs of one structure,
 * and marking makes renderers print those as S[j]. */
#include <stdlib.h>
#include <string.h>

#include "lower/lower.h"

/* Calls visit(ctx, kernel, field, value, imm) for every candidate in order;
 * imm is the instruction when the field is an immediate's. */
typedef void (*visit_fn)(void *ctx, lower_kernel *k, void *field, int64_t value, lower_ins *imm);

static void visit_int(visit_fn f, void *ctx, lower_kernel *k, int64_t *field) {
    f(ctx, k, field, *field, NULL);
}

/* A stride of 0 or 1 stays a literal, part of the text: the packing loops
 * read a unit stride as one vector and anything else element by element, so
 * a program shared by sizes whose operands are contiguous keeps that (an
 * operand laid out otherwise is another text, hence another program).
 * Measured on square matmuls of 512 to 2048 run in turn (one family): with
 * every stride read at run time 1.2-1.5x slower than compiled for their size,
 * with unit strides literal 1.2x (the rest is the cache blocks read at run
 * time; making them literal split every small size into a family of its
 * own, since the planner sizes blocks to small dimensions). */
static void visit_stride(visit_fn f, void *ctx, lower_kernel *k, int64_t *field) {
    if (*field > 1 || *field < 0)
        visit_int(f, ctx, k, field);
}

/* A split operand's axes: their sizes and steps, their strides as any
 * other, and its masks' bounds. */
static void visit_split(visit_fn f, void *ctx, lower_kernel *k, lower_operand *o) {
    for (int d = 0; d < o->nrdims; d++) {
        visit_int(f, ctx, k, &o->rsize[d]);
        visit_stride(f, ctx, k, &o->rstride[d]);
        visit_int(f, ctx, k, &o->rstep[d]);
    }
    for (int d = 0; d < o->ncdims; d++) {
        visit_int(f, ctx, k, &o->csize[d]);
        visit_stride(f, ctx, k, &o->cstride[d]);
        visit_int(f, ctx, k, &o->cstep[d]);
    }
    for (int m = 0; m < o->nmasks; m++) {
        visit_int(f, ctx, k, &o->mlo[m]);
        visit_int(f, ctx, k, &o->mhi[m]);
        visit_int(f, ctx, k, &o->morigin[m]);
    }
}

static void walk(lower_program *p, lower_plan *plans, visit_fn f, void *ctx) {
    for (int i = 0; i < p->nkernels; i++) {
        lower_kernel *k = &p->kernels[i];
        if (!lower_kind_has_code(k->kind))
            continue;
        /* the grid of every kind: the LLVM path splits program instances
         * by it, where the C path loops over its own bounds */
        visit_int(f, ctx, k, &plans[i].parallel);
        visit_int(f, ctx, k, &plans[i].grid);
        switch (k->kind) {
        case LOWER_ELEMENTWISE:
            visit_int(f, ctx, k, &k->numel);
            break;
        case LOWER_REDUCE:
        case LOWER_SCATTER:
            visit_int(f, ctx, k, &k->numel);
            visit_int(f, ctx, k, &k->rnumel);
            if (k->kind == LOWER_SCATTER)
                visit_int(f, ctx, k, &k->snumel);
            break;
        case LOWER_MATMUL:
            for (int d = 0; d < k->nbatch; d++)
                visit_int(f, ctx, k, &k->batch[d]);
            visit_int(f, ctx, k, &k->n);
            visit_int(f, ctx, k, &k->k);
            visit_int(f, ctx, k, &k->m);
            visit_int(f, ctx, k, &k->a.offset);
            visit_int(f, ctx, k, &k->b.offset);
            visit_stride(f, ctx, k, &k->a.row_stride);
            visit_stride(f, ctx, k, &k->a.col_stride);
            visit_stride(f, ctx, k, &k->b.row_stride);
            visit_stride(f, ctx, k, &k->b.col_stride);
            visit_int(f, ctx, k, &plans[i].mm.mc);
            visit_int(f, ctx, k, &plans[i].mm.nc);
            visit_int(f, ctx, k, &plans[i].mm.kc);
            for (int d = 0; d < k->nbatch; d++) {
                visit_int(f, ctx, k, &k->a.batch_strides[d]);
                visit_int(f, ctx, k, &k->b.batch_strides[d]);
            }
            visit_split(f, ctx, k, &k->a);
            visit_split(f, ctx, k, &k->b);
            break;
        case LOWER_ATTENTION: {
            lower_attention *a = &k->att;
            for (int d = 0; d < k->nbatch; d++)
                visit_int(f, ctx, k, &k->batch[d]);
            visit_int(f, ctx, k, &a->l);
            visit_int(f, ctx, k, &a->s);
            for (int j = 0; j < a->nsrc; j++) {
                visit_int(f, ctx, k, &a->src[j].offset);
                visit_stride(f, ctx, k, &a->src[j].row_stride);
                visit_stride(f, ctx, k, &a->src[j].col_stride);
                for (int d = 0; d < k->nbatch; d++)
                    visit_int(f, ctx, k, &a->src[j].batch_strides[d]);
            }
            for (int j = 0; j < a->nstores; j++) {
                visit_int(f, ctx, k, &a->store[j].offset);
                visit_stride(f, ctx, k, &a->store[j].row_stride);
                for (int d = 0; d < k->nbatch; d++)
                    visit_int(f, ctx, k, &a->store[j].batch_strides[d]);
            }
            break;
        }
        default:
            break;
        }
        for (int j = 0; j < k->nins; j++) {
            lower_ins *x = &k->ins[j];
            if (x->op != UOP_IMM || x->dt == KILN_BOOL)
                continue;
            int64_t v = x->imm.i;
            if (graph_dtype_is_float(x->dt))
                memcpy(&v, &x->imm.f, sizeof v);
            f(ctx, k, &x->imm, v, x);
        }
    }
}

typedef struct values_ctx {
    int64_t n;
    int64_t *vals;
} values_ctx;

static void take_value(void *ctx, lower_kernel *k, void *field, int64_t value, lower_ins *imm) {
    (void)k;
    (void)field;
    (void)imm;
    values_ctx *c = ctx;
    if (c->vals)
        c->vals[c->n] = value;
    c->n++;
}

typedef struct widen_ctx {
    bool *mask;
    int64_t n;                  /* candidates seen in this walk */
    int pass;                   /* 0: which kernels vary; 1: widen theirs */
    bool *kernel_varies;        /* per kernel, from the first walk */
    const lower_kernel *base;   /* the program's kernels, to index kernel_varies */
} widen_ctx;

static void widen_one(void *ctx, lower_kernel *k, void *field, int64_t value, lower_ins *imm) {
    (void)field;
    (void)value;
    widen_ctx *c = ctx;
    int64_t at = c->n++;
    bool *kv = &c->kernel_varies[k - c->base];
    if (c->pass == 0)
        *kv = *kv || c->mask[at];
    else if (*kv && !imm)
        c->mask[at] = true;
}

bool lower_sizes_widen(const lower_program *p, const lower_plan *plans, bool *mask) {
    widen_ctx c = {.mask = mask, .base = p->kernels,
                   .kernel_varies = calloc((size_t)(p->nkernels ? p->nkernels : 1), sizeof(bool))};
    if (!c.kernel_varies)
        return false;
    for (c.pass = 0; c.pass < 2; c.pass++) {
        c.n = 0;
        walk((lower_program *)p, (lower_plan *)plans, widen_one, &c);
    }
    free(c.kernel_varies);
    return true;
}

int64_t lower_sizes_values(const lower_program *p, const lower_plan *plans, int64_t *vals) {
    values_ctx c = {0, vals};
    /* The walk only reads; it takes mutable pointers for lower_sizes_mark. */
    walk((lower_program *)p, (lower_plan *)plans, take_value, &c);
    return c.n;
}

void lower_sizes_clear(lower_program *p) {
    for (int i = 0; i < p->nkernels; i++) {
        lower_kernel *k = &p->kernels[i];
        free(k->size_at);
        free(k->size_value);
        k->size_at = NULL;
        k->size_value = NULL;
        k->nsizes = 0;
        for (int j = 0; j < k->nins; j++)
            k->ins[j].sized = 0;
    }
}

typedef struct mark_ctx {
    const bool *mask;
    int64_t n;   /* candidates seen */
    bool count;  /* first walk: count per kernel; second: fill */
    bool ok;
} mark_ctx;

static void mark_one(void *ctx, lower_kernel *k, void *field, int64_t value, lower_ins *imm) {
    mark_ctx *c = ctx;
    bool on = !c->mask || c->mask[c->n];
    c->n++;
    if (!on)
        return;
    if (c->count) {
        k->nsizes++;
        return;
    }
    int j = k->nsizes++;
    k->size_at[j] = field;
    k->size_value[j] = value;
    if (imm)
        imm->sized = j + 1;
}

bool lower_sizes_mark(lower_program *p, lower_plan *plans, const bool *mask) {
    lower_sizes_clear(p);
    mark_ctx c = {mask, 0, true, true};
    walk(p, plans, mark_one, &c);
    for (int i = 0; i < p->nkernels && c.ok; i++) {
        lower_kernel *k = &p->kernels[i];
        if (!k->nsizes)
            continue;
        k->size_at = malloc(sizeof *k->size_at * (size_t)k->nsizes);
        k->size_value = malloc(sizeof *k->size_value * (size_t)k->nsizes);
        c.ok = k->size_at && k->size_value;
        k->nsizes = 0;
    }
    if (!c.ok) {
        lower_sizes_clear(p);
        return false;
    }
    c.n = 0;
    c.count = false;
    walk(p, plans, mark_one, &c);
    for (int i = 0; i < p->nkernels; i++) {
        lower_kernel *k = &p->kernels[i];
        size_t len = strlen(k->name), at = (size_t)k->dims_at, n = (size_t)k->dims_len;
        if (at > len)
            at = len;
        if (n > len - at)
            n = len - at;
        snprintf(k->symbol, sizeof k->symbol, "%.*sn%s", (int)at, k->name, k->name + at + n);
    }
    return true;
}

const char *lower_kernel_symbol(const lower_kernel *k) {
    return k->nsizes ? k->symbol : k->name;
}

int lower_size_index(const lower_kernel *k, const void *field) {
    for (int j = 0; j < k->nsizes; j++)
        if (k->size_at[j] == field)
            return j;
    return -1;
}
