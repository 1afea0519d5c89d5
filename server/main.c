/*
 * cohortd: the Cohort control plane.  Reads its configuration (flags, then
 * COHORT_* variables, then defaults), opens the store under the data dir,
 * creates the platform admin on first start, serves HTTP until SIGTERM or
 * SIGINT, then stops accepting, lets requests in flight finish and closes
 * the database cleanly.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "api/api.h"
#include "lib/fmt.h"
#include "api/fsquota.h"
#include "api/stuse.h"
#include "api/regtoken.h"
#include "api/seal.h"
#include "server/http.h"

#define DEFAULT_LISTEN "127.0.0.1:8080"
#define DEFAULT_DATA_DIR "./cohort-data"
#define SHUTDOWN_GRACE_MS 30000

struct config {
    const char *listen;    /* HOST:PORT, parsed into host and port */
    char host[256];
    int port;
    const char *data_dir;
    const char *store;     /* NULL: sqlite:DATA_DIR/cohort.db */
    size_t body_limit, bodies_max;
    int64_t default_storage, default_pending, storage_scan_ms, max_files;
    int64_t upload_limit;
    int threads;
    const char *access_log;
    int64_t node_timeout_s;
    int64_t heartbeat_s;
    int64_t lease_s;
    int64_t node_token_rotate_s;
    int64_t min_hold_s;
    int64_t budget_grace_s;
    const char *web_dir;   /* NULL: the built-in default, when it exists */
    const char *registry;  /* HOST:PORT of the registry cohortd signs tokens for */
    int max_conns, max_conns_per_ip, idle_timeout_s, header_timeout_s;
    int64_t log_limit;
    double rate_per_s, rate_burst;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cohortd [options]\n"
            "\n"
            "  --listen HOST:PORT     address to serve on (env COHORT_LISTEN; default %s;\n"
            "                         port 0 picks a free one, written to DATA_DIR/cohortd.addr)\n"
            "  --data-dir DIR         database and volumes (env COHORT_DATA_DIR; default %s)\n"
            "  --store URL            the database (env COHORT_STORE): sqlite:PATH (default\n"
            "                         sqlite:DATA_DIR/cohort.db) or postgresql://... (libpq's\n"
            "                         URL; the database must exist, cohortd creates its tables)\n"
            "  --body-limit BYTES     largest JSON request body (default %d)\n"
            "  --default-storage-quota BYTES  what a tenant without a quota of its own keeps in\n"
            "                         its workspaces and datasets (default 20 GiB; 0: no limit)\n"
            "  --default-max-pending N  jobs such a tenant may have waiting (default 1000; 0: no\n"
            "                         limit)\n"
            "  --storage-scan MS      how often tenants' volumes are measured (default 15000)\n"
            "  --max-files N          files and directories one tenant keeps in its volumes\n"
            "                         (default 1000000; 0: no limit)\n"
            "  --bodies-max BYTES     JSON bodies read at once, all requests together; past it\n"
            "                         503 busy (default 64 MiB; never below --body-limit)\n"
            "  --upload-limit BYTES   largest uploaded file (default %lld)\n"
            "  --threads N            HTTP worker threads (default: one per CPU)\n"
            "  --heartbeat SECONDS    how often agents report (default 2)\n"
            "  --node-timeout SECONDS a node silent this long is down (default 10)\n"
            "  --lease SECONDS        an agent cut off this long stops its workers (default 30)\n"
            "  --node-token-rotate SECONDS\n"
            "                         a node token this old is replaced at the node's next\n"
            "                         heartbeat (default 2592000, 30 days; 0: only when asked)\n"
            "  --min-hold SECONDS     a job without max_runtime_seconds is admitted holding\n"
            "                         this long's price (default %d)\n"
            "  --budget-grace SECONDS such jobs are stopped (SIGTERM) while this long's price is\n"
            "                         still left in their tenant's budget (default %d)\n"
            "  --registry HOST:PORT   the registry cohortd is the token server of, where image\n"
            "                         references without a host lie (env COHORT_REGISTRY;\n"
            "                         default 127.0.0.1:5000)\n"
            "  --web-dir DIR          the console's files (env COHORT_WEB_DIR; default %s;\n"
            "                         'off' serves no console)\n"
            "  --access-log FILE      one line per request; '-' for stderr (default), 'off'\n"
            "  --log-limit BYTES      output stored per job, all ranks and attempts (default\n"
            "                         %lld); past it a rank's log ends with a note\n"
            "  --rate-limit N         requests a second per tenant, all its tokens together, on\n"
            "                         average (default %d; 0: no limit; a page of many rows,\n"
            "                         usage, invoices and CSV count as several); past it 429\n"
            "                         with Retry-After\n"
            "  --rate-burst N         requests one tenant may make at once (default %d)\n"
            "  --max-conns N          open connections in all; past it new ones are closed at\n"
            "                         once (default %d)\n"
            "  --max-conns-per-ip N   open connections from one address (default %d; 0: no limit)\n"
            "  --idle-timeout SECONDS a connection silent this long is closed (default %d)\n"
            "  --header-timeout SECONDS\n"
            "                         a request's headers must be whole this long after the\n"
            "                         connection opened or its last request ended, however\n"
            "                         slowly they trickle in (default %d)\n"
            "  --routes               print the routes served and exit\n"
            "  --help                 this text\n"
            "\n"
            "On first start the platform admin token is COHORT_ADMIN_TOKEN when set, else a\n"
            "new one, printed once and written to DATA_DIR/admin-token (mode 0600).\n",
            DEFAULT_LISTEN, DEFAULT_DATA_DIR, API_DEFAULT_BODY_LIMIT,
            (long long)API_DEFAULT_UPLOAD_LIMIT, SCHED_MIN_HOLD_S, SCHED_BUDGET_GRACE_S,
            COHORT_WEB_DIR_DEFAULT, (long long)API_DEFAULT_LOG_LIMIT, HTTP_DEFAULT_RATE_PER_S,
            HTTP_DEFAULT_RATE_BURST, HTTP_DEFAULT_MAX_CONNS, HTTP_DEFAULT_MAX_CONNS_PER_IP,
            HTTP_DEFAULT_IDLE_TIMEOUT_S, HTTP_DEFAULT_HEADER_TIMEOUT_S);
}

static int parse_listen(const char *s, struct config *c)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return -1;
    size_t hl = (size_t)(colon - s);
    const char *h = s;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') { /* [::1]:8080 */
        h++;
        hl -= 2;
    }
    if (hl >= sizeof c->host)
        return -1;
    memcpy(c->host, h, hl);
    c->host[hl] = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535 || end == colon + 1)
        return -1;
    c->port = (int)p;
    return 0;
}

static int parse_size(const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* An option with a value: where it goes in struct config and its bounds. */
enum opt_type { OPT_STR, OPT_I64, OPT_INT, OPT_SIZE, OPT_DBL };

struct opt {
    const char *name;
    enum opt_type type;
    size_t off;           /* in struct config */
    long long lo, hi;     /* numbers only */
    const char *unit;
};

#define OPT_AT(f) offsetof(struct config, f)

static const struct opt options[] = {
    {"listen", OPT_STR, OPT_AT(listen), 0, 0, ""},
    {"data-dir", OPT_STR, OPT_AT(data_dir), 0, 0, ""},
    {"store", OPT_STR, OPT_AT(store), 0, 0, ""},
    {"access-log", OPT_STR, OPT_AT(access_log), 0, 0, ""},
    {"web-dir", OPT_STR, OPT_AT(web_dir), 0, 0, ""},
    {"registry", OPT_STR, OPT_AT(registry), 0, 0, ""},
    {"body-limit", OPT_SIZE, OPT_AT(body_limit), 1024, 1LL << 30, "bytes"},
    {"bodies-max", OPT_SIZE, OPT_AT(bodies_max), 1024, 1LL << 34, "bytes"},
    {"default-storage-quota", OPT_I64, OPT_AT(default_storage), 0, 1LL << 60, "bytes"},
    {"default-max-pending", OPT_I64, OPT_AT(default_pending), 0, 100000000, "jobs"},
    {"storage-scan", OPT_I64, OPT_AT(storage_scan_ms), 100, 86400000, "ms"},
    {"max-files", OPT_I64, OPT_AT(max_files), 0, 1LL << 40, "files"},
    {"upload-limit", OPT_I64, OPT_AT(upload_limit), 1, 1LL << 40, "bytes"},
    {"threads", OPT_INT, OPT_AT(threads), 1, 256, "threads"},
    {"heartbeat", OPT_I64, OPT_AT(heartbeat_s), 1, 3600, "seconds"},
    {"node-timeout", OPT_I64, OPT_AT(node_timeout_s), 1, 3600, "seconds"},
    {"lease", OPT_I64, OPT_AT(lease_s), 1, 3600, "seconds"},
    {"node-token-rotate", OPT_I64, OPT_AT(node_token_rotate_s), 0, 10LL * 365 * 86400, "seconds"},
    {"min-hold", OPT_I64, OPT_AT(min_hold_s), 1, 7 * 86400, "seconds"},
    {"budget-grace", OPT_I64, OPT_AT(budget_grace_s), 1, 7 * 86400, "seconds"},
    {"rate-limit", OPT_DBL, OPT_AT(rate_per_s), 0, 1000000, "a second"},
    {"rate-burst", OPT_DBL, OPT_AT(rate_burst), 1, 1000000, "requests"},
    {"log-limit", OPT_I64, OPT_AT(log_limit), 4096, 1LL << 50, "bytes"},
    {"max-conns", OPT_INT, OPT_AT(max_conns), 16, 1000000, "connections"},
    {"max-conns-per-ip", OPT_INT, OPT_AT(max_conns_per_ip), 0, 1000000, "connections"},
    {"idle-timeout", OPT_INT, OPT_AT(idle_timeout_s), 1, 3600, "seconds"},
    {"header-timeout", OPT_INT, OPT_AT(header_timeout_s), 1, 3600, "seconds"},
};
#define NOPTS (sizeof options / sizeof *options)

/* Stores optarg for option o into c: 0, or -1 (said). */
static int set_option(const struct opt *o, const char *arg, struct config *c)
{
    char *at = (char *)c + o->off;
    long long v;
    if (o->type == OPT_STR) {
        *(const char **)at = arg;
        return 0;
    }
    if (parse_size(arg, o->lo, o->hi, &v)) {
        fprintf(stderr, "cohortd: --%s must be %lld..%lld %s, got '%s'\n", o->name, o->lo,
                o->hi, o->unit, arg);
        return -1;
    }
    switch (o->type) {
    case OPT_I64: *(int64_t *)at = v; break;
    case OPT_INT: *(int *)at = (int)v; break;
    case OPT_SIZE: *(size_t *)at = (size_t)v; break;
    case OPT_DBL: *(double *)at = (double)v; break;
    case OPT_STR: break;
    }
    return 0;
}

/* The defaults, then the environment's (COHORT_LISTEN, _DATA_DIR, _WEB_DIR,
 * _STORE, _REGISTRY). */
static void config_defaults(struct config *c)
{
    const char *env[][2] = {{"COHORT_LISTEN", DEFAULT_LISTEN},
                            {"COHORT_DATA_DIR", DEFAULT_DATA_DIR},
                            {"COHORT_WEB_DIR", NULL},
                            {"COHORT_STORE", NULL},
                            {"COHORT_REGISTRY", "127.0.0.1:5000"}};
    const char **to[] = {&c->listen, &c->data_dir, &c->web_dir, &c->store, &c->registry};
    for (size_t i = 0; i < sizeof to / sizeof *to; i++) {
        const char *v = getenv(env[i][0]);
        *to[i] = v && *v ? v : env[i][1];
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->body_limit = API_DEFAULT_BODY_LIMIT;
    c->default_storage = 20LL << 30;
    c->max_files = 1000000;
    c->default_pending = 1000;
    c->storage_scan_ms = 15000;
    c->upload_limit = API_DEFAULT_UPLOAD_LIMIT;
    c->threads = cpus > 0 ? (int)cpus : 2;
    c->access_log = "-";
    c->heartbeat_s = 2;
    c->node_timeout_s = 10;
    c->lease_s = 30;
    c->node_token_rotate_s = 30 * 86400;
    c->min_hold_s = SCHED_MIN_HOLD_S;
    c->budget_grace_s = SCHED_BUDGET_GRACE_S;
    c->max_conns = HTTP_DEFAULT_MAX_CONNS;
    c->log_limit = API_DEFAULT_LOG_LIMIT;
    c->rate_per_s = HTTP_DEFAULT_RATE_PER_S;
    c->rate_burst = HTTP_DEFAULT_RATE_BURST;
    c->max_conns_per_ip = HTTP_DEFAULT_MAX_CONNS_PER_IP;
    c->idle_timeout_s = HTTP_DEFAULT_IDLE_TIMEOUT_S;
    c->header_timeout_s = HTTP_DEFAULT_HEADER_TIMEOUT_S;
}

static int parse_args(int argc, char **argv, struct config *c)
{
    static struct option longopts[NOPTS + 3];
    for (size_t i = 0; i < NOPTS; i++)
        longopts[i] = (struct option){options[i].name, required_argument, NULL, 0};
    longopts[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[NOPTS + 1] = (struct option){"routes", no_argument, NULL, 'r'};
    config_defaults(c);
    int o, idx;
    while ((o = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        if (o == 0 && set_option(&options[idx], optarg, c) == 0)
            continue;
        if (o == 0)
            return -1;
        if (o == 'h') {
            usage(stdout);
            exit(0);
        }
        if (o == 'r') { /* the routes served, for the OpenAPI check */
            for (const api_route *r = api_routes(); r->pattern; r++)
                printf("%s %s\n", api_method_name(r->method), r->pattern);
            printf("GET /metrics\n");
            exit(0);
        }
        usage(stderr);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "cohortd: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!*c->registry || strlen(c->registry) >= 256 || strchr(c->registry, '/')) {
        fprintf(stderr, "cohortd: --registry wants HOST:PORT: %s\n", c->registry);
        return -1;
    }
    if (c->store && !*c->store)
        c->store = NULL;
    if (parse_listen(c->listen, c)) {
        fprintf(stderr, "cohortd: listen address must be HOST:PORT, got '%s'\n", c->listen);
        return -1;
    }
    return 0;
}

/*
 * The console's web root: an explicit one must open; the built-in default
 * (the source tree's web/) is skipped with a note when it is not there.
 */
static int open_console(api_ctx *ctx, const char *dir)
{
    char err[512];
    if (dir && !strcmp(dir, "off"))
        return 0;
    if (api_web_open(ctx, dir ? dir : COHORT_WEB_DIR_DEFAULT, err, sizeof err) == 0)
        return 0;
    if (dir) {
        fprintf(stderr, "cohortd: %s\n", err);
        return -1;
    }
    fprintf(stderr, "cohortd: no console: %s (give --web-dir)\n", err);
    return 0;
}

/* The data dir neither listed, read nor written by other users: its
 * group's and others' read and write bits off (the search bit stays, for
 * the containers' uids that walk to the image cache below it). */
static int keep_private(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return -1;
    mode_t want = sb.st_mode & 07711;
    if ((sb.st_mode & 07777) == want)
        return 0;
    if (chmod(dir, want) != 0)
        return -1;
    printf("cohortd: %s was mode %o, now %o: no other user lists or reads it\n", dir,
           (unsigned)(sb.st_mode & 07777), (unsigned)want);
    return 0;
}

static int mkdir_p(const char *dir)
{
    char p[PATH_MAX];
    if (fmt_whole(p, sizeof p, "%s", dir) != 0)
        return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0700) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    }
    return mkdir(p, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

/*
 * Holds DIR/cohortd.lock for the life of the process: one cohortd per data
 * dir on SQLite, which the store's single writer relies on.  cohortd on a
 * PostgreSQL store share the lock (shared != 0): several of them serve one
 * data dir's volumes and logs, on a file system they all mount.
 */
static int lock_data_dir(const char *dir, int shared)
{
    char p[PATH_MAX];
    int fd = fmt_path(p, sizeof p, dir, "cohortd.lock") == 0
                 ? open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600)
                 : (errno = ENAMETOOLONG, -1);
    if (fd < 0) {
        fprintf(stderr, "cohortd: cannot open %s: %s\n", p, strerror(errno));
        return -1;
    }
    if (flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
        fprintf(stderr, "cohortd: another cohortd is already using %s (%s is locked%s)\n", dir, p,
                shared ? " by a cohortd on SQLite" : "");
        close(fd);
        return -1;
    }
    return fd; /* kept open until exit */
}

/* Writes text to dir/name atomically with mode. */
static int write_file(const char *dir, const char *name, const char *text, mode_t mode)
{
    char tmp[PATH_MAX], dst[PATH_MAX];
    if (fmt_whole(tmp, sizeof tmp, "%s/.%s.tmp", dir, name) != 0 ||
        fmt_path(dst, sizeof dst, dir, name) != 0)
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    int ok = write(fd, text, n) == (ssize_t)n && fchmod(fd, mode) == 0 && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp, dst) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Every connection is a descriptor: the soft limit (often 1024) goes up to
 * the hard one, so --max-conns, not the default limit, bounds them. */
static void raise_fd_limit(int max_conns)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max)
        return;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < (rlim_t)max_conns + 64)
        fprintf(stderr, "cohortd: the descriptor limit (%llu) is below --max-conns (%d)\n",
                (unsigned long long)rl.rlim_cur, max_conns);
}

/* Opens the access log the configuration names: NULL for "off", and for a
 * file that cannot be opened (said on stderr, *failed set). */
static alog *open_access_log(const struct config *cfg, int *failed)
{
    char err[512];
    FILE *f = NULL;
    *failed = 0;
    if (!strcmp(cfg->access_log, "off"))
        return NULL;
    if (!strcmp(cfg->access_log, "-")) {
        f = stderr;
        setvbuf(stderr, NULL, _IOFBF, 1 << 16); /* flushed by the access log's writer */
    } else if (!(f = fopen(cfg->access_log, "a"))) {
        fprintf(stderr, "cohortd: cannot open access log %s: %s\n", cfg->access_log,
                strerror(errno));
        *failed = 1;
        return NULL;
    }
    /* 16 MiB: seconds of lines at full speed, so a stalled disk never holds
     * a request up.  The log owns f from here. */
    alog *a = alog_open(f, 16 << 20, err, sizeof err);
    if (!a) {
        fprintf(stderr, "cohortd: %s\n", err);
        if (f != stderr)
            fclose(f);
        *failed = 1;
    }
    return a;
}

/* ctx's registry token signer (regtoken.h) and secrets key (seal.h), under
 * an exclusive lock of DATA_DIR/keys.lock: of several cohortd sharing the
 * data dir (PostgreSQL), one makes them and the others read them.  0, or
 * -1 with err set. */
static int open_keys(api_ctx *ctx, char *err, size_t errlen)
{
    char path[4200];
    int fd = fmt_path(path, sizeof path, ctx->data_dir, "keys.lock") == 0
                 ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)
                 : (errno = ENAMETOOLONG, -1);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        fmt_cut(err, errlen, "%.300s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int rc = -1;
    if (!(ctx->regtoken = regtoken_open(ctx->data_dir, err, errlen)))
        goto out;
    if (!(ctx->seal = seal_open(ctx->data_dir, err, errlen)))
        goto out;
    rc = 0;
out:
    close(fd); /* and the lock with it */
    return rc;
}

/* Closes what ctx_open opened, in reverse; NULL is fine. */
static void ctx_close(api_ctx *ctx)
{
    if (!ctx)
        return;
    stuse_stop(ctx->stuse);
    fsquota_close(ctx->fsq);
    seal_close(ctx->seal);
    regtoken_close(ctx->regtoken);
    api_beats_close(ctx);
    if (ctx->st) {
        store_on_signal(ctx->st, NULL, NULL);
        store_on_nodes(ctx->st, NULL, NULL);
    }
    sched_stop(ctx->sched);
    store_close(ctx->st);
    api_web_close(ctx);
    api_logs_close(ctx);
    free(ctx);
}

/* Prints the platform admin token when this start made it (and no
 * COHORT_ADMIN_TOKEN named it), and writes it to DATA_DIR/admin-token. */
static int bootstrap_admin(api_ctx *ctx, const struct config *cfg)
{
    char token[UTIL_TOKEN_LEN + 1], err[512];
    int created = 0;
    const char *env_token = getenv("COHORT_ADMIN_TOKEN");
    if (api_bootstrap_admin(ctx, env_token, token, &created, err, sizeof err) != 0) {
        fprintf(stderr, "cohortd: %s\n", err);
        return -1;
    }
    if (created && !(env_token && *env_token)) {
        char line[UTIL_TOKEN_LEN + 2];
        fmt_cut(line, sizeof line, "%s\n", token); /* sized for a token */
        if (write_file(cfg->data_dir, "admin-token", line, 0600) != 0)
            fprintf(stderr, "cohortd: warning: cannot write %s/admin-token\n", cfg->data_dir);
        printf("cohortd: platform admin token (shown once): %s\n", token);
        printf("cohortd: also written to %s/admin-token\n", cfg->data_dir);
    }
    return 0;
}

/*
 * A few MiB the data dir keeps in reserve: SQLite cannot open a database
 * (its -wal and -shm files are made anew at each start) on a disk with no
 * room at all, so a cohortd stopped on a full disk could not start again to
 * serve reads.  The reserve is spent on such a start and taken again, as
 * far as there is room, at every start.
 */
#define RESERVE_NAME "reserve"
#define RESERVE_BYTES (4LL << 20)

static void reserve_keep(const char *dir)
{
    char path[PATH_MAX];
    struct stat sb;
    if (fmt_path(path, sizeof path, dir, RESERVE_NAME) != 0 ||
        (stat(path, &sb) == 0 && sb.st_size >= RESERVE_BYTES))
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    /* As much as fits, to the page: on a full disk, nothing more. */
    off_t have = fstat(fd, &sb) == 0 ? sb.st_size : 0;
    for (off_t len = RESERVE_BYTES - have; len >= 4096 && have < RESERVE_BYTES;) {
        if (posix_fallocate(fd, have, len) == 0)
            have += len;
        else
            len /= 2;
        if (have + len > RESERVE_BYTES)
            len = RESERVE_BYTES - have;
    }
    close(fd);
}

/* Less room left where dir lies than half the reserve. */
static int disk_full(const char *dir)
{
    struct statvfs v;
    return statvfs(dir, &v) == 0 && (long long)v.f_bavail * (long long)v.f_frsize < RESERVE_BYTES / 2;
}

/* Frees the reserve: 0, or -1 when there was none. */
static int reserve_spend(const char *dir)
{
    char path[PATH_MAX];
    return fmt_path(path, sizeof path, dir, RESERVE_NAME) == 0 && unlink(path) == 0 ? 0 : -1;
}

/* Everything the API serves from: the data dir's store, logs, console,
 * admin token and scheduler.  NULL (and why on stderr) on failure. */
/* DATA_DIR/volumes and what bounds them: btrfs quotas where the file
 * system stops writes at a tenant's quota, and the measuring of tenants'
 * storage in the background from now on (the first walk may take a while
 * on large volumes: the server does not wait).  0, or -1 said on stderr. */
static int open_volumes(api_ctx *ctx, const struct config *cfg)
{
    char vols[sizeof ctx->data_dir + 16], err[512];
    if (fmt_path(vols, sizeof vols, ctx->data_dir, "volumes") != 0 ||
        (mkdir(vols, 0750) != 0 && errno != EEXIST)) {
        fprintf(stderr, "cohortd: %s: %s\n", vols, strerror(errno));
        return -1;
    }
    if ((ctx->fsq = fsquota_open(vols, err, sizeof err)) != NULL)
        printf("cohortd: volumes on btrfs: each a subvolume, a qgroup per tenant holding its "
               "storage quota\n");
    else if (strstr(err, "btrfs,"))
        fprintf(stderr, "cohortd: %s: quotas are kept by measuring alone\n", err);
    if (!(ctx->stuse = stuse_start(ctx, cfg->storage_scan_ms,
                                   cfg->default_storage > 0 ? cfg->default_storage : -1,
                                   cfg->max_files > 0 ? cfg->max_files : -1))) {
        fprintf(stderr, "cohortd: cannot start measuring tenants' storage\n");
        return -1;
    }
    return 0;
}

static api_ctx *ctx_open(const struct config *cfg)
{
    char err[512], path[PATH_MAX];
    api_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        fprintf(stderr, "cohortd: out of memory\n");
        return NULL;
    }
    ctx->web_fd = -1;
    ctx->heartbeat_s = cfg->heartbeat_s;
    ctx->lease_s = cfg->lease_s;
    ctx->node_token_rotate_s = cfg->node_token_rotate_s;
    ctx->min_hold_s = cfg->min_hold_s;
    ctx->budget_grace_s = cfg->budget_grace_s;
    ctx->body_limit = cfg->body_limit;
    ctx->upload_limit = cfg->upload_limit;
    ctx->default_max_pending = cfg->default_pending > 0 ? cfg->default_pending : -1;
    /* Agents are told host paths of volumes: keep them absolute. */
    if (!realpath(cfg->data_dir, ctx->data_dir)) {
        fprintf(stderr, "cohortd: %s: %s\n", cfg->data_dir, strerror(errno));
        goto fail;
    }
    if (api_logs_open(ctx, cfg->log_limit, err, sizeof err) != 0) {
        fprintf(stderr, "cohortd: %s\n", err);
        goto fail;
    }
    if (open_console(ctx, cfg->web_dir) != 0)
        goto fail;
    if (cfg->store ? fmt_whole(path, sizeof path, "%s", cfg->store)
                   : fmt_whole(path, sizeof path, "sqlite:%s/cohort.db", cfg->data_dir)) {
        fprintf(stderr, "cohortd: the store's address is too long\n");
        goto fail;
    }
    if (disk_full(cfg->data_dir) && reserve_spend(cfg->data_dir) == 0)
        fprintf(stderr, "cohortd: the data dir's disk is full: starting on the room of %s/%s; "
                        "writes answer 507 no_space until space is freed\n",
                cfg->data_dir, RESERVE_NAME);
    if (!(ctx->st = store_open(path, err, sizeof err))) {
        fprintf(stderr, "cohortd: %s\n", err);
        goto fail;
    }
    if (bootstrap_admin(ctx, cfg) != 0)
        goto fail;
    sched_config sc = {cfg->node_timeout_s * 1000, 1000, cfg->min_hold_s, cfg->budget_grace_s};
    if (!(ctx->sched = sched_start(ctx->st, &sc, err, sizeof err))) {
        fprintf(stderr, "cohortd: %s\n", err);
        goto fail;
    }
    /* Other cohortd on the same database (PostgreSQL): their commits wake
     * the agents waiting here, and their revocations reach the token cache. */
    store_on_nodes(ctx->st, api_on_nodes, ctx);
    if (store_on_signal(ctx->st, api_on_signal, ctx) != STORE_OK) {
        fprintf(stderr, "cohortd: cannot listen for the other cohortd's signals\n");
        goto fail;
    }
    if (api_beats_open(ctx, err, sizeof err) != 0) {
        fprintf(stderr, "cohortd: %s\n", err);
        goto fail;
    }
    if (open_volumes(ctx, cfg) != 0)
        goto fail;
    /* The registry's token signer and the key of secrets at rest, made at
     * the first start; several cohortd on one data dir make them once. */
    if (fmt_whole(ctx->registry, sizeof ctx->registry, "%s", cfg->registry) != 0) {
        fprintf(stderr, "cohortd: --registry is too long\n");
        goto fail;
    }
    if (open_keys(ctx, err, sizeof err) != 0 || api_images_reseal(ctx, err, sizeof err) != 0) {
        fprintf(stderr, "cohortd: %s\n", err);
        goto fail;
    }
    return ctx;
fail:
    ctx_close(ctx);
    return NULL;
}

/*
 * A request thread that builds a large answer (an invoice of 8,500 lines:
 * PostgreSQL's whole result, then the JSON tree and its text) grew its
 * malloc arena a page at a time and gave it back when the answer was freed,
 * so the next one faulted every page in again: on PostgreSQL half of such a
 * request's time.  Freed memory is kept, up to a bound, for the next one;
 * the peak stays what it was.
 */
static void keep_freed_memory(void)
{
    mallopt(M_MMAP_THRESHOLD, 16 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    mallopt(M_TOP_PAD, 1 << 20);
}

/*
 * The API served: bound, then published (DATA_DIR/cohortd.addr), then the
 * reserve taken back (when it was spent), and only then served, so that no
 * request lands in the room of the reserve on a full disk.  NULL, said on
 * stderr, when it cannot be.
 */
static http_server *serve(const struct config *cfg, api_ctx *ctx, alog *access)
{
    char err[512], addr[300];
    int bound = 0, lfd = http_bind(cfg->host, cfg->port, &bound, err, sizeof err);
    if (lfd < 0) {
        fprintf(stderr, "cohortd: %s\n", err);
        return NULL;
    }
    if (fmt_whole(addr, sizeof addr, "%s:%d\n", cfg->host, bound) != 0 ||
        write_file(cfg->data_dir, "cohortd.addr", addr, 0644) != 0)
        fprintf(stderr, "cohortd: warning: cannot write %s/cohortd.addr\n", cfg->data_dir);
    reserve_keep(cfg->data_dir); /* spent at this start: taken again where there is room */
    http_config hc = {cfg->host,      bound,             cfg->threads,
                      access,         cfg->max_conns,    cfg->max_conns_per_ip,
                      cfg->idle_timeout_s, cfg->header_timeout_s, cfg->rate_per_s,
                      cfg->rate_burst, cfg->bodies_max, lfd};
    http_server *srv = http_start(&hc, ctx, err, sizeof err);
    if (!srv) {
        close(lfd);
        fprintf(stderr, "cohortd: %s\n", err);
    }
    return srv;
}

int main(int argc, char **argv)
{
    struct config cfg = {0};
    char path[PATH_MAX];
    api_ctx *ctx = NULL;
    http_server *srv = NULL;
    alog *access = NULL;
    int rc = 1, failed;
    sigset_t sigs;

    if (parse_args(argc, argv, &cfg))
        return 2;
    raise_fd_limit(cfg.max_conns);
    keep_freed_memory();
    /* Block the stop signals in every thread; main waits for them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (mkdir_p(cfg.data_dir) != 0 || keep_private(cfg.data_dir) != 0) {
        fprintf(stderr, "cohortd: cannot create data dir %s: %s\n", cfg.data_dir, strerror(errno));
        return 1;
    }
    int lock_fd = lock_data_dir(cfg.data_dir, cfg.store && !strncmp(cfg.store, "postgres", 8));
    if (lock_fd < 0)
        return 1;
    access = open_access_log(&cfg, &failed);
    if (failed || !(ctx = ctx_open(&cfg)))
        goto out;
    if (!(srv = serve(&cfg, ctx, access)))
        goto out;
    if (api_uploads_sweep(cfg.data_dir) != 0)
        fprintf(stderr, "cohortd: warning: cannot look for unfinished uploads\n");
    printf("cohortd: listening on http://%s:%d (data dir %s, %s schema %d)\n", cfg.host,
           http_port(srv), cfg.data_dir, store_backend_name(ctx->st),
           store_schema_version(ctx->st));
    fflush(stdout);

    /* Wait for a stop signal (stderr, where notes go, is flushed each second). */
    int sig;
    struct timespec tick = {1, 0};
    while ((sig = sigtimedwait(&sigs, NULL, &tick)) < 0)
        fflush(stderr);
    printf("cohortd: %s: finishing requests in flight\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    fflush(stdout);
    http_stop(srv, SHUTDOWN_GRACE_MS);
    srv = NULL;
    if (fmt_path(path, sizeof path, cfg.data_dir, "cohortd.addr") == 0)
        unlink(path);
    rc = 0;
out:
    if (srv)
        http_stop(srv, 0);
    ctx_close(ctx);
    alog_close(access); /* after the server: every request's line is in */
    if (rc == 0)
        printf("cohortd: stopped cleanly\n");
    close(lock_fd);
    return rc;
}
