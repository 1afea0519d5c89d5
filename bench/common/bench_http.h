/*
 * bench_http: what the benchmarks that drive cohortd over HTTP share: one
 * call with a bearer token, its answer in a buffer that grows as needed,
 * and the configuration of the registry they serve their images from.
 */
#ifndef COHORT_BENCH_HTTP_H
#define COHORT_BENCH_HTTP_H

#include <stddef.h>
#include <sys/types.h>

#include <curl/curl.h>

typedef struct bench_sink {
    char *buf; /* the last answer's body, NUL-terminated; "" after a failed call */
    size_t len, cap;
} bench_sink;

/*
 * method base+path on c with "Authorization: Bearer token", a body of n
 * bytes when body is set (of Content-Type ctype when set) and an
 * Idempotency-Key when idem is set; 30 s at most.  The HTTP status, or 0
 * when no answer came (out->buf is then "" or what arrived).
 */
long bench_call(CURL *c, const char *base, const char *token, const char *method,
                const char *path, const char *ctype, const void *body, size_t n,
                const char *idem, bench_sink *out);

/* Frees out's buffer; it may be used again afterwards. */
void bench_sink_free(bench_sink *out);
/* The end of a set-up made of calls into out: when rc is not 0, says on
 * stderr that what failed, with the last answer.  Frees out; returns rc. */
int bench_setup_end(int rc, const char *what, bench_sink *out);

/* A CURLOPT_WRITEFUNCTION that appends to the bench_sink given as its
 * CURLOPT_WRITEDATA (for handles driven by a multi handle). */
size_t bench_sink_write(char *p, size_t size, size_t n, void *sink);

/*
 * Starts build/cohortd on 127.0.0.1 (a free port) with dir as its data dir,
 * admin_token as its admin token, its output in dir/cohortd.log, and the
 * NULL-ended extra options.
 * Waits up to 10 s for it to listen and writes "http://IP:PORT" to base.
 * Its pid, or -1 (why on stderr).
 */
pid_t bench_cohortd_start(const char *build, const char *dir, const char *admin_token,
                          const char *const *extra, char *base, size_t n);

/* pid's CPU time so far (utime + stime, clock ticks), its RSS and its peak
 * RSS (kB); 0 for what cannot be read. */
void bench_proc_usage(pid_t pid, long long *ticks, long *rss_kb, long *peak_kb);

/* The p-th percentile (0..100, nearest rank) of v[0..n); sorts v. -1 when n is 0. */
double bench_pct(double *v, size_t n, double p);

/* Writes dir/registry.yml for docker-registry serving dir/registry at addr
 * ("IP:PORT"); its path goes to conf.  0, or -1 when it cannot be written. */
int bench_registry_conf(const char *dir, const char *addr, char *conf, size_t n);

#endif
