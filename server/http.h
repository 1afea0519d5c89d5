/*
 * http: cohortd's HTTP server on libmicrohttpd (internal thread pool,
 * epoll).  Owns the daemon, the per-request state, body bounds, the access
 * log and the hand-off of durable writes to the store (the connection is
 * suspended until its write is committed).
 */
#ifndef COHORT_HTTP_H
#define COHORT_HTTP_H

#include <stdio.h>

#include "api/api.h"
#include "server/alog.h"

typedef struct http_server http_server;

#define HTTP_DEFAULT_MAX_CONNS 10000
#define HTTP_DEFAULT_MAX_CONNS_PER_IP 512
#define HTTP_DEFAULT_IDLE_TIMEOUT_S 60
#define HTTP_DEFAULT_HEADER_TIMEOUT_S 20
#define HTTP_DEFAULT_BODIES_MAX (64u << 20)
/* Bytes one connection may hold in libmicrohttpd (headers, read buffer). */
#define HTTP_CONN_MEMORY 16384
/* A JSON body must be whole this long after its headers. */
#define HTTP_BODY_TIMEOUT_MS 30000
/* The body a request without credentials may send (agent registration):
 * past it 413 from the headers, and nothing of it is kept. */
#define HTTP_UNAUTH_BODY_MAX 16384

typedef struct http_config {
    const char *host;      /* numeric address or name to bind */
    int port;              /* 0: any free port */
    int threads;           /* worker threads in the pool */
    alog *access_log;      /* NULL: none */
    /* Connection bounds (the HTTP_DEFAULT_* above when 0, but per_ip, where
     * 0 is no limit): connections past max_conns or max_conns_per_ip are
     * closed as they are accepted; a connection silent idle_timeout_s is
     * closed; one whose request headers are not whole header_timeout_s
     * after it opened (or after its last request ended) is closed however
     * slowly bytes trickle in. */
    int max_conns, max_conns_per_ip, idle_timeout_s, header_timeout_s;
    /* Requests a second per API token (0: no limit) and the burst allowed;
     * past it 429 with Retry-After.  Agents' node tokens are not limited. */
    double rate_per_s, rate_burst;
    /* The bytes of all JSON bodies being read at once (HTTP_DEFAULT_BODIES_MAX
     * when 0, and never below the API's body limit): a body that would go
     * past it is drained and answered 503 busy with Retry-After, not kept. */
    size_t bodies_max;
    /* A socket bound and listening already (http_bind), or -1: bind host:port. */
    int listen_fd;
} http_config;

#define HTTP_DEFAULT_RATE_PER_S 500
#define HTTP_DEFAULT_RATE_BURST 1000

/* Binds and listens on host:port (0: any free port) before anything is
 * served, so that the address can be published first: the socket, with the
 * port bound in *bound, or -1 with err set. */
int http_bind(const char *host, int port, int *bound, char *err, size_t errlen);
/* Starts serving; NULL with a message in err on failure. */
http_server *http_start(const http_config *cfg, api_ctx *ctx, char *err, size_t errlen);
/* The port actually bound. */
int http_port(http_server *s);
/* Stops accepting, waits up to grace_ms for requests in flight, stops. */
void http_stop(http_server *s, int grace_ms);

#endif
