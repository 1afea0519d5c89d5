/*
 * comm.c: env:// start-up, the rendezvous, and the dispatch of collectives
 * to the backend (see comm.h).  A comm owns its store client, rank 0's
 * store server, and the backend state.
 */
#include "worker/comm.h"
#include "lib/fmt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/launch.h"
#include "worker/comm_impl.h"

#define DEFAULT_TIMEOUT_MS 30000

struct comm {
    int rank, size, local_rank;
    enum comm_backend backend;
    comm_store_server *server;   /* rank 0 only */
    comm_store *store;
    const struct comm_backend_ops *ops;   /* NULL for a world of one */
    void *state;
    const char *transport;
    int failed;
    int timeout_ms;
    int roll_call_ms; /* 0: derived from timeout_ms */
    char err[1280];   /* what failed (64), the backend's why (768), the roll call (256) */
};

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int env_int(const char *name, int lo, int hi, int dflt, int *out, char *err, size_t errlen)
{
    const char *v = getenv(name);
    long long n;
    if (!v || !*v) {
        if (dflt < lo) {
            seterr(err, errlen, "%s is not set (env:// start-up needs it)", name);
            return -1;
        }
        *out = dflt;
        return 0;
    }
    if (launch_int_text(v, lo, hi, &n) != 0) { /* the contract's one reading */
        seterr(err, errlen, "%s='%s' is not an integer from %d to %d", name, v, lo, hi);
        return -1;
    }
    *out = (int)n;
    return 0;
}

int comm_config_from_env(struct comm_config *cfg, char *err, size_t errlen)
{
    const char *b = getenv("BACKEND");
    int secs = 0;
    memset(cfg, 0, sizeof *cfg);
    if (env_int(LAUNCH_NAME(WORLD_SIZE), 1, LAUNCH_MAX_WORLD, 1, &cfg->world_size, err,
                errlen) < 0 ||
        env_int(LAUNCH_NAME(RANK), 0, cfg->world_size - 1, 0, &cfg->rank, err, errlen) < 0 ||
        env_int(LAUNCH_NAME(LOCAL_RANK), 0, LAUNCH_MAX_PER_NODE - 1, cfg->rank, &cfg->local_rank,
                err, errlen) < 0 ||
        env_int("COHORT_COMM_TIMEOUT", 1, 86400, 30, &secs, err, errlen) < 0 ||
        env_int("COHORT_ROLL_CALL_MS", 0, 600000, 0, &cfg->roll_call_ms, err, errlen) < 0 ||
        env_int("LOCAL_WORLD_SIZE", 0, LAUNCH_MAX_PER_NODE, 0, &cfg->local_world_size, err,
                errlen) < 0 ||
        env_int(LAUNCH_NAME(WORKER_PER_NODE), 0, LAUNCH_MAX_PER_NODE, cfg->local_world_size,
                &cfg->local_world_size, err, errlen) < 0)
        return -1;
    const char *shm = getenv("COHORT_COMM_SHM");
    cfg->no_shm = shm && !strcmp(shm, "0");
    cfg->timeout_ms = secs * 1000;
    cfg->secret = getenv(LAUNCH_NAME(COHORT_RDZV_SECRET));
    if (cfg->secret && strlen(cfg->secret) > COMM_STORE_MAX_SECRET) {
        seterr(err, errlen, "COHORT_RDZV_SECRET is longer than %u bytes", COMM_STORE_MAX_SECRET);
        return -1;
    }
    if (!b || !*b || !strcmp(b, "gloo")) {
        cfg->backend = COMM_BACKEND_GLOO;
    } else if (!strcmp(b, "nccl")) {
        cfg->backend = COMM_BACKEND_NCCL;
    } else {
        seterr(err, errlen, "BACKEND='%s' is not gloo or nccl", b);
        return -1;
    }
    if (cfg->world_size == 1 && !getenv(LAUNCH_NAME(MASTER_ADDR)))
        return 0;  /* one rank meets nobody */
    cfg->master_addr = getenv(LAUNCH_NAME(MASTER_ADDR));
    if (!cfg->master_addr || !*cfg->master_addr) {
        seterr(err, errlen, "MASTER_ADDR is not set (env:// start-up needs it)");
        return -1;
    }
    return env_int("MASTER_PORT", 1, 65535, -1, &cfg->master_port, err, errlen);
}

const char *comm_backend_name(enum comm_backend b)
{
    return b == COMM_BACKEND_NCCL ? "nccl" : "gloo";
}

int comm_have_nccl(void)
{
#ifdef COHORT_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
}

/* The address of this host on the route to master: what the other ranks
 * can reach us at. */
static int local_address(const char *master, char *out, size_t outlen, char *err, size_t errlen)
{
    struct addrinfo hints = { .ai_socktype = SOCK_DGRAM }, *res = NULL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int rc = getaddrinfo(master, "9", &hints, &res), fd = -1, ret = -1;

    if (rc != 0) {
        seterr(err, errlen, "cannot resolve MASTER_ADDR '%s': %s", master, gai_strerror(rc));
        return -1;
    }
    fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        seterr(err, errlen, "no route to MASTER_ADDR '%s': %s", master, strerror(errno));
        goto out;
    }
    if (getnameinfo((struct sockaddr *)&ss, sl, out, (socklen_t)outlen, NULL, 0,
                    NI_NUMERICHOST) != 0) {
        seterr(err, errlen, "cannot name the local address towards '%s'", master);
        goto out;
    }
    ret = 0;
out:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return ret;
}

/* This rank's node, as the kernel knows it: the boot id and the network
 * namespace (a job's ranks on one node share both; two network namespaces
 * of one machine, as in the tests, are two nodes).  COHORT_COMM_NODE_ID, when
 * set, names it instead: tests play several nodes in one namespace. */
static void node_id(char *out, size_t n)
{
    char boot[64] = "";
    struct stat sb = {0};
    const char *forced = getenv("COHORT_COMM_NODE_ID");
    if (forced && *forced) {
        fmt_cut(out, n, "forced/%s", forced);
        return;
    }
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (!f || !fgets(boot, sizeof boot, f))
        gethostname(boot, sizeof boot - 1);
    if (f)
        fclose(f);
    boot[strcspn(boot, "\n")] = '\0';
    stat("/proc/self/ns/net", &sb);
    fmt_cut(out, n, "%s/%llu", boot, (unsigned long long)sb.st_ino);
}

/* Whether the value of store key equals want: 1, 0, or -1 (the store). */
static int key_is(comm *c, const char *key, const char *want)
{
    void *v = NULL;
    size_t n = 0;
    if (comm_store_get(c->store, key, c->timeout_ms, &v, &n) < 0)
        return -1;
    int same = n == strlen(want) && !memcmp(v, want, n);
    free(v);
    return same;
}

/*
 * Whether the ranks are grouped by node as WORKER_PER_NODE = per says:
 * ranks [k*per, (k+1)*per) on one node each, local rank = rank % per.
 * Every rank publishes its node (or "x" when its local rank is not that);
 * each node's first rank checks its group and publishes the verdict, and
 * every rank reads all verdicts, so all decide alike.  1, 0, or -1.
 */
static int grouped_by_node(comm *c, int per, int local_rank, char *err, size_t errlen)
{
    char me[128], key[48];
    int ok = 1;
    node_id(me, sizeof me);
    if (local_rank != c->rank % per)
        fmt_cut(me, sizeof me, "x");
    fmt_cut(key, sizeof key, "cohort/node/%d", c->rank);
    if (comm_store_set(c->store, key, me, strlen(me)) < 0)
        goto store_failed;
    if (c->rank % per == 0) {
        for (int r = c->rank + 1; r < c->rank + per && ok > 0; r++) {
            fmt_cut(key, sizeof key, "cohort/node/%d", r);
            ok = strcmp(me, "x") ? key_is(c, key, me) : 0;
        }
        if (ok < 0)
            goto store_failed;
        fmt_cut(key, sizeof key, "cohort/group/%d", c->rank / per);
        if (comm_store_set(c->store, key, ok ? "1" : "0", 1) < 0)
            goto store_failed;
    }
    for (int k = 0; k < c->size / per; k++) {
        fmt_cut(key, sizeof key, "cohort/group/%d", k);
        int one = key_is(c, key, "1");
        if (one < 0)
            goto store_failed;
        ok = ok && one;
    }
    return ok;
store_failed:
    seterr(err, errlen, "rank %d: %s", c->rank, comm_store_errmsg(c->store));
    return -1;
}

/* Shared memory on this node, and (on its leader) Gloo between the leaders. */
static int open_hier(comm *c, const struct comm_config *cfg, int per, char *err, size_t errlen)
{
    char local[NI_MAXHOST], msg[768], key[48];
    comm_shm *shm = NULL;
    void *leaders = NULL;
    int node = c->rank / per, nnodes = c->size / per;
    fmt_cut(key, sizeof key, "cohort/shm/%d", node);
    if (comm_shm_open(c->rank % per, per, c->store, key, cfg->shm_buffer_bytes, c->timeout_ms,
                      &shm, msg, sizeof msg) < 0) {
        seterr(err, errlen, "rank %d: shared memory: %s", c->rank, msg);
        return -1;
    }
    int rc = 0;
    if (c->rank % per == 0) {
        rc = local_address(cfg->master_addr, local, sizeof local, err, errlen);
        if (rc == 0 && comm_gloo_open(node, nnodes, c->store, "cohort/leaders/", local,
                                      c->timeout_ms, &leaders, msg, sizeof msg) < 0) {
            seterr(err, errlen, "rank %d: gloo rendezvous of the node leaders failed: %s",
                   c->rank, msg);
            rc = -1;
        }
    }
    if (rc < 0) {
        comm_shm_abort(shm); /* this node's other ranks wait on it */
        comm_shm_close(shm);
        return -1;
    }
    if (comm_hier_open(shm, leaders, node, nnodes, c->size, &c->state, err, errlen) < 0) {
        comm_shm_close(shm);
        if (leaders)
            comm_gloo_ops.destroy(leaders);
        return -1;
    }
    c->ops = &comm_hier_ops;
    c->transport = "shm+gloo";
    return 0;
}

/* Gloo between the ranks; shared memory when they are all on this node;
 * both, hierarchically, when several nodes hold several ranks each. */
static int open_gloo_or_shm(comm *c, const struct comm_config *cfg, char *err, size_t errlen)
{
    char local[NI_MAXHOST], msg[768];
    int per = cfg->local_world_size;
    if (!cfg->no_shm && per > 1 && c->size % per == 0) {
        int grouped = grouped_by_node(c, per, cfg->local_rank, err, errlen);
        if (grouped < 0)
            return -1;
        if (grouped && per < c->size)
            return open_hier(c, cfg, per, err, errlen);
        if (grouped) {
            if (comm_shm_open(c->rank, c->size, c->store, "cohort/shm", cfg->shm_buffer_bytes,
                              c->timeout_ms, (comm_shm **)&c->state, msg, sizeof msg) < 0) {
                seterr(err, errlen, "rank %d: shared memory: %s", c->rank, msg);
                return -1;
            }
            c->ops = &comm_shm_ops;
            c->transport = "shm";
            return 0;
        }
    }
    if (local_address(cfg->master_addr, local, sizeof local, err, errlen) < 0)
        return -1;
    if (comm_gloo_open(c->rank, c->size, c->store, NULL, local, c->timeout_ms, &c->state, msg,
                       sizeof msg) < 0) {
        seterr(err, errlen, "rank %d: gloo rendezvous failed: %s", c->rank, msg);
        return -1;
    }
    c->ops = &comm_gloo_ops;
    c->transport = "gloo";
    return 0;
}

int comm_init(const struct comm_config *cfg, comm **out, char *err, size_t errlen)
{
    comm *c = calloc(1, sizeof *c);
    char msg[768];
    int timeout = cfg->timeout_ms > 0 ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;

    if (!c) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    c->rank = cfg->rank;
    c->size = cfg->world_size;
    c->local_rank = cfg->local_rank;
    c->backend = cfg->backend;
    c->timeout_ms = timeout;
    c->roll_call_ms = cfg->roll_call_ms;
    if (cfg->rank < 0 || cfg->world_size < 1 || cfg->rank >= cfg->world_size) {
        seterr(err, errlen, "rank %d is outside a world of %d", cfg->rank, cfg->world_size);
        goto fail;
    }
    if (cfg->backend == COMM_BACKEND_NCCL && !comm_have_nccl()) {
        seterr(err, errlen, "BACKEND=nccl, but this cohort-worker was built without CUDA/NCCL");
        goto fail;
    }
    if (c->size == 1) {
        *out = c;   /* nothing to meet; every collective is the identity */
        return 0;
    }
    if (!cfg->master_addr || cfg->master_port <= 0) {
        seterr(err, errlen, "MASTER_ADDR and MASTER_PORT are needed for %d ranks", c->size);
        goto fail;
    }
    if (c->rank == 0 &&
        comm_store_serve(cfg->master_port, cfg->secret, &c->server, err, errlen) < 0)
        goto fail;
    if (comm_store_connect(cfg->master_addr, cfg->master_port, timeout, &c->store,
                           msg, sizeof msg) < 0) {
        seterr(err, errlen, "rank %d: %s", c->rank, msg);
        goto fail;
    }
    if (cfg->secret && cfg->secret[0] && comm_store_auth(c->store, cfg->secret) < 0) {
        seterr(err, errlen, "rank %d: %s", c->rank, comm_store_errmsg(c->store));
        goto fail;
    }
    if (cfg->backend == COMM_BACKEND_GLOO) {
        if (open_gloo_or_shm(c, cfg, err, errlen) < 0)
            goto fail;
    } else {
#ifdef COHORT_HAVE_NCCL
        if (comm_nccl_open(c->rank, c->size, c->local_rank, c->store, timeout, &c->state,
                           msg, sizeof msg) < 0) {
            seterr(err, errlen, "rank %d: nccl start-up failed: %s", c->rank, msg);
            goto fail;
        }
        c->ops = &comm_nccl_ops;
        c->transport = "nccl";
#endif
    }
    /* Everyone has read what it needs from the store before rank 0 may stop
     * serving it (comm_destroy). */
    if (comm_barrier(c) < 0) {
        seterr(err, errlen, "%s", c->err);
        goto fail;
    }
    *out = c;
    return 0;
fail:
    comm_destroy(c);
    return -1;
}

int comm_rank(const comm *c) { return c->rank; }
int comm_size(const comm *c) { return c->size; }
int comm_local_rank(const comm *c) { return c->local_rank; }
enum comm_backend comm_backend_of(const comm *c) { return c->backend; }
const char *comm_transport(const comm *c) { return c->transport ? c->transport : "none"; }
const char *comm_errmsg(const comm *c) { return c->err; }

/* How long a failed rank waits for the others to answer the roll call. */
#define ROLL_CALL_MS 2000
#define ROLL_CALL_NAMED 8   /* missing ranks named one by one; then a count */

/* Elapsed milliseconds since t0 (util_mono_ms). */
static long ms_since(int64_t t0)
{
    return (long)(util_mono_ms() - t0);
}

/*
 * The end of a roll call.  Each rank says it is done with cohort/rolled/<rank>.
 * Rank 0 hosts the store and exits soon after its own roll call; without this
 * a slower rank that answered would find the store gone before it could read
 * rank 0's answer, and call rank 0 lost.  So the host waits, up to one more
 * window, for every rank that answered to be done reading.
 */
static void linger_for_roll_call(comm *c, int window)
{
    char key[48];
    int64_t t0;

    fmt_cut(key, sizeof key, "cohort/rolled/%d", c->rank);
    if (comm_store_set(c->store, key, "", 0) < 0 || !c->server)
        return;
    t0 = util_mono_ms();
    for (int r = 0; r < c->size; r++) {
        long left = window - ms_since(t0);
        if (r == c->rank)
            continue;
        fmt_cut(key, sizeof key, "cohort/alive/%d", r);
        if (comm_store_wait(c->store, key, 0) < 0)
            continue;   /* lost: nobody to wait for */
        fmt_cut(key, sizeof key, "cohort/rolled/%d", r);
        (void)comm_store_wait(c->store, key, left > 0 ? (int)left : 0);
    }
}

/*
 * After a collective failed, find out which ranks are lost.  The backend
 * is torn down first: a rank blocked on this one then fails at once instead
 * of at its timeout, and answers too.  Each rank that can still reach the
 * store sets cohort/alive/<rank>; the ranks whose key does not appear
 * within ROLL_CALL_MS (or before the store itself goes) are the lost ones;
 * rank 0 then keeps the store up until the others have read their answers.
 * Writes the finding, a phrase, into out.
 */
static void roll_call(comm *c, char *out, size_t len)
{
    char key[48];
    int window = c->roll_call_ms > 0 ? c->roll_call_ms
                 : c->timeout_ms / 5 < ROLL_CALL_MS ? c->timeout_ms / 5
                                                    : ROLL_CALL_MS;
    int missing = 0;
    size_t used = 0;
    int64_t t0;

    if (c->ops) {
        c->ops->destroy(c->state);
        c->ops = NULL;
        c->state = NULL;
    }
    fmt_cut(key, sizeof key, "cohort/alive/%d", c->rank);
    if (comm_store_set(c->store, key, "", 0) < 0) {
        fmt_cut(out, len, "lost: rank 0 (its rendezvous store no longer answers: %s)",
                 comm_store_errmsg(c->store));
        return;
    }
    t0 = util_mono_ms();
    out[0] = '\0';
    for (int r = 0; r < c->size; r++) {
        long left = window - ms_since(t0);
        if (r == c->rank)
            continue;
        fmt_cut(key, sizeof key, "cohort/alive/%d", r);
        if (comm_store_wait(c->store, key, left > 0 ? (int)left : 0) == 0)
            continue;
        if (++missing <= ROLL_CALL_NAMED && used < len) {
            fmt_cut(out + used, len - used, "%s%d", missing == 1 ? "lost: rank " : ", ", r);
            used += strlen(out + used);
        }
    }
    linger_for_roll_call(c, window);
    if (missing > ROLL_CALL_NAMED && used < len) {
        fmt_cut(out + used, len - used, " and %d more", missing - ROLL_CALL_NAMED);
        used += strlen(out + used);
    }
    if (missing && used < len)
        fmt_cut(out + used, len - used,
                 " (no word within %d ms of the failure: exited, unreachable or stuck)", window);
    else if (!missing)
        fmt_cut(out, len, "every other rank answered after the failure, so none exited: a link "
                           "between ranks broke, or a rank was slower than the timeout");
}

/* Records a backend failure with the context a user needs: what failed,
 * Gloo's or NCCL's reason, and which ranks the roll call found lost. */
static int failed(comm *c, const char *what, const char *why)
{
    char lost[256], reason[768];
    if (!c->failed) {
        /* why may live on the backend, which the roll call closes */
        fmt_cut(reason, sizeof reason, "%s", why);
        roll_call(c, lost, sizeof lost);
        fmt_cut(c->err, sizeof c->err, "rank %d of %d: %s failed: %s; %s", c->rank, c->size,
                what, reason, lost);
    }
    c->failed = 1;
    return -1;
}

float *comm_buffer(comm *c, size_t count)
{
    if (c->failed)
        return NULL;
    if (c->ops == &comm_shm_ops)
        return comm_shm_buffer(c->state, count);
    if (c->ops == &comm_hier_ops)
        return comm_hier_buffer(c->state, count);
    return NULL;
}

int comm_allreduce(comm *c, float *buf, size_t count, enum comm_reduce op)
{
    if (c->failed)
        return -1;
    if (!c->ops || count == 0)
        return 0;
    if (c->ops->allreduce(c->state, buf, count, op == COMM_AVG) < 0)
        return failed(c, "allreduce", c->ops->errmsg(c->state));
    return 0;
}

int comm_broadcast(comm *c, void *buf, size_t bytes, int root)
{
    if (c->failed)
        return -1;
    if (root < 0 || root >= c->size) {
        fmt_cut(c->err, sizeof c->err, "broadcast from rank %d in a world of %d", root, c->size);
        return -1;
    }
    if (!c->ops || bytes == 0)
        return 0;
    if (c->ops->broadcast(c->state, buf, bytes, root) < 0)
        return failed(c, "broadcast", c->ops->errmsg(c->state));
    return 0;
}

int comm_barrier(comm *c)
{
    if (c->failed)
        return -1;
    if (!c->ops)
        return 0;
    if (c->ops->barrier(c->state) < 0)
        return failed(c, "barrier", c->ops->errmsg(c->state));
    return 0;
}

int comm_finish(comm *c)
{
    char key[64];
    int timeout = c->timeout_ms;
    if (c->failed)
        return -1;
    if (!c->ops)
        return 0;
    /* Done with the backend everywhere first; then only the store is used,
     * and its host, rank 0, answers everyone before it goes. */
    if (comm_barrier(c) < 0)
        return -1;
    fmt_cut(key, sizeof key, "cohort/finish/%d", c->rank);
    if (comm_store_set(c->store, key, "", 0) < 0)
        goto store_failed;
    if (c->rank == 0) {
        for (int r = 1; r < c->size; r++) {
            fmt_cut(key, sizeof key, "cohort/finish/%d", r);
            if (comm_store_wait(c->store, key, timeout) < 0)
                goto store_failed;
        }
        if (comm_store_set(c->store, "cohort/finish/all", "", 0) < 0)
            goto store_failed;
        /* and stays until each has read that: a wait still in flight when
         * the store stops would be cut (connection reset) */
        for (int r = 1; r < c->size; r++) {
            fmt_cut(key, sizeof key, "cohort/finished/%d", r);
            if (comm_store_wait(c->store, key, timeout) < 0)
                goto store_failed;
        }
    } else {
        fmt_cut(key, sizeof key, "cohort/finished/%d", c->rank);
        if (comm_store_wait(c->store, "cohort/finish/all", timeout) < 0 ||
            comm_store_set(c->store, key, "", 0) < 0)
            goto store_failed;
    }
    return 0;
store_failed:
    return failed(c, "finish", comm_store_errmsg(c->store));
}

void comm_destroy(comm *c)
{
    if (!c)
        return;
    if (c->ops)
        c->ops->destroy(c->state);
    comm_store_close(c->store);
    comm_store_server_stop(c->server);
    free(c);
}
