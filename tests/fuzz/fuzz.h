/* fuzz.h — what the fuzz targets of tests/fuzz/ and their seed maker share:
 * the cache key the cache_entry target reads under, and a private temporary
 * directory per process. */
#ifndef KILN_FUZZ_H
#define KILN_FUZZ_H

#include <stdio.h>
#include <stdlib.h>

#include "cache/cache.h"

/* The one key (and kinds) whose entries cache_entry feeds: its seeds are real
 * entries stored under it. */
static const cache_key FUZZ_CACHE_KEY = {0x0123456789abcdefull, 0xfedcba9876543210ull};
#define FUZZ_BLOB_KIND "plan"
#define FUZZ_FILE_KIND "so"

/* A fresh directory (mode 0700) under $TMPDIR, or exits: a target that cannot
 * make one has nothing to test. The caller removes it. */
static inline char *fuzz_tmpdir(const char *what) {
    static char path[4096];
    const char *base = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/kiln-fuzz-%s-XXXXXX", base && *base ? base : "/tmp", what);
    if (!mkdtemp(path)) {
        perror("fuzz: mkdtemp");
        exit(1);
    }
    return path;
}

#endif /* KILN_FUZZ_H */
