/*
 * bench_http: what the benchmarks that drive cohortd over HTTP share: one
 * call with a bearer token, its answer in a buffer that grows as needed,
 * and the configuration of the registry they serve their images from.
 */
#ifndef COHORT_BENCH_HTTP_H
#define COHORT_BENCH_HTTP_H

#include <stddef.h>

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

/* Writes dir/registry.yml for docker-registry serving dir/registry at addr
 * ("IP:PORT"); its path goes to conf.  0, or -1 when it cannot be written. */
int bench_registry_conf(const char *dir, const char *addr, char *conf, size_t n);

#endif
