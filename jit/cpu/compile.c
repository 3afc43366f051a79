/* compile.c — generated C to a loaded shared object: the system C compiler
 * with OpenMP, a key over source + compiler identity + flags + kiln's version,
 * the disk cache for the .so, dlopen. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "jit/cpu/cpu.h"

extern char **environ;

/* -fno-math-errno and -fno-trapping-math change no value, only errno and
 * the floating-point exception flags, which kiln never reads; without them
 * gcc keeps floorf and sqrtf scalar, and a loop holding one does not
 * vectorise at all (the exp rule's floor kept gelu(a*b+c) scalar). */
static const char *const cflags[] = {"-O3",         "-march=native",      "-fopenmp",
                                     "-fno-math-errno", "-fno-trapping-math", "-fPIC",
                                     "-shared",     "-std=c11",           "-w",
                                     NULL};
#define NFLAGS (sizeof cflags / sizeof cflags[0] - 1)

static bool clang_wide(void);
static bool gcc_no_gathers(void);

/* Flags a compiler takes on some hosts beside cflags, one rule each (its
 * condition reads the host and the cached compiler id): the first that
 * holds adds its flag. What every compile passes and every key of its
 * objects and programs holds (jit_device_key), so that objects built
 * without it are not loaded for a compiler that now gets it. */
static struct host_flag {
    bool (*holds)(void);
    const char *flag;
    const char *argv[NFLAGS + 2]; /* cflags and the flag, filled once */
} host_flags[] = {
    {clang_wide, "-mprefer-vector-width=512", {NULL}},
    {gcc_no_gathers, "-mtune-ctrl=^use_gather", {NULL}},
};

static void fill_cflags(void) {
    for (size_t i = 0; i < sizeof host_flags / sizeof *host_flags; i++) {
        memcpy(host_flags[i].argv, cflags, sizeof(char *) * NFLAGS);
        host_flags[i].argv[NFLAGS] = host_flags[i].flag;
    }
}

const char *const *jit_cpu_flags(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    for (size_t i = 0; i < sizeof host_flags / sizeof *host_flags; i++)
        if (host_flags[i].holds()) {
            pthread_once(&once, fill_cflags);
            return host_flags[i].argv;
        }
    return cflags;
}

const char *jit_cpu_compiler(void) {
    const char *cc = getenv("KILN_CC");
    return cc && *cc ? cc : "cc";
}

/* KILN_COMPILE_TIMEOUT: seconds one compiler run may take (default 600; 0
 * for no limit). A compiler that never returned hung the sync point. */
static double compile_timeout(void) {
    const char *e = getenv("KILN_COMPILE_TIMEOUT");
    if (e && *e) {
        char *end;
        double v = strtod(e, &end);
        if (*end == '\0' && v >= 0)
            return v;
    }
    return 600;
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs argv with stdout and stderr into log_path, in a process group of its
 * own (so that a timeout kills the compiler's own children too); returns
 * its exit status, or -1 with the reason in why: it could not be started,
 * it was killed by a signal, or it ran past KILN_COMPILE_TIMEOUT. */
static int run(char *const argv[], const char *log_path, char *why, size_t cap) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        snprintf(why, cap, "could not be started (%s)", strerror(rc));
        return -1;
    }
    double limit = compile_timeout(), start = mono_now();
    long nap_ns = 200000;
    int status;
    for (;;) {
        pid_t got = waitpid(pid, &status, limit > 0 ? WNOHANG : 0);
        if (got == pid)
            break;
        if (got < 0 && errno != EINTR) {
            snprintf(why, cap, "could not be waited for (%s)", strerror(errno));
            return -1;
        }
        if (limit > 0 && mono_now() - start > limit) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            snprintf(why, cap, "did not finish within %g s (KILN_COMPILE_TIMEOUT) and was killed",
                     limit);
            return -1;
        }
        struct timespec nap = {0, nap_ns};
        nanosleep(&nap, NULL);
        if (nap_ns < 20000000)
            nap_ns *= 2;
    }
    if (WIFSIGNALED(status)) {
        snprintf(why, cap, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The compiler found as a program would run it: argv0 itself when it holds
 * a '/', else the first executable of that name on PATH; resolved through
 * links. Empty when there is none. */
static void resolve_program(const char *argv0, char *out, size_t cap) {
    out[0] = 0;
    char cand[4096];
    if (strchr(argv0, '/')) {
        if (realpath(argv0, cand))
            snprintf(out, cap, "%s", cand);
        return;
    }
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(cand, sizeof cand, "%.*s/%s", (int)n, n ? p : ".", argv0);
        char real[4096];
        if (access(cand, X_OK) == 0 && realpath(cand, real)) {
            snprintf(out, cap, "%s", real);
            return;
        }
        p += n + (p[n] == ':');
    }
}

void jit_cpu_model(char *dst, size_t cap) {
    snprintf(dst, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon)
            continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(dst, cap, "%s", colon);
        break;
    }
    if (f)
        fclose(f);
}

/* The CPU's model and a hash of its "flags" line: -march=native makes the
 * code depend on both. */
static void cpu_identity(char *out, size_t cap) {
    char model[256], line[8192];
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the flags line */
    jit_cpu_model(model, sizeof model);
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        for (const char *c = line; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
        break;
    }
    if (f)
        fclose(f);
    snprintf(out, cap, "%s flags %016llx", model, (unsigned long long)h);
}

/* What decides the code a compiler makes, for every key of its objects: the
 * resolved binary (path, size, modification time: a wrapper script that adds
 * -ffast-math is another binary, and an upgrade changes the time), the first
 * line of its --version, and the CPU that -march=native targets. Computed
 * once per KILN_CC value, under a lock (two threads once raced on it). The
 * strings are never freed, so the pointers stay valid. */
const char *jit_cpu_compiler_id(void) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static struct {
        char cc[512];
        char id[1400];
    } known[8];
    static int nknown;
    const char *cc = jit_cpu_compiler();
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nknown; i++)
        if (strcmp(known[i].cc, cc) == 0) {
            pthread_mutex_unlock(&lock);
            return known[i].id;
        }
    int slot = nknown < 8 ? nknown++ : 7;
    snprintf(known[slot].cc, sizeof known[slot].cc, "%s", cc);
    char bin[4096], version[256] = "", cpu[320];
    resolve_program(cc, bin, sizeof bin);
    struct stat st = {0};
    if (bin[0])
        stat(bin, &st);
    char dir[] = "/tmp/kiln-ccid-XXXXXX";
    if (mkdtemp(dir)) {
        char log[sizeof dir + 8], why[128];
        snprintf(log, sizeof log, "%s/v", dir);
        char *argv[] = {(char *)cc, "--version", NULL};
        if (run(argv, log, why, sizeof why) == 0) {
            FILE *f = fopen(log, "r");
            if (f) {
                if (fgets(version, sizeof version, f))
                    version[strcspn(version, "\n")] = 0;
                fclose(f);
            }
        }
        unlink(log);
        rmdir(dir);
    }
    cpu_identity(cpu, sizeof cpu);
    snprintf(known[slot].id, sizeof known[slot].id, "%s (%s, %lld bytes, mtime %lld.%09ld) %s; %s",
             cc, bin[0] ? bin : "not found", (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             (long)st.st_mtim.tv_nsec, version, cpu);
    const char *id = known[slot].id;
    pthread_mutex_unlock(&lock);
    return id;
}

/* Whether the compiler is clang on an AVX-512 host, where its
 * -march=native prefers 256-bit vectors for the loops it vectorises, so it
 * is told -mprefer-vector-width=512 (gcc is told per kernel, in the source:
 * render_c.c's wide_begin). Under clang-14, ops
 * --quick: the 11-op chain 15.6 -> 11.4-11.8 ms, gelu(a*b+c) 11.7-12.0 ->
 * 10.6 (gcc 10.1-10.3 and 10.8-11.2). */
static bool clang_wide(void) {
    return jit_cpu_target()->vector_bytes >= 64 && strstr(jit_cpu_compiler_id(), "clang");
}

/* Whether the compiler is gcc (not clang: -mtune-ctrl is gcc's) on an AMD
 * host without AVX-512 (Zen 3 and before), where it is told not to
 * vectorise through gathers: gcc 12's tuning for Zen 3 turns them on, and
 * there each 8-lane vgatherdps cost the CNN's pooling backward (9 masked
 * gathers an element for its col2im) 8.8 ms of a 37 ms step; with the
 * loads scalar the step ran 27-31 ms against 38-43, alternating (2-core
 * EPYC, Zen 3, 2026-12-07), and bench/ops' workloads level (they hold no
 * gathers). AVX-512 hosts keep them: there the same kernel took 1.4 ms. */
static bool gcc_no_gathers(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return jit_cpu_target()->vector_bytes < 64 && __builtin_cpu_is("amd") &&
           !strstr(jit_cpu_compiler_id(), "clang");
#else
    return false;
#endif
}

cache_key jit_cpu_key(const char *src) {
    cache_key_builder b;
    cache_key_begin(&b);
    cache_key_add_str(&b, src);
    cache_key_add_str(&b, jit_cpu_compiler_id());
    for (const char *const *f = jit_cpu_flags(); *f; f++)
        cache_key_add_str(&b, *f);
    cache_key_add_u64(&b, KILN_VERSION_MAJOR * 1000000 + KILN_VERSION_MINOR * 1000 +
                              KILN_VERSION_PATCH);
    return cache_key_end(&b);
}

static void read_log(const char *path, char *msg, size_t cap) {
    FILE *f = fopen(path, "r");
    size_t n = 0;
    if (f) {
        n = fread(msg, 1, cap - 1, f);
        fclose(f);
    }
    msg[n] = 0;
}

/* A private build directory: under the cache directory (so that the object
 * can be renamed into it), else under $TMPDIR or /tmp. A read-only, full or
 * too deep cache directory once failed every new graph; now the code is
 * built elsewhere (and cached as far as the cache can), and KILN_DEBUG >= 1
 * says so once. */
static bool build_dir(const char *base, char *dir, size_t cap) {
    const char *tmp = getenv("TMPDIR");
    const char *bases[3] = {base, tmp && *tmp ? tmp : NULL, "/tmp"};
    for (int i = 0; i < 3; i++) {
        if (!bases[i])
            continue;
        int n = snprintf(dir, cap, "%s/kiln-build-XXXXXX", bases[i]);
        if (n > 0 && (size_t)n < cap && mkdtemp(dir)) {
            static _Atomic int said;
            const char *dbg = getenv("KILN_DEBUG");
            if (i > 0 && base && dbg && atoi(dbg) >= 1 && !said++)
                fprintf(stderr, "kiln: cannot build under the cache directory %s; building in %s\n",
                        base, bases[i]);
            return true;
        }
    }
    return false;
}

/* ---- the process's objects ----
 * Objects are loaded RTLD_NODELETE: they link an OpenMP runtime (libgomp, or
 * libomp under KILN_CC=clang, which kiln itself does not hold), whose worker
 * threads outlive any one program, and unloading it under them would crash.
 * So an object stays mapped for the process's life, and every one loaded is
 * kept here by key: a program built again (a memory-only cache, or a disk
 * cache that could not take the file) reuses the mapping instead of adding
 * one per context, so the mappings are bounded by the distinct programs, as
 * they are with a disk cache, whose paths the loader itself shares. */

static void *load_or_build(cache *c, const char *src, cache_key key, bool *compiled, char *msg,
                           size_t cap);

typedef struct loaded {
    cache_key key;
    void *handle;
} loaded;

static pthread_mutex_t loaded_lock = PTHREAD_MUTEX_INITIALIZER;
static loaded *loaded_objects;
static size_t nloaded, loaded_cap;

static void *find_loaded(cache_key key) {
    void *h = NULL;
    pthread_mutex_lock(&loaded_lock);
    for (size_t i = 0; i < nloaded && !h; i++)
        if (loaded_objects[i].key.hi == key.hi && loaded_objects[i].key.lo == key.lo)
            h = loaded_objects[i].handle;
    pthread_mutex_unlock(&loaded_lock);
    return h;
}

/* Out of memory, h is simply not shared. */
static void keep_loaded(cache_key key, void *h) {
    pthread_mutex_lock(&loaded_lock);
    if (nloaded == loaded_cap) {
        size_t cap = loaded_cap ? loaded_cap * 2 : 64;
        loaded *l = realloc(loaded_objects, sizeof *l * cap);
        if (l) {
            loaded_objects = l;
            loaded_cap = cap;
        }
    }
    if (nloaded < loaded_cap)
        loaded_objects[nloaded++] = (loaded){key, h};
    pthread_mutex_unlock(&loaded_lock);
}

/* Handles are the process's (above): a program's code never closes one. */
void *jit_cpu_load(cache *c, const char *src, cache_key key, bool *compiled, char *msg,
                   size_t cap) {
    *compiled = false;
    void *h = find_loaded(key);
    if (h)
        return h;
    h = load_or_build(c, src, key, compiled, msg, cap);
    if (h)
        keep_loaded(key, h);
    return h;
}

/* ---- compiling: one translation unit, or several in parallel ---- */

/* Whether the kernels in [from, to) are all tiny (JIT_CPU_TINY_MARK), and
 * there is one. Such kernels run in well under a microsecond whatever the
 * optimisation level, and gcc -O1 compiles them in two thirds of -O3's time
 * (-O2 takes as long as -O3): 1000 small reductions at one sync, each with
 * the Philox generator inlined, 4.97-5.17 -> 3.46-3.60 ms a kernel cold. */
static bool all_tiny(const char *from, const char *to) {
    const size_t n = strlen(JIT_CPU_KERNEL_MARK);
    int kernels = 0;
    for (const char *p = from; (p = strstr(p, JIT_CPU_KERNEL_MARK)) && p < to; p += n, kernels++)
        if (strncmp(p + n, JIT_CPU_TINY_MARK, strlen(JIT_CPU_TINY_MARK)) != 0)
            return false;
    return kernels > 0;
}

/* The compiler's command line for src into out (-c: an object, else the
 * shared object itself); tiny: -O1 for -O3 (all_tiny). */
static void compile_argv(char **argv, const char *src, const char *out, bool object, bool tiny) {
    int a = 0;
    argv[a++] = (char *)jit_cpu_compiler();
    for (const char *const *f = jit_cpu_flags(); *f; f++)
        if (!object || strcmp(*f, "-shared"))
            argv[a++] = tiny && !strcmp(*f, "-O3") ? "-O1" : (char *)*f;
    if (object)
        argv[a++] = "-c";
    argv[a++] = "-o";
    argv[a++] = (char *)out;
    argv[a++] = (char *)src;
    if (!object)
        argv[a++] = "-lm";
    argv[a] = NULL;
}

/* A failed compiler run as the message users see. */
static void compile_failure(int rc, const char *why, const char *logpath, char *msg, size_t cap) {
    char log[1024];
    read_log(logpath, log, sizeof log);
    if (rc < 0)
        snprintf(msg, cap, "kiln: the C compiler (%s) %s%s%s", jit_cpu_compiler(), why,
                 log[0] ? ": " : "", log);
    else
        snprintf(msg, cap, "kiln: the C compiler (%s) failed with status %d: %s",
                 jit_cpu_compiler(), rc, log);
}

static bool write_text(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "w");
    bool ok = f && fwrite(text, 1, n, f) == n;
    if (f && fclose(f) != 0)
        ok = false;
    return ok;
}

/* The most kernels one translation unit holds: gcc -O3's time per kernel
 * grows with the unit's size (here 18-24 ms a kernel in units of 25 to 100
 * small reductions, 41 ms in units of 200, 204 ms in units of 500: 1000
 * kernels at one sync took 102 s as two units). */
#define KERNELS_PER_PART 64

/* How many translation units a program of `kernels` kernels is compiled
 * as, and how many compile at once (*jobs): one per core the process may
 * use (KILN_COMPILE_JOBS overrides; at most 16), but no fewer than 8
 * kernels each, so that a
 * small program pays for one compiler start only, and more units than
 * cores where the kernels are more than KERNELS_PER_PART a core. gcc -O3
 * takes about 40 ms per kernel here, so GPT-2's step (355 kernels at L4)
 * spent 13 s in one compiler process on one core. */
static int compile_parts(int kernels, int *jobs) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    const char *e = getenv("KILN_COMPILE_JOBS");
    if (e && *e)
        n = strtol(e, NULL, 10);
    *jobs = n < 1 ? 1 : n > 16 ? 16 : (int)n;
    int parts = *jobs < kernels / 8 ? *jobs : kernels / 8;
    int need = (kernels + KERNELS_PER_PART - 1) / KERNELS_PER_PART;
    /* whole rounds of *jobs units: GPT-2's step of 569 kernels as 9 units
     * on 2 cores compiled its last unit alone, 12.7 s where 10 units took
     * 11.2 s (units of about equal expected time; see deal_kernels) */
    if (parts < need)
        parts = need > *jobs ? (need + *jobs - 1) / *jobs * *jobs : need;
    return parts < 1 ? 1 : parts;
}

typedef struct compile_job {
    char *argv[NFLAGS + 9];
    char src[4200], obj[4200], log[4200];
    char why[256];
    int rc;
    pthread_t thread;
} compile_job;

static void *compile_job_run(void *arg) {
    compile_job *j = arg;
    j->rc = run(j->argv, j->log, j->why, sizeof j->why);
    return NULL;
}

/* One kernel's text in the program (from its mark to the next), what
 * compiling it is expected to cost, and the translation unit it goes to. */
typedef struct kernel_span {
    const char *at;
    size_t len;
    long weight;
    int part;
} kernel_span;

/* A kernel's expected compile time, in arbitrary units, from its text: gcc
 * -O3's time grows with the loops it may vectorise and version, and then
 * with the text. Measured here on the MLP training step's 27 kernels: a
 * matmul (about 20 loops, 10 KB) 110-150 ms, an elementwise kernel with the
 * random generator inlined (2 loops, 13 KB) 26-45 ms, a relu or a cat (2
 * loops, 1 KB) 7-25 ms; 8 per loop and 1 per 400 bytes keeps those ratios. */
static long compile_weight(const char *at, size_t len) {
    long loops = 0;
    for (const char *p = at; (p = strstr(p, "for (")) && p < at + len; p += 5)
        loops++;
    return 8 * loops + (long)(len / 400) + 1;
}

static int heavier_first(const void *a, const void *b) {
    const kernel_span *x = *(kernel_span *const *)a, *y = *(kernel_span *const *)b;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at; /* ties in program order: deterministic */
}

/* The n kernels of src dealt into `parts` units of about equal expected
 * compile time: heaviest first, each to the lightest unit so far. Cut into
 * runs of equal text instead, the step's five products of one half took
 * 970 ms where the other half's three took 590. Returns the n spans
 * (NULL: out of memory). */
static kernel_span *deal_kernels(const char *src, int n, int parts) {
    const size_t mk = strlen(JIT_CPU_KERNEL_MARK);
    kernel_span *k = calloc((size_t)n + 1, sizeof *k);
    kernel_span **order = calloc((size_t)n + 1, sizeof *order);
    long *load = calloc((size_t)parts, sizeof *load);
    if (!k || !order || !load) {
        free(k);
        free(order);
        free(load);
        return NULL;
    }
    const char *p = strstr(src, JIT_CPU_KERNEL_MARK);
    for (int i = 0; i < n; i++) {
        const char *next = strstr(p + mk, JIT_CPU_KERNEL_MARK);
        k[i].at = p;
        k[i].len = next ? (size_t)(next - p) : strlen(p);
        k[i].weight = compile_weight(p, k[i].len);
        order[i] = &k[i];
        p = next;
    }
    qsort(order, (size_t)n, sizeof *order, heavier_first);
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int j = 1; j < parts; j++)
            if (load[j] < load[best])
                best = j;
        order[i]->part = best;
        load[best] += order[i]->weight;
    }
    free(order);
    free(load);
    return k;
}

/* Unit `part`: the prelude and its kernels, in program order; *tiny: every
 * one of them is tiny (all_tiny), and there is one. */
static bool write_part(const char *path, const char *src, size_t pre, const kernel_span *k, int n,
                       int part, bool *tiny) {
    FILE *f = fopen(path, "w");
    bool ok = f && fwrite(src, 1, pre, f) == pre;
    int kernels = 0;
    *tiny = true;
    for (int i = 0; i < n && ok; i++)
        if (k[i].part == part) {
            ok = fwrite(k[i].at, 1, k[i].len, f) == k[i].len;
            *tiny = *tiny && all_tiny(k[i].at, k[i].at + k[i].len);
            kernels++;
        }
    if (f && fclose(f) != 0)
        ok = false;
    *tiny = *tiny && kernels > 0;
    return ok;
}

/* src (nk kernels) compiled into sopath as `parts` translation units, each
 * the prelude (everything before the first kernel mark) and the whole
 * kernels deal_kernels gave it, at_once of them compiling at a time, then
 * linked. */
static bool build_parallel(const char *src, int nk, int parts, int at_once, const char *dir,
                           const char *sopath, char *msg, size_t cap) {
    const char *first = strstr(src, JIT_CPU_KERNEL_MARK);
    size_t pre = (size_t)(first - src);
    kernel_span *spans = deal_kernels(src, nk, parts);
    compile_job *jobs = calloc((size_t)parts, sizeof *jobs);
    if (!jobs || !spans) {
        snprintf(msg, cap, "kiln: out of memory compiling %d parts", parts);
        free(jobs);
        free(spans);
        return false;
    }
    bool ok = true;
    int started = 0;
    for (int i = 0; i < parts && ok; i++) {
        compile_job *j = &jobs[i];
        snprintf(j->src, sizeof j->src, "%s/part%d.c", dir, i);
        snprintf(j->obj, sizeof j->obj, "%s/part%d.o", dir, i);
        snprintf(j->log, sizeof j->log, "%s/log%d", dir, i);
        bool tiny;
        if (!write_part(j->src, src, pre, spans, nk, i, &tiny)) {
            snprintf(msg, cap, "kiln: cannot write %s", j->src);
            ok = false;
            break;
        }
        compile_argv(j->argv, j->src, j->obj, true, tiny);
        if (started >= at_once && jobs[started - at_once].thread) { /* a free core first */
            pthread_join(jobs[started - at_once].thread, NULL);
            jobs[started - at_once].thread = 0;
        }
        if (pthread_create(&j->thread, NULL, compile_job_run, j) != 0) {
            compile_job_run(j); /* no thread: compile it here */
            j->thread = 0;
        }
        started++;
    }
    free(spans);
    for (int i = 0; i < started; i++)
        if (jobs[i].thread)
            pthread_join(jobs[i].thread, NULL);
    for (int i = 0; i < started && ok; i++)
        if (jobs[i].rc != 0) {
            compile_failure(jobs[i].rc, jobs[i].why, jobs[i].log, msg, cap);
            ok = false;
        }
    char linklog[4200];
    snprintf(linklog, sizeof linklog, "%s/log", dir);
    if (ok) {
        char **argv = calloc((size_t)started + 8, sizeof *argv);
        int a = 0;
        if (argv) {
            argv[a++] = (char *)jit_cpu_compiler();
            argv[a++] = "-shared";
            argv[a++] = "-fopenmp";
            argv[a++] = "-o";
            argv[a++] = (char *)sopath;
            for (int i = 0; i < started; i++)
                argv[a++] = jobs[i].obj;
            argv[a++] = "-lm";
            argv[a] = NULL;
            char why[256] = "";
            int rc = run(argv, linklog, why, sizeof why);
            if (rc != 0) {
                compile_failure(rc, why, linklog, msg, cap);
                ok = false;
            }
            free(argv);
        } else {
            snprintf(msg, cap, "kiln: out of memory linking %d parts", started);
            ok = false;
        }
    }
    for (int i = 0; i < parts; i++)
        if (jobs[i].src[0]) {
            unlink(jobs[i].src);
            unlink(jobs[i].obj);
            unlink(jobs[i].log);
        }
    unlink(linklog);
    free(jobs);
    return ok;
}

/* ---- identical kernels, compiled once ---- */

/* How every kernel's function opens (render_c.c's params()). */
#define KERNEL_OPENS JIT_CPU_KERNEL_PARAMS " {\n"

typedef struct twin_span {
    const char *at, *sym;
    size_t len, symlen;
    uint64_t hash;
    int leader; /* the first span of its text: itself, or an earlier one */
} twin_span;

static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The span's kernel function's name (the identifier before KERNEL_OPENS). */
static bool span_symbol(twin_span *t) {
    const char *open = memmem(t->at, t->len, KERNEL_OPENS, strlen(KERNEL_OPENS));
    if (!open)
        return false;
    const char *s = open;
    while (s > t->at && ident_char(s[-1]))
        s--;
    t->sym = s;
    t->symlen = (size_t)(open - s);
    return t->symlen > 0;
}

/* The span's text with each occurrence of its own name as one placeholder:
 * a kernel names its helpers after itself (NAME_MR, NAME_epi), so two
 * kernels of one text differ only there. */
static uint64_t twin_hash(const twin_span *t) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < t->len;) {
        if (t->at[i] == t->sym[0] && t->len - i >= t->symlen &&
            !memcmp(t->at + i, t->sym, t->symlen)) {
            h = (h ^ 0x100) * 1099511628211ull;
            i += t->symlen;
        } else {
            h = (h ^ (unsigned char)t->at[i++]) * 1099511628211ull;
        }
    }
    return h;
}

static bool twins(const twin_span *a, const twin_span *b) {
    size_t i = 0, j = 0;
    while (i < a->len && j < b->len) {
        bool na = a->at[i] == a->sym[0] && a->len - i >= a->symlen &&
                  !memcmp(a->at + i, a->sym, a->symlen);
        bool nb = b->at[j] == b->sym[0] && b->len - j >= b->symlen &&
                  !memcmp(b->at + j, b->sym, b->symlen);
        if (na != nb)
            return false;
        if (na) {
            i += a->symlen;
            j += b->symlen;
        } else if (a->at[i++] != b->at[j++]) {
            return false;
        }
    }
    return i == a->len && j == b->len;
}

/* src's *nk kernels with each kernel whose text (but for its name) an
 * earlier one already has left out, its name made an alias of the earlier
 * one's (after that one's text, so in its translation unit): a program's
 * repeated layers compile once. GPT-2's small step had 208 kernels of 59
 * texts. NULL when nothing repeats or out of memory (src is then compiled as
 * it is); else *nk is the kernels left. */
static char *fold_twins(const char *src, int *nk) {
    int n = *nk;
    const size_t mk = strlen(JIT_CPU_KERNEL_MARK);
    const char *first = strstr(src, JIT_CPU_KERNEL_MARK);
    twin_span *t = n > 1 && first ? calloc((size_t)n, sizeof *t) : NULL;
    if (!t)
        return NULL;
    const char *p = first;
    int folded = 0;
    for (int i = 0; i < n; i++) {
        const char *next = strstr(p + mk, JIT_CPU_KERNEL_MARK);
        t[i].at = p;
        t[i].len = next ? (size_t)(next - p) : strlen(p);
        t[i].leader = i;
        if (!span_symbol(&t[i])) {
            free(t);
            return NULL;
        }
        t[i].hash = twin_hash(&t[i]);
        for (int j = 0; j < i; j++)
            if (t[j].leader == j && t[j].hash == t[i].hash && twins(&t[j], &t[i])) {
                t[i].leader = j;
                folded++;
                break;
            }
        p = next;
    }
    if (!folded) {
        free(t);
        return NULL;
    }
    size_t pre = (size_t)(first - src), total = pre + 1;
    for (int i = 0; i < n; i++)
        total += t[i].leader == i ? t[i].len : 2 * t[i].symlen + 128;
    char *out = malloc(total);
    if (out) {
        size_t at = pre;
        memcpy(out, src, pre);
        for (int i = 0; i < n; i++) {
            if (t[i].leader != i)
                continue;
            memcpy(out + at, t[i].at, t[i].len);
            at += t[i].len;
            for (int j = i + 1; j < n; j++)
                if (t[j].leader == i)
                    at += (size_t)sprintf(out + at,
                                          "void %.*s" JIT_CPU_KERNEL_PARAMS
                                          " __attribute__((alias(\"%.*s\")));\n",
                                          (int)t[j].symlen, t[j].sym, (int)t[i].symlen, t[i].sym);
        }
        out[at] = '\0';
        *nk = n - folded;
    }
    free(t);
    return out;
}

static void *load_or_build(cache *c, const char *src, cache_key key, bool *compiled, char *msg,
                           size_t cap) {
    char path[4096];
    if (cache_disk_path(c, key, "so", path, sizeof path) == 0) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (h)
            return h;
    }
    char dir[4096];
    if (!build_dir(cache_dir(c), dir, sizeof dir)) {
        snprintf(msg, cap, "kiln: cannot create a build directory under the cache, $TMPDIR or /tmp");
        return NULL;
    }
    char cpath[4200], sopath[4200], logpath[4200];
    snprintf(cpath, sizeof cpath, "%s/kernels.c", dir);
    snprintf(sopath, sizeof sopath, "%s/kernels.so", dir);
    snprintf(logpath, sizeof logpath, "%s/log", dir);
    void *h = NULL;
    int jobs, kernels = 0;
    for (const char *p = src; (p = strstr(p, JIT_CPU_KERNEL_MARK)); p += strlen(JIT_CPU_KERNEL_MARK))
        kernels++;
    char *folded = fold_twins(src, &kernels);
    if (folded)
        src = folded;
    int parts = compile_parts(kernels, &jobs);
    if (parts > 1) {
        if (!build_parallel(src, kernels, parts, jobs, dir, sopath, msg, cap))
            goto done;
    } else {
        if (!write_text(cpath, src, strlen(src))) {
            snprintf(msg, cap, "kiln: cannot write %s", cpath);
            goto done;
        }
        char *argv[NFLAGS + 9];
        compile_argv(argv, cpath, sopath, false, all_tiny(src, src + strlen(src)));
        char why[256] = "";
        int rc = run(argv, logpath, why, sizeof why);
        if (rc != 0) {
            compile_failure(rc, why, logpath, msg, cap);
            goto done;
        }
    }
    *compiled = true;
    /* Loaded first, from its own private directory: an object that does
     * not load (a compiler that exits 0 and writes garbage) never reaches the
     * cache, where later processes would find it. */
    h = dlopen(sopath, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h)
        snprintf(msg, cap, "kiln: cannot load the compiled kernels: %s", dlerror());
    else
        cache_disk_put_file(c, key, "so", sopath);
done:
    free(folded);
    unlink(cpath);
    unlink(sopath);
    unlink(logpath);
    rmdir(dir);
    return h;
}
