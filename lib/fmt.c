/*
 * fmt: formatting into fixed buffers, whole or cut by name (see fmt.h).
 */
#include "lib/fmt.h"

#include <stdarg.h>
#include <stdio.h>

int fmt_whole(char *buf, size_t n, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int len = n > 0 ? vsnprintf(buf, n, f, ap) : -1;
    va_end(ap);
    if (len >= 0 && (size_t)len < n)
        return 0;
    if (n > 0)
        buf[0] = '\0';
    return -1;
}

int fmt_path(char *buf, size_t n, const char *dir, const char *name)
{
    return fmt_whole(buf, n, "%s/%s", dir, name);
}

void fmt_cut(char *buf, size_t n, const char *f, ...)
{
    va_list ap;
    if (n == 0)
        return;
    va_start(ap, f);
    if (vsnprintf(buf, n, f, ap) < 0)
        buf[0] = '\0';
    va_end(ap);
}
