/*
 * cohort-shim: started by cohort-agent (posix_spawn) for each worker, with
 * its launch request (shim_req.h) on standard input.  It creates the
 * worker's state directory, turns the request into the sandbox of shim.h,
 * detaches and runs the worker.  A request it cannot use ends as
 * dir/status "error ..." when dir is known.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/shim.h"
#include "lib/fmt.h"
#include "agent/shim_req.h"

#define REQUEST_MAX (4 << 20)

static void fail(const char *dir, const char *msg)
{
    char path[4200];
    fprintf(stderr, "cohort-shim: %s\n", msg);
    if (!dir)
        return;
    FILE *f = fmt_path(path, sizeof path, dir, "status") == 0 ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "error %s\n", msg);
        fclose(f);
    }
}

/* Reads all of standard input (bounded). */
static char *slurp(void)
{
    size_t cap = 8192, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len + 1 == cap) {
            if (cap >= REQUEST_MAX) {
                free(buf);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(0, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    if (buf)
        buf[len] = '\0';
    return buf;
}

int main(void)
{
    int rc = 1;
    char msg[700];
    shim_req *r = malloc(sizeof *r);
    char *text = slurp();
    if (!r) {
        fail(NULL, "out of memory");
        free(text);
        return 1;
    }
    int parsed = shim_req_parse(text, r, msg, sizeof msg);
    if (r->dir && mkdir(r->dir, 0700) != 0 && errno != EEXIST) {
        fmt_cut(msg, sizeof msg, "cannot create %.200s: %s", r->dir, strerror(errno));
        fail(NULL, msg);
        goto out;
    }
    if (parsed != 0) {
        fail(r->dir, msg);
        goto out;
    }
    if (shim_start(r->dir, &r->sp, r->note) != 0) {
        fail(r->dir, "cannot start the shim");
        goto out;
    }
    rc = 0; /* the detached shim goes on with its own copy of all this */
out:
    shim_req_free(r);
    free(r);
    free(text);
    return rc;
}
