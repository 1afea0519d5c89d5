/*
 * sync: directories to volumes and back (sync.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/out.h"
#include "lib/fmt.h"
#include "cli/sync.h"

#define RULES_MAX 1000
#define DEPTH_MAX 64

struct rule {
    char pat[UTIL_PATH_MAX + 1];
    int negate, dir_only, anchored;
};

struct rules {
    struct rule *r;
    size_t n, cap;
};

struct lfile {
    char *rel;
    int64_t size;
    int exec;
};

struct walk {
    struct rules rules;
    struct lfile *f;
    size_t n, cap;
    long left_out;
    int oom, bad;
};

struct rfile {
    char *rel;
    int64_t size;
    char mode[8];
    char sha[65];
};

struct remote {
    struct rfile *f;
    size_t n, cap;
    int oom;
};

/* ---- .cohortignore ---- */

static int load_rules(int root, struct rules *rs)
{
    int fd = openat(root, ".cohortignore", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 0 : cli_fail(CLI_FAILED, ".cohortignore: %s", strerror(errno));
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return cli_fail(CLI_FAILED, ".cohortignore: %s", strerror(errno));
    }
    char line[UTIL_PATH_MAX + 8];
    int rc = 0, oom = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\r\n");
        if (!line[n] && !feof(f)) {
            rc = cli_fail(CLI_FAILED, ".cohortignore: a line longer than %d bytes", UTIL_PATH_MAX);
            break;
        }
        line[n] = '\0';
        while (n && (line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = '\0';
        if (!n || line[0] == '#')
            continue;
        struct rule r = {0};
        char *p = line;
        if (*p == '!')
            r.negate = 1, p++;
        n = strlen(p);
        if (n && p[n - 1] == '/')
            r.dir_only = 1, p[--n] = '\0';
        r.anchored = strchr(p, '/') != NULL;
        if (*p == '/')
            p++;
        if (!*p)
            continue;
        n = strlen(p);
        if (n >= sizeof r.pat) {
            rc = cli_fail(CLI_FAILED, ".cohortignore: a pattern longer than %d bytes", UTIL_PATH_MAX);
            break;
        }
        memcpy(r.pat, p, n + 1);
        if (rs->n == RULES_MAX)
            rc = cli_fail(CLI_FAILED, ".cohortignore: more than %d patterns", RULES_MAX);
        else
            UTIL_PUSH(rs->r, rs->n, rs->cap, r, &oom);
        if (oom)
            rc = cli_fail(CLI_FAILED, "out of memory");
    }
    fclose(f);
    return rc;
}

static int ignored(const struct rules *rs, const char *rel, const char *name, int is_dir)
{
    int out = 0;
    for (size_t i = 0; i < rs->n; i++) {
        const struct rule *r = &rs->r[i];
        if (r->dir_only && !is_dir)
            continue;
        if (fnmatch(r->pat, r->anchored ? rel : name, r->anchored ? FNM_PATHNAME : 0) == 0)
            out = !r->negate;
    }
    return out;
}

/* ---- the local side ---- */

static void walk_dir(int fd, const char *prefix, struct walk *w, int depth)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        w->bad = 1;
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL && !w->oom && !w->bad) {
        const char *nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..") || (!depth && !strcmp(nm, ".git")))
            continue;
        char rel[UTIL_PATH_MAX + 2];
        int n = fmt_whole(rel, sizeof rel, "%s%s", prefix, nm) == 0 ? (int)strlen(rel) : -1;
        struct stat sb;
        if (fstatat(dirfd(d), nm, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (ignored(&w->rules, rel, nm, S_ISDIR(sb.st_mode)))
            continue;
        if (n < 0 || n > UTIL_PATH_MAX || !util_relpath_valid(rel, (size_t)n)) {
            fprintf(stderr, "cohort: %s: a name cohortd does not take (UTF-8, no control "
                            "characters or backslash, at most %d bytes)\n", rel, UTIL_PATH_MAX);
            w->bad = 1;
            break;
        }
        if (S_ISDIR(sb.st_mode) && depth < DEPTH_MAX) {
            int sub = openat(dirfd(d), nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            rel[n] = '/', rel[n + 1] = '\0';
            if (sub >= 0)
                walk_dir(sub, rel, w, depth + 1);
            continue;
        }
        if (!S_ISREG(sb.st_mode)) {
            fprintf(stderr, "cohort: %s: not a regular file (a link?): left out\n", rel);
            w->left_out++;
            continue;
        }
        struct lfile f = {strdup(rel), sb.st_size, (sb.st_mode & 0111) != 0};
        if (!f.rel)
            w->oom = 1;
        else
            UTIL_PUSH(w->f, w->n, w->cap, f, &w->oom);
    }
    closedir(d);
}

/* ---- the volume's side ---- */

static void volume_path(util_buf *b, const char *kind, const char *name)
{
    util_buf_printf(b, "/v1/%s/", kind);
    cli_escape(b, name);
}

static int rfile_cmp(const void *a, const void *b)
{
    return strcmp(((const struct rfile *)a)->rel, ((const struct rfile *)b)->rel);
}

static int list_page(cli *c, const char *base, const char *cursor, int sums, struct remote *rm,
                     char **next)
{
    util_buf p = {0};
    util_buf_printf(&p, "%s/files?limit=1000%s", base, sums ? "&sha256=true" : "");
    if (cursor) {
        util_buf_printf(&p, "&cursor=");
        cli_escape(&p, cursor);
    }
    cJSON *o = NULL;
    int rc = p.oom ? CLI_FAILED : cli_get_json(c, p.buf, &o);
    free(p.buf);
    if (rc)
        return rc;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(o, "items")) {
        const char *rel = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "path"));
        const char *mode = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "mode"));
        const char *sha = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "sha256"));
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(it, "size");
        if (!rel || !cJSON_IsNumber(size))
            continue;
        struct rfile f = {strdup(rel), (int64_t)size->valuedouble, "", ""};
        fmt_cut(f.mode, sizeof f.mode, "%s", mode ? mode : "");
        fmt_cut(f.sha, sizeof f.sha, "%s", sha ? sha : "");
        if (!f.rel)
            rm->oom = 1;
        else
            UTIL_PUSH(rm->f, rm->n, rm->cap, f, &rm->oom);
    }
    const char *nc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "next_cursor"));
    *next = nc ? strdup(nc) : NULL;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "truncated")))
        fprintf(stderr, "cohort: the volume holds more than the server lists; files past it "
                        "are sent again\n");
    cJSON_Delete(o);
    return rm->oom ? cli_fail(CLI_FAILED, "out of memory") : CLI_OK;
}

static int list_remote(cli *c, const char *base, int sums, struct remote *rm)
{
    char *cursor = NULL;
    int rc;
    do {
        char *next = NULL;
        rc = list_page(c, base, cursor, sums, rm, &next);
        free(cursor);
        cursor = next;
    } while (rc == CLI_OK && cursor);
    free(cursor);
    if (rc == CLI_OK && rm->n > 1)
        qsort(rm->f, rm->n, sizeof *rm->f, rfile_cmp);
    return rc;
}

static void remote_free(struct remote *rm)
{
    for (size_t i = 0; i < rm->n; i++)
        free(rm->f[i].rel);
    free(rm->f);
}

int sync_ensure(cli *c, const char *kind, const char *name)
{
    util_buf p = {0};
    volume_path(&p, kind, name);
    cli_resp r;
    cli_req rq = CLI_REQ("GET", p.buf);
    int rc = p.oom ? CLI_FAILED : cli_request_quiet(c, &rq, &r);
    if (rc != CLI_OK && r.status == 404) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", name);
        char *body = cJSON_PrintUnformatted(o);
        util_buf list = {0};
        util_buf_printf(&list, "/v1/%s", kind);
        rc = body && !list.oom ? cli_post_json(c, list.buf, body, NULL) : CLI_FAILED;
        if (rc == CLI_OK)
            fprintf(stderr, "cohort: made %s %s\n", !strcmp(kind, "datasets") ? "dataset" : "workspace",
                    name);
        free(list.buf);
        free(body);
        cJSON_Delete(o);
    } else {
        cli_report(&r, rc);
    }
    cli_resp_free(&r);
    free(p.buf);
    return rc;
}

/* Whether local file f equals what the volume has (same size, x bit, sum). */
static int unchanged(int root, const struct lfile *f, const struct remote *rm)
{
    struct rfile key = {.rel = f->rel};
    const struct rfile *r = rm->n ? bsearch(&key, rm->f, rm->n, sizeof *rm->f, rfile_cmp) : NULL;
    if (!r || r->size != f->size || !r->sha[0] || strcmp(r->mode, f->exec ? "755" : "644"))
        return 0;
    int fd = openat(root, f->rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    uint8_t sum[UTIL_SHA256_LEN];
    char hex[65];
    int64_t n;
    int rc = fd >= 0 ? util_sha256_fd(fd, INT64_MAX, sum, &n) : -1;
    if (fd >= 0)
        close(fd);
    if (rc)
        return 0;
    util_hex(sum, sizeof sum, hex);
    return !strcmp(hex, r->sha);
}

static int upload(cli *c, const char *base, int root, const struct lfile *f, out_bar *bar)
{
    int fd = openat(root, f->rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return cli_fail(CLI_FAILED, "%s: %s", f->rel, strerror(errno));
    struct stat sb;
    fstat(fd, &sb);
    util_buf p = {0};
    util_buf_printf(&p, "%s/files/", base);
    cli_escape(&p, f->rel);
    util_buf_printf(&p, "?mode=%s", f->exec ? "755" : "644");
    cli_req rq = CLI_REQ("PUT", p.buf);
    rq.upload_fd = fd;
    rq.upload_size = sb.st_size;
    rq.progress = out_bar_file;
    rq.progress_arg = bar;
    cli_resp r;
    int rc = p.oom ? CLI_FAILED : cli_request(c, &rq, &r);
    if (rc != CLI_OK)
        fprintf(stderr, "cohort: %s was not sent\n", f->rel);
    cli_resp_free(&r);
    free(p.buf);
    close(fd);
    out_bar_next(bar, sb.st_size);
    return rc;
}

int sync_push(cli *c, const char *kind, const char *name, const char *dir, sync_stats *st)
{
    struct walk w = {0};
    struct remote rm = {0};
    util_buf base = {0};
    size_t *todo = NULL, ntodo = 0;
    int64_t total = 0;
    *st = (sync_stats){0};
    int root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return cli_fail(CLI_FAILED, "%s: %s", dir, strerror(errno));
    int rc = load_rules(root, &w.rules);
    if (rc == CLI_OK) {
        walk_dir(fcntl(root, F_DUPFD_CLOEXEC, 0), "", &w, 0);
        if (w.oom || w.bad)
            rc = w.oom ? cli_fail(CLI_FAILED, "out of memory") : CLI_FAILED;
    }
    st->left_out = w.left_out;
    volume_path(&base, kind, name);
    if (rc == CLI_OK)
        rc = list_remote(c, base.buf, 1, &rm);
    if (rc == CLI_OK && !(todo = calloc(w.n + 1, sizeof *todo)))
        rc = cli_fail(CLI_FAILED, "out of memory");
    for (size_t i = 0; rc == CLI_OK && i < w.n; i++) {
        if (unchanged(root, &w.f[i], &rm)) {
            st->unchanged++;
        } else {
            todo[ntodo++] = i;
            total += w.f[i].size;
        }
    }
    out_bar bar;
    out_bar_start(&bar, c, "upload", total);
    for (size_t k = 0; rc == CLI_OK && k < ntodo; k++) {
        rc = upload(c, base.buf, root, &w.f[todo[k]], &bar);
        if (rc == CLI_OK)
            st->sent++, st->bytes_sent += w.f[todo[k]].size;
    }
    out_bar_end(&bar);
    for (size_t i = 0; i < w.n; i++)
        free(w.f[i].rel);
    free(w.f);
    free(w.rules.r);
    free(todo);
    free(base.buf);
    remote_free(&rm);
    close(root);
    return rc;
}

/* mkdir -p of the directories of rel under root. */
static int make_parents(int root, const char *rel)
{
    char p[UTIL_PATH_MAX + 1];
    if (fmt_whole(p, sizeof p, "%s", rel) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = strchr(p, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdirat(root, p, 0755) != 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return 0;
}

static int download(cli *c, const char *base, int root, const struct rfile *f, out_bar *bar)
{
    char tmp[UTIL_PATH_MAX + 64];
    if (make_parents(root, f->rel) != 0)
        return cli_fail(CLI_FAILED, "%s: %s", f->rel, strerror(errno));
    int fd = fmt_whole(tmp, sizeof tmp, "%s.cohort-part-%d", f->rel, (int)getpid()) != 0
                 ? (errno = ENAMETOOLONG, -1)
                 : openat(root, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                          !strcmp(f->mode, "755") ? 0755 : 0644);
    if (fd < 0)
        return cli_fail(CLI_FAILED, "%s: %s", f->rel, strerror(errno));
    util_buf p = {0};
    util_buf_printf(&p, "%s/files/", base);
    cli_escape(&p, f->rel);
    cli_req rq = CLI_REQ("GET", p.buf);
    rq.download_fd = fd;
    rq.progress = out_bar_file;
    rq.progress_arg = bar;
    cli_resp r;
    int rc = p.oom ? CLI_FAILED : cli_request(c, &rq, &r);
    if (close(fd) != 0 && rc == CLI_OK)
        rc = cli_fail(CLI_FAILED, "%s: %s", f->rel, strerror(errno));
    if (rc == CLI_OK && renameat(root, tmp, root, f->rel) != 0)
        rc = cli_fail(CLI_FAILED, "%s: %s", f->rel, strerror(errno));
    if (rc != CLI_OK)
        unlinkat(root, tmp, 0);
    cli_resp_free(&r);
    free(p.buf);
    out_bar_next(bar, f->size);
    return rc;
}

int sync_pull(cli *c, const char *kind, const char *name, const char *dir, sync_stats *st)
{
    struct remote rm = {0};
    util_buf base = {0};
    int64_t total = 0;
    *st = (sync_stats){0};
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return cli_fail(CLI_FAILED, "%s: %s", dir, strerror(errno));
    int root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return cli_fail(CLI_FAILED, "%s: %s", dir, strerror(errno));
    volume_path(&base, kind, name);
    int rc = base.oom ? CLI_FAILED : list_remote(c, base.buf, 0, &rm);
    for (size_t i = 0; rc == CLI_OK && i < rm.n; i++) {
        if (!util_relpath_valid(rm.f[i].rel, strlen(rm.f[i].rel)))
            rc = cli_fail(CLI_FAILED, "the server named a file %s: refused", rm.f[i].rel);
        total += rm.f[i].size;
    }
    out_bar bar;
    out_bar_start(&bar, c, "download", total);
    for (size_t i = 0; rc == CLI_OK && i < rm.n; i++) {
        rc = download(c, base.buf, root, &rm.f[i], &bar);
        if (rc == CLI_OK)
            st->sent++, st->bytes_sent += rm.f[i].size;
    }
    out_bar_end(&bar);
    remote_free(&rm);
    free(base.buf);
    close(root);
    return rc;
}
