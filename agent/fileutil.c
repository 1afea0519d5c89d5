/*
 * fileutil: small files read whole (see fileutil.h).
 */
#include "agent/fileutil.h"
#include "lib/fmt.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fu_read(const char *path, char *buf, size_t n)
{
    if (n == 0) {
        errno = EINVAL;
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t got;
    while ((got = read(fd, buf, n - 1)) < 0 && errno == EINTR)
        ;
    int e = errno;
    close(fd);
    if (got < 0) {
        errno = e;
        return -1;
    }
    buf[got] = '\0';
    return 0;
}

int fu_read_in(const char *dir, const char *name, char *buf, size_t n)
{
    char path[PATH_MAX];
    if (fmt_whole(path, sizeof path, "%s/%s", dir, name) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return fu_read(path, buf, n);
}

int fu_find_program(const char *prog, char *out, size_t n)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
    while (*path) {
        size_t len = strcspn(path, ":");
        if (fmt_whole(out, n, "%.*s/%s", (int)len, path, prog) == 0 && access(out, X_OK) == 0)
            return 0;
        path += len + (path[len] == ':');
    }
    return -1;
}
