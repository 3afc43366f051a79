/* checkpoint.c — named tensors saved to and loaded from safetensors files, the
 * format other frameworks read: an 8-byte little-endian header length, a JSON
 * header mapping each name to its dtype, shape and data offsets (plus an
 * optional "__metadata__" of strings), then the raw little-endian data. The
 * header is written and parsed by json-c; every size and offset in it is
 * checked before any data is read, so a damaged file is an error, never a
 * crash or a tensor made of whatever lay beyond the end. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"

/* The format's own reader refuses larger headers; no honest file needs more. */
#define CKPT_MAX_HEADER 100000000ull

static const char *const ckpt_dtype_names[KILN_NUM_DTYPES] = {
    [KILN_F32] = "F32", [KILN_F64] = "F64", [KILN_F16] = "F16", [KILN_BF16] = "BF16",
    [KILN_I32] = "I32", [KILN_I64] = "I64", [KILN_U8] = "U8",   [KILN_BOOL] = "BOOL",
    [KILN_I8] = "I8",
};

/* One tensor of a file's header. name points into the parsed JSON. */
typedef struct ckpt_entry {
    const char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    uint64_t begin, end; /* relative to the start of the data */
} ckpt_entry;

/* An open file whose header has been checked. */
typedef struct ckpt_file {
    int fd;
    const char *path;
    uint64_t data_start, data_len;
    json_object *root;
    int n;
    ckpt_entry *entries;
} ckpt_file;

/* Records msg as the context's last error (when there is a context to hold
 * it) and returns st. */
static kiln_status fail(kiln_ctx *ctx, kiln_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kiln_status fail(kiln_ctx *ctx, kiln_status st, const char *fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* The file format is little-endian; kiln's buffers are in host order. */
static bool host_big_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 0;
}

static void swap_elems(void *data, size_t nbytes, size_t width) {
    unsigned char *p = data;
    for (size_t i = 0; width > 1 && i + width <= nbytes; i += width)
        for (size_t a = 0, b = width - 1; a < b; a++, b--) {
            unsigned char t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}

/* ---- saving ---- */

static bool write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Writes a buffer's elements little-endian, swapping through a bounded copy
 * on a big-endian host. */
/* Writes a realized node's nbytes little-endian, copied out of its device a
 * chunk at a time. */
static bool write_tensor(int fd, const graph_node *n, size_t nbytes, size_t width) {
    unsigned char chunk[1 << 16];
    char msg[256];
    for (size_t done = 0; done < nbytes;) {
        size_t k = nbytes - done < sizeof chunk ? nbytes - done : sizeof chunk;
        if (api_read(n, done, chunk, k, msg, sizeof msg) != KILN_OK)
            return false;
        if (host_big_endian() && width > 1)
            swap_elems(chunk, k, width);
        if (!write_all(fd, chunk, k))
            return false;
        done += k;
    }
    return true;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whether s is well-formed UTF-8 (no overlong forms, no surrogates, nothing
 * past U+10FFFF): the header is JSON, whose readers refuse anything else. */
static bool utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p++;
        int more = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (more < 0 || (more == 1 && c < 0xc2) || (more == 3 && c > 0xf4))
            return false;
        unsigned v = c & (0x3fu >> more);
        for (int i = 0; i < more; i++, p++) {
            if ((*p & 0xc0) != 0x80)
                return false;
            v = v << 6 | (*p & 0x3fu);
        }
        if ((more == 2 && (v < 0x800 || (v >= 0xd800 && v <= 0xdfff))) ||
            (more == 3 && (v < 0x10000 || v > 0x10ffff)))
            return false;
    }
    return true;
}

/* Names must be present, non-empty, UTF-8, not the metadata key, and
 * distinct. */
static kiln_status check_names(kiln_ctx *ctx, const char *op, int n, const char *const *names) {
    for (int i = 0; i < n; i++) {
        if (!names[i] || !names[i][0])
            return fail(ctx, KILN_ERR_ARG, "%s: name %d is %s", op, i,
                        names[i] ? "empty" : "NULL");
        if (!utf8_valid(names[i]))
            return fail(ctx, KILN_ERR_ARG,
                        "%s: name %d is not UTF-8, which the format's JSON header needs", op, i);
        if (!strcmp(names[i], "__metadata__"))
            return fail(ctx, KILN_ERR_ARG, "%s: name %d is \"__metadata__\", which the format "
                        "reserves", op, i);
    }
    const char **sorted = malloc(sizeof *sorted * (size_t)(n ? n : 1));
    if (!sorted)
        return fail(ctx, KILN_ERR_OOM, "%s: out of memory", op);
    memcpy(sorted, names, sizeof *sorted * (size_t)n);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str_ptr);
    kiln_status st = KILN_OK;
    for (int i = 1; i < n && st == KILN_OK; i++)
        if (!strcmp(sorted[i - 1], sorted[i]))
            st = fail(ctx, KILN_ERR_ARG, "%s: the name \"%s\" is given twice", op, sorted[i]);
    free(sorted);
    return st;
}

/* One sync realizes them all (they share a context: api_check saw to it);
 * a failure is recorded on the first tensor and in the context. */
static kiln_status realize_all(kiln_ctx *ctx, int n, kiln_tensor *const *tensors) {
    graph_node **nodes = malloc(sizeof *nodes * (size_t)n);
    if (!nodes)
        return fail(ctx, KILN_ERR_OOM, "kiln_save: out of memory");
    for (int i = 0; i < n; i++)
        nodes[i] = tensors[i]->node;
    kiln_status st = api_realize(ctx, n, nodes, tensors[0]);
    free(nodes);
    return st;
}

static size_t elem_size(const kiln_tensor *t) { return kiln_dtype_size(t->node->dtype); }

typedef struct ckpt_slot {
    int index;
    size_t width;
} ckpt_slot;

static int cmp_slot(const void *a, const void *b) {
    const ckpt_slot *x = a, *y = b;
    if (x->width != y->width)
        return x->width > y->width ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The order of the tensors' data in the file: widest elements first, as the
 * format's own writer does, so that every tensor starts aligned to its
 * element size (the data itself starts 8-byte aligned). */
static int *data_order(int n, kiln_tensor *const *tensors) {
    ckpt_slot *slots = malloc(sizeof *slots * (size_t)(n ? n : 1));
    int *order = malloc(sizeof *order * (size_t)(n ? n : 1));
    if (slots && order) {
        for (int i = 0; i < n; i++)
            slots[i] = (ckpt_slot){i, elem_size(tensors[i])};
        qsort(slots, (size_t)n, sizeof *slots, cmp_slot);
        for (int i = 0; i < n; i++)
            order[i] = slots[i].index;
    } else {
        free(order);
        order = NULL;
    }
    free(slots);
    return order;
}

/* The JSON header, entries in the caller's order and data in `order`,
 * padded with spaces so that the data starts 8-byte aligned. */
static char *build_header(int n, const char *const *names, kiln_tensor *const *tensors,
                          const int *order, size_t *len) {
    uint64_t *begin = malloc(sizeof *begin * (size_t)(n ? n : 1));
    if (!begin)
        return NULL;
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        begin[order[k]] = off;
        off += (uint64_t)graph_numel(tensors[order[k]]->node) * elem_size(tensors[order[k]]);
    }
    json_object *root = json_object_new_object();
    bool ok = root != NULL;
    for (int i = 0; i < n && ok; i++) {
        const graph_node *x = tensors[i]->node;
        uint64_t nbytes = (uint64_t)graph_numel(x) * elem_size(tensors[i]);
        json_object *e = json_object_new_object();
        json_object *shape = json_object_new_array();
        json_object *offs = json_object_new_array();
        json_object *dt = json_object_new_string(ckpt_dtype_names[x->dtype]);
        ok = e && shape && offs && dt;
        for (int d = 0; d < x->ndim && ok; d++)
            ok = json_object_array_add(shape, json_object_new_int64(x->shape[d])) == 0;
        ok = ok && json_object_array_add(offs, json_object_new_int64((int64_t)begin[i])) == 0 &&
             json_object_array_add(offs, json_object_new_int64((int64_t)(begin[i] + nbytes))) == 0;
        if (!ok) {
            json_object_put(e);
            json_object_put(shape);
            json_object_put(offs);
            json_object_put(dt);
            break;
        }
        json_object_object_add(e, "dtype", dt);
        json_object_object_add(e, "shape", shape);
        json_object_object_add(e, "data_offsets", offs);
        if (json_object_object_add(root, names[i], e) != 0) {
            json_object_put(e);
            ok = false;
        }
    }
    free(begin);
    char *out = NULL;
    if (ok) {
        size_t jlen;
        const char *s = json_object_to_json_string_length(
            root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &jlen);
        size_t padded = s ? (jlen + 8 + 7) / 8 * 8 - 8 : 0;
        if (s && (out = malloc(padded + 1))) {
            memcpy(out, s, jlen);
            memset(out + jlen, ' ', padded - jlen);
            out[padded] = 0;
            *len = padded;
        }
    }
    json_object_put(root);
    return out;
}

static kiln_status write_file(kiln_ctx *ctx, const char *path, const char *header, size_t hlen,
                              int n, kiln_tensor *const *tensors, const int *order) {
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp)
        return fail(ctx, KILN_ERR_OOM, "kiln_save: out of memory");
    /* A fresh name for every attempt, created exclusively and never through a
     * link: with a predictable name and O_TRUNC, a symlink planted there by
     * another user redirected the save onto any file the saver could write,
     * and two threads saving to one path truncated each other's file. */
    static _Atomic unsigned long serial;
    int fd = -1;
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long n = serial++ * 0x9e3779b97f4a7c15ul ^ (unsigned long)ts.tv_nsec;
        snprintf(tmp, plen + 32, "%s.tmp.%ld.%08lx", path, (long)getpid(), n & 0xfffffffful);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        kiln_status st = fail(ctx, KILN_ERR_IO, "kiln_save: cannot create %s: %s", tmp,
                              strerror(errno));
        free(tmp);
        return st;
    }
    unsigned char lenbytes[8];
    for (int i = 0; i < 8; i++)
        lenbytes[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    bool ok = write_all(fd, lenbytes, 8) && write_all(fd, header, hlen);
    for (int k = 0; k < n && ok; k++) {
        const kiln_tensor *t = tensors[order[k]];
        size_t nbytes = (size_t)graph_numel(t->node) * elem_size(t);
        ok = nbytes == 0 || write_tensor(fd, t->node, nbytes, elem_size(t));
    }
    int err = ok ? 0 : errno;
    if (ok && fsync(fd) != 0) {
        ok = false;
        err = errno;
    }
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        err = errno;
    }
    kiln_status st = KILN_OK;
    if (!ok) {
        unlink(tmp);
        st = fail(ctx, KILN_ERR_IO, "kiln_save: cannot write %s: %s", path,
                  err ? strerror(err) : "short write");
    }
    free(tmp);
    return st;
}

kiln_status kiln_save(const char *path, int n, const char *const *names,
                      kiln_tensor *const *tensors) {
    if (n < 0 || (n > 0 && (!names || !tensors)))
        return KILN_ERR_ARG;
    kiln_ctx *ctx = NULL;
    if (n > 0) {
        kiln_tensor *e = api_check("kiln_save", n, tensors, &ctx);
        if (e) {
            kiln_status st = e->err;
            fail(ctx, st, "%s", kiln_error_message(e));
            kiln_release(e);
            return st;
        }
        if (!ctx)
            return KILN_ERR_ARG;
    }
    if (!path)
        return fail(ctx, KILN_ERR_ARG, "kiln_save: path is NULL");
    kiln_status st = check_names(ctx, "kiln_save", n, names);
    if (st == KILN_OK && n > 0)
        st = realize_all(ctx, n, tensors);
    if (st != KILN_OK)
        return st;
    size_t hlen = 0;
    int *order = data_order(n, tensors);
    char *header = order ? build_header(n, names, tensors, order, &hlen) : NULL;
    if (!header) {
        free(order);
        return fail(ctx, KILN_ERR_OOM, "kiln_save: out of memory building the header of %s",
                    path);
    }
    st = write_file(ctx, path, header, hlen, n, tensors, order);
    free(order);
    free(header);
    return st;
}

/* ---- loading ---- */

static bool read_at(int fd, void *dst, size_t n, uint64_t off) {
    char *p = dst;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return true;
}

/* A non-negative JSON integer, or false. */
static bool json_u64(json_object *v, uint64_t *out) {
    if (!json_object_is_type(v, json_type_int))
        return false;
    if (json_object_get_int64(v) < 0)
        return false;
    *out = json_object_get_uint64(v);
    return true;
}

/* ---- names given twice ----
 * json-c keeps the last of two members with one name, silently; a file that
 * names a tensor twice is ambiguous (which one did its writer mean?), so the
 * header's text is scanned for its top-level names first. The text has
 * passed json-c's strict parser, so the scan only needs to find where
 * strings and nested values end. */

static size_t skip_ws(const char *t, size_t i, size_t n) {
    while (i < n && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r'))
        i++;
    return i;
}

/* t[i] is a string's opening quote: the index after its closing one. */
static size_t skip_string(const char *t, size_t i, size_t n) {
    for (i++; i < n && t[i] != '"'; i++)
        if (t[i] == '\\')
            i++;
    return i + 1;
}

/* The index after the value starting at t[i]. */
static size_t skip_value(const char *t, size_t i, size_t n) {
    if (t[i] == '"')
        return skip_string(t, i, n);
    int depth = 0;
    for (; i < n; i++) {
        if (t[i] == '"') {
            i = skip_string(t, i, n) - 1;
        } else if (t[i] == '{' || t[i] == '[') {
            depth++;
        } else if (t[i] == '}' || t[i] == ']') {
            if (depth == 0)
                return i;
            if (--depth == 0)
                return i + 1;
        } else if (t[i] == ',' && depth == 0) {
            return i;
        }
    }
    return i;
}

/* KILN_OK unless a top-level name of the header's text occurs twice. */
static kiln_status check_unique_names(kiln_ctx *ctx, const char *op, const char *path,
                                      const char *t, size_t n, int parsed) {
    size_t cap = (size_t)parsed + 2, count = 0;
    size_t *at = malloc(sizeof *at * cap), *len = malloc(sizeof *len * cap);
    kiln_status st = KILN_OK;
    if (!at || !len) {
        st = fail(ctx, KILN_ERR_OOM, "%s: out of memory reading the header of %s", op, path);
        goto done;
    }
    size_t i = skip_ws(t, 0, n) + 1; /* past the '{' */
    while ((i = skip_ws(t, i, n)) < n && t[i] == '"') {
        size_t end = skip_string(t, i, n);
        if (count == cap) { /* more names than json-c kept: a repeat */
            break;
        }
        at[count] = i + 1;
        len[count++] = end - i - 2;
        i = skip_ws(t, end, n) + 1; /* past the ':' */
        i = skip_value(t, skip_ws(t, i, n), n);
        i = skip_ws(t, i, n) + 1;   /* past the ',' or '}' */
    }
    if (count <= (size_t)parsed)
        goto done;
    for (size_t a = 1; a < count; a++)
        for (size_t b = 0; b < a; b++)
            if (len[a] == len[b] && !memcmp(t + at[a], t + at[b], len[a])) {
                st = fail(ctx, KILN_ERR_IO,
                          "%s: %s: the name \"%.*s\" is given twice in the header: which "
                          "tensor it names is ambiguous",
                          op, path, (int)(len[a] > 200 ? 200 : len[a]), t + at[a]);
                goto done;
            }
    st = fail(ctx, KILN_ERR_IO,
              "%s: %s: a name is given twice in the header (spelt with different escapes)", op,
              path);
done:
    free(at);
    free(len);
    return st;
}

static kiln_status parse_entry(kiln_ctx *ctx, const char *op, const ckpt_file *f,
                               const char *name, json_object *v, ckpt_entry *e) {
    e->name = name;
    json_object *dt, *shape, *offs;
    if (!json_object_is_type(v, json_type_object) ||
        !json_object_object_get_ex(v, "dtype", &dt) ||
        !json_object_object_get_ex(v, "shape", &shape) ||
        !json_object_object_get_ex(v, "data_offsets", &offs))
        return fail(ctx, KILN_ERR_IO,
                    "%s: %s: the entry of \"%s\" is not an object with dtype, shape and "
                    "data_offsets", op, f->path, name);
    const char *dts = json_object_is_type(dt, json_type_string) ? json_object_get_string(dt) : "";
    int k = 0;
    while (k < KILN_NUM_DTYPES && strcmp(dts, ckpt_dtype_names[k]) != 0)
        k++;
    if (k == KILN_NUM_DTYPES)
        return fail(ctx, KILN_ERR_IO,
                    "%s: %s: tensor \"%s\" has dtype %s, which kiln does not know (it reads F32, "
                    "F64, F16, BF16, I32, I64, U8, BOOL, I8)",
                    op, f->path, name, json_object_to_json_string(dt));
    e->dtype = (kiln_dtype)k;
    if (!json_object_is_type(shape, json_type_array))
        return fail(ctx, KILN_ERR_IO, "%s: %s: the shape of \"%s\" is not an array", op, f->path,
                    name);
    size_t nd = json_object_array_length(shape);
    if (nd > KILN_MAX_DIMS)
        return fail(ctx, KILN_ERR_IO, "%s: %s: tensor \"%s\" has %zu dimensions (at most %d)",
                    op, f->path, name, nd, KILN_MAX_DIMS);
    e->ndim = (int)nd;
    bool empty = false, overflow = false;
    uint64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        uint64_t s;
        if (!json_u64(json_object_array_get_idx(shape, (size_t)d), &s) || s > INT64_MAX)
            return fail(ctx, KILN_ERR_IO,
                        "%s: %s: dimension %d of \"%s\" is not a non-negative integer", op,
                        f->path, d, name);
        e->shape[d] = (int64_t)s;
        empty |= s == 0;
        if (s && numel > (uint64_t)INT64_MAX / 16 / s)
            overflow = true;
        else
            numel *= s;
    }
    char sh[KILN_MAX_DIMS * 21 + 3];
    graph_format_shape(sh, sizeof sh, e->ndim, e->shape);
    if (overflow && !empty)
        return fail(ctx, KILN_ERR_IO, "%s: %s: tensor \"%s\" has shape %s, too many elements",
                    op, f->path, name, sh);
    if (empty)
        numel = 0;
    if (!json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2 ||
        !json_u64(json_object_array_get_idx(offs, 0), &e->begin) ||
        !json_u64(json_object_array_get_idx(offs, 1), &e->end) || e->begin > e->end)
        return fail(ctx, KILN_ERR_IO,
                    "%s: %s: the data_offsets of \"%s\" are not two non-negative integers "
                    "[begin, end] with begin <= end",
                    op, f->path, name);
    uint64_t want = numel * kiln_dtype_size(e->dtype);
    if (e->end - e->begin != want)
        return fail(ctx, KILN_ERR_IO,
                    "%s: %s: tensor \"%s\" (%s, shape %s) needs %llu bytes, but its "
                    "data_offsets [%llu, %llu] span %llu",
                    op, f->path, name, kiln_dtype_name(e->dtype), sh, (unsigned long long)want,
                    (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)(e->end - e->begin));
    if (e->end > f->data_len)
        return fail(ctx, KILN_ERR_IO,
                    "%s: %s: tensor \"%s\" lies at data bytes [%llu, %llu], past the end of the "
                    "%llu bytes of data (is the file truncated?)",
                    op, f->path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)f->data_len);
    return KILN_OK;
}

static kiln_status check_metadata(kiln_ctx *ctx, const char *op, const ckpt_file *f,
                                  json_object *meta) {
    bool ok = json_object_is_type(meta, json_type_object);
    if (ok) {
        json_object_object_foreach(meta, k, v) {
            (void)k;
            ok = ok && json_object_is_type(v, json_type_string);
        }
    }
    return ok ? KILN_OK
              : fail(ctx, KILN_ERR_IO, "%s: %s: __metadata__ is not an object of strings", op,
                     f->path);
}

static int cmp_entry_offsets(const void *a, const void *b) {
    const ckpt_entry *x = *(const ckpt_entry *const *)a, *y = *(const ckpt_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors must tile the data exactly, as the format requires: no two
 * overlap and no byte belongs to none (a name given twice was refused
 * before, by check_unique_names). */
static kiln_status check_layout(kiln_ctx *ctx, const char *op, const ckpt_file *f) {
    const ckpt_entry **by = malloc(sizeof *by * (size_t)(f->n ? f->n : 1));
    if (!by)
        return fail(ctx, KILN_ERR_OOM, "%s: out of memory", op);
    for (int i = 0; i < f->n; i++)
        by[i] = &f->entries[i];
    qsort(by, (size_t)f->n, sizeof *by, cmp_entry_offsets);
    kiln_status st = KILN_OK;
    uint64_t pos = 0;
    for (int i = 0; i < f->n && st == KILN_OK; i++) {
        if (by[i]->begin < pos)
            st = fail(ctx, KILN_ERR_IO,
                      "%s: %s: the data of \"%s\" [%llu, %llu] overlaps that of \"%s\" [%llu, "
                      "%llu]",
                      op, f->path, by[i]->name, (unsigned long long)by[i]->begin,
                      (unsigned long long)by[i]->end, by[i - 1]->name,
                      (unsigned long long)by[i - 1]->begin, (unsigned long long)by[i - 1]->end);
        else if (by[i]->begin > pos)
            st = fail(ctx, KILN_ERR_IO,
                      "%s: %s: data bytes [%llu, %llu] belong to no tensor",
                      op, f->path, (unsigned long long)pos, (unsigned long long)by[i]->begin);
        pos = by[i]->end;
    }
    if (st == KILN_OK && pos != f->data_len)
        st = fail(ctx, KILN_ERR_IO,
                  "%s: %s: the last %llu bytes of data belong to no tensor",
                  op, f->path, (unsigned long long)(f->data_len - pos));
    free(by);
    return st;
}

static void close_file(ckpt_file *f) {
    if (f->fd >= 0)
        close(f->fd);
    json_object_put(f->root);
    free(f->entries);
}

/* Reads and checks the header of path: every entry's dtype, shape and
 * offsets, and the layout of the data. */
static kiln_status open_file(kiln_ctx *ctx, const char *op, const char *path, ckpt_file *f) {
    memset(f, 0, sizeof *f);
    f->path = path;
    /* O_NONBLOCK: a FIFO at path would block the open until some writer came
     * (forever); it is refused below as not a regular file. */
    f->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f->fd < 0)
        return fail(ctx, KILN_ERR_IO, "%s: cannot open %s: %s", op, path, strerror(errno));
    struct stat sb;
    if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        return fail(ctx, KILN_ERR_IO, "%s: %s is not a regular file", op, path);
    uint64_t size = (uint64_t)sb.st_size;
    unsigned char lenbytes[8];
    if (size < 8 || !read_at(f->fd, lenbytes, 8, 0))
        return fail(ctx, KILN_ERR_IO,
                    "%s: %s is truncated: %llu bytes, too short for the 8-byte header length",
                    op, path, (unsigned long long)size);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)lenbytes[i] << (8 * i);
    if (hlen < 2 || hlen > CKPT_MAX_HEADER)
        return fail(ctx, KILN_ERR_IO,
                    "%s: %s: the header length %llu is absurd (2 to %llu bytes allowed); is this "
                    "a safetensors file?",
                    op, path, (unsigned long long)hlen, CKPT_MAX_HEADER);
    if (hlen > size - 8)
        return fail(ctx, KILN_ERR_IO,
                    "%s: %s is truncated: the header should be %llu bytes but the file has only "
                    "%llu after the length",
                    op, path, (unsigned long long)hlen, (unsigned long long)(size - 8));
    f->data_start = 8 + hlen;
    f->data_len = size - f->data_start;
    char *text = malloc((size_t)hlen);
    if (!text)
        return fail(ctx, KILN_ERR_OOM, "%s: out of memory reading the header of %s", op, path);
    if (!read_at(f->fd, text, (size_t)hlen, 8)) {
        free(text);
        return fail(ctx, KILN_ERR_IO, "%s: cannot read the header of %s", op, path);
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        free(text);
        return fail(ctx, KILN_ERR_OOM, "%s: out of memory parsing the header of %s", op, path);
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    f->root = json_tokener_parse_ex(tok, text, (int)hlen);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!f->root || jerr != json_tokener_success || end != hlen) {
        free(text);
        return fail(ctx, KILN_ERR_IO, "%s: %s: the header is not valid JSON (%s at byte %zu)",
                    op, path,
                    jerr != json_tokener_success ? json_tokener_error_desc(jerr)
                                                 : "unexpected text after the object",
                    end);
    }
    if (!json_object_is_type(f->root, json_type_object)) {
        free(text);
        return fail(ctx, KILN_ERR_IO, "%s: %s: the header is not a JSON object", op, path);
    }
    int count = json_object_object_length(f->root);
    kiln_status unique = check_unique_names(ctx, op, path, text, (size_t)hlen, count);
    free(text);
    if (unique != KILN_OK)
        return unique;
    f->entries = calloc((size_t)(count ? count : 1), sizeof *f->entries);
    if (!f->entries)
        return fail(ctx, KILN_ERR_OOM, "%s: out of memory reading %s", op, path);
    json_object_object_foreach(f->root, key, val) {
        kiln_status st = !strcmp(key, "__metadata__")
                             ? check_metadata(ctx, op, f, val)
                             : parse_entry(ctx, op, f, key, val, &f->entries[f->n++]);
        if (st != KILN_OK)
            return st;
    }
    return check_layout(ctx, op, f);
}

/* A realized leaf holding e's data. */
static kiln_status read_entry(kiln_ctx *ctx, const char *op, const ckpt_file *f,
                              const ckpt_entry *e, graph_node **out) {
    size_t nbytes = (size_t)(e->end - e->begin);
    unsigned char *data = malloc(nbytes ? nbytes : 1);
    if (!data)
        return fail(ctx, KILN_ERR_OOM, "%s: out of memory allocating %zu bytes for \"%s\"", op,
                    nbytes, e->name);
    if (nbytes && !read_at(f->fd, data, nbytes, f->data_start + e->begin)) {
        free(data);
        return fail(ctx, KILN_ERR_IO, "%s: %s: cannot read the data of \"%s\" (truncated?)", op,
                    f->path, e->name);
    }
    if (host_big_endian())
        swap_elems(data, nbytes, kiln_dtype_size(e->dtype));
    if (e->dtype == KILN_BOOL)
        for (size_t i = 0; i < nbytes; i++)
            data[i] = data[i] != 0;
    kiln_status st;
    char msg[512];
    *out = api_data_node(ctx, op, e->dtype, e->ndim, e->shape, data, &st, msg, sizeof msg);
    free(data);
    if (!*out)
        return fail(ctx, st, "%s", msg);
    return KILN_OK;
}

kiln_status kiln_load(kiln_ctx *ctx, const char *path, int *n, char ***names,
                      kiln_tensor ***tensors) {
    if (n)
        *n = 0;
    if (names)
        *names = NULL;
    if (tensors)
        *tensors = NULL;
    if (!ctx)
        return KILN_ERR_ARG;
    if (!path || !n || !names || !tensors)
        return fail(ctx, KILN_ERR_ARG, "kiln_load: path and the three outputs must not be NULL");
    ckpt_file f;
    kiln_status st = open_file(ctx, "kiln_load", path, &f);
    char **nm = NULL;
    kiln_tensor **ts = NULL;
    if (st == KILN_OK) {
        nm = calloc((size_t)(f.n ? f.n : 1), sizeof *nm);
        ts = calloc((size_t)(f.n ? f.n : 1), sizeof *ts);
        if (!nm || !ts)
            st = fail(ctx, KILN_ERR_OOM, "kiln_load: out of memory");
    }
    int made = 0;
    for (int i = 0; st == KILN_OK && i < f.n; i++) {
        graph_node *node;
        if ((st = read_entry(ctx, "kiln_load", &f, &f.entries[i], &node)) != KILN_OK)
            break;
        ts[i] = api_wrap(ctx, node, "kiln_load");
        nm[i] = strdup(f.entries[i].name);
        made = i + 1;
        if (!ts[i] || !ts[i]->node || !nm[i])
            st = fail(ctx, KILN_ERR_OOM, "kiln_load: out of memory");
    }
    if (st == KILN_OK) {
        *n = f.n;
        *names = nm;
        *tensors = ts;
    } else {
        for (int i = 0; i < made; i++)
            kiln_release(ts[i]);
        kiln_free_names(made, nm);
        free(ts);
    }
    close_file(&f);
    return st;
}

static const ckpt_entry *find_entry(const ckpt_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->entries[i].name, name))
            return &f->entries[i];
    return NULL;
}

/* Every requested tensor must be in the file with the destination's dtype
 * and shape; nothing is assigned unless all are. */
static kiln_status check_into(kiln_ctx *ctx, const ckpt_file *f, int n, const char *const *names,
                              kiln_tensor *const *tensors, const ckpt_entry **found) {
    for (int i = 0; i < n; i++) {
        if (!names[i])
            return fail(ctx, KILN_ERR_ARG, "kiln_load_into: name %d is NULL", i);
        const ckpt_entry *e = found[i] = find_entry(f, names[i]);
        if (!e)
            return fail(ctx, KILN_ERR_IO, "kiln_load_into: %s has no tensor named \"%s\"",
                        f->path, names[i]);
        const graph_node *x = tensors[i]->node;
        char want[KILN_MAX_DIMS * 21 + 3], got[KILN_MAX_DIMS * 21 + 3];
        graph_format_shape(want, sizeof want, x->ndim, x->shape);
        graph_format_shape(got, sizeof got, e->ndim, e->shape);
        if (e->dtype != x->dtype)
            return fail(ctx, KILN_ERR_DTYPE,
                        "kiln_load_into: tensor \"%s\": expected %s of shape %s, found %s of "
                        "shape %s in %s",
                        names[i], kiln_dtype_name(x->dtype), want, kiln_dtype_name(e->dtype), got,
                        f->path);
        if (e->ndim != x->ndim ||
            memcmp(e->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0)
            return fail(ctx, KILN_ERR_SHAPE,
                        "kiln_load_into: tensor \"%s\": expected shape %s, found %s in %s",
                        names[i], want, got, f->path);
    }
    return KILN_OK;
}

kiln_status kiln_load_into(const char *path, int n, const char *const *names,
                           kiln_tensor *const *tensors) {
    if (n <= 0 || !names || !tensors)
        return n == 0 ? KILN_OK : KILN_ERR_ARG;
    kiln_ctx *ctx = NULL;
    kiln_tensor *e = api_check("kiln_load_into", n, tensors, &ctx);
    if (e) {
        kiln_status st = e->err;
        fail(ctx, st, "%s", kiln_error_message(e));
        kiln_release(e);
        return st;
    }
    if (!ctx)
        return KILN_ERR_ARG;
    if (!path)
        return fail(ctx, KILN_ERR_ARG, "kiln_load_into: path is NULL");
    ckpt_file f;
    kiln_status st = open_file(ctx, "kiln_load_into", path, &f);
    const ckpt_entry **found = NULL;
    kiln_tensor **loaded = NULL;
    if (st == KILN_OK) {
        found = calloc((size_t)n, sizeof *found);
        loaded = calloc((size_t)n, sizeof *loaded);
        st = found && loaded ? check_into(ctx, &f, n, names, tensors, found)
                             : fail(ctx, KILN_ERR_OOM, "kiln_load_into: out of memory");
    }
    for (int i = 0; i < n && st == KILN_OK; i++) {
        graph_node *node;
        st = read_entry(ctx, "kiln_load_into", &f, found[i], &node);
        if (st == KILN_OK && !(loaded[i] = api_wrap(ctx, node, "kiln_load_into")))
            st = fail(ctx, KILN_ERR_OOM, "kiln_load_into: out of memory");
    }
    for (int i = 0; i < n && st == KILN_OK; i++)
        st = kiln_assign(tensors[i], loaded[i]);
    for (int i = 0; loaded && i < n; i++)
        kiln_release(loaded[i]);
    free(loaded);
    free(found);
    close_file(&f);
    return st;
}

void kiln_free_names(int n, char **names) {
    if (!names)
        return;
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}
