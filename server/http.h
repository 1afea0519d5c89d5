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

typedef struct http_config {
    const char *host;      /* numeric address or name to bind */
    int port;              /* 0: any free port */
    int threads;           /* worker threads in the pool */
    alog *access_log;      /* NULL: none */
} http_config;

/* Starts serving; NULL with a message in err on failure. */
http_server *http_start(const http_config *cfg, api_ctx *ctx, char *err, size_t errlen);
/* The port actually bound. */
int http_port(http_server *s);
/* Stops accepting, waits up to grace_ms for requests in flight, stops. */
void http_stop(http_server *s, int grace_ms);

#endif
