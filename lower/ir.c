/* ir.c — building kernel IR: interning, and simplification of index
 * arithmetic by value ranges (x / d is 0 when x < d, x % d is x, …), which is
 * what turns a contiguous access back into a plain flat index. */
#include <stdlib.h>
#include <string.h>

#include "lower/ir.h"

void ir_init(ir_builder *b) {
    memset(b, 0, sizeof *b);
}

void ir_free(ir_builder *b) {
    free(b->ins);
    free(b->min);
    free(b->table);
    memset(b, 0, sizeof *b);
}

static uint64_t ins_hash(const lower_ins *x) {
    uint64_t h = 1469598103934665603ull;
    int64_t parts[9] = {x->op, x->dt, x->gop, x->prim, x->a, x->b, x->c, x->buf, x->imm.i};
    for (int i = 0; i < 9; i++) {
        h ^= (uint64_t)parts[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

static bool ins_equal(const lower_ins *x, const lower_ins *y) {
    return x->op == y->op && x->dt == y->dt && x->gop == y->gop && x->prim == y->prim &&
           x->a == y->a &&
           x->b == y->b && x->c == y->c && x->buf == y->buf && x->imm.i == y->imm.i;
}

static bool grow(ir_builder *b) {
    if (b->n < b->cap && (int64_t)(b->n + 1) * 2 < b->tcap)
        return true;
    int cap = b->cap ? b->cap * 2 : 64;
    lower_ins *ins = realloc(b->ins, sizeof *ins * (size_t)cap);
    if (ins)
        b->ins = ins;
    int64_t *mn = realloc(b->min, sizeof *mn * (size_t)cap);
    if (mn)
        b->min = mn;
    int tcap = cap * 4;
    int *table = malloc(sizeof *table * (size_t)tcap);
    if (!ins || !mn || !table) {
        free(table);
        return false;
    }
    memset(table, 0xff, sizeof *table * (size_t)tcap);
    for (int i = 0; i < b->n; i++) {
        size_t s = ins_hash(&b->ins[i]) & (size_t)(tcap - 1);
        while (table[s] >= 0)
            s = (s + 1) & (size_t)(tcap - 1);
        table[s] = i;
    }
    free(b->table);
    b->table = table;
    b->tcap = tcap;
    b->cap = cap;
    return true;
}

/* Range of an index value; non-index values get a harmless wide range. */
static void bounds(const ir_builder *b, int id, int64_t *lo, int64_t *hi) {
    *lo = b->min[id];
    *hi = b->ins[id].max;
}

int ir_add(ir_builder *b, lower_ins p) {
    if (b->failed)
        return 0;
    /* Unused operand slots are -1. A reduction's value exists once the
     * reduced loop is done, so it is outer whatever it reads. */
    p.inner = p.op == UOP_RIDX;
    int ops[3] = {p.a, p.b, p.c};
    for (int i = 0; i < 3 && p.op != UOP_REDUCE; i++)
        if (ops[i] >= 0 && b->ins[ops[i]].inner)
            p.inner = true;
    /* Derived once here: walking the operands instead took time
     * exponential in the depth of shared index arithmetic (a fuzzer's
     * chain of pools and pads ran past its 10 s per input). */
    p.lane = p.op == UOP_LANE || (p.op >= UOP_IADD && p.op <= UOP_IMOD &&
                                  ((p.a >= 0 && b->ins[p.a].lane) || (p.b >= 0 && b->ins[p.b].lane)));
    if (!grow(b)) {
        b->failed = true;
        return 0;
    }
    size_t s = ins_hash(&p) & (size_t)(b->tcap - 1);
    while (b->table[s] >= 0) {
        if (ins_equal(&b->ins[b->table[s]], &p))
            return b->table[s];
        s = (s + 1) & (size_t)(b->tcap - 1);
    }
    int id = b->n++;
    int64_t lo = INT64_MIN / 4, hi = INT64_MAX / 4;
    if (p.op == UOP_IMM && p.dt == KILN_I64)
        lo = hi = p.imm.i;
    else if (p.op == UOP_GIDX || p.op == UOP_RIDX || p.op == UOP_TILE || p.op == UOP_LANE)
        lo = 0, hi = p.max;
    else if (p.op >= UOP_IADD && p.op <= UOP_IMOD) {
        int64_t al, ah, bl, bh;
        bounds(b, p.a, &al, &ah);
        bounds(b, p.b, &bl, &bh);
        if (p.op == UOP_IADD) {
            lo = al + bl;
            hi = ah + bh;
        } else if (p.op == UOP_IMUL) {
            lo = bl >= 0 ? al * bl : ah * bl;
            hi = bl >= 0 ? ah * bl : al * bl;
        } else if (p.op == UOP_IDIV) {
            lo = al / bl;
            hi = ah / bl;
        } else {
            lo = al >= 0 ? 0 : -(bl - 1);
            hi = bl - 1 < ah || al < 0 ? bl - 1 : ah;
        }
    } else if (p.op == UOP_ILT || p.op == UOP_AND || p.op == UOP_IVALID)
        lo = 0, hi = 1;
    else if (p.op == UOP_ICLAMP)
        lo = 0, hi = p.imm.i > 0 ? p.imm.i - 1 : 0;
    p.min = lo;
    p.max = hi;
    b->ins[id] = p;
    b->min[id] = lo;
    b->table[s] = id;
    return id;
}

static lower_ins proto(lower_uop op, kiln_dtype dt) {
    lower_ins p;
    memset(&p, 0, sizeof p);
    p.op = op;
    p.dt = dt;
    p.a = p.b = p.c = -1;
    p.buf = -1;
    return p;
}

int ir_gidx(ir_builder *b, int64_t numel) {
    lower_ins p = proto(UOP_GIDX, KILN_I64);
    p.max = numel > 0 ? numel - 1 : 0;
    return ir_add(b, p);
}

/* id, whose value is known to be at most hi wherever it is computed (it
 * equals an expression of that bound): its bound tightened, so that later
 * tests fold (the tile's row t * 4 + lane / 256 stays below the rows of
 * the tensor, as the flat index's quotient it is does). */
static int at_most(ir_builder *b, int id, int64_t hi) {
    if (!b->failed && b->ins[id].op != UOP_IMM && b->ins[id].max > hi && hi >= b->min[id])
        b->ins[id].max = hi;
    return id;
}

int ir_tiled_gidx(ir_builder *b, int64_t numel, int64_t tile) {
    int64_t tiles = numel > 0 ? (numel + tile - 1) / tile : 0;
    lower_ins t = proto(UOP_TILE, KILN_I64), l = proto(UOP_LANE, KILN_I64);
    t.max = tiles > 0 ? tiles - 1 : 0;
    l.max = (numel < tile ? numel : tile) - 1;
    if (l.max < 0)
        l.max = 0;
    /* the tile's term even where there is one tile: a graph whose sizes
     * differ keeps the same arithmetic, and may share the program */
    int g = ir_iadd(b, ir_imul(b, ir_add(b, t), tile), ir_add(b, l));
    /* the last tile may be partial: the flat index stays below numel (the
     * bound a plain GIDX has, which folds x / numel to 0) */
    return numel > 0 ? at_most(b, g, numel - 1) : g;
}

int ir_ridx(ir_builder *b, int64_t rnumel) {
    lower_ins p = proto(UOP_RIDX, KILN_I64);
    p.max = rnumel > 0 ? rnumel - 1 : 0;
    p.imm.i = rnumel; /* a scatter kernel's passes differ in length: distinct values */
    return ir_add(b, p);
}

int ir_imm(ir_builder *b, kiln_dtype dt, graph_scalar v) {
    lower_ins p = proto(UOP_IMM, dt);
    if (graph_dtype_is_float(dt))
        p.imm.f = v.f;
    else
        p.imm.i = v.i;
    return ir_add(b, p);
}

int ir_index(ir_builder *b, int64_t v) { return ir_imm(b, KILN_I64, (graph_scalar){.i = v}); }
int ir_bool(ir_builder *b, bool v) { return ir_imm(b, KILN_BOOL, (graph_scalar){.i = v}); }

bool ir_is_index(const ir_builder *b, int id, int64_t v) {
    return !b->failed && b->ins[id].op == UOP_IMM && b->ins[id].dt == KILN_I64 &&
           b->ins[id].imm.i == v;
}

static bool is_imm(const ir_builder *b, int id, int64_t *v) {
    if (b->failed || b->ins[id].op != UOP_IMM || b->ins[id].dt != KILN_I64)
        return false;
    *v = b->ins[id].imm.i;
    return true;
}

static int binop(ir_builder *b, lower_uop op, kiln_dtype dt, int x, int y) {
    lower_ins p = proto(op, dt);
    p.a = x;
    p.b = y;
    return ir_add(b, p);
}

static bool recombine(ir_builder *b, int x, int y, int *out);

int ir_iadd(ir_builder *b, int x, int y) {
    int64_t u, v;
    bool cx = is_imm(b, x, &u), cy = is_imm(b, y, &v);
    if (cx && cy)
        return ir_index(b, u + v);
    if (cx && u == 0)
        return y;
    if (cy && v == 0)
        return x;
    int r;
    if (recombine(b, x, y, &r))
        return r;
    /* Commutative: one operand order, so that x+y and y+x intern as one. */
    return binop(b, UOP_IADD, KILN_I64, x < y ? x : y, x < y ? y : x);
}

int ir_imul(ir_builder *b, int x, int64_t c) {
    int64_t u;
    if (c == 0)
        return ir_index(b, 0);
    if (c == 1)
        return x;
    if (is_imm(b, x, &u))
        return ir_index(b, u * c);
    return binop(b, UOP_IMUL, KILN_I64, x, ir_index(b, c));
}

/* Up to SPLIT_TERMS terms of a sum of index values. */
#define SPLIT_TERMS 24

/* Collects x's terms: each an index value times an immediate factor, or an
 * immediate (id -1), all times m. With expand, a sum times an immediate
 * counts as its terms times it ((h + kh) W: what recombine looks into);
 * without, as one term (what split_sum and split_coarse see, so that their
 * folds stay what they were before tiles: a program shared by several sizes
 * depends on which folds happen). False when there are more than
 * SPLIT_TERMS. */
static bool collect_terms(const ir_builder *b, int x, int64_t m, bool expand, int *id,
                          int64_t *f, int *n) {
    const lower_ins *xi = &b->ins[x];
    int64_t c;
    if (xi->op == UOP_IADD && xi->dt == KILN_I64)
        return collect_terms(b, xi->a, m, expand, id, f, n) &&
               collect_terms(b, xi->b, m, expand, id, f, n);
    if (expand && xi->op == UOP_IMUL && is_imm(b, xi->b, &c) && b->ins[xi->a].op == UOP_IADD)
        return collect_terms(b, xi->a, m * c, expand, id, f, n);
    if (*n == SPLIT_TERMS)
        return false;
    if (is_imm(b, x, &c)) {
        id[*n] = -1;
        f[(*n)++] = c * m;
    } else if (xi->op == UOP_IMUL && is_imm(b, xi->b, &c)) {
        id[*n] = xi->a;
        f[(*n)++] = c * m;
    } else {
        id[*n] = x;
        f[(*n)++] = m;
    }
    return true;
}

static bool sum_terms(const ir_builder *b, int x, int *id, int64_t *f, int *n) {
    return collect_terms(b, x, 1, false, id, f, n);
}

/* Whether index value x depends on an elementwise kernel's lane. Only
 * there is the pair put back together: elsewhere the folds stay what they
 * were, which programs shared between sizes depend on. */
static bool has_lane(const ir_builder *b, int x) { return b->ins[x].lane; }

/* Index value x as (v / d) % m: its v and d (1 when x is no quotient), m
 * (0 when x is no remainder). A plain value is (v / 1), m 0. */
static void digit_of(const ir_builder *b, int x, int *v, int64_t *d, int64_t *m) {
    const lower_ins *xi = &b->ins[x];
    *m = 0;
    if (xi->op == UOP_IMOD && is_imm(b, xi->b, m))
        xi = &b->ins[x = xi->a];
    *d = 1;
    *v = x;
    if (xi->op == UOP_IDIV && is_imm(b, xi->b, d) && *d >= 2)
        *v = xi->a;
    else
        *d = 1;
}

/* Two digits of one value, the lower (v / d) % c times f and the next
 * (v / (d c)) % m times c f (or v / (d c) itself: m 0), are one:
 * (v / d) % (c m) times f (or v / d). True of C's truncating division for
 * every v (u % c + (u / c % m) c = u % (c m)). A coordinate split by unflatten and put back
 * together by a load's strides (the rows and columns of a tile, h * W + w;
 * every axis of a contiguous 4-d operand, which was a gather in each lane
 * of an optimiser's update) becomes the index it came from, linear again.
 * True, with the sum of x and y in *out, when x + y holds such a pair (the
 * sum is built through ir_iadd, so that a third digit joins the merged
 * two). */
static bool recombine(ir_builder *b, int x, int y, int *out) {
    int id[SPLIT_TERMS], n = 0;
    int64_t f[SPLIT_TERMS];
    if (b->failed || !collect_terms(b, x, 1, true, id, f, &n) ||
        !collect_terms(b, y, 1, true, id, f, &n))
        return false;
    for (int j = 0; j < n; j++) {
        int v, hv;
        int64_t d, c, hd, hm;
        if (id[j] < 0)
            continue;
        digit_of(b, id[j], &v, &d, &c);
        if (c < 2 || !has_lane(b, v))
            continue;
        for (int i = 0; i < n; i++) {
            if (i == j || id[i] < 0 || f[i] != f[j] * c)
                continue;
            digit_of(b, id[i], &hv, &hd, &hm);
            if (hv != v || hd != d * c || hm == 1)
                continue;
            int low = ir_idiv(b, v, d);
            int sum = ir_imul(b, hm ? ir_imod(b, low, c * hm) : low, f[j]);
            for (int t = 0; t < n; t++)
                if (t != i && t != j)
                    sum = ir_iadd(b, sum, id[t] < 0 ? ir_index(b, f[t]) : ir_imul(b, id[t], f[t]));
            *out = sum;
            return !b->failed;
        }
    }
    return false;
}

static int64_t floor_div(int64_t a, int64_t d) {
    int64_t q = a / d;
    return a % d != 0 && (a < 0) != (d < 0) ? q - 1 : q;
}

/* x = q*d + r for x >= 0 split by its terms: q sums the terms whose factor d
 * divides (over d) and the immediate's floor quotient, r the others and the
 * immediate's remainder. With r >= 0, x / d = q + r / d and x % d = r % d
 * (a floor identity, and truncation is floor for x, r >= 0); r / d then
 * often folds to 0 by r's range. This is what recovers a coordinate from
 * the flat index of a view of a view (convolution windows over a pad: (kh +
 * oh) * Wp + kw + ow over Wp). False where no term divides. */
static bool split_sum(ir_builder *b, int x, int64_t d, int *q, int *r) {
    int id[SPLIT_TERMS], n = 0, any = 0;
    int64_t f[SPLIT_TERMS];
    if (b->min[x] < 0 || b->ins[x].op != UOP_IADD || !sum_terms(b, x, id, f, &n))
        return false;
    *q = ir_index(b, 0);
    *r = ir_index(b, 0);
    for (int i = 0; i < n; i++) {
        if (id[i] < 0) {
            int64_t hi = floor_div(f[i], d);
            any |= hi != 0;
            *q = ir_iadd(b, *q, ir_index(b, hi));
            *r = ir_iadd(b, *r, ir_index(b, f[i] - hi * d));
        } else if (f[i] % d == 0) {
            any = 1;
            *q = ir_iadd(b, *q, ir_imul(b, id[i], f[i] / d));
        } else {
            *r = ir_iadd(b, *r, ir_imul(b, id[i], f[i]));
        }
    }
    return any && !b->failed && b->min[*r] >= 0;
}

/* x = q c + r for x >= 0 with 0 <= r < c and c dividing d, c a factor of
 * x's terms: q sums the terms whose factor c divides (over c), r the
 * others. Then x / d = q / (d / c) and x % d = (q % (d / c)) c + r: what
 * takes a tile's elements (TILE * tile + LANE) apart along axes that span
 * whole tiles. False where no such c is found. */
static bool split_coarse(ir_builder *b, int x, int64_t d, int *q, int *r, int64_t *cout) {
    int id[SPLIT_TERMS], n = 0;
    int64_t f[SPLIT_TERMS];
    if (b->min[x] < 0 || b->ins[x].op != UOP_IADD || !sum_terms(b, x, id, f, &n))
        return false;
    for (int i = 0; i < n; i++) {
        int64_t c = f[i];
        /* only a tile's own term: a fold that depends on the other terms'
         * bounds would depend on sizes */
        if (id[i] < 0 || b->ins[id[i]].op != UOP_TILE || c < 2 || d % c != 0 || c == d)
            continue;
        /* the remainder's bounds from its terms, before building it */
        int64_t lo = 0, hi = 0;
        bool ok = true;
        for (int j = 0; j < n && ok; j++) {
            if (id[j] >= 0 && f[j] % c == 0) {
                ok = b->min[id[j]] >= 0 && f[j] > 0;
                continue;
            }
            int64_t tl = id[j] < 0 ? f[j] : b->min[id[j]] * f[j];
            int64_t th = id[j] < 0 ? f[j] : b->ins[id[j]].max * f[j];
            ok = f[j] > 0 || id[j] < 0;
            lo += tl;
            hi += th;
        }
        if (!ok || lo < 0 || hi >= c)
            continue;
        *q = ir_index(b, 0);
        *r = ir_index(b, 0);
        for (int j = 0; j < n; j++) {
            if (id[j] >= 0 && f[j] % c == 0)
                *q = ir_iadd(b, *q, ir_imul(b, id[j], f[j] / c));
            else
                *r = ir_iadd(b, *r, id[j] < 0 ? ir_index(b, f[j]) : ir_imul(b, id[j], f[j]));
        }
        *cout = c;
        return !b->failed;
    }
    return false;
}

int ir_idiv(ir_builder *b, int x, int64_t d) {
    int64_t u;
    if (d == 1 || b->failed)
        return x;
    if (is_imm(b, x, &u))
        return ir_index(b, u / d);
    if (b->min[x] >= 0 && b->ins[x].max < d)
        return ir_index(b, 0);
    int q, r;
    if (d > 1 && split_sum(b, x, d, &q, &r)) {
        int v = ir_iadd(b, q, ir_idiv(b, r, d));
        /* in an elementwise kernel the sum of the parts' bounds can exceed
         * the quotient's (the tile's rows past the last) */
        return has_lane(b, x) ? at_most(b, v, b->ins[x].max / d) : v;
    }
    int64_t c;
    if (d > 1 && split_coarse(b, x, d, &q, &r, &c))
        return at_most(b, ir_idiv(b, q, d / c), b->ins[x].max / d);
    const lower_ins *xi = &b->ins[x];
    int64_t inner;
    if (xi->op == UOP_IDIV && is_imm(b, xi->b, &inner) && b->min[xi->a] >= 0)
        return ir_idiv(b, xi->a, inner * d);
    return binop(b, UOP_IDIV, KILN_I64, x, ir_index(b, d));
}

int ir_imod(ir_builder *b, int x, int64_t d) {
    int64_t u;
    if (d == 1)
        return ir_index(b, 0);
    if (b->failed)
        return 0;
    if (is_imm(b, x, &u))
        return ir_index(b, u % d);
    if (b->min[x] >= 0 && b->ins[x].max < d)
        return x;
    int q, r;
    if (d > 1 && split_sum(b, x, d, &q, &r))
        return ir_imod(b, r, d);
    int64_t c;
    if (d > 1 && split_coarse(b, x, d, &q, &r, &c))
        return at_most(b, ir_iadd(b, ir_imul(b, ir_imod(b, q, d / c), c), r),
                       b->ins[x].max < d - 1 ? b->ins[x].max : d - 1);
    const lower_ins *xi = &b->ins[x];
    int64_t outer;
    if (xi->op == UOP_IMOD && is_imm(b, xi->b, &outer) && outer % d == 0)
        return ir_imod(b, xi->a, d);
    return binop(b, UOP_IMOD, KILN_I64, x, ir_index(b, d));
}

int ir_ilt(ir_builder *b, int x, int y) {
    if (b->failed)
        return 0;
    int64_t xl, xh, yl, yh;
    bounds(b, x, &xl, &xh);
    bounds(b, y, &yl, &yh);
    if (xh < yl)
        return ir_bool(b, true);
    if (xl >= yh)
        return ir_bool(b, false);
    return binop(b, UOP_ILT, KILN_BOOL, x, y);
}

int ir_and(ir_builder *b, int x, int y) {
    if (y < 0)
        return x;
    if (x < 0 || b->failed)
        return y;
    const lower_ins *xi = &b->ins[x], *yi = &b->ins[y];
    if (xi->op == UOP_IMM)
        return xi->imm.i ? y : x;
    if (yi->op == UOP_IMM)
        return yi->imm.i ? x : y;
    if (x == y)
        return x;
    return binop(b, UOP_AND, KILN_BOOL, x < y ? x : y, x < y ? y : x);
}

static bool int_imm(const ir_builder *b, int id, int64_t *v);

int ir_iclamp(ir_builder *b, int x, int64_t n) {
    if (b->failed)
        return 0;
    int64_t v;
    if (int_imm(b, x, &v))
        return ir_index(b, v < 0 || n <= 0 ? 0 : v >= n ? n - 1 : v);
    lower_ins p = proto(UOP_ICLAMP, KILN_I64);
    p.a = x;
    p.imm.i = n;
    return ir_add(b, p);
}

int ir_ivalid(ir_builder *b, int x, int64_t n) {
    if (b->failed)
        return 0;
    int64_t v;
    if (int_imm(b, x, &v))
        return ir_bool(b, v >= 0 && v < n);
    kiln_dtype dt = b->ins[x].dt;
    if ((dt == KILN_U8 && n > 255) || (dt == KILN_BOOL && n > 1)) /* never negative */
        return ir_bool(b, true);
    lower_ins p = proto(UOP_IVALID, KILN_BOOL);
    p.a = x;
    p.imm.i = n;
    return ir_add(b, p);
}

int ir_alu(ir_builder *b, graph_op op, kiln_dtype dt, int x, int y) {
    lower_ins p = proto(UOP_ALU, dt);
    p.gop = op;
    p.a = x;
    p.b = y;
    return ir_add(b, p);
}

int ir_where(ir_builder *b, kiln_dtype dt, int c, int x, int y) {
    if (!b->failed && b->ins[c].op == UOP_IMM)
        return b->ins[c].imm.i ? x : y;
    if (x == y)
        return x;
    lower_ins p = proto(UOP_WHERE, dt);
    p.a = c;
    p.b = x;
    p.c = y;
    return ir_add(b, p);
}

int ir_load(ir_builder *b, kiln_dtype dt, int buf, int index, int valid) {
    if (valid >= 0 && !b->failed && b->ins[valid].op == UOP_IMM) {
        if (!b->ins[valid].imm.i)
            return ir_imm(b, dt, (graph_scalar){.i = 0});
        valid = -1;
    }
    lower_ins p = proto(UOP_LOAD, dt);
    p.buf = buf;
    p.a = index;
    p.b = valid;
    return ir_add(b, p);
}

int ir_rand(ir_builder *b, graph_op op, kiln_dtype dt, int index, uint64_t seed) {
    lower_ins p = proto(UOP_RAND, dt);
    p.gop = op;
    p.a = index;
    p.imm.i = (int64_t)seed;
    return ir_add(b, p);
}

int ir_rand_keyed(ir_builder *b, graph_op op, kiln_dtype dt, int index, int key) {
    lower_ins p = proto(UOP_RAND, dt);
    p.gop = op;
    p.a = index;
    p.b = key;
    return ir_add(b, p);
}

int ir_reduce(ir_builder *b, graph_op op, kiln_dtype dt, int value, int ridx) {
    lower_ins p = proto(UOP_REDUCE, dt);
    p.gop = op;
    p.a = value;
    p.b = ridx;
    return ir_add(b, p);
}

int ir_acc(ir_builder *b, kiln_dtype dt) { return ir_add(b, proto(UOP_ACC, dt)); }

/* Two's-complement wrap of a 64-bit pattern to an integer dtype's width. */
static int64_t wrap_to(uint64_t u, kiln_dtype dt) {
    switch (dt) {
    case KILN_I32:
        return (int64_t)(int32_t)(uint32_t)u;
    case KILN_U8:
        return (int64_t)(u & 0xFF);
    case KILN_I8:
        return (int64_t)(int8_t)(uint8_t)u;
    case KILN_BOOL:
        return (int64_t)(u & 1);
    default:
        return (int64_t)u;
    }
}

static bool int_imm(const ir_builder *b, int id, int64_t *v) {
    if (id < 0 || b->failed || b->ins[id].op != UOP_IMM || graph_dtype_is_float(b->ins[id].dt))
        return false;
    *v = b->ins[id].imm.i;
    return true;
}

/* The folded value of an integer primitive on immediates, when it is one of
 * the plain wrapping ones. */
static bool fold_int(lower_prim prim, kiln_dtype dt, int64_t x, int64_t y, int64_t *r) {
    uint64_t u = (uint64_t)x, v = (uint64_t)y;
    int width = dt == KILN_I64 ? 64 : dt == KILN_I32 ? 32 : 8;
    switch (prim) {
    case PRIM_ADD:
        *r = wrap_to(u + v, dt);
        return true;
    case PRIM_SUB:
        *r = wrap_to(u - v, dt);
        return true;
    case PRIM_MUL:
        *r = wrap_to(u * v, dt);
        return true;
    case PRIM_AND:
        *r = wrap_to(u & v, dt);
        return true;
    case PRIM_OR:
        *r = wrap_to(u | v, dt);
        return true;
    case PRIM_XOR:
        *r = wrap_to(u ^ v, dt);
        return true;
    case PRIM_SHL:
        if (y < 0 || y >= width)
            return false;
        *r = wrap_to(u << y, dt);
        return true;
    case PRIM_SHR:
        if (y < 0 || y >= width)
            return false;
        *r = wrap_to((dt == KILN_I64 ? u : dt == KILN_I32 ? (uint32_t)u : (uint8_t)u) >> y, dt);
        return true;
    default:
        return false;
    }
}

int ir_prim(ir_builder *b, lower_prim prim, kiln_dtype dt, int x, int y, int z) {
    if (b->failed)
        return 0;
    bool integer = !graph_dtype_is_float(dt) && prim != PRIM_CAST && prim != PRIM_BITCAST &&
                   (prim < PRIM_LT || prim > PRIM_NE);
    int64_t u = 0, v = 0, r;
    if (integer && y >= 0) {
        bool cx = int_imm(b, x, &u), cy = int_imm(b, y, &v);
        if (cx && cy && fold_int(prim, dt, u, v, &r))
            return ir_imm(b, dt, (graph_scalar){.i = r});
        bool zero_right = prim == PRIM_ADD || prim == PRIM_SUB || prim == PRIM_OR ||
                          prim == PRIM_XOR || prim == PRIM_SHL || prim == PRIM_SHR;
        if (cy && v == 0 && zero_right)
            return x;
        if (cx && u == 0 && (prim == PRIM_ADD || prim == PRIM_OR || prim == PRIM_XOR))
            return y;
        if (cy && v == 1 && prim == PRIM_MUL)
            return x;
        if (cx && u == 1 && prim == PRIM_MUL)
            return y;
    }
    if (prim == PRIM_CAST && x >= 0 && b->ins[x].dt == dt)
        return x;
    lower_ins p = proto(UOP_PRIM, dt);
    p.prim = prim;
    p.a = x;
    p.b = y;
    p.c = z;
    return ir_add(b, p);
}
