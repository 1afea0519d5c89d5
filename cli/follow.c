/*
 * follow: streaming every rank's log of a job (follow.h).  The streams
 * run on their own libcurl handles in one multi handle; the job itself is
 * read every 2 s over the shared handle to see it end or start again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli/follow.h"
#include "lib/fmt.h"

#define JOB_POLL_MS 2000
#define LINE_MAX_HELD 65536 /* a line longer than this is printed in pieces */

struct stream {
    CURL *h;
    struct curl_slist *hdrs;
    int rank;
    int prefix;
    int64_t off;      /* bytes of the log received */
    util_buf line;    /* a line not yet ended */
    int done;         /* the server ended it: the attempt is over */
    int64_t retry_at; /* reconnect then (ms), after a broken stream */
};

struct follow {
    cli *c;
    int64_t id, attempt;
    struct stream *s;
    int n;
    CURLM *m;
};

static void emit(struct stream *s, const char *p, size_t n)
{
    if (s->prefix)
        printf("[%d] ", s->rank);
    fwrite(p, 1, n, stdout);
}

static size_t on_log(char *p, size_t size, size_t n, void *arg)
{
    struct stream *s = arg;
    size_t len = size * n;
    s->off += (int64_t)len;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(p + i, '\n', len - i);
        size_t take = nl ? (size_t)(nl - (p + i)) + 1 : len - i;
        util_buf_append(&s->line, p + i, take);
        i += take;
        if (nl || s->line.len >= LINE_MAX_HELD) {
            emit(s, s->line.buf, s->line.len);
            if (!nl)
                putchar('\n');
            s->line.len = 0;
        }
    }
    fflush(stdout);
    return len;
}

static void stream_flush(struct stream *s)
{
    if (s->line.len) {
        emit(s, s->line.buf, s->line.len);
        putchar('\n');
        s->line.len = 0;
    }
    fflush(stdout);
}

static int stream_start(struct follow *f, struct stream *s)
{
    char url[CLI_URL_MAX + 160], auth[CLI_TOKEN_MAX + 32];
    /* the login's URL is at most CLI_URL_MAX, and the rest numbers */
    fmt_cut(url, sizeof url, "%s/v1/jobs/%lld/logs?rank=%d&attempt=%lld&follow=true&offset=%lld",
            f->c->url, (long long)f->id, s->rank, (long long)f->attempt, (long long)s->off);
    s->h = curl_easy_init();
    if (!s->h)
        return -1;
    fmt_cut(auth, sizeof auth, "Authorization: Bearer %s", f->c->token);
    s->hdrs = curl_slist_append(NULL, auth);
    curl_easy_setopt(s->h, CURLOPT_URL, url);
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, s->hdrs);
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, on_log);
    curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->h, CURLOPT_PRIVATE, s);
    curl_easy_setopt(s->h, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(s->h, CURLOPT_USERAGENT, "cohort-cli/1");
    return curl_multi_add_handle(f->m, s->h) == CURLM_OK ? 0 : -1;
}

static void stream_stop(struct follow *f, struct stream *s)
{
    if (s->h) {
        curl_multi_remove_handle(f->m, s->h);
        curl_easy_cleanup(s->h);
    }
    curl_slist_free_all(s->hdrs);
    s->h = NULL;
    s->hdrs = NULL;
}

static void streams_free(struct follow *f)
{
    for (int i = 0; i < f->n; i++) {
        stream_stop(f, &f->s[i]);
        free(f->s[i].line.buf);
    }
    free(f->s);
    f->s = NULL;
    f->n = 0;
}

/* Streams for every rank (or one) of attempt: 0, or -1. */
static int streams_open(struct follow *f, int world, int rank)
{
    int first = rank >= 0 ? rank : 0, n = rank >= 0 ? 1 : world;
    if (n > FOLLOW_RANKS_MAX) {
        fprintf(stderr, "cohort: following ranks 0-%d of %d (cohort logs %lld --rank N -f for "
                        "the others)\n", FOLLOW_RANKS_MAX - 1, world, (long long)f->id);
        n = FOLLOW_RANKS_MAX;
    }
    f->s = calloc((size_t)n, sizeof *f->s);
    if (!f->s)
        return -1;
    f->n = n;
    for (int i = 0; i < n; i++) {
        f->s[i].rank = first + i;
        f->s[i].prefix = rank < 0 && world > 1;
        if (stream_start(f, &f->s[i]) != 0)
            return -1;
    }
    return 0;
}

/* Reaps ended transfers: a stream the server closed after a 200 is done;
 * one cut off (or refused) starts again from its offset a second later. */
static void reap(struct follow *f)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(f->m, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct stream *s = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
        long status = 0;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
        int ok = msg->data.result == CURLE_OK && status == 200;
        stream_stop(f, s);
        if (ok) {
            stream_flush(s);
            s->done = 1;
        } else if (status == 404 || status == 401 || status == 403) {
            stream_flush(s);
            fprintf(stderr, "cohort: rank %d's log: the server answered %ld\n", s->rank, status);
            s->done = 1;
        } else {
            s->retry_at = util_now_ms() + 1000;
        }
    }
}

static int all_done(const struct follow *f)
{
    for (int i = 0; i < f->n; i++)
        if (!f->s[i].done)
            return 0;
    return 1;
}

/* The job's state, attempt and worker count: CLI_OK or an exit code. */
static int job_now(cli *c, int64_t id, char state[16], int64_t *attempt, int *world)
{
    char path[64];
    cJSON *j = NULL;
    fmt_cut(path, sizeof path, "/v1/jobs/%lld", (long long)id);
    int rc = cli_get_json(c, path, &j);
    if (rc)
        return rc;
    fmt_cut(state, 16, "%s",
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "state")) ?: "?");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "attempt");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "worker_count");
    *attempt = cJSON_IsNumber(a) ? (int64_t)a->valuedouble : 0;
    *world = cJSON_IsNumber(w) ? (int)w->valuedouble : 1;
    cJSON_Delete(j);
    return CLI_OK;
}

static int final(const char *state)
{
    return !strcmp(state, "SUCCEEDED") || !strcmp(state, "FAILED") || !strcmp(state, "CANCELLED");
}

int follow_job(cli *c, int64_t id, int rank, int64_t attempt, char state[16])
{
    struct follow f = {.c = c, .id = id};
    int world = 1, rc = CLI_OK;
    int64_t now_attempt = 0, polled = 0;
    f.m = curl_multi_init();
    if (!f.m)
        return cli_fail(CLI_FAILED, "cannot start libcurl");
    for (;;) {
        if (util_now_ms() - polled >= JOB_POLL_MS || (f.n && all_done(&f))) {
            if ((rc = job_now(c, id, state, &now_attempt, &world)) != CLI_OK)
                break;
            polled = util_now_ms();
        }
        if (attempt == 0)
            attempt = now_attempt;
        if (f.n && all_done(&f) && (final(state) || now_attempt > f.attempt)) {
            streams_free(&f);
            if (final(state) && now_attempt <= f.attempt)
                break;
            attempt = now_attempt;
        }
        if (!f.n && attempt >= 1) {
            if (attempt > 1)
                fprintf(stderr, "cohort: job %lld, attempt %lld\n", (long long)id, (long long)attempt);
            f.attempt = attempt;
            if (streams_open(&f, world, rank) != 0) {
                rc = cli_fail(CLI_FAILED, "cannot start the log streams");
                break;
            }
        }
        if (!f.n && final(state))
            break; /* ended before any attempt */
        for (int i = 0; i < f.n; i++) {
            struct stream *s = &f.s[i];
            if (!s->h && !s->done && s->retry_at && util_now_ms() >= s->retry_at) {
                s->retry_at = 0;
                if (stream_start(&f, s) != 0)
                    s->retry_at = util_now_ms() + 1000;
            }
        }
        int running = 0;
        curl_multi_perform(f.m, &running);
        curl_multi_poll(f.m, NULL, 0, 500, NULL);
        curl_multi_perform(f.m, &running);
        reap(&f);
    }
    streams_free(&f);
    curl_multi_cleanup(f.m);
    return rc;
}
