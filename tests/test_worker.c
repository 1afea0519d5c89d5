/*
 * test_worker: cohort-worker and its communication library.  The store and
 * the model are tested in-process; training, equivalence, resume and
 * failure run real cohort-worker processes meeting over loopback, exactly as
 * the agent starts them (the env:// variables).
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "worker/comm.h"
#include "worker/comm_impl.h"
#include "worker/comm_store.h"
#include "worker/data.h"
#include "worker/mlp.h"
#include "worker/optim.h"
#include "worker/sampler.h"

extern char **environ;

/* ---- helpers ------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void tmpdir(char *out, size_t len)
{
    snprintf(out, len, "/tmp/cohort-worker-test-XXXXXX");
    cr_assert_not_null(mkdtemp(out));
}

/* A port nobody listens on right now. */
/*
 * A port for a rank 0 to listen on: below the kernel's ephemeral range
 * (32768 and up by default), where an outgoing connection of another
 * process cannot take it between this check and the rank's bind, and past
 * the harness's walk (20000-29499); spread by pid so that suites running
 * side by side start apart.
 */
static int free_port(void)
{
    static int next;
    for (int i = 0; i < 2000; i++) {
        int port = 29500 + (int)(((unsigned)getpid() * 131u + (unsigned)next++ * 7u) % 3000u);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;
        cr_assert(fd >= 0);
        ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok)
            return port;
    }
    cr_assert_fail("no free port in 29500-32499");
    return 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        buf[0] = '\0';
    fclose(f);
    return buf;
}

/* What rank wrote on stderr in dir (its rank%d.err); the caller frees it. */
static char *rank_err(const char *dir, int rank)
{
    char path[512];
    snprintf(path, sizeof path, "%s/rank%d.err", dir, rank);
    return slurp(path);
}

/* The test fails unless rank's stderr holds needle. */
static void expect_said(const char *dir, int rank, const char *needle)
{
    char *e = rank_err(dir, rank);
    cr_assert_not_null(strstr(e, needle), "rank %d said: %s", rank, e);
    free(e);
}

/* One rank of a job: cohort-worker train with the rank environment, its
 * stdout and stderr in dir/rankN.out and dir/rankN.err. */
/* The BACKEND the ranks of spawn_rank get (the GPU tests set nccl). */
static const char *rank_backend = "gloo";
/* WORKER_PER_NODE for them, which lets ranks of one node share memory;
 * 0: unset (Gloo between them, as before). */
static int rank_per_node;
/* Ranks 0 and 1 claim different nodes (COHORT_COMM_NODE_ID) when set. */
static int rank_split_first_pair;
/* OPENBLAS_CORETYPE for them, or NULL: OpenBLAS's own choice.  Its kernels
 * for AVX2 machines (Haswell, Zen) sum a matrix product in an order that
 * depends on the batch's shape, so one rank at batch 4B and four at B round
 * differently (1e-8 apart); SGD keeps that at 1e-8, but Adam, which scales
 * each update by the gradient's own size, turns it into 1e-2 within 30 steps
 * where a gradient all but cancels.  The equivalence tests compare Cohort's
 * arithmetic, so they pin the generic kernel, whose order does not move. */
static const char *rank_blas_core;

static pid_t spawn_rank(const char *dir, int rank, int world, int port, const char *const *args)
{
    char e[11][64], out[512], errp[512];
    char *envp[19], *argv[48];
    int n = 0, a = 0;
    posix_spawn_file_actions_t fa;
    pid_t pid;

    snprintf(e[0], 64, "MASTER_ADDR=127.0.0.1");
    snprintf(e[1], 64, "MASTER_PORT=%d", port);
    snprintf(e[2], 64, "WORLD_SIZE=%d", world);
    snprintf(e[3], 64, "RANK=%d", rank);
    snprintf(e[4], 64, "LOCAL_RANK=%d", rank_per_node ? rank % rank_per_node : rank);
    snprintf(e[5], 64, "BACKEND=%s", rank_backend);
    snprintf(e[6], 64, "PATH=/usr/bin:/bin");
    snprintf(e[7], 64, "OPENBLAS_NUM_THREADS=1");
    snprintf(e[8], 64, "WORKER_PER_NODE=%d", rank_per_node);
    snprintf(e[9], 64, "OPENBLAS_CORETYPE=%s", rank_blas_core ? rank_blas_core : "");
    for (int i = 0; i < 8; i++)
        envp[n++] = e[i];
    if (rank_per_node)
        envp[n++] = e[8];
    if (rank_blas_core)
        envp[n++] = e[9];
    snprintf(e[10], 64, "COHORT_COMM_NODE_ID=node-%d", rank == 1 ? 1 : 0);
    if (rank_split_first_pair)
        envp[n++] = e[10];
    /* the sanitizer options of the test run reach the worker too, and a
     * roll call a test set (it was never passed on: a 2 s roll call made
     * a_rank_slower_than_the_timeout... fail on a loaded machine) */
    for (char **v = environ; *v && n < 18; v++)
        if (!strncmp(*v, "ASAN_OPTIONS=", 13) || !strncmp(*v, "UBSAN_OPTIONS=", 14) ||
            !strncmp(*v, "LSAN_OPTIONS=", 13) || !strncmp(*v, "COHORT_ROLL_CALL_MS=", 20))
            envp[n++] = *v;
    envp[n] = NULL;

    argv[a++] = (char *)COHORT_WORKER_BIN;
    argv[a++] = (char *)"train";
    for (int i = 0; args[i] && a < 46; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;

    snprintf(out, sizeof out, "%s/rank%d.out", dir, rank);
    snprintf(errp, sizeof errp, "%s/rank%d.err", dir, rank);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_eq(posix_spawn(&pid, COHORT_WORKER_BIN, &fa, NULL, argv, envp), 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

/* Waits for pid up to `secs`; returns its exit status, 128+signal, or -1 on
 * timeout (the process is then killed). */
static int wait_exit(pid_t pid, double secs)
{
    double end = now_s() + secs;
    int st;
    while (now_s() < end) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* Runs a job of `world` ranks to the end; every rank must exit 0. */
static void run_job(const char *dir, int world, const char *const *args)
{
    pid_t pids[8];
    int port = free_port();
    for (int r = 0; r < world; r++)
        pids[r] = spawn_rank(dir, r, world, port, args);
    for (int r = 0; r < world; r++) {
        int st = wait_exit(pids[r], 240);
        if (st != 0) {
            char *e = rank_err(dir, r);
            cr_log_error("rank %d exited %d: %s", r, st, e);
            free(e);
        }
        cr_assert_eq(st, 0, "rank %d of %d failed", r, world);
    }
}

static float *read_floats(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    float *v;
    long len;
    cr_assert_not_null(f, "%s missing", path);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    v = malloc((size_t)len);
    cr_assert_eq(fread(v, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len / sizeof(float);
    return v;
}

/* ||a - b|| / ||a|| */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)a[i] * a[i];
    }
    return sqrt(num) / sqrt(den);
}

static void mkdata(const char *dir, int ntrain, int ntest, int gz)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s mkdata %s --train %d --test %d %s >/dev/null", COHORT_WORKER_BIN,
             dir, ntrain, ntest, gz ? "--gzip" : "");
    cr_assert_eq(system(cmd), 0);
}

/* The accuracy a rank-0 output printed for `epoch` (or the evaluation). */
static double printed_accuracy(const char *out, const char *after)
{
    const char *p = strstr(out, after);
    cr_assert_not_null(p, "no '%s' in output:\n%s", after, out);
    p = strstr(p, "accuracy ");
    cr_assert_not_null(p);
    return atof(p + 9);
}

static void rmrf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* ---- the store ---------------------------------------------------------- */

Test(store, set_get_wait_add_between_clients)
{
    comm_store_server *s;
    comm_store *a, *b;
    char err[256];
    void *v;
    size_t n;
    int64_t r;

    cr_assert_eq(comm_store_serve(0, NULL, &s, err, sizeof err), 0, "%s", err);
    int port = comm_store_server_port(s);
    cr_assert_eq(comm_store_connect("127.0.0.1", port, 2000, &a, err, sizeof err), 0);
    cr_assert_eq(comm_store_connect("127.0.0.1", port, 2000, &b, err, sizeof err), 0);

    cr_assert_eq(comm_store_set(a, "rank/0", "hello", 5), 0);
    cr_assert_eq(comm_store_get(b, "rank/0", 1000, &v, &n), 0, "%s", comm_store_errmsg(b));
    cr_assert_eq(n, 5);
    cr_assert_eq(memcmp(v, "hello", 5), 0);
    free(v);

    /* add is atomic across clients */
    cr_assert_eq(comm_store_add(a, "count", 3, &r), 0);
    cr_assert_eq(r, 3);
    cr_assert_eq(comm_store_add(b, "count", 4, &r), 0);
    cr_assert_eq(r, 7);

    /* a wait that nobody answers times out, and says so */
    double t0 = now_s();
    cr_assert_eq(comm_store_wait(b, "never", 300), -1);
    cr_assert_geq(now_s() - t0, 0.25);
    cr_assert_not_null(strstr(comm_store_errmsg(b), "timed out"), "%s", comm_store_errmsg(b));
    /* the connection still works after a timeout */
    cr_assert_eq(comm_store_set(b, "after", "x", 1), 0);

    comm_store_close(a);
    comm_store_close(b);
    comm_store_server_stop(s);
}

/* A stranger on the node's network (another tenant's job) reaches the
 * port of an attempt's store: without the attempt's secret it reads
 * nothing, writes nothing and waits on nothing, whether it presents no
 * secret, a wrong one, or one that differs in its last byte only. */
Test(store, a_store_with_a_secret_admits_only_clients_that_present_it)
{
    static const char secret[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    comm_store_server *s;
    comm_store *rank, *none, *wrong, *near;
    char err[256], close_to[sizeof secret];
    void *v;
    size_t n;
    int64_t r;

    cr_assert_eq(comm_store_serve(0, secret, &s, err, sizeof err), 0, "%s", err);
    int port = comm_store_server_port(s);
    cr_assert_eq(comm_store_connect("127.0.0.1", port, 2000, &rank, err, sizeof err), 0);
    cr_assert_eq(comm_store_auth(rank, secret), 0, "%s", comm_store_errmsg(rank));
    cr_assert_eq(comm_store_set(rank, "rank/0", "10.0.0.1:4000", 13), 0);

    cr_assert_eq(comm_store_connect("127.0.0.1", port, 2000, &none, err, sizeof err), 0);
    cr_expect_eq(comm_store_get(none, "rank/0", 100, &v, &n), -1, "read without a secret");
    cr_expect_eq(comm_store_set(none, "rank/0", "6.6.6.6:1", 9), -1);
    cr_expect_eq(comm_store_add(none, "count", 1, &r), -1);

    cr_assert_eq(comm_store_connect("127.0.0.1", port, 2000, &wrong, err, sizeof err), 0);
    cr_expect_eq(comm_store_auth(wrong, "guess"), -1);
    cr_expect(strstr(comm_store_errmsg(wrong), "refused this rank's secret") != NULL, "%s",
              comm_store_errmsg(wrong));
    cr_expect_eq(comm_store_set(wrong, "rank/0", "6.6.6.6:1", 9), -1);

    memcpy(close_to, secret, sizeof secret);
    close_to[sizeof secret - 2] = 'e';
    cr_assert_eq(comm_store_connect("127.0.0.1", port, 2000, &near, err, sizeof err), 0);
    cr_expect_eq(comm_store_auth(near, close_to), -1, "a secret one byte off was taken");

    /* The rank's record is its own, and the stranger's counter never was. */
    cr_assert_eq(comm_store_get(rank, "rank/0", 1000, &v, &n), 0, "%s", comm_store_errmsg(rank));
    cr_expect(n == 13 && memcmp(v, "10.0.0.1:4000", 13) == 0, "the record was forged");
    free(v);
    cr_expect_eq(comm_store_add(rank, "count", 1, &r), 0);
    cr_expect_eq(r, 1, "a stranger's add counted");
    comm_store_close(rank);
    comm_store_close(none);
    comm_store_close(wrong);
    comm_store_close(near);
    comm_store_server_stop(s);
}

Test(store, wait_returns_when_another_client_sets)
{
    comm_store_server *s;
    comm_store *a;
    char err[256];
    cr_assert_eq(comm_store_serve(0, NULL, &s, err, sizeof err), 0);
    int port = comm_store_server_port(s);
    pid_t p = fork();
    if (p == 0) {
        comm_store *c;
        usleep(200000);
        if (comm_store_connect("127.0.0.1", port, 2000, &c, err, sizeof err) < 0 ||
            comm_store_set(c, "late", "1", 1) < 0)
            _exit(1);
        comm_store_close(c);
        _exit(0);
    }
    cr_assert_eq(comm_store_connect("127.0.0.1", port, 2000, &a, err, sizeof err), 0);
    double t0 = now_s();
    cr_assert_eq(comm_store_wait(a, "late", 5000), 0, "%s", comm_store_errmsg(a));
    cr_assert_lt(now_s() - t0, 3.0);
    cr_assert_eq(wait_exit(p, 5), 0);
    comm_store_close(a);
    comm_store_server_stop(s);
}

static int raw_connect(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = { 2, 0 };
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* 1 when the server closed fd (EOF), 0 when it is still open. */
static int closed_by_peer(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

Test(store, garbage_and_oversized_frames_close_only_their_connection)
{
    comm_store_server *s;
    comm_store *good;
    char err[256];
    void *v;
    size_t n;
    cr_assert_eq(comm_store_serve(0, NULL, &s, err, sizeof err), 0);
    int port = comm_store_server_port(s);
    cr_assert_eq(comm_store_connect("127.0.0.1", port, 2000, &good, err, sizeof err), 0);
    cr_assert_eq(comm_store_set(good, "k", "v", 1), 0);

    /* a length far beyond any frame: closed before anything is allocated */
    int fd = raw_connect(port);
    uint8_t huge[4] = { 0x7f, 0xff, 0xff, 0xff };
    cr_assert_eq(send(fd, huge, 4, 0), 4);
    cr_assert(closed_by_peer(fd));
    close(fd);

    /* random bytes */
    fd = raw_connect(port);
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    junk[0] = 0; junk[1] = 0; junk[2] = 0; junk[3] = 40;  /* a plausible length */
    junk[4] = 99;                                         /* no such op */
    cr_assert_eq(send(fd, junk, 44, 0), 44);
    cr_assert(closed_by_peer(fd));
    close(fd);

    /* a key longer than the limit, with an honest frame length */
    fd = raw_connect(port);
    size_t klen = COMM_STORE_MAX_KEY + 1;
    uint8_t *fr = calloc(1, 8 + klen);
    uint32_t body = (uint32_t)(4 + klen);
    fr[0] = (uint8_t)(body >> 24); fr[1] = (uint8_t)(body >> 16);
    fr[2] = (uint8_t)(body >> 8);  fr[3] = (uint8_t)body;
    fr[4] = COMM_STORE_SET;
    fr[6] = (uint8_t)(klen >> 8);  fr[7] = (uint8_t)klen;
    memset(fr + 8, 'k', klen);
    cr_assert_eq(send(fd, fr, 8 + klen, 0), (ssize_t)(8 + klen));
    cr_assert(closed_by_peer(fd));
    close(fd);
    free(fr);

    /* the client side refuses to send such a key at all */
    char longkey[COMM_STORE_MAX_KEY + 2];
    memset(longkey, 'x', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    comm_store *other;
    cr_assert_eq(comm_store_connect("127.0.0.1", port, 2000, &other, err, sizeof err), 0);
    cr_assert_eq(comm_store_set(other, longkey, "v", 1), -1);
    cr_assert_not_null(strstr(comm_store_errmsg(other), "key of"));
    comm_store_close(other);

    /* a half-sent frame from a client that then vanishes */
    fd = raw_connect(port);
    cr_assert_eq(send(fd, "\0\0\0\x20\x01", 5, 0), 5);
    close(fd);

    /* the well-behaved client never noticed */
    cr_assert_eq(comm_store_get(good, "k", 1000, &v, &n), 0, "%s", comm_store_errmsg(good));
    cr_assert_eq(n, 1);
    free(v);
    comm_store_close(good);
    comm_store_server_stop(s);
}

Test(store, connect_gives_up_after_the_deadline)
{
    comm_store *c;
    char err[512];
    int port = free_port();
    double t0 = now_s();
    cr_assert_eq(comm_store_connect("127.0.0.1", port, 500, &c, err, sizeof err), -1);
    double dt = now_s() - t0;
    cr_assert_geq(dt, 0.4);
    cr_assert_lt(dt, 3.0);
    cr_assert_not_null(strstr(err, "rank 0"), "%s", err);
}

/* ---- the model ---------------------------------------------------------- */

/* Mean loss of the batch already in the input, without touching grads. */
static double loss_at(struct mlp *m, const uint8_t *labels, int batch)
{
    double correct = 0, sum = 0;
    mlp_evaluate(m, labels, batch, &correct, &sum);
    return sum / batch;
}

/* The smallest |pre-activation| of the hidden layers over the batch in the
 * input, computed in double by plain loops (a reference forward pass). */
static double min_hidden_margin(const struct mlp *m, const float *x, int batch)
{
    double cur[64], next[64], margin = 1e9;
    for (int r = 0; r < batch; r++) {
        for (int i = 0; i < m->sizes[0]; i++)
            cur[i] = x[r * m->sizes[0] + i];
        for (int l = 0; l + 1 < m->nlayers; l++) {
            const float *w = m->params + m->w_off[l], *b = m->params + m->b_off[l];
            for (int o = 0; o < m->sizes[l + 1]; o++) {
                double z = b[o];
                for (int i = 0; i < m->sizes[l]; i++)
                    z += (double)w[o * m->sizes[l] + i] * cur[i];
                margin = fabs(z) < margin ? fabs(z) : margin;
                next[o] = z > 0 ? z : 0;
            }
            memcpy(cur, next, sizeof next);
        }
    }
    return margin;
}

Test(model, backprop_matches_finite_differences)
{
    int sizes[] = { 7, 6, 5, 4 };
    struct mlp m;
    char err[128];
    uint8_t labels[5] = { 0, 3, 1, 2, 3 };
    const int B = 5;
    cr_assert_eq(mlp_init(&m, sizes, 4, B, 0, err, sizeof err), 0);
    float *x = mlp_input(&m);
    for (int i = 0; i < B * 7; i++)
        x[i] = (float)sin(i * 1.3) * 2.0f;
    /* Finite differences mean nothing across a ReLU kink: take the first
     * initialisation whose hidden pre-activations all stay 0.05 from zero,
     * far more than a step of eps moves them. */
    uint64_t seed = 0;
    do
        mlp_init_params(&m, ++seed);
    while (min_hidden_margin(&m, x, B) < 0.05 && seed < 10000);
    cr_assert_lt(seed, 10000, "no kink-free initialisation found");
    float *xcopy = malloc(B * 7 * sizeof(float));
    memcpy(xcopy, x, B * 7 * sizeof(float));

    mlp_train_step(&m, labels, B);
    float *g = malloc(m.nparams * sizeof(float));
    memcpy(g, m.grads, m.nparams * sizeof(float));

    /* A ReLU kink within eps of a pre-activation makes a finite difference
     * meaningless there: such a parameter shows as one-sided differences
     * that disagree, and is skipped (and counted). */
    memcpy(x, xcopy, B * 7 * sizeof(float));
    double base = loss_at(&m, labels, B);
    int checked = 0, kinks = 0;
    for (size_t i = 0; i < m.nparams; i++) {
        const float eps = 1e-3f;
        float keep = m.params[i];
        memcpy(x, xcopy, B * 7 * sizeof(float));
        m.params[i] = keep + eps;
        double up = loss_at(&m, labels, B);
        memcpy(x, xcopy, B * 7 * sizeof(float));
        m.params[i] = keep - eps;
        double down = loss_at(&m, labels, B);
        m.params[i] = keep;
        double fwd = (up - base) / eps, bwd = (base - down) / eps, fd = (up - down) / (2 * eps);
        if (fabs(fwd - bwd) > 1e-3 + 0.05 * fabs(fd)) {
            kinks++;
            continue;
        }
        double tol = 5e-4 + 1e-2 * fabs(fd);
        cr_expect(fabs(fd - g[i]) <= tol, "param %zu: backprop %g, finite difference %g", i,
                  (double)g[i], fd);
        checked += fabs(fd) > 1e-4;
    }
    /* most gradients are checked and not trivially zero */
    cr_assert_lt(kinks, (int)m.nparams / 10, "%d of %zu parameters sit on a kink", kinks,
                 m.nparams);
    cr_assert_gt(checked, (int)m.nparams / 2);
    free(g);
    free(xcopy);
    mlp_free(&m);
}

Test(model, sgd_and_adam_follow_torch_update_rules)
{
    struct optim o;
    float p[2] = { 1.0f, -2.0f }, g[2] = { 0.5f, -1.0f };
    cr_assert_eq(optim_init(&o, OPTIM_SGD, 2, 0.1f, 0.9f), 0);
    optim_step(&o, p, g);               /* buf = g */
    cr_assert_float_eq(p[0], 1.0f - 0.05f, 1e-7);
    optim_step(&o, p, g);               /* buf = 0.9 g + g */
    cr_assert_float_eq(p[0], 0.95f - 0.1f * 0.95f, 1e-6);
    optim_free(&o);

    float q[1] = { 1.0f }, h[1] = { 0.3f };
    cr_assert_eq(optim_init(&o, OPTIM_ADAM, 1, 0.01f, 0), 0);
    optim_step(&o, q, h);               /* first Adam step moves by lr * sign(g) */
    cr_assert_float_eq(q[0], 1.0f - 0.01f, 1e-6);
    optim_free(&o);
}

Test(model, sampler_shards_are_disjoint_padded_and_epoch_seeded)
{
    const size_t n = 103;
    const int world = 4;
    size_t per = sampler_len(n, world);
    cr_assert_eq(per, 26);
    int seen[103] = { 0 };
    uint32_t a[26], b[26];
    for (int r = 0; r < world; r++) {
        cr_assert_eq(sampler_indices(a, n, world, r, 5, 1, 1), 0);
        cr_assert_eq(sampler_indices(b, n, world, r, 5, 1, 1), 0);
        cr_assert_eq(memcmp(a, b, sizeof a), 0, "same seed and epoch, same shard");
        for (size_t i = 0; i < per; i++)
            seen[a[i]]++;
    }
    int twice = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert_geq(seen[i], 1, "index %zu never visited", i);
        twice += seen[i] - 1;
    }
    cr_assert_eq(twice, (int)(per * world - n), "only the padding repeats");
    cr_assert_eq(sampler_indices(b, n, world, 0, 5, 2, 1), 0);
    cr_assert_eq(sampler_indices(a, n, world, 0, 5, 1, 1), 0);
    cr_assert_neq(memcmp(a, b, sizeof a), 0, "another epoch, another order");
}

/* ---- data files --------------------------------------------------------- */

Test(data, reads_flat_gzip_and_torchvision_layouts)
{
    char dir[64], sub[128], cmd[512], err[512];
    struct dataset d;
    tmpdir(dir, sizeof dir);
    mkdata(dir, 50, 20, 0);
    cr_assert_eq(data_load(dir, 1, 10, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d.n, 50);
    cr_assert_eq(d.rows * d.cols, 784);
    data_free(&d);

    snprintf(sub, sizeof sub, "%s/gz", dir);
    mkdata(sub, 30, 10, 1);
    cr_assert_eq(data_load(sub, 0, 10, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d.n, 10);
    data_free(&d);

    snprintf(cmd, sizeof cmd, "mkdir -p %s/tv/MNIST/raw && mv %s/gz/*.gz %s/tv/MNIST/raw/",
             dir, dir, dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(sub, sizeof sub, "%s/tv", dir);
    cr_assert_eq(data_load(sub, 1, 10, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d.n, 30);
    data_free(&d);
    rmrf(dir);
}

Test(data, malformed_files_get_clear_errors)
{
    char dir[64], path[256], cmd[512], err[512];
    struct dataset d;
    tmpdir(dir, sizeof dir);
    mkdata(dir, 40, 10, 0);

    /* truncated pixels */
    snprintf(cmd, sizeof cmd, "truncate -s 3000 %s/train-images-idx3-ubyte", dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(data_load(dir, 1, 10, &d, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "truncated"), "%s", err);

    /* not an IDX file at all */
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte", dir);
    FILE *f = fopen(path, "wb");
    fputs("this is not a data set, just text that goes on for a while", f);
    fclose(f);
    cr_assert_eq(data_load(dir, 0, 10, &d, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "not an IDX file"), "%s", err);

    /* a damaged gzip stream */
    mkdata(dir, 40, 10, 1);
    snprintf(cmd, sizeof cmd, "rm %s/train-*-ubyte && printf 'XXXXXXXXXXXX' | dd of=%s/"
             "train-images-idx3-ubyte.gz bs=1 seek=40 conv=notrunc status=none", dir, dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(data_load(dir, 1, 10, &d, err, sizeof err), -1);
    cr_assert(strstr(err, "damaged") || strstr(err, "truncated"), "%s", err);

    /* labels beyond the model's classes */
    mkdata(dir, 40, 10, 0);
    cr_assert_eq(data_load(dir, 1, 3, &d, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "classes"), "%s", err);

    /* no data set there at all */
    cr_assert_eq(data_load("/nonexistent", 1, 10, &d, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "MNIST layout"), "%s", err);

    /* the trainer reports it and exits non-zero */
    snprintf(cmd, sizeof cmd, "truncate -s 100 %s/train-labels-idx1-ubyte", dir);
    cr_assert_eq(system(cmd), 0);
    const char *args[] = { "--data", dir, "--no-checkpoint", NULL };
    pid_t p = spawn_rank(dir, 0, 1, free_port(), args);
    cr_assert_eq(wait_exit(p, 30), 1);
    expect_said(dir, 0, "train-labels-idx1-ubyte");
    rmrf(dir);
}

/* ---- data-parallel equivalence ------------------------------------------ */

/* The test fails unless rank 0 said its ranks met over transport. */
static void said_over(const char *dir, const char *transport)
{
    char path[512], want[64];
    snprintf(path, sizeof path, "%s/rank0.out", dir);
    snprintf(want, sizeof want, " ranks over %s,", transport);
    char *o = slurp(path);
    cr_assert_not_null(strstr(o, want), "rank 0 did not say%s: %s", want, o);
    free(o);
}

/* `world` ranks with per-rank batch B against one rank with batch world*B,
 * over the same samples for `steps` steps. */
static void check_equivalence(int world, const char *optimizer)
{
    char dir[64], data[128], one[160], many[160], b1[16], bw[16];
    const int B = 16, steps = 30;
    tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/data", dir);
    mkdata(data, 2000, 200, 0);
    snprintf(one, sizeof one, "%s/one.params", dir);
    snprintf(many, sizeof many, "%s/many.params", dir);
    snprintf(b1, sizeof b1, "%d", B * world);
    snprintf(bw, sizeof bw, "%d", B);
    const char *a1[] = { "--data", data, "--no-checkpoint", "--optimizer", optimizer,
                         "--lr", "0.01", "--batch-size", b1, "--max-steps", "30",
                         "--dump-params", one, "--log-every", "0", NULL };
    const char *aw[] = { "--data", data, "--no-checkpoint", "--optimizer", optimizer,
                         "--lr", "0.01", "--batch-size", bw, "--max-steps", "30",
                         "--dump-params", many, "--log-every", "0", NULL };
    (void)steps;
    rank_blas_core = "Prescott";
    run_job(dir, 1, a1);
    run_job(dir, world, aw);
    rank_blas_core = NULL;
    said_over(dir, rank_per_node == world ? "shm" : rank_per_node > 1 ? "shm+gloo" : "gloo");
    size_t n1, nw;
    float *p1 = read_floats(one, &n1), *pw = read_floats(many, &nw);
    cr_assert_eq(n1, nw);
    cr_assert_eq(n1, (size_t)(784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10));
    double rd = rel_diff(p1, pw, n1);
    cr_log_info("%d ranks, %s: relative difference %.3g", world, optimizer, rd);
    cr_assert_lt(rd, 1e-5, "%d ranks with %s: relative difference %g", world, optimizer, rd);

    /* and the parameters did move: the comparison is not of two initial states */
    char init[160];
    snprintf(init, sizeof init, "%s/init.params", dir);
    const char *a0[] = { "--data", data, "--no-checkpoint", "--max-steps", "1", "--lr",
                         "1e-12", "--dump-params", init, "--log-every", "0", NULL };
    run_job(dir, 1, a0);
    size_t n0;
    float *p0 = read_floats(init, &n0);
    cr_assert_gt(rel_diff(p0, p1, n0), 1e-3);
    free(p0);
    free(p1);
    free(pw);
    rmrf(dir);
}

Test(parallel, two_ranks_equal_one_rank_with_double_batch_sgd, .timeout = 120)
{
    check_equivalence(2, "sgd");
}

Test(parallel, two_ranks_equal_one_rank_with_double_batch_adam, .timeout = 120)
{
    check_equivalence(2, "adam");
}

Test(parallel, four_ranks_equal_one_rank_with_four_times_the_batch, .timeout = 180)
{
    check_equivalence(4, "sgd");
    check_equivalence(4, "adam");
}

/* ---- ranks of one node, through shared memory ---------------------------- */

static void lose_rank(int world, int victim, int sig);

/* The same 30 steps of two ranks over Gloo and over shared memory give the
 * same parameters, bit for bit: each sums a + b (two ranks), then halves. */
Test(shm, two_ranks_over_shared_memory_equal_gloo_bit_for_bit, .timeout = 120)
{
    char dir[64], data[128], viagloo[160], viashm[160];
    tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/data", dir);
    mkdata(data, 2000, 200, 0);
    snprintf(viagloo, sizeof viagloo, "%s/gloo.params", dir);
    snprintf(viashm, sizeof viashm, "%s/shm.params", dir);
    for (int shm = 0; shm <= 1; shm++) {
        const char *args[] = { "--data", data, "--no-checkpoint", "--optimizer", "adam",
                               "--lr", "0.01", "--batch-size", "16", "--max-steps", "30",
                               "--dump-params", shm ? viashm : viagloo, "--log-every", "0", NULL };
        rank_per_node = shm ? 2 : 0;
        run_job(dir, 2, args);
        said_over(dir, shm ? "shm" : "gloo");
    }
    rank_per_node = 0;
    size_t na, nb;
    float *a = read_floats(viagloo, &na), *b = read_floats(viashm, &nb);
    cr_assert_eq(na, nb);
    cr_expect_eq(memcmp(a, b, na * sizeof *a), 0, "shared memory and Gloo differ: %g",
                 rel_diff(a, b, na));
    free(a);
    free(b);
    rmrf(dir);
}

Test(shm, four_ranks_over_shared_memory_equal_one_rank_with_four_times_the_batch, .timeout = 180)
{
    rank_per_node = 4;
    check_equivalence(4, "sgd");
    rank_per_node = 0;
}

/* Two ranks, with WORKER_PER_NODE = per and (split) ranks 0 and 1 naming
 * different nodes, train a few steps; rank 0 must say it met over want. */
static void expect_transport(int per, int split, const char *want)
{
    char dir[64], data[128];
    tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/data", dir);
    mkdata(data, 500, 100, 0);
    const char *args[] = { "--data", data, "--no-checkpoint", "--max-steps", "5",
                           "--log-every", "0", NULL };
    rank_per_node = per;
    rank_split_first_pair = split;
    run_job(dir, 2, args);
    rank_split_first_pair = 0;
    rank_per_node = 0;
    said_over(dir, want);
    rmrf(dir);
}

/* WORKER_PER_NODE smaller than the world, one rank a node: Gloo. */
Test(shm, a_world_larger_than_its_node_stays_on_gloo, .timeout = 120)
{
    expect_transport(1, 0, "gloo");
}

/* Two nodes of two ranks (played on one machine): shared memory within
 * each, Gloo between their leaders; the same numbers as one rank. */
Test(shm, two_nodes_of_two_ranks_equal_one_rank_with_four_times_the_batch, .timeout = 180)
{
    rank_per_node = 2;
    check_equivalence(4, "sgd");
    check_equivalence(4, "adam");
    rank_per_node = 0;
}

/* Ranks that say they share a node but do not (their node ids differ):
 * Gloo, never a shared memory that one of them cannot reach. */
Test(shm, ranks_on_different_nodes_never_share_memory, .timeout = 120)
{
    expect_transport(2, 1, "gloo");
}

/* A rank lost on one node fails the ranks of the other too. */
Test(shm, killing_a_rank_of_one_node_fails_both_nodes_in_bounded_time, .timeout = 120)
{
    rank_per_node = 2;
    lose_rank(4, 3, SIGKILL);
    rank_per_node = 0;
}

static void lose_local_rank(int victim, int sig)
{
    rank_per_node = 3;
    lose_rank(3, victim, sig);
    rank_per_node = 0;
}

Test(shm, killing_one_of_three_local_ranks_fails_the_others_in_bounded_time, .timeout = 120)
{
    lose_local_rank(2, SIGKILL);
}

/* Local rank 0 holds the shared memory's lifelines and the store. */
Test(shm, killing_the_rank_that_made_the_memory_fails_the_others_in_bounded_time, .timeout = 120)
{
    lose_local_rank(0, SIGKILL);
}

/* A stopped rank closes nothing: the others give up at the timeout. */
Test(shm, a_silent_local_rank_fails_the_others_at_the_timeout, .timeout = 120)
{
    lose_local_rank(1, SIGSTOP);
}

/* A process of another tenant on a host-network node can read the abstract
 * socket's name in /proc/net/unix; without the token (in the store, which
 * asks for the attempt's secret) it gets no memory, and the ranks go on. */
struct member {
    int index, port;
    int rc;
    char err[256];
};

static void *shm_member(void *arg)
{
    struct member *m = arg;
    comm_store *st = NULL;
    comm_shm *s = NULL;
    float v[4] = {1.0f + (float)m->index, 2, 3, 4};
    m->rc = -1;
    if (comm_store_connect("127.0.0.1", m->port, 5000, &st, m->err, sizeof m->err) == 0 &&
        comm_shm_open(m->index, 2, st, "t/shm", 0, 5000, &s, m->err, sizeof m->err) == 0 &&
        comm_shm_allreduce(s, v, 4, 1.0f) == 0)
        m->rc = v[0] == 3.0f && v[3] == 8.0f ? 0 : -2;
    else if (s)
        snprintf(m->err, sizeof m->err, "%s", comm_shm_errmsg(s));
    comm_shm_close(s);
    comm_store_close(st);
    return NULL;
}

Test(shm, a_stranger_without_the_token_gets_no_memory)
{
    comm_store_server *srv;
    char err[256];
    int port = free_port();
    cr_assert_eq(comm_store_serve(port, NULL, &srv, err, sizeof err), 0, "%s", err);
    struct member lead = {0, port, 0, ""}, other = {1, port, 0, ""};
    pthread_t t0, t1;
    pthread_create(&t0, NULL, shm_member, &lead);
    /* the name, as a stranger finds it; then a wrong token */
    comm_store *st;
    void *v = NULL;
    size_t n = 0;
    cr_assert_eq(comm_store_connect("127.0.0.1", port, 5000, &st, err, sizeof err), 0);
    cr_assert_eq(comm_store_get(st, "t/shm", 5000, &v, &n), 0);
    char name[160];
    snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), (char *)v);
    name[strcspn(name, " ")] = '\0'; /* the name, then the token */
    free(v);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path + 1, name, strlen(name));
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert_eq(connect(c, (struct sockaddr *)&a,
                         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))), 0);
    char hello[48];
    memset(hello, 'x', sizeof hello);
    snprintf(hello + 32, 16, " 1");
    cr_assert_eq(send(c, hello, 47, 0), 47);
    char one, ctl[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {&one, 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                        .msg_controllen = sizeof ctl};
    ssize_t got = recvmsg(c, &mh, 0);
    cr_expect_eq(got, 0, "the stranger got an answer");
    cr_expect_null(CMSG_FIRSTHDR(&mh) && mh.msg_controllen ? CMSG_FIRSTHDR(&mh) : NULL,
                   "the stranger got a descriptor");
    close(c);
    /* the real member still joins, and the sum is right */
    pthread_create(&t1, NULL, shm_member, &other);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    cr_expect_eq(lead.rc, 0, "%s", lead.err);
    cr_expect_eq(other.rc, 0, "%s", other.err);
    comm_store_close(st);
    comm_store_server_stop(srv);
}

/* ---- convergence, evaluation, resume ------------------------------------ */

Test(train, two_ranks_converge_and_evaluation_matches_one_rank, .timeout = 240)
{
    char dir[64], data[128], ck[128], path[256];
    tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    mkdata(data, 10000, 2000, 1);
    const char *args[] = { "--data", data, "--checkpoint-dir", ck, "--epochs", "3",
                           "--lr", "0.01", "--log-every", "50", NULL };
    run_job(dir, 2, args);
    snprintf(path, sizeof path, "%s/rank0.out", dir);
    char *out = slurp(path);
    double acc = printed_accuracy(out, "epoch 3 done");
    cr_assert_gt(acc, 90.0, "accuracy %.2f%% after 3 epochs:\n%s", acc, out);
    cr_assert_not_null(strstr(out, "COHORT_METRIC {\"epoch\":3,"), "%s", out);
    cr_assert_not_null(strstr(out, "\"accuracy\":"), "%s", out);
    /* rank 1 prints no progress: one line per job, not per rank */
    snprintf(path, sizeof path, "%s/rank1.out", dir);
    char *out1 = slurp(path);
    cr_assert_null(strstr(out1, "COHORT_METRIC"), "%s", out1);
    free(out1);

    /* The same model evaluated by 1 rank and by 2 ranks prints the same
     * figure, and the figure the training run printed. */
    const char *ev[] = { "--data", data, "--checkpoint-dir", ck, "--eval-only", NULL };
    run_job(dir, 1, ev);
    snprintf(path, sizeof path, "%s/rank0.out", dir);
    char *o1 = slurp(path);
    double a1 = printed_accuracy(o1, "evaluation of");
    run_job(dir, 2, ev);
    char *o2 = slurp(path);
    double a2 = printed_accuracy(o2, "evaluation of");
    cr_assert_not_null(strstr(o2, "epoch-000003.ckpt"), "%s", o2);
    cr_assert_float_eq(a1, a2, 1e-9, "1 rank %.2f%%, 2 ranks %.2f%%", a1, a2);
    cr_assert_float_eq(a1, acc, 1e-9, "evaluation %.2f%%, training printed %.2f%%", a1, acc);
    free(o1);
    free(o2);
    free(out);
    rmrf(dir);
}

Test(train, killed_after_epoch_one_resumes_at_epoch_two_with_identical_result, .timeout = 300)
{
    char dir[64], data[128], ck1[128], ck2[128], full[160], resumed[160], first[256], path[256];
    struct stat st;
    tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(ck1, sizeof ck1, "%s/ck-uninterrupted", dir);
    snprintf(ck2, sizeof ck2, "%s/ck-killed", dir);
    snprintf(full, sizeof full, "%s/full.params", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed.params", dir);
    mkdata(data, 6000, 500, 0);
    const char *a1[] = { "--data", data, "--checkpoint-dir", ck1, "--epochs", "3",
                         "--optimizer", "adam", "--lr", "0.001", "--batch-size", "8",
                         "--dump-params", full, "--log-every", "0", NULL };
    run_job(dir, 2, a1);

    /* Same job, killed with SIGKILL as soon as epoch 1's checkpoint exists. */
    const char *a2[] = { "--data", data, "--checkpoint-dir", ck2, "--epochs", "3",
                         "--optimizer", "adam", "--lr", "0.001", "--batch-size", "8",
                         "--dump-params", resumed, "--log-every", "0", NULL };
    int port = free_port();
    pid_t p0 = spawn_rank(dir, 0, 2, port, a2), p1 = spawn_rank(dir, 1, 2, port, a2);
    snprintf(first, sizeof first, "%s/epoch-000001.ckpt", ck2);
    double end = now_s() + 120;
    while (stat(first, &st) != 0 && now_s() < end)
        usleep(2000);
    kill(p0, SIGKILL);
    kill(p1, SIGKILL);
    wait_exit(p0, 10);
    wait_exit(p1, 10);
    cr_assert_eq(stat(first, &st), 0, "epoch 1 never finished");
    snprintf(path, sizeof path, "%s/epoch-000003.ckpt", ck2);
    cr_assert_neq(stat(path, &st), 0, "the job finished before it could be killed");
    cr_assert_neq(stat(resumed, &st), 0);

    /* Restarted: it picks up where the checkpoint left it. */
    run_job(dir, 2, a2);
    snprintf(path, sizeof path, "%s/rank0.out", dir);
    char *out = slurp(path);
    cr_assert(strstr(out, "1 epoch done") || strstr(out, "2 epochs done"), "%s", out);
    if (strstr(out, "1 epoch done"))
        cr_assert_not_null(strstr(out, "epoch 2 done"), "%s", out);
    cr_assert_null(strstr(out, "epoch 1 done"), "epoch 1 ran again:\n%s", out);
    size_t n1, n2;
    float *pf = read_floats(full, &n1), *pr = read_floats(resumed, &n2);
    cr_assert_eq(n1, n2);
    double rd = rel_diff(pf, pr, n1);
    cr_assert_lt(rd, 1e-6, "resumed run differs from the uninterrupted one by %g", rd);
    free(pf);
    free(pr);
    free(out);
    rmrf(dir);
}

/* ---- failures ------------------------------------------------------------ */

/* Waits until rank 0 of the job in dir has reported step 40. */
static void wait_mid_epoch(const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/rank0.out", dir);
    double end = now_s() + 60;
    for (;;) {
        char *o = slurp(path);
        int going = strstr(o, "step 40/") != NULL;
        free(o);
        if (going)
            return;
        cr_assert_lt(now_s(), end, "rank 0 never reached step 40");
        usleep(20000);
    }
}

/* Starts world ranks (pids in p) on a long job in a new dir, with a 10 s
 * timeout, and returns their MASTER_PORT once rank 0 is mid-epoch. */
static int start_long_job(char *dir, size_t dlen, int world, pid_t *p)
{
    char data[128];
    tmpdir(dir, dlen);
    snprintf(data, sizeof data, "%s/data", dir);
    mkdata(data, 20000, 100, 0);
    const char *args[] = { "--data", data, "--no-checkpoint", "--epochs", "50",
                           "--batch-size", "8", "--timeout", "10", "--log-every", "20", NULL };
    int port = free_port();
    for (int r = 0; r < world; r++)
        p[r] = spawn_rank(dir, r, world, port, args);
    wait_mid_epoch(dir);
    return port;
}

/* world ranks train; once rank 0 is mid-epoch rank `victim` gets sig
 * (SIGKILL: its sockets close; SIGSTOP: it goes silent).  Every other rank
 * exits non-zero within the 10 s timeout (plus the 2 s roll call), says
 * which collective failed, and names the victim as lost. */
static void lose_rank(int world, int victim, int sig)
{
    char dir[64];
    pid_t p[4];
    start_long_job(dir, sizeof dir, world, p);
    kill(p[victim], sig);
    double t0 = now_s();
    int st[4];
    for (int r = 0; r < world; r++)
        if (r != victim)
            st[r] = wait_exit(p[r], 30);
    double dt = now_s() - t0;
    kill(p[victim], SIGKILL);
    wait_exit(p[victim], 5);
    for (int r = 0; r < world; r++)
        if (r != victim)
            cr_assert(st[r] > 0 && st[r] < 128, "rank %d exit %d", r, st[r]);
    /* the 10 s timeout (SIGSTOP), the 2 s roll call, and slack for a loaded machine */
    cr_assert_lt(dt, 17.0, "survivors took %.1f s to fail", dt);
    for (int r = 0; r < world; r++) {
        if (r == victim)
            continue;
        char *e = rank_err(dir, r);
        char lost[32];
        snprintf(lost, sizeof lost, "lost: rank %d ", victim);
        cr_assert(strstr(e, "rank ") && strstr(e, "failed"), "rank %d said: %s", r, e);
        cr_assert(strstr(e, lost), "rank %d does not name rank %d as lost: %s", r, victim, e);
        const char *why = strstr(e, " failed: "); /* the backend's own reason, kept on it */
        cr_assert(why && why[9] && why[9] != ';', "rank %d gives no reason: %s", r, e);
        cr_log_info("rank %d after %.1f s: %s", r, dt, e);
        free(e);
    }
    rmrf(dir);
}

Test(failure, killing_one_of_three_ranks_fails_the_others_in_bounded_time, .timeout = 120)
{
    lose_rank(3, 2, SIGKILL);
}

/* Rank 0 also hosts the rendezvous store: losing it loses both at once. */
Test(failure, killing_rank_zero_the_store_host_fails_the_others_in_bounded_time, .timeout = 120)
{
    lose_rank(3, 0, SIGKILL);
}

/* Whether process pid ignores SIGPIPE (its SigIgn mask in /proc). */
static int ignores_sigpipe(pid_t pid)
{
    char path[64], line[128];
    unsigned long long mask = 0;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "SigIgn: %llx", &mask) == 1)
            break;
    fclose(f);
    return (int)(mask >> (SIGPIPE - 1) & 1);
}

/* A rank that only stalls past the timeout is not called lost: rank 1 is
 * stopped until rank 0 has failed and checked in with the store (the test
 * watches for that key), then resumed; it fails at once on the closed link,
 * answers the roll call (rank 0 waits up to 15 s for it), and
 * both say that no rank exited. */
Test(failure, a_rank_slower_than_the_timeout_is_not_called_lost, .timeout = 120)
{
    char dir[64], err[256];
    comm_store *watch = NULL;
    pid_t p[2];
    /* Rank 1 answers once it runs again, which on a loaded machine can take
     * more than the 2 s default: a roll call long enough that the test
     * measures the finding, not the scheduler. */
    setenv("COHORT_ROLL_CALL_MS", "15000", 1);
    int port = start_long_job(dir, sizeof dir, 2, p);
    cr_assert_eq(comm_store_connect("127.0.0.1", port, 2000, &watch, err, sizeof err), 0, "%s",
                 err);
    kill(p[1], SIGSTOP);
    /* Once resumed, rank 1 writes to links rank 0 has closed: with SIGPIPE
     * at its default it would die there without a word (seen: 1 run in 13
     * under ASan), and rank 0 would rightly call it lost. */
    cr_assert(ignores_sigpipe(p[1]), "rank 1 does not ignore SIGPIPE");
    int seen = comm_store_wait(watch, "cohort/alive/0", 30000);
    kill(p[1], SIGCONT);
    cr_assert_eq(seen, 0, "rank 0 never checked in: %s", comm_store_errmsg(watch));
    comm_store_close(watch);
    /* Both ranks' words are read before either is judged: when one is
     * wrong, the other's says why (when and how rank 1 found the failure). */
    char *e[2];
    int st[2];
    for (int r = 0; r < 2; r++) {
        st[r] = wait_exit(p[r], 60);
        e[r] = rank_err(dir, r);
    }
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(st[r], 1, "rank %d exit %d; rank 0 said: %s; rank 1 said: %s", r, st[r],
                     e[0], e[1]);
        cr_assert(strstr(e[r], "failed") && strstr(e[r], "every other rank answered") &&
                      !strstr(e[r], "lost: rank"),
                  "rank %d: rank 0 said: %s; rank 1 said: %s", r, e[0], e[1]);
        cr_log_info("rank %d: %s", r, e[r]);
    }
    free(e[0]);
    free(e[1]);
    rmrf(dir);
}

/* Two ranks exchange over pairs of their own (comm_gloo.cc): the same holds. */
Test(failure, killing_one_of_two_ranks_fails_the_other_in_bounded_time, .timeout = 120)
{
    lose_rank(2, 1, SIGKILL);
}

Test(failure, a_silent_peer_fails_the_other_rank_at_the_timeout, .timeout = 120)
{
    lose_rank(2, 1, SIGSTOP);
}

Test(failure, rank_one_without_rank_zero_fails_after_the_deadline, .timeout = 60)
{
    char dir[64], data[128];
    tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/data", dir);
    mkdata(data, 100, 10, 0);
    const char *args[] = { "--data", data, "--no-checkpoint", "--timeout", "2", NULL };
    double t0 = now_s();
    pid_t p = spawn_rank(dir, 1, 2, free_port(), args);
    int st = wait_exit(p, 30);
    double dt = now_s() - t0;
    cr_assert_eq(st, 1);
    cr_assert_geq(dt, 1.9);
    cr_assert_lt(dt, 10.0);
    expect_said(dir, 1, "cannot reach the rendezvous store of rank 0");
    rmrf(dir);
}

Test(failure, bad_environment_is_named)
{
    struct comm_config cfg;
    char err[256];
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "5", 1);
    cr_assert_eq(comm_config_from_env(&cfg, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "RANK"), "%s", err);
    setenv("RANK", "1", 1);
    unsetenv("MASTER_ADDR");
    cr_assert_eq(comm_config_from_env(&cfg, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "MASTER_ADDR"), "%s", err);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "99999", 1);
    cr_assert_eq(comm_config_from_env(&cfg, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "MASTER_PORT"), "%s", err);
    setenv("MASTER_PORT", "29500", 1);
    setenv("BACKEND", "mpi", 1);
    cr_assert_eq(comm_config_from_env(&cfg, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "BACKEND"), "%s", err);
    setenv("BACKEND", "gloo", 1);
    cr_assert_eq(comm_config_from_env(&cfg, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg.rank, 1);
    cr_assert_eq(cfg.world_size, 2);
}

/* The trainer's options (getopt_long): each bad one is named, with exit
 * status 2, before anything starts; --name=value and --name value both work. */
Test(failure, bad_options_are_named)
{
    static const struct {
        const char *args, *said;
    } cases[] = {
        {"--epochs 0", "--epochs must be an integer from 1 to 1000000, got '0'"},
        {"--epochs=abc", "--epochs must be an integer from 1 to 1000000, got 'abc'"},
        {"--lr -1", "--lr must be a number from 1e-12 to 100, got '-1'"},
        {"--optimizer rmsprop", "--optimizer is sgd or adam, got 'rmsprop'"},
        {"--hidden 8,0", "--hidden takes 0 to"},
        {"--data=", "--data needs a path"},
        {"--no-such-thing", "unknown option '--no-such-thing'"},
        {"--batch-size", "a value is missing after '--batch-size'"},
        {"--epochs 2 stray", "unexpected argument 'stray'"},
    };
    char cmd[512], out[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "EPOCHS= LR= BATCH_SIZE= %s train %s 2>&1", COHORT_WORKER_BIN,
                 cases[i].args);
        FILE *p = popen(cmd, "r");
        cr_assert_not_null(p);
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = '\0';
        int st = pclose(p);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: exit status %d", cases[i].args, st);
        cr_expect_not_null(strstr(out, cases[i].said), "%s: it said: %s", cases[i].args, out);
    }
    /* All of the usage is read: a reader that stops early would kill the
     * trainer with SIGPIPE. */
    snprintf(cmd, sizeof cmd, "%s train --help", COHORT_WORKER_BIN);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    char rest[512];
    while (fread(rest, 1, sizeof rest, p) > 0)
        ;
    cr_expect_eq(pclose(p), 0);
    cr_expect_not_null(strstr(out, "usage: cohort-worker train"), "%s", out);
}

/* ---- NCCL (built where CUDA is; run where GPUs are) ---------------------- */

#ifdef COHORT_HAVE_NCCL
#include <cuda_runtime.h>

static int gpu_count(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Test(nccl, without_a_gpu_start_up_fails_with_a_clear_error)
{
    if (gpu_count() > 0)
        cr_skip_test("this machine has a GPU");
    struct comm_config cfg = { .master_addr = "127.0.0.1", .master_port = free_port(),
                               .world_size = 2, .rank = 0, .backend = COMM_BACKEND_NCCL,
                               .timeout_ms = 2000 };
    comm *c;
    char err[512];
    cr_assert_eq(comm_init(&cfg, &c, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "nccl start-up failed: no CUDA device"), "%s", err);
}

/* Two ranks need two devices: NCCL refuses two ranks on one GPU. */
Test(nccl, two_ranks_allreduce_and_broadcast_on_gpus, .timeout = 120)
{
    if (gpu_count() < 2)
        cr_skip_test("fewer than 2 GPUs here (%d)", gpu_count());
    int port = free_port();
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            struct comm_config cfg = { .master_addr = "127.0.0.1", .master_port = port,
                                       .world_size = 2, .rank = r, .local_rank = r,
                                       .backend = COMM_BACKEND_NCCL, .timeout_ms = 60000 };
            comm *c;
            char err[512];
            float host[1024], *dev;
            if (comm_init(&cfg, &c, err, sizeof err) < 0) {
                fprintf(stderr, "rank %d: %s\n", r, err);
                _exit(1);
            }
            for (int i = 0; i < 1024; i++)
                host[i] = (float)(i * (r + 1));
            if (cudaMalloc((void **)&dev, sizeof host) != cudaSuccess ||
                cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess ||
                comm_allreduce(c, dev, 1024, COMM_AVG) < 0 ||
                cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost) != cudaSuccess)
                _exit(2);
            for (int i = 0; i < 1024; i++)
                if (host[i] != 1.5f * i)   /* (i + 2i) / 2 */
                    _exit(3);
            if (comm_finish(c) < 0)
                _exit(4);
            comm_destroy(c);
            _exit(0);
        }
    }
    for (int r = 0; r < 2; r++)
        cr_assert_eq(wait_exit(pids[r], 100), 0, "rank %d", r);
}
#ifdef COHORT_HAVE_GPU
/* The GPU trainer (gpu.cu) against the CPU one: the same seed, data, batch
 * and steps end with the same parameters, up to float rounding (cuBLAS and
 * OpenBLAS sum in different orders). */
static void gpu_against_cpu(const char *optimizer)
{
    char dir[64], data[128], cpu[160], gpu[160];
    tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/data", dir);
    mkdata(data, 2000, 200, 0);
    snprintf(cpu, sizeof cpu, "%s/cpu.params", dir);
    snprintf(gpu, sizeof gpu, "%s/gpu.params", dir);
    const char *ac[] = { "--data", data, "--no-checkpoint", "--optimizer", optimizer, "--lr",
                         "0.01", "--batch-size", "32", "--max-steps", "30", "--dump-params", cpu,
                         "--log-every", "0", NULL };
    const char *ag[] = { "--data", data, "--no-checkpoint", "--optimizer", optimizer, "--lr",
                         "0.01", "--batch-size", "32", "--max-steps", "30", "--dump-params", gpu,
                         "--log-every", "0", NULL };
    run_job(dir, 1, ac);
    rank_backend = "nccl";
    run_job(dir, 1, ag);
    rank_backend = "gloo";
    size_t nc, ng;
    float *pc = read_floats(cpu, &nc), *pg = read_floats(gpu, &ng);
    cr_assert_eq(nc, ng);
    double rd = rel_diff(pc, pg, nc);
    cr_log_info("GPU against CPU, %s: relative difference %.3g", optimizer, rd);
    cr_assert_lt(rd, 1e-4, "%s: relative difference %g", optimizer, rd);
    free(pc);
    free(pg);
    rmrf(dir);
}

Test(gpu, trainer_on_a_gpu_matches_the_cpu_trainer, .timeout = 180)
{
    if (gpu_count() < 1)
        cr_skip_test("no GPU here");
    gpu_against_cpu("sgd");
    gpu_against_cpu("adam");
}

Test(gpu, two_gpu_ranks_equal_one_gpu_rank_with_double_batch, .timeout = 180)
{
    if (gpu_count() < 2)
        cr_skip_test("fewer than 2 GPUs here (%d)", gpu_count());
    rank_backend = "nccl";
    check_equivalence(2, "sgd");
    check_equivalence(2, "adam");
    rank_backend = "gloo";
}

/* Where there is no GPU, BACKEND=nccl fails at once and says why. */
Test(gpu, without_a_gpu_the_trainer_says_so, .timeout = 60)
{
    if (gpu_count() > 0)
        cr_skip_test("this machine has a GPU");
    char dir[64], data[128];
    tmpdir(dir, sizeof dir);
    snprintf(data, sizeof data, "%s/data", dir);
    mkdata(data, 100, 10, 0);
    const char *args[] = { "--data", data, "--no-checkpoint", "--log-every", "0", NULL };
    rank_backend = "nccl";
    pid_t p = spawn_rank(dir, 0, 1, free_port(), args);
    rank_backend = "gloo";
    cr_assert_eq(wait_exit(p, 30), 1);
    expect_said(dir, 0, "rank 0: cudaSetDevice: ");
    rmrf(dir);
}
#endif
#else
Test(nccl, not_built)
{
    struct comm_config cfg = { .master_addr = "127.0.0.1", .master_port = free_port(),
                               .world_size = 2, .rank = 0, .backend = COMM_BACKEND_NCCL };
    comm *c;
    char err[512];
    cr_assert_eq(comm_have_nccl(), 0);
    cr_assert_eq(comm_init(&cfg, &c, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "built without CUDA/NCCL"), "%s", err);
}
#endif
