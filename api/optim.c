/* optim.c — optimisers (SGD with momentum and Nesterov, Adam, AdamW),
 * learning-rate schedules and the gradient scaler of f16 training. A step records each update with kiln_assign and
 * computes nothing: the updates are captured with the forward and backward
 * passes at the next sync point and fuse into their kernels. The values that
 * change from step to step (the learning rate, Adam's bias corrections) enter
 * the graph as fresh 0-d bound tensors, never as constants, so that every
 * step has the same structure and replays the program the first one
 * compiled. */
#include <float.h>
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
    OPTIM_UNSCALE,     /* 1 / the loss scale (a step through kiln_grad_scaler_step) */
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
    bool *stepped;        /* whether the last step updated it (a skipped scaled step
                             takes its count back) */
    double unscale;       /* OPTIM_UNSCALE's value during a scaled step */
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
    free(o->stepped);
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
        o->stepped = calloc(k, sizeof *o->stepped);
        o->m = stateful ? calloc(k, sizeof *o->m) : NULL;
        o->v = kind != OPTIM_SGD ? calloc(k, sizeof *o->v) : NULL;
    }
    if (!o || !o->params || !o->cdt || !o->steps || !o->stepped || (stateful && !o->m) ||
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
    case OPTIM_UNSCALE:
        return o->unscale;
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
 * equations, with dampening 0 for SGD), g already in the update's dtype.
 * With ok (a 0-d bool) the parameter and its state keep their values where
 * ok is false: a scaled step whose gradients overflowed changes nothing.
 * Every kiln_assign is the last thing done, so a failure leaves the
 * parameter and its state as they were. */
static kiln_status update(kiln_optim *o, int i, kiln_tensor *g, kiln_tensor *ok) {
    kiln_dtype dt = o->cdt[i];
    int64_t t = o->steps[i] + 1;
    kiln_tensor *p0 = as_dtype(o->params[i], dt), *p = p0;
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
    if (ok) {
        newp = kiln_where(ok, newp, p0);
        if (newm)
            newm = kiln_where(ok, newm, o->m[i]);
        if (newv)
            newv = kiln_where(ok, newv, o->v[i]);
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
    o->stepped[i] = true;
    return KILN_OK;
}

/* The per-step values parameter i's update reads (at most 4). */
static int roles_of(const kiln_optim *o, bool scaled, optim_role *roles) {
    int n = 0;
    if (scaled)
        roles[n++] = OPTIM_UNSCALE;
    if (o->kind == OPTIM_SGD) {
        roles[n++] = OPTIM_LR;
        return n;
    }
    roles[n++] = OPTIM_STEP_SIZE;
    roles[n++] = OPTIM_INV_SQRT_BC;
    if (o->kind == OPTIM_ADAMW && o->weight_decay != 0)
        roles[n++] = OPTIM_DECAY;
    return n;
}

/* 1 (f32, 0-d) when every element of g is finite, else 0: |g| <= the
 * largest finite value is false for infinities and NaN alike. */
static kiln_tensor *all_finite(kiln_tensor *g) {
    double big = kiln_dtype_of(g) == KILN_F64 ? DBL_MAX : FLT_MAX;
    return kiln_min(kiln_cast(kiln_le_scalar(kiln_abs(g), big), KILN_F32), 0, NULL, false);
}

/* A step; with unscale (a scaled step) every gradient is multiplied by it
 * first, the parameters change only if every gradient is finite, and
 * whether they were (1 or 0, f32) is assigned to *finite_state. */
static kiln_status optim_step(kiln_optim *o, const double *unscale, kiln_tensor *finite_state) {
    kiln_ctx *ctx = o->ctx;
    bool scaled = unscale != NULL;
    if (scaled)
        o->unscale = *unscale;
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
        optim_role roles[4];
        for (int r = 0, nr = grads[i] ? roles_of(o, scaled, roles) : 0; r < nr && st == KILN_OK;
             r++)
            st = kiln_error(scalar(o, roles[r], o->cdt[i], o->steps[i] + 1));
    }
    kiln_no_grad_begin(ctx);
    kiln_tensor *finite = NULL, *ok = NULL;
    for (int i = 0; i < o->n && st == KILN_OK; i++) {
        o->stepped[i] = false;
        if (!grads[i])
            continue;
        grads[i] = as_dtype(grads[i], o->cdt[i]);
        if (!scaled)
            continue;
        grads[i] = kiln_mul(grads[i], scalar(o, OPTIM_UNSCALE, o->cdt[i], o->steps[i] + 1));
        if (kiln_numel(grads[i]) > 0) {
            kiln_tensor *f = all_finite(grads[i]);
            finite = finite ? kiln_minimum(finite, f) : f;
        }
    }
    if (st == KILN_OK && scaled) {
        if (!finite)
            finite = kiln_scalar(ctx, KILN_F32, 1);
        ok = kiln_gt_scalar(finite, 0.5);
        if ((st = kiln_error(ok)) == KILN_OK)
            st = kiln_assign(finite_state, finite);
    }
    for (int i = 0; i < o->n && st == KILN_OK; i++)
        if (grads[i])
            st = update(o, i, grads[i], ok);
    kiln_no_grad_end(ctx);
    kiln_scope_end(ctx);
    o->nscalars = 0;
    free(grads);
    return st;
}

kiln_status kiln_optim_step(kiln_optim *o) {
    if (!o)
        return KILN_ERR_ARG;
    return optim_step(o, NULL, NULL);
}

/* ---- the gradient scaler ---- */

/* What a scaled step left to learn: whether optimiser o's gradients were
 * finite, known once the step's sync has run. */
typedef struct scaled_step {
    kiln_optim *o;
    kiln_tensor *finite; /* 0-d f32 state, assigned by every scaled step of o */
    bool pending;        /* a step was recorded and its verdict not yet read */
} scaled_step;

struct kiln_grad_scaler {
    kiln_ctx *ctx;
    double scale, growth, backoff;
    int64_t interval, tracker; /* finite steps since the scale last changed */
    int64_t skipped;
    int n, cap;
    scaled_step *steps; /* one per optimiser stepped through it */
};

kiln_status kiln_grad_scaler_new(kiln_ctx *ctx, double init_scale, double growth_factor,
                                 double backoff_factor, int64_t growth_interval,
                                 kiln_grad_scaler **out) {
    if (out)
        *out = NULL;
    if (!ctx)
        return KILN_ERR_ARG;
    if (!out) {
        note(ctx, "kiln_grad_scaler_new: NULL result");
        return KILN_ERR_ARG;
    }
    if (!(isfinite(init_scale) && init_scale > 0) ||
        !(isfinite(growth_factor) && growth_factor > 1) ||
        !(backoff_factor > 0 && backoff_factor < 1) || growth_interval < 1) {
        note(ctx,
             "kiln_grad_scaler_new: init_scale %g must be finite and > 0, growth_factor %g "
             "finite and > 1, backoff_factor %g in (0, 1), growth_interval %lld >= 1",
             init_scale, growth_factor, backoff_factor, (long long)growth_interval);
        return KILN_ERR_ARG;
    }
    kiln_grad_scaler *s = calloc(1, sizeof *s);
    if (!s) {
        note(ctx, "kiln_grad_scaler_new: out of memory");
        return KILN_ERR_OOM;
    }
    *s = (kiln_grad_scaler){.ctx = ctx, .scale = init_scale, .growth = growth_factor,
                            .backoff = backoff_factor, .interval = growth_interval};
    *out = s;
    return KILN_OK;
}

void kiln_grad_scaler_free(kiln_grad_scaler *s) {
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        kiln_release(s->steps[i].finite);
    free(s->steps);
    free(s);
}

/* The value of a 0-d f32 verdict: read from its buffer when its sync has
 * run, which needs no sync of its own (kiln_item would first realize every
 * pending assignment: a forward pass's running statistics, recorded before
 * the loss is scaled, would then be computed apart from it). */
static kiln_status read_verdict(kiln_tensor *t, double *v, char *msg, size_t cap) {
    kiln_status st;
    if (!t->node || !t->node->buf) {
        if ((st = kiln_item(t, v)) != KILN_OK)
            snprintf(msg, cap, "%s", kiln_error_message(t));
        return st;
    }
    float f;
    if ((st = api_read(t->node, 0, &f, sizeof f, msg, cap)) == KILN_OK)
        *v = f;
    return st;
}

/* Reads the verdicts of the steps recorded since the last settle (their
 * sync has normally run already: the caller read the loss), takes back the
 * step counts of the optimisers whose gradients overflowed, and moves the
 * scale as PyTorch's GradScaler.update does: backoff on any overflow,
 * growth after `interval` finite steps in a row. */
static kiln_status settle(kiln_grad_scaler *s, const char *op) {
    bool any = false, overflow = false;
    for (int i = 0; i < s->n; i++) {
        scaled_step *e = &s->steps[i];
        if (!e->pending)
            continue;
        double v;
        char msg[256];
        kiln_status st = read_verdict(e->finite, &v, msg, sizeof msg);
        if (st != KILN_OK) {
            note(s->ctx, "%s: reading whether the last step's gradients were finite: %s", op,
                 msg);
            return st;
        }
        e->pending = false;
        any = true;
        if (v == 1)
            continue;
        overflow = true;
        for (int j = 0; j < e->o->n; j++)
            if (e->o->stepped[j]) {
                e->o->steps[j]--;
                e->o->stepped[j] = false;
            }
    }
    if (!any)
        return KILN_OK;
    if (overflow) {
        s->scale *= s->backoff;
        s->tracker = 0;
        s->skipped++;
    } else if (++s->tracker == s->interval) {
        double grown = s->scale * s->growth;
        if (isfinite(grown))
            s->scale = grown;
        s->tracker = 0;
    }
    return KILN_OK;
}

kiln_tensor *kiln_grad_scaler_scale(kiln_grad_scaler *s, kiln_tensor *loss) {
    if (!s)
        return NULL;
    if (!loss)
        return api_fail(s->ctx, KILN_ERR_ARG, "kiln_grad_scaler_scale: NULL loss");
    if (kiln_error(loss) != KILN_OK)
        return loss;
    kiln_status st = settle(s, "kiln_grad_scaler_scale");
    if (st != KILN_OK)
        return api_fail(s->ctx, st, "%s", s->ctx->last_error);
    kiln_dtype dt = kiln_dtype_of(loss);
    if (!graph_dtype_is_float(dt))
        return api_fail(s->ctx, KILN_ERR_DTYPE,
                        "kiln_grad_scaler_scale: the loss is %s of shape %s, not floating point",
                        graph_dtype_name(dt), api_shape_str(loss->node));
    /* A half loss is scaled in f32: 65536 itself is out of f16's range. */
    kiln_dtype sdt = dt == KILN_F64 ? KILN_F64 : KILN_F32;
    double v = s->scale;
    float f = (float)v;
    kiln_tensor *k = kiln_from_data(s->ctx, sdt, 0, NULL, sdt == KILN_F64 ? (void *)&v : &f);
    return kiln_mul(as_dtype(loss, sdt), k);
}

kiln_status kiln_grad_scaler_step(kiln_grad_scaler *s, kiln_optim *o) {
    if (!s)
        return KILN_ERR_ARG;
    if (!o || o->ctx != s->ctx) {
        note(s->ctx, "kiln_grad_scaler_step: the optimiser is %s",
             !o ? "NULL" : "of another context");
        return KILN_ERR_ARG;
    }
    kiln_status st = settle(s, "kiln_grad_scaler_step");
    if (st != KILN_OK)
        return st;
    int at = 0;
    while (at < s->n && s->steps[at].o != o)
        at++;
    if (at == s->n) {
        if (s->n == s->cap) {
            int cap = s->cap ? 2 * s->cap : 2;
            scaled_step *e = realloc(s->steps, sizeof *e * (size_t)cap);
            if (!e) {
                note(s->ctx, "kiln_grad_scaler_step: out of memory");
                return KILN_ERR_OOM;
            }
            s->steps = e;
            s->cap = cap;
        }
        float one = 1;
        kiln_tensor *f = pin(kiln_from_data(s->ctx, KILN_F32, 0, NULL, &one));
        if ((st = kiln_error(f)) != KILN_OK) {
            note(s->ctx, "kiln_grad_scaler_step: %s", kiln_error_message(f));
            kiln_release(f);
            return st;
        }
        s->steps[s->n++] = (scaled_step){o, f, false};
    }
    double unscale = 1 / s->scale;
    st = optim_step(o, &unscale, s->steps[at].finite);
    s->steps[at].pending = st == KILN_OK;
    return st;
}

kiln_status kiln_grad_scaler_get_scale(kiln_grad_scaler *s, double *scale) {
    if (!s)
        return KILN_ERR_ARG;
    if (!scale) {
        note(s->ctx, "kiln_grad_scaler_get_scale: NULL result");
        return KILN_ERR_ARG;
    }
    kiln_status st = settle(s, "kiln_grad_scaler_get_scale");
    *scale = st == KILN_OK ? s->scale : NAN;
    return st;
}

kiln_status kiln_grad_scaler_skipped(kiln_grad_scaler *s, int64_t *skipped) {
    if (!s)
        return KILN_ERR_ARG;
    if (!skipped) {
        note(s->ctx, "kiln_grad_scaler_skipped: NULL result");
        return KILN_ERR_ARG;
    }
    kiln_status st = settle(s, "kiln_grad_scaler_skipped");
    *skipped = st == KILN_OK ? s->skipped : -1;
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
