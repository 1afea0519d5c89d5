/*
 * comm_shm: the ranks of one node, through memory they share (a backend:
 * comm_impl.h).
 *
 * Set-up.  Member 0 makes a memfd and a Unix socket with a random abstract
 * name, and publishes the name and a random admission token in the
 * rendezvous store, which only the attempt's ranks can read.  Every other
 * member connects, presents the token and its index, and gets the memfd
 * over SCM_RIGHTS.  A job's ranks on one node share its network namespace,
 * so they reach the name; a memfd needs no shared /dev/shm (each container
 * has its own).  The sockets then stay open as lifelines: a member that
 * dies closes its end, and whoever waits on it notices within SHM_CHECK_MS
 * and marks the segment broken, which fails every member's collective.
 *
 * The segment: a header (a barrier's arrival count and generation, the
 * broken flag), then one slot per member (the caller's largest buffer, at
 * least SHM_SLOT_MIN) and a result slot.  A caller whose buffer is its own
 * slot (comm_shm_buffer) reduces in place: barrier; each member sums its
 * share of the elements over the slots, in member order (so an element's
 * sum is the same whatever the member count, and equal on every member),
 * and writes it into every slot; barrier.  Any other buffer goes slot-sized
 * chunk by chunk: copy in; barrier; sum the share into the result slot;
 * barrier; copy out.  Two barriers are enough: no one writes a slot again
 * before everyone has passed the second, nor the result before everyone
 * has passed the next first.  A barrier spins briefly, then sleeps on a
 * futex of the generation.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/fmt.h"
#include "worker/comm_impl.h"

#define SHM_SLOT_MIN (4u << 20) /* bytes of a slot at least */
#define SHM_HDR 4096           /* the header's page */
#define SHM_SPIN 4000          /* polls of the generation before sleeping */
#define SHM_CHECK_MS 50        /* how often a sleeper looks for a lost member */
#define SHM_TOKEN_HEX 32

struct shm_hdr {
    _Atomic uint32_t arrived;
    _Atomic uint32_t gen;      /* futex word: bumped when all have arrived */
    _Atomic uint32_t broken;   /* a member was lost: every wait fails */
};

struct comm_shm {
    int index, n;
    size_t slot_bytes;         /* each slot's size, a multiple of the page */
    int lent;                  /* the own slot went out as the caller's buffer */
    int memfd;
    unsigned char *base;
    size_t size;
    struct shm_hdr *h;
    float **slot;              /* n slots, then the result slot */
    int *peer;                 /* member 0: the n-1 others' sockets; others: member 0's */
    int npeer;
    int timeout_ms;
    char err[512];             /* why the last call failed (comm_shm_errmsg) */
};

/* Why a call on s failed, kept on s: -1. */
static int fail(comm_shm *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(comm_shm *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

const char *comm_shm_errmsg(const comm_shm *s)
{
    return s->err;
}

/* ---- the barrier ---- */

static void futex_wait(_Atomic uint32_t *w, uint32_t v, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Whether a lifeline has closed: its member exited or was killed. */
static int peer_lost(const comm_shm *s, int *which)
{
    struct pollfd p[64];
    for (size_t base = 0; base < (size_t)s->npeer; base += 64) {
        size_t k = (size_t)s->npeer - base;
        k = k < 64 ? k : 64;
        for (size_t i = 0; i < k; i++)
            p[i] = (struct pollfd){.fd = s->peer[base + i], .events = POLLIN | POLLRDHUP};
        if (poll(p, (nfds_t)k, 0) <= 0)
            continue;
        for (size_t i = 0; i < k; i++)
            if (p[i].revents) { /* nothing is ever sent after set-up: any event is the end */
                *which = s->index == 0 ? (int)(base + i) + 1 : 0;
                return 1;
            }
    }
    return 0;
}

static int broken(comm_shm *s, const char *fmt, int who)
{
    atomic_store(&s->h->broken, 1);
    atomic_fetch_add(&s->h->gen, 1);
    futex_wake_all(&s->h->gen);
    return fail(s, fmt, who);
}

static int wait_gen(comm_shm *s, uint32_t g)
{
    for (int i = 0; i < SHM_SPIN; i++) {
        if (atomic_load_explicit(&s->h->gen, memory_order_acquire) != g)
            goto passed;
        __builtin_ia32_pause();
    }
    int64_t t0 = util_mono_ms();
    while (atomic_load_explicit(&s->h->gen, memory_order_acquire) == g) {
        int who;
        futex_wait(&s->h->gen, g, SHM_CHECK_MS);
        /* passed first: a member that passed may have exited already */
        if (atomic_load_explicit(&s->h->gen, memory_order_acquire) != g ||
            atomic_load(&s->h->broken))
            break;
        if (peer_lost(s, &who))
            return broken(s, "local rank %d closed its link (exited or killed)", who);
        if (util_mono_ms() - t0 > s->timeout_ms)
            return broken(s, "a local rank did not arrive within %d ms",
                          s->timeout_ms);
    }
passed:
    if (atomic_load(&s->h->broken))
        return fail(s, "a rank of this node failed (shared memory marked broken)");
    return 0;
}

static int shm_barrier(comm_shm *s)
{
    if (atomic_load(&s->h->broken))
        return fail(s, "a rank of this node failed (shared memory marked broken)");
    uint32_t g = atomic_load_explicit(&s->h->gen, memory_order_acquire);
    if (atomic_fetch_add(&s->h->arrived, 1) + 1 == (uint32_t)s->n) {
        atomic_store(&s->h->arrived, 0);
        atomic_fetch_add_explicit(&s->h->gen, 1, memory_order_release);
        futex_wake_all(&s->h->gen);
        return 0;
    }
    return wait_gen(s, g);
}

/* ---- collectives ---- */

/* out[lo, hi) = the sum over the slots, in member order, times scale. */
static void sum_share(comm_shm *s, float *restrict out, size_t lo, size_t hi, float scale)
{
    const float *restrict first = s->slot[0];
    if (out != first)
        memcpy(out + lo, first + lo, (hi - lo) * sizeof(float));
    for (int r = 1; r < s->n; r++) {
        const float *restrict in = s->slot[r];
        for (size_t k = lo; k < hi; k++)
            out[k] += in[k];
    }
    if (scale != 1.0f)
        for (size_t k = lo; k < hi; k++)
            out[k] *= scale;
}

/* The caller's buffer is its slot: each member sums its share into slot 0
 * and copies it into every other slot, so each slot ends holding the whole
 * result; nothing is copied in or out. */
static int allreduce_in_place(comm_shm *s, size_t count, float scale)
{
    enum { BLOCK = 1024 }; /* floats summed in L1 before they go out to every slot */
    float tmp[BLOCK];
    size_t lo = count * (size_t)s->index / (size_t)s->n;
    size_t hi = count * (size_t)(s->index + 1) / (size_t)s->n;
    if (shm_barrier(s) < 0)
        return -1;
    for (size_t b = lo; b < hi; b += BLOCK) {
        size_t m = hi - b < BLOCK ? hi - b : BLOCK;
        memcpy(tmp, s->slot[0] + b, m * sizeof(float));
        for (int r = 1; r < s->n; r++) {
            const float *restrict in = s->slot[r] + b;
            for (size_t k = 0; k < m; k++)
                tmp[k] += in[k];
        }
        if (scale != 1.0f)
            for (size_t k = 0; k < m; k++)
                tmp[k] *= scale;
        for (int r = 0; r < s->n; r++)
            memcpy(s->slot[r] + b, tmp, m * sizeof(float));
    }
    return shm_barrier(s);
}

int comm_shm_allreduce(comm_shm *s, float *buf, size_t count, float scale)
{
    const size_t chunk = s->slot_bytes / sizeof(float);
    if (buf == s->slot[s->index] && count <= chunk)
        return allreduce_in_place(s, count, scale);
    for (size_t off = 0; off < count; off += chunk) {
        size_t m = count - off < chunk ? count - off : chunk;
        memcpy(s->slot[s->index], buf + off, m * sizeof(float));
        if (shm_barrier(s) < 0)
            return -1;
        sum_share(s, s->slot[s->n], m * (size_t)s->index / (size_t)s->n,
                  m * (size_t)(s->index + 1) / (size_t)s->n, scale);
        if (shm_barrier(s) < 0)
            return -1;
        memcpy(buf + off, s->slot[s->n], m * sizeof(float));
    }
    return 0;
}

void comm_shm_abort(comm_shm *s)
{
    atomic_store(&s->h->broken, 1);
    atomic_fetch_add(&s->h->gen, 1);
    futex_wake_all(&s->h->gen);
}

/* buf[0, m) = result[0, m) times scale. */
static void copy_out(float *restrict buf, const float *restrict result, size_t m, float scale)
{
    if (scale == 1.0f) {
        memcpy(buf, result, m * sizeof(float));
        return;
    }
    for (size_t k = 0; k < m; k++)
        buf[k] = result[k] * scale;
}

int comm_shm_reduce_apply(comm_shm *s, float *buf, size_t count, comm_shm_leader_fn *fn,
                          void *arg, float scale)
{
    const size_t chunk = s->slot_bytes / sizeof(float);
    int in_place = buf == s->slot[s->index] && count <= chunk;
    for (size_t off = 0; off < count; off += chunk) {
        size_t m = count - off < chunk ? count - off : chunk;
        if (!in_place)
            memcpy(s->slot[s->index], buf + off, m * sizeof(float));
        if (shm_barrier(s) < 0)
            return -1;
        sum_share(s, s->slot[s->n], m * (size_t)s->index / (size_t)s->n,
                  m * (size_t)(s->index + 1) / (size_t)s->n, 1.0f);
        if (shm_barrier(s) < 0)
            return -1;
        if (s->index == 0 && fn(arg, s->slot[s->n], m) < 0) {
            comm_shm_abort(s); /* the others wait on this member: fail them now */
            return fail(s, "the node's sum could not be passed on (see the leaders' error)");
        }
        if (shm_barrier(s) < 0)
            return -1;
        copy_out(buf + off, s->slot[s->n], m, scale);
    }
    return 0;
}

float *comm_shm_buffer(comm_shm *s, size_t count)
{
    if (s->lent || count > s->slot_bytes / sizeof(float))
        return NULL;
    s->lent = 1;
    return s->slot[s->index];
}

int comm_shm_broadcast(comm_shm *s, void *buf, size_t bytes, int root)
{
    unsigned char *p = buf;
    for (size_t off = 0; off < bytes; off += s->slot_bytes) {
        size_t m = bytes - off < s->slot_bytes ? bytes - off : s->slot_bytes;
        if (s->index == root)
            memcpy(s->slot[s->n], p + off, m);
        if (shm_barrier(s) < 0)
            return -1;
        if (s->index != root)
            memcpy(p + off, s->slot[s->n], m);
        if (shm_barrier(s) < 0)
            return -1;
    }
    return 0;
}

int comm_shm_barrier(comm_shm *s)
{
    return shm_barrier(s);
}

/* ---- set-up ---- */

/* n random bytes as hex into out[2n+1]: 0, or -1. */
static int random_hex(char *out, size_t n)
{
    static const char d[] = "0123456789abcdef";
    uint8_t raw[32];
    if (n > sizeof raw || getrandom(raw, n, 0) != (ssize_t)n)
        return -1;
    for (size_t i = 0; i < n; i++)
        out[2 * i] = d[raw[i] >> 4], out[2 * i + 1] = d[raw[i] & 15];
    out[2 * n] = '\0';
    return 0;
}

static int map_segment(comm_shm *s)
{
    s->size = SHM_HDR + (size_t)(s->n + 1) * s->slot_bytes;
    s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd, 0);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        return fail(s, "mmap of %zu bytes of shared memory: %s", s->size, strerror(errno));
    }
    s->h = (struct shm_hdr *)s->base;
    s->slot = calloc((size_t)s->n + 1, sizeof *s->slot);
    if (!s->slot)
        return fail(s, "out of memory");
    for (int i = 0; i <= s->n; i++)
        s->slot[i] = (float *)(s->base + SHM_HDR + (size_t)i * s->slot_bytes);
    return 0;
}

/* Member 0: the segment, then each member's connection, token checked. */
static int serve(comm_shm *s, comm_store *st, const char *key)
{
    char name[64], token[SHM_TOKEN_HEX + 1], val[160];
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    s->memfd = (int)syscall(SYS_memfd_create, "cohort-comm", MFD_CLOEXEC);
    if (s->memfd < 0 || ftruncate(s->memfd, (off_t)(SHM_HDR + (size_t)(s->n + 1) * s->slot_bytes)) < 0)
        return fail(s, "memfd of %d slots: %s", s->n + 1, strerror(errno));
    if (map_segment(s) < 0)
        return -1;
    if (random_hex(name, 8) < 0 || random_hex(token, SHM_TOKEN_HEX / 2) < 0)
        return fail(s, "getrandom: %s", strerror(errno));
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    fmt_cut(a.sun_path + 1, sizeof a.sun_path - 1, "cohort-comm-%s", name); /* 28 bytes */
    socklen_t alen =
        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(a.sun_path + 1));
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, alen) < 0 || listen(ls, 64) < 0) {
        if (ls >= 0)
            close(ls);
        return fail(s, "shared-memory socket: %s", strerror(errno));
    }
    fmt_cut(val, sizeof val, "%s %s", a.sun_path + 1, token);
    int rc = comm_store_set(st, key, val, strlen(val)) < 0
                 ? fail(s, "store: %s", comm_store_errmsg(st)) : 0;
    int64_t t0 = util_mono_ms();
    while (rc == 0 && s->npeer < s->n - 1) {
        struct pollfd p = {.fd = ls, .events = POLLIN};
        int left = s->timeout_ms - (int)(util_mono_ms() - t0);
        if (left <= 0 || poll(&p, 1, left) <= 0) {
            rc = fail(s, "%d of %d local ranks joined the shared memory within %d ms",
                      s->npeer + 1, s->n, s->timeout_ms);
            break;
        }
        int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        char hello[SHM_TOKEN_HEX + 16] = "";
        struct timeval tv = {2, 0};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t got = recv(c, hello, sizeof hello - 1, MSG_WAITALL);
        int idx = got == (ssize_t)sizeof hello - 1 ? atoi(hello + SHM_TOKEN_HEX + 1) : -1;
        if (got != (ssize_t)sizeof hello - 1 || memcmp(hello, token, SHM_TOKEN_HEX) ||
            idx < 1 || idx >= s->n || s->peer[idx - 1] >= 0) {
            close(c); /* a stranger, or a member twice: not given the memory */
            continue;
        }
        char one = 'm';
        char ctl[CMSG_SPACE(sizeof(int))] = {0};
        struct iovec iov = {&one, 1};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                            .msg_controllen = sizeof ctl};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &s->memfd, sizeof(int));
        if (sendmsg(c, &mh, MSG_NOSIGNAL) != 1) {
            close(c);
            continue;
        }
        s->peer[idx - 1] = c;
        s->npeer++;
    }
    close(ls);
    return rc;
}

/* Any other member: member 0's memory, through its socket. */
static int join(comm_shm *s, comm_store *st, const char *key)
{
    void *v = NULL;
    size_t vn = 0;
    char val[160], name[120], token[SHM_TOKEN_HEX + 1];
    if (comm_store_get(st, key, s->timeout_ms, &v, &vn) < 0)
        return fail(s, "store: %s", comm_store_errmsg(st));
    fmt_cut(val, sizeof val, "%.*s", (int)(vn < sizeof val ? vn : sizeof val - 1), (char *)v);
    free(v);
    if (sscanf(val, "%119s %32s", name, token) != 2 || strlen(token) != SHM_TOKEN_HEX)
        return fail(s, "a malformed shared-memory address in the store");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t nl = strlen(name);
    if (nl + 1 >= sizeof a.sun_path)
        return fail(s, "a shared-memory address too long");
    memcpy(a.sun_path + 1, name, nl);
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a,
                         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl)) < 0) {
        if (c >= 0)
            close(c);
        return fail(s, "cannot reach local rank 0's shared memory: %s (is it on "
                                 "another node or network namespace?)", strerror(errno));
    }
    s->peer[0] = c;
    s->npeer = 1;
    char hello[SHM_TOKEN_HEX + 16];
    memset(hello, 0, sizeof hello);
    fmt_cut(hello, sizeof hello, "%s %d", token, s->index);
    char one, ctl[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {&one, 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                        .msg_controllen = sizeof ctl};
    struct timeval tv = {s->timeout_ms / 1000, (s->timeout_ms % 1000) * 1000};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (send(c, hello, sizeof hello - 1, MSG_NOSIGNAL) != (ssize_t)sizeof hello - 1 ||
        recvmsg(c, &mh, MSG_CMSG_CLOEXEC) != 1)
        return fail(s, "local rank 0 did not hand over its shared memory: %s",
                    strerror(errno));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    if (!cm || cm->cmsg_type != SCM_RIGHTS)
        return fail(s, "local rank 0 sent no shared memory");
    memcpy(&s->memfd, CMSG_DATA(cm), sizeof(int));
    return map_segment(s);
}

void comm_shm_close(comm_shm *s)
{
    if (!s)
        return;
    for (int i = 0; s->peer && i < s->n - 1; i++)
        if (s->peer[i] >= 0)
            close(s->peer[i]);
    /* A lent slot is the caller's buffer until it exits: the mapping stays
     * (a failed comm is closed under a trainer that still holds it). */
    if (s->base && !s->lent)
        munmap(s->base, s->size);
    if (s->memfd >= 0)
        close(s->memfd);
    free(s->slot);
    free(s->peer);
    free(s);
}

int comm_shm_open(int index, int n, comm_store *store, const char *key, size_t slot_bytes,
                  int timeout_ms, comm_shm **out, char *err, size_t errlen)
{
    comm_shm *s = calloc(1, sizeof *s);
    int rc = -1;
    if (!s || !(s->peer = malloc(sizeof(int) * (size_t)(n > 1 ? n - 1 : 1)))) {
        free(s);
        fmt_cut(err, errlen, "out of memory");
        return -1;
    }
    s->index = index;
    s->n = n;
    s->slot_bytes = slot_bytes < SHM_SLOT_MIN ? SHM_SLOT_MIN : (slot_bytes + 4095) & ~(size_t)4095;
    s->memfd = -1;
    s->timeout_ms = timeout_ms;
    for (int i = 0; i < n - 1; i++)
        s->peer[i] = -1;
    if (index == 0)
        rc = serve(s, store, key);
    else
        rc = join(s, store, key);
    if (rc == 0)
        rc = shm_barrier(s); /* everyone mapped before anyone writes */
    if (rc < 0) {
        fmt_cut(err, errlen, "%s", s->err); /* no handle to keep it on */
        comm_shm_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

/* ---- as a backend of its own (every rank on one node) ---- */

static int ops_allreduce(void *b, float *buf, size_t count, int average)
{
    comm_shm *s = b;
    return comm_shm_allreduce(s, buf, count, average ? 1.0f / (float)s->n : 1.0f);
}

static const char *ops_errmsg(const void *b)
{
    return comm_shm_errmsg(b);
}

static int ops_broadcast(void *b, void *buf, size_t bytes, int root)
{
    return comm_shm_broadcast(b, buf, bytes, root);
}

static int ops_barrier(void *b)
{
    return comm_shm_barrier(b);
}

static void ops_destroy(void *b)
{
    comm_shm_close(b);
}

const struct comm_backend_ops comm_shm_ops = {ops_allreduce, ops_broadcast, ops_barrier,
                                              ops_errmsg, ops_destroy};
