/*
 * util_valid: name and path validation, apart from the rest of util so that
 * programs needing only these (cohort-shim) link nothing else.
 */
#include <string.h>

#include "storage/util.h"

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

int util_relpath_valid(const char *p, size_t len)
{
    if (len == 0 || len > UTIL_PATH_MAX)
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
