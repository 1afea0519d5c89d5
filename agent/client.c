/*
 * client: one libcurl easy handle, reused so connections are kept alive.
 */
#include "agent/client.h"
#include "lib/fmt.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

struct client {
    CURL *curl;
    char server[CLIENT_MAX_SERVERS][512];
    int nserver, cur;
    unsigned moves;
    char auth[128];
    char err[1400]; /* why the last call got no answer (client_errmsg) */
};

struct sink {
    util_buf b;
    int too_big;
};

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    if (s->b.len + size * n > CLIENT_MAX_BODY) {
        s->too_big = 1;
        return 0; /* aborts the transfer */
    }
    return util_buf_sink(p, size, n, &s->b);
}

client *client_new(const char *server, char *err, size_t errlen)
{
    static int inited;
    if (!inited) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        inited = 1;
    }
    client *c = calloc(1, sizeof *c);
    if (!c || !(c->curl = curl_easy_init())) {
        fmt_cut(err, errlen, "cannot set up the HTTP client");
        free(c);
        return NULL;
    }
    for (const char *p = server;; p++) {
        size_t n = strcspn(p, ",");
        const char *why = n == 0                             ? "an empty URL in the list"
                          : n >= sizeof c->server[0]         ? "a URL too long"
                          : c->nserver == CLIENT_MAX_SERVERS ? "more servers than it takes"
                                                             : NULL;
        if (why) {
            fmt_cut(err, errlen, "--server: %s", why);
            client_free(c);
            return NULL;
        }
        char *s = c->server[c->nserver++];
        memcpy(s, p, n);
        s[n] = '\0';
        for (size_t k = n; k > 0 && s[k - 1] == '/'; k--)
            s[k - 1] = '\0';
        p += n;
        if (!*p)
            break;
    }
    return c;
}

const char *client_server(const client *c)
{
    return c->server[c->cur];
}

unsigned client_moves(const client *c)
{
    return c->moves;
}

void client_free(client *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->curl);
    free(c);
}

void client_set_token(client *c, const char *token)
{
    /* a node token is 64 hex digits: the header always fits */
    fmt_cut(c->auth, sizeof c->auth, "Authorization: Bearer %s", token ? token : "");
}

/* One request; body of n bytes with content type ctype, or none. */
static long request(client *c, const char *method, const char *path, const char *ctype,
                    const void *body, size_t n, cJSON **out, long timeout_ms)
{
    char url[1024], ct[128];
    struct sink s = {0};
    struct curl_slist *h = NULL;
    long status = 0;
    *out = NULL;
    c->err[0] = '\0';
    if (c->auth[0])
        h = curl_slist_append(h, c->auth);
    if (ctype) {
        fmt_cut(ct, sizeof ct, "Content-Type: %s", ctype); /* the agent's own types */
        h = curl_slist_append(h, ct);
    }
    h = curl_slist_append(h, "Expect:");
    CURL *k = c->curl;
    CURLcode rc = CURLE_URL_MALFORMAT;
    for (int tries = 0;; tries++) {
        if (fmt_whole(url, sizeof url, "%s%s", c->server[c->cur], path) != 0) {
            fmt_cut(url, sizeof url, "(a URL past %zu bytes)", sizeof url);
            break; /* said below, as a malformed URL */
        }
        curl_easy_reset(k);
        curl_easy_setopt(k, CURLOPT_URL, url);
        curl_easy_setopt(k, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(k, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000L);
        curl_easy_setopt(k, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(k, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(k, CURLOPT_WRITEDATA, &s);
        if (body) {
            curl_easy_setopt(k, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(k, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
        }
        rc = curl_easy_perform(k);
        if (rc == CURLE_OK || s.too_big || c->nserver == 1)
            break;
        /* This server did not answer: the next call goes to the next one, and
         * this one too when nothing reached the server (nothing done twice). */
        int unsent = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST;
        c->cur = (c->cur + 1) % c->nserver;
        c->moves++;
        fprintf(stderr, "cohort-agent: %s: %s; now using %s\n", url, curl_easy_strerror(rc),
                c->server[c->cur]);
        if (!unsent || tries + 1 >= c->nserver)
            break;
        free(s.b.buf);
        s = (struct sink){0};
    }
    if (rc == CURLE_OK) {
        curl_easy_getinfo(k, CURLINFO_RESPONSE_CODE, &status);
        if (s.b.buf)
            *out = cJSON_Parse(s.b.buf);
    } else {
        fmt_cut(c->err, sizeof c->err, "%s %s: %s", method, url,
                s.too_big ? "answer too large" : curl_easy_strerror(rc));
    }
    curl_slist_free_all(h);
    free(s.b.buf);
    return status;
}

long client_call(client *c, const char *method, const char *path, const cJSON *body, cJSON **out,
                 long timeout_ms)
{
    char *json = body ? cJSON_PrintUnformatted(body) : NULL;
    long st = request(c, method, path, json ? "application/json" : NULL, json,
                      json ? strlen(json) : 0, out, timeout_ms);
    free(json);
    return st;
}

long client_put_raw(client *c, const char *path, const void *data, size_t n, cJSON **out,
                    long timeout_ms)
{
    static const char empty[1] = "";
    return request(c, "PUT", path, "application/octet-stream", n ? data : empty, n, out,
                   timeout_ms);
}

const char *client_errmsg(const client *c)
{
    return c->err;
}
