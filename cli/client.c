/*
 * client: cohort's one way to cohortd.  One libcurl easy handle for the
 * process (connections are kept alive between requests), the token in the
 * Authorization header, bounded retries of what is safe to send twice, and
 * the API's error body ({"error": {"code", "message", "field"}}) turned into
 * one line on stderr and an exit code.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli/cli.h"
#include "lib/fmt.h"

#define BODY_MAX (256LL << 20)   /* an answer held in memory (lists, logs pages) */
#define RETRY_WAIT_MAX_MS 10000

void cli_resp_free(cli_resp *r)
{
    free(r->body.buf);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof *r);
}

struct xfer {
    const cli_req *rq;
    cli_resp *r;
    long retry_after_s;
    int too_big;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    size_t len = size * n;
    if (x->rq->download_fd >= 0) {
        size_t off = 0;
        while (off < len) {
            ssize_t w = write(x->rq->download_fd, p + off, len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return 0;
            off += (size_t)w;
        }
        return len;
    }
    if ((long long)(x->r->body.len + len) > BODY_MAX) {
        x->too_big = 1;
        return 0;
    }
    return util_buf_sink(p, size, n, &x->r->body);
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    size_t len = size * n;
    char line[256];
    if (len >= sizeof line)
        return len;
    memcpy(line, p, len);
    line[len] = '\0';
    if (!strncasecmp(line, "X-Next-Offset:", 14))
        x->r->next_offset = strtoll(line + 14, NULL, 10);
    else if (!strncasecmp(line, "Idempotent-Replayed:", 20))
        x->r->replayed = strstr(line + 20, "true") != NULL;
    else if (!strncasecmp(line, "Retry-After:", 12))
        x->retry_after_s = strtol(line + 12, NULL, 10);
    return len;
}

static size_t on_read(char *buf, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    for (;;) {
        ssize_t got = read(x->rq->upload_fd, buf, size * n);
        if (got < 0 && errno == EINTR)
            continue;
        return got < 0 ? CURL_READFUNC_ABORT : (size_t)got;
    }
}

static int on_seek(void *arg, curl_off_t off, int origin)
{
    struct xfer *x = arg;
    return lseek(x->rq->upload_fd, (off_t)off, origin) < 0 ? CURL_SEEKFUNC_FAIL : CURL_SEEKFUNC_OK;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct xfer *x = arg;
    (void)dltotal, (void)ultotal;
    x->rq->progress(x->rq->progress_arg, x->rq->upload_fd >= 0 ? (int64_t)ulnow : (int64_t)dlnow);
    return 0;
}

/* Sets up the handle for one try of rq; the header list is the caller's. */
static int prepare(cli *c, const cli_req *rq, struct xfer *x, struct curl_slist **hdrs)
{
    CURL *h = c->curl;
    util_buf url = {0};
    util_buf_printf(&url, "%s%s", c->url, rq->path);
    if (url.oom)
        return -1;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url.buf);
    free(url.buf);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "cohort-cli/1");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    char line[CLI_TOKEN_MAX + 64];
    if (c->token[0]) {
        fmt_cut(line, sizeof line, "Authorization: Bearer %s", c->token);
        *hdrs = curl_slist_append(*hdrs, line);
    }
    if (rq->accept) {
        fmt_cut(line, sizeof line, "Accept: %s", rq->accept);
        *hdrs = curl_slist_append(*hdrs, line);
    }
    if (rq->idem_key) {
        fmt_cut(line, sizeof line, "Idempotency-Key: %s", rq->idem_key);
        *hdrs = curl_slist_append(*hdrs, line);
    }
    if (rq->upload_fd >= 0) {
        if (lseek(rq->upload_fd, 0, SEEK_SET) < 0)
            return -1;
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, x);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, x);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->upload_size);
        *hdrs = curl_slist_append(*hdrs, "Content-Type: application/octet-stream");
        *hdrs = curl_slist_append(*hdrs, "Expect:");
    } else if (rq->json) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->json);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(rq->json));
        *hdrs = curl_slist_append(*hdrs, "Content-Type: application/json");
    } else if (!strcmp(rq->method, "POST")) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);
    if (!strcmp(rq->method, "HEAD"))
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
    if (rq->progress) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    }
    return 0;
}

static int retryable(const cli_req *rq)
{
    if (rq->no_retry)
        return 0;
    if (rq->download_fd >= 0 && lseek(rq->download_fd, 0, SEEK_CUR) > 0)
        return 0; /* bytes went out already */
    return strcmp(rq->method, "POST") != 0 || rq->idem_key != NULL;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* One try: the curl result, with r filled. */
static CURLcode try_once(cli *c, const cli_req *rq, cli_resp *r, struct xfer *x, char *err)
{
    struct curl_slist *hdrs = NULL;
    cli_resp_free(r);
    r->next_offset = -1;
    *x = (struct xfer){rq, r, -1, 0};
    CURLcode cc = CURLE_OUT_OF_MEMORY;
    if (prepare(c, rq, x, &hdrs) == 0) {
        curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, err);
        err[0] = '\0';
        cc = curl_easy_perform(c->curl);
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &r->status);
    }
    curl_slist_free_all(hdrs);
    if (cc == CURLE_WRITE_ERROR && x->too_big)
        fmt_cut(err, CURL_ERROR_SIZE, "the answer is larger than %lld MiB", BODY_MAX >> 20);
    if (cc != CURLE_OK)
        r->status = 0;
    if (r->body.buf && rq->download_fd < 0)
        r->json = cJSON_ParseWithLength(r->body.buf, r->body.len);
    return cc;
}

int cli_request_quiet(cli *c, const cli_req *rq, cli_resp *r)
{
    char err[CURL_ERROR_SIZE];
    memset(r, 0, sizeof *r);
    if (!c->curl && !(c->curl = curl_easy_init())) {
        util_buf_printf(&r->body, "cannot start libcurl");
        return CLI_UNREACHABLE;
    }
    long wait_ms = 250;
    for (int attempt = 0;; attempt++) {
        struct xfer x;
        CURLcode cc = try_once(c, rq, r, &x, err);
        if (cc == CURLE_OK && r->status >= 200 && r->status < 300)
            return CLI_OK;
        int again = cc != CURLE_OK || r->status == 429 || r->status == 502 ||
                    r->status == 503 || r->status == 504;
        if (again && attempt < c->retries && retryable(rq)) {
            long ms = x.retry_after_s >= 0 ? x.retry_after_s * 1000 : wait_ms;
            pause_ms(ms > RETRY_WAIT_MAX_MS ? RETRY_WAIT_MAX_MS : ms);
            wait_ms = wait_ms * 2 > RETRY_WAIT_MAX_MS ? RETRY_WAIT_MAX_MS : wait_ms * 2;
            continue;
        }
        if (cc != CURLE_OK) {
            cli_resp_free(r);
            r->next_offset = -1;
            util_buf_printf(&r->body, "%s: %s", c->url, err[0] ? err : curl_easy_strerror(cc));
            return CLI_UNREACHABLE;
        }
        return r->status >= 500 ? CLI_UNREACHABLE : CLI_REFUSED;
    }
}

void cli_report(const cli_resp *r, int rc)
{
    if (rc == CLI_OK)
        return;
    if (r->status == 0) {
        fprintf(stderr, "cohort: cannot reach the server: %s\n", r->body.buf ? r->body.buf : "");
        return;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(r->json, "error");
    const char *code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "code"));
    const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"));
    const char *field = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "field"));
    if (code && msg)
        fprintf(stderr, "cohort: %s (%ld): %s%s%s%s\n", code, r->status, msg,
                field ? " [field: " : "", field ? field : "", field ? "]" : "");
    else
        fprintf(stderr, "cohort: the server answered %ld\n", r->status);
    if (r->status == 401)
        fprintf(stderr, "cohort: log in again with `cohort login URL`, or set COHORT_TOKEN\n");
}

int cli_request(cli *c, const cli_req *rq, cli_resp *r)
{
    int rc = cli_request_quiet(c, rq, r);
    cli_report(r, rc);
    return rc;
}

int cli_get_json(cli *c, const char *path, cJSON **out)
{
    cli_resp r;
    cli_req rq = CLI_REQ("GET", path);
    int rc = cli_request(c, &rq, &r);
    if (rc == CLI_OK && !r.json)
        rc = cli_fail(CLI_UNREACHABLE, "the server's answer to GET %s is not JSON", path);
    *out = rc == CLI_OK ? r.json : NULL;
    if (rc == CLI_OK)
        r.json = NULL;
    cli_resp_free(&r);
    return rc;
}

int cli_post_json(cli *c, const char *path, const char *json, cJSON **out)
{
    cli_resp r;
    cli_req rq = CLI_REQ("POST", path);
    rq.json = json;
    int rc = cli_request(c, &rq, &r);
    if (out) {
        *out = rc == CLI_OK ? r.json : NULL;
        if (rc == CLI_OK)
            r.json = NULL;
    }
    cli_resp_free(&r);
    return rc;
}

int cli_list(cli *c, const char *path, const char *key, int all, cJSON **items, cJSON **page)
{
    char *cursor = NULL;
    int rc = CLI_OK;
    *items = cJSON_CreateArray();
    if (page)
        *page = NULL;
    do {
        util_buf p = {0};
        util_buf_printf(&p, "%s%slimit=200", path, strchr(path, '?') ? "&" : "?");
        if (cursor) {
            util_buf_printf(&p, "&cursor=");
            cli_escape(&p, cursor);
        }
        free(cursor);
        cursor = NULL;
        cJSON *o = NULL;
        rc = p.oom ? CLI_FAILED : cli_get_json(c, p.buf, &o);
        free(p.buf);
        if (rc)
            break;
        cJSON *got = cJSON_DetachItemFromObjectCaseSensitive(o, key);
        cJSON *it;
        while (got && (it = cJSON_DetachItemViaPointer(got, got->child)) != NULL)
            cJSON_AddItemToArray(*items, it);
        cJSON_Delete(got);
        const char *nc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "next_cursor"));
        cursor = nc && all ? strdup(nc) : NULL;
        if (page && !*page)
            *page = o;
        else
            cJSON_Delete(o);
    } while (cursor);
    free(cursor);
    if (rc) {
        cJSON_Delete(*items);
        *items = NULL;
        if (page) {
            cJSON_Delete(*page);
            *page = NULL;
        }
    }
    return rc;
}

void cli_escape(util_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~' || ch == '/') {
            util_buf_append(b, s, 1);
        } else {
            char e[3] = {'%', hex[ch >> 4], hex[ch & 15]};
            util_buf_append(b, e, 3);
        }
    }
}

int cli_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cohort: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (see --help)\n", stderr);
    va_end(ap);
    return CLI_USAGE;
}

int cli_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cohort: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

void cli_new_key(char out[48])
{
    uint8_t raw[16] = {0};
    char hex[33];
    if (util_random(raw, sizeof raw) != 0) { /* never expected; still unique enough */
        int64_t t = util_now_ms();
        memcpy(raw, &t, sizeof t);
        pid_t p = getpid();
        memcpy(raw + 8, &p, sizeof p);
    }
    util_hex(raw, sizeof raw, hex);
    fmt_cut(out, 48, "cohort-%s", hex);
}

int cli_id(const char *s, const char *what, int64_t *id)
{
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || *end || v < 1)
        return cli_usage("%s must be a positive number, not '%s'", what, s ? s : "");
    *id = v;
    return 0;
}

void cli_age(const char *t, char *buf, size_t n)
{
    int64_t ms;
    if (!t || util_parse_time(t, &ms) != 0) {
        fmt_cut(buf, n, "-");
        return;
    }
    int64_t s = (util_now_ms() - ms) / 1000;
    if (s < 0)
        s = 0;
    if (s < 120)
        fmt_cut(buf, n, "%llds", (long long)s);
    else if (s < 7200)
        fmt_cut(buf, n, "%lldm", (long long)s / 60);
    else if (s < 172800)
        fmt_cut(buf, n, "%lldh", (long long)s / 3600);
    else
        fmt_cut(buf, n, "%lldd", (long long)s / 86400);
}

void cli_close(cli *c)
{
    if (c->curl)
        curl_easy_cleanup(c->curl);
    c->curl = NULL;
}
