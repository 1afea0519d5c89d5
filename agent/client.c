/*
 * client: one libcurl easy handle, reused so connections are kept alive.
 */
#include "agent/client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct client {
    CURL *curl;
    char server[512];
    char auth[128];
};

struct sink {
    char *buf;
    size_t len;
    int too_big;
};

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    size_t add = size * n;
    if (s->len + add > CLIENT_MAX_BODY) {
        s->too_big = 1;
        return 0; /* aborts the transfer */
    }
    char *nb = realloc(s->buf, s->len + add + 1);
    if (!nb)
        return 0;
    memcpy(nb + s->len, p, add);
    s->buf = nb;
    s->len += add;
    s->buf[s->len] = '\0';
    return add;
}

client *client_new(const char *server, char *err, size_t errlen)
{
    static int inited;
    if (!inited) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        inited = 1;
    }
    client *c = calloc(1, sizeof *c);
    if (!c || strlen(server) >= sizeof c->server || !(c->curl = curl_easy_init())) {
        snprintf(err, errlen, "cannot set up the HTTP client");
        free(c);
        return NULL;
    }
    snprintf(c->server, sizeof c->server, "%s", server);
    size_t n = strlen(c->server);
    while (n > 0 && c->server[n - 1] == '/')
        c->server[--n] = '\0';
    return c;
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
    snprintf(c->auth, sizeof c->auth, "Authorization: Bearer %s", token ? token : "");
}

/* One request; body of n bytes with content type ctype, or none. */
static long request(client *c, const char *method, const char *path, const char *ctype,
                    const void *body, size_t n, cJSON **out, long timeout_ms, char *err,
                    size_t errlen)
{
    char url[1024], ct[128];
    struct sink s = {0};
    struct curl_slist *h = NULL;
    long status = 0;
    *out = NULL;
    snprintf(url, sizeof url, "%s%s", c->server, path);
    if (c->auth[0])
        h = curl_slist_append(h, c->auth);
    if (ctype) {
        snprintf(ct, sizeof ct, "Content-Type: %s", ctype);
        h = curl_slist_append(h, ct);
    }
    h = curl_slist_append(h, "Expect:");
    CURL *k = c->curl;
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
    CURLcode rc = curl_easy_perform(k);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(k, CURLINFO_RESPONSE_CODE, &status);
        if (s.buf)
            *out = cJSON_Parse(s.buf);
    } else {
        snprintf(err, errlen, "%s %s: %s", method, url,
                 s.too_big ? "answer too large" : curl_easy_strerror(rc));
    }
    curl_slist_free_all(h);
    free(s.buf);
    return status;
}

long client_call(client *c, const char *method, const char *path, const cJSON *body,
                 cJSON **out, long timeout_ms, char *err, size_t errlen)
{
    char *json = body ? cJSON_PrintUnformatted(body) : NULL;
    long st = request(c, method, path, json ? "application/json" : NULL, json,
                      json ? strlen(json) : 0, out, timeout_ms, err, errlen);
    free(json);
    return st;
}

long client_put_raw(client *c, const char *path, const void *data, size_t n, cJSON **out,
                    long timeout_ms, char *err, size_t errlen)
{
    static const char empty[1] = "";
    return request(c, "PUT", path, "application/octet-stream", n ? data : empty, n, out,
                   timeout_ms, err, errlen);
}
