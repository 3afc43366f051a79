/* machine.c — the machine's measured limits (see machine.h). Threads are
 * plain pthreads, not OpenMP, so that the measurement neither shares nor
 * configures the thread pool of the kernels it is compared with.
 *
 * The triad follows STREAM: three arrays far larger than the last-level cache
 * (256 MiB each, beyond the 480 MiB that a virtual machine may report as L3),
 * each thread first-touching and then updating its own contiguous share, and
 * 12 bytes counted per element (two loads and one store; the write-allocate
 * read is not counted, as STREAM does not). The FMA loop keeps 12 independent
 * accumulators per thread in the widest vectors the compiler targets, enough
 * to hide the FMA latency on two ports, and is built with -ffp-contract=fast
 * so that a*b+c becomes one instruction. */
#define _GNU_SOURCE
#include "bench/machine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__AVX512F__)
#define VEC_BYTES 64
#elif defined(__AVX__)
#define VEC_BYTES 32
#else
#define VEC_BYTES 16
#endif
#define VEC_LANES (VEC_BYTES / (int)sizeof(float))
#define FMA_CHAINS 12
#define FMA_ITERS 20000000L
#define TRIAD_ELEMS (INT64_C(1) << 26)

typedef float vecf __attribute__((vector_size(VEC_BYTES)));

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct shared {
    pthread_barrier_t barrier;
    float *a, *b, *c;
    int64_t n;
    int nthreads;
    int reps;
    double *triad_s; /* per repetition, the slowest thread's time */
    double *fma_s;
    pthread_mutex_t lock;
} shared;

typedef struct worker {
    shared *sh;
    int id;
    float sink;
} worker;

static void slowest(shared *sh, double *slot, double t) {
    pthread_mutex_lock(&sh->lock);
    if (t > *slot)
        *slot = t;
    pthread_mutex_unlock(&sh->lock);
}

/* The chains are named variables, not an array, so that they live in
 * registers: an array indexed in a loop was kept in memory by the compiler. */
static float fma_loop(float seed) {
    vecf mul, add, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11;
    for (int l = 0; l < VEC_LANES; l++) {
        mul[l] = 0.999999f;
        add[l] = 1e-6f * seed;
        a0[l] = seed + (float)l;
    }
    a1 = a0 + 1;
    a2 = a0 + 2;
    a3 = a0 + 3;
    a4 = a0 + 4;
    a5 = a0 + 5;
    a6 = a0 + 6;
    a7 = a0 + 7;
    a8 = a0 + 8;
    a9 = a0 + 9;
    a10 = a0 + 10;
    a11 = a0 + 11;
    for (long i = 0; i < FMA_ITERS; i++) {
        a0 = a0 * mul + add;
        a1 = a1 * mul + add;
        a2 = a2 * mul + add;
        a3 = a3 * mul + add;
        a4 = a4 * mul + add;
        a5 = a5 * mul + add;
        a6 = a6 * mul + add;
        a7 = a7 * mul + add;
        a8 = a8 * mul + add;
        a9 = a9 * mul + add;
        a10 = a10 * mul + add;
        a11 = a11 * mul + add;
        /* Keeps the compiler from proving the loop's result and folding it. */
#if defined(__x86_64__) || defined(__i386__)
        __asm__ volatile("" : "+v"(mul));
#elif defined(__aarch64__)
        __asm__ volatile("" : "+w"(mul));
#else
        __asm__ volatile("" : "+m"(mul));
#endif
    }
    vecf sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    float s = 0;
    for (int l = 0; l < VEC_LANES; l++)
        s += sum[l];
    return s;
}

static void *work(void *arg) {
    worker *w = arg;
    shared *sh = w->sh;
    int64_t lo = sh->n * w->id / sh->nthreads, hi = sh->n * (w->id + 1) / sh->nthreads;
    float *restrict a = sh->a;
    const float *restrict b = sh->b;
    const float *restrict c = sh->c;
    for (int64_t i = lo; i < hi; i++) {
        sh->a[i] = 0.0f;
        sh->b[i] = 1.0f + (float)(i & 7);
        sh->c[i] = 2.0f;
    }
    const float s = 3.0f;
    for (int r = 0; r < sh->reps; r++) {
        pthread_barrier_wait(&sh->barrier);
        double t0 = now();
        for (int64_t i = lo; i < hi; i++)
            a[i] = b[i] + s * c[i];
        slowest(sh, &sh->triad_s[r], now() - t0);
    }
    w->sink = a[lo] + a[hi - 1];
    for (int r = 0; r < sh->reps; r++) {
        pthread_barrier_wait(&sh->barrier);
        double t0 = now();
        w->sink += fma_loop((float)(w->id + r + 1));
        slowest(sh, &sh->fma_s[r], now() - t0);
    }
    return NULL;
}

static void cpu_model(char *dst, size_t cap) {
    snprintf(dst, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon)
            continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(dst, cap, "%s", colon);
        break;
    }
    fclose(f);
}

int bench_machine_measure(bench_machine *m, int nthreads, int reps) {
    memset(m, 0, sizeof *m);
    cpu_model(m->cpu, sizeof m->cpu);
    if (nthreads < 1)
        nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nthreads < 1)
        nthreads = 1;
    if (reps < 1)
        reps = 1;
    shared sh = {.n = TRIAD_ELEMS, .nthreads = nthreads, .reps = reps};
    size_t bytes = (size_t)TRIAD_ELEMS * sizeof(float);
    sh.a = aligned_alloc(64, bytes);
    sh.b = aligned_alloc(64, bytes);
    sh.c = aligned_alloc(64, bytes);
    sh.triad_s = calloc((size_t)reps, sizeof(double));
    sh.fma_s = calloc((size_t)reps, sizeof(double));
    worker *ws = calloc((size_t)nthreads, sizeof *ws);
    pthread_t *tid = calloc((size_t)nthreads, sizeof *tid);
    int rc = -1, started = 0;
    if (!sh.a || !sh.b || !sh.c || !sh.triad_s || !sh.fma_s || !ws || !tid)
        goto done;
    pthread_mutex_init(&sh.lock, NULL);
    pthread_barrier_init(&sh.barrier, NULL, (unsigned)nthreads);
    for (; started < nthreads; started++) {
        ws[started] = (worker){.sh = &sh, .id = started};
        if (pthread_create(&tid[started], NULL, work, &ws[started]) != 0)
            break;
    }
    /* A thread that failed to start leaves the others at the barrier for
     * good, so only a full start is joined. */
    if (started < nthreads)
        abort();
    for (int i = 0; i < nthreads; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&sh.barrier);
    pthread_mutex_destroy(&sh.lock);
    double best_triad = sh.triad_s[0], best_fma = sh.fma_s[0];
    for (int r = 1; r < reps; r++) {
        if (sh.triad_s[r] < best_triad)
            best_triad = sh.triad_s[r];
        if (sh.fma_s[r] < best_fma)
            best_fma = sh.fma_s[r];
    }
    m->threads = nthreads;
    m->triad_elems = TRIAD_ELEMS;
    m->triad_gbps = 12.0 * (double)TRIAD_ELEMS / best_triad * 1e-9;
    m->vector_bits = VEC_BYTES * 8;
    m->fma_gflops = 2.0 * FMA_CHAINS * VEC_LANES * (double)FMA_ITERS * nthreads / best_fma * 1e-9;
    rc = 0;
done:
    free(sh.a);
    free(sh.b);
    free(sh.c);
    free(sh.triad_s);
    free(sh.fma_s);
    free(ws);
    free(tid);
    return rc;
}
