/*
 * api_beats: heartbeats that only say a node is alive (no worker changed,
 * the node is up), written together: the request is answered at once and
 * a thread of its own writes every node's latest time in one transaction
 * every BEATS_FLUSH_MS.  A heartbeat that reports workers, or comes from a
 * node marked down, is written by its request as before (api_nodes.c).
 * A node is marked down only after --node-timeout (10 s by default) of
 * silence, far longer than the flush period.
 *
 * Owns the pending times and the thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_int.h"
#include "lib/fmt.h"
#include "storage/store_node.h"
#include "lib/util.h"

#define BEATS_FLUSH_MS 500
#define BEATS_MAX 65536 /* pending nodes; past it a heartbeat is written by its request */

struct api_beats {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stopping;
    pthread_t thread;
    int64_t *id, *at; /* pending, in arrival order; a node may appear twice */
    size_t n, cap;
};

struct flush {
    int64_t *id, *at;
    size_t n;
};

static store_rc flush_write(store_tx *tx, void *arg)
{
    const struct flush *f = arg;
    for (size_t i = 0; i < f->n; i++) {
        int rc = store_node_heartbeat(tx, f->id[i], f->at[i]);
        if (rc != STORE_OK && rc != STORE_NOTFOUND) /* a node deleted meanwhile */
            return rc;
    }
    return STORE_OK;
}

/* Writes what is pending; called with b->lock not held. */
static void flush(api_ctx *ctx)
{
    struct api_beats *b = ctx->beats;
    pthread_mutex_lock(&b->lock);
    struct flush f = {b->id, b->at, b->n};
    b->id = b->at = NULL;
    b->n = b->cap = 0;
    pthread_mutex_unlock(&b->lock);
    if (f.n) {
        int rc = store_write(ctx->st, flush_write, &f);
        if (rc != STORE_OK)
            fprintf(stderr, "cohortd: %zu heartbeats not written (%s)\n", f.n, store_rc_name(rc));
    }
    free(f.id);
    free(f.at);
}

static void *beats_main(void *arg)
{
    api_ctx *ctx = arg;
    struct api_beats *b = ctx->beats;
    pthread_mutex_lock(&b->lock);
    while (!b->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += BEATS_FLUSH_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&b->wake, &b->lock, &ts);
        pthread_mutex_unlock(&b->lock);
        flush(ctx);
        pthread_mutex_lock(&b->lock);
    }
    pthread_mutex_unlock(&b->lock);
    flush(ctx); /* what came before the stop */
    return NULL;
}

int api_beats_open(api_ctx *ctx, char *err, size_t errlen)
{
    struct api_beats *b = calloc(1, sizeof *b);
    if (!b) {
        fmt_cut(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->wake, NULL);
    ctx->beats = b;
    if (pthread_create(&b->thread, NULL, beats_main, ctx) != 0) {
        fmt_cut(err, errlen, "cannot start the heartbeat writer");
        pthread_mutex_destroy(&b->lock);
        pthread_cond_destroy(&b->wake);
        free(b);
        ctx->beats = NULL;
        return -1;
    }
    return 0;
}

void api_beats_close(api_ctx *ctx)
{
    struct api_beats *b = ctx->beats;
    if (!b)
        return;
    util_thread_stop(&b->lock, &b->wake, &b->stopping, b->thread);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->wake);
    free(b->id);
    free(b->at);
    free(b);
    ctx->beats = NULL;
}

int api_beats_note(api_ctx *ctx, int64_t node_id, int64_t at)
{
    struct api_beats *b = ctx->beats;
    int rc = -1;
    if (!b)
        return -1;
    pthread_mutex_lock(&b->lock);
    if (b->n == b->cap && b->cap < BEATS_MAX) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        int64_t *id = realloc(b->id, cap * sizeof *id);
        if (id)
            b->id = id;
        int64_t *t = id ? realloc(b->at, cap * sizeof *t) : NULL;
        if (t) {
            b->at = t;
            b->cap = cap;
        }
    }
    if (b->n < b->cap && !b->stopping) {
        b->id[b->n] = node_id;
        b->at[b->n] = at;
        b->n++;
        rc = 0;
    }
    pthread_mutex_unlock(&b->lock);
    return rc;
}
