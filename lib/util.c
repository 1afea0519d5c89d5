/*
 * util: clock, randomness, hashing and validation helpers shared by every
 * layer.  Owns nothing beyond the buffers callers pass in.
 */
#include "lib/util.h"
#include "lib/fmt.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

int64_t util_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Civil date from days since 1970-01-01 (proleptic Gregorian), by whole
 * 400-year eras.  Pure arithmetic: gmtime_r would take glibc's global
 * time-zone lock on every call.
 */
static void civil(int64_t days, int *y, unsigned *m, unsigned *d)
{
    days += 719468;
    int64_t era = (days >= 0 ? days : days - 146096) / 146097;
    unsigned doe = (unsigned)(days - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

int64_t util_days_from_civil(int y, unsigned m, unsigned d)
{
    int64_t yy = (int64_t)y - (m <= 2);
    int64_t era = (yy >= 0 ? yy : yy - 399) / 400;
    unsigned yoe = (unsigned)(yy - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

void util_month_bounds(int64_t ms, int64_t *start, int64_t *next)
{
    int64_t days = ms >= 0 ? ms / 86400000 : (ms - 86399999) / 86400000;
    int y;
    unsigned m, d;
    civil(days, &y, &m, &d);
    *start = util_days_from_civil(y, m, 1) * 86400000;
    *next = (m == 12 ? util_days_from_civil(y + 1, 1, 1) : util_days_from_civil(y, m + 1, 1)) *
            86400000;
}

static int digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

static int month_days(int y, int m)
{
    static const int len[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return len[m - 1] + (m == 2 && leap);
}

int util_parse_time(const char *s, int64_t *ms)
{
    int y, mo, d, h = 0, mi = 0, sec = 0, milli = 0;
    size_t n = strlen(s);
    if (n < 10 || digits(s, 4, &y) || s[4] != '-' || digits(s + 5, 2, &mo) || s[7] != '-' ||
        digits(s + 8, 2, &d) || y < 1970 || mo < 1 || mo > 12 || d < 1 ||
        d > month_days(y, mo))
        return -1;
    if (n > 10) {
        const char *t = s + 10;
        if (n < 20 || t[0] != 'T' || digits(t + 1, 2, &h) || t[3] != ':' ||
            digits(t + 4, 2, &mi) || t[6] != ':' || digits(t + 7, 2, &sec) || h > 23 ||
            mi > 59 || sec > 59)
            return -1;
        t += 9;
        if (*t == '.') {
            if (digits(t + 1, 3, &milli))
                return -1;
            t += 4;
        }
        if (strcmp(t, "Z") != 0)
            return -1;
    }
    *ms = ((util_days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 +
            sec) *
           1000) +
          milli;
    return 0;
}

int util_parse_month(const char *s, int64_t *start, int64_t *next)
{
    int y, mo;
    if (strlen(s) != 7 || digits(s, 4, &y) || s[4] != '-' || digits(s + 5, 2, &mo) ||
        y < 1970 || mo < 1 || mo > 12)
        return -1;
    util_month_bounds(util_days_from_civil(y, (unsigned)mo, 1) * 86400000, start, next);
    return 0;
}

void util_rfc3339(int64_t ms, char out[32])
{
    int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
    int64_t days = secs >= 0 ? secs / 86400 : (secs - 86399) / 86400;
    int64_t sod = secs - days * 86400;
    int y;
    unsigned mo, d;
    civil(days, &y, &mo, &d);
    char b[96];
    /* cut at 31 only for years past 9999 */
    fmt_cut(b, sizeof b, "%04d-%02u-%02uT%02u:%02u:%02u.%03uZ", y, mo, d,
            (unsigned)(sod / 3600), (unsigned)(sod / 60 % 60), (unsigned)(sod % 60),
            (unsigned)(ms - secs * 1000));
    size_t n = strlen(b) > 31 ? 31 : strlen(b);
    memcpy(out, b, n);
    out[n] = '\0';
}

int util_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int util_token_new(char out[UTIL_TOKEN_LEN + 1])
{
    uint8_t raw[UTIL_TOKEN_BYTES];
    if (util_random(raw, sizeof raw) != 0)
        return -1;
    memcpy(out, UTIL_TOKEN_PREFIX, 4);
    util_hex(raw, sizeof raw, out + 4);
    OPENSSL_cleanse(raw, sizeof raw);
    return 0;
}

/* OpenSSL 3's SHA256() looks the algorithm up on every call, more than half
 * of what hashing a token costs: look it up once and keep it for the process. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void util_sha256(const void *data, size_t len, uint8_t out[UTIL_SHA256_LEN])
{
    pthread_once(&sha256_once, sha256_fetch);
    if (!sha256_md || !EVP_Digest(data, len, out, NULL, sha256_md, NULL))
        SHA256(data, len, out);
}

int util_sha256_fd(int fd, int64_t max, uint8_t out[UTIL_SHA256_LEN], int64_t *n)
{
    int rc = -1, e = 0;
    char buf[1 << 16];
    *n = 0;
    pthread_once(&sha256_once, sha256_fetch);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || !EVP_DigestInit_ex(c, sha256_md ? sha256_md : EVP_sha256(), NULL)) {
        e = ENOMEM;
        goto out;
    }
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            e = errno;
            goto out;
        }
        if (r == 0)
            break;
        *n += r;
        if (*n > max) {
            e = EFBIG;
            goto out;
        }
        if (!EVP_DigestUpdate(c, buf, (size_t)r)) {
            e = EIO;
            goto out;
        }
    }
    if (!EVP_DigestFinal_ex(c, out, NULL)) {
        e = EIO;
        goto out;
    }
    rc = 0;
out:
    EVP_MD_CTX_free(c);
    if (rc)
        errno = e;
    return rc;
}

void util_hex(const uint8_t *in, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[in[i] >> 4];
        out[2 * i + 1] = d[in[i] & 15];
    }
    out[2 * n] = '\0';
}

int util_ct_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

static int buf_grow(util_buf *b, size_t need)
{
    if (b->oom)
        return -1;
    if (b->len + need + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + need + 1)
        cap *= 2;
    char *nb = realloc(b->buf, cap);
    if (!nb) {
        b->oom = 1;
        return -1;
    }
    b->buf = nb;
    b->cap = cap;
    return 0;
}

void util_buf_append(util_buf *b, const void *data, size_t n)
{
    if (buf_grow(b, n) != 0)
        return;
    memcpy(b->buf + b->len, data, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

size_t util_buf_sink(char *p, size_t size, size_t n, void *buf)
{
    util_buf *b = buf;
    size_t add = size * n;
    util_buf_append(b, p, add);
    return b->oom ? 0 : add;
}

int util_i64s_push(util_i64s *a, int64_t x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int64_t *v = cap > SIZE_MAX / sizeof *v ? NULL : realloc(a->v, cap * sizeof *v);
        if (!v)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

void util_buf_printf(util_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_grow(b, (size_t)n) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void util_thread_stop(pthread_mutex_t *lock, pthread_cond_t *wake, int *stopping, pthread_t thread)
{
    pthread_mutex_lock(lock);
    *stopping = 1;
    pthread_cond_signal(wake);
    pthread_mutex_unlock(lock);
    pthread_join(thread, NULL);
}

int util_system(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof cmd)
        return -1;
    return system(cmd);
}
