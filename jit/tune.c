/* tune.c — KILN_TUNE=1: a kernel's plan chosen by timing its variants.
 *
 * lower/ decides what may vary (lower_plan_variants: a CPU matmul's cache
 * blocks, register tile, vector width and packing of A; fused attention's
 * blocks); this file only measures. Every
 * variant of every kernel still to tune goes into one program, compiled
 * once (the compiler's parallel parts spread them over the cores); each
 * then runs on the kernel's real shapes, in rounds that alternate the
 * variants (so that a burst of load on a shared machine slows them all
 * alike), and the fastest run of each is compared. The winner is stored in
 * the kernel cache under the kernel's own text, so a new process, or
 * another graph holding the same kernel, takes it without timing anything;
 * the program then compiled with it is cached like any other.
 *
 * Why it pays: the heuristics' blocks are one rule for every shape. A
 * transformer's down-projection (2048 x 2048 @ 2048 x 512 with bias and
 * residual) ran its heuristic blocks (171 x 512: twelve tasks, each packing
 * all of B) at 13.7-14.7 ms; 342 x 256 or 684 x 256 blocks ran it in
 * 11.7-12.6 ms (measured alternately, same process, this machine). */
#include "jit/tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/profile.h"

bool jit_tune_wanted(void) {
    const char *v = getenv("KILN_TUNE");
    return v && !strcmp(v, "1");
}

/* A stored choice: what lower_plan_variants varies (lower_plan_blocking),
 * after a tag. */
enum { REC_TAG = 0x6b696c6e74756e33LL /* "kilntun3" */, REC_LEN = 1 + LOWER_BLOCKING_LEN };

static void rec_of(const lower_plan *pl, int64_t *r) {
    r[0] = REC_TAG;
    lower_plan_blocking(pl, r + 1);
}

/* Takes a variant's blocking (and the grid that follows it). */
static void take(lower_plan *pl, const lower_plan *var) {
    pl->mm = var->mm;
    pl->att = var->att;
    pl->grid = var->grid;
    pl->parallel = var->parallel;
}

/* The variant a stored record names, or -1. */
static int rec_find(const int64_t *r, size_t n, const lower_plan *vars, int nvars) {
    if (n != sizeof(int64_t) * REC_LEN || r[0] != REC_TAG)
        return -1;
    for (int v = 0; v < nvars; v++) {
        int64_t mine[REC_LEN];
        rec_of(&vars[v], mine);
        if (!memcmp(mine, r, sizeof mine))
            return v;
    }
    return -1;
}

/* A kernel still to time: its variants, where they sit in the timing
 * program, and its choice's key. */
typedef struct pending {
    int kernel;
    int nvars, first;
    lower_plan vars[LOWER_PLAN_VARIANTS_MAX];
    double best[LOWER_PLAN_VARIANTS_MAX]; /* ms, fastest run of each */
    bool differs[LOWER_PLAN_VARIANTS_MAX]; /* its outputs were not the heuristics' plan's */
    cache_key key;
} pending;

/* Scratch buffers put into nodes for the timing, and what they held. */
typedef struct lent {
    graph_node *node;
    graph_buffer *was;
} lent;

static uint64_t mix(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Host bytes for a buffer of n elements of dt: floats uniform in about
 * [-2, 2) (never subnormal, so that no variant meets an assist the real
 * data would not), integers and booleans 0 (a valid index everywhere). */
static void *random_bytes(kiln_dtype dt, int64_t n, uint64_t seed) {
    size_t es = graph_dtype_size(dt);
    unsigned char *h = calloc((size_t)(n > 0 ? n : 1), es);
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (int64_t i = 0; h && i < n; i++) {
        uint64_t r = mix(&s);
        double x = ((double)(r >> 11) * 0x1p-53) * 4.0 - 2.0;
        if (dt == KILN_F32) {
            float f = (float)x;
            memcpy(h + i * 4, &f, 4);
        } else if (dt == KILN_F64) {
            memcpy(h + i * 8, &x, 8);
        } else if (dt == KILN_F16 || dt == KILN_BF16) {
            /* 1 <= |x| < 2, a random mantissa and sign */
            uint16_t b = dt == KILN_F16 ? (uint16_t)(0x3c00 | (r & 0x3ff))
                                        : (uint16_t)(0x3f80 | (r & 0x7f));
            b |= (uint16_t)((r >> 20 & 1) << 15);
            memcpy(h + i * 2, &b, 2);
        }
    }
    return h;
}

/* Gives node a scratch buffer of its size (random data when fill); false
 * when the device has no memory for it. */
static bool lend(jit_device *d, graph_node *x, bool fill, lent *l, int *nl) {
    int64_t n = graph_numel(x);
    size_t bytes = (size_t)(n > 0 ? n : 1) * graph_dtype_size(x->dtype);
    graph_buffer *b = NULL;
    char msg[256];
    if (d->ops->alloc(d, bytes, &b, msg, sizeof msg) != KILN_OK)
        return false;
    if (fill) {
        void *h = random_bytes(x->dtype, n, (uint64_t)*nl + 1);
        kiln_status st = h ? d->ops->copy_in(d, b, 0, h, bytes, msg, sizeof msg) : KILN_ERR_OOM;
        free(h);
        if (st != KILN_OK) {
            graph_buffer_unref(b);
            return false;
        }
    }
    l[*nl].node = x;
    l[*nl].was = x->buf;
    (*nl)++;
    x->buf = b;
    return true;
}

static void give_back(lent *l, int nl) {
    for (int i = nl - 1; i >= 0; i--) {
        graph_buffer_unref(l[i].node->buf);
        l[i].node->buf = l[i].was;
    }
}

/* Value i of n elements of dt at p, as a double. */
static double value_at(kiln_dtype dt, const unsigned char *p, int64_t i) {
    uint16_t h;
    switch (dt) {
    case KILN_F32: {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    case KILN_F64: {
        double x;
        memcpy(&x, p + i * 8, 8);
        return x;
    }
    case KILN_F16:
        memcpy(&h, p + i * 2, 2);
        return graph_f16_to_f32(h);
    default: /* KILN_BF16 */
        memcpy(&h, p + i * 2, 2);
        return graph_bf16_to_f32(h);
    }
}

/* Whether a variant's outputs (b) are the heuristics' plan's (a). Products
 * with the same k blocks sum each output's products in the same order (mc,
 * nc, the register tile and A's packing change only which thread computes
 * what, and when), so they must give the same bits. Other k blocks add the
 * blocks' partial sums into the C tile, and attention's other tiles of keys
 * rescale its running sums at other places, which rounds otherwise: floats
 * within 2^-10 (f64: 2^-36; halves: 2^-5) of the output's largest
 * magnitude, far above such rounding and far below a wrong or missing
 * product. Integers always exactly. One that is not is a renderer's bug,
 * and never chosen. */
static bool same_results(const lower_kernel *k, bool same_order, const unsigned char *a,
                         const unsigned char *b) {
    size_t at = 0;
    for (int o = 0; o < k->nouts; o++) {
        const graph_node *x = k->outs[o];
        size_t n = x->buf->nbytes;
        kiln_dtype dt = x->dtype;
        bool fl = dt == KILN_F32 || dt == KILN_F64 || dt == KILN_F16 || dt == KILN_BF16;
        if (same_order || !fl) {
            if (memcmp(a + at, b + at, n))
                return false;
        } else {
            int64_t cnt = (int64_t)(n / graph_dtype_size(dt));
            double big = 0, tol = dt == KILN_F64 ? 0x1p-36 : dt == KILN_F32 ? 0x1p-10 : 0x1p-5;
            for (int64_t i = 0; i < cnt; i++) {
                double y = fabs(value_at(dt, a + at, i));
                big = y > big && y < INFINITY ? y : big;
            }
            for (int64_t i = 0; i < cnt; i++) {
                double y = value_at(dt, a + at, i), z = value_at(dt, b + at, i);
                if (isnan(y) != isnan(z) || (!isnan(y) && !(y == z || fabs(y - z) <= tol * big)))
                    return false;
            }
        }
        at += n;
    }
    return true;
}

/* Runs kernel j of the timing program once; its time in *ms. */
static bool timed_run(jit_device *d, const jit_code *code, const lower_program *tp, int j,
                      graph_node *const *nodes, double *ms, char *why, size_t cap) {
    double t0 = jit_now_ms();
    bool ok = d->ops->launch(d, code, j, &tp->kernels[j], nodes, why, cap) == KILN_OK &&
              d->ops->sync(d, why, cap) == KILN_OK;
    *ms = jit_now_ms() - t0;
    return ok;
}

/* Times every variant of every pending kernel (compiled together as
 * timing program tp, whose kernel j is variant j - first of its kernel)
 * into best[]. false (with why) when the program cannot be built or run. */
static bool time_variants(jit_device *d, const lower_program *p, pending *pd, int npd,
                          lower_program *tp, lower_plan *tplans, int *differing, char *why,
                          size_t cap) {
    char *text = NULL;
    if (d->ops->render(d, tp, tplans, &text, why, cap) != KILN_OK)
        return false;
    jit_code *code = NULL;
    bool from_disk = false;
    kiln_status st = d->ops->compile(d, tp, tplans, text, jit_text_key(d, "kiln tune program", text),
                                     &code, &from_disk, why, cap);
    free(text);
    if (st != KILN_OK)
        return false;
    bool ok = true;
    for (int q = 0; q < npd && ok; q++) {
        const lower_kernel *k = &p->kernels[pd[q].kernel];
        int nn = k->nouts + k->ninputs;
        graph_node **nodes = malloc(sizeof *nodes * (size_t)nn);
        lent *l = malloc(sizeof *l * (size_t)nn);
        int nl = 0;
        ok = nodes && l;
        /* outputs always into scratch (never into a buffer a node holds);
         * inputs read in place where they hold data */
        for (int o = 0; ok && o < k->nouts; o++)
            ok = lend(d, nodes[o] = k->outs[o], false, l, &nl);
        for (int in = 0; ok && in < k->ninputs; in++)
            if (!(nodes[k->nouts + in] = k->inputs[in])->buf)
                ok = lend(d, k->inputs[in], true, l, &nl);
        if (!ok)
            snprintf(why, cap, "no memory for scratch buffers");
        /* a first run of each (code and data into cache, pages touched),
         * its outputs compared with the heuristics' plan's; then rounds
         * over all of them until about 0.3 s has gone, 2 to 8 */
        size_t obytes = 0;
        for (int o = 0; o < k->nouts; o++)
            obytes += k->outs[o]->buf->nbytes;
        unsigned char *first = ok ? malloc(obytes ? obytes : 1) : NULL;
        unsigned char *out = ok ? malloc(obytes ? obytes : 1) : NULL;
        if (ok && !(ok = first && out))
            snprintf(why, cap, "no memory to compare the variants' outputs");
        double round = 0;
        for (int v = 0; ok && v < pd[q].nvars; v++) {
            ok = timed_run(d, code, tp, pd[q].first + v, nodes, &pd[q].best[v], why, cap);
            round += pd[q].best[v];
            size_t at = 0;
            for (int o = 0; ok && o < k->nouts; o++) {
                const graph_buffer *b = k->outs[o]->buf;
                ok = d->ops->copy_out(d, (v ? out : first) + at, b, 0, b->nbytes, why, cap) ==
                     KILN_OK;
                at += b->nbytes;
            }
            bool same_order = k->kind == LOWER_MATMUL && pd[q].vars[v].mm.kc == pd[q].vars[0].mm.kc;
            if (ok && v && !same_results(k, same_order, first, out)) {
                pd[q].differs[v] = true;
                (*differing)++;
            }
        }
        free(first);
        free(out);
        int rounds = round > 0 ? (int)(300.0 / round) : 8;
        rounds = rounds < 2 ? 2 : rounds > 8 ? 8 : rounds;
        for (int r = 0; ok && r < rounds; r++)
            for (int v = 0; ok && v < pd[q].nvars; v++) {
                double t;
                ok = timed_run(d, code, tp, pd[q].first + v, nodes, &t, why, cap);
                if (t < pd[q].best[v] || pd[q].differs[v])
                    pd[q].best[v] = pd[q].differs[v] ? INFINITY : t;
            }
        give_back(l, nl);
        free(nodes);
        free(l);
    }
    d->ops->code_free(code);
    return ok;
}

/* Keeps a choice in memory, and on disk unless it came from there. */
static void store(cache *c, cache_key key, const lower_plan *pl, bool disk) {
    int64_t *r = malloc(sizeof *r * REC_LEN);
    if (!r)
        return;
    rec_of(pl, r);
    if (disk)
        cache_disk_put(c, key, "tune", r, sizeof *r * REC_LEN);
    cache_mem_put(c, key, r, free); /* which frees r if it cannot keep it */
}

void jit_tune_program(jit_device *d, cache *c, int debug, const lower_program *p,
                      lower_plan *plans, int64_t *tuned, int64_t *stored) {
    pending *pd = calloc((size_t)(p->nkernels ? p->nkernels : 1), sizeof *pd);
    int *twins = malloc(sizeof *twins * (size_t)(p->nkernels ? p->nkernels : 1));
    if (!pd || !twins) {
        free(pd);
        free(twins);
        return;
    }
    for (int i = 0; i < p->nkernels; i++)
        twins[i] = -1;
    int npd = 0, total = 0;
    char why[512] = "";
    for (int i = 0; i < p->nkernels; i++) {
        pending *q = &pd[npd];
        q->nvars = lower_plan_variants(&p->kernels[i], &d->target, &plans[i], q->vars,
                                       LOWER_PLAN_VARIANTS_MAX);
        if (q->nvars < 2)
            continue;
        /* the choice's key: the kernel alone under its heuristics' plan,
         * named alike wherever it sits in a program (its name ends in its
         * place there) */
        lower_kernel alone = p->kernels[i];
        snprintf(alone.name, sizeof alone.name, "kernel");
        lower_program one = {1, &alone};
        char *text = NULL;
        if (d->ops->render(d, &one, &plans[i], &text, why, sizeof why) != KILN_OK)
            continue; /* the program's own render will say why */
        q->key = jit_text_key(d, "kiln tune", text);
        free(text);
        const int64_t *mem = cache_mem_get(c, q->key);
        void *disk = NULL;
        size_t n = 0;
        int v = mem ? rec_find(mem, sizeof(int64_t) * REC_LEN, q->vars, q->nvars) : -1;
        if (v < 0 && cache_disk_get(c, q->key, "tune", &disk, &n) == 0) {
            v = rec_find(disk, n, q->vars, q->nvars);
            if (v >= 0 && !mem)
                store(c, q->key, &q->vars[v], false);
        }
        free(disk);
        if (v >= 0) {
            take(&plans[i], &q->vars[v]);
            (*stored)++;
            continue;
        }
        /* the same kernel twice in one program is timed once */
        int twin = -1;
        for (int e = 0; e < npd && twin < 0; e++)
            if (!memcmp(&pd[e].key, &q->key, sizeof q->key))
                twin = e;
        if (twin >= 0) {
            twins[i] = twin;
            continue;
        }
        q->kernel = i;
        q->first = total;
        total += q->nvars;
        npd++;
    }
    lower_kernel *tk = npd ? malloc(sizeof *tk * (size_t)total) : NULL;
    lower_plan *tplans = npd ? malloc(sizeof *tplans * (size_t)total) : NULL;
    bool ok = tk && tplans;
    for (int q = 0; ok && q < npd; q++)
        for (int v = 0; v < pd[q].nvars; v++) {
            lower_kernel *k = &tk[pd[q].first + v];
            *k = p->kernels[pd[q].kernel]; /* shares its IR: read only */
            char suffix[16];
            int ls = snprintf(suffix, sizeof suffix, "_t%d", v);
            size_t keep = strlen(k->name);
            if (keep + (size_t)ls >= sizeof k->name)
                keep = sizeof k->name - 1 - (size_t)ls;
            memcpy(k->name + keep, suffix, (size_t)ls + 1);
            tplans[pd[q].first + v] = pd[q].vars[v];
        }
    lower_program tp = {total, tk};
    int differing = 0;
    if (ok && !(ok = time_variants(d, p, pd, npd, &tp, tplans, &differing, why, sizeof why)) &&
        debug >= 1)
        fprintf(stderr, "kiln: KILN_TUNE: %d kernels keep their heuristics' plans: %s\n", npd,
                why);
    /* said whatever the debug level: wrong code somewhere */
    for (int q = 0; ok && differing && q < npd; q++)
        for (int v = 1; v < pd[q].nvars; v++)
            if (pd[q].differs[v])
                fprintf(stderr,
                        "kiln: KILN_TUNE: variant %d of %s computes other results than its "
                        "heuristics' plan: not used\n",
                        v, p->kernels[pd[q].kernel].name);
    for (int q = 0; ok && q < npd; q++) {
        int w = 0;
        for (int v = 1; v < pd[q].nvars; v++)
            if (pd[q].best[v] < pd[q].best[w])
                w = v;
        const lower_plan *win = &pd[q].vars[w];
        const lower_kernel *k = &p->kernels[pd[q].kernel];
        if (debug >= 1) {
            fprintf(stderr, "kiln: tuned %s: %d variants, the fastest %.3f ms (the heuristics' "
                    "%.3f ms):\n", k->name, pd[q].nvars, pd[q].best[w], pd[q].best[0]);
            lower_print_blocking(stderr, k, win);
        }
        take(&plans[pd[q].kernel], win);
        store(c, pd[q].key, win, true);
        (*tuned)++;
        for (int i = 0; i < p->nkernels; i++)
            if (twins[i] == q) {
                take(&plans[i], win);
                (*stored)++;
            }
    }
    free(tk);
    free(tplans);
    free(pd);
    free(twins);
}
