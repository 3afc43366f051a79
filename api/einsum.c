/* einsum.c — kiln_einsum, NumPy's and PyTorch's Einstein summation, lowered
 * to views, sums and batched matrix products: no kernel of its own, so it
 * fuses, runs on every executor and differentiates as its parts do.
 *
 * Each operand first takes the diagonal of a letter it repeats (a view) and
 * sums the letters no other operand and not the output names. The operands
 * are then contracted left to right: in a pair, a letter in both is a batch
 * letter when the output or a later operand still needs it and contracted
 * otherwise, and a letter in one of them is free; each side is permuted to
 * [batch, free, contracted] (the right one to [batch, contracted, free]),
 * reshaped to three dimensions and multiplied with kiln_matmul, and the
 * product reshaped back to [batch, free A, free B]. Left to right is not the
 * cheapest order for every chain (NumPy's optimize= searches for one); it is
 * the order written, which the caller controls. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

/* Letters A-Z are labels 0-25 and a-z 26-51 (so label order is ASCII order,
 * the implicit output's); the dimensions an ellipsis covers are 52 on,
 * aligned to the right as broadcasting aligns them. */
#define LETTERS 52
#define NLABELS (LETTERS + KILN_MAX_DIMS)
#define ELLIPSIS (-1)

typedef uint64_t labelset;

/* A term as written: letters and at most one ellipsis, in order. */
typedef struct raw_term {
    int n;
    int tok[KILN_MAX_DIMS + 1];
    bool ellipsis, too_long;
} raw_term;

/* A tensor with one label per axis. */
typedef struct labelled {
    kiln_tensor *t;
    int n;
    int lab[KILN_MAX_DIMS];
} labelled;

static const char *letter_name(int l, char *buf) {
    if (l >= LETTERS) {
        strcpy(buf, "...");
        return buf;
    }
    buf[0] = (char)(l < 26 ? 'A' + l : 'a' + (l - 26));
    buf[1] = 0;
    return buf;
}

static int letter_label(char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return 26 + (c - 'a');
    return -1;
}

/* "[2,3], [3,4]" for messages. */
static void shapes_str(char *out, size_t cap, int n, kiln_tensor *const *ops) {
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < n && k + 1 < cap; i++) {
        char s[KILN_MAX_DIMS * 21 + 3];
        graph_format_shape(s, sizeof s, ops[i]->node->ndim, ops[i]->node->shape);
        int w = snprintf(out + k, cap - k, "%s%s", i ? ", " : "", s);
        if (w < 0)
            break;
        k += (size_t)w;
    }
}

typedef struct einsum_ctx {
    kiln_ctx *ctx;
    const char *subs;
    char shapes[384];
} einsum_ctx;

static kiln_tensor *efail(const einsum_ctx *e, kiln_status st, const char *what) {
    return api_fail(e->ctx, st, "kiln_einsum: \"%s\" with operands %s: %s", e->subs, e->shapes,
                    what);
}

/* Splits the subscripts into n input terms and the output (*has_out when
 * "->" is given). NULL on success, else the error handle. */
static kiln_tensor *parse(const einsum_ctx *e, int n, raw_term *in, raw_term *out,
                          bool *has_out) {
    char why[160];
    int term = 0;
    raw_term *cur = &in[0];
    *has_out = false;
    memset(out, 0, sizeof *out);
    for (const char *p = e->subs; *p; p++) {
        char c = *p;
        if (c == ' ')
            continue;
        int pos = (int)(p - e->subs);
        if (letter_label(c) >= 0 || (c == '.' && p[1] == '.' && p[2] == '.')) {
            bool ell = c == '.';
            if (ell) {
                if (cur->ellipsis) {
                    snprintf(why, sizeof why, "a second \"...\" in one term (at %d)", pos);
                    return efail(e, KILN_ERR_ARG, why);
                }
                cur->ellipsis = true;
                p += 2;
            }
            /* room for KILN_MAX_DIMS letters and the ellipsis */
            if (!ell && cur->n - (cur->ellipsis ? 1 : 0) == KILN_MAX_DIMS)
                cur->too_long = true;
            else
                cur->tok[cur->n++] = ell ? ELLIPSIS : letter_label(c);
            continue;
        }
        if (c == ',' && !*has_out) {
            if (++term >= n) {
                snprintf(why, sizeof why, "more terms than the %d operand%s given", n,
                         n == 1 ? "" : "s");
                return efail(e, KILN_ERR_ARG, why);
            }
            cur = &in[term];
            continue;
        }
        if (c == '-' && p[1] == '>' && !*has_out) {
            *has_out = true;
            cur = out;
            p++;
            continue;
        }
        snprintf(why, sizeof why, "character '%c' at %d is not a letter, ',', \"...\" or \"->\"",
                 c, pos);
        return efail(e, KILN_ERR_ARG, why);
    }
    if (term + 1 != n) {
        snprintf(why, sizeof why, "%d term%s for %d operand%s", term + 1, term ? "s" : "", n,
                 n == 1 ? "" : "s");
        return efail(e, KILN_ERR_ARG, why);
    }
    return NULL;
}

static labelset bit(int l) { return (labelset)1 << l; }

static int64_t label_product(const labelled *x, labelset which, const int64_t *size) {
    int64_t p = 1;
    for (int d = 0; d < x->n; d++)
        if (which & bit(x->lab[d]))
            p *= size[x->lab[d]];
    return p;
}

/* Sums the axes of x whose labels are in drop (none: x as it is). */
static void sum_labels(labelled *x, labelset drop) {
    int axes[KILN_MAX_DIMS], na = 0, k = 0;
    for (int d = 0; d < x->n; d++) {
        if (drop & bit(x->lab[d]))
            axes[na++] = d;
        else
            x->lab[k++] = x->lab[d];
    }
    if (!na)
        return;
    x->t = kiln_sum(x->t, na, axes, false);
    x->n = k;
}

/* x's axes in the order of the labels in order[0..n) (each one of x's). */
static kiln_tensor *permute_to(const labelled *x, int n, const int *order) {
    int perm[KILN_MAX_DIMS];
    bool identity = true;
    for (int i = 0; i < n; i++) {
        for (int d = 0; d < x->n; d++)
            if (x->lab[d] == order[i])
                perm[i] = d;
        identity = identity && perm[i] == i;
    }
    return identity ? x->t : kiln_permute(x->t, perm);
}

/* The labels of x in which, in x's order, appended to list. */
static int pick(const labelled *x, labelset which, int *list, int k) {
    for (int d = 0; d < x->n; d++)
        if (which & bit(x->lab[d]))
            list[k++] = x->lab[d];
    return k;
}

static labelset labels_of(const labelled *x) {
    labelset s = 0;
    for (int d = 0; d < x->n; d++)
        s |= bit(x->lab[d]);
    return s;
}

/* a and b contracted over their shared labels not in keep; the result's
 * labels are [batch, free of a, free of b]. false when it would have more
 * than KILN_MAX_DIMS dimensions. */
static bool contract(kiln_ctx *ctx, labelled *a, labelled *b, labelset keep,
                     const int64_t *size, labelled *r) {
    labelset sa = labels_of(a), sb = labels_of(b);
    sum_labels(a, sa & ~sb & ~keep);
    sum_labels(b, sb & ~sa & ~keep);
    sa = labels_of(a);
    sb = labels_of(b);
    labelset batch = sa & sb & keep, con = sa & sb & ~keep, fa = sa & ~sb, fb = sb & ~sa;
    int ol[3 * KILN_MAX_DIMS];
    int nb = pick(a, batch, ol, 0), nfa = pick(a, fa, ol, nb) - nb;
    int nout = pick(b, fb, ol, nb + nfa);
    if (nout > KILN_MAX_DIMS)
        return false;
    int ordera[KILN_MAX_DIMS], orderb[KILN_MAX_DIMS];
    memcpy(ordera, ol, sizeof(int) * (size_t)(nb + nfa));
    int nc = pick(a, con, ordera, nb + nfa) - (nb + nfa);
    memcpy(orderb, ol, sizeof(int) * (size_t)nb);
    memcpy(orderb + nb, ordera + nb + nfa, sizeof(int) * (size_t)nc);
    memcpy(orderb + nb + nc, ol + nb + nfa, sizeof(int) * (size_t)(nout - nb - nfa));
    int64_t B = label_product(a, batch, size), M = label_product(a, fa, size);
    int64_t K = label_product(a, con, size), N = label_product(b, fb, size);
    kiln_tensor *x = kiln_reshape(permute_to(a, a->n, ordera), 3, (const int64_t[]){B, M, K});
    kiln_tensor *y = kiln_reshape(permute_to(b, b->n, orderb), 3, (const int64_t[]){B, K, N});
    /* an empty sum is zeros, whatever a product kernel would make of k = 0 */
    kiln_tensor *p = K ? kiln_matmul(x, y)
                       : kiln_zeros(ctx, graph_dtype_promote(kiln_dtype_of(x), kiln_dtype_of(y)),
                                    3, (const int64_t[]){B, M, N});
    int64_t dims[KILN_MAX_DIMS];
    for (int i = 0; i < nout; i++)
        dims[i] = size[ol[i]];
    r->t = kiln_reshape(p, nout, dims);
    r->n = nout;
    memcpy(r->lab, ol, sizeof(int) * (size_t)nout);
    return true;
}

kiln_tensor *kiln_einsum(const char *subscripts, int n, kiln_tensor *const *operands) {
    const char *op = "kiln_einsum";
    if (n <= 0 || !operands)
        return NULL;
    einsum_ctx e = {.subs = subscripts};
    kiln_tensor *err = api_check(op, n, operands, &e.ctx);
    if (err || !operands[0])
        return err;
    shapes_str(e.shapes, sizeof e.shapes, n, operands);
    if (!subscripts)
        return api_fail(e.ctx, KILN_ERR_ARG, "kiln_einsum: NULL subscripts for operands %s",
                        e.shapes);
    char why[200], ln[4];
    for (int i = 0; i < n; i++)
        if (operands[i]->node->dtype == KILN_BOOL) {
            snprintf(why, sizeof why, "operand %d is bool; einsum multiplies numbers", i);
            return efail(&e, KILN_ERR_DTYPE, why);
        }
    raw_term *in = calloc((size_t)n, sizeof *in);
    labelled *xs = calloc((size_t)n, sizeof *xs);
    labelset *later = calloc((size_t)n, sizeof *later);
    if (!in || !xs || !later) {
        free(in);
        free(xs);
        free(later);
        return api_fail(e.ctx, KILN_ERR_OOM, "kiln_einsum: out of memory for %d operands", n);
    }
    raw_term out;
    bool has_out;
    int64_t size[NLABELS];
    int occurs[NLABELS] = {0}, nell = 0;
    if ((err = parse(&e, n, in, &out, &has_out)))
        goto done;
    /* the widest ellipsis */
    for (int i = 0; i < n; i++) {
        int nd = operands[i]->node->ndim, letters = in[i].n - (in[i].ellipsis ? 1 : 0);
        if (in[i].too_long || (in[i].ellipsis ? letters > nd : letters != nd)) {
            if (in[i].too_long)
                snprintf(why, sizeof why, "term %d names more than %d axes", i, KILN_MAX_DIMS);
            else
                snprintf(why, sizeof why, "term %d names %s%d axes for operand %d of %d "
                         "dimensions", i, in[i].ellipsis ? "at least " : "", letters, i, nd);
            err = efail(&e, KILN_ERR_SHAPE, why);
            goto done;
        }
        if (in[i].ellipsis && nd - letters > nell)
            nell = nd - letters;
    }
    for (int l = 0; l < NLABELS; l++)
        size[l] = -1;
    /* each operand's labels, and each label's size: equal, or 1 broadcasting */
    for (int i = 0; i < n; i++) {
        const graph_node *x = operands[i]->node;
        labelled *lx = &xs[i];
        int covered = x->ndim - (in[i].n - (in[i].ellipsis ? 1 : 0));
        for (int k = 0; k < in[i].n; k++) {
            if (in[i].tok[k] == ELLIPSIS)
                for (int j = 0; j < covered; j++)
                    lx->lab[lx->n++] = LETTERS + nell - covered + j;
            else
                lx->lab[lx->n++] = in[i].tok[k];
        }
        lx->t = operands[i];
        for (int d = 0; d < lx->n; d++) {
            int l = lx->lab[d];
            int64_t s = x->shape[d];
            occurs[l]++;
            for (int d2 = 0; d2 < d; d2++)
                if (lx->lab[d2] == l && x->shape[d2] != s) {
                    snprintf(why, sizeof why,
                             "'%s' is repeated in operand %d with sizes %lld and %lld; a "
                             "diagonal needs equal sizes",
                             letter_name(l, ln), i, (long long)x->shape[d2], (long long)s);
                    err = efail(&e, KILN_ERR_SHAPE, why);
                    goto done;
                }
            if (size[l] == -1 || size[l] == 1)
                size[l] = s;
            else if (s != 1 && s != size[l]) {
                snprintf(why, sizeof why, "'%s' has sizes %lld and %lld (operand %d), which do "
                         "not broadcast", letter_name(l, ln), (long long)size[l], (long long)s, i);
                err = efail(&e, KILN_ERR_SHAPE, why);
                goto done;
            }
        }
    }
    /* the output's labels: as written, or the ellipsis and then every letter
     * used once, in ASCII order */
    int olab[NLABELS], nout = 0;
    labelset outset = 0;
    if (has_out) {
        if (out.too_long) {
            err = efail(&e, KILN_ERR_SHAPE, "the output has more than 8 dimensions");
            goto done;
        }
        for (int k = 0; k < out.n; k++) {
            if (out.tok[k] == ELLIPSIS) {
                for (int j = 0; j < nell; j++)
                    olab[nout++] = LETTERS + j;
                continue;
            }
            int l = out.tok[k];
            if (!occurs[l] || (outset & bit(l))) {
                snprintf(why, sizeof why, "output letter '%s' %s", letter_name(l, ln),
                         occurs[l] ? "is repeated" : "is in no input");
                err = efail(&e, KILN_ERR_ARG, why);
                goto done;
            }
            olab[nout++] = out.tok[k];
            outset |= bit(l);
        }
    } else {
        for (int j = 0; j < nell; j++)
            olab[nout++] = LETTERS + j;
        for (int l = 0; l < LETTERS; l++)
            if (occurs[l] == 1)
                olab[nout++] = l;
    }
    for (int k = 0; k < nout; k++)
        outset |= bit(olab[k]);
    if (nout > KILN_MAX_DIMS) {
        snprintf(why, sizeof why, "the output would have %d dimensions (at most %d)", nout,
                 KILN_MAX_DIMS);
        err = efail(&e, KILN_ERR_SHAPE, why);
        goto done;
    }
    for (int i = n - 2; i >= 0; i--)
        later[i] = later[i + 1] | labels_of(&xs[i + 1]);

    kiln_scope_begin(e.ctx);
    kiln_dtype dt = operands[0]->node->dtype;
    for (int i = 1; i < n; i++)
        dt = graph_dtype_promote(dt, operands[i]->node->dtype);
    for (int i = 0; i < n; i++) {
        labelled *x = &xs[i];
        /* size-1 axes stretched to their label's size (a broadcast view) */
        int64_t dims[KILN_MAX_DIMS];
        bool stretch = false;
        for (int d = 0; d < x->n; d++) {
            dims[d] = size[x->lab[d]];
            stretch = stretch || dims[d] != kiln_shape(x->t)[d];
        }
        if (stretch)
            x->t = kiln_expand(x->t, x->n, dims);
        /* a repeated label: the diagonal of its two axes, moved last */
        for (bool again = true; again;) {
            again = false;
            for (int p = 0; p < x->n && !again; p++)
                for (int q = p + 1; q < x->n && !again; q++)
                    if (x->lab[p] == x->lab[q]) {
                        int l = x->lab[p], k = 0;
                        x->t = kiln_diagonal(x->t, 0, p, q);
                        for (int d = 0; d < x->n; d++)
                            if (d != p && d != q)
                                x->lab[k++] = x->lab[d];
                        x->lab[k++] = l;
                        x->n = k;
                        again = true;
                    }
        }
        labelset others = 0;
        for (int j = 0; j < n; j++)
            if (j != i)
                others |= labels_of(&xs[j]);
        sum_labels(x, labels_of(x) & ~others & ~outset);
    }
    labelled acc = xs[0];
    for (int i = 1; i < n; i++) {
        labelled r;
        if (!contract(e.ctx, &acc, &xs[i], outset | later[i], size, &r)) {
            kiln_scope_end(e.ctx);
            snprintf(why, sizeof why, "contracting operand %d leaves more than %d dimensions "
                     "(reorder the operands)", i, KILN_MAX_DIMS);
            err = efail(&e, KILN_ERR_SHAPE, why);
            goto done;
        }
        acc = r;
    }
    sum_labels(&acc, labels_of(&acc) & ~outset);
    kiln_tensor *res = permute_to(&acc, nout, olab);
    if (kiln_dtype_of(res) != dt) /* integer sums ran in i64 */
        res = kiln_cast(res, dt);
    for (int i = 0; i < n; i++)
        if (res == operands[i]) /* nothing to do: a handle of its own all the same */
            res = api_wrap(e.ctx, graph_ref(res->node), op);
    if (kiln_error(res) != KILN_OK) {
        kiln_keep(res);
        kiln_scope_end(e.ctx);
        err = api_fail(e.ctx, kiln_error(res), "kiln_einsum: \"%s\" with operands %s: %s",
                       subscripts, e.shapes, kiln_error_message(res));
        kiln_release(res);
        goto done;
    }
    err = api_finish(e.ctx, res);
done:
    free(in);
    free(xs);
    free(later);
    return err;
}
