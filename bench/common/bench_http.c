/*
 * bench_http: one HTTP call of a benchmark (see bench_http.h).
 */
#include "bench/common/bench_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes room for add more bytes and the NUL: 0, or -1 out of memory. */
static int sink_room(bench_sink *s, size_t add)
{
    if (s->len + add + 1 <= s->cap)
        return 0;
    size_t nc = (s->len + add + 1) * 2;
    char *b = realloc(s->buf, nc);
    if (!b)
        return -1;
    s->buf = b;
    s->cap = nc;
    return 0;
}

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    bench_sink *s = arg;
    size_t add = size * n;
    if (sink_room(s, add) != 0)
        return 0; /* curl ends the transfer with an error */
    memcpy(s->buf + s->len, p, add);
    s->len += add;
    s->buf[s->len] = '\0';
    return add;
}

long bench_call(CURL *c, const char *base, const char *token, const char *method,
                const char *path, const char *ctype, const void *body, size_t n,
                const char *idem, bench_sink *out)
{
    char url[512], auth[160], ct[128], key[160];
    struct curl_slist *h = NULL;
    long st = 0;
    out->len = 0;
    if (sink_room(out, 0) != 0)
        return 0;
    out->buf[0] = '\0';
    snprintf(url, sizeof url, "%s%s", base, path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    h = curl_slist_append(h, auth);
    if (ctype) {
        snprintf(ct, sizeof ct, "Content-Type: %s", ctype);
        h = curl_slist_append(h, ct);
    }
    if (idem) {
        snprintf(key, sizeof key, "Idempotency-Key: %s", idem);
        h = curl_slist_append(h, key);
    }
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)n);
    }
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    curl_slist_free_all(h);
    return st;
}

void bench_sink_free(bench_sink *out)
{
    free(out->buf);
    out->buf = NULL;
    out->len = out->cap = 0;
}

int bench_registry_conf(const char *dir, const char *addr, char *conf, size_t n)
{
    snprintf(conf, n, "%s/registry.yml", dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -1;
    fprintf(f, "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
               "    rootdirectory: %s/registry\nhttp:\n  addr: %s\n",
            dir, addr);
    return fclose(f) == 0 ? 0 : -1;
}
