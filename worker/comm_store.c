/*
 * comm_store.c: the rendezvous store (see comm_store.h).
 *
 * The server owns its listening socket, its connections and the key table;
 * one thread runs a poll() loop over them.  Each connection reads one frame
 * at a time; its length is checked against the limits before anything is
 * allocated, and a frame that breaks them closes that connection only.  A
 * WAIT parks its connection until the key is set or its deadline passes.
 *
 * The client is blocking, with a receive/send timeout on its socket so that
 * no call outlives its deadline by much.
 */
#include "worker/comm_store.h"
#include "lib/fmt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/clock.h"

#define HDR 4u
#define BODY_MIN 4u  /* op, pad, key_len */
#define BODY_MAX (BODY_MIN + COMM_STORE_MAX_KEY + COMM_STORE_MAX_VALUE)
#define MAX_CONNS 1024

/* ---- shared helpers ---------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);  p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) << 32 | get32(p + 4);
}

size_t comm_store_frame(uint8_t *buf, size_t cap, int op, const char *key,
                        const void *val, size_t vlen)
{
    size_t klen = strlen(key);
    size_t body = BODY_MIN + klen + vlen;
    if (klen > COMM_STORE_MAX_KEY || vlen > COMM_STORE_MAX_VALUE || HDR + body > cap)
        return 0;
    put32(buf, (uint32_t)body);
    buf[4] = (uint8_t)op;
    buf[5] = 0;
    buf[6] = (uint8_t)(klen >> 8);
    buf[7] = (uint8_t)klen;
    memcpy(buf + 8, key, klen);
    if (vlen)
        memcpy(buf + 8 + klen, val, vlen);
    return HDR + body;
}

/* ---- server ------------------------------------------------------------ */

struct entry {
    char *key;
    uint8_t *val;
    size_t len;
};

struct conn {
    int fd;
    uint8_t hdr[HDR];
    size_t hdr_got;
    uint8_t *body;       /* allocated once the header is checked */
    size_t body_len, body_got;
    uint8_t *out;        /* pending response bytes */
    size_t out_len, out_sent;
    char *wait_key;      /* parked WAIT, or NULL */
    int64_t wait_deadline;
    int authed;          /* presented the server's secret */
};

struct comm_store_server {
    int lfd;
    int port;
    int stop_pipe[2];
    pthread_t thread;
    struct conn *conns[MAX_CONNS];
    int nconns;
    struct entry *ents;
    size_t nents, cap;
    int detached;  /* comm_store_server_detached: no socket, no thread */
    char *secret;  /* what a client must present first; NULL: none */
    size_t secret_len;
};

static struct entry *find(comm_store_server *s, const char *key)
{
    for (size_t i = 0; i < s->nents; i++)
        if (!strcmp(s->ents[i].key, key))
            return &s->ents[i];
    return NULL;
}

/* Stores a copy of val under key.  Returns the entry or NULL (no memory, or
 * the key table is full). */
static struct entry *put(comm_store_server *s, const char *key, const uint8_t *val, size_t len)
{
    struct entry *e = find(s, key);
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return NULL;
    if (len)
        memcpy(copy, val, len);
    if (!e) {
        if (s->nents == COMM_STORE_MAX_KEYS) {
            free(copy);
            return NULL;
        }
        if (s->nents == s->cap) {
            size_t ncap = s->cap ? s->cap * 2 : 64;
            struct entry *n = realloc(s->ents, ncap * sizeof *n);
            if (!n) {
                free(copy);
                return NULL;
            }
            s->ents = n;
            s->cap = ncap;
        }
        e = &s->ents[s->nents];
        e->key = strdup(key);
        if (!e->key) {
            free(copy);
            return NULL;
        }
        e->val = NULL;
        s->nents++;
    }
    free(e->val);
    e->val = copy;
    e->len = len;
    return e;
}

static void conn_free(struct conn *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    free(c->body);
    free(c->out);
    free(c->wait_key);
    free(c);
}

/* Queues a response.  Returns 0, or -1 when out of memory (the caller closes
 * the connection). */
static int reply(struct conn *c, int status, const void *payload, size_t len)
{
    uint8_t *n = realloc(c->out, c->out_len + HDR + 1 + len);
    if (!n)
        return -1;
    c->out = n;
    put32(n + c->out_len, (uint32_t)(1 + len));
    n[c->out_len + HDR] = (uint8_t)status;
    if (len)
        memcpy(n + c->out_len + HDR + 1, payload, len);
    c->out_len += HDR + 1 + len;
    return 0;
}

/* Equality of two buffers of n bytes in a time that does not depend on
 * where they differ. */
static int same_bytes(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

/* AUTH: the server's secret, or the connection closes.  0 or -1. */
static int authenticate(comm_store_server *s, struct conn *c, const uint8_t *val, size_t vlen)
{
    if (s->secret && (vlen != s->secret_len || !same_bytes(val, (const uint8_t *)s->secret, vlen)))
        return -1;
    c->authed = 1;
    return reply(c, COMM_STORE_OK, NULL, 0);
}

/* Handles one complete frame.  Returns 0, or -1 to close the connection. */
static int handle(comm_store_server *s, struct conn *c)
{
    const uint8_t *b = c->body;
    size_t klen = (size_t)b[2] << 8 | b[3];
    char key[COMM_STORE_MAX_KEY + 1];
    const uint8_t *val;
    size_t vlen;

    if (b[1] != 0 || klen == 0 || klen > COMM_STORE_MAX_KEY || BODY_MIN + klen > c->body_len)
        return -1;
    memcpy(key, b + BODY_MIN, klen);
    key[klen] = '\0';
    if (memchr(key, '\0', klen))
        return -1;
    val = b + BODY_MIN + klen;
    vlen = c->body_len - BODY_MIN - klen;
    if (b[0] == COMM_STORE_AUTH)
        return authenticate(s, c, val, vlen);
    if (s->secret && !c->authed)
        return -1; /* nothing is read or written before the secret */

    switch (b[0]) {
    case COMM_STORE_SET:
        if (!put(s, key, val, vlen))
            return -1;
        return reply(c, COMM_STORE_OK, NULL, 0);
    case COMM_STORE_GET: {
        struct entry *e = find(s, key);
        if (!e)
            return reply(c, COMM_STORE_NOTFOUND, NULL, 0);
        return reply(c, COMM_STORE_OK, e->val, e->len);
    }
    case COMM_STORE_WAIT:
        if (vlen != 4)
            return -1;
        if (find(s, key))
            return reply(c, COMM_STORE_OK, NULL, 0);
        c->wait_key = strdup(key);
        if (!c->wait_key)
            return -1;
        c->wait_deadline = util_mono_ms() + get32(val);
        return 0;
    case COMM_STORE_ADD: {
        struct entry *e = find(s, key);
        int64_t v = 0;
        uint8_t enc[8];
        if (vlen != 8 || (e && e->len != 8))
            return -1;
        if (e)
            v = (int64_t)get64(e->val);
        v = (int64_t)((uint64_t)v + get64(val));
        put64(enc, (uint64_t)v);
        if (!put(s, key, enc, 8))
            return -1;
        return reply(c, COMM_STORE_OK, enc, 8);
    }
    default:
        return -1;
    }
}

/* Accounts for n bytes that just landed in c's header or body buffer: a
 * whole header is checked against the limits before its body is allocated,
 * a whole body is handled.  Returns 0, or -1 to close the connection. */
static int conn_got(comm_store_server *s, struct conn *c, size_t n)
{
    if (c->hdr_got < HDR) {
        c->hdr_got += n;
        if (c->hdr_got < HDR)
            return 0;
        c->body_len = get32(c->hdr);
        if (c->body_len < BODY_MIN || c->body_len > BODY_MAX)
            return -1;
        c->body = malloc(c->body_len);
        if (!c->body)
            return -1;
        c->body_got = 0;
        return 0;
    }
    c->body_got += n;
    if (c->body_got < c->body_len)
        return 0;
    if (handle(s, c) < 0)
        return -1;
    free(c->body);
    c->body = NULL;
    c->hdr_got = 0;
    return 0;
}

/* Where the next bytes of c go, and how many fit. */
static uint8_t *conn_room(struct conn *c, size_t *room)
{
    if (c->hdr_got < HDR) {
        *room = HDR - c->hdr_got;
        return c->hdr + c->hdr_got;
    }
    *room = c->body_len - c->body_got;
    return c->body + c->body_got;
}

/* Reads what is there.  Returns 0, or -1 to close the connection (EOF, an
 * error, or a frame that breaks the limits). */
static int conn_read(comm_store_server *s, struct conn *c)
{
    for (;;) {
        size_t room;
        uint8_t *at;
        ssize_t n;
        if (c->wait_key)
            return 0;  /* one request at a time: the parked WAIT first */
        at = conn_room(c, &room);
        n = recv(c->fd, at, room, 0);
        if (n == 0)
            return -1;
        if (n < 0)
            return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        if (conn_got(s, c, (size_t)n) < 0)
            return -1;
    }
}

comm_store_server *comm_store_server_detached(void)
{
    comm_store_server *s = calloc(1, sizeof *s);
    if (s) {
        s->lfd = -1;
        s->stop_pipe[0] = s->stop_pipe[1] = -1;
        s->detached = 1;
    }
    return s;
}

int comm_store_feed(comm_store_server *s, const uint8_t *p, size_t n)
{
    struct conn *c = calloc(1, sizeof *c);
    int rc = 0;
    if (!c)
        return -1;
    c->fd = -1;
    while (n > 0 && rc == 0) {
        size_t room;
        uint8_t *at = conn_room(c, &room);
        if (room > n)
            room = n;
        memcpy(at, p, room);
        p += room;
        n -= room;
        rc = conn_got(s, c, room);
        if (rc == 0 && c->wait_key) {
            /* A parked WAIT: settled at once, as if its deadline passed. */
            free(c->wait_key);
            c->wait_key = NULL;
            rc = reply(c, COMM_STORE_TIMEOUT, NULL, 0);
        }
    }
    conn_free(c);
    return rc;
}

static int conn_write(struct conn *c)
{
    while (c->out_sent < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent, MSG_NOSIGNAL);
        if (n < 0)
            return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        c->out_sent += (size_t)n;
    }
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_sent = 0;
    return 0;
}

/* Answers parked WAITs whose key now exists or whose deadline passed.
 * Returns the ms until the nearest remaining deadline (capped at 1000). */
static int settle_waits(comm_store_server *s)
{
    int64_t now = util_mono_ms(), next = 1000;
    for (int i = 0; i < s->nconns; i++) {
        struct conn *c = s->conns[i];
        int status = -1;
        if (!c->wait_key)
            continue;
        if (find(s, c->wait_key))
            status = COMM_STORE_OK;
        else if (now >= c->wait_deadline)
            status = COMM_STORE_TIMEOUT;
        if (status < 0) {
            if (c->wait_deadline - now < next)
                next = c->wait_deadline - now;
            continue;
        }
        free(c->wait_key);
        c->wait_key = NULL;
        if (reply(c, status, NULL, 0) < 0) {
            shutdown(c->fd, SHUT_RDWR);  /* poll reports it and it is closed */
            continue;
        }
        next = 0;  /* the connection may have more queued requests */
    }
    return (int)(next < 0 ? 0 : next);
}

static void *server_main(void *arg)
{
    comm_store_server *s = arg;
    struct pollfd pfd[MAX_CONNS + 2];
    int timeout = 1000;

    for (;;) {
        int n = 0;
        pfd[n++] = (struct pollfd){ .fd = s->stop_pipe[0], .events = POLLIN };
        pfd[n++] = (struct pollfd){ .fd = s->lfd,
                                    .events = s->nconns < MAX_CONNS ? POLLIN : 0 };
        for (int i = 0; i < s->nconns; i++) {
            struct conn *c = s->conns[i];
            short ev = c->wait_key ? 0 : POLLIN;
            if (c->out_len)
                ev |= POLLOUT;
            pfd[n++] = (struct pollfd){ .fd = c->fd, .events = ev };
        }
        if (poll(pfd, (nfds_t)n, timeout) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents)
            break;
        if (pfd[1].revents & POLLIN) {
            int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            struct conn *c = fd >= 0 ? calloc(1, sizeof *c) : NULL;
            if (c) {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                c->fd = fd;
                s->conns[s->nconns++] = c;
            } else if (fd >= 0) {
                close(fd);
            }
        }
        /* pfd[2 + i] matches conns[i] as they were before the accept. */
        for (int i = n - 3; i >= 0; i--) {
            struct conn *c = s->conns[i];
            short re = pfd[2 + i].revents;
            int bad = 0;
            if (re & (POLLIN | POLLHUP | POLLERR))
                bad = conn_read(s, c) < 0;
            if (!bad && c->out_len)
                bad = conn_write(c) < 0;
            if (bad) {
                conn_free(c);
                s->conns[i] = s->conns[--s->nconns];
            }
        }
        /* A settled WAIT's answer goes out with the next POLLOUT, and any
         * request queued behind it is read with the next POLLIN. */
        timeout = settle_waits(s);
    }
    return NULL;
}

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int comm_store_serve(int port, const char *secret, comm_store_server **out, char *err,
                     size_t errlen)
{
    comm_store_server *s = calloc(1, sizeof *s);
    struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = in6addr_any,
                              .sin6_port = htons((uint16_t)port) };
    socklen_t alen = sizeof a;
    int one = 1, zero = 0;

    if (!s) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    if (secret && secret[0]) {
        s->secret_len = strlen(secret);
        if (s->secret_len > COMM_STORE_MAX_SECRET || !(s->secret = strdup(secret))) {
            seterr(err, errlen, "rendezvous store: a secret of %zu bytes (at most %u)",
                   s->secret_len, COMM_STORE_MAX_SECRET);
            free(s);
            return -1;
        }
    }
    s->lfd = -1;
    s->stop_pipe[0] = s->stop_pipe[1] = -1;
    if (pipe2(s->stop_pipe, O_CLOEXEC) < 0)
        goto fail;
    s->lfd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0)
        goto fail;
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(s->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(s->lfd, 512) < 0 ||
        getsockname(s->lfd, (struct sockaddr *)&a, &alen) < 0)
        goto fail;
    s->port = ntohs(a.sin6_port);
    if (pthread_create(&s->thread, NULL, server_main, s) != 0) {
        errno = EAGAIN;
        goto fail;
    }
    *out = s;
    return 0;
fail:
    seterr(err, errlen, "rendezvous store: cannot listen on port %d: %s", port, strerror(errno));
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->stop_pipe[0] >= 0) {
        close(s->stop_pipe[0]);
        close(s->stop_pipe[1]);
    }
    free(s->secret);
    free(s);
    return -1;
}

int comm_store_server_port(const comm_store_server *s)
{
    return s->port;
}

void comm_store_server_stop(comm_store_server *s)
{
    if (!s)
        return;
    if (!s->detached) {
        if (write(s->stop_pipe[1], "x", 1) != 1)
            abort();  /* a pipe with room cannot refuse one byte */
        pthread_join(s->thread, NULL);
    }
    for (int i = 0; i < s->nconns; i++) {
        conn_write(s->conns[i]);  /* answers already due go out (best effort) */
        conn_free(s->conns[i]);
    }
    for (size_t i = 0; i < s->nents; i++) {
        free(s->ents[i].key);
        free(s->ents[i].val);
    }
    free(s->ents);
    free(s->secret);
    if (!s->detached) {
        close(s->lfd);
        close(s->stop_pipe[0]);
        close(s->stop_pipe[1]);
    }
    free(s);
}

/* ---- client ------------------------------------------------------------ */

struct comm_store {
    int fd;
    char where[300];
    char err[512];
};

const char *comm_store_errmsg(const comm_store *c)
{
    return c->err;
}

static int cfail(comm_store *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    return -1;
}

static void set_timeout(int fd, int ms)
{
    struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int comm_store_connect(const char *host, int port, int timeout_ms,
                       comm_store **out, char *err, size_t errlen)
{
    comm_store *c = calloc(1, sizeof *c);
    int64_t deadline = util_mono_ms() + timeout_ms;
    char portstr[16], last[256] = "no attempt made";
    int delay = 20;

    if (!c) {
        seterr(err, errlen, "out of memory");
        return -1;
    }
    c->fd = -1;
    fmt_cut(c->where, sizeof c->where, "%s:%d", host, port);
    fmt_cut(portstr, sizeof portstr, "%d", port);
    for (;;) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
        int rc = getaddrinfo(host, portstr, &hints, &res);
        if (rc != 0) {
            fmt_cut(last, sizeof last, "cannot resolve %s: %s", host, gai_strerror(rc));
        } else {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
                if (fd < 0)
                    continue;
                set_timeout(fd, 2000);
                if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                    c->fd = fd;
                    break;
                }
                fmt_cut(last, sizeof last, "%s", strerror(errno));
                close(fd);
            }
            freeaddrinfo(res);
        }
        if (c->fd >= 0)
            break;
        int64_t left = deadline - util_mono_ms();
        if (left <= 0) {
            seterr(err, errlen,
                   "cannot reach the rendezvous store of rank 0 at %s within %d ms: %s",
                   c->where, timeout_ms, last);
            free(c);
            return -1;
        }
        usleep((useconds_t)(delay < left ? delay : left) * 1000);
        if (delay < 500)
            delay *= 2;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *out = c;
    return 0;
}

void comm_store_close(comm_store *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

static int io_all(comm_store *c, void *buf, size_t len, int sending)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = sending ? send(c->fd, p, len, MSG_NOSIGNAL) : recv(c->fd, p, len, 0);
        if (n == 0)
            return cfail(c, "rendezvous store at %s closed the connection (rank 0 gone?)",
                         c->where);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return cfail(c, "rendezvous store at %s did not answer in time", c->where);
            return cfail(c, "rendezvous store at %s: %s", c->where, strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* One request and its response.  *payload (malloc'd) and *plen receive the
 * response payload when payload is not NULL.  Returns the status, or -1. */
static int call(comm_store *c, int op, const char *key, const void *val, size_t vlen,
                int wait_ms, void **payload, size_t *plen)
{
    uint8_t hdr[HDR + 1];
    uint8_t *frame, *body = NULL;
    size_t flen, blen;
    int status;

    if (c->fd < 0)
        return -1;
    if (strlen(key) == 0 || strlen(key) > COMM_STORE_MAX_KEY)
        return cfail(c, "rendezvous store: key of %zu bytes (1 to %u allowed)",
                     strlen(key), COMM_STORE_MAX_KEY);
    if (vlen > COMM_STORE_MAX_VALUE)
        return cfail(c, "rendezvous store: value of %zu bytes (at most %u)", vlen,
                     COMM_STORE_MAX_VALUE);
    frame = malloc(HDR + BODY_MIN + strlen(key) + vlen);
    if (!frame)
        return cfail(c, "out of memory");
    flen = comm_store_frame(frame, HDR + BODY_MIN + strlen(key) + vlen, op, key, val, vlen);
    set_timeout(c->fd, wait_ms + 5000);
    if (io_all(c, frame, flen, 1) < 0 || io_all(c, hdr, sizeof hdr, 0) < 0) {
        free(frame);
        return -1;
    }
    free(frame);
    blen = get32(hdr);
    if (blen < 1 || blen > 1 + COMM_STORE_MAX_VALUE)
        return cfail(c, "rendezvous store at %s sent a bad frame", c->where);
    status = hdr[HDR];
    blen -= 1;
    body = malloc(blen ? blen : 1);
    if (!body)
        return cfail(c, "out of memory");
    if (blen && io_all(c, body, blen, 0) < 0) {
        free(body);
        return -1;
    }
    if (payload) {
        *payload = body;
        *plen = blen;
    } else {
        free(body);
    }
    return status;
}

int comm_store_set(comm_store *c, const char *key, const void *val, size_t len)
{
    int st = call(c, COMM_STORE_SET, key, val, len, 0, NULL, NULL);
    return st == COMM_STORE_OK ? 0 : -1;
}

int comm_store_auth(comm_store *c, const char *secret)
{
    size_t n = strlen(secret);
    if (n == 0 || n > COMM_STORE_MAX_SECRET)
        return cfail(c, "rendezvous store: a secret of %zu bytes (1 to %u)", n,
                     COMM_STORE_MAX_SECRET);
    if (call(c, COMM_STORE_AUTH, "auth", secret, n, 0, NULL, NULL) == COMM_STORE_OK)
        return 0;
    return cfail(c, "rendezvous store at %s refused this rank's secret (COHORT_RDZV_SECRET: "
                    "is it a rank of this attempt?)", c->where);
}

int comm_store_wait(comm_store *c, const char *key, int timeout_ms)
{
    uint8_t t[4];
    int st;
    put32(t, (uint32_t)(timeout_ms < 0 ? 0 : timeout_ms));
    st = call(c, COMM_STORE_WAIT, key, t, 4, timeout_ms, NULL, NULL);
    if (st == COMM_STORE_TIMEOUT) {
        fmt_cut(c->err, sizeof c->err,
                 "timed out after %d ms waiting for key '%s' in the rendezvous store at %s",
                 timeout_ms, key, c->where);
        return -1;
    }
    return st == COMM_STORE_OK ? 0 : -1;
}

int comm_store_get(comm_store *c, const char *key, int timeout_ms, void **val, size_t *len)
{
    void *p = NULL;
    size_t n = 0;
    int st;
    if (comm_store_wait(c, key, timeout_ms) < 0)
        return -1;
    st = call(c, COMM_STORE_GET, key, NULL, 0, 0, &p, &n);
    if (st != COMM_STORE_OK) {
        free(p);
        if (st == COMM_STORE_NOTFOUND)
            fmt_cut(c->err, sizeof c->err, "key '%s' vanished from the store", key);
        return -1;
    }
    *val = p;
    *len = n;
    return 0;
}

int comm_store_add(comm_store *c, const char *key, int64_t delta, int64_t *result)
{
    uint8_t d[8];
    void *p = NULL;
    size_t n = 0;
    int st;
    put64(d, (uint64_t)delta);
    st = call(c, COMM_STORE_ADD, key, d, 8, 0, &p, &n);
    if (st != COMM_STORE_OK || n != 8) {
        free(p);
        if (st >= 0)
            return cfail(c, "rendezvous store at %s: add on '%s' refused", c->where, key);
        return -1;
    }
    if (result)
        *result = (int64_t)get64(p);
    free(p);
    return 0;
}
