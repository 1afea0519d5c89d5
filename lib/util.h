/*
 * util: small helpers every layer needs and no layer owns: clock, random
 * tokens, SHA-256, hex, constant-time compare, name and path validation,
 * and a growable string buffer.  lib/ is the lowest layer: every other may
 * use it, and it uses nothing of Cohort's; it depends on libc and libcrypto.
 */
#ifndef COHORT_UTIL_H
#define COHORT_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/clock.h"

#define UTIL_TOKEN_BYTES 32            /* 256 random bits */
#define UTIL_TOKEN_PREFIX "coh_"
#define UTIL_TOKEN_LEN (4 + 2 * UTIL_TOKEN_BYTES) /* prefix + hex */
#define UTIL_SHA256_LEN 32
#define UTIL_NAME_MAX 63
#define UTIL_PATH_MAX 1024

/* Wall clock in milliseconds since the epoch (the monotonic clock: clock.h). */
int64_t util_now_ms(void);

/* Formats ms since the epoch as RFC 3339 UTC with milliseconds into out[32]. */
void util_rfc3339(int64_t ms, char out[32]);

/* Days since 1970-01-01 of a proleptic Gregorian date (month 1..12). */
int64_t util_days_from_civil(int y, unsigned m, unsigned d);
/* The first millisecond (UTC) of the month holding ms, and of the month after. */
void util_month_bounds(int64_t ms, int64_t *start, int64_t *next);
/*
 * Parses "YYYY-MM-DD" (00:00 UTC) or "YYYY-MM-DDTHH:MM:SS[.mmm]Z" into ms
 * since the epoch: 0, or -1 when s is not one of those or not a real date.
 */
int util_parse_time(const char *s, int64_t *ms);
/* Parses "YYYY-MM" into its month's bounds: 0, or -1. */
int util_parse_month(const char *s, int64_t *start, int64_t *next);

/* Fills buf with n bytes from the kernel's CSPRNG.  0 or -1. */
int util_random(void *buf, size_t n);

/* Writes a fresh bearer token ("coh_" + 64 hex) into out[UTIL_TOKEN_LEN + 1]. */
int util_token_new(char out[UTIL_TOKEN_LEN + 1]);

void util_sha256(const void *data, size_t len, uint8_t out[UTIL_SHA256_LEN]);
/* SHA-256 of what is left to read from fd, read to its end: 0, or -1 with
 * errno set (a read error, or EFBIG past max bytes).  *n gets the bytes read. */
int util_sha256_fd(int fd, int64_t max, uint8_t out[UTIL_SHA256_LEN], int64_t *n);
void util_hex(const uint8_t *in, size_t n, char *out); /* out holds 2n+1 */

/* Constant-time equality of two equal-length buffers: 1 when equal. */
int util_ct_equal(const void *a, const void *b, size_t n);

/* 1 when s matches [a-z0-9][a-z0-9._-]{0,62}. */
int util_name_valid(const char *s);

/* Where s (len bytes) stops being UTF-8 as RFC 3629 defines it (no overlong
 * forms, no surrogates, nothing past U+10FFFF, no truncated sequence): the
 * offset of the first bad byte, or len when all of it is valid. */
size_t util_utf8_invalid_at(const char *s, size_t len);

/*
 * 1 when p is an acceptable relative file path: 1..UTIL_PATH_MAX bytes of UTF-8,
 * components separated by single '/', no empty, "." or ".." component,
 * no leading '/', no NUL or control characters, no backslash.
 */
int util_relpath_valid(const char *p, size_t len);

#define UTIL_IMAGE_REF_MAX 511
/*
 * 1 when ref is an OCI image reference HOST[:PORT]/REPO[:TAG] or
 * HOST[:PORT]/REPO@sha256:HEX (REPO: lower-case letters and digits joined by
 * '.', '_', '-' and '/'), at most UTIL_IMAGE_REF_MAX bytes.  Nothing else
 * passes, so a reference can never be read as an option or a path.
 */
int util_image_ref_valid(const char *ref);
/* 1 when s is an image digest as Cohort keeps them: "sha256:" and 64
 * lower-case hex digits, nothing else. */
#define UTIL_DIGEST_LEN 71
int util_digest_valid(const char *s);
/* 1 when s is a host name (labels of letters, digits and inner hyphens,
 * joined by dots, the last not all digits), an IPv4 address in dotted
 * quads or an IPv6 address, at most 253 bytes:
 * nothing else, so that it is never read as an option, a path or more
 * than one line. */
int util_host_valid(const char *s);

/*
 * Stops a background thread that sleeps on wake under lock: sets *stopping
 * under the lock, wakes the thread and joins it.  The caller then destroys
 * what the thread used.
 */
void util_thread_stop(pthread_mutex_t *lock, pthread_cond_t *wake, int *stopping, pthread_t thread);

/*
 * Runs the shell command formatted from fmt (at most 4,095 bytes) with
 * system(): its status, or -1 when the command would not fit (then nothing
 * runs).  For tests and benches; daemons spawn with argv, never a shell.
 */
int util_system(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Growable byte buffer.  The owner frees buf with free(). */
typedef struct util_buf {
    char *buf;
    size_t len;
    size_t cap;
    int oom;      /* set once an allocation failed; later appends are ignored */
} util_buf;

void util_buf_append(util_buf *b, const void *data, size_t n);
void util_buf_printf(util_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/*
 * Appends size * n bytes from p to the util_buf at buf: a write callback of the
 * shape libcurl's CURLOPT_WRITEFUNCTION takes.  Returns the bytes taken, 0 when
 * memory ran out (which ends a curl transfer).  The text stays NUL-terminated.
 */
size_t util_buf_sink(char *p, size_t size, size_t n, void *buf);

/* Growable array of int64_t, zeroed to start.  The owner frees v with free(). */
typedef struct util_i64s {
    int64_t *v;
    size_t n, cap;
} util_i64s;

/* Appends x; -1, and nothing appended, when memory runs out. */
int util_i64s_push(util_i64s *a, int64_t x);

/*
 * Appends v to the array arr of n elements in cap allocated, growing it by
 * doubling (realloc; arr, n and cap are lvalues).  On out-of-memory appends
 * nothing and sets *(oom), which the caller turns into its own error.
 */
#define UTIL_PUSH(arr, n, cap, v, oom)                                                     \
    do {                                                                                   \
        if ((n) == (cap)) {                                                                \
            size_t nc_ = (cap) ? (cap) * 2 : 64;                                           \
            void *np_ = realloc((arr), nc_ * sizeof *(arr));                               \
            if (!np_) {                                                                    \
                *(oom) = 1;                                                                \
                break;                                                                     \
            }                                                                              \
            (arr) = np_;                                                                   \
            (cap) = nc_;                                                                   \
        }                                                                                  \
        (arr)[(n)++] = (v);                                                                \
    } while (0)

#endif
