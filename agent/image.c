/*
 * image: pulls (skopeo), unpacks (umoci), locks and evicts the node's
 * images.  See image.h for the layout of the cache.
 */
#include "agent/image.h"
#include "lib/fmt.h"

#include "lib/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>

#define OUT_MAX (4 << 20) /* a manifest or an image config */
#define ERR_MAX 4096

/* ---- references ---- */

int img_reference_valid(const char *ref)
{
    return ref && strlen(ref) < IMG_REF_MAX && util_image_ref_valid(ref);
}

/* The n bytes at md (at most 32) in lower-case hex into out (65 bytes). */
static void hex_of(const unsigned char *md, unsigned n, char *out)
{
    static const char digit[] = "0123456789abcdef";
    for (unsigned i = 0; i < n && i < 32; i++) {
        out[2 * i] = digit[md[i] >> 4];
        out[2 * i + 1] = digit[md[i] & 15];
    }
    out[2 * (n < 32 ? n : 32)] = '\0';
}

/* Paths under the image cache fit their buffers: the agent takes a cache
 * of at most AGENT_DIR_MAX (fileutil.h), and a bundle is named by its
 * digest; references are at most IMG_REF_MAX.  So fmt_cut never cuts
 * them. */

void img_reference_host(const char *ref, char *out, size_t n)
{
    size_t h = strcspn(ref, "/");
    fmt_cut(out, n, "%.*s", (int)h, ref);
}

/* The reference without its tag or digest ("host/repo"). */
static void repository(const char *ref, char *out, size_t n)
{
    size_t h = strcspn(ref, "/");
    size_t r = h + strcspn(ref + h, ":@");
    fmt_cut(out, n, "%.*s", (int)r, ref);
}

int img_reference_pin(const char *ref, const char *digest, char *out, size_t n)
{
    char repo[IMG_REF_MAX + 1];
    if (!util_digest_valid(digest))
        return -1;
    repository(ref, repo, sizeof repo);
    return fmt_whole(out, n, "%s@%s", repo, digest);
}

/* ---- running skopeo and umoci ---- */

struct run {
    char *out;     /* stdout, NUL-terminated, owned (NULL when not captured) */
    size_t out_len;
    char err[ERR_MAX]; /* the end of stderr */
    int status;    /* as waitpid gives it */
};

/* Keeps the last ERR_MAX-1 bytes of stderr in r->err (elen of them so far)
 * with the n at buf added. */
static void err_keep(struct run *r, const char *buf, size_t n, size_t *elen)
{
    if (n >= sizeof r->err - 1) {
        memcpy(r->err, buf + n - (sizeof r->err - 1), sizeof r->err - 1);
        *elen = sizeof r->err - 1;
    } else {
        if (*elen + n >= sizeof r->err) {
            size_t drop = *elen + n - (sizeof r->err - 1);
            memmove(r->err, r->err + drop, *elen - drop);
            *elen -= drop;
        }
        memcpy(r->err + *elen, buf, n);
        *elen += n;
    }
    r->err[*elen] = '\0';
}

/* Adds the n bytes at buf to r->out (room cap), up to OUT_MAX: past it,
 * or out of memory, they are dropped. */
static void out_add(struct run *r, const char *buf, size_t n, size_t *cap)
{
    if (r->out_len + n >= OUT_MAX)
        return;
    if (r->out_len + n + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 16384;
        while (nc < r->out_len + n + 1)
            nc *= 2;
        char *nb = realloc(r->out, nc);
        if (!nb)
            return;
        r->out = nb;
        *cap = nc;
    }
    memcpy(r->out + r->out_len, buf, n);
    r->out_len += n;
    r->out[r->out_len] = '\0';
}

/* Starts argv with stdin on /dev/null, stdout on po[1] (or /dev/null when
 * po is NULL) and stderr on pe[1], in the C locale (the tools speak English
 * whatever the node's): its pid, or -1. */
static pid_t spawn(char *const argv[], const int *po, const int *pe)
{
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(po ? po[1] : null, 1);
        dup2(pe[1], 2);
        setenv("LC_ALL", "C", 1);
        execvp(argv[0], argv);
        dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

/*
 * Runs argv with stdout captured when want_out, stderr always (its last
 * ERR_MAX bytes).  every_ms > 0 calls tick(arg) that often while it runs.
 * 0 when it ran (see r->status), -1 when it could not be started.
 */
static int run(char *const argv[], int want_out, int every_ms, void (*tick)(void *), void *arg,
               struct run *r)
{
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    memset(r, 0, sizeof *r);
    if ((want_out && pipe2(po, O_CLOEXEC) != 0) || pipe2(pe, O_CLOEXEC) != 0) {
        fmt_cut(r->err, sizeof r->err, "pipe: %s", strerror(errno));
        goto fail;
    }
    pid_t pid = spawn(argv, want_out ? po : NULL, pe);
    if (pid < 0) {
        fmt_cut(r->err, sizeof r->err, "fork: %s", strerror(errno));
        goto fail;
    }
    if (want_out)
        close(po[1]);
    close(pe[1]);
    size_t cap = 0, elen = 0;
    int open_fds = want_out ? 2 : 1;
    int64_t next = every_ms > 0 ? util_mono_ms() + every_ms : 0;
    while (open_fds > 0) {
        struct pollfd pf[2] = {{pe[0], POLLIN, 0}, {want_out ? po[0] : -1, POLLIN, 0}};
        int got = poll(pf, 2, every_ms > 0 ? every_ms : -1);
        if (got < 0 && errno != EINTR)
            break;
        if (every_ms > 0 && util_mono_ms() >= next) {
            tick(arg);
            next = util_mono_ms() + every_ms;
        }
        char buf[8192];
        for (int k = 0; k < 2; k++) {
            int *fd = k ? &po[0] : &pe[0];
            if (*fd < 0 || !pf[k].revents)
                continue;
            ssize_t n = read(*fd, buf, sizeof buf);
            if (n <= 0) {
                close(*fd);
                *fd = -1;
                open_fds--;
            } else if (k) {
                out_add(r, buf, (size_t)n, &cap);
            } else {
                err_keep(r, buf, (size_t)n, &elen);
            }
        }
    }
    while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR)
        ;
    if (po[0] >= 0)
        close(po[0]);
    if (pe[0] >= 0)
        close(pe[0]);
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0)
            close(po[i]);
        if (pe[i] >= 0)
            close(pe[i]);
    }
    return -1;
}

static int run_ok(const struct run *r)
{
    return WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0;
}

/* The most telling line of a tool's stderr: its last non-empty line,
 * without logrus' time="..." level=fatal msg= framing. */
static void last_line(const char *text, char *out, size_t n)
{
    const char *end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == ' '))
        end--;
    const char *start = end;
    while (start > text && start[-1] != '\n')
        start--;
    const char *msg = strstr(start, "msg=\"");
    if (msg && msg < end) {
        start = msg + 5;
        if (end > start && end[-1] == '"')
            end--;
    }
    fmt_cut(out, n, "%.*s", (int)(end - start), start);
}

/* A message for the job's reason from skopeo's failure. */
static void pull_error(const char *ref, const char *what, const struct run *r, char *err,
                       size_t errlen)
{
    char line[600], host[256];
    const char *t = r->err;
    last_line(t, line, sizeof line);
    img_reference_host(ref, host, sizeof host);
    if (strstr(t, "manifest unknown") || strstr(t, "name unknown") ||
        strstr(t, "not found") || strstr(t, "NAME_UNKNOWN") || strstr(t, "MANIFEST_UNKNOWN"))
        fmt_cut(err, errlen, "image %.300s: no such image or tag in the registry", ref);
    /* not a bare "401": a registry on port 40165 is no refusal */
    else if (strstr(t, "unauthorized") || strstr(t, "authentication required") ||
             strstr(t, "401 Unauthorized") || strstr(t, "status code 401") ||
             strstr(t, "denied"))
        fmt_cut(err, errlen, "image %.300s: the registry %.100s refused the credentials", ref,
                 host);
    else if (strstr(t, "connection refused") || strstr(t, "no such host") ||
             strstr(t, "dial tcp") || strstr(t, "i/o timeout") || strstr(t, "unreachable") ||
             strstr(t, "HTTP response to HTTPS client") || strstr(t, "connection reset"))
        fmt_cut(err, errlen, "image %.300s: the registry %.100s is unreachable (%.200s)", ref,
                 host, line);
    else
        fmt_cut(err, errlen, "image %.300s: %s failed: %.300s", ref, what, line);
}

/* ---- credentials ---- */

/* The user name under which a bearer token of cohortd's registry goes to
 * its token server (which reads the password only). */
#define PULL_TOKEN_USER "cohort-pull-token"

/*
 * A containers-auth.json with the source's credentials, mode 0600, in the
 * worker's private directory: never on a command line, where every user
 * of the host reads it.  A bearer token goes there as the password of
 * Basic credentials: skopeo shows them to the token server, which gives
 * back what the token holds (see api/api_registry.c).
 */
static int write_authfile(const img_cache *c, const img_source *src, char *path, size_t n,
                          char *err, size_t errlen)
{
    char host[256], plain[8400];
    unsigned char b64[11300];
    const char *user = src->username ? src->username : PULL_TOKEN_USER;
    const char *pass = src->username ? src->password : src->token;
    img_reference_host(src->reference, host, sizeof host);
    if (fmt_whole(plain, sizeof plain, "%s:%s", user, pass ? pass : "") != 0) {
        fmt_cut(err, errlen, "image %.300s: the credentials are too long", src->reference);
        return -1;
    }
    EVP_EncodeBlock(b64, (const unsigned char *)plain, (int)strlen(plain));
    memset(plain, 0, sizeof plain);
    fmt_cut(path, n, "%s/registry-auth.json", c->tmp_dir);
    cJSON *o = cJSON_CreateObject(), *auths = cJSON_AddObjectToObject(o, "auths");
    cJSON *h = cJSON_AddObjectToObject(auths, host);
    cJSON_AddStringToObject(h, "auth", (const char *)b64);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    memset(b64, 0, sizeof b64);
    int fd = text ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
    int ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0)
        close(fd);
    if (text) {
        memset(text, 0, strlen(text));
        free(text);
    }
    if (!ok) {
        fmt_cut(err, errlen, "cannot write the registry credentials: %s", strerror(errno));
        unlink(path);
        return -1;
    }
    return 0;
}

/* ---- the cache ---- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

static int64_t tree_bytes;
static int count_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (flag == FTW_F)
        tree_bytes += (int64_t)sb->st_blocks * 512;
    return 0;
}

static int64_t du(const char *path)
{
    tree_bytes = 0;
    nftw(path, count_entry, 32, FTW_PHYS);
    return tree_bytes;
}

/* The disk an unpacked image takes: walked once and remembered in its
 * .bytes (an image never changes once ready), so that eviction, which runs
 * in a worker's start, reads a number per image instead of walking trees
 * of tens of thousands of files. */
static int64_t image_bytes(const char *dir)
{
    char path[4500], tmp[4600], text[32] = "";
    fmt_cut(path, sizeof path, "%s/.bytes", dir);
    FILE *f = fopen(path, "re");
    if (f) {
        int ok = fgets(text, sizeof text, f) != NULL;
        fclose(f);
        long long v = ok ? strtoll(text, NULL, 10) : -1;
        if (v > 0)
            return v;
    }
    int64_t bytes = du(dir);
    fmt_cut(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    f = fopen(tmp, "we");
    int ok = f && fprintf(f, "%lld\n", (long long)bytes) > 0;
    if (f && fclose(f) != 0)
        ok = 0;
    if (ok)
        rename(tmp, path);
    else
        unlink(tmp);
    return bytes;
}

struct pull_watch {
    const img_source *src;
    const char *layout;
    int64_t total;
    img_progress_fn progress;
    void *arg;
};

/* While skopeo runs: what has landed in the layout so far. */
static void pull_tick(void *arg)
{
    struct pull_watch *w = arg;
    char line[700];
    int64_t got = du(w->layout);
    if (w->total > 0)
        fmt_cut(line, sizeof line, "pulling image %.500s: %lld of %lld MB", w->src->reference,
                 (long long)(got >> 20), (long long)((w->total + (1 << 20) - 1) >> 20));
    else
        fmt_cut(line, sizeof line, "pulling image %.500s: %lld MB", w->src->reference,
                 (long long)(got >> 20));
    if (w->progress)
        w->progress(w->arg, line);
}

/* The bytes a manifest's layers and config add up to (0 for an index). */
static int64_t manifest_bytes(const char *text)
{
    cJSON *m = cJSON_Parse(text);
    int64_t total = 0;
    const cJSON *l;
    cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(m, "layers"))
    {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(l, "size");
        if (cJSON_IsNumber(s))
            total += (int64_t)s->valuedouble;
    }
    cJSON_Delete(m);
    return total;
}

/* Device nodes an image carries, removed from its unpacked root before
 * anything runs from it: a char or block node there would be live in the
 * container (/dev/kmsg, the host's disk).  And the privileges its files
 * carry, taken off: set-user-ID and set-group-ID bits and file
 * capabilities (security.capability) buy nothing in a container, whose
 * root is mounted nosuid, but on the node's disk, under a path every uid
 * may walk, they were a root shell for any local user.  nftw gives no
 * context pointer, hence the walk's state here. */
static struct {
    long dropped, disarmed;
    int err;    /* errno of the first failure, 0 when none */
    char *path; /* where it failed (owned; NULL when none, or out of memory) */
} dev_walk;

/* A regular file at path (mode as lstat saw it) without its set-ID bits
 * and file capabilities: 1 when it had any, 0 when none, -1 with errno. */
static int disarm_file(const char *path, mode_t mode)
{
    int had = 0;
    if (mode & (S_ISUID | S_ISGID)) {
        if (fchmodat(AT_FDCWD, path, mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID), 0) != 0)
            return -1;
        had = 1;
    }
    if (lremovexattr(path, "security.capability") == 0)
        had = 1;
    else if (errno != ENODATA && errno != ENOTSUP)
        return -1;
    return had;
}

static int dev_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag == FTW_NS || flag == FTW_DNR) { /* cannot tell what is there */
        dev_walk.err = errno ? errno : EIO;
    } else if (S_ISCHR(sb->st_mode) || S_ISBLK(sb->st_mode)) {
        if (unlink(path) == 0) {
            dev_walk.dropped++;
            return 0;
        }
        dev_walk.err = errno;
    } else if (S_ISREG(sb->st_mode)) {
        int had = disarm_file(path, sb->st_mode);
        if (had >= 0) {
            dev_walk.disarmed += had;
            return 0;
        }
        dev_walk.err = errno;
    } else if (!S_ISLNK(sb->st_mode) && (sb->st_mode & (S_ISUID | S_ISGID))) {
        /* a directory or a FIFO: its set-ID bits are harmless, but none
         * stays, whatever the kind (found by a probe) */
        if (fchmodat(AT_FDCWD, path, sb->st_mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID), 0) ==
            0) {
            dev_walk.disarmed++;
            return 0;
        }
        dev_walk.err = errno;
    } else {
        return 0;
    }
    dev_walk.path = strdup(path);
    return 1; /* stops the walk */
}

/* Removes every device node under rootfs and the privileges of its files
 * (symbolic links are not followed): how many nodes, with the files
 * disarmed in *disarmed, or -1 with err set. */
static long drop_devices(const char *rootfs, long *disarmed, char *err, size_t errlen)
{
    memset(&dev_walk, 0, sizeof dev_walk);
    errno = 0;
    int rc = nftw(rootfs, dev_entry, 32, FTW_PHYS);
    *disarmed = dev_walk.disarmed;
    if (rc == 0)
        return dev_walk.dropped;
    if (dev_walk.err)
        fmt_cut(err, errlen, "cannot remove the device file or privileges of %.300s: %s",
                dev_walk.path ? dev_walk.path : "(a path too long to copy)",
                strerror(dev_walk.err));
    else
        fmt_cut(err, errlen, "cannot walk its root for device files: %s", strerror(errno));
    free(dev_walk.path);
    dev_walk.path = NULL;
    return -1;
}

/* A directory under rootfd, resolved as if rootfd were "/" (symbolic links
 * and ".." stay inside it): an O_PATH descriptor, or -1 with errno. */
static int open_in_root(int rootfd, const char *rel)
{
    struct open_how how = {
        .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    return (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof how);
}

/* Makes rel (a directory when dir, else an empty file) inside the root
 * rootfd: its parent resolved in the root, the last component never
 * followed.  One that exists already is left as it is.  0, or -1 and errno. */
static int make_in_root(int rootfd, const char *rel, int dir)
{
    const char *slash = strrchr(rel, '/');
    const char *base = slash ? slash + 1 : rel;
    char parent[256];
    if (fmt_whole(parent, sizeof parent, "%.*s", slash ? (int)(slash - rel) : 1,
                  slash ? rel : ".") != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int pfd = open_in_root(rootfd, parent);
    if (pfd < 0)
        return -1;
    int rc = 0;
    if (dir) {
        rc = mkdirat(pfd, base, 0755);
    } else {
        int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        rc = fd >= 0 ? close(fd) : -1;
    }
    int saved = errno;
    close(pfd);
    errno = saved;
    return rc != 0 && errno != EEXIST ? -1 : 0;
}

/* Mount points the containers need, made in the unpacked root file system
 * by the agent (the rootfs is read-only to the containers), every one
 * inside it: an image whose etc links to a host path gets nothing made on
 * the host.  0, or -1 with err naming the path. */
static int add_mount_points(const char *rootfs, char *err, size_t errlen)
{
    static const struct {
        const char *path;
        int dir;
    } points[] = {{"proc", 1},      {"sys", 1},       {"dev", 1},
                  {"tmp", 1},       {"cohort", 1},    {"etc", 1},
                  {"etc/hosts", 0}, {"etc/resolv.conf", 0}};
    int rc = -1;
    int rootfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) {
        fmt_cut(err, errlen, "cannot open its root: %s", strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < sizeof points / sizeof *points; i++) {
        if (make_in_root(rootfd, points[i].path, points[i].dir) != 0) {
            fmt_cut(err, errlen, "cannot make the mount point /%s inside its root: %s",
                     points[i].path, strerror(errno));
            goto out;
        }
    }
    rc = 0;
out:
    close(rootfd);
    return rc;
}

/* The unpacked root made safe to run from: no device nodes, no set-ID bits
 * or file capabilities, and the mount points the containers need.  0, or
 * -1 with err. */
static int prepare_root(const char *ref, const char *rootfs, char *err, size_t errlen)
{
    char why[ERR_MAX];
    long disarmed = 0, dropped = drop_devices(rootfs, &disarmed, why, sizeof why);
    if (dropped < 0 || add_mount_points(rootfs, why, sizeof why) != 0) {
        fmt_cut(err, errlen, "image %.300s: %s", ref, why);
        return -1;
    }
    if (dropped > 0)
        fprintf(stderr, "cohort-shim: dropped %ld device files from %s\n", dropped, ref);
    if (disarmed > 0)
        fprintf(stderr, "cohort-shim: took the set-ID bits and file capabilities off %ld files "
                        "of %s\n", disarmed, ref);
    return 0;
}

/*
 * Fills argv[16] with a skopeo command: with dest, "copy" from to dest
 * quietly; without, "inspect" the raw manifest of from.  TLS is left
 * unverified for an insecure registry, and authfile (or NULL) gives the
 * credentials: options that copy names for its source.
 */
static void skopeo_argv(char **argv, const img_cache *c, const img_source *src,
                        const char *authfile, char *from, char *dest)
{
    int n = 0;
    argv[n++] = (char *)c->skopeo;
    argv[n++] = dest ? "copy" : "inspect";
    argv[n++] = dest ? "--quiet" : "--raw";
    if (src->insecure)
        argv[n++] = dest ? "--src-tls-verify=false" : "--tls-verify=false";
    if (authfile) {
        argv[n++] = dest ? "--src-authfile" : "--authfile";
        argv[n++] = (char *)authfile;
    }
    argv[n++] = from;
    if (dest)
        argv[n++] = dest;
    argv[n] = NULL;
}

/*
 * The unpacked image at tmp made a bundle of the cache: its root prepared
 * (no device files, traversable by every worker's uid, its contents
 * keeping the image's own modes), its configuration kept beside it, tmp
 * renamed to bundle and marked ready with its digest and reference.  0, or
 * -1 with err set.
 */
static int bundle_keep(const char *ref, const char *digest, const char *tmp, const char *bundle,
                       const char *config, size_t config_len, char *err, size_t errlen)
{
    char rootfs[4300], path[4400];
    fmt_cut(rootfs, sizeof rootfs, "%s/rootfs", tmp);
    if (prepare_root(ref, rootfs, err, errlen) != 0)
        return -1;
    chmod(tmp, 0711);
    chmod(rootfs, 0755);
    fmt_cut(path, sizeof path, "%s/image.json", tmp);
    FILE *f = fopen(path, "we");
    int ok = f && fwrite(config, 1, config_len, f) == config_len;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok) {
        fmt_cut(err, errlen, "image %.300s: cannot keep its configuration: %s", ref,
                 strerror(errno));
        return -1;
    }
    if (rename(tmp, bundle) != 0) {
        fmt_cut(err, errlen, "image %.300s: cannot put it in the cache: %s", ref,
                 strerror(errno));
        return -1;
    }
    fmt_cut(path, sizeof path, "%s/.ready", bundle);
    f = fopen(path, "we");
    if (f) {
        fprintf(f, "%s\n%s\n", digest, ref);
        fclose(f);
    }
    return 0;
}

/* Pulls the image at digest and unpacks it into bundle (lock held). */
static int pull_unpack(const img_cache *c, const img_source *src, const char *digest,
                       const char *authfile, const char *manifest, img_progress_fn progress,
                       void *arg, const char *bundle, char *err, size_t errlen)
{
    char repo[IMG_REF_MAX], from[IMG_REF_MAX + 100], layout[4200], dest[4300], tmp[4200],
        path[4400];
    struct run r = {0};
    int rc = -1;
    repository(src->reference, repo, sizeof repo);
    fmt_cut(from, sizeof from, "docker://%s@%s", repo, digest);
    fmt_cut(layout, sizeof layout, "%s.pull", bundle);
    fmt_cut(dest, sizeof dest, "oci:%s:img", layout);
    fmt_cut(tmp, sizeof tmp, "%s.tmp", bundle);
    rm_tree(layout);
    rm_tree(tmp);
    int64_t t0 = util_mono_ms();
    struct pull_watch w = {src, layout, manifest_bytes(manifest), progress, arg};
    char *copy[16];
    skopeo_argv(copy, c, src, authfile, from, dest);
    pull_tick(&w);
    if (run(copy, 0, 500, pull_tick, &w, &r) != 0 || !run_ok(&r)) {
        pull_error(src->reference, "the pull", &r, err, errlen);
        goto out;
    }
    int64_t pulled_bytes = du(layout);
    fprintf(stderr, "cohort-shim: pulled %s (%s, %lld MB) in %.1f s\n", src->reference, digest,
            (long long)(pulled_bytes >> 20), (double)(util_mono_ms() - t0) / 1000.0);
    if (progress) {
        fmt_cut(path, sizeof path, "unpacking image %.500s", src->reference);
        progress(arg, path);
    }
    /* The image's configuration (Env, Entrypoint, WorkingDir), kept beside it. */
    char *insp[] = {(char *)c->skopeo, "inspect", "--config", dest, NULL};
    free(r.out);
    if (run(insp, 1, 0, NULL, NULL, &r) != 0 || !run_ok(&r) || !r.out) {
        pull_error(src->reference, "reading its configuration", &r, err, errlen);
        goto out;
    }
    int64_t t1 = util_mono_ms();
    char image_ref[4300];
    fmt_cut(image_ref, sizeof image_ref, "%s:img", layout);
    char *unpack[] = {(char *)c->umoci, "unpack", "--image", image_ref, tmp, NULL};
    char *config = r.out;
    size_t config_len = r.out_len;
    r.out = NULL;
    if (run(unpack, 0, 0, NULL, NULL, &r) != 0 || !run_ok(&r)) {
        char line[600];
        last_line(r.err, line, sizeof line);
        fmt_cut(err, errlen, "image %.300s: cannot unpack it: %.300s", src->reference, line);
        free(config);
        goto out;
    }
    int kept = bundle_keep(src->reference, digest, tmp, bundle, config, config_len, err, errlen);
    free(config);
    if (kept != 0)
        goto out;
    fprintf(stderr, "cohort-shim: unpacked %s (%s) in %.1f s\n", src->reference, digest,
            (double)(util_mono_ms() - t1) / 1000.0);
    rc = 0;
out:
    free(r.out);
    rm_tree(layout);
    if (rc != 0)
        rm_tree(tmp);
    return rc;
}

/* The digest src resolves to: its own, or the registry's for its tag (the
 * SHA-256 of the manifest as served). */
static int resolve(const img_cache *c, const img_source *src, const char *authfile, char *digest,
                   size_t dn, char **manifest, char *err, size_t errlen)
{
    char from[IMG_REF_MAX + 16];
    struct run r;
    char *argv[16];
    fmt_cut(from, sizeof from, "docker://%s", src->reference);
    skopeo_argv(argv, c, src, authfile, from, NULL);
    if (run(argv, 1, 0, NULL, NULL, &r) != 0 || !run_ok(&r) || !r.out || r.out_len == 0) {
        pull_error(src->reference, "resolving it", &r, err, errlen);
        free(r.out);
        return -1;
    }
    const char *at = strstr(src->reference, "@sha256:");
    if (at) {
        fmt_cut(digest, dn, "%s", at + 1); /* the reference was checked: 71 bytes */
    } else {
        unsigned char md[32];
        unsigned mdlen = 0;
        char hex[65];
        EVP_Digest(r.out, r.out_len, md, &mdlen, EVP_sha256(), NULL);
        hex_of(md, mdlen, hex);
        fmt_cut(digest, dn, "sha256:%s", hex); /* dn holds 72 (img_use.digest) */
    }
    *manifest = r.out;
    return 0;
}

/* <cache>/refs/<sha256 of reference, username and password>: where the
 * digest the reference resolved to is remembered. */
static void ref_memo_path(const img_cache *c, const img_source *src, char *path, size_t n)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[32];
    unsigned mdlen = 0;
    const char *parts[] = {src->reference, src->username ? src->username : "",
                           src->password ? src->password : ""};
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (int i = 0; i < 3; i++)
        EVP_DigestUpdate(ctx, parts[i], strlen(parts[i]) + 1); /* with the NUL: unambiguous */
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    char hex[65];
    hex_of(md, mdlen, hex);
    fmt_cut(path, n, "%s/refs/%s", c->dir, hex); /* under the cache: AGENT_DIR_MAX */
}

/* The remembered digest of src, if younger than the TTL: 1 and digest set. */
static int ref_memo_get(const img_cache *c, const img_source *src, char *digest, size_t dn)
{
    char path[4400], text[96] = "";
    struct stat sb;
    if (c->resolve_ttl_s <= 0)
        return 0;
    ref_memo_path(c, src, path, sizeof path);
    if (stat(path, &sb) != 0 || time(NULL) - sb.st_mtime >= c->resolve_ttl_s)
        return 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    int ok = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    text[strcspn(text, "\n")] = '\0';
    if (!ok || !util_digest_valid(text) || dn < UTIL_DIGEST_LEN + 1)
        return 0;
    memcpy(digest, text, 72); /* "sha256:" + 64 hex + NUL, checked above */
    return 1;
}

static void ref_memo_put(const img_cache *c, const img_source *src, const char *digest)
{
    char path[4400], tmp[4500], dir[4300];
    if (c->resolve_ttl_s <= 0)
        return;
    fmt_cut(dir, sizeof dir, "%s/refs", c->dir);
    mkdir(dir, 0700);
    ref_memo_path(c, src, path, sizeof path);
    fmt_cut(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f)
        return;
    int ok = fprintf(f, "%s\n", digest) > 0;
    if (fclose(f) == 0 && ok)
        rename(tmp, path);
    else
        unlink(tmp);
}

/* The fast path: src resolved a moment ago and its image is unpacked here:
 * a shared lock on it, without asking the registry.  1 when taken. */
static int acquire_known(const img_cache *c, const img_source *src, img_use *out)
{
    char lockp[4300], ready[4300];
    struct stat sb;
    if (!ref_memo_get(c, src, out->digest, sizeof out->digest))
        return 0;
    fmt_cut(out->bundle, sizeof out->bundle, "%s/%s", c->dir, out->digest + 7);
    fmt_cut(lockp, sizeof lockp, "%s.lock", out->bundle);
    fmt_cut(ready, sizeof ready, "%s/.ready", out->bundle);
    out->lock_fd = open(lockp, O_RDWR | O_CLOEXEC);
    if (out->lock_fd < 0)
        return 0;
    while (flock(out->lock_fd, LOCK_SH) != 0 && errno == EINTR)
        ;
    if (stat(ready, &sb) != 0) { /* evicted meanwhile */
        close(out->lock_fd);
        out->lock_fd = -1;
        return 0;
    }
    utimensat(AT_FDCWD, ready, NULL, 0);
    return 1;
}

/*
 * Pulls and unpacks out->bundle unless another worker does it first.  The
 * caller holds the image's lock shared, as every worker that uses it does;
 * pullers take <hex>.pull.lock exclusively.  Taking the use lock exclusively
 * instead would wait for every shared holder, among them the peers that
 * pulled a moment ago and now run a gang waiting for this very worker.
 */
static int pull_once(const img_cache *c, const img_source *src, const char *authfile,
                     const char *manifest, img_progress_fn progress, void *arg, img_use *out,
                     char *err, size_t errlen)
{
    char pullp[4300], ready[4300];
    struct stat sb;
    int rc = -1;
    fmt_cut(pullp, sizeof pullp, "%s.pull.lock", out->bundle);
    fmt_cut(ready, sizeof ready, "%s/.ready", out->bundle);
    int fd = open(pullp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        fmt_cut(err, errlen, "cannot lock the image cache: %s", strerror(errno));
        return -1;
    }
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR)
        ;
    if (stat(ready, &sb) == 0) { /* a peer pulled it while we waited */
        rc = 0;
        goto out;
    }
    rm_tree(out->bundle); /* a half-made one from a crash */
    if (pull_unpack(c, src, out->digest, authfile[0] ? authfile : NULL, manifest, progress, arg,
                    out->bundle, err, errlen) != 0)
        goto out;
    out->pulled = 1;
    rc = 0;
out:
    close(fd); /* releases the pull lock */
    return rc;
}

int img_acquire(const img_cache *c, const img_source *src, img_progress_fn progress, void *arg,
                img_use *out, char *err, size_t errlen)
{
    char authfile[4200] = "", lockp[4300], ready[4300];
    char *manifest = NULL;
    struct stat sb;
    int rc = -1;
    memset(out, 0, sizeof *out);
    out->lock_fd = -1;
    if (!img_reference_valid(src->reference)) {
        fmt_cut(err, errlen, "image reference %.300s is not valid", src->reference);
        return -1;
    }
    if (acquire_known(c, src, out))
        return 0;
    if ((src->username || src->token) &&
        write_authfile(c, src, authfile, sizeof authfile, err, errlen) != 0)
        return -1;
    if (progress) {
        fmt_cut(lockp, sizeof lockp, "resolving image %.500s", src->reference);
        progress(arg, lockp);
    }
    if (resolve(c, src, authfile[0] ? authfile : NULL, out->digest, sizeof out->digest,
                &manifest, err, errlen) != 0)
        goto out;
    const char *hex = out->digest + 7;
    fmt_cut(out->bundle, sizeof out->bundle, "%s/%s", c->dir, hex);
    fmt_cut(lockp, sizeof lockp, "%s.lock", out->bundle);
    fmt_cut(ready, sizeof ready, "%s/.ready", out->bundle);
    out->lock_fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (out->lock_fd < 0) {
        fmt_cut(err, errlen, "cannot lock the image cache: %s", strerror(errno));
        goto out;
    }
    /* Shared from here on: eviction waits for nobody, and never for us. */
    while (flock(out->lock_fd, LOCK_SH) != 0 && errno == EINTR)
        ;
    if (stat(ready, &sb) != 0 &&
        pull_once(c, src, authfile, manifest, progress, arg, out, err, errlen) != 0)
        goto out;
    /* Its last use, for eviction. */
    utimensat(AT_FDCWD, ready, NULL, 0);
    ref_memo_put(c, src, out->digest);
    rc = 0;
out:
    free(manifest);
    if (authfile[0])
        unlink(authfile);
    if (rc != 0 && out->lock_fd >= 0) {
        close(out->lock_fd);
        out->lock_fd = -1;
    }
    if (rc == 0 && out->pulled && c->max_bytes > 0)
        img_evict(c);
    return rc;
}

void img_release(img_use *u)
{
    if (u->lock_fd >= 0)
        close(u->lock_fd);
    u->lock_fd = -1;
}

struct cached {
    char hex[72];
    time_t used;
    int64_t bytes;
};

static int by_use(const void *a, const void *b)
{
    const struct cached *x = a, *y = b;
    return x->used < y->used ? -1 : x->used > y->used;
}

int img_evict(const img_cache *c)
{
    DIR *d = opendir(c->dir);
    struct cached *all = NULL;
    size_t n = 0, cap = 0;
    int64_t total = 0;
    int gone = 0, oom = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char p[4400];
        struct stat sb;
        if (strlen(e->d_name) != 64 || strchr(e->d_name, '.'))
            continue;
        fmt_cut(p, sizeof p, "%s/%s/.ready", c->dir, e->d_name);
        if (stat(p, &sb) != 0)
            continue;
        struct cached one = {.used = sb.st_mtime};
        memcpy(one.hex, e->d_name, 65); /* 64 hex digits and the NUL, checked above */
        fmt_cut(p, sizeof p, "%s/%s", c->dir, e->d_name);
        one.bytes = image_bytes(p);
        total += one.bytes;
        UTIL_PUSH(all, n, cap, one, &oom);
        if (oom) /* the images listed so far are still evicted in order */
            break;
    }
    if (d)
        closedir(d);
    qsort(all, n, sizeof *all, by_use);
    for (size_t i = 0; i < n && total > c->max_bytes; i++) {
        char p[4400], lp[4400];
        fmt_cut(lp, sizeof lp, "%s/%s.lock", c->dir, all[i].hex);
        int fd = open(lp, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) { /* nobody runs it */
            fmt_cut(p, sizeof p, "%s/%s/.ready", c->dir, all[i].hex);
            unlink(p); /* first: a half-removed image is never taken for whole */
            fmt_cut(p, sizeof p, "%s/%s", c->dir, all[i].hex);
            rm_tree(p);
            total -= all[i].bytes;
            gone++;
            fprintf(stderr, "cohort-shim: evicted image sha256:%s (%lld MB)\n", all[i].hex,
                    (long long)(all[i].bytes >> 20));
        }
        close(fd);
    }
    free(all);
    return gone;
}
