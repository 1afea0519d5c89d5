/*
 * util_valid: name and path validation, apart from the rest of util so that
 * programs needing only these (cohort-shim) link nothing else.
 */
#include <arpa/inet.h>
#include <string.h>

#include "lib/util.h"

int util_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > UTIL_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (i == 0 ? !alnum : !(alnum || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

size_t util_utf8_invalid_at(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        size_t n;
        unsigned cp, min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            n = 1, cp = c & 0x1f, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef)
            n = 2, cp = c & 0x0f, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4)
            n = 3, cp = c & 0x07, min = 0x10000;
        else
            return i; /* a continuation byte first, 0xc0/0xc1 (overlong) or past U+10FFFF */
        if (len - i <= n)
            return i; /* truncated */
        for (size_t k = 1; k <= n; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return i;
            cp = cp << 6 | (p[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return i; /* overlong, out of range, or a UTF-16 surrogate */
        i += n + 1;
    }
    return len;
}

int util_relpath_valid(const char *p, size_t len)
{
    if (len == 0 || len > UTIL_PATH_MAX || util_utf8_invalid_at(p, len) != len)
        return 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len) {
            unsigned char c = (unsigned char)p[i];
            if (c < 0x20 || c == 0x7f || c == '\\')
                return 0;
            if (c != '/')
                continue;
        }
        size_t clen = i - start;
        if (clen == 0)
            return 0;
        if (clen == 1 && p[start] == '.')
            return 0;
        if (clen == 2 && p[start] == '.' && p[start + 1] == '.')
            return 0;
        if (clen > 255)
            return 0;
        start = i + 1;
    }
    return 1;
}

static int is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

int util_image_ref_valid(const char *ref)
{
    size_t n = ref ? strlen(ref) : 0;
    if (n == 0 || n > UTIL_IMAGE_REF_MAX)
        return 0;
    /* host[:port]: letters, digits, dots, dashes; then a port. */
    const char *p = ref;
    size_t h = strcspn(p, "/");
    if (h == 0 || p[h] != '/' || !is_lower_alnum(p[0]))
        return 0;
    for (size_t i = 0; i < h; i++) {
        char c = p[i];
        if (!(is_lower_alnum(c) || c == '.' || c == '-' || c == ':' || (c >= 'A' && c <= 'Z')))
            return 0;
    }
    p += h + 1;
    /* repository: components of [a-z0-9]+ joined by . _ - (or __), split by / */
    size_t r = strcspn(p, ":@");
    if (r == 0)
        return 0;
    if (!is_lower_alnum(p[0]) || !is_lower_alnum(p[r - 1]))
        return 0;
    for (size_t i = 0; i < r; i++) {
        char c = p[i];
        if (!is_lower_alnum(c) && c != '.' && c != '_' && c != '-' && c != '/')
            return 0;
        /* a slash between two letters or digits; never ".." */
        if (c == '/' && (!is_lower_alnum(p[i - 1]) || !is_lower_alnum(p[i + 1])))
            return 0;
        if (c == '.' && p[i + 1] == '.')
            return 0;
    }
    p += r;
    if (*p == ':') { /* tag */
        p++;
        size_t t = strcspn(p, "@");
        if (t == 0 || t > 128 || p[t] == '@')
            return 0;
        for (size_t i = 0; i < t; i++) {
            char c = p[i];
            if (!(is_lower_alnum(c) || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (i > 0 && (c == '.' || c == '-'))))
                return 0;
        }
        return 1;
    }
    if (*p == '@') /* digest */
        return util_digest_valid(p + 1);
    return *p == '\0';
}

int util_digest_valid(const char *s)
{
    return !strncmp(s, "sha256:", 7) && strlen(s) == UTIL_DIGEST_LEN &&
           strspn(s + 7, "0123456789abcdef") == 64;
}

int util_host_valid(const char *s)
{
    unsigned char a6[16];
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 253)
        return 0;
    if (inet_pton(AF_INET6, s, a6) == 1 || inet_pton(AF_INET, s, a6) == 1)
        return 1;
    /* not a dotted quad: a name, whose last label is not all digits (else
     * "127.1", "0x7f.1" or "0" would be read as addresses by the resolver) */
    const char *last = strrchr(s, '.');
    last = last ? last + 1 : s;
    if (strspn(last, "0123456789") == strlen(last))
        return 0;
    /* dot-separated labels of letters, digits and inner hyphens */
    for (const char *label = s;;) {
        size_t len = strspn(label, "abcdefghijklmnopqrstuvwxyz"
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-");
        if (len == 0 || len > 63 || label[0] == '-' || label[len - 1] == '-')
            return 0;
        if (label[len] == '\0')
            return 1;
        if (label[len] != '.')
            return 0;
        label += len + 1;
    }
}
