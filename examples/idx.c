/* idx.c — the IDX reader of the training examples. An IDX file is a 4-byte
 * magic (two zero bytes, a type code, the number of dimensions), one
 * big-endian 32-bit size per dimension, then the elements row-major. zlib's
 * gzread reads gzip-compressed and plain files alike. */
#include "idx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum { IDX_TYPE_U8 = 0x08 };

/* A malformed header must not make us allocate the whole address space. */
#define IDX_MAX_BYTES ((size_t)1 << 31)

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Reads exactly n bytes; returns how many it got (fewer at end of file), or
 * -1 on a read or decompression error. */
static long long read_full(gzFile f, void *dst, size_t n) {
    size_t got = 0;
    while (got < n) {
        size_t chunk = n - got > (1u << 30) ? (1u << 30) : n - got;
        int r = gzread(f, (char *)dst + got, (unsigned)chunk);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (long long)got;
}

static const char *gz_message(gzFile f) {
    int code;
    const char *msg = gzerror(f, &code);
    return code == Z_ERRNO ? strerror(errno) : msg;
}

static int load(gzFile f, const char *path, int want_ndim, idx_array *out, char *err,
                size_t errlen) {
    unsigned char head[4 + 4 * IDX_MAX_DIMS];
    long long got = read_full(f, head, 4);
    if (got < 0)
        return fail(err, errlen, "%s: cannot read: %s", path, gz_message(f));
    if (got < 4 || head[0] != 0 || head[1] != 0)
        return fail(err, errlen, "%s: not an IDX file (bad magic number)", path);
    if (head[2] != IDX_TYPE_U8)
        return fail(err, errlen, "%s: element type 0x%02x, expected 0x08 (unsigned byte)", path,
                    head[2]);
    if (head[3] != want_ndim)
        return fail(err, errlen, "%s: %d dimensions, expected %d", path, head[3], want_ndim);

    got = read_full(f, head + 4, 4 * (size_t)want_ndim);
    if (got < 0)
        return fail(err, errlen, "%s: cannot read: %s", path, gz_message(f));
    if (got < 4 * want_ndim)
        return fail(err, errlen, "%s: truncated in its header", path);
    size_t count = 1;
    for (int i = 0; i < want_ndim; i++) {
        const unsigned char *p = head + 4 + 4 * i;
        uint32_t d = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (d == 0)
            return fail(err, errlen, "%s: dimension %d has size 0", path, i);
        if (d > IDX_MAX_BYTES / count)
            return fail(err, errlen, "%s: more than %zu elements", path, IDX_MAX_BYTES);
        count *= d;
        out->dims[i] = d;
    }

    out->data = malloc(count);
    if (!out->data)
        return fail(err, errlen, "%s: out of memory for %zu bytes", path, count);
    got = read_full(f, out->data, count);
    if (got < 0)
        return fail(err, errlen, "%s: cannot read: %s", path, gz_message(f));
    if ((size_t)got < count)
        return fail(err, errlen, "%s: truncated: %lld of %zu data bytes", path, got, count);
    unsigned char extra;
    got = read_full(f, &extra, 1);
    if (got < 0)
        return fail(err, errlen, "%s: cannot read: %s", path, gz_message(f));
    if (got > 0)
        return fail(err, errlen, "%s: longer than its header says (%zu data bytes)", path,
                    count);
    out->ndim = want_ndim;
    out->count = count;
    return 0;
}

int idx_load(const char *path, int want_ndim, idx_array *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (want_ndim < 1 || want_ndim > IDX_MAX_DIMS)
        return fail(err, errlen, "%s: cannot read %d dimensions", path, want_ndim);
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return fail(err, errlen, "cannot open %s: %s", path,
                    errno ? strerror(errno) : "out of memory");
    int rc = load(f, path, want_ndim, out, err, errlen);
    gzclose(f);
    if (rc != 0)
        idx_free(out);
    return rc;
}

void idx_free(idx_array *a) {
    free(a->data);
    memset(a, 0, sizeof *a);
}

void idx_shuffle(int64_t *idx, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = n - 1; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int64_t j = (int64_t)(((s >> 32) * (uint64_t)(i + 1)) >> 32);
        int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}
