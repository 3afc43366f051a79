/* machine.c — the machine's limits, measured rather than read from a data
 * sheet: memory bandwidth by a STREAM-like triad and the f32 arithmetic peak
 * by chains of FMAs, both on the threads kiln's kernels use. Measured once per
 * CPU model and thread count and kept in the disk cache, so a program pays for
 * it once per machine (about a second), not once per run.
 *
 * The measuring code is generated C compiled by the kernels' own compiler and
 * flags (jit/cpu), so the peak is one that kiln's code could reach on this
 * CPU; OpenMP runs it, as it runs the kernels. A figure taken under load or
 * long ago is taken again when the machine is quieter, keeping the best. The triad runs over three
 * arrays together at least 1.5 times the last-level cache (128 MiB each at
 * most), each thread first-touching and then updating its own share, with 12
 * bytes counted per element (two loads and a store; the write-allocate read
 * is not counted, as STREAM does not). The FMA loop keeps 12 independent
 * chains per thread in the widest vectors the compiler targets, enough to hide
 * the FMA latency on two ports, and asks for contraction so that a*b+c is one
 * instruction. The best of several repetitions of each is kept.
 *
 * A device with limits of its own (a GPU: jit_device_ops.limits) is rated
 * against those instead, stored under its name the same way. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jit/cpu/cpu.h"
#include "jit/device.h"
#include "jit/profile.h"

#define MACHINE_REPS 3
#define MACHINE_MIN_BYTES ((int64_t)64 << 20)
#define MACHINE_MAX_BYTES ((int64_t)128 << 20)

static const char measure_src[] =
    "#define _POSIX_C_SOURCE 199309L\n"
    "#pragma GCC optimize(\"fp-contract=fast\")\n"
    "#include <stdint.h>\n"
    "#include <stdlib.h>\n"
    "#include <time.h>\n"
    "int omp_get_thread_num(void);\n"
    "#if defined(__AVX512F__)\n"
    "#define VEC_BYTES 64\n"
    "#elif defined(__AVX__)\n"
    "#define VEC_BYTES 32\n"
    "#else\n"
    "#define VEC_BYTES 16\n"
    "#endif\n"
    "#define LANES (VEC_BYTES / (int)sizeof(float))\n"
    "#define ITERS 4000000L\n"
    "typedef float vecf __attribute__((vector_size(VEC_BYTES)));\n"
    "static double now(void) {\n"
    "    struct timespec t;\n"
    "    clock_gettime(CLOCK_MONOTONIC, &t);\n"
    "    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;\n"
    "}\n"
    /* named chains, not an array: an array indexed in a loop stays in memory */
    "static float fma_loop(float seed) {\n"
    "    vecf mul, add, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;\n"
    "    for (int l = 0; l < LANES; l++) {\n"
    "        mul[l] = 0.999999f;\n"
    "        add[l] = 1e-6f * seed;\n"
    "        a0[l] = seed + (float)l;\n"
    "    }\n"
    "    a1 = a0 + 1; a2 = a0 + 2; a3 = a0 + 3; a4 = a0 + 4; a5 = a0 + 5; a6 = a0 + 6;\n"
    "    a7 = a0 + 7; a8 = a0 + 8; a9 = a0 + 9; a10 = a0 + 10; a11 = a0 + 11;\n"
    "    for (long i = 0; i < ITERS; i++) {\n"
    "        a0 = a0 * mul + add; a1 = a1 * mul + add; a2 = a2 * mul + add;\n"
    "        a3 = a3 * mul + add; a4 = a4 * mul + add; a5 = a5 * mul + add;\n"
    "        a6 = a6 * mul + add; a7 = a7 * mul + add; a8 = a8 * mul + add;\n"
    "        a9 = a9 * mul + add; a10 = a10 * mul + add; a11 = a11 * mul + add;\n"
    "#if defined(__x86_64__) || defined(__i386__)\n"
    "        __asm__ volatile(\"\" : \"+v\"(mul));\n"
    "#elif defined(__aarch64__)\n"
    "        __asm__ volatile(\"\" : \"+w\"(mul));\n"
    "#else\n"
    "        __asm__ volatile(\"\" : \"+m\"(mul));\n"
    "#endif\n"
    "    }\n"
    "    vecf s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;\n"
    "    float r = 0;\n"
    "    for (int l = 0; l < LANES; l++)\n"
    "        r += s[l];\n"
    "    return r;\n"
    "}\n"
    /* out: triad GB/s, FMA GFLOP/s, vector bits. 0, or -1 without memory. */
    "int kiln_machine_measure(int nt, int64_t n, int reps, double *out) {\n"
    "    float *a = aligned_alloc(64, (size_t)n * 4), *b = aligned_alloc(64, (size_t)n * 4);\n"
    "    float *c = aligned_alloc(64, (size_t)n * 4);\n"
    "    double *ts = calloc((size_t)nt * (size_t)reps * 2, sizeof(double));\n"
    "    if (!a || !b || !c || !ts) {\n"
    "        free(a); free(b); free(c); free(ts);\n"
    "        return -1;\n"
    "    }\n"
    "#pragma omp parallel num_threads(nt)\n"
    "    {\n"
    "        int id = omp_get_thread_num();\n"
    "        int64_t lo = n * id / nt, hi = n * (id + 1) / nt;\n"
    "        for (int64_t i = lo; i < hi; i++) {\n"
    "            a[i] = 0.0f;\n"
    "            b[i] = 1.0f + (float)(i & 7);\n"
    "            c[i] = 2.0f;\n"
    "        }\n"
    "        float *restrict pa = a;\n"
    "        const float *restrict pb = b, *restrict pc = c;\n"
    "        for (int r = 0; r < reps; r++) {\n"
    "#pragma omp barrier\n"
    "            double t0 = now();\n"
    "            for (int64_t i = lo; i < hi; i++)\n"
    "                pa[i] = pb[i] + 3.0f * pc[i];\n"
    "            ts[(size_t)r * nt + id] = now() - t0;\n"
    "        }\n"
    "        float s = a[lo];\n"
    "        for (int r = 0; r < reps; r++) {\n"
    "#pragma omp barrier\n"
    "            double t0 = now();\n"
    "            s += fma_loop((float)(id + r + 1));\n"
    "            ts[(size_t)(reps + r) * nt + id] = now() - t0;\n"
    "        }\n"
    "        if (s == -1.0f)\n"
    "            pa[lo] = s;\n"
    "    }\n"
    "    double best[2] = {0, 0};\n"
    "    for (int k = 0; k < 2; k++)\n"
    "        for (int r = 0; r < reps; r++) {\n"
    "            double slowest = 0;\n"
    "            for (int t = 0; t < nt; t++)\n"
    "                if (ts[(size_t)(k * reps + r) * nt + t] > slowest)\n"
    "                    slowest = ts[(size_t)(k * reps + r) * nt + t];\n"
    "            if (best[k] == 0 || slowest < best[k])\n"
    "                best[k] = slowest;\n"
    "        }\n"
    "    out[0] = 12.0 * (double)n / best[0] * 1e-9;\n"
    "    out[1] = 2.0 * 12 * LANES * (double)ITERS * nt / best[1] * 1e-9;\n"
    "    out[2] = VEC_BYTES * 8;\n"
    "    free(a); free(b); free(c); free(ts);\n"
    "    return 0;\n"
    "}\n";

typedef int (*measure_fn)(int nthreads, int64_t n, int reps, double *out);

/* Elements per triad array: the three together at least 1.5 times the
 * last-level cache, so that the triad streams from memory. */
static int64_t triad_elems(void) {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0)
        llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    int64_t bytes = llc > 0 ? (int64_t)llc / 2 : 0;
    if (bytes < MACHINE_MIN_BYTES)
        bytes = MACHINE_MIN_BYTES;
    if (bytes > MACHINE_MAX_BYTES)
        bytes = MACHINE_MAX_BYTES;
    return bytes / (int64_t)sizeof(float);
}

/* The device whose own limits rate its kernels, or NULL for the CPU. */
static jit_device *limited(const jit_watch *w) {
    return w->dev && w->dev->ops->limits ? w->dev : NULL;
}

static cache_key limits_key(const jit_watch *w, const kiln_machine *m) {
    cache_key_builder b;
    cache_key_begin(&b);
    cache_key_add_str(&b, "kiln machine limits");
    jit_device *d = limited(w);
    cache_key_add_str(&b, d ? d->ops->name : measure_src);
    cache_key_add_str(&b, m->cpu);
    cache_key_add_u64(&b, (uint64_t)m->threads);
    return cache_key_end(&b);
}

static kiln_status measure(jit_watch *w, kiln_machine *m, char *msg, size_t cap) {
    if (limited(w))
        return limited(w)->ops->limits(limited(w), true, m, msg, cap);
    cache *c = w->cache;
    bool compiled;
    void *h = jit_cpu_load(c, measure_src, jit_cpu_key(measure_src), &compiled, msg, cap);
    if (!h)
        return KILN_ERR_COMPILE;
    measure_fn fn = (measure_fn)(uintptr_t)dlsym(h, "kiln_machine_measure");
    double out[3];
    int rc = fn ? fn(m->threads, m->triad_elems, MACHINE_REPS, out) : -1;
    dlclose(h);
    if (rc != 0) {
        snprintf(msg, cap, "kiln_machine_limits: out of memory for the %lld-element triad",
                 (long long)m->triad_elems);
        return KILN_ERR_OOM;
    }
    m->gbps = out[0];
    m->gflops = out[1];
    m->vector_bits = (int)out[2];
    return KILN_OK;
}

static double load_now(void) {
    double l[1];
    return getloadavg(l, 1) == 1 ? l[0] : 0.0;
}

/* The stored figure of m's CPU and thread count, if any. Older entries
 * (four fields, no load or time) read as taken under unknown load, long ago. */
static bool stored(cache *c, cache_key key, kiln_machine *m) {
    void *data;
    size_t n;
    if (cache_disk_get(c, key, "machine", &data, &n) != 0)
        return false;
    char text[160];
    snprintf(text, sizeof text, "%.*s", (int)(n < sizeof text ? n : sizeof text - 1),
             (const char *)data);
    free(data);
    long long elems, at = 0;
    double load = 1e9;
    int got = sscanf(text, "%lf %lf %lld %d %lf %lld", &m->gbps, &m->gflops, &elems,
                     &m->vector_bits, &load, &at);
    m->triad_elems = elems;
    m->load = load;
    m->measured_at = at;
    /* A garbage entry with a valid checksum is no figure at all. */
    return got >= 4 && m->gbps > 0 && m->gflops > 0 && isfinite(m->gbps) &&
           isfinite(m->gflops) && elems > 0;
}

static void store(cache *c, cache_key key, const kiln_machine *m) {
    char text[160];
    int len = snprintf(text, sizeof text, "%.17g %.17g %lld %d %.2f %lld\n", m->gbps, m->gflops,
                       (long long)m->triad_elems, m->vector_bits, m->load,
                       (long long)m->measured_at);
    /* Without a disk level the next process measures again; nothing else. */
    cache_disk_put(c, key, "machine", text, (size_t)len);
}

enum { STALE_SECONDS = 30 * 24 * 3600 };

/* Measures m now; with `old`, stores the better of the two figures. */
static kiln_status measure_now(jit_watch *w, cache_key key, kiln_machine *m,
                               const kiln_machine *old, char *msg, size_t cap) {
    m->load = load_now();
    m->measured_at = (int64_t)time(NULL);
    kiln_status st = measure(w, m, msg, cap);
    if (st != KILN_OK)
        return st;
    kiln_machine best = *m;
    if (old) {
        if (old->gbps > best.gbps)
            best.gbps = old->gbps;
        if (old->gflops > best.gflops)
            best.gflops = old->gflops;
    }
    store(w->cache, key, &best);
    w->machine = best;
    w->have_machine = true;
    return KILN_OK;
}

/* What is measured: the CPU's model, the context's threads and the triad's
 * size, or what the device says of itself. */
static kiln_status identity(jit_watch *w, kiln_machine *m, char *msg, size_t cap) {
    memset(m, 0, sizeof *m);
    if (limited(w))
        return limited(w)->ops->limits(limited(w), false, m, msg, cap);
    m->threads = w->nthreads;
    m->triad_elems = triad_elems();
    jit_cpu_model(m->cpu, sizeof m->cpu);
    return KILN_OK;
}

kiln_status jit_machine_measure(jit_watch *w, kiln_machine *out, char *msg, size_t cap) {
    kiln_machine m, old;
    kiln_status st = identity(w, &m, msg, cap);
    if (st != KILN_OK)
        return st;
    old = m;
    cache_key key = limits_key(w, &m);
    bool have = stored(w->cache, key, &old);
    st = measure_now(w, key, &m, have ? &old : NULL, msg, cap);
    if (st == KILN_OK)
        *out = m;
    return st;
}

kiln_status jit_machine_get(jit_watch *w, kiln_machine *out, char *msg, size_t cap) {
    if (w->have_machine) {
        *out = w->machine;
        return KILN_OK;
    }
    kiln_machine m;
    kiln_status st = identity(w, &m, msg, cap);
    if (st != KILN_OK)
        return st;
    cache_key key = limits_key(w, &m);
    kiln_machine old = m;
    bool have = stored(w->cache, key, &old);
    double now = load_now(), busy = 0.5 * (double)m.threads;
    bool stale = have && ((int64_t)time(NULL) - old.measured_at > STALE_SECONDS ||
                          (old.load > busy && now <= busy));
    if (have && !stale) {
        w->machine = old;
        w->have_machine = true;
        *out = old;
        return KILN_OK;
    }
    st = measure_now(w, key, &m, have ? &old : NULL, msg, cap);
    if (st == KILN_OK)
        *out = w->machine;
    return st;
}
