/* ops_conv_test.c — api/conv.c's ops on every executor against plain loops
 * in double over random inputs: 3-d convolution and transposed convolution
 * in 1 to 3 dimensions (strides, paddings above dil*(k-1), dilations, groups,
 * output padding), pooling with dilation, ceil_mode (a last window that
 * would start in the padding is dropped, one that hangs over is clipped) and
 * count_include_pad, max pooling's indices (the first of tied maxima), max
 * unpooling, adaptive pooling and interpolation (nearest, linear, bilinear
 * and bicubic, with and without align_corners, down and up); the number of
 * kernels each op compiles to; and the errors, which name the op. */
#include "test_util.h"

/* ---- references: loops over 3 spatial axes (1-d and 2-d use size 1) ---- */

typedef struct cv {
    int64_t n, c, oc, g;
    int64_t in[3], k[3], s[3], p[3], d[3], op[3];
} cv;

static int64_t prod3(const int64_t *v) { return v[0] * v[1] * v[2]; }

static void conv_out(const cv *q, bool transposed, int64_t *out) {
    for (int a = 0; a < 3; a++)
        out[a] = transposed ? (q->in[a] - 1) * q->s[a] - 2 * q->p[a] + q->d[a] * (q->k[a] - 1) +
                                  q->op[a] + 1
                            : (q->in[a] + 2 * q->p[a] - q->d[a] * (q->k[a] - 1) - 1) / q->s[a] + 1;
}

/* Forward: y[n, o, i...] = b[o] + sum x[n, g*cg + c, i*s - p + j*d] w[o, c, j]. */
static void ref_conv(const cv *q, const double *x, const double *w, const double *b, double *y) {
    int64_t out[3];
    conv_out(q, false, out);
    int64_t cg = q->c / q->g, og = q->oc / q->g, no = prod3(out), ni = prod3(q->in),
            nk = prod3(q->k);
    for (int64_t n = 0; n < q->n; n++)
        for (int64_t o = 0; o < q->oc; o++)
            for (int64_t f = 0; f < no; f++) {
                int64_t i[3] = {f / (out[1] * out[2]), f / out[2] % out[1], f % out[2]};
                double s = b ? b[o] : 0;
                for (int64_t c = 0; c < cg; c++)
                    for (int64_t t = 0; t < nk; t++) {
                        int64_t j[3] = {t / (q->k[1] * q->k[2]), t / q->k[2] % q->k[1], t % q->k[2]};
                        int64_t pos[3];
                        bool in = true;
                        for (int a = 0; a < 3; a++) {
                            pos[a] = i[a] * q->s[a] - q->p[a] + j[a] * q->d[a];
                            in = in && pos[a] >= 0 && pos[a] < q->in[a];
                        }
                        if (!in)
                            continue;
                        int64_t ci = o / og * cg + c;
                        s += x[(n * q->c + ci) * ni + (pos[0] * q->in[1] + pos[1]) * q->in[2] +
                               pos[2]] *
                             w[(o * cg + c) * nk + t];
                    }
                y[(n * q->oc + o) * no + f] = s;
            }
}

/* Transposed, by its definition as a scatter: x[n, c, i] w[c, o, j] adds
 * into y[n, g*og + o, i*s - p + j*d]. */
static void ref_conv_t(const cv *q, const double *x, const double *w, const double *b, double *y) {
    int64_t out[3];
    conv_out(q, true, out);
    int64_t cg = q->c / q->g, og = q->oc / q->g, no = prod3(out), ni = prod3(q->in),
            nk = prod3(q->k);
    for (int64_t n = 0; n < q->n; n++)
        for (int64_t o = 0; o < q->oc; o++)
            for (int64_t f = 0; f < no; f++)
                y[(n * q->oc + o) * no + f] = b ? b[o] : 0;
    for (int64_t n = 0; n < q->n; n++)
        for (int64_t c = 0; c < q->c; c++)
            for (int64_t f = 0; f < ni; f++) {
                int64_t i[3] = {f / (q->in[1] * q->in[2]), f / q->in[2] % q->in[1], f % q->in[2]};
                for (int64_t o = 0; o < og; o++)
                    for (int64_t t = 0; t < nk; t++) {
                        int64_t j[3] = {t / (q->k[1] * q->k[2]), t / q->k[2] % q->k[1], t % q->k[2]};
                        int64_t pos[3];
                        bool in = true;
                        for (int a = 0; a < 3; a++) {
                            pos[a] = i[a] * q->s[a] - q->p[a] + j[a] * q->d[a];
                            in = in && pos[a] >= 0 && pos[a] < out[a];
                        }
                        if (!in)
                            continue;
                        int64_t oo = c / cg * og + o;
                        y[(n * q->oc + oo) * no + (pos[0] * out[1] + pos[1]) * out[2] + pos[2]] +=
                            x[(n * q->c + c) * ni + f] * w[(c * og + o) * nk + t];
                    }
            }
}

/* The shapes of one case for nsp spatial axes (the last nsp of the 3). */
static void shapes(const cv *q, int nsp, bool transposed, int64_t *xs, int64_t *ws, int64_t *ys) {
    int64_t out[3];
    conv_out(q, transposed, out);
    xs[0] = q->n;
    xs[1] = q->c;
    ws[0] = transposed ? q->c : q->oc;
    ws[1] = transposed ? q->oc / q->g : q->c / q->g;
    ys[0] = q->n;
    ys[1] = q->oc;
    for (int a = 0; a < nsp; a++) {
        xs[2 + a] = q->in[3 - nsp + a];
        ws[2 + a] = q->k[3 - nsp + a];
        ys[2 + a] = out[3 - nsp + a];
    }
}

static void check_conv(kiln_ctx *ctx, const cv *q, int nsp, bool transposed, bool bias,
                       kiln_dtype dt, uint64_t salt) {
    tu_rng r = tu_rng_from("check_conv", salt);
    int64_t xs[5], ws[5], ys[5];
    shapes(q, nsp, transposed, xs, ws, ys);
    int64_t nx = tu_numel(nsp + 2, xs), nw = tu_numel(nsp + 2, ws), ny = tu_numel(nsp + 2, ys);
    double *x = malloc(sizeof(double) * (size_t)nx), *w = malloc(sizeof(double) * (size_t)nw),
           *y = malloc(sizeof(double) * (size_t)ny), b[64];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, dt, nsp + 2, xs, -1, 1, x);
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, dt, nsp + 2, ws, -1, 1, w);
    kiln_tensor *tb = bias ? tu_rand_tensor(ctx, &r, dt, 1, &q->oc, -1, 1, b) : NULL;
    (transposed ? ref_conv_t : ref_conv)(q, x, w, bias ? b : NULL, y);
    const int64_t *s = q->s + 3 - nsp, *p = q->p + 3 - nsp, *d = q->d + 3 - nsp,
                  *op = q->op + 3 - nsp;
    kiln_tensor *got = !transposed ? kiln_conv3d(tx, tw, tb, s, p, d, q->g)
                       : nsp == 1  ? kiln_conv_transpose1d(tx, tw, tb, s[0], p[0], op[0], d[0], q->g)
                       : nsp == 2  ? kiln_conv_transpose2d(tx, tw, tb, s, p, op, d, q->g)
                                   : kiln_conv_transpose3d(tx, tw, tb, s, p, op, d, q->g);
    TU_ASSERT_SHAPE_N(got, nsp + 2, ys);
    TU_EXPECT(got, dt, y, ny);
    if (!transposed && nsp == 3 && q->in[0] == 1 && q->k[0] == 1 && q->p[0] == 0) {
        /* the same case through kiln_conv2d, on the last two axes */
        int64_t x2[4] = {xs[0], xs[1], xs[3], xs[4]}, w2[4] = {ws[0], ws[1], ws[3], ws[4]},
                y2[4] = {ys[0], ys[1], ys[3], ys[4]};
        kiln_tensor *got2 = kiln_conv2d(kiln_reshape(tx, 4, x2), kiln_reshape(tw, 4, w2), tb,
                                        q->s[1], q->s[2], q->p[1], q->p[2], q->d[1], q->d[2], q->g);
        TU_ASSERT_SHAPE_N(got2, 4, y2);
        TU_EXPECT(got2, dt, y, ny);
    }
    free(x);
    free(w);
    free(y);
}

#define CV(...) ((const cv){__VA_ARGS__})
#define A3(a, b, c) {a, b, c}

TU_TEST(conv3d, against_loops) {
    /* plain; strided, padded and dilated per axis; groups with a bias */
    check_conv(ctx, &CV(.n = 1, .c = 2, .oc = 3, .g = 1, .in = A3(4, 5, 3), .k = A3(2, 3, 2),
                        .s = A3(1, 1, 1), .p = A3(0, 0, 0), .d = A3(1, 1, 1)),
               3, false, false, KILN_F64, 1);
    check_conv(ctx, &CV(.n = 2, .c = 2, .oc = 2, .g = 1, .in = A3(5, 4, 6), .k = A3(3, 2, 2),
                        .s = A3(2, 1, 3), .p = A3(1, 0, 1), .d = A3(1, 2, 2)),
               3, false, true, KILN_F64, 2);
    check_conv(ctx, &CV(.n = 1, .c = 4, .oc = 6, .g = 2, .in = A3(3, 4, 4), .k = A3(1, 3, 3),
                        .s = A3(1, 2, 2), .p = A3(0, 1, 1), .d = A3(1, 1, 1)),
               3, false, true, KILN_F32, 3);
}

/* Output rows of 8 or more: on the C path the matmul reads the im2col view
 * in place from the input, its columns split into output axes and its k
 * into (channel, tap) axes, the padding's zeros from bounds on the
 * coordinates. Output widths that fill the packing's panels of columns
 * exactly (32) and ones that straddle output rows (several segments per
 * panel, a last panel part empty), rows of 10 under padding, strides (read
 * from a copy: the columns' stride is not 1), dilations, a 3-d kernel (four
 * k axes), and groups (read from a copy). */
TU_TEST(conv3d, im2col_read_in_place) {
    check_conv(ctx, &CV(.n = 2, .c = 3, .oc = 5, .g = 1, .in = A3(1, 18, 40), .k = A3(1, 3, 3),
                        .s = A3(1, 1, 1), .p = A3(0, 1, 1), .d = A3(1, 1, 1)),
               3, false, true, KILN_F32, 11);
    check_conv(ctx, &CV(.n = 1, .c = 2, .oc = 3, .g = 1, .in = A3(1, 20, 44), .k = A3(1, 3, 3),
                        .s = A3(1, 2, 2), .p = A3(0, 2, 2), .d = A3(1, 2, 2)),
               3, false, false, KILN_F64, 12);
    check_conv(ctx, &CV(.n = 2, .c = 4, .oc = 3, .g = 1, .in = A3(1, 9, 32), .k = A3(1, 3, 3),
                        .s = A3(1, 1, 1), .p = A3(0, 1, 1), .d = A3(1, 1, 1)),
               3, false, true, KILN_F16, 13);
    check_conv(ctx, &CV(.n = 1, .c = 2, .oc = 4, .g = 1, .in = A3(3, 6, 17), .k = A3(2, 3, 3),
                        .s = A3(1, 1, 1), .p = A3(1, 1, 1), .d = A3(1, 1, 1)),
               3, false, true, KILN_F32, 14);
    check_conv(ctx, &CV(.n = 1, .c = 4, .oc = 6, .g = 2, .in = A3(1, 5, 24), .k = A3(1, 3, 3),
                        .s = A3(1, 1, 1), .p = A3(0, 1, 1), .d = A3(1, 1, 1)),
               3, false, true, KILN_F32, 15);
    check_conv(ctx, &CV(.n = 3, .c = 5, .oc = 7, .g = 1, .in = A3(1, 7, 35), .k = A3(1, 2, 4),
                        .s = A3(1, 1, 1), .p = A3(0, 0, 0), .d = A3(1, 1, 1)),
               3, false, true, KILN_F32, 16);
    check_conv(ctx, &CV(.n = 2, .c = 3, .oc = 4, .g = 1, .in = A3(1, 10, 10), .k = A3(1, 3, 3),
                        .s = A3(1, 1, 1), .p = A3(0, 1, 1), .d = A3(1, 1, 1)),
               3, false, true, KILN_F32, 17);
    check_conv(ctx, &CV(.n = 2, .c = 2, .oc = 3, .g = 1, .in = A3(1, 12, 12), .k = A3(1, 3, 3),
                        .s = A3(1, 1, 1), .p = A3(0, 2, 3), .d = A3(1, 2, 2)),
               3, false, true, KILN_F64, 18);
    /* more (channel, tap) rows than a block of k takes (at most 256 on
     * 64-byte vectors, cut in equal blocks): 261 rows are two blocks of 131
     * and 130, so the second starts within a channel's taps, at phase 5 of 9
     * (at 9 of 18 for 270 rows of a 2x3x3 kernel) of the taps' valid ranges,
     * which the packing works out once a phase */
    check_conv(ctx, &CV(.n = 2, .c = 29, .oc = 5, .g = 1, .in = A3(1, 9, 40), .k = A3(1, 3, 3),
                        .s = A3(1, 1, 1), .p = A3(0, 1, 1), .d = A3(1, 1, 1)),
               3, false, true, KILN_F32, 21);
    check_conv(ctx, &CV(.n = 1, .c = 15, .oc = 3, .g = 1, .in = A3(3, 6, 17), .k = A3(2, 3, 3),
                        .s = A3(1, 1, 1), .p = A3(1, 1, 1), .d = A3(1, 1, 1)),
               3, false, false, KILN_F32, 22);
    check_conv(ctx, &CV(.n = 1, .c = 29, .oc = 4, .g = 1, .in = A3(1, 8, 33), .k = A3(1, 3, 3),
                        .s = A3(1, 1, 1), .p = A3(0, 1, 1), .d = A3(1, 1, 1)),
               3, false, true, KILN_F64, 23);
    /* transposed: zeros inserted between the input's elements, a pad, and
     * the flipped kernel */
    check_conv(ctx, &CV(.n = 2, .c = 3, .oc = 2, .g = 1, .in = A3(1, 6, 9), .k = A3(1, 3, 3),
                        .s = A3(1, 2, 2), .p = A3(0, 1, 1), .d = A3(1, 1, 1)),
               3, true, true, KILN_F32, 19);
    check_conv(ctx, &CV(.n = 1, .c = 2, .oc = 3, .g = 1, .in = A3(1, 5, 12), .k = A3(1, 2, 3),
                        .s = A3(1, 1, 1), .p = A3(0, 0, 1), .d = A3(1, 2, 1)),
               3, true, false, KILN_F64, 20);
}

TU_TEST(conv_transpose, against_loops_1d_2d_3d) {
    /* 1-d: stride 2 with output padding; a padding above dil*(k-1), whose
     * negative effective padding cuts the input; dilation and groups */
    check_conv(ctx, &CV(.n = 2, .c = 2, .oc = 3, .g = 1, .in = A3(1, 1, 5), .k = A3(1, 1, 3),
                        .s = A3(1, 1, 2), .p = A3(0, 0, 1), .d = A3(1, 1, 1), .op = A3(0, 0, 1)),
               1, true, true, KILN_F64, 10);
    check_conv(ctx, &CV(.n = 1, .c = 2, .oc = 2, .g = 1, .in = A3(1, 1, 6), .k = A3(1, 1, 2),
                        .s = A3(1, 1, 3), .p = A3(0, 0, 3), .d = A3(1, 1, 1), .op = A3(0, 0, 2)),
               1, true, false, KILN_F64, 11);
    check_conv(ctx, &CV(.n = 1, .c = 4, .oc = 6, .g = 2, .in = A3(1, 1, 4), .k = A3(1, 1, 3),
                        .s = A3(1, 1, 1), .p = A3(0, 0, 2), .d = A3(1, 1, 2), .op = A3(0, 0, 1)),
               1, true, true, KILN_F64, 12);
    /* 2-d: per-axis strides, paddings and output paddings; dilation; groups */
    check_conv(ctx, &CV(.n = 2, .c = 3, .oc = 2, .g = 1, .in = A3(1, 3, 4), .k = A3(1, 3, 2),
                        .s = A3(1, 2, 3), .p = A3(0, 1, 0), .d = A3(1, 1, 1), .op = A3(0, 1, 2)),
               2, true, true, KILN_F64, 13);
    check_conv(ctx, &CV(.n = 1, .c = 4, .oc = 4, .g = 4, .in = A3(1, 4, 3), .k = A3(1, 2, 3),
                        .s = A3(1, 1, 2), .p = A3(0, 2, 1), .d = A3(1, 3, 1), .op = A3(0, 2, 0)),
               2, true, false, KILN_F32, 14);
    /* 3-d */
    check_conv(ctx, &CV(.n = 1, .c = 2, .oc = 4, .g = 2, .in = A3(2, 3, 3), .k = A3(2, 2, 3),
                        .s = A3(2, 1, 2), .p = A3(1, 0, 1), .d = A3(1, 2, 1), .op = A3(1, 1, 0)),
               3, true, true, KILN_F64, 15);
}

/* ---- pooling ---- */

typedef struct pl {
    int64_t planes, in[3], k[3], s[3], p[3], d[3];
    bool ceil_mode, include_pad;
} pl;

static int64_t pool_len(int64_t len, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
    int64_t num = len + 2 * p - d * (k - 1) - 1;
    int64_t o = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
    if (ceil_mode && (o - 1) * s >= len + p)
        o--;
    return o;
}

/* PyTorch's CPU loops: max pooling starts from -inf at the window's first
 * position inside the input and moves on a greater element or a NaN. */
static void ref_pool(const pl *q, bool is_max, const double *x, double *y, int64_t *idx) {
    int64_t out[3];
    for (int a = 0; a < 3; a++)
        out[a] = pool_len(q->in[a], q->k[a], q->s[a], q->p[a], q->d[a], q->ceil_mode);
    int64_t ni = prod3(q->in), no = prod3(out);
    for (int64_t c = 0; c < q->planes; c++)
        for (int64_t f = 0; f < no; f++) {
            int64_t o[3] = {f / (out[1] * out[2]), f / out[2] % out[1], f % out[2]};
            int64_t st[3], en[3], pool = 1, valid = 1;
            for (int a = 0; a < 3; a++) {
                st[a] = o[a] * q->s[a] - q->p[a];
                if (is_max) {
                    en[a] = st[a] + (q->k[a] - 1) * q->d[a] + 1;
                    if (en[a] > q->in[a])
                        en[a] = q->in[a];
                    while (st[a] < 0)
                        st[a] += q->d[a];
                } else {
                    en[a] = st[a] + q->k[a] < q->in[a] + q->p[a] ? st[a] + q->k[a] : q->in[a] + q->p[a];
                    pool *= en[a] - st[a];
                    if (st[a] < 0)
                        st[a] = 0;
                    if (en[a] > q->in[a])
                        en[a] = q->in[a];
                    valid *= en[a] - st[a];
                }
            }
            const double *xp = x + c * ni;
            double acc = is_max ? -INFINITY : 0;
            int64_t best = (st[0] * q->in[1] + st[1]) * q->in[2] + st[2];
            for (int64_t i = st[0]; i < en[0]; i += q->d[0])
                for (int64_t j = st[1]; j < en[1]; j += q->d[1])
                    for (int64_t l = st[2]; l < en[2]; l += q->d[2]) {
                        int64_t pos = (i * q->in[1] + j) * q->in[2] + l;
                        double v = xp[pos];
                        if (!is_max)
                            acc += v;
                        else if (v > acc || isnan(v)) {
                            acc = v;
                            best = pos;
                        }
                    }
            y[c * no + f] = is_max ? acc : acc / (double)(q->include_pad ? pool : valid);
            if (idx)
                idx[c * no + f] = best;
        }
}

/* Runs a pooling case over nsp spatial axes, with a batch axis of 2 when
 * batched (planes = 2 * channels) or [C, s...] when not. Integer inputs in
 * [0, 3] make ties. */
static void check_pool(kiln_ctx *ctx, const pl *q, int nsp, bool is_max, bool batched, bool ties,
                       uint64_t salt) {
    tu_rng r = tu_rng_from("check_pool", salt);
    int64_t xs[5], ys[5], out[3];
    int nd = 0;
    if (batched)
        xs[nd++] = 2;
    xs[nd++] = batched ? q->planes / 2 : q->planes;
    for (int a = 0; a < 3; a++)
        out[a] = pool_len(q->in[a], q->k[a], q->s[a], q->p[a], q->d[a], q->ceil_mode);
    memcpy(ys, xs, sizeof xs);
    for (int a = 0; a < nsp; a++) {
        xs[nd + a] = q->in[3 - nsp + a];
        ys[nd + a] = out[3 - nsp + a];
    }
    nd += nsp;
    int64_t nx = tu_numel(nd, xs), ny = tu_numel(nd, ys);
    double *x = malloc(sizeof(double) * (size_t)nx), *y = malloc(sizeof(double) * (size_t)ny);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)ny);
    kiln_dtype dt = ties ? KILN_F32 : KILN_F64;
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, dt, nd, xs, ties ? 0 : -2, ties ? 3 : 2, x);
    if (ties)
        for (int64_t i = 0; i < nx; i++)
            x[i] = floor(x[i]);
    if (ties)
        tx = tu_tensor(ctx, dt, nd, xs, x);
    ref_pool(q, is_max, x, y, idx);
    const int64_t *k = q->k + 3 - nsp, *s = q->s + 3 - nsp, *p = q->p + 3 - nsp, *d = q->d + 3 - nsp;
    kiln_tensor *ti = NULL, *got;
    if (is_max)
        got = nsp == 1   ? kiln_max_pool1d_ex(tx, k[0], s[0], p[0], d[0], q->ceil_mode, &ti)
              : nsp == 2 ? kiln_max_pool2d_ex(tx, k, s, p, d, q->ceil_mode, &ti)
                         : kiln_max_pool3d(tx, k, s, p, d, q->ceil_mode, &ti);
    else
        got = nsp == 1   ? kiln_avg_pool1d_ex(tx, k[0], s[0], p[0], q->ceil_mode, q->include_pad)
              : nsp == 2 ? kiln_avg_pool2d_ex(tx, k, s, p, q->ceil_mode, q->include_pad)
                         : kiln_avg_pool3d(tx, k, s, p, q->ceil_mode, q->include_pad);
    TU_ASSERT_SHAPE_N(got, nd, ys);
    TU_EXPECT(got, dt, y, ny);
    if (is_max) {
        TU_ASSERT_SHAPE_N(ti, nd, ys);
        TU_EXPECT_I64(ti, KILN_I64, idx, ny);
    }
    free(x);
    free(y);
    free(idx);
}

#define PL(...) ((const pl){__VA_ARGS__})

TU_TEST(pool_ex, max_with_indices_2d) {
    /* ties (the first maximum's index), dilation, padding, ceil_mode whose
     * would-be last window starts in the padding (dropped) and one that
     * hangs over the end (clipped), without a batch axis */
    check_pool(ctx, &PL(.planes = 4, .in = A3(1, 5, 6), .k = A3(1, 2, 3), .s = A3(1, 2, 2),
                        .p = A3(0, 1, 1), .d = A3(1, 1, 1), .ceil_mode = true),
               2, true, true, true, 20);
    check_pool(ctx, &PL(.planes = 2, .in = A3(1, 7, 7), .k = A3(1, 3, 2), .s = A3(1, 2, 1),
                        .p = A3(0, 1, 1), .d = A3(1, 2, 3), .ceil_mode = false),
               2, true, true, false, 21);
    check_pool(ctx, &PL(.planes = 3, .in = A3(1, 6, 5), .k = A3(1, 3, 3), .s = A3(1, 2, 3),
                        .p = A3(0, 1, 0), .d = A3(1, 2, 1), .ceil_mode = true),
               2, true, false, true, 22);
    check_pool(ctx, &PL(.planes = 2, .in = A3(1, 4, 4), .k = A3(1, 2, 2), .s = A3(1, 2, 2),
                        .p = A3(0, 0, 0), .d = A3(1, 1, 1)),
               2, true, true, false, 23);
}

TU_TEST(pool_ex, avg_ceil_and_count_include_pad_2d) {
    for (int inc = 0; inc < 2; inc++) {
        check_pool(ctx, &PL(.planes = 4, .in = A3(1, 5, 4), .k = A3(1, 2, 3), .s = A3(1, 2, 2),
                            .p = A3(0, 1, 1), .d = A3(1, 1, 1), .ceil_mode = true,
                            .include_pad = inc),
                   2, false, true, false, 30 + (uint64_t)inc);
        check_pool(ctx, &PL(.planes = 2, .in = A3(1, 7, 6), .k = A3(1, 3, 2), .s = A3(1, 3, 1),
                            .p = A3(0, 1, 1), .d = A3(1, 1, 1), .ceil_mode = false,
                            .include_pad = inc),
                   2, false, false, true, 32 + (uint64_t)inc);
    }
}

TU_TEST(pool_ex, one_d_and_three_d) {
    check_pool(ctx, &PL(.planes = 4, .in = A3(1, 1, 9), .k = A3(1, 1, 3), .s = A3(1, 1, 2),
                        .p = A3(0, 0, 1), .d = A3(1, 1, 2), .ceil_mode = true),
               1, true, true, true, 40);
    check_pool(ctx, &PL(.planes = 2, .in = A3(1, 1, 8), .k = A3(1, 1, 3), .s = A3(1, 1, 3),
                        .p = A3(0, 0, 1), .d = A3(1, 1, 1), .ceil_mode = true),
               1, false, false, false, 41);
    check_pool(ctx, &PL(.planes = 2, .in = A3(4, 5, 5), .k = A3(2, 3, 2), .s = A3(2, 2, 1),
                        .p = A3(1, 1, 0), .d = A3(1, 1, 2), .ceil_mode = true),
               3, true, true, true, 42);
    check_pool(ctx, &PL(.planes = 2, .in = A3(3, 4, 5), .k = A3(2, 2, 2), .s = A3(1, 2, 2),
                        .p = A3(0, 1, 1), .d = A3(1, 1, 1), .ceil_mode = true, .include_pad = true),
               3, false, false, false, 43);
    check_pool(ctx, &PL(.planes = 4, .in = A3(3, 4, 5), .k = A3(3, 2, 3), .s = A3(2, 2, 2),
                        .p = A3(1, 0, 1), .d = A3(1, 1, 1), .ceil_mode = false),
               3, false, false, true, 44);
}

TU_TEST(pool_ex, nan_wins_and_infinities) {
    const double nan = NAN, inf = INFINITY;
    kiln_tensor *x = tu_tensor(ctx, KILN_F32, TU_S(1, 2, 4),
                               (const double[]){1, nan, 3, 2, -inf, -inf, -inf, 5});
    kiln_tensor *idx;
    kiln_tensor *y = kiln_max_pool1d_ex(x, 2, 2, 0, 1, false, &idx);
    TU_EXPECT_VALS(y, KILN_F32, nan, 3, -inf, 5);
    TU_EXPECT_I64(idx, KILN_I64, ((const int64_t[]){1, 2, 0, 3}), 4);
}

TU_TEST(max_unpool2d, inverts_pooling) {
    TU_RNG(r);
    double x[2 * 3 * 6 * 4], y[2 * 3 * 6 * 4];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 3, 6, 4), -2, 2, x);
    kiln_tensor *idx;
    kiln_tensor *p = kiln_max_pool2d_ex(tx, TU_DIMS(2, 2), TU_DIMS(2, 2), TU_DIMS(0, 0),
                                        TU_DIMS(1, 1), false, &idx);
    /* every element that is its 2x2 window's maximum stays, the rest is 0 */
    for (int64_t c = 0; c < 6; c++)
        for (int64_t i = 0; i < 6; i++)
            for (int64_t j = 0; j < 4; j++) {
                double m = -INFINITY;
                for (int64_t a = 0; a < 2; a++)
                    for (int64_t b = 0; b < 2; b++)
                        m = fmax(m, x[c * 24 + (i / 2 * 2 + a) * 4 + j / 2 * 2 + b]);
                y[c * 24 + i * 4 + j] = x[c * 24 + i * 4 + j] == m ? m : 0;
            }
    kiln_tensor *u = kiln_max_unpool2d(p, idx, 6, 4);
    TU_ASSERT_SHAPE(u, 2, 3, 6, 4);
    TU_EXPECT(u, KILN_F64, y, 2 * 3 * 6 * 4);
    /* given indices, unbatched, into a larger plane; a repeated index adds */
    kiln_tensor *v = tu_tensor(ctx, KILN_F32, TU_S(1, 2, 2), (const double[]){1, 2, 3, 4});
    kiln_tensor *vi = tu_tensor_i64(ctx, KILN_I32, TU_S(1, 2, 2), (const int64_t[]){5, 0, 8, 5});
    TU_EXPECT_VALS(kiln_max_unpool2d(v, vi, 3, 3), KILN_F32, 2, 0, 0, 0, 0, 5, 0, 0, 3);
}

/* Scatters each pooled value back to its index within the plane, as a
 * loop: the expected result of unpooling (planes of np elements). */
static void ref_unpool(const double *v, const int64_t *idx, int64_t planes, int64_t per,
                       int64_t np, double *y) {
    for (int64_t i = 0; i < planes * np; i++)
        y[i] = 0;
    for (int64_t c = 0; c < planes; c++)
        for (int64_t i = 0; i < per; i++)
            y[c * np + idx[c * per + i]] += v[c * per + i];
}

TU_TEST(max_unpool1d, inverts_pooling_and_by_hand) {
    /* PyTorch: max_pool1d(k=2, s=2, return_indices=True) of [0.5, -1.25, 3,
     * 2.5, -0.75, -2] is [0.5, 3, -0.75] at [0, 2, 4]; max_unpool1d to 7 */
    kiln_tensor *x = tu_tensor(ctx, KILN_F32, TU_S(1, 1, 6),
                               (const double[]){0.5, -1.25, 3, 2.5, -0.75, -2});
    kiln_tensor *idx;
    kiln_tensor *p = kiln_max_pool1d_ex(x, 2, 2, 0, 1, false, &idx);
    TU_EXPECT_I64(idx, KILN_I64, ((const int64_t[]){0, 2, 4}), 3);
    kiln_tensor *u = kiln_max_unpool1d(p, idx, 7);
    TU_ASSERT_SHAPE(u, 1, 1, 7);
    TU_EXPECT_VALS(u, KILN_F32, 0.5, 0, 3, 0, -0.75, 0, 0);
    /* random [C, L] with padding, dilation and ceil_mode, i32 indices */
    TU_RNG(r);
    double xv[3 * 11], pv[3 * 6], y[3 * 13];
    int64_t iv[3 * 6];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 11), -2, 2, xv);
    p = kiln_max_pool1d_ex(tx, 3, 2, 1, 2, true, &idx);
    TU_ASSERT_SHAPE(p, 3, 5);
    TU_READ(p, pv, 15);
    TU_READ_I64(idx, iv, 15);
    ref_unpool(pv, iv, 3, 5, 13, y);
    u = kiln_max_unpool1d(p, kiln_cast(idx, KILN_I32), 13);
    TU_ASSERT_SHAPE(u, 3, 13);
    TU_EXPECT(u, KILN_F64, y, 3 * 13);
}

TU_TEST(max_unpool3d, inverts_pooling) {
    TU_RNG(r);
    double xv[2 * 2 * 4 * 5 * 6], pv[2 * 2 * 2 * 3 * 3], y[2 * 2 * 4 * 5 * 6];
    int64_t iv[2 * 2 * 2 * 3 * 3];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 2, 4, 5, 6), -2, 2, xv);
    kiln_tensor *idx;
    kiln_tensor *p = kiln_max_pool3d(tx, TU_DIMS(2, 2, 2), TU_DIMS(2, 2, 2), TU_DIMS(0, 1, 0),
                                     TU_DIMS(1, 1, 1), false, &idx);
    TU_ASSERT_SHAPE(p, 2, 2, 2, 3, 3);
    TU_READ(p, pv, 72);
    TU_READ_I64(idx, iv, 72);
    ref_unpool(pv, iv, 4, 18, 120, y);
    kiln_tensor *u = kiln_max_unpool3d(p, idx, TU_DIMS(4, 5, 6));
    TU_ASSERT_SHAPE(u, 2, 2, 4, 5, 6);
    TU_EXPECT(u, KILN_F64, y, 2 * 2 * 120);
    /* unbatched, given u8 indices into a larger volume; a repeated index adds */
    kiln_tensor *v = tu_tensor(ctx, KILN_F32, TU_S(1, 1, 1, 3), (const double[]){1.5, -2, 4});
    kiln_tensor *vi = tu_tensor_i64(ctx, KILN_U8, TU_S(1, 1, 1, 3), (const int64_t[]){7, 2, 7});
    TU_EXPECT_VALS(kiln_max_unpool3d(v, vi, TU_DIMS(2, 2, 2)), KILN_F32, 0, 0, -2, 0, 0, 0, 0,
                   5.5);
}

/* ---- adaptive pooling ---- */

static void ref_adaptive(bool is_max, const double *x, int64_t planes, int64_t h, int64_t w,
                         int64_t oh, int64_t ow, double *y) {
    for (int64_t c = 0; c < planes; c++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                int64_t h0 = (int64_t)floor((double)(i * h) / (double)oh),
                        h1 = (int64_t)ceil((double)((i + 1) * h) / (double)oh);
                int64_t w0 = (int64_t)floor((double)(j * w) / (double)ow),
                        w1 = (int64_t)ceil((double)((j + 1) * w) / (double)ow);
                double acc = is_max ? -INFINITY : 0;
                for (int64_t a = h0; a < h1; a++)
                    for (int64_t b = w0; b < w1; b++)
                        acc = is_max ? fmax(acc, x[(c * h + a) * w + b]) : acc + x[(c * h + a) * w + b];
                y[(c * oh + i) * ow + j] = is_max ? acc : acc / (double)((h1 - h0) * (w1 - w0));
            }
}

TU_TEST(adaptive_pool, against_loops) {
    TU_RNG(r);
    double x[2 * 3 * 7 * 10], y[2 * 3 * 9 * 13];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 3, 7, 10), -2, 2, x);
    const int64_t sizes[][2] = {{3, 4}, {7, 10}, {1, 1}, {5, 3}, {9, 13}};
    for (int s = 0; s < 5; s++) {
        int64_t oh = sizes[s][0], ow = sizes[s][1];
        for (int m = 0; m < 2; m++) {
            ref_adaptive(m, x, 6, 7, 10, oh, ow, y);
            kiln_tensor *got = m ? kiln_adaptive_max_pool2d(tx, oh, ow)
                                 : kiln_adaptive_avg_pool2d(tx, oh, ow);
            TU_ASSERT_SHAPE(got, 2, 3, oh, ow);
            TU_EXPECT(got, KILN_F64, y, 6 * oh * ow);
        }
    }
    /* 1-d over [C, L] and [N, C, L], in f32 */
    double z[3 * 11], zy[3 * 11];
    kiln_tensor *tz = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(3, 11), -2, 2, z);
    for (int m = 0; m < 2; m++) {
        ref_adaptive(m, z, 3, 1, 11, 1, 4, zy);
        kiln_tensor *got = m ? kiln_adaptive_max_pool1d(tz, 4) : kiln_adaptive_avg_pool1d(tz, 4);
        TU_ASSERT_SHAPE(got, 3, 4);
        TU_EXPECT(got, KILN_F32, zy, 12);
        kiln_tensor *b = kiln_reshape(tz, TU_S(1, 3, 11));
        got = m ? kiln_adaptive_max_pool1d(b, 4) : kiln_adaptive_avg_pool1d(b, 4);
        TU_ASSERT_SHAPE(got, 1, 3, 4);
        TU_EXPECT(got, KILN_F32, zy, 12);
    }
}

/* 3-d: volumes [planes, d, h, w] to [planes, od, oh, ow]. */
static int64_t win0(int64_t i, int64_t in, int64_t out) { return (int64_t)floor((double)(i * in) / (double)out); }
static int64_t win1(int64_t i, int64_t in, int64_t out) {
    return (int64_t)ceil((double)((i + 1) * in) / (double)out);
}

static void ref_adaptive3(bool is_max, const double *x, int64_t planes, const int64_t *in,
                          const int64_t *out, double *y) {
    for (int64_t c = 0; c < planes; c++)
        for (int64_t i = 0; i < out[0]; i++)
            for (int64_t j = 0; j < out[1]; j++)
                for (int64_t k = 0; k < out[2]; k++) {
                    double acc = is_max ? -INFINITY : 0;
                    int64_t n = 0;
                    for (int64_t a = win0(i, in[0], out[0]); a < win1(i, in[0], out[0]); a++)
                        for (int64_t b = win0(j, in[1], out[1]); b < win1(j, in[1], out[1]); b++)
                            for (int64_t e = win0(k, in[2], out[2]); e < win1(k, in[2], out[2]); e++, n++) {
                                double v = x[((c * in[0] + a) * in[1] + b) * in[2] + e];
                                acc = is_max ? fmax(acc, v) : acc + v;
                            }
                    y[((c * out[0] + i) * out[1] + j) * out[2] + k] = is_max ? acc : acc / (double)n;
                }
}

TU_TEST(adaptive_pool, three_d_against_loops) {
    TU_RNG(r);
    const int64_t in[3] = {5, 6, 7};
    double x[2 * 3 * 5 * 6 * 7], y[6 * 5 * 6 * 7];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 3, 5, 6, 7), -2, 2, x);
    const int64_t sizes[][3] = {{2, 3, 4}, {5, 6, 7}, {1, 1, 1}, {3, 4, 2}};
    for (int s = 0; s < 4; s++)
        for (int m = 0; m < 2; m++) {
            const int64_t *o = sizes[s];
            ref_adaptive3(m, x, 6, in, o, y);
            kiln_tensor *got = m ? kiln_adaptive_max_pool3d(tx, o[0], o[1], o[2])
                                 : kiln_adaptive_avg_pool3d(tx, o[0], o[1], o[2]);
            TU_ASSERT_SHAPE(got, 2, 3, o[0], o[1], o[2]);
            TU_EXPECT(got, KILN_F64, y, 6 * o[0] * o[1] * o[2]);
        }
    /* [C, D, H, W] in f32 */
    double z[3 * 5 * 6 * 7], zy[3 * 2 * 3 * 4];
    kiln_tensor *tz = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(3, 5, 6, 7), -2, 2, z);
    for (int m = 0; m < 2; m++) {
        ref_adaptive3(m, z, 3, in, sizes[0], zy);
        kiln_tensor *got = m ? kiln_adaptive_max_pool3d(tz, 2, 3, 4) : kiln_adaptive_avg_pool3d(tz, 2, 3, 4);
        TU_ASSERT_SHAPE(got, 3, 2, 3, 4);
        TU_EXPECT(got, KILN_F32, zy, 72);
    }
    /* a 2-d input is the wrong rank; a zero output size a bad argument */
    TU_ASSERT_ERROR(kiln_adaptive_avg_pool3d(kiln_reshape(tz, TU_S(15, 42)), 1, 1, 1), KILN_ERR_SHAPE,
                    "kiln_adaptive_avg_pool3d");
    TU_ASSERT_ERROR(kiln_adaptive_max_pool3d(tz, 0, 1, 1), KILN_ERR_ARG, "output size");
}

/* PyTorch's adaptive_max_pool2d loop: row-major over the window, moving
 * on a greater element or a NaN (random inputs have no NaN, whose first in
 * a window kiln reports where this would report the last). */
static void ref_adaptive_idx(const double *x, int64_t planes, int64_t h, int64_t w, int64_t oh,
                             int64_t ow, double *y, int64_t *idx) {
    for (int64_t c = 0; c < planes; c++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                int64_t h0 = i * h / oh, h1 = ((i + 1) * h + oh - 1) / oh;
                int64_t w0 = j * w / ow, w1 = ((j + 1) * w + ow - 1) / ow;
                double m = -INFINITY;
                int64_t best = h0 * w + w0;
                for (int64_t a = h0; a < h1; a++)
                    for (int64_t b = w0; b < w1; b++) {
                        double v = x[(c * h + a) * w + b];
                        if (v > m || isnan(v)) {
                            m = v;
                            best = a * w + b;
                        }
                    }
                y[(c * oh + i) * ow + j] = m;
                idx[(c * oh + i) * ow + j] = best;
            }
}

TU_TEST(adaptive_max_pool_ex, indices_against_loops) {
    TU_RNG(r);
    double x[2 * 3 * 7 * 10], y[2 * 3 * 9 * 13];
    int64_t iy[2 * 3 * 9 * 13];
    const int64_t sizes[][2] = {{3, 4}, {7, 10}, {1, 1}, {5, 3}, {9, 13}};
    for (int ties = 0; ties < 2; ties++) {
        kiln_dtype dt = ties ? KILN_F32 : KILN_F64;
        kiln_tensor *tx = tu_rand_tensor(ctx, &r, dt, TU_S(2, 3, 7, 10), ties ? 0 : -2,
                                         ties ? 3 : 2, x);
        if (ties) {
            /* integer values in [0, 3): many tied maxima, the first wins */
            for (int64_t i = 0; i < 2 * 3 * 7 * 10; i++)
                x[i] = floor(x[i]);
            tx = tu_tensor(ctx, dt, TU_S(2, 3, 7, 10), x);
        }
        for (int s = 0; s < 5; s++) {
            int64_t oh = sizes[s][0], ow = sizes[s][1];
            ref_adaptive_idx(x, 6, 7, 10, oh, ow, y, iy);
            kiln_tensor *ti = NULL;
            kiln_tensor *got = kiln_adaptive_max_pool2d_ex(tx, oh, ow, &ti);
            TU_ASSERT_SHAPE(got, 2, 3, oh, ow);
            TU_EXPECT(got, dt, y, 6 * oh * ow);
            TU_ASSERT_SHAPE(ti, 2, 3, oh, ow);
            TU_EXPECT_I64(ti, KILN_I64, iy, 6 * oh * ow);
            TU_EXPECT(kiln_adaptive_max_pool2d_ex(tx, oh, ow, NULL), dt, y, 6 * oh * ow);
        }
    }
    /* by hand: windows rows {0,1},{1,2} by columns {0,1},{1,2}; the 9 at
     * flat 1 comes before the one at 3 */
    kiln_tensor *h = tu_tensor(ctx, KILN_F32, TU_S(1, 3, 3),
                               (const double[]){1, 9, 2, 9, 0, 3, 4, 5, 6});
    kiln_tensor *hi;
    TU_EXPECT_VALS(kiln_adaptive_max_pool2d_ex(h, 2, 2, &hi), KILN_F32, 9, 9, 9, 6);
    TU_EXPECT_I64(hi, KILN_I64, ((const int64_t[]){1, 1, 3, 8}), 4);
    /* 1-d over [C, L], windows {0, 1, 2} and {2, 3, 4}: [1, 3, 2, 5, 4]; and
     * [-inf, -inf, -inf, 7, nan], whose first window reports its first
     * position and whose NaN wins */
    kiln_tensor *z = tu_tensor(ctx, KILN_F32, TU_S(2, 5),
                               (const double[]){1, 3, 2, 5, 4, -INFINITY, -INFINITY, -INFINITY, 7,
                                                NAN});
    kiln_tensor *zi;
    TU_EXPECT_VALS(kiln_adaptive_max_pool1d_ex(z, 2, &zi), KILN_F32, 3, 5, -INFINITY, NAN);
    TU_EXPECT_I64(zi, KILN_I64, ((const int64_t[]){1, 3, 0, 4}), 4);
    /* two NaNs in one window: the first is reported */
    kiln_tensor *n2 = tu_tensor(ctx, KILN_F64, TU_S(1, 4), (const double[]){2, NAN, 1, NAN});
    TU_EXPECT_VALS(kiln_adaptive_max_pool1d_ex(n2, 1, &zi), KILN_F64, NAN);
    TU_EXPECT_I64(zi, KILN_I64, ((const int64_t[]){1}), 1);
    /* random [N, C, L] against the 2-d loop over a height of 1 */
    double l[2 * 3 * 11], ly[2 * 3 * 4];
    int64_t li[2 * 3 * 4];
    kiln_tensor *tl = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 3, 11), -2, 2, l);
    ref_adaptive_idx(l, 6, 1, 11, 1, 4, ly, li);
    kiln_tensor *tli;
    TU_EXPECT(kiln_adaptive_max_pool1d_ex(tl, 4, &tli), KILN_F64, ly, 24);
    TU_EXPECT_I64(tli, KILN_I64, li, 24);
    /* the indices invert through max_unpool2d */
    double xv[2 * 2 * 5 * 7], pv[2 * 2 * 2 * 3], uy[2 * 2 * 5 * 7];
    int64_t pi[2 * 2 * 2 * 3];
    kiln_tensor *tv = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 2, 5, 7), -2, 2, xv);
    ref_adaptive_idx(xv, 4, 5, 7, 2, 3, pv, pi);
    ref_unpool(pv, pi, 4, 6, 35, uy);
    kiln_tensor *ui;
    kiln_tensor *pooled = kiln_adaptive_max_pool2d_ex(tv, 2, 3, &ui);
    TU_EXPECT(kiln_max_unpool2d(pooled, ui, 5, 7), KILN_F64, uy, 4 * 35);
}

/* ---- interpolation: PyTorch's upsample loops, in 2-d directly ---- */

/* sf: a given scale factor (PyTorch's scale_factor without
 * recompute_scale_factor), or 0 */
static double src_of_sf(int64_t o, int64_t in, int64_t out, double sf, bool align, bool cubic) {
    double scale = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0)
                   : sf > 0 ? 1 / sf
                            : (double)in / (double)out;
    if (align)
        return scale * (double)o;
    double s = scale * ((double)o + 0.5) - 0.5;
    return !cubic && s < 0 ? 0 : s;
}

static double src_of(int64_t o, int64_t in, int64_t out, bool align, bool cubic) {
    return src_of_sf(o, in, out, 0, align, cubic);
}

static int64_t near_of_sf(int64_t o, int64_t in, int64_t out, double sf) {
    if (out == in)
        return o;
    if (out == 2 * in)
        return o >> 1;
    float scale = sf > 0 ? (float)(1 / sf) : (float)in / (float)out;
    int64_t i = (int64_t)floorf((float)o * scale);
    return i < in - 1 ? i : in - 1;
}

static int64_t near_of(int64_t o, int64_t in, int64_t out) { return near_of_sf(o, in, out, 0); }

static double cc1(double x, double a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
static double cc2(double x, double a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

static double at(const double *p, int64_t h, int64_t w, int64_t i, int64_t j) {
    i = i < 0 ? 0 : i >= h ? h - 1 : i;
    j = j < 0 ? 0 : j >= w ? w - 1 : j;
    return p[i * w + j];
}

static void ref_interp(kiln_interp_mode mode, bool align, const double *x, int64_t planes,
                       int64_t h, int64_t w, int64_t oh, int64_t ow, double *y) {
    for (int64_t c = 0; c < planes; c++) {
        const double *p = x + c * h * w;
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                double v;
                if (mode == KILN_INTERP_NEAREST) {
                    v = p[near_of(i, h, oh) * w + near_of(j, w, ow)];
                } else if (mode == KILN_INTERP_LINEAR) {
                    double hr = src_of(i, h, oh, align, false), wr = src_of(j, w, ow, align, false);
                    int64_t h1 = (int64_t)hr, w1 = (int64_t)wr;
                    int64_t hp = h1 < h - 1, wp = w1 < w - 1;
                    double hl = hr - (double)h1, wl = wr - (double)w1;
                    v = (1 - hl) * ((1 - wl) * p[h1 * w + w1] + wl * p[h1 * w + w1 + wp]) +
                        hl * ((1 - wl) * p[(h1 + hp) * w + w1] + wl * p[(h1 + hp) * w + w1 + wp]);
                } else {
                    double hr = src_of(i, h, oh, align, true), wr = src_of(j, w, ow, align, true);
                    int64_t hi = (int64_t)floor(hr), wi = (int64_t)floor(wr);
                    double th = hr - (double)hi, tw = wr - (double)wi, A = -0.75;
                    double ch[4] = {cc2(th + 1, A), cc1(th, A), cc1(1 - th, A), cc2(2 - th, A)};
                    double cw[4] = {cc2(tw + 1, A), cc1(tw, A), cc1(1 - tw, A), cc2(2 - tw, A)};
                    v = 0;
                    for (int a = 0; a < 4; a++)
                        for (int b = 0; b < 4; b++)
                            v += ch[a] * cw[b] * at(p, h, w, hi - 1 + a, wi - 1 + b);
                }
                y[(c * oh + i) * ow + j] = v;
            }
    }
}

TU_TEST(interpolate, two_d_against_loops) {
    TU_RNG(r);
    double x[2 * 2 * 5 * 6], y[2 * 2 * 12 * 13];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 2, 5, 6), -2, 2, x);
    const int64_t sizes[][2] = {{10, 12}, {3, 4}, {12, 13}, {1, 6}, {7, 1}};
    const kiln_interp_mode modes[] = {KILN_INTERP_NEAREST, KILN_INTERP_LINEAR, KILN_INTERP_BICUBIC};
    for (int s = 0; s < 5; s++)
        for (int m = 0; m < 3; m++)
            for (int align = 0; align < (m ? 2 : 1); align++) {
                int64_t oh = sizes[s][0], ow = sizes[s][1];
                ref_interp(modes[m], align, x, 4, 5, 6, oh, ow, y);
                kiln_tensor *got = kiln_interpolate(tx, 2, sizes[s], modes[m], align);
                TU_ASSERT_SHAPE(got, 2, 2, oh, ow);
                TU_EXPECT(got, KILN_F64, y, 4 * oh * ow);
            }
    /* f32, and infinities through nearest (a gather, never 0 * inf) */
    double f[1 * 1 * 3 * 3] = {1, INFINITY, 3, 4, 5, -INFINITY, 7, 8, 9}, fy[1 * 1 * 6 * 5];
    kiln_tensor *tf = tu_tensor(ctx, KILN_F32, TU_S(1, 1, 3, 3), f);
    ref_interp(KILN_INTERP_NEAREST, false, f, 1, 3, 3, 6, 5, fy);
    TU_EXPECT(kiln_interpolate(tf, 2, TU_DIMS(6, 5), KILN_INTERP_NEAREST, false), KILN_F32, fy, 30);
}

TU_TEST(interpolate, one_d_against_loops) {
    TU_RNG(r);
    double x[3 * 7], y[3 * 15];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, 3, 7), -2, 2, x);
    const int64_t sizes[] = {15, 4, 7, 1, 14};
    for (int s = 0; s < 5; s++)
        for (int m = 0; m < 2; m++)
            for (int align = 0; align < 1 + m; align++) {
                kiln_interp_mode mode = m ? KILN_INTERP_LINEAR : KILN_INTERP_NEAREST;
                ref_interp(mode, align, x, 3, 1, 7, 1, sizes[s], y);
                kiln_tensor *got = kiln_interpolate(tx, 1, &sizes[s], mode, align);
                TU_ASSERT_SHAPE(got, 1, 3, sizes[s]);
                TU_EXPECT(got, KILN_F32, y, 3 * sizes[s]);
            }
}

/* PyTorch's upsample_nearest3d and upsample_trilinear3d loops over
 * [planes, D, H, W], with scale factors sf (NULL: from the sizes). */
static void ref_interp3(bool linear, bool align, const double *x, int64_t planes,
                        const int64_t *in, const int64_t *out, const double *sf, double *y) {
    int64_t ni = in[0] * in[1] * in[2], no = out[0] * out[1] * out[2];
    for (int64_t c = 0; c < planes; c++)
        for (int64_t f = 0; f < no; f++) {
            int64_t o[3] = {f / (out[1] * out[2]), f / out[2] % out[1], f % out[2]};
            int64_t i0[3], step[3];
            double l1[3];
            for (int a = 0; a < 3; a++) {
                double g = sf ? sf[a] : 0;
                if (!linear) {
                    i0[a] = near_of_sf(o[a], in[a], out[a], g);
                    continue;
                }
                double r = src_of_sf(o[a], in[a], out[a], g, align, false);
                i0[a] = (int64_t)r;
                step[a] = i0[a] < in[a] - 1;
                l1[a] = r - (double)i0[a];
            }
            const double *p = x + c * ni;
            double v = 0;
            if (!linear)
                v = p[(i0[0] * in[1] + i0[1]) * in[2] + i0[2]];
            else
                for (int corner = 0; corner < 8; corner++) {
                    double wgt = 1;
                    int64_t at[3];
                    for (int a = 0; a < 3; a++) {
                        int hi = corner >> (2 - a) & 1;
                        wgt *= hi ? l1[a] : 1 - l1[a];
                        at[a] = i0[a] + (hi ? step[a] : 0);
                    }
                    v += wgt * p[(at[0] * in[1] + at[1]) * in[2] + at[2]];
                }
            y[c * no + f] = v;
        }
}

TU_TEST(interpolate, three_d_against_loops) {
    TU_RNG(r);
    const int64_t in[3] = {3, 4, 5};
    double x[2 * 2 * 3 * 4 * 5], y[2 * 2 * 7 * 8 * 9];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 2, 3, 4, 5), -2, 2, x);
    const int64_t sizes[][3] = {{6, 8, 10}, {2, 3, 2}, {7, 1, 9}, {3, 4, 5}};
    for (int s = 0; s < 4; s++)
        for (int m = 0; m < 2; m++)
            for (int align = 0; align < 1 + m; align++) {
                const int64_t *o = sizes[s];
                ref_interp3(m, align, x, 4, in, o, NULL, y);
                kiln_tensor *got = kiln_interpolate(
                    tx, 3, o, m ? KILN_INTERP_LINEAR : KILN_INTERP_NEAREST, align);
                TU_ASSERT_SHAPE(got, 2, 2, o[0], o[1], o[2]);
                TU_EXPECT(got, KILN_F64, y, 4 * o[0] * o[1] * o[2]);
            }
}

TU_TEST(interpolate, scale_factors) {
    TU_RNG(r);
    /* 3-d: factors whose in * factor is not an integer, so that 1/factor
     * and in/out differ, with and without recompute_scale_factor */
    const int64_t in[3] = {3, 4, 5};
    const double sf[3] = {1.5, 0.7, 1.9};
    const int64_t o[3] = {4, 2, 9}; /* floor(in * sf) */
    double x[2 * 3 * 4 * 5], y[2 * 4 * 2 * 9], y2[2 * 4 * 2 * 9];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(1, 2, 3, 4, 5), -2, 2, x);
    for (int m = 0; m < 2; m++)
        for (int align = 0; align < 1 + m; align++) {
            kiln_interp_mode mode = m ? KILN_INTERP_LINEAR : KILN_INTERP_NEAREST;
            ref_interp3(m, align, x, 2, in, o, sf, y);
            ref_interp3(m, align, x, 2, in, o, NULL, y2);
            if (!align) {
                bool differ = false;
                for (int i = 0; i < 2 * 4 * 2 * 9; i++)
                    differ |= y[i] != y2[i];
                cr_assert(differ, "the factors must change the result (mode %d)", m);
            }
            kiln_tensor *got = kiln_interpolate_scale(tx, 3, sf, mode, align, false);
            TU_ASSERT_SHAPE(got, 1, 2, 4, 2, 9);
            TU_EXPECT(got, KILN_F64, y, 2 * 4 * 2 * 9);
            TU_EXPECT(kiln_interpolate_scale(tx, 3, sf, mode, align, true), KILN_F64, y2,
                      2 * 4 * 2 * 9);
        }
    /* 2-d bicubic and bilinear in f32, and 1-d linear, with factors */
    double a[2 * 5 * 6], ay[2 * 8 * 15];
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, 2, 5, 6), -2, 2, a);
    const double sf2[2] = {1.7, 2.5};
    for (int m = 1; m < 3; m++) {
        kiln_interp_mode mode = m == 1 ? KILN_INTERP_LINEAR : KILN_INTERP_BICUBIC;
        /* the 3-d loop has no cubic: linear against it, and both against
         * the sizes-given form where the factors are exact */
        kiln_tensor *got = kiln_interpolate_scale(ta, 2, sf2, mode, false, false);
        TU_ASSERT_SHAPE(got, 1, 2, 8, 15);
        if (m == 1) {
            ref_interp3(true, false, a, 2, (const int64_t[]){1, 5, 6}, (const int64_t[]){1, 8, 15},
                        (const double[]){0, 1.7, 2.5}, ay);
            TU_EXPECT(got, KILN_F32, ay, 2 * 8 * 15);
        }
        double sized[2 * 10 * 15];
        TU_READ(kiln_interpolate(ta, 2, TU_DIMS(10, 15), mode, false), sized, 2 * 10 * 15);
        TU_EXPECT(kiln_interpolate_scale(ta, 2, (const double[]){2, 2.5}, mode, false, false),
                  KILN_F32, sized, 2 * 10 * 15);
    }
    double b[3 * 7], by[3 * 9];
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, 3, 7), -2, 2, b);
    ref_interp3(true, false, b, 3, (const int64_t[]){1, 1, 7}, (const int64_t[]){1, 1, 9},
                (const double[]){0, 0, 1.3}, by);
    TU_EXPECT(kiln_interpolate_scale(tb, 1, (const double[]){1.3}, KILN_INTERP_LINEAR, false,
                                     false),
              KILN_F32, by, 27);
}

/* ---- kernel counts ---- */

static int64_t kernels_for(kiln_ctx *ctx, kiln_tensor *t) {
    int64_t before = kiln_ctx_stats(ctx).kernels;
    cr_assert_eq(kiln_realize(t), KILN_OK, "%s", kiln_error_message(t));
    return kiln_ctx_stats(ctx).kernels - before;
}

Test(conv_kernels, lazy_counts) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    cr_assert_not_null(ctx);
    kiln_tensor *v = kiln_randn(ctx, KILN_F32, TU_S(2, 3, 6, 8, 8), 1);
    kiln_tensor *w3 = kiln_randn(ctx, KILN_F32, TU_S(4, 3, 3, 3, 3), 2);
    kiln_tensor *img = kiln_randn(ctx, KILN_F32, TU_S(2, 4, 10, 10), 3);
    kiln_tensor *wt = kiln_randn(ctx, KILN_F32, TU_S(4, 3, 3, 3), 4);
    kiln_tensor *b = kiln_randn(ctx, KILN_F32, TU_S(3), 5);
    kiln_tensor *inputs[] = {v, w3, img, wt, b};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(kiln_realize(inputs[i]), KILN_OK);
    const int64_t one3[3] = {1, 1, 1}, two[2] = {2, 2}, one[2] = {1, 1}, zero[2] = {0, 0};
    kiln_tensor *idx;
    int64_t counts[14];
    const char *names[14] = {"conv3d",       "conv_transpose2d", "max_pool2d_ex+indices",
                             "avg_pool2d_ex", "max_pool3d",       "max_unpool2d",
                             "adaptive_avg", "adaptive_max",     "bicubic",
                             "max_unpool1d", "max_unpool3d",     "adaptive_max_ex+indices",
                             "trilinear",    "bilinear_scale"};
    counts[0] = kernels_for(ctx, kiln_conv3d(v, w3, NULL, one3, one3, one3, 1));
    /* Unpadded, with output rows of 8 or more: on the C path the matmul
     * reads its im2col in place from the input (one kernel, where a copy
     * of the im2col came first); elsewhere, and where every program must
     * also compile for CUDA, the copy is still made. */
    {
        const char *cc = getenv("KILN_CPU_COMPILER"), *cuda = getenv("KILN_CHECK_CUDA");
        bool c_path = (!cc || !*cc || !strcmp(cc, "cc")) && !(cuda && !strcmp(cuda, "1"));
        kiln_tensor *wide = kiln_randn(ctx, KILN_F32, TU_S(2, 3, 6, 20), 6);
        cr_assert_eq(kiln_realize(wide), KILN_OK);
        int64_t n = kernels_for(ctx, kiln_conv2d(wide, wt, NULL, 1, 1, 0, 0, 1, 1, 1));
        cr_assert_eq(n, c_path ? 1 : 2, "conv2d 2x3x6x20 by 4x3x3x3 unpadded: %lld kernels",
                     (long long)n);
        /* The same under no-grad, whose views compose as well, and whose
         * identity over the weights (the weights are not cut off from
         * gradients) the matmul reads through in place: no copy more. */
        kiln_no_grad_begin(ctx);
        n = kernels_for(ctx, kiln_conv2d(wide, wt, NULL, 1, 1, 0, 0, 1, 1, 1));
        kiln_no_grad_end(ctx);
        cr_assert_eq(n, c_path ? 1 : 2, "conv2d under no-grad: %lld kernels", (long long)n);
    }
    counts[1] = kernels_for(ctx, kiln_conv_transpose2d(img, wt, b, two, one, one, one, 1));
    kiln_tensor *mp = kiln_max_pool2d_ex(img, TU_DIMS(3, 3), two, one, one, true, &idx);
    counts[2] = kernels_for(ctx, kiln_add(mp, kiln_cast(idx, KILN_F32)));
    counts[3] = kernels_for(ctx, kiln_avg_pool2d_ex(img, TU_DIMS(3, 3), two, one, true, false));
    counts[4] = kernels_for(ctx, kiln_max_pool3d(v, TU_DIMS(2, 2, 2), TU_DIMS(2, 2, 2),
                                                 TU_DIMS(0, 0, 0), one3, false, NULL));
    kiln_tensor *mp2 = kiln_max_pool2d_ex(img, two, two, zero, one, false, &idx);
    cr_assert_eq(kiln_realize(idx), KILN_OK);
    cr_assert_eq(kiln_realize(mp2), KILN_OK);
    counts[5] = kernels_for(ctx, kiln_max_unpool2d(mp2, idx, 10, 10));
    counts[6] = kernels_for(ctx, kiln_adaptive_avg_pool2d(img, 3, 4));
    counts[7] = kernels_for(ctx, kiln_adaptive_max_pool2d(img, 3, 4));
    counts[8] = kernels_for(ctx, kiln_interpolate(img, 2, TU_DIMS(17, 13), KILN_INTERP_BICUBIC, false));
    kiln_tensor *flat = kiln_reshape(img, TU_S(2, 4, 100));
    kiln_tensor *mp1 = kiln_max_pool1d_ex(flat, 2, 2, 0, 1, false, &idx);
    cr_assert_eq(kiln_realize(idx), KILN_OK);
    cr_assert_eq(kiln_realize(mp1), KILN_OK);
    counts[9] = kernels_for(ctx, kiln_max_unpool1d(mp1, idx, 100));
    kiln_tensor *mp3 = kiln_max_pool3d(v, TU_DIMS(2, 2, 2), TU_DIMS(2, 2, 2), TU_DIMS(0, 0, 0),
                                       one3, false, &idx);
    cr_assert_eq(kiln_realize(idx), KILN_OK);
    cr_assert_eq(kiln_realize(mp3), KILN_OK);
    counts[10] = kernels_for(ctx, kiln_max_unpool3d(mp3, idx, TU_DIMS(6, 8, 8)));
    kiln_tensor *am = kiln_adaptive_max_pool2d_ex(img, 3, 4, &idx);
    counts[11] = kernels_for(ctx, kiln_add(am, kiln_cast(idx, KILN_F32)));
    counts[12] =
        kernels_for(ctx, kiln_interpolate(v, 3, TU_DIMS(9, 5, 11), KILN_INTERP_LINEAR, true));
    counts[13] = kernels_for(ctx, kiln_interpolate_scale(img, 2, (const double[]){1.5, 2.5},
                                                         KILN_INTERP_LINEAR, false, false));
    /* the constant-per-tap index vectors must not cost a kernel each */
    cr_assert_leq(counts[11], 2, "adaptive max with indices: %lld kernels", (long long)counts[11]);
    cr_assert_leq(counts[9], 1, "max_unpool1d: %lld kernels", (long long)counts[9]);
    fprintf(stderr, "conv kernels (lazy):");
    for (int i = 0; i < 14; i++)
        fprintf(stderr, " %s %lld%s", names[i], (long long)counts[i], i < 13 ? "," : "\n");
    kiln_ctx_free(ctx);
}

/* ---- errors ---- */

TU_TEST(conv_errors, name_the_op_and_shapes) {
    kiln_tensor *v = kiln_zeros(ctx, KILN_F32, TU_S(1, 4, 5, 5, 5));
    kiln_tensor *w = kiln_zeros(ctx, KILN_F32, TU_S(2, 2, 3, 3, 3));
    const int64_t one3[3] = {1, 1, 1}, zero3[3] = {0, 0, 0}, bad3[3] = {1, 0, 1};
    TU_ASSERT_ERROR(kiln_conv3d(v, w, NULL, bad3, zero3, one3, 2), KILN_ERR_ARG, "kiln_conv3d");
    TU_ASSERT_ERROR(kiln_conv3d(v, w, NULL, one3, zero3, one3, 1), KILN_ERR_SHAPE, "kiln_conv3d");
    TU_ASSERT_ERROR(kiln_conv3d(v, w, NULL, NULL, zero3, one3, 2), KILN_ERR_ARG, "NULL");
    TU_ASSERT_ERROR(kiln_conv3d(v, w, NULL, one3, zero3, (const int64_t[]){1, 1, 3}, 2),
                    KILN_ERR_SHAPE, "[2,2,3,3,3]");
    TU_ASSERT_ERROR(kiln_conv3d(v, w, kiln_zeros(ctx, KILN_F32, TU_S(3)), one3, zero3, one3, 2),
                    KILN_ERR_SHAPE, "bias");
    TU_ASSERT_ERROR(kiln_conv3d(kiln_zeros(ctx, KILN_I32, TU_S(1, 4, 5, 5, 5)), w, NULL, one3,
                                zero3, one3, 2),
                    KILN_ERR_DTYPE, "kiln_conv3d");
    kiln_tensor *x = kiln_zeros(ctx, KILN_F32, TU_S(1, 4, 3, 3));
    kiln_tensor *wt = kiln_zeros(ctx, KILN_F32, TU_S(4, 1, 2, 2));
    const int64_t two[2] = {2, 2}, one[2] = {1, 1}, zero[2] = {0, 0};
    /* output padding must be below the stride or the dilation */
    TU_ASSERT_ERROR(kiln_conv_transpose2d(x, wt, NULL, two, zero, two, one, 1), KILN_ERR_ARG,
                    "output_padding");
    TU_ASSERT_OK(kiln_conv_transpose2d(x, wt, NULL, one, zero, one, two, 1));
    TU_ASSERT_ERROR(kiln_conv_transpose2d(x, wt, NULL, two, zero, zero, one, 3), KILN_ERR_SHAPE,
                    "kiln_conv_transpose2d");
    TU_ASSERT_ERROR(kiln_conv_transpose2d(x, kiln_zeros(ctx, KILN_F32, TU_S(3, 1, 2, 2)), NULL,
                                          two, zero, zero, one, 1),
                    KILN_ERR_SHAPE, "[3,1,2,2]");
    TU_ASSERT_ERROR(kiln_conv_transpose2d(x, wt, NULL, one, (const int64_t[]){3, 0}, zero, one, 1),
                    KILN_ERR_SHAPE, "output size");
    TU_ASSERT_ERROR(kiln_conv_transpose1d(x, wt, NULL, 1, 0, 0, 1, 1), KILN_ERR_SHAPE,
                    "kiln_conv_transpose1d");
    TU_ASSERT_ERROR(kiln_conv_transpose3d(v, w, NULL, one3, zero3, zero3, one3, 2), KILN_ERR_SHAPE,
                    "kiln_conv_transpose3d");
    /* pooling */
    kiln_tensor *idx = (kiln_tensor *)1;
    TU_ASSERT_ERROR(kiln_max_pool2d_ex(x, two, two, (const int64_t[]){2, 0}, one, false, &idx),
                    KILN_ERR_ARG, "kiln_max_pool2d_ex");
    cr_assert_null(idx);
    TU_ASSERT_ERROR(kiln_max_pool2d_ex(x, TU_DIMS(3, 3), one, zero, two, false, &idx),
                    KILN_ERR_SHAPE, "[1,4,3,3]");
    TU_ASSERT_ERROR(kiln_max_pool2d_ex(x, NULL, one, zero, one, false, NULL), KILN_ERR_ARG,
                    "NULL");
    TU_ASSERT_ERROR(kiln_avg_pool2d_ex(kiln_zeros(ctx, KILN_F32, TU_S(3)), two, two, zero, false,
                                       true),
                    KILN_ERR_SHAPE, "kiln_avg_pool2d_ex");
    TU_ASSERT_ERROR(kiln_max_pool3d(x, TU_DIMS(2, 2, 2), TU_DIMS(0, 1, 1), zero3, one3, false,
                                    NULL),
                    KILN_ERR_ARG, "kiln_max_pool3d");
    TU_ASSERT_ERROR(kiln_avg_pool1d_ex(x, 2, 1, 0, false, true), KILN_ERR_SHAPE,
                    "kiln_avg_pool1d_ex");
    /* unpooling */
    kiln_tensor *i = tu_tensor_i64(ctx, KILN_I64, TU_S(1, 1, 2), (const int64_t[]){0, 9});
    kiln_tensor *u = kiln_zeros(ctx, KILN_F32, TU_S(1, 1, 2));
    TU_ASSERT_ERROR(kiln_max_unpool2d(u, i, 3, 3), KILN_ERR_ARG, "outside [0, 9)");
    TU_ASSERT_ERROR(kiln_max_unpool2d(u, kiln_zeros(ctx, KILN_F32, TU_S(1, 1, 2)), 3, 3),
                    KILN_ERR_DTYPE, "kiln_max_unpool2d");
    TU_ASSERT_ERROR(kiln_max_unpool2d(u, kiln_zeros(ctx, KILN_I64, TU_S(1, 2, 1)), 3, 3),
                    KILN_ERR_SHAPE, "[1,2,1]");
    TU_ASSERT_ERROR(kiln_max_unpool2d(u, i, 0, 3), KILN_ERR_ARG, "kiln_max_unpool2d");
    TU_ASSERT_ERROR(kiln_max_unpool1d(u, i, 5), KILN_ERR_ARG, "outside [0, 5)");
    TU_ASSERT_ERROR(kiln_max_unpool1d(x, kiln_zeros(ctx, KILN_I64, TU_S(1, 4, 3, 3)), 5),
                    KILN_ERR_SHAPE, "kiln_max_unpool1d");
    TU_ASSERT_ERROR(kiln_max_unpool1d(u, kiln_zeros(ctx, KILN_BOOL, TU_S(1, 1, 2)), 5),
                    KILN_ERR_DTYPE, "bool");
    TU_ASSERT_ERROR(kiln_max_unpool3d(kiln_reshape(u, TU_S(1, 1, 1, 2)),
                                      tu_tensor_i64(ctx, KILN_I64, TU_S(1, 1, 1, 2),
                                                    (const int64_t[]){0, 9}),
                                      TU_DIMS(3, 1, 3)),
                    KILN_ERR_ARG, "outside [0, 9)");
    TU_ASSERT_ERROR(kiln_max_unpool3d(x, kiln_zeros(ctx, KILN_I64, TU_S(1, 4, 3, 2)),
                                      TU_DIMS(2, 2, 3)),
                    KILN_ERR_SHAPE, "[1,4,3,2]");
    TU_ASSERT_ERROR(kiln_max_unpool3d(x, kiln_zeros(ctx, KILN_I64, TU_S(1, 4, 3, 3)), NULL),
                    KILN_ERR_ARG, "NULL");
    TU_ASSERT_ERROR(kiln_max_unpool3d(x, kiln_zeros(ctx, KILN_I64, TU_S(1, 4, 3, 3)),
                                      TU_DIMS(2, -1, 3)),
                    KILN_ERR_ARG, "kiln_max_unpool3d");
    /* adaptive pooling and interpolation */
    TU_ASSERT_ERROR(kiln_adaptive_avg_pool2d(x, 0, 2), KILN_ERR_ARG, "kiln_adaptive_avg_pool2d");
    TU_ASSERT_ERROR(kiln_adaptive_max_pool1d(v, 2), KILN_ERR_SHAPE, "kiln_adaptive_max_pool1d");
    TU_ASSERT_ERROR(kiln_interpolate(x, 4, TU_DIMS(2, 2, 2, 2), KILN_INTERP_LINEAR, false),
                    KILN_ERR_ARG, "kiln_interpolate");
    TU_ASSERT_ERROR(kiln_interpolate(x, 3, TU_DIMS(2, 2, 2), KILN_INTERP_LINEAR, false),
                    KILN_ERR_SHAPE, "[1,4,3,3]");
    TU_ASSERT_ERROR(kiln_interpolate(v, 3, TU_DIMS(2, 2, 2), KILN_INTERP_BICUBIC, false),
                    KILN_ERR_ARG, "bicubic");
    TU_ASSERT_ERROR(kiln_interpolate_scale(x, 2, (const double[]){2, 0}, KILN_INTERP_LINEAR,
                                           false, false),
                    KILN_ERR_ARG, "kiln_interpolate_scale");
    TU_ASSERT_ERROR(kiln_interpolate_scale(x, 2, (const double[]){2, NAN}, KILN_INTERP_LINEAR,
                                           false, true),
                    KILN_ERR_ARG, "[1,4,3,3]");
    TU_ASSERT_ERROR(kiln_interpolate_scale(x, 2, (const double[]){0.2, 1}, KILN_INTERP_NEAREST,
                                           false, false),
                    KILN_ERR_ARG, "size >= 1");
    TU_ASSERT_ERROR(kiln_interpolate_scale(x, 2, NULL, KILN_INTERP_LINEAR, false, false),
                    KILN_ERR_ARG, "NULL");
    TU_ASSERT_ERROR(kiln_interpolate_scale(x, 3, (const double[]){2, 2, 2}, KILN_INTERP_LINEAR,
                                           false, false),
                    KILN_ERR_SHAPE, "kiln_interpolate_scale");
    TU_ASSERT_ERROR(kiln_interpolate_scale(x, 2, (const double[]){2, 2}, KILN_INTERP_NEAREST,
                                           true, false),
                    KILN_ERR_ARG, "align_corners");
    TU_ASSERT_ERROR(kiln_adaptive_max_pool2d_ex(x, 0, 2, &idx), KILN_ERR_ARG,
                    "kiln_adaptive_max_pool2d_ex");
    cr_assert_null(idx);
    TU_ASSERT_ERROR(kiln_adaptive_max_pool1d_ex(v, 2, &idx), KILN_ERR_SHAPE, "[1,4,5,5,5]");
    cr_assert_null(idx);
    TU_ASSERT_ERROR(kiln_interpolate(x, 1, TU_DIMS(2), KILN_INTERP_LINEAR, false), KILN_ERR_SHAPE,
                    "[1,4,3,3]");
    TU_ASSERT_ERROR(kiln_interpolate(kiln_zeros(ctx, KILN_F32, TU_S(1, 4, 3)), 1, TU_DIMS(2),
                                     KILN_INTERP_BICUBIC, false),
                    KILN_ERR_ARG, "bicubic");
    TU_ASSERT_ERROR(kiln_interpolate(x, 2, TU_DIMS(2, 2), KILN_INTERP_NEAREST, true), KILN_ERR_ARG,
                    "align_corners");
    TU_ASSERT_ERROR(kiln_interpolate(x, 2, TU_DIMS(2, -1), KILN_INTERP_LINEAR, false), KILN_ERR_ARG,
                    "kiln_interpolate");
    TU_ASSERT_ERROR(kiln_interpolate(x, 2, TU_DIMS(2, 2), (kiln_interp_mode)7, false), KILN_ERR_ARG,
                    "mode");
    /* errors pass on; NULL everywhere gives NULL */
    kiln_tensor *bad = kiln_conv3d(v, w, NULL, bad3, zero3, one3, 2);
    TU_ASSERT_ERROR(kiln_interpolate(bad, 2, TU_DIMS(2, 2), KILN_INTERP_LINEAR, false),
                    KILN_ERR_ARG, "kiln_conv3d");
    cr_assert_null(kiln_conv3d(NULL, NULL, NULL, one3, zero3, one3, 1));
    cr_assert_null(kiln_max_pool2d_ex(NULL, two, two, zero, one, false, NULL));
    cr_assert_null(kiln_interpolate(NULL, 2, two, KILN_INTERP_LINEAR, false));
    cr_assert_null(kiln_interpolate_scale(NULL, 2, (const double[]){2, 2}, KILN_INTERP_LINEAR,
                                          false, false));
    cr_assert_null(kiln_max_unpool1d(NULL, NULL, 3));
    cr_assert_null(kiln_adaptive_max_pool2d_ex(NULL, 2, 2, NULL));
}
