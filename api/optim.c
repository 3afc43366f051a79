/* optim.c — optimisers (SGD with momentum and Nesterov, Adam, AdamW) and
 * learning-rate schedules. A step records each update with kiln_assign and
 * computes nothing: the updates are captured with the forward and backward
 * passes at the next sync point and fuse into their kernels. The values that
 * change from step to step (the learning rate, Adam's bias corrections) enter
 * the graph as fresh 0-d bound tensors, never as constants, so that every
 * step has the same structure and replays the program the first one
 * compiled. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

typedef enum optim_kind { OPTIM_SGD, OPTIM_ADAM, OPTIM_ADAMW } optim_kind;

/* The per-step values, each a 0-d tensor shared by the parameters that
 * need it with the same dtype and step count. */
typedef enum optim_role {
    OPTIM_LR,          /* lr */
    OPTIM_STEP_SIZE,   /* lr / (1 - beta1^t) */
    OPTIM_INV_SQRT_BC, /* 1 / sqrt(1 - beta2^t) */
    OPTIM_DECAY,       /* 1 - lr * weight_decay (AdamW) */
} optim_role;

typedef struct optim_scalar {
    optim_role role;
    kiln_dtype dtype;
    int64_t step;
    kiln_tensor *t;
} optim_scalar;

struct kiln_optim {
    kiln_ctx *ctx;
    optim_kind kind;
    double lr, momentum, weight_decay, beta1, beta2, eps;
    bool nesterov;
    int n;
    kiln_tensor **params; /* the caller's handles: steps assign to them */
    kiln_dtype *cdt;      /* the dtype each update computes in */
    int64_t *steps;       /* updates applied to each parameter */
    kiln_tensor **m, **v; /* momentum / first and second moments (or NULL) */
    optim_scalar *scalars; /* this step's */
    int nscalars, capscalars;
};

static void note(kiln_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(kiln_ctx *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, ap);
    va_end(ap);
}

/* A handle that no scope releases: the optimiser owns it until freed. */
static kiln_tensor *pin(kiln_tensor *t) {
    if (t)
        t->depth = 0;
    return t;
}

/* A realized tensor of zeros (a bound input, like the state it stands for
 * on every later step, so the first step has the same structure too). */
static kiln_tensor *zeros_like(kiln_ctx *ctx, const kiln_tensor *p, kiln_dtype dt) {
    const graph_node *x = p->node;
    kiln_status st;
    char msg[512];
    graph_node *node =
        api_data_node(ctx, "kiln_optim", dt, x->ndim, x->shape, NULL, &st, msg, sizeof msg);
    if (!node)
        return NULL;
    kiln_tensor *t = api_wrap(ctx, node, "kiln_optim");
    if (t && !t->node) {
        kiln_release(t);
        return NULL;
    }
    return pin(t);
}

void kiln_optim_free(kiln_optim *o) {
    if (!o)
        return;
    for (int i = 0; i < o->n; i++) {
        if (o->m)
            kiln_release(o->m[i]);
        if (o->v)
            kiln_release(o->v[i]);
    }
    free(o->m);
    free(o->v);
    free(o->params);
    free(o->cdt);
    free(o->steps);
    free(o->scalars);
    free(o);
}

static bool nonneg(double x) { return isfinite(x) && x >= 0; }

/* The argument checks of the constructors: KILN_OK, or the status with the
 * message noted in ctx. */
static kiln_status check_args(const char *op, kiln_ctx *ctx, int n, kiln_tensor *const *params,
                              double lr, double momentum, double weight_decay, bool nesterov,
                              double beta1, double beta2, double eps) {
    if (n < 0 || (n > 0 && !params)) {
        note(ctx, "%s: %d parameters%s", op, n, n < 0 ? "" : " but the array is NULL");
        return KILN_ERR_ARG;
    }
    if (!nonneg(lr) || !nonneg(weight_decay) || !nonneg(momentum) || !nonneg(eps) ||
        !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1)) {
        note(ctx,
             "%s: lr %g, weight_decay %g, momentum %g and eps %g must be finite and >= 0, "
             "beta1 %g and beta2 %g in [0, 1)",
             op, lr, weight_decay, momentum, eps, beta1, beta2);
        return KILN_ERR_ARG;
    }
    if (nesterov && momentum == 0) {
        note(ctx, "%s: Nesterov momentum needs a momentum > 0", op);
        return KILN_ERR_ARG;
    }
    for (int i = 0; i < n; i++) {
        const kiln_tensor *p = params[i];
        if (!p || !p->node || p->ctx != ctx) {
            note(ctx, "%s: parameter %d is %s", op, i,
                 !p ? "NULL" : !p->node ? "in an error state" : "of a different context");
            return p && !p->node ? p->err : KILN_ERR_ARG;
        }
        if (!graph_dtype_is_float(p->node->dtype)) {
            note(ctx, "%s: parameter %d is %s of shape %s, not floating point", op, i,
                 graph_dtype_name(p->node->dtype), api_shape_str(p->node));
            return KILN_ERR_DTYPE;
        }
        for (int j = 0; j < i; j++)
            if (params[j] == p) {
                note(ctx, "%s: parameters %d and %d are the same tensor", op, j, i);
                return KILN_ERR_ARG;
            }
    }
    return KILN_OK;
}

static kiln_status optim_new(const char *op, optim_kind kind, kiln_ctx *ctx, int n,
                             kiln_tensor *const *params, double lr, double momentum,
                             double weight_decay, bool nesterov, double beta1, double beta2,
                             double eps, kiln_optim **out) {
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERR_ARG;
    if (!out) {
        note(ctx, "%s: NULL result", op);
        return KILN_ERR_ARG;
    }
    kiln_status st = check_args(op, ctx, n, params, lr, momentum, weight_decay, nesterov, beta1,
                                beta2, eps);
    if (st != KILN_OK)
        return st;
    kiln_optim *o = calloc(1, sizeof *o);
    size_t k = (size_t)(n ? n : 1);
    bool stateful = kind != OPTIM_SGD || momentum != 0;
    if (o) {
        o->params = malloc(sizeof *o->params * k);
        o->cdt = malloc(sizeof *o->cdt * k);
        o->steps = calloc(k, sizeof *o->steps);
        o->m = stateful ? calloc(k, sizeof *o->m) : NULL;
        o->v = kind != OPTIM_SGD ? calloc(k, sizeof *o->v) : NULL;
    }
    if (!o || !o->params || !o->cdt || !o->steps || (stateful && !o->m) ||
        (kind != OPTIM_SGD && !o->v)) {
        kiln_optim_free(o);
        note(ctx, "%s: out of memory", op);
        return KILN_ERR_OOM;
    }
    o->ctx = ctx;
    o->kind = kind;
    o->lr = lr;
    o->momentum = momentum;
    o->weight_decay = weight_decay;
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->nesterov = nesterov;
    o->n = n;
    for (int i = 0; i < n; i++) {
        o->params[i] = params[i];
        /* Half-precision parameters are updated, and their state kept, in
         * f32, so that small updates are not rounded away. */
        o->cdt[i] = params[i]->node->dtype == KILN_F64 ? KILN_F64 : KILN_F32;
        bool ok = !o->m || (o->m[i] = zeros_like(ctx, params[i], o->cdt[i]));
        ok = ok && (!o->v || (o->v[i] = zeros_like(ctx, params[i], o->cdt[i])));
        if (!ok) {
            kiln_optim_free(o);
            note(ctx, "%s: out of memory allocating the optimiser's state", op);
            return KILN_ERR_OOM;
        }
    }
    *out = o;
    return KILN_OK;
}

kiln_status kiln_sgd_new(kiln_ctx *ctx, int n, kiln_tensor *const *params, double lr,
                         double momentum, double weight_decay, bool nesterov, kiln_optim **out) {
    return optim_new("kiln_sgd_new", OPTIM_SGD, ctx, n, params, lr, momentum, weight_decay,
                     nesterov, 0, 0, 0, out);
}

kiln_status kiln_adam_new(kiln_ctx *ctx, int n, kiln_tensor *const *params, double lr,
                          double beta1, double beta2, double eps, double weight_decay,
                          kiln_optim **out) {
    return optim_new("kiln_adam_new", OPTIM_ADAM, ctx, n, params, lr, 0, weight_decay, false,
                     beta1, beta2, eps, out);
}

kiln_status kiln_adamw_new(kiln_ctx *ctx, int n, kiln_tensor *const *params, double lr,
                           double beta1, double beta2, double eps, double weight_decay,
                           kiln_optim **out) {
    return optim_new("kiln_adamw_new", OPTIM_ADAMW, ctx, n, params, lr, 0, weight_decay, false,
                     beta1, beta2, eps, out);
}

kiln_status kiln_optim_set_lr(kiln_optim *o, double lr) {
    if (!o)
        return KILN_ERR_ARG;
    if (!nonneg(lr)) {
        note(o->ctx, "kiln_optim_set_lr: lr %g must be finite and >= 0; kept %g", lr, o->lr);
        return KILN_ERR_ARG;
    }
    o->lr = lr;
    return KILN_OK;
}

kiln_status kiln_optim_lr(const kiln_optim *o, double *lr) {
    if (!o)
        return KILN_ERR_ARG;
    if (!lr) {
        note(o->ctx, "kiln_optim_lr: NULL result");
        return KILN_ERR_ARG;
    }
    *lr = o->lr;
    return KILN_OK;
}

void kiln_optim_zero_grad(kiln_optim *o) {
    for (int i = 0; o && i < o->n; i++)
        kiln_zero_grad(o->params[i]);
}

/* ---- one step ---- */

static double role_value(const kiln_optim *o, optim_role role, int64_t t) {
    switch (role) {
    case OPTIM_LR:
        return o->lr;
    case OPTIM_STEP_SIZE:
        return o->lr / (1 - pow(o->beta1, (double)t));
    case OPTIM_INV_SQRT_BC:
        return 1 / sqrt(1 - pow(o->beta2, (double)t));
    case OPTIM_DECAY:
        return 1 - o->lr * o->weight_decay;
    }
    return NAN;
}

/* This step's 0-d tensor for a role: a new bound input each step, whose
 * buffer holds the value, so the structure of the graph never depends on it. */
static kiln_tensor *scalar(kiln_optim *o, optim_role role, kiln_dtype dt, int64_t t) {
    for (int i = 0; i < o->nscalars; i++)
        if (o->scalars[i].role == role && o->scalars[i].dtype == dt && o->scalars[i].step == t)
            return o->scalars[i].t;
    if (o->nscalars == o->capscalars) {
        int cap = o->capscalars ? 2 * o->capscalars : 8;
        optim_scalar *s = realloc(o->scalars, sizeof *s * (size_t)cap);
        if (!s)
            return api_fail(o->ctx, KILN_ERR_OOM, "kiln_optim_step: out of memory");
        o->scalars = s;
        o->capscalars = cap;
    }
    double v = role_value(o, role, t);
    float f = (float)v;
    kiln_tensor *x = kiln_from_data(o->ctx, dt, 0, NULL, dt == KILN_F64 ? (void *)&v : &f);
    o->scalars[o->nscalars++] = (optim_scalar){role, dt, t, x};
    return x;
}

static kiln_tensor *as_dtype(kiln_tensor *t, kiln_dtype dt) {
    return kiln_dtype_of(t) == dt ? t : kiln_cast(t, dt);
}

/* Records the update of parameter i from its gradient g (PyTorch's
 * equations, with dampening 0 for SGD). Every kiln_assign is the last thing
 * done, so a failure leaves the parameter and its state as they were. */
static kiln_status update(kiln_optim *o, int i, kiln_tensor *g) {
    kiln_dtype dt = o->cdt[i];
    int64_t t = o->steps[i] + 1;
    kiln_tensor *p = as_dtype(o->params[i], dt);
    g = as_dtype(g, dt);
    kiln_tensor *newp, *newm = NULL, *newv = NULL;
    if (o->weight_decay != 0 && o->kind != OPTIM_ADAMW)
        g = kiln_add(g, api_mul_literal(p, o->weight_decay));
    if (o->kind == OPTIM_SGD) {
        if (o->m) {
            newm = kiln_add(api_mul_literal(o->m[i], o->momentum), g);
            g = o->nesterov ? kiln_add(g, api_mul_literal(newm, o->momentum)) : newm;
        }
        newp = kiln_sub(p, kiln_mul(g, scalar(o, OPTIM_LR, dt, t)));
    } else {
        newm = kiln_add(api_mul_literal(o->m[i], o->beta1), api_mul_literal(g, 1 - o->beta1));
        newv = kiln_add(api_mul_literal(o->v[i], o->beta2),
                        api_mul_literal(kiln_mul(g, g), 1 - o->beta2));
        kiln_tensor *denom = api_add_literal(
            kiln_mul(kiln_sqrt(newv), scalar(o, OPTIM_INV_SQRT_BC, dt, t)), o->eps);
        kiln_tensor *step = kiln_mul(kiln_div(newm, denom), scalar(o, OPTIM_STEP_SIZE, dt, t));
        if (o->kind == OPTIM_ADAMW && o->weight_decay != 0)
            p = kiln_mul(p, scalar(o, OPTIM_DECAY, dt, t));
        newp = kiln_sub(p, step);
    }
    kiln_status st = kiln_error(newp);
    if (st == KILN_OK && newm)
        st = kiln_error(newm);
    if (st == KILN_OK && newv)
        st = kiln_error(newv);
    if (st != KILN_OK)
        return st;
    if (newm && (st = kiln_assign(o->m[i], newm)) != KILN_OK)
        return st;
    if (newv && (st = kiln_assign(o->v[i], newv)) != KILN_OK)
        return st;
    if ((st = kiln_assign(o->params[i], newp)) != KILN_OK)
        return st;
    o->steps[i] = t;
    return KILN_OK;
}

/* The per-step values parameter i's update reads. */
static int roles_of(const kiln_optim *o, optim_role *roles) {
    if (o->kind == OPTIM_SGD) {
        roles[0] = OPTIM_LR;
        return 1;
    }
    roles[0] = OPTIM_STEP_SIZE;
    roles[1] = OPTIM_INV_SQRT_BC;
    roles[2] = OPTIM_DECAY;
    return o->kind == OPTIM_ADAMW && o->weight_decay != 0 ? 3 : 2;
}

kiln_status kiln_optim_step(kiln_optim *o) {
    if (!o)
        return KILN_ERR_ARG;
    kiln_ctx *ctx = o->ctx;
    kiln_tensor **grads = calloc((size_t)(o->n ? o->n : 1), sizeof *grads);
    if (!grads) {
        note(ctx, "kiln_optim_step: out of memory");
        return KILN_ERR_OOM;
    }
    kiln_scope_begin(ctx);
    kiln_status st = KILN_OK;
    /* Every gradient is checked before any parameter changes. */
    for (int i = 0; i < o->n && st == KILN_OK; i++) {
        grads[i] = kiln_grad(o->params[i]);
        if (grads[i] && (st = kiln_error(grads[i])) != KILN_OK)
            note(ctx, "kiln_optim_step: the gradient of parameter %d: %s", i,
                 kiln_error_message(grads[i]));
    }
    /* The step's values are bound data, made before the no-grad scope:
     * nothing flows through them, so there is nothing to detach. */
    o->nscalars = 0;
    for (int i = 0; i < o->n && st == KILN_OK; i++) {
        optim_role roles[3];
        for (int r = 0, nr = grads[i] ? roles_of(o, roles) : 0; r < nr && st == KILN_OK; r++)
            st = kiln_error(scalar(o, roles[r], o->cdt[i], o->steps[i] + 1));
    }
    kiln_no_grad_begin(ctx);
    for (int i = 0; i < o->n && st == KILN_OK; i++)
        if (grads[i])
            st = update(o, i, grads[i]);
    kiln_no_grad_end(ctx);
    kiln_scope_end(ctx);
    o->nscalars = 0;
    free(grads);
    return st;
}

/* ---- schedules ---- */

double kiln_lr_step(double base, int64_t t, int64_t step_size, double gamma) {
    if (step_size < 1)
        return NAN;
    return base * pow(gamma, (double)((t < 0 ? 0 : t) / step_size));
}

double kiln_lr_cosine(double base, int64_t t, int64_t total, double min_lr) {
    if (total < 1)
        return NAN;
    if (t >= total)
        return min_lr;
    double frac = (double)(t < 0 ? 0 : t) / (double)total;
    return min_lr + (base - min_lr) * 0.5 * (1 + cos(acos(-1.0) * frac));
}

double kiln_lr_warmup_linear(double base, int64_t t, int64_t warmup) {
    if (t >= warmup)
        return base;
    return base * (double)((t < 0 ? 0 : t) + 1) / (double)warmup;
}
