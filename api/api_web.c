/*
 * api_web: the console's static files, served from one directory (the web
 * root, cohortd --web-dir) at every path outside the API.  A path whose
 * last component has an extension is a file of the root; any other path is
 * a page of the console's own router and gets index.html.  Paths are
 * validated (util_relpath_valid, no dot files) and opened one component at
 * a time without following symbolic links, so nothing outside the root is
 * ever sent.  The security headers (Content-Security-Policy) are the
 * server's, on every response.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api_int.h"
#include "lib/fmt.h"

struct ctype {
    const char *ext;
    const char *type;
};

static const struct ctype ctypes[] = {
    {"html", "text/html; charset=utf-8"},
    {"js", "text/javascript; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"},
    {"css", "text/css; charset=utf-8"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"ico", "image/x-icon"},
    {"json", "application/json"},
    {"txt", "text/plain; charset=utf-8"},
    {"woff2", "font/woff2"},
    {NULL, NULL},
};

/* The content type for a file name; NULL for a kind the console never has. */
static const char *ctype_of(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return NULL;
    for (const struct ctype *c = ctypes; c->ext; c++)
        if (!strcmp(dot + 1, c->ext))
            return c->type;
    return NULL;
}

int api_web_open(api_ctx *ctx, const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        fmt_cut(err, errlen, "web root %s: %s", dir, strerror(errno));
        return -1;
    }
    int idx = api_open_beneath(fd, "index.html");
    if (idx < 0) {
        fmt_cut(err, errlen, "web root %s has no index.html: %s", dir, strerror(-idx));
        close(fd);
        return -1;
    }
    close(idx);
    ctx->web_fd = fd;
    return 0;
}

void api_web_close(api_ctx *ctx)
{
    if (ctx->web_fd >= 0)
        close(ctx->web_fd);
    ctx->web_fd = -1;
}

/* No component of rel starts with a dot (dot files, "..", "."). */
static int no_dot_component(const char *rel)
{
    for (const char *p = rel; p; p = strchr(p, '/')) {
        if (*p == '/')
            p++;
        if (*p == '.')
            return 0;
    }
    return 1;
}

int api_web_serve(api_ctx *ctx, const char *path, api_resp *rs)
{
    if (!strcmp(path, "/v1") || !strncmp(path, "/v1/", 4) || !strcmp(path, "/healthz") ||
        !strcmp(path, "/metrics"))
        return 0; /* the API's own 404 */
    if (ctx->web_fd < 0) {
        api_error(rs, 404, "not_found", NULL,
                  "this cohortd serves no console (started without a web root)");
        return 1;
    }
    const char *rel = path[0] == '/' ? path + 1 : path;
    size_t len = strlen(rel);
    if (len > 0 && (!util_relpath_valid(rel, len) || !no_dot_component(rel))) {
        api_error(rs, 404, "not_found", NULL, "no such file in the console");
        return 1;
    }
    const char *last = strrchr(rel, '/');
    last = last ? last + 1 : rel;
    const char *type;
    if (!strchr(last, '.')) {
        /* A page of the console (/, /jobs/12, /billing): its router takes it. */
        rel = "index.html";
        type = ctype_of(rel);
    } else if (!(type = ctype_of(last))) {
        api_error(rs, 404, "not_found", NULL, "no such file in the console");
        return 1;
    }
    int fd = api_open_beneath(ctx->web_fd, rel);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0)
            close(fd);
        api_error(rs, 404, "not_found", NULL, "no such file in the console");
        return 1;
    }
    rs->status = 200;
    rs->fd = fd;
    rs->fsize = sb.st_size;
    rs->foffset = 0;
    rs->ctype = type;
    rs->cache = "no-cache";
    return 1;
}
