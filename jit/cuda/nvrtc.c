/* nvrtc.c — CUDA C to PTX and cubin with NVRTC, loaded with dlopen on first
 * use so that kiln builds and runs where CUDA is absent; and the compile
 * check of whole programs, remembered per source for the process. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "jit/cuda/cuda.h"

typedef struct nvrtc_prog *nvrtc_program; /* nvrtcProgram */

/* The entry points kiln uses, with the signatures of nvrtc.h (an int for
 * nvrtcResult, whose success is 0). */
typedef struct nvrtc_api {
    void *handle;
    const char *(*error_string)(int);
    int (*version)(int *, int *);
    int (*create)(nvrtc_program *, const char *, const char *, int, const char *const *,
                  const char *const *);
    int (*destroy)(nvrtc_program *);
    int (*compile)(nvrtc_program, int, const char *const *);
    int (*log_size)(nvrtc_program, size_t *);
    int (*log)(nvrtc_program, char *);
    int (*ptx_size)(nvrtc_program, size_t *);
    int (*ptx)(nvrtc_program, char *);
    int (*cubin_size)(nvrtc_program, size_t *);
    int (*cubin)(nvrtc_program, char *);
    int (*num_archs)(int *); /* optional (NVRTC 11.2 on) */
    int (*archs)(int *);
    char version_str[32];
    char why[512]; /* when handle is NULL */
} nvrtc_api;

static nvrtc_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void *open_in(const char *dir) {
    static const char *const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4200];
        if (dir)
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        else
            snprintf(path, sizeof path, "%s", names[i]);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    return NULL;
}

/* Resolves one symbol into *slot (a function pointer); false if missing. */
static bool sym(void *h, const char *name, void *slot) {
    void *p = dlsym(h, name);
    if (!p)
        return false;
    memcpy(slot, &p, sizeof p);
    return true;
}

static void load_api(void) {
    void *h = NULL;
    const char *root = getenv("KILN_CUDA_PATH");
    if (root && *root) {
        char dir[4096];
        if ((size_t)snprintf(dir, sizeof dir, "%s/lib64", root) < sizeof dir)
            h = open_in(dir);
    }
    if (!h)
        h = open_in("/usr/local/cuda/lib64");
    if (!h)
        h = open_in(NULL);
    if (!h) {
        snprintf(api.why, sizeof api.why,
                 "NVRTC not found (looked in $KILN_CUDA_PATH/lib64, /usr/local/cuda/lib64 and the "
                 "library path for libnvrtc.so, .so.13, .so.12)");
        return;
    }
    bool ok = sym(h, "nvrtcGetErrorString", &api.error_string) &&
              sym(h, "nvrtcVersion", &api.version) &&
              sym(h, "nvrtcCreateProgram", &api.create) &&
              sym(h, "nvrtcDestroyProgram", &api.destroy) &&
              sym(h, "nvrtcCompileProgram", &api.compile) &&
              sym(h, "nvrtcGetProgramLogSize", &api.log_size) &&
              sym(h, "nvrtcGetProgramLog", &api.log) && sym(h, "nvrtcGetPTXSize", &api.ptx_size) &&
              sym(h, "nvrtcGetPTX", &api.ptx) && sym(h, "nvrtcGetCUBINSize", &api.cubin_size) &&
              sym(h, "nvrtcGetCUBIN", &api.cubin);
    if (ok && !(sym(h, "nvrtcGetNumSupportedArchs", &api.num_archs) &&
                sym(h, "nvrtcGetSupportedArchs", &api.archs)))
        api.num_archs = NULL;
    int major = 0, minor = 0;
    if (!ok || api.version(&major, &minor) != 0) {
        snprintf(api.why, sizeof api.why, "NVRTC found but unusable (too old?)");
        dlclose(h);
        return;
    }
    snprintf(api.version_str, sizeof api.version_str, "nvrtc %d.%d", major, minor);
    api.handle = h;
}

static bool loaded(void) {
    pthread_once(&api_once, load_api);
    return api.handle != NULL;
}

bool jit_cuda_nvrtc_available(char *msg, size_t cap) {
    if (loaded())
        return true;
    snprintf(msg, cap, "kiln: %s", api.why);
    return false;
}

const char *jit_cuda_nvrtc_version(void) { return loaded() ? api.version_str : NULL; }

int jit_cuda_nvrtc_archs(int *archs, int cap) {
    int n = 0;
    if (!loaded() || !api.num_archs || api.num_archs(&n) != 0 || n <= 0)
        return 0;
    int *all = malloc(sizeof *all * (size_t)n);
    if (!all || api.archs(all) != 0) {
        free(all);
        return 0;
    }
    int k = n < cap ? n : cap;
    memcpy(archs, all, sizeof *all * (size_t)k);
    free(all);
    return k;
}

void jit_cuda_binary_free(jit_cuda_binary *b) {
    if (!b)
        return;
    free(b->ptx);
    free(b->cubin);
    free(b->log);
    memset(b, 0, sizeof *b);
}

/* Whether a log reports a problem: NVRTC logs nothing for clean code. */
static bool log_complains(const char *log) {
    return strstr(log, "warning") || strstr(log, "error");
}

static char *fetch(nvrtc_program prog, int (*size)(nvrtc_program, size_t *),
                   int (*get)(nvrtc_program, char *), size_t *n, bool terminate) {
    *n = 0;
    if (size(prog, n) != 0)
        return NULL;
    char *s = malloc(*n + 1);
    if (!s)
        return NULL;
    if (*n && get(prog, s) != 0) {
        free(s);
        return NULL;
    }
    if (terminate)
        s[*n] = 0;
    return s;
}

/* No contraction of a * b + c into one rounding: elementwise results then
 * match the CPU's, which does not contract either. --minimal leaves out the
 * runtime API's declarations, which generated code never uses, and saves a
 * good part of each compile. */
static const char *const flags[] = {"--std=c++17", "--fmad=false", "--minimal", NULL};
#define NFLAGS (sizeof flags / sizeof flags[0] - 1)

const char *const *jit_cuda_nvrtc_flags(void) { return flags; }

kiln_status jit_cuda_compile(const char *src, int arch, bool want_cubin, jit_cuda_binary *out,
                             char *msg, size_t cap) {
    if (out)
        memset(out, 0, sizeof *out);
    if (!jit_cuda_nvrtc_available(msg, cap))
        return KILN_ERR_DEVICE;
    if (arch <= 0)
        arch = 90;
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s_%d", want_cubin ? "sm" : "compute",
             arch);
    const char *opts[1 + NFLAGS] = {archopt};
    memcpy(opts + 1, flags, sizeof flags[0] * NFLAGS);
    nvrtc_program prog = NULL;
    int rc = api.create(&prog, src, "kiln.cu", 0, NULL, NULL);
    if (rc != 0) {
        snprintf(msg, cap, "kiln: NVRTC could not create a program: %s", api.error_string(rc));
        return rc == 1 ? KILN_ERR_OOM : KILN_ERR_COMPILE;
    }
    rc = api.compile(prog, (int)(1 + NFLAGS), opts);
    size_t n;
    char *log = fetch(prog, api.log_size, api.log, &n, true);
    kiln_status st = KILN_OK;
    if (!log) {
        snprintf(msg, cap, "kiln: out of memory reading the NVRTC log");
        st = KILN_ERR_OOM;
    } else if (rc != 0 || log_complains(log)) {
        snprintf(msg, cap, "kiln: CUDA C failed to compile for %s_%d (%s):\n%s",
                 want_cubin ? "sm" : "compute", arch,
                 rc != 0 ? api.error_string(rc) : "warnings are errors", log);
        st = KILN_ERR_COMPILE;
    } else if (out) {
        out->log = log;
        log = NULL;
        out->ptx = fetch(prog, api.ptx_size, api.ptx, &out->ptx_size, true);
        if (want_cubin)
            out->cubin = fetch(prog, api.cubin_size, api.cubin, &out->cubin_size, false);
        if (!out->ptx || (want_cubin && !out->cubin)) {
            jit_cuda_binary_free(out);
            snprintf(msg, cap, "kiln: could not read NVRTC's output for %s_%d (out of memory?)",
                     want_cubin ? "sm" : "compute", arch);
            st = KILN_ERR_OOM;
        }
    }
    free(log);
    api.destroy(&prog);
    return st;
}

/* ---- the program check ---------------------------------------------------- */

/* Verdicts also go to the disk cache (KILN_CACHE_DIR), as one-byte blobs of
 * kind "cucheck" under a key of source, flags and NVRTC's version: the check
 * runs in many short processes (every test, every CI run), nearly all of
 * which render programs compiled before. */
static cache *disk;
static pthread_once_t disk_once = PTHREAD_ONCE_INIT;

static void open_disk(void) {
    char why[256];
    disk = cache_open(NULL, 0, why, sizeof why);
}

/* Keys of sources that compiled, an open-addressing set (zero is empty). */
static struct {
    pthread_mutex_t lock;
    cache_key *keys;
    size_t n, cap;
} checked = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static size_t slot_of(const cache_key *keys, size_t cap, cache_key k) {
    size_t i = (size_t)(k.lo ^ (k.hi >> 7)) & (cap - 1);
    while ((keys[i].hi || keys[i].lo) && !(keys[i].hi == k.hi && keys[i].lo == k.lo))
        i = (i + 1) & (cap - 1);
    return i;
}

static bool seen(cache_key k) {
    pthread_mutex_lock(&checked.lock);
    bool hit = checked.cap && (checked.keys[slot_of(checked.keys, checked.cap, k)].hi ||
                               checked.keys[slot_of(checked.keys, checked.cap, k)].lo);
    pthread_mutex_unlock(&checked.lock);
    return hit;
}

/* Remembers k; forgetting is harmless (the source is only compiled again). */
static void remember(cache_key k) {
    pthread_mutex_lock(&checked.lock);
    if ((checked.n + 1) * 2 > checked.cap) {
        size_t cap = checked.cap ? checked.cap * 2 : 256;
        cache_key *keys = calloc(cap, sizeof *keys);
        if (!keys) {
            pthread_mutex_unlock(&checked.lock);
            return;
        }
        for (size_t i = 0; i < checked.cap; i++)
            if (checked.keys[i].hi || checked.keys[i].lo)
                keys[slot_of(keys, cap, checked.keys[i])] = checked.keys[i];
        free(checked.keys);
        checked.keys = keys;
        checked.cap = cap;
    }
    size_t i = slot_of(checked.keys, checked.cap, k);
    if (!checked.keys[i].hi && !checked.keys[i].lo) {
        checked.keys[i] = k;
        checked.n++;
    }
    pthread_mutex_unlock(&checked.lock);
}

kiln_status jit_cuda_check_program(const lower_program *p, char *msg, size_t cap) {
    lower_plan *plans = lower_plan_program(p, jit_cuda_target());
    char *src = NULL;
    kiln_status rst = KILN_ERR_OOM;
    if (plans)
        rst = jit_cuda_render(p, plans, &src, msg, cap);
    else
        snprintf(msg, cap, "kiln: out of memory while planning CUDA code");
    lower_plans_free(plans, p->nkernels);
    if (rst != KILN_OK)
        return rst;
    cache_key_builder b;
    cache_key_begin(&b);
    cache_key_add_str(&b, src);
    cache_key_add_str(&b, "kiln cuda check sm_90");
    for (size_t i = 0; i < NFLAGS; i++)
        cache_key_add_str(&b, flags[i]);
    const char *version = jit_cuda_nvrtc_version();
    cache_key_add_str(&b, version ? version : "");
    cache_key k = cache_key_end(&b);
    kiln_status st = KILN_OK;
    if (!seen(k)) {
        pthread_once(&disk_once, open_disk);
        void *data;
        size_t n;
        if (disk && version && cache_disk_get(disk, k, "cucheck", &data, &n) == 0) {
            free(data);
            remember(k);
        } else if ((st = jit_cuda_compile(src, 90, true, NULL, msg, cap)) == KILN_OK) {
            remember(k);
            if (disk)
                cache_disk_put(disk, k, "cucheck", "1", 1);
        }
    }
    free(src);
    return st;
}
