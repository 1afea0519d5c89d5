/*
 * http: libmicrohttpd glue.  Each request gets a struct req_state that
 * lives from the first callback to the completion notice: it matches the
 * route, authenticates before reading any body, refuses too-large bodies
 * (413 before reading when Content-Length says it is over by more than
 * DRAIN_MAX, else once the body is drained), streams uploads to the
 * handler's file, runs the handler, and parks the connection while a
 * durable write is committed.
 */
#include "server/http.h"
#include "lib/fmt.h"

#include <errno.h>
#include <malloc.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "server/metrics.h"
#include "server/ratelimit.h"

struct req_state;

struct http_server {
    struct MHD_Daemon *d;
    api_ctx *ctx;
    alog *log;
    int port;
    int in_flight; /* requests between first callback and completion */
    int route_metrics, route_console, route_other;
    /* Long polls parked until the desired-state version moves or they time out. */
    pthread_mutex_t wlock;
    pthread_cond_t wcond;
    struct req_state *waiting;
    pthread_t wthread;
    int wstop;
    int stopping; /* shutting down: no long waits, and connections close */
    /* Every open connection, for the header deadline (conn_watch). */
    pthread_mutex_t cwlock;
    struct conn_watch *watched;
    int64_t header_timeout_ms;
    uint64_t cut_slow; /* connections closed at the header deadline */
    int64_t open_conns; /* connections MHD has accepted and not closed */
    ratelimit *rate;   /* per API token; NULL: none */
    double rate_per_s;
    int64_t max_conns;    /* past it a new connection is closed as accepted */
    size_t bodies_max;    /* bytes of JSON bodies held at once (take) */
    size_t bodies_held;   /* atomic */
    size_t unauth_held;   /* of those, without credentials: at most an eighth (atomic) */
};

/*
 * One open connection, from MHD's start notice to its close notice.  While
 * no request is being served on it (since it opened, or since its last
 * request ended) its next request's headers must be whole within
 * header_timeout_ms; the timer thread shuts down the socket of one that is
 * late, and MHD then closes it as it would any connection its peer closed.
 * The fd stays valid while the watch is listed: MHD sends the close notice,
 * which unlists it under cwlock, before it closes the socket.
 */
struct conn_watch {
    MHD_socket fd;
    int64_t since_ms;   /* monotonic: opened, or its last request ended */
    int in_request;     /* headers whole, being served (atomic) */
    int64_t body_until; /* a JSON body must be whole by then (monotonic ms); 0: none (atomic) */
    int cut;
    struct conn_watch *prev, *next;
};

#define HTTP_PATH_MAX 4096

enum phase { P_READ, P_WAIT, P_WRITTEN, P_PARKED, P_RESUMED, P_SENT };

struct req_state {
    http_server *srv;
    struct MHD_Connection *conn;
    const api_route *route;
    int route_idx;
    api_req rq;
    api_resp rs;
    store_principal who;
    store_node node;
    char *pbuf;         /* path captures, owned */
    util_buf body;
    size_t body_held;   /* of srv->bodies_held, given back at completion */
    int reserved;       /* body_held is its whole Content-Length, taken at admit */
    int busy;           /* the budget had no room: drained, answered 503 */
    int unauth;         /* no credentials: its own, smaller share of the budget */
    double cost;        /* what it was charged against its tenant's rate when it came */
    struct conn_watch *watch; /* its connection's, for the body's deadline; NULL: none */
    size_t body_limit;  /* this request's: the API's, or HTTP_UNAUTH_BODY_MAX */
    int64_t t0;
    enum phase phase;
    int write_rc;
    int ready;          /* rs holds the answer: send it at the next chance */
    int admitted;       /* authentication and bounds checked */
    int status;
    size_t bytes;
    char method[8];
    uint64_t wait_version;      /* parked: until wait_node's version is another */
    int64_t wait_node;
    int64_t wait_until;         /* parked: or until this (monotonic ms) */
    struct req_state *wnext;
    int streaming;              /* parked inside a streamed body */
    int observed;               /* counted in the metrics */
};

/* Route labels for metrics: the patterns, then /metrics and "other". */
static const char *labels[METRICS_ROUTES];

static const char *get_value(void *h, enum MHD_ValueKind kind, const char *key)
{
    return MHD_lookup_connection_value(h, kind, key);
}

static const char *get_query(void *h, const char *key)
{
    return get_value(h, MHD_GET_ARGUMENT_KIND, key);
}

static const char *get_header(void *h, const char *key)
{
    return get_value(h, MHD_HEADER_KIND, key);
}

/* MHD's unescaper: api_percent_decode. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return api_percent_decode(s);
}

static void log_line(struct req_state *st, const char *url)
{
    alog *log = st->srv->log;
    if (!log)
        return;
    char path[512], ts[32], line[768];
    size_t n = 0;
    for (const char *p = url; *p && n < sizeof path - 1; p++)
        path[n++] = ((unsigned char)*p < 0x20 || *p == 0x7f || *p == ' ') ? '?' : *p;
    path[n] = '\0';
    util_rfc3339(util_now_ms(), ts);
    /* Formatted outside the log's lock; one put keeps lines whole. */
    fmt_cut(line, sizeof line, "%s %s %s %d %zu %lld %s\n", ts, st->method, path, st->status,
            st->bytes, (long long)(util_mono_us() - st->t0),
            st->rs.tenant[0] ? st->rs.tenant : "-");
    alog_put(log, line, strlen(line));
}

#define STREAM_POLL_MS 250


/* A streamed body, owned by its libmicrohttpd response: freed with it,
 * which may be after the request's state. */
struct stream_ctx {
    api_stream *sm;
    struct req_state *st; /* valid while the body is being sent */
};

/* Content reader of a streamed body.  With nothing ready the connection is
 * suspended and parked for STREAM_POLL_MS, so no thread waits on it. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct stream_ctx *cx = cls;
    struct req_state *st = cx->st;
    ssize_t n = cx->sm->read(cx->sm, buf, max);
    if (n > 0) {
        st->bytes += (size_t)n;
        return n;
    }
    if (n < 0 || __atomic_load_n(&st->srv->stopping, __ATOMIC_ACQUIRE))
        return MHD_CONTENT_READER_END_OF_STREAM;
    http_server *srv = st->srv;
    st->streaming = 1;
    st->wait_version = UINT64_MAX;
    st->wait_until = util_mono_ms() + STREAM_POLL_MS;
    MHD_suspend_connection(st->conn);
    pthread_mutex_lock(&srv->wlock);
    st->wnext = srv->waiting;
    srv->waiting = st;
    pthread_mutex_unlock(&srv->wlock);
    return 0;
}

static void stream_done(void *cls)
{
    struct stream_ctx *cx = cls;
    cx->sm->done(cx->sm);
    free(cx);
}

static enum MHD_Result respond(struct req_state *st)
{
    api_resp *rs = &st->rs;
    struct MHD_Response *r;
    if (rs->stream) {
        struct stream_ctx *cx = malloc(sizeof *cx);
        r = cx ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, stream_read, cx,
                                                   stream_done)
               : NULL;
        if (r) {
            cx->sm = rs->stream;
            cx->st = st;
            rs->stream = NULL; /* the response owns it now */
        } else {
            free(cx);
        }
        st->bytes = 0;
    } else if (rs->fd >= 0) {
        r = MHD_create_response_from_fd_at_offset64((uint64_t)rs->fsize, rs->fd,
                                                    (uint64_t)rs->foffset);
        if (r)
            rs->fd = -1; /* libmicrohttpd closes it */
        st->bytes = (size_t)rs->fsize;
        /* A download costs its tenant one more per MiB, as an upload does:
         * its size is known only now, so what the request did not pay for
         * when it came (a log read pays for its limit) is charged now. */
        double due = 1.0 + (double)(rs->fsize >> 20);
        if (r && st->rq.who && st->srv->rate && due > st->cost)
            ratelimit_charge(st->srv->rate, st->who.user.tenant_id, due - st->cost,
                             util_mono_ms());
    } else {
        r = MHD_create_response_from_buffer(rs->len, rs->body, MHD_RESPMEM_MUST_FREE);
        if (r)
            rs->body = NULL;
        st->bytes = rs->len;
    }
    if (!r)
        return MHD_NO;
    if (rs->ctype)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, rs->ctype);
    if (rs->location[0])
        MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, rs->location);
    if (rs->replayed)
        MHD_add_response_header(r, "Idempotent-Replayed", "true");
    if (rs->xname)
        MHD_add_response_header(r, rs->xname, rs->xvalue);
    if (__atomic_load_n(&st->srv->stopping, __ATOMIC_ACQUIRE))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, rs->cache ? rs->cache : "no-store");
    MHD_add_response_header(r, "Content-Security-Policy", API_CSP);
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    if (rs->status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    st->status = rs->status ? rs->status : 500;
    /* Counted now, so a client that asks /metrics next sees its request. */
    metrics_observe(st->route_idx, st->status, util_mono_us() - st->t0);
    st->observed = 1;
    enum MHD_Result ret = MHD_queue_response(st->conn, (unsigned)st->status, r);
    MHD_destroy_response(r);
    st->phase = P_SENT;
    return ret;
}

static void write_done(void *arg, store_rc rc)
{
    struct req_state *st = arg;
    st->write_rc = rc;
    __atomic_store_n(&st->phase, P_WRITTEN, __ATOMIC_RELEASE);
    MHD_resume_connection(st->conn);
}

/* Whether a parked request is due: its node's version moved (to any other
 * value: an agent may bring one from another cohortd), its time is up, or
 * it streams (a stream looks again at every chance). */
static int due(http_server *srv, const struct req_state *st, int64_t now)
{
    return st->streaming || now >= st->wait_until ||
           sched_version(srv->ctx->sched, st->wait_node) != st->wait_version;
}

/* Resumes every parked request that is due.  Called with wlock held. */
static void wake_due(http_server *srv, int64_t now)
{
    struct req_state **pp = &srv->waiting;
    while (*pp) {
        struct req_state *st = *pp;
        if (due(srv, st, now)) {
            *pp = st->wnext;
            if (!st->streaming)
                st->phase = P_RESUMED;
            MHD_resume_connection(st->conn);
        } else {
            pp = &st->wnext;
        }
    }
}

static void on_bump(void *arg)
{
    http_server *srv = arg;
    pthread_mutex_lock(&srv->wlock);
    wake_due(srv, util_mono_ms());
    pthread_mutex_unlock(&srv->wlock);
}

/* Shuts down every connection whose request headers, or whose JSON body,
 * are overdue: a client that trickles either holds memory and a place in
 * the bodies' budget for nothing. */
static void cut_slow_headers(http_server *srv, int64_t now)
{
    pthread_mutex_lock(&srv->cwlock);
    for (struct conn_watch *w = srv->watched; w; w = w->next) {
        int64_t body_until = __atomic_load_n(&w->body_until, __ATOMIC_ACQUIRE);
        int late_body = body_until && now > body_until;
        if (w->cut || (!late_body && (__atomic_load_n(&w->in_request, __ATOMIC_ACQUIRE) ||
                                      now - __atomic_load_n(&w->since_ms, __ATOMIC_ACQUIRE) <
                                          srv->header_timeout_ms)))
            continue;
        shutdown(w->fd, SHUT_RDWR);
        w->cut = 1;
        srv->cut_slow++;
    }
    pthread_mutex_unlock(&srv->cwlock);
}

/* The server's timer thread: answers long polls that are due, and cuts
 * connections whose headers are overdue, every 200 ms. */
static void *waiter_main(void *arg)
{
    http_server *srv = arg;
    int64_t trimmed = util_mono_ms();
    pthread_mutex_lock(&srv->wlock);
    while (!srv->wstop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&srv->wcond, &srv->wlock, &ts);
        int64_t now = util_mono_ms();
        wake_due(srv, srv->wstop ? INT64_MAX : now);
        pthread_mutex_unlock(&srv->wlock);
        cut_slow_headers(srv, now);
        /* What a flood of connections made the allocator keep goes back to
         * the system once they are gone. */
        if (now - trimmed > 10000) {
            malloc_trim(0);
            trimmed = now;
        }
        pthread_mutex_lock(&srv->wlock);
    }
    wake_due(srv, INT64_MAX);
    pthread_mutex_unlock(&srv->wlock);
    return NULL;
}

/* Parks a long poll; the version is checked again under the lock, so a
 * bump between the handler's look and this never goes unnoticed. */
static void park(struct req_state *st)
{
    http_server *srv = st->srv;
    st->wait_version = st->rs.wait_version;
    st->wait_node = st->rs.wait_node;
    st->wait_until = util_mono_ms() + st->rs.wait_ms;
    st->rs.wait_ms = 0;
    st->ready = 0;
    st->phase = P_PARKED;
    MHD_suspend_connection(st->conn);
    pthread_mutex_lock(&srv->wlock);
    if (due(srv, st, util_mono_ms())) {
        st->phase = P_RESUMED;
        MHD_resume_connection(st->conn);
    } else {
        st->wnext = srv->waiting;
        srv->waiting = st;
    }
    pthread_mutex_unlock(&srv->wlock);
}

/* Runs the handler (or the upload's finish) and sends, or parks for a write. */
static enum MHD_Result complete(struct req_state *st)
{
    if (!st->ready) {
        if (st->rs.upload) {
            api_upload *up = st->rs.upload;
            up->finish(st->srv->ctx, &st->rq, &st->rs, up);
        } else {
            st->rq.body = st->body.buf ? st->body.buf : "";
            st->rq.body_len = st->body.len;
            st->route->fn(st->srv->ctx, &st->rq, &st->rs);
        }
        st->ready = 1;
    }
    if (st->rs.wait_ms > 0) {
        if (!__atomic_load_n(&st->srv->stopping, __ATOMIC_ACQUIRE)) {
            park(st);
            return MHD_YES;
        }
        /* Shutting down: answer the long poll now. */
        st->rs.wait_ms = 0;
        st->rq.waited = 1;
        st->ready = 0;
        return complete(st);
    }
    if (st->rs.write_fn) {
        store_write_fn fn = st->rs.write_fn;
        st->rs.write_fn = NULL;
        st->phase = P_WAIT;
        MHD_suspend_connection(st->conn);
        int rc = store_submit_many(st->srv->ctx->st, fn, st->rs.write_many, st->rs.write_ctx,
                                   write_done, st);
        if (rc != 0) {
            MHD_resume_connection(st->conn);
            st->write_rc = rc;
            st->phase = P_WRITTEN;
        }
        return MHD_YES;
    }
    return respond(st);
}

static void metrics_answer(struct req_state *st)
{
    http_server *srv = st->srv;
    util_buf b = {0};
    metrics_render(&b, srv->ctx->st, srv->ctx->sched);
    pthread_mutex_lock(&srv->cwlock);
    int64_t open = srv->open_conns;
    uint64_t cut = srv->cut_slow;
    pthread_mutex_unlock(&srv->cwlock);
    util_buf_printf(&b,
                    "# HELP cohort_http_connections Connections open now.\n"
                    "# TYPE cohort_http_connections gauge\n"
                    "cohort_http_connections %lld\n"
                    "# HELP cohort_http_connections_cut_total Connections closed because their "
                    "request headers missed the header deadline.\n"
                    "# TYPE cohort_http_connections_cut_total counter\n"
                    "cohort_http_connections_cut_total %llu\n",
                    (long long)open, (unsigned long long)cut);
    st->rs.status = b.oom ? 500 : 200;
    st->rs.body = b.buf;
    st->rs.len = b.len;
    st->rs.ctype = "text/plain; version=0.0.4";
    st->ready = 1;
}

static int content_type_json(const char *ct)
{
    if (!ct)
        return 0;
    size_t n = strcspn(ct, ";");
    while (n > 0 && ct[n - 1] == ' ')
        n--;
    return n == 16 && !strncasecmp(ct, "application/json", 16);
}

/* Matches the route; answers 404/405 and /metrics.  No I/O. */
static void route(struct req_state *st, const char *url, const char *method)
{
    http_server *srv = st->srv;
    enum api_method m = api_method_parse(method);
    fmt_cut(st->method, sizeof st->method, "%s", method); /* a label for the access log */
    st->rq.method = m;
    st->rq.path = url;
    st->rq.query = get_query;
    st->rq.header = get_header;
    st->rq.h = st->conn;
    st->route_idx = srv->route_other;
    if (m == API_GET && !strcmp(url, "/metrics")) {
        /* A platform admin's: it names tenants and what they spend. */
        st->route_idx = srv->route_metrics;
        store_read_begin(srv->ctx->st);
        int ok = api_authenticate_admin(srv->ctx,
                                        get_header(st->conn, MHD_HTTP_HEADER_AUTHORIZATION),
                                        &st->who, &st->rs) == 0;
        store_read_end(srv->ctx->st);
        if (ok)
            metrics_answer(st);
        else
            st->ready = 1;
        return;
    }
    int other = 0;
    size_t ulen = strlen(url);
    if (ulen > HTTP_PATH_MAX) {
        api_error(&st->rs, 414, "uri_too_long", NULL, "paths are at most %d bytes", HTTP_PATH_MAX);
        st->ready = 1;
        return;
    }
    st->pbuf = malloc(ulen + API_MAX_PARAMS + 1);
    if (!st->pbuf) {
        api_error(&st->rs, 500, "internal", NULL, "out of memory");
        st->ready = 1;
        return;
    }
    st->route = api_route_match(m, url, &st->rq, st->pbuf, &other);
    if (!st->route) {
        if (!other && m == API_GET && api_web_serve(srv->ctx, url, &st->rs)) {
            st->route_idx = srv->route_console;
            st->ready = 1;
            return;
        }
        if (other)
            api_error(&st->rs, 405, "method_not_allowed", NULL, "%s is not allowed on %.200s",
                      method, url);
        else
            api_error(&st->rs, 404, "not_found", NULL, "no such route: %.200s", url);
        st->ready = 1;
        return;
    }
    st->route_idx = (int)(st->route - api_routes());
}

/* A body over its bound by no more than this is still read, and dropped,
 * before the 413 goes out: answered mid-body, libmicrohttpd 0.9.75 closes a
 * socket with unread data, the kernel resets the connection, and a client
 * may lose the answer (seen once in bad_input).  Past it the answer comes
 * from the headers alone, as for a body nobody should wait for. */
#define DRAIN_MAX (16LL << 20)

/*
 * What a request costs against its tenant's rate: 1, an upload one more
 * per MiB it says it brings, and for a GET, one
 * more for every 50 rows of a page past the first 50 (?limit=200 costs 4)
 * or, for a log, every MiB past the first,
 * 5 for usage and invoices (aggregates over a month) and file listings
 * with their sums (?sha256=true reads up to a GiB), and 20 for an export
 * (Accept: text/csv).  A download costs one more per MiB it sends, charged
 * once its size is known (respond()).
 */
static double request_cost(const struct req_state *st)
{
    if (st->route && st->route->body == API_BODY_UPLOAD) { /* one more per MiB */
        const char *cl = get_header(st->conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
        long long n = cl ? strtoll(cl, NULL, 10) : 0;
        if (n > st->srv->ctx->upload_limit)
            return 1.0; /* refused for its size, not its rate */
        return 1.0 + (n > 0 ? (double)(n >> 20) : 0.0);
    }
    if (st->rq.method != API_GET)
        return 1.0;
    double cost = 1.0;
    const char *limit = get_query(st->conn, "limit");
    long n = limit ? strtol(limit, NULL, 10) : 0;
    if (strstr(st->rq.path, "/logs")) /* there limit is bytes: one more per MiB past the first */
        cost += n > (1L << 20) ? (double)((n - 1) >> 20) : 0.0;
    else if (n > 50)
        cost += (double)((n - 1) / 50);
    const char *sums = get_query(st->conn, "sha256");
    if (!strncmp(st->rq.path, "/v1/usage", 9) || !strncmp(st->rq.path, "/v1/invoices", 12) ||
        (sums && !strcmp(sums, "true")))
        cost = cost < 5.0 ? 5.0 : cost;
    const char *accept = get_header(st->conn, MHD_HTTP_HEADER_ACCEPT);
    if (accept && strstr(accept, "text/csv"))
        cost = 20.0;
    return cost;
}

/* A request without credentials (the registry's token endpoint, agent
 * registration, health) counts against the rate of its client's address,
 * a bucket of its own beside the tenants' (an IPv6 client's /64, the least
 * one host is given, as fail2ban and nginx's limits take it): 1 answered
 * 429, or 0. */
static int too_fast_unauth(struct req_state *st, api_resp *rs)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(st->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = NULL;
    size_t n = 0;
    if (sa && sa->sa_family == AF_INET) {
        p = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
        n = 4;
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        int v4 = IN6_IS_ADDR_V4MAPPED(a6);
        p = (const unsigned char *)a6 + (v4 ? 12 : 0);
        n = v4 ? 4 : 8;
    }
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    /* negative: never a tenant's key */
    int64_t key = -(int64_t)(h >> 2) - 1;
    int64_t wait_ms = ratelimit_take_n(st->srv->rate, key, 1.0, util_mono_ms());
    if (wait_ms <= 0)
        return 0;
    int64_t secs = (wait_ms + 999) / 1000;
    api_error(rs, 429, "rate_limited", NULL,
              "more than %.0f requests a second from this address: retry in %lld s",
              st->srv->rate_per_s, (long long)secs);
    rs->xname = "Retry-After";
    fmt_cut(rs->xvalue, sizeof rs->xvalue, "%lld", (long long)secs);
    return 1;
}

/* Takes n bytes of the bodies' budget (and, for a request without
 * credentials, of their eighth of it, so that they can never fill the
 * rest): 0, or -1 (nothing taken). */
static int budget_take(http_server *srv, size_t n, int unauth)
{
    if (unauth && __atomic_add_fetch(&srv->unauth_held, n, __ATOMIC_RELAXED) > srv->bodies_max / 8) {
        __atomic_sub_fetch(&srv->unauth_held, n, __ATOMIC_RELAXED);
        return -1;
    }
    if (__atomic_add_fetch(&srv->bodies_held, n, __ATOMIC_RELAXED) <= srv->bodies_max)
        return 0;
    __atomic_sub_fetch(&srv->bodies_held, n, __ATOMIC_RELAXED);
    if (unauth)
        __atomic_sub_fetch(&srv->unauth_held, n, __ATOMIC_RELAXED);
    return -1;
}

static void budget_give(http_server *srv, size_t n, int unauth)
{
    __atomic_sub_fetch(&srv->bodies_held, n, __ATOMIC_RELAXED);
    if (unauth)
        __atomic_sub_fetch(&srv->unauth_held, n, __ATOMIC_RELAXED);
}

/* Who calls, and whether the caller's rate lets the request in: 0, or -1
 * with the answer in st->rs. */
static int admit_caller(struct req_state *st)
{
    http_server *srv = st->srv;
    api_resp *rs = &st->rs;
    if (st->route->auth == API_AUTH_USER) {
        if (api_authenticate(srv->ctx, get_header(st->conn, MHD_HTTP_HEADER_AUTHORIZATION),
                             &st->who, rs) != 0)
            return -1;
        st->rq.who = &st->who;
        /* One budget per tenant, whatever the number of its tokens; a
         * request costs what it makes the server read (request_cost). */
        st->cost = request_cost(st);
        int64_t wait_ms = srv->rate ? ratelimit_take_n(srv->rate, st->who.user.tenant_id,
                                                       st->cost, util_mono_ms())
                                    : 0;
        if (wait_ms > 0) {
            int64_t secs = (wait_ms + 999) / 1000;
            api_error(rs, 429, "rate_limited", NULL,
                      "the tenant's requests passed %.0f a second (a page of many rows or "
                      "an export counts as several): retry in %lld s",
                      srv->rate_per_s, (long long)secs);
            rs->xname = "Retry-After";
            fmt_cut(rs->xvalue, sizeof rs->xvalue, "%lld", (long long)secs);
            return -1;
        }
    } else if (st->route->auth == API_AUTH_NONE && srv->rate && too_fast_unauth(st, rs)) {
        return -1;
    } else if (st->route->auth == API_AUTH_NODE) {
        if (api_authenticate_node(srv->ctx, get_header(st->conn, MHD_HTTP_HEADER_AUTHORIZATION),
                                  &st->node, rs) != 0)
            return -1;
        st->rq.node = &st->node;
    }
    return 0;
}

/* A JSON or raw body of len bytes: refused past its bound (from the
 * headers, or once drained), or given its room in the shared budget.  0,
 * or -1 answered. */
static int admit_json(struct req_state *st, long long len)
{
    api_resp *rs = &st->rs;
    /* Up to DRAIN_MAX an oversized body is read and dropped (take), and
     * answered 413 at its end; past that, from the headers alone. */
    if (len > (long long)st->body_limit && (st->unauth || len > DRAIN_MAX)) {
        api_error(rs, 413, "too_large", NULL, "the body is larger than %zu bytes",
                  st->body_limit);
        return -1;
    }
    if (st->route->body == API_BODY_JSON && len > 0 &&
        !content_type_json(get_header(st->conn, MHD_HTTP_HEADER_CONTENT_TYPE))) {
        api_error(rs, 415, "unsupported_media_type", NULL,
                  "send the body as Content-Type: application/json");
        return -1;
    }
    /* A body of known length takes its room in the budget whole, or
     * none: clients that all get part of it would all be refused. */
    if (len > 0 && len <= (long long)st->body_limit) {
        if (budget_take(st->srv, (size_t)len, st->unauth) == 0) {
            st->body_held = (size_t)len;
            st->reserved = 1;
        } else {
            st->busy = 1;
        }
    }
    return 0;
}

/* Authenticates and checks the body's bounds before any of it is read;
 * an upload route opens its file here. */
static void admit(struct req_state *st)
{
    http_server *srv = st->srv;
    api_resp *rs = &st->rs;
    st->admitted = 1;
    if (admit_caller(st) != 0) {
        st->ready = 1;
        return;
    }
    const char *cl = get_header(st->conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
    long long len = cl ? strtoll(cl, NULL, 10) : 0;
    /* Before credentials, a few KiB: whoever has none is refused from the
     * headers (no drain), and a chunked body is cut there (take). */
    st->unauth = st->route->auth == API_AUTH_NONE;
    st->body_limit = st->unauth ? HTTP_UNAUTH_BODY_MAX : srv->ctx->body_limit;
    /* Both framings at once is how requests are smuggled: refused. */
    if (cl && get_header(st->conn, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        api_error(rs, 400, "bad_request", NULL,
                  "send Content-Length or Transfer-Encoding, not both");
        st->ready = 1;
    } else if (st->route->body == API_BODY_JSON || st->route->body == API_BODY_RAW) {
        if (admit_json(st, len) != 0)
            st->ready = 1;
    } else if (st->route->body == API_BODY_UPLOAD) {
        if (len > srv->ctx->upload_limit) {
            api_error(rs, 413, "too_large", NULL, "the file is larger than %lld bytes",
                      (long long)srv->ctx->upload_limit);
            st->ready = 1;
            return;
        }
        st->route->fn(srv->ctx, &st->rq, rs); /* opens the upload, or answers */
        if (!rs->upload)
            st->ready = 1;
    } else if (len > 0 || get_header(st->conn, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        api_error(rs, 413, "too_large", NULL, "this route takes no body");
        st->ready = 1;
    }
}

/* The request says a body follows. */
static int has_body(struct MHD_Connection *c)
{
    const char *cl = get_header(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return (cl && strtoll(cl, NULL, 10) > 0) ||
           get_header(c, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
}

/* Takes one chunk of body. */
static void take(struct req_state *st, const char *data, size_t n)
{
    api_resp *rs = &st->rs;
    if (st->ready)
        return;
    if (rs->upload) {
        api_upload *up = rs->upload;
        int big = up->written + (int64_t)n > up->limit;
        if (big || (up->reserve && up->reserve(up, (int64_t)n) != 0)) {
            up->abort(up);
            free(up);
            rs->upload = NULL;
            if (big)
                api_error(rs, 413, "too_large", NULL, "the file is larger than %lld bytes",
                          (long long)st->srv->ctx->upload_limit);
            else
                api_error(rs, 507, "storage_quota_exceeded", NULL,
                          "the tenant's storage quota has no room for this file (GET "
                          "/v1/quota)");
            st->ready = 1;
            return;
        }
        while (n > 0) {
            ssize_t w = write(up->fd, data, n);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                int e = errno;
                up->abort(up);
                free(up);
                rs->upload = NULL;
                api_error(rs, e == ENOSPC ? 507 : 500, e == ENOSPC ? "no_space" : "internal",
                          NULL, "cannot write the file: %s", strerror(e));
                st->ready = 1;
                return;
            }
            up->written += w;
            data += w;
            n -= (size_t)w;
        }
        return;
    }
    if (st->body.len + n > st->body_limit) {
        api_error(rs, 413, "too_large", NULL, "the body is larger than %zu bytes",
                  st->body_limit);
        st->ready = 1;
        return;
    }
    /* Every body being read shares one budget: past it, refused, not kept
     * (a chunked one takes its room as it comes). */
    if (st->reserved && st->body.len + n > st->body_held) {
        api_error(rs, 400, "bad_request", NULL, "the body is longer than its Content-Length");
        st->ready = 1;
        return;
    }
    if (st->busy || (!st->reserved && budget_take(st->srv, n, st->unauth) != 0)) {
        api_error(rs, 503, "busy", NULL,
                  "the server is reading too many request bodies at once: retry in 1 s");
        rs->xname = "Retry-After";
        fmt_cut(rs->xvalue, sizeof rs->xvalue, "1");
        st->ready = 1;
        return;
    }
    if (!st->reserved)
        st->body_held += n;
    util_buf_append(&st->body, data, n);
    if (st->body.oom) {
        api_error(rs, 500, "internal", NULL, "out of memory");
        st->ready = 1;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    http_server *srv = cls;
    struct req_state *st = *con_cls;
    if (!st) {
        /* The headers are whole: the header deadline stops counting. */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        struct conn_watch *w = ci ? ci->socket_context : NULL;
        if (w)
            __atomic_store_n(&w->in_request, 1, __ATOMIC_RELEASE);
        st = calloc(1, sizeof *st);
        if (!st)
            return MHD_NO;
        st->srv = srv;
        st->conn = conn;
        st->t0 = util_mono_us();
        st->rs.fd = -1;
        *con_cls = st;
        __atomic_add_fetch(&srv->in_flight, 1, __ATOMIC_RELAXED);
        route(st, url, method);
        if (!has_body(conn))
            return MHD_YES; /* answered in the next callback, keeping the connection alive */
        /* A body follows: refuse it, when it must be refused, before reading it. */
        if (!st->ready) {
            store_read_begin(srv->ctx->st);
            admit(st);
            store_read_end(srv->ctx->st);
        }
        /* A JSON body (an upload streams to disk instead) must be whole in
         * HTTP_BODY_TIMEOUT_MS; one sent without credentials, in the header
         * deadline. */
        st->watch = w;
        if (w && st->route &&
            (st->route->body == API_BODY_JSON || st->route->body == API_BODY_RAW))
            __atomic_store_n(&w->body_until,
                             util_mono_ms() + (st->unauth ? srv->header_timeout_ms
                                                          : HTTP_BODY_TIMEOUT_MS),
                             __ATOMIC_RELEASE);
        return st->ready ? respond(st) : MHD_YES;
    }
    if (st->phase == P_SENT)
        return MHD_YES;
    if (*upload_data_size) {
        /* Past its bound a chunked body is drained and dropped, and answered
         * 413 at its end: libmicrohttpd 0.9.75 resets a connection answered
         * mid-body instead of sending the answer. */
        take(st, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (st->watch) /* the body is whole: its deadline is over */
        __atomic_store_n(&st->watch->body_until, 0, __ATOMIC_RELEASE);
    enum phase ph = __atomic_load_n(&st->phase, __ATOMIC_ACQUIRE);
    if (ph == P_WAIT || ph == P_PARKED)
        return MHD_YES;
    if (ph == P_RESUMED) {
        st->phase = P_READ;
        st->rq.waited = 1;
    }
    /* One read snapshot per callback: SQLite's locks are taken once. */
    store_read_begin(srv->ctx->st);
    enum MHD_Result ret;
    if (!st->ready && !st->admitted)
        admit(st);
    if (st->phase == P_WRITTEN) {
        st->rs.finish(srv->ctx, &st->rs, st->rs.write_ctx, st->write_rc);
        st->rs.write_ctx = NULL;
        ret = respond(st);
    } else {
        ret = complete(st);
    }
    store_read_end(srv->ctx->st);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    http_server *srv = cls;
    struct req_state *st = *con_cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn_watch *w = ci ? ci->socket_context : NULL;
    if (w) {
        /* The next request's headers are due from now. */
        __atomic_store_n(&w->since_ms, util_mono_ms(), __ATOMIC_RELEASE);
        __atomic_store_n(&w->in_request, 0, __ATOMIC_RELEASE);
    }
    if (!st)
        return;
    if (st->phase != P_SENT)
        st->status = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? st->status : 499;
    if (!st->observed)
        metrics_observe(st->route_idx, st->status, util_mono_us() - st->t0);
    log_line(st, st->rq.path ? st->rq.path : "?");
    if (st->rs.upload) {
        st->rs.upload->abort(st->rs.upload);
        free(st->rs.upload);
    }
    if (st->rs.write_ctx && st->rs.finish) {
        /* Not reached in practice: a write is always finished before sending. */
        st->rs.finish(srv->ctx, &st->rs, st->rs.write_ctx, STORE_BUSY);
    }
    if (st->rs.stream)
        st->rs.stream->done(st->rs.stream);
    api_resp_clear(&st->rs);
    free(st->pbuf);
    budget_give(st->srv, st->body_held, st->unauth);
    free(st->body.buf);
    free(st);
    *con_cls = NULL;
    __atomic_sub_fetch(&srv->in_flight, 1, __ATOMIC_RELAXED);
}

/* MHD's connection notices: each open connection is watched (conn_watch). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    http_server *srv = cls;
    struct conn_watch *w = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        w = ci ? calloc(1, sizeof *w) : NULL; /* NULL: only the idle timeout bounds it */
        pthread_mutex_lock(&srv->cwlock);
        srv->open_conns++;
        if (w) {
            w->fd = ci->connect_fd;
            w->since_ms = util_mono_ms();
            w->next = srv->watched;
            if (w->next)
                w->next->prev = w;
            srv->watched = w;
        }
        pthread_mutex_unlock(&srv->cwlock);
        *socket_context = w;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        pthread_mutex_lock(&srv->cwlock);
        srv->open_conns--;
        if (w) {
            if (w->prev)
                w->prev->next = w->next;
            else
                srv->watched = w->next;
            if (w->next)
                w->next->prev = w->prev;
        }
        pthread_mutex_unlock(&srv->cwlock);
        free(w);
        *socket_context = NULL;
    }
}

/* Past max_conns a new connection is closed as it is accepted: at its own
 * limit libmicrohttpd stops accepting, and clients would wait in the
 * kernel's queue for nothing until their own deadline. */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t len)
{
    http_server *srv = cls;
    (void)addr;
    (void)len;
    pthread_mutex_lock(&srv->cwlock);
    int ok = srv->open_conns < srv->max_conns;
    pthread_mutex_unlock(&srv->cwlock);
    return ok ? MHD_YES : MHD_NO;
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss, char *err,
                   size_t errlen)
{
    struct addrinfo hints = {0}, *ai = NULL;
    char ps[16];
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    fmt_cut(ps, sizeof ps, "%d", port); /* an int fits 16 */
    int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc != 0) {
        fmt_cut(err, errlen, "cannot resolve listen address %s: %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return 0;
}

int http_bind(const char *host, int port, int *bound, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int one = 1, fd = -1;
    if (resolve(host, port, &ss, err, errlen) != 0)
        return -1;
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&ss,
             ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) !=
            0 ||
        listen(fd, 1024) != 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        fmt_cut(err, errlen, "cannot listen on %s:%d: %s", host, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}


/* The route labels of the request metrics: the API's routes, then
 * /metrics, the console and everything else. */
static void metrics_routes(http_server *s)
{
    int n = 0;
    for (const api_route *r = api_routes(); r->pattern && n < METRICS_ROUTES - 3; r++)
        labels[n++] = r->pattern;
    s->route_metrics = n;
    labels[n++] = "/metrics";
    s->route_console = n;
    labels[n++] = "console";
    s->route_other = n;
    labels[n++] = "other";
    metrics_init(labels, n);
}

/* libmicrohttpd on the listening socket lfd, with the server's callbacks
 * and bounds.  Its own connection limit (split among the pool's threads)
 * lies well past ours, so that accept_policy is what refuses. */
static struct MHD_Daemon *start_mhd(http_server *s, const http_config *cfg, unsigned flags,
                                    MHD_socket lfd)
{
    return MHD_start_daemon(flags, 0, accept_policy, s, on_request, s,
                            MHD_OPTION_LISTEN_SOCKET, lfd,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->threads,
                            MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(s->max_conns * 2 + 64 * (cfg->threads + 1)),
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)(cfg->max_conns_per_ip >= 0 ? cfg->max_conns_per_ip
                                                                  : HTTP_DEFAULT_MAX_CONNS_PER_IP),
                            MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)(cfg->idle_timeout_s > 0 ? cfg->idle_timeout_s
                                                               : HTTP_DEFAULT_IDLE_TIMEOUT_S),
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
                            /* what one connection may hold: its headers and a
                             * read buffer (bodies are copied out as they come) */
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEMORY,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                            MHD_OPTION_END);
}

http_server *http_start(const http_config *cfg, api_ctx *ctx, char *err, size_t errlen)
{
    http_server *s = calloc(1, sizeof *s);
    struct sockaddr_storage ss;
    if (!s) {
        fmt_cut(err, errlen, "out of memory");
        return NULL;
    }
    s->ctx = ctx;
    s->log = cfg->access_log;
    s->header_timeout_ms =
        1000LL * (cfg->header_timeout_s > 0 ? cfg->header_timeout_s : HTTP_DEFAULT_HEADER_TIMEOUT_S);
    pthread_mutex_init(&s->cwlock, NULL);
    s->rate_per_s = cfg->rate_per_s;
    if (cfg->rate_per_s > 0 && !(s->rate = ratelimit_new(cfg->rate_per_s, cfg->rate_burst))) {
        fmt_cut(err, errlen, "out of memory");
        goto fail;
    }
    metrics_routes(s);
    int bound = 0;
    MHD_socket lfd = cfg->listen_fd >= 0 ? cfg->listen_fd
                                         : http_bind(cfg->host, cfg->port, &bound, err, errlen);
    if (lfd < 0)
        goto fail;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_TURBO | MHD_USE_ERROR_LOG;
    socklen_t sl = sizeof ss;
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) != 0) {
        fmt_cut(err, errlen, "the listening socket: %s", strerror(errno));
        if (cfg->listen_fd < 0)
            close(lfd);
        goto fail;
    }
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->max_conns = cfg->max_conns > 0 ? cfg->max_conns : HTTP_DEFAULT_MAX_CONNS;
    s->bodies_max = cfg->bodies_max > 0 ? cfg->bodies_max : HTTP_DEFAULT_BODIES_MAX;
    if (s->bodies_max < ctx->body_limit)
        s->bodies_max = ctx->body_limit;
    s->d = start_mhd(s, cfg, flags, lfd);
    if (!s->d) {
        fmt_cut(err, errlen, "cannot listen on %s:%d: %s", cfg->host, cfg->port,
                 errno ? strerror(errno) : "libmicrohttpd refused to start");
        if (cfg->listen_fd < 0)
            close(lfd);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : cfg->port;
    pthread_mutex_init(&s->wlock, NULL);
    pthread_cond_init(&s->wcond, NULL);
    if (pthread_create(&s->wthread, NULL, waiter_main, s) != 0) {
        fmt_cut(err, errlen, "cannot start the long-poll thread");
        MHD_stop_daemon(s->d);
        goto fail;
    }
    sched_on_bump(ctx->sched, on_bump, s);
    return s;
fail:
    ratelimit_free(s->rate);
    pthread_mutex_destroy(&s->cwlock);
    free(s);
    return NULL;
}

int http_port(http_server *s)
{
    return s->port;
}

void http_stop(http_server *s, int grace_ms)
{
    if (!s)
        return;
    __atomic_store_n(&s->stopping, 1, __ATOMIC_RELEASE);
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    /* Parked long polls are answered now, and no more are parked for long. */
    sched_on_bump(s->ctx->sched, NULL, NULL);
    pthread_mutex_lock(&s->wlock);
    s->wstop = 1;
    pthread_cond_signal(&s->wcond);
    pthread_mutex_unlock(&s->wlock);
    pthread_join(s->wthread, NULL);
    for (int waited = 0; waited < grace_ms; waited += 10) {
        if (__atomic_load_n(&s->in_flight, __ATOMIC_RELAXED) == 0)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(s->d);
    pthread_mutex_destroy(&s->wlock);
    pthread_mutex_destroy(&s->cwlock);
    pthread_cond_destroy(&s->wcond);
    ratelimit_free(s->rate);
    free(s);
}
