/*
 * alog: the access log's buffer and writer thread (see alog.h).  Two
 * buffers: request threads fill one while the writer writes the other.
 */
#include "server/alog.h"
#include "lib/fmt.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/util.h"

struct alog {
    FILE *f;
    pthread_mutex_t lock;
    pthread_cond_t wake;  /* the writer: half full, or stopping */
    pthread_cond_t room;  /* request threads: the buffer was taken */
    char *fill, *spare;   /* fill: being filled; spare: the writer's */
    size_t len, cap;
    int stopping;
    pthread_t thread;
};

static void *writer_main(void *arg)
{
    alog *a = arg;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += ALOG_FLUSH_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        while (!a->stopping && a->len < a->cap / 2)
            if (pthread_cond_timedwait(&a->wake, &a->lock, &until) == ETIMEDOUT)
                break;
        int stop = a->stopping;
        char *out = a->fill;
        size_t n = a->len;
        a->fill = a->spare;
        a->spare = out;
        a->len = 0;
        pthread_cond_broadcast(&a->room);
        pthread_mutex_unlock(&a->lock);
        /* Outside the lock: only this thread waits for the disk. */
        if (n && (fwrite(out, 1, n, a->f) != n || fflush(a->f) != 0))
            clearerr(a->f); /* a full disk: the lines are lost, requests go on */
        pthread_mutex_lock(&a->lock);
        if (stop && a->len == 0)
            break;
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

alog *alog_open(FILE *f, size_t cap, char *err, size_t errlen)
{
    alog *a = calloc(1, sizeof *a);
    if (a) {
        a->fill = malloc(cap);
        a->spare = malloc(cap);
    }
    if (!a || !a->fill || !a->spare) {
        fmt_cut(err, errlen, "out of memory for the access log");
        goto fail;
    }
    a->f = f;
    a->cap = cap;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->wake, NULL);
    pthread_cond_init(&a->room, NULL);
    if (pthread_create(&a->thread, NULL, writer_main, a) != 0) {
        fmt_cut(err, errlen, "cannot start the access log's writer");
        pthread_mutex_destroy(&a->lock);
        pthread_cond_destroy(&a->wake);
        pthread_cond_destroy(&a->room);
        goto fail;
    }
    return a;
fail:
    if (a) {
        free(a->fill);
        free(a->spare);
        free(a);
    }
    return NULL;
}

void alog_put(alog *a, const char *line, size_t n)
{
    if (n > a->cap)
        n = a->cap;
    pthread_mutex_lock(&a->lock);
    while (a->len + n > a->cap) {
        pthread_cond_signal(&a->wake);
        pthread_cond_wait(&a->room, &a->lock);
    }
    memcpy(a->fill + a->len, line, n);
    a->len += n;
    if (a->len >= a->cap / 2)
        pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
}

void alog_close(alog *a)
{
    if (!a)
        return;
    util_thread_stop(&a->lock, &a->wake, &a->stopping, a->thread);
    if (a->f != stderr)
        fclose(a->f);
    else
        fflush(a->f);
    pthread_mutex_destroy(&a->lock);
    pthread_cond_destroy(&a->wake);
    pthread_cond_destroy(&a->room);
    free(a->fill);
    free(a->spare);
    free(a);
}
