/* dist_test.c — collectives between processes: tests/dist_worker.c run by
 * `mpirun -np N` (N = 1 to 4, oversubscribing this machine's cores), every
 * rank checking itself (see the worker's modes); here, that every rank
 * reported success, within a time limit. KILN_DIST_WORKER and
 * KILN_DIST_MPI_SHIM (set by tests/BUILD) name the worker and the MPI shim. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

typedef struct run_result {
    int status; /* the exit status, or -1 when it had to be killed */
    double secs;
    char out[1 << 16];
} run_result;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Runs `mpirun ... -np np worker mode` with the extra environment entries
 * (NAME=value, NULL-terminated), its output into r, killed after limit s. */
static void run_mpi(int np, const char *mode, bool recovery, const char *const *env, double limit,
                    run_result *r) {
    const char *worker = getenv("KILN_DIST_WORKER");
    cr_assert(worker, "KILN_DIST_WORKER is not set (tests/BUILD sets it)");
    char nps[16];
    snprintf(nps, sizeof nps, "%d", np);
    const char *argv[16];
    int a = 0;
    argv[a++] = "mpirun";
    argv[a++] = "--oversubscribe";
    argv[a++] = "--bind-to";
    argv[a++] = "none";
    if (recovery)
        argv[a++] = "--enable-recovery"; /* a dead rank does not end the others */
    argv[a++] = "-np";
    argv[a++] = nps;
    argv[a++] = worker;
    argv[a++] = mode;
    argv[a] = NULL;

    /* The environment: ours, plus what Open MPI needs here, plus env. */
    const char *fixed[] = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                           /* single-copy shared memory needs ptrace rights a sandbox lacks */
                           "OMPI_MCA_btl_vader_single_copy_mechanism=none",
                           /* Open MPI's plugins stay loaded, so that LeakSanitizer (the
                              ASan build) can name them in tests/dist_lsan.supp */
                           "OMPI_MCA_mca_base_component_disable_dlclose=1", NULL};
    int n = 0;
    while (environ[n])
        n++;
    const char **envp = calloc((size_t)n + 16, sizeof *envp);
    cr_assert(envp);
    int e = 0;
    for (int i = 0; fixed[i]; i++)
        envp[e++] = fixed[i];
    for (int i = 0; env && env[i]; i++)
        envp[e++] = env[i];
    for (int i = 0; i < n; i++) { /* ours, unless set above */
        size_t len = strcspn(environ[i], "=");
        bool shadowed = false;
        for (int k = 0; k < e && !shadowed; k++)
            shadowed = !strncmp(envp[k], environ[i], len) && envp[k][len] == '=';
        if (!shadowed)
            envp[e++] = environ[i];
    }
    envp[e] = NULL;

    int fds[2];
    cr_assert(pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, "mpirun", &fa, &at, (char *const *)argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    free(envp);
    close(fds[1]);
    cr_assert(rc == 0, "cannot start mpirun: %s", strerror(rc));

    double t0 = now_s();
    size_t len = 0;
    bool killed = false;
    for (;;) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int left = (int)((t0 + limit - now_s()) * 1000);
        if (left <= 0) {
            kill(-pid, SIGKILL);
            killed = true;
            break;
        }
        if (poll(&p, 1, left) <= 0)
            continue;
        char buf[4096];
        ssize_t got = read(fds[0], buf, sizeof buf);
        if (got <= 0)
            break;
        size_t take = (size_t)got < sizeof r->out - 1 - len ? (size_t)got : sizeof r->out - 1 - len;
        memcpy(r->out + len, buf, take);
        len += take;
    }
    r->out[len] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    r->secs = now_s() - t0;
    r->status = killed ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Every rank in [0, upto) printed "rank R: ok". */
static void expect_ranks_ok(const run_result *r, int upto, const char *what) {
    for (int k = 0; k < upto; k++) {
        char want[32];
        snprintf(want, sizeof want, "rank %d: ok", k);
        cr_expect(strstr(r->out, want), "%s: rank %d did not report success; output:\n%s", what, k,
                  r->out);
    }
    cr_expect(!strstr(r->out, "FAILED"), "%s: failures reported:\n%s", what, r->out);
}

static void expect_run_ok(int np, const char *mode, const char *const *env) {
    run_result *r = malloc(sizeof *r);
    cr_assert(r);
    run_mpi(np, mode, false, env, 600, r);
    char what[64];
    snprintf(what, sizeof what, "%s on %d rank%s", mode, np, np == 1 ? "" : "s");
    cr_expect(r->status == 0, "%s: exit status %d after %.1f s; output:\n%s", what, r->status,
              r->secs, r->out);
    expect_ranks_ok(r, np, what);
    free(r);
}

Test(dist, collectives_1_rank, .timeout = 900) { expect_run_ok(1, "collectives", NULL); }
Test(dist, collectives_2_ranks, .timeout = 900) { expect_run_ok(2, "collectives", NULL); }
Test(dist, collectives_3_ranks, .timeout = 900) { expect_run_ok(3, "collectives", NULL); }
Test(dist, collectives_4_ranks, .timeout = 900) { expect_run_ok(4, "collectives", NULL); }

Test(dist, collectives_llvm_2_ranks, .timeout = 900) {
    const char *env[] = {"KILN_CPU_COMPILER=llvm", NULL};
    expect_run_ok(2, "collectives", env);
}

Test(dist, gradients_1_rank, .timeout = 900) { expect_run_ok(1, "grad", NULL); }
Test(dist, gradients_2_ranks, .timeout = 900) { expect_run_ok(2, "grad", NULL); }
Test(dist, gradients_3_ranks, .timeout = 900) { expect_run_ok(3, "grad", NULL); }
Test(dist, gradients_4_ranks, .timeout = 900) { expect_run_ok(4, "grad", NULL); }

Test(dist, replays_compiled_step, .timeout = 900) { expect_run_ok(2, "replay", NULL); }

Test(dist, mismatch_2_ranks, .timeout = 900) { expect_run_ok(2, "mismatch", NULL); }
Test(dist, mismatch_3_ranks, .timeout = 900) { expect_run_ok(3, "mismatch", NULL); }

Test(dist, argument_errors, .timeout = 900) {
    expect_run_ok(1, "errors", NULL);
    expect_run_ok(2, "errors", NULL);
}

/* The last of 3 ranks exits without leaving the job; mpirun is told not to
 * end the others, which must then fail within the timeout, not hang. */
Test(dist, dead_rank_times_out, .timeout = 900) {
    const char *env[] = {"KILN_DIST_TIMEOUT=2", NULL};
    run_result *r = malloc(sizeof *r);
    cr_assert(r);
    run_mpi(3, "dead", true, env, 120, r);
    cr_expect(r->status != -1, "the job hung: killed after %.0f s; output:\n%s", r->secs, r->out);
    expect_ranks_ok(r, 2, "dead rank");
    cr_expect(r->secs < 60, "the job took %.1f s with a 2 s timeout", r->secs);
    free(r);
}

/* Without the MPI shim kiln_dist_init fails, naming where it looked: the
 * worker then reports a failed check, and nothing crashes. */
Test(dist, shim_missing_is_an_error, .timeout = 300) {
    const char *env[] = {"KILN_DIST_MPI_SHIM=/nonexistent/libkiln_mpi.so", NULL};
    run_result *r = malloc(sizeof *r);
    cr_assert(r);
    run_mpi(1, "errors", false, env, 120, r);
    cr_expect(r->status != 0, "a missing shim went unnoticed:\n%s", r->out);
    cr_expect(strstr(r->out, "/nonexistent/libkiln_mpi.so"), "the message names no path:\n%s",
              r->out);
    free(r);
}
