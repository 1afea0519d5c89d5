/*
 * fuzz_request_path: what cohortd does with a request's path before any
 * handler runs.  The first byte picks the method; the rest is the path as
 * the client sent it.  It is percent-decoded (api_percent_decode, checked
 * against a decoder written here the slow way), routed (api_route_match),
 * and given to the validators of names, relative file paths and image
 * references, whose promises are checked on every input they accept.
 */
#include <string.h>

#include "api/api.h"
#include "lib/util.h"
#include "tests/fuzz/fuzz.h"

#define PATH_MAX_FUZZ 8192

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static int hexval(char c)
{
    const char *digits = "0123456789abcdef", *p;
    if (c >= 'A' && c <= 'F')
        c = (char)(c - 'A' + 'a');
    p = c ? strchr(digits, c) : NULL;
    return p ? (int)(p - digits) : -1;
}

/* The decoder as the contract reads: %XX with two hex digits, %00 -> 0x01. */
static size_t slow_decode(const char *in, char *out)
{
    size_t n = 0;
    for (size_t i = 0; in[i]; i++) {
        if (in[i] == '%' && in[i + 1] && in[i + 2] && hexval(in[i + 1]) >= 0 &&
            hexval(in[i + 2]) >= 0) {
            int v = hexval(in[i + 1]) * 16 + hexval(in[i + 2]);
            out[n++] = v ? (char)v : '\x01';
            i += 2;
        } else {
            out[n++] = in[i];
        }
    }
    out[n] = '\0';
    return n;
}

static void check_relpath(const char *p, size_t len)
{
    if (!util_relpath_valid(p, len))
        return;
    fuzz_check(len >= 1 && len <= UTIL_PATH_MAX, "relpath length");
    fuzz_check(p[0] != '/', "relpath is absolute");
    fuzz_check(util_utf8_invalid_at(p, len) == len, "relpath is not UTF-8");
    fuzz_check(!strchr(p, '\\'), "relpath has a backslash");
    for (size_t i = 0; i < len; i++)
        fuzz_check((unsigned char)p[i] >= 0x20 && p[i] != 0x7f, "relpath has a control byte");
    /* every component: not empty, not "." or ".." */
    for (size_t s = 0; s <= len;) {
        size_t e = s;
        while (e < len && p[e] != '/')
            e++;
        size_t c = e - s;
        fuzz_check(c > 0, "relpath has an empty component");
        fuzz_check(!(c == 1 && p[s] == '.'), "relpath has a '.' component");
        fuzz_check(!(c == 2 && p[s] == '.' && p[s + 1] == '.'), "relpath has a '..' component");
        s = e + 1;
    }
}

static void check_name(const char *s)
{
    if (!util_name_valid(s))
        return;
    size_t n = strlen(s);
    fuzz_check(n >= 1 && n <= 63, "name length");
    fuzz_check((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9'), "name start");
    fuzz_check(strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789._-") == n, "name alphabet");
}

static void check_image_ref(const char *s)
{
    if (!util_image_ref_valid(s))
        return;
    size_t n = strlen(s);
    fuzz_check(n <= UTIL_IMAGE_REF_MAX, "image reference length");
    fuzz_check(s[0] != '-' && s[0] != '/' && s[0] != '.', "image reference reads as an option or path");
    fuzz_check(strchr(s, '/') != NULL, "image reference without a repository");
    for (size_t i = 0; i < n; i++)
        fuzz_check((unsigned char)s[i] > 0x20 && (unsigned char)s[i] < 0x7f,
                   "image reference has a space or control byte");
    fuzz_check(!strstr(s, "/../") && !strstr(s, "/./") && !strstr(s, "//"),
               "image reference walks a path");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const enum api_method methods[] = {API_GET, API_POST, API_PUT, API_DELETE};
    char path[PATH_MAX_FUZZ + 1], want[PATH_MAX_FUZZ + 1];
    char params[PATH_MAX_FUZZ + API_MAX_PARAMS + 1];
    api_req rq;
    int other = 0;
    if (size < 1 || size > PATH_MAX_FUZZ + 1)
        return 0;
    enum api_method m = methods[data[0] % 4];
    memcpy(path, data + 1, size - 1);
    path[size - 1] = '\0';   /* a path never holds a NUL: it ends at the first */

    size_t in_len = strlen(path), want_len = slow_decode(path, want);
    size_t len = api_percent_decode(path);
    fuzz_check(len == want_len && !memcmp(path, want, len + 1), "percent-decoding differs");
    fuzz_check(len <= in_len && strlen(path) == len, "decoded path holds a NUL");

    memset(&rq, 0, sizeof rq);
    const api_route *r = api_route_match(m, path, &rq, params, &other);
    if (r) {
        fuzz_check(r->method == m && r->fn, "route of another method");
        for (int i = 0; i < API_MAX_PARAMS; i++)
            if (rq.param[i])
                fuzz_check(rq.param[i] >= params && rq.param[i] < params + sizeof params &&
                               strlen(rq.param[i]) <= len,
                           "capture outside the caller's buffer");
    }
    check_relpath(path, len);
    check_name(path);
    check_image_ref(path);
    /* The last segment too, as handlers see a {name} capture. */
    const char *last = strrchr(path, '/');
    if (last) {
        check_relpath(last + 1, strlen(last + 1));
        check_name(last + 1);
    }
    return 0;
}
