/*
 * bench_http: one HTTP call of a benchmark (see bench_http.h).
 */
#include "bench/common/bench_http.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

size_t bench_sink_write(char *p, size_t size, size_t n, void *arg)
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
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bench_sink_write);
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

int bench_setup_end(int rc, const char *what, bench_sink *out)
{
    if (rc)
        fprintf(stderr, "%s failed: %s\n", what, out->buf ? out->buf : "");
    bench_sink_free(out);
    return rc;
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

pid_t bench_cohortd_start(const char *build, const char *dir, const char *admin_token,
                          const char *const *extra, char *base, size_t n)
{
    char cohortd[512], log[512], addr[512], line[128] = "";
    snprintf(cohortd, sizeof cohortd, "%s/cohortd", build);
    snprintf(log, sizeof log, "%s/cohortd.log", dir);
    snprintf(addr, sizeof addr, "%s/cohortd.addr", dir);
    unlink(addr);
    fflush(NULL); /* the child's freopen would write what is buffered here again */
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        const char *args[40] = {cohortd, "--listen", "127.0.0.1:0", "--data-dir", dir};
        int k = 5;
        for (int i = 0; extra && extra[i] && k < 39; i++)
            args[k++] = extra[i];
        args[k] = NULL;
        if (!freopen(log, "a", stdout))
            _exit(127);
        dup2(1, 2);
        setenv("COHORT_ADMIN_TOKEN", admin_token, 1);
        execv(cohortd, (char **)args);
        _exit(127);
    }
    for (int i = 0; i < 200 && !line[0]; i++) {
        FILE *f = fopen(addr, "r");
        if (f) {
            if (!fgets(line, sizeof line, f))
                line[0] = '\0';
            fclose(f);
        }
        if (!line[0])
            usleep(50000);
    }
    line[strcspn(line, "\n")] = '\0';
    if (!line[0]) {
        fprintf(stderr, "bench: cohortd did not start (see %s)\n", log);
        kill(pid, SIGKILL);
        return -1;
    }
    snprintf(base, n, "http://%s", line);
    return pid;
}

void bench_proc_usage(pid_t pid, long long *ticks, long *rss_kb, long *peak_kb)
{
    char p[64], buf[4096];
    FILE *f;
    *ticks = 0;
    *rss_kb = *peak_kb = 0;
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    if ((f = fopen(p, "r"))) {
        char *s;
        unsigned long ut = 0, st = 0;
        if (fgets(buf, sizeof buf, f) && (s = strrchr(buf, ')')) &&
            sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
            *ticks = (long long)(ut + st);
        fclose(f);
    }
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    if ((f = fopen(p, "r"))) {
        while (fgets(buf, sizeof buf, f))
            if (!strncmp(buf, "VmRSS:", 6))
                *rss_kb = atol(buf + 6);
            else if (!strncmp(buf, "VmHWM:", 6))
                *peak_kb = atol(buf + 6);
        fclose(f);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_pct(double *v, size_t n, double p)
{
    if (!n)
        return -1;
    qsort(v, n, sizeof *v, cmp_double);
    return v[(size_t)(p / 100.0 * (double)(n - 1) + 0.5)];
}
