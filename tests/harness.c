/*
 * harness: process control and HTTP for the integration tests.
 */
#include "tests/harness.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/util.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

long long th_ms_of(const char *s)
{
    struct tm tm = {0};
    int ms = 0;
    cr_assert(sscanf(s, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                     &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) == 7,
              "time %s", s);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (long long)timegm(&tm) * 1000 + ms;
}

int th_pg(void)
{
    const char *pg = getenv("COHORT_TEST_PG");
    return pg && *pg;
}

static void run_capture(const char *cmd, char *out, size_t n)
{
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    pclose(p);
}

void th_store_target(const char *dir, const char *file, char *out, size_t n)
{
    if (!th_pg()) {
        snprintf(out, n, "sqlite:%s/%s", dir, file);
        return;
    }
    /* One database per dir, so a cohortd started again in the same dir
     * finds its data; created when missing. */
    char name[64] = "t_", cmd[1024], res[512];
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    size_t k = 2;
    for (const char *s = base; *s && k < sizeof name - 1; s++)
        name[k++] = (char)((*s >= 'A' && *s <= 'Z') ? *s - 'A' + 'a'
                           : ((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')) ? *s : '_');
    name[k] = '\0';
    const char *host = getenv("COHORT_TEST_PG");
    snprintf(cmd, sizeof cmd,
             "psql -X -q -At 'postgresql:///postgres?host=%s&user=cohort' -c "
             "\"SELECT 1 FROM pg_database WHERE datname = '%s'\" 2>&1",
             host, name);
    run_capture(cmd, res, sizeof res);
    if (strcmp(res, "1\n") != 0) {
        snprintf(cmd, sizeof cmd,
                 "psql -X -q 'postgresql:///postgres?host=%s&user=cohort' -c "
                 "'CREATE DATABASE %s' 2>&1",
                 host, name);
        run_capture(cmd, res, sizeof res);
        cr_assert_eq(res[0], '\0', "CREATE DATABASE %s: %s", name, res);
    }
    snprintf(out, n, "postgresql:///%s?host=%s&user=cohort", name, host);
}

void th_store_query(const char *target, const char *sql, char *out, size_t n)
{
    char cmd[8192];
    int len;
    if (!strncmp(target, "sqlite:", 7))
        len = snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"%s\"", target + 7, sql);
    else
        len = snprintf(cmd, sizeof cmd, "psql -X -q -At -F'|' '%s' -c \"%s\" 2>&1", target, sql);
    cr_assert_lt((size_t)len, sizeof cmd, "SQL too long for th_store_query");
    run_capture(cmd, out, n);
}

static void launch(th_daemon *d, const char *const *extra)
{
    char addr[300];
    snprintf(addr, sizeof addr, "%s/cohortd.addr", d->dir);
    unlink(addr);
    pid_t parent = getpid(), pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        const char *argv[32] = {COHORTD_BIN, "--listen", "127.0.0.1:0", "--data-dir", d->dir,
                                "--threads", "2", "--access-log", "off"};
        int n = 9;
        if (d->store[0]) {
            argv[n++] = "--store";
            argv[n++] = d->store;
        }
        for (int i = 0; extra && extra[i] && n < 30; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        if (d->no_admin_env)
            unsetenv("COHORT_ADMIN_TOKEN");
        else
            setenv("COHORT_ADMIN_TOKEN", TH_ADMIN, 1);
        char logp[300];
        snprintf(logp, sizeof logp, "%s/cohortd.log", d->dir);
        FILE *f = freopen(logp, "a", stdout);
        (void)f;
        dup2(1, 2);
        close_range(3, ~0U, 0); /* none of the test's sockets or files */
        /* Gone with the test's process, however it ends: a test that
         * crashes, times out or is skipped (Criterion then runs no .fini)
         * leaves no cohortd behind. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        execv(COHORTD_BIN, (char *const *)argv);
        _exit(127);
    }
    d->pid = pid;
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(addr, "r");
        if (f) {
            char line[128] = "";
            char *ok = fgets(line, sizeof line, f);
            fclose(f);
            if (ok && strchr(line, ':')) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(d->base, sizeof d->base, "http://%s", line);
                return;
            }
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            cr_assert_fail("cohortd exited during start-up (status %d); see %s/cohortd.log", st,
                           d->dir);
        sleep_ms(10);
    }
    cr_assert_fail("cohortd did not start within 10 s");
}

/* Starts cohortd in dir, or in a fresh /tmp/cohort-test-XXXXXX when dir is NULL. */
static void start(th_daemon *d, const char *dir, int no_admin, const char *const *extra)
{
    memset(d, 0, sizeof *d);
    d->no_admin_env = no_admin;
    snprintf(d->dir, sizeof d->dir, "%s", dir ? dir : "/tmp/cohort-test-XXXXXX");
    if (!dir) {
        cr_assert(mkdtemp(d->dir) != NULL);
        chmod(d->dir, 0711); /* agents' image caches inside: containers' uids walk through */
    }
    snprintf(d->db, sizeof d->db, "%s/cohort.db", d->dir);
    if (th_pg())
        th_store_target(d->dir, "cohort.db", d->store, sizeof d->store);
    launch(d, extra);
}

void th_start(th_daemon *d, const char *const *extra)
{
    start(d, NULL, 0, extra);
}

void th_start_in(th_daemon *d, const char *dir, const char *const *extra)
{
    start(d, dir, 0, extra);
}

void th_start_no_admin(th_daemon *d, const char *const *extra)
{
    start(d, NULL, 1, extra);
}

/* A TCP socket bound to a loopback port of the kernel's choosing, not
 * listening; its port goes to *port.  The caller owns the socket. */
static int loopback_bound(int *port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int ok = s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
             getsockname(s, (struct sockaddr *)&a, &len) == 0;
    if (!ok && s >= 0)
        close(s);
    cr_assert(ok, "no free loopback port");
    *port = ntohs(a.sin_port);
    return s;
}

/*
 * The ports th_free_port hands out: below the kernel's ephemeral range (where
 * bind(0) and every outgoing connection take theirs) and below the agents'
 * default rendezvous ports (29500-29999).  A counter in one file, under a
 * lock, walks them for every test process on this machine, so two tests run
 * side by side never get the same port, and nothing the kernel picks takes
 * one between th_free_port and its user's bind.
 */
#define TH_PORT_LO 20000
#define TH_PORT_N 9500
#define TH_PORT_FILE "/tmp/cohort-test-ports"

/* 1 when nothing at all is bound to port on loopback now (no listener, no
 * connection, no TIME_WAIT: the probe asks for no SO_REUSEADDR). */
static int port_unbound(int port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (s >= 0)
        close(s);
    return ok;
}

/* The next unbound port of the walk, or 0 where the walk cannot be used (an
 * ephemeral range that reaches into it, or no lock file). */
static int walked_port(void)
{
    char buf[64] = "";
    long lo = 0, hi = 0, next;
    int port = 0;
    if (th_read_text("/proc/sys/net/ipv4/ip_local_port_range", buf, sizeof buf) != 0 ||
        sscanf(buf, "%ld %ld", &lo, &hi) != 2 || lo < TH_PORT_LO + TH_PORT_N)
        return 0;
    int fd = open(TH_PORT_FILE, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return 0;
    if (flock(fd, LOCK_EX) != 0)
        goto done;
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    next = n > 0 ? atol(buf) : (long)getpid();
    for (int i = 0; i < TH_PORT_N && !port; i++, next++)
        if (port_unbound(TH_PORT_LO + (int)(next % TH_PORT_N)))
            port = TH_PORT_LO + (int)(next % TH_PORT_N);
    int len = snprintf(buf, sizeof buf, "%ld\n", next % TH_PORT_N);
    /* Were this lost, the next caller would start again from its pid. */
    if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)len, 0) != len)
        fprintf(stderr, "th_free_port: %s was not updated\n", TH_PORT_FILE);
done:
    close(fd);
    return port;
}

int th_free_port(void)
{
    int port = walked_port();
    if (port == 0)
        close(loopback_bound(&port));
    return port;
}

int th_closed_port(void)
{
    int port;
    /* The socket is left open on purpose: the test's process ends with it. */
    (void)loopback_bound(&port);
    return port;
}

void th_restart(th_daemon *d, const char *const *extra)
{
    launch(d, extra);
}

/* Sends sig to *pid, reaps it and clears *pid: its exit status, or 128 plus
 * the signal that ended it; 0 when there was no process. */
static int end_process(pid_t *pid, int sig)
{
    int st = 0;
    if (*pid <= 0)
        return 0;
    kill(*pid, sig);
    waitpid(*pid, &st, 0);
    *pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* cohortd and agents end alike: a TERM that waits, or a KILL. */
int th_stop(th_daemon *d)
{
    return end_process(&d->pid, SIGTERM);
}

int th_agent_stop(th_agent *a)
{
    return end_process(&a->pid, SIGTERM);
}

void th_kill9(th_daemon *d)
{
    end_process(&d->pid, SIGKILL);
}

void th_agent_kill9(th_agent *a)
{
    end_process(&a->pid, SIGKILL);
}

void th_cleanup(th_daemon *d)
{
    if (d->pid > 0)
        th_kill9(d);
    th_registry_stop();
    char cmd[300];
    /* COHORT_TEST_KEEP=1 keeps each test's directory: cohortd's and the
     * agents' logs, for whoever chases a failure. */
    const char *keep = getenv("COHORT_TEST_KEEP");
    if (keep && !strcmp(keep, "1") && d->dir[0])
        fprintf(stderr, "kept %s\n", d->dir);
    else if (d->dir[0] && !strncmp(d->dir, "/tmp/cohort-test-", 17)) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
        int rc = system(cmd);
        (void)rc;
    }
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    th_resp *r = arg;
    size_t len = size * n;
    if (len > 10 && !strncasecmp(p, "Location: ", 10)) {
        size_t l = len - 10;
        while (l > 0 && (p[10 + l - 1] == '\r' || p[10 + l - 1] == '\n'))
            l--;
        if (l >= sizeof r->location)
            l = sizeof r->location - 1;
        memcpy(r->location, p + 10, l);
        r->location[l] = '\0';
    }
    if (len > 20 && !strncasecmp(p, "Idempotent-Replayed:", 20))
        r->replayed = 1;
    return len;
}

th_resp th_req(th_daemon *d, const char *method, const char *path, const char *token,
               const char *ctype, const void *body, size_t len, const char *extra_header)
{
    th_resp r = {0};
    util_buf s = {0};
    char url[2048], auth[400], ct[200];
    CURL *c = curl_easy_init();
    cr_assert(c);
    struct curl_slist *h = NULL;
    snprintf(url, sizeof url, "%s%s", d->base, path);
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    if (body || ctype) {
        snprintf(ct, sizeof ct, "Content-Type: %s", ctype ? ctype : "application/json");
        h = curl_slist_append(h, ct);
    }
    if (extra_header)
        h = curl_slist_append(h, extra_header);
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, util_buf_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    r.body = s.buf ? s.buf : strdup("");
    r.len = s.len;
    r.json = cJSON_Parse(r.body);
    return r;
}

th_resp th_get(th_daemon *d, const char *path, const char *token)
{
    return th_req(d, "GET", path, token, NULL, NULL, 0, NULL);
}

th_resp th_del(th_daemon *d, const char *path, const char *token)
{
    return th_req(d, "DELETE", path, token, NULL, NULL, 0, NULL);
}

th_resp th_post(th_daemon *d, const char *path, const char *token, const char *json)
{
    return th_req(d, "POST", path, token, json ? "application/json" : NULL, json,
                  json ? strlen(json) : 0, NULL);
}

th_resp th_put_file(th_daemon *d, const char *path, const char *token, const void *data,
                    size_t len)
{
    return th_req(d, "PUT", path, token, "application/octet-stream", data, len, NULL);
}

void th_free(th_resp *r)
{
    free(r->body);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof *r);
}

char *th_take_body(th_resp *r)
{
    char *b = r->body;
    r->body = NULL;
    th_free(r);
    return b;
}

cJSON *th_take_json(th_resp *r)
{
    cJSON *j = r->json;
    r->json = NULL;
    th_free(r);
    return j;
}

char *th_get_body(th_daemon *d, const char *path, const char *token)
{
    th_resp r = th_get(d, path, token);
    cr_assert_eq(r.status, 200, "GET %s: %ld %s", path, r.status, r.body);
    return th_take_body(&r);
}

cJSON *th_get_json(th_daemon *d, const char *path, const char *token)
{
    th_resp r = th_get(d, path, token);
    cr_assert_eq(r.status, 200, "GET %s: %ld %s", path, r.status, r.body);
    return th_take_json(&r);
}

int th_read_text(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[got] = '\0';
    return 0;
}

static const char *err_member(const th_resp *r, const char *key)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(r->json, "error");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

void th_expect_error(th_resp r, long status, const char *code, const char *field)
{
    cr_expect_eq(r.status, status, "%s", r.body);
    if (code)
        cr_expect_str_eq(th_err_code(&r), code, "%s", r.body);
    if (field)
        cr_expect_str_eq(th_err_field(&r), field, "%s", r.body);
    th_free(&r);
}

const char *th_err_code(const th_resp *r)
{
    return err_member(r, "code");
}

const char *th_err_field(const th_resp *r)
{
    return err_member(r, "field");
}

const char *th_str(const th_resp *r, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->json, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

double th_num(const th_resp *r, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->json, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int th_items(const th_resp *r)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->json, "items");
    return cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
}

long th_user(th_daemon *d, const char *tenant, const char *user, const char *role, char *tok)
{
    char body[256], path[256];
    snprintf(body, sizeof body, "{\"name\":\"%s\"}", tenant);
    th_resp r = th_post(d, "/v1/tenants", TH_ADMIN, body);
    cr_assert(r.status == 201 || r.status == 409, "tenant %s: %ld %s", tenant, r.status, r.body);
    th_free(&r);
    snprintf(body, sizeof body, "{\"name\":\"%s\",\"role\":\"%s\"}", user, role);
    snprintf(path, sizeof path, "/v1/tenants/%s/users", tenant);
    r = th_post(d, path, TH_ADMIN, body);
    cr_assert_eq(r.status, 201, "user %s: %ld %s", user, r.status, r.body);
    long id = (long)th_num(&r, "id");
    th_free(&r);
    snprintf(path, sizeof path, "/v1/users/%ld/tokens", id);
    r = th_post(d, path, TH_ADMIN, "{\"name\":\"test\"}");
    cr_assert_eq(r.status, 201, "token: %ld %s", r.status, r.body);
    snprintf(tok, 80, "%s", th_str(&r, "token"));
    th_free(&r);
    return id;
}

void th_db_digest(th_daemon *d, char out[65])
{
    char cmd[600], buf[128];
    if (d->store[0])
        snprintf(cmd, sizeof cmd,
                 "pg_dump --data-only '%s' | grep -Ev '^.(un)?restrict |setval' | sha256sum",
                 d->store);
    else
        snprintf(cmd, sizeof cmd, "sqlite3 -readonly '%s' .dump | sha256sum", d->db);
    run_capture(cmd, buf, sizeof buf);
    memcpy(out, buf, 64);
    out[64] = '\0';
}

void th_db_query(th_daemon *d, const char *sql, char *out, size_t n)
{
    char target[400];
    snprintf(target, sizeof target, "sqlite:%s", d->db);
    th_store_query(d->store[0] ? d->store : target, sql, out, n);
}

void th_db_check(th_daemon *d, char *out, size_t n)
{
    static const char pg[] =
        "CREATE EXTENSION IF NOT EXISTS amcheck; SELECT CASE WHEN"
        " (SELECT count(*) FROM pg_class c CROSS JOIN LATERAL verify_heapam(c.oid)"
        "  WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace) = 0"
        " AND (SELECT count(*) FROM (SELECT bt_index_check(c.oid, true) FROM pg_class c"
        "  JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'btree'"
        "  AND c.relnamespace = 'public'::regnamespace) x) > 0"
        " THEN 'ok' ELSE 'corrupt' END";
    th_db_query(d, d->store[0] ? pg : "PRAGMA integrity_check", out, n);
}

int th_cohortd_once(const char *const *args, char *out, size_t n)
{
    char cmd[4096];
    size_t len = (size_t)snprintf(cmd, sizeof cmd, "timeout 10 %s", COHORTD_BIN);
    for (int i = 0; args && args[i] && len < sizeof cmd; i++)
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, " '%s'", args[i]);
    snprintf(cmd + len, sizeof cmd - len, " 2>&1");
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- agents ---- */

/* ---- the tests' registry ---- */

static pid_t registry_pid;
static char registry_addr[64], registry_dir[128];

/* BUILD/test-registry: storage every test's registry serves, filled once per
 * build (under a lock) with the test images; refilled when cohort-worker
 * changes.  Blobs are only ever added, so registries may share it. */
/* Writes data/name: a docker-registry configuration serving data/data on
 * 127.0.0.1:port.  Its path goes to conf. */
static void registry_config(char *conf, size_t n, const char *data, const char *name, int port)
{
    snprintf(conf, n, "%s/%s", data, name);
    FILE *f = fopen(conf, "w");
    cr_assert(f, "%s", conf);
    fprintf(f,
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
            "    rootdirectory: %s/data\nhttp:\n  addr: 127.0.0.1:%d\n",
            data, port);
    fclose(f);
}

static void registry_template(const char *build, char *data, size_t n)
{
    char lockp[600], stamp[700], want[128] = "", have[128] = "", cmd[4096];
    struct stat sb;
    snprintf(data, n, "%s/test-registry", build);
    snprintf(lockp, sizeof lockp, "%s/test-registry.lock", build);
    snprintf(stamp, sizeof stamp, "%s/.ready", data);
    if (stat(COHORT_WORKER_BIN, &sb) == 0)
        snprintf(want, sizeof want, "%lld %lld\n", (long long)sb.st_mtime, (long long)sb.st_size);
    int lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert(lk >= 0 && flock(lk, LOCK_EX) == 0, "lock %s", lockp);
    FILE *f = fopen(stamp, "r");
    if (f) {
        if (!fgets(have, sizeof have, f))
            have[0] = '\0';
        fclose(f);
    }
    if (strcmp(have, want)) {
        int port = th_free_port();
        char conf[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", data, data);
        cr_assert_eq(system(cmd), 0);
        registry_config(conf, sizeof conf, data, "config.yml", port);
        snprintf(cmd, sizeof cmd,
                 "docker-registry serve '%s' >'%s/log' 2>&1 & rp=$!; "
                 "for i in $(seq 100); do curl -sf http://127.0.0.1:%d/v2/ >/dev/null && break; "
                 "sleep 0.1; done; "
                 "'%s/tests/make-test-image' 127.0.0.1:%d cohort/cohort:bookworm >/dev/null && "
                 "'%s/tests/make-test-image' 127.0.0.1:%d cohort/worker:test --worker '%s' "
                 ">/dev/null; rc=$?; kill $rp; wait $rp 2>/dev/null; exit $rc",
                 conf, data, port, COHORT_SOURCE_DIR, port, COHORT_SOURCE_DIR, port, build);
        cr_assert_eq(system(cmd), 0, "building the test images failed (see %s/log)", data);
        f = fopen(stamp, "w");
        cr_assert(f);
        fputs(want, f);
        fclose(f);
    }
    close(lk);
}

void th_registry_add_pytorch(void)
{
    char build[512], data[600], lockp[600], stamp[700], cmd[4096];
    struct stat sb;
    snprintf(build, sizeof build, "%s", COHORT_AGENT_BIN);
    *strrchr(build, '/') = '\0';
    registry_template(build, data, sizeof data);
    /* Its own lock: the build takes minutes, and a test of another image
     * (registry_template) must not wait them out behind it. */
    snprintf(lockp, sizeof lockp, "%s/test-registry-pytorch.lock", build);
    snprintf(stamp, sizeof stamp, "%s/.pytorch", data);
    int lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert(lk >= 0 && flock(lk, LOCK_EX) == 0, "lock %s", lockp);
    if (stat(stamp, &sb) != 0) {
        int port = th_free_port();
        char conf[700];
        registry_config(conf, sizeof conf, data, "config-pytorch.yml", port);
        /* The real image, from Debian's packages (cached outside the build). */
        snprintf(cmd, sizeof cmd,
                 "docker-registry serve '%s' >>'%s/log' 2>&1 & rp=$!; "
                 "for i in $(seq 100); do curl -sf http://127.0.0.1:%d/v2/ >/dev/null && break; "
                 "sleep 0.1; done; "
                 "'%s/scripts/build-images' --registry 127.0.0.1:%d --build '%s' pytorch "
                 ">>'%s/log' 2>&1; rc=$?; kill $rp; wait $rp 2>/dev/null; exit $rc",
                 conf, data, port, COHORT_SOURCE_DIR, port, build, data);
        cr_assert_eq(system(cmd), 0, "building the pytorch image failed (see %s/log)", data);
        FILE *f = fopen(stamp, "w");
        cr_assert(f);
        fclose(f);
    }
    close(lk);
}

/* One try at starting a registry at ip on a port free a moment ago: 0 once
 * it answers, -1 when it exited first (a process beside this test took the
 * port in between: th_free_port can only say what is free now). */
static int registry_try(const char *data, const char *ip, pid_t *pid, char *addr, size_t an)
{
    char conf[300], cmd[200];
    int port = th_free_port();
    snprintf(addr, an, "%s:%d", ip, port);
    snprintf(conf, sizeof conf, "%s/config-%d.yml", registry_dir, port);
    FILE *f = fopen(conf, "w");
    cr_assert(f);
    fprintf(f, "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
               "    rootdirectory: %s/data\nhttp:\n  addr: %s\n",
            data, addr);
    fclose(f);
    pid_t p = fork();
    cr_assert(p >= 0);
    if (p == 0) {
        char logp[300];
        snprintf(logp, sizeof logp, "%s/log", registry_dir);
        FILE *lf = freopen(logp, "a", stdout);
        (void)lf;
        dup2(1, 2);
        close_range(3, ~0U, 0);
        execlp("docker-registry", "docker-registry", "serve", conf, (char *)NULL);
        _exit(127);
    }
    snprintf(cmd, sizeof cmd, "curl -sf -m 5 http://%s/v2/ >/dev/null", addr);
    for (int i = 0; i < 200; i++) {
        /* what answers must be this registry, not another on its port */
        if (waitpid(p, NULL, WNOHANG) == p)
            return -1;
        if (system(cmd) == 0) {
            sleep_ms(50);
            if (waitpid(p, NULL, WNOHANG) == p)
                return -1;
            *pid = p;
            return 0;
        }
        sleep_ms(25);
    }
    kill(p, SIGTERM);
    waitpid(p, NULL, 0);
    cr_assert_fail("the test registry did not start (see %s/log)", registry_dir);
    return -1;
}

/* Starts a registry over the tests' storage at ip on a free port; its pid
 * goes to *pid, "ip:port" to addr. */
static void registry_start(const char *ip, pid_t *pid, char *addr, size_t an)
{
    char build[512], data[600];
    snprintf(build, sizeof build, "%s", COHORT_AGENT_BIN);
    *strrchr(build, '/') = '\0';
    registry_template(build, data, sizeof data);
    snprintf(registry_dir, sizeof registry_dir, "/tmp/cohort-test-reg-%d", (int)getpid());
    mkdir(registry_dir, 0700);
    for (int tries = 0; tries < 3; tries++)
        if (registry_try(data, ip, pid, addr, an) == 0)
            return;
    cr_assert_fail("the test registry lost its port three times (see %s/log)", registry_dir);
}

static pid_t extra_pid[4];
static int nextra;

const char *th_registry(void)
{
    if (registry_pid <= 0)
        registry_start("127.0.0.1", &registry_pid, registry_addr, sizeof registry_addr);
    return registry_addr;
}

const char *th_registry_on(const char *ip)
{
    static char addr[4][64];
    cr_assert_lt(nextra, 4);
    th_registry();
    registry_start(ip, &extra_pid[nextra], addr[nextra], sizeof addr[nextra]);
    return addr[nextra++];
}

void th_registry_stop(void)
{
    char cmd[200];
    if (registry_pid <= 0)
        return;
    kill(registry_pid, SIGTERM);
    waitpid(registry_pid, NULL, 0);
    registry_pid = 0;
    for (int i = 0; i < nextra; i++) {
        kill(extra_pid[i], SIGTERM);
        waitpid(extra_pid[i], NULL, 0);
    }
    nextra = 0;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", registry_dir);
    int rc = system(cmd);
    (void)rc;
}

int th_push_image(const char *repo_tag, const char *const *opts)
{
    char cmd[2048];
    int n = snprintf(cmd, sizeof cmd, "'%s/tests/make-test-image' %s %s", COHORT_SOURCE_DIR,
                     th_registry(), repo_tag);
    for (int i = 0; opts && opts[i] && n < (int)sizeof cmd - 300; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", opts[i]);
    snprintf(cmd + n, sizeof cmd - (size_t)n, " >/dev/null");
    return system(cmd);
}

int th_can_sandbox(void)
{
    return geteuid() == 0;
}

static void agent_launch(th_agent *a, th_daemon *d, const char *const *extra)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        const char *argv[48];
        int n = 0;
        /* A "host" of its own: the namespace's network, the machine's
         * mounts (as a real host has them: its cgroup hierarchies, v1
         * controllers included, which `ip netns exec`'s fresh /sys hid). */
        char net[120];
        if (a->netns[0]) {
            snprintf(net, sizeof net, "--net=/run/netns/%s", a->netns);
            argv[n++] = "/usr/bin/nsenter";
            argv[n++] = net;
        }
        const char *base[] = {COHORT_AGENT_BIN, "--server", a->servers[0] ? a->servers : d->base,
                              "--name", a->name,
                              "--data-dir", a->dir,
                              "--stop-grace", "2", "--address", "127.0.0.1"};
        setenv("COHORT_JOIN_TOKEN", a->join, 1); /* as make run gives it: ps shows no secret */
        for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
            argv[n++] = base[i];
        int host = 0;
        for (int i = 0; extra && extra[i] && n < 38; i++) {
            host |= !strcmp(extra[i], "--runtime") || !strcmp(extra[i], "--registry");
            argv[n++] = extra[i];
        }
        if (!host) { /* containers, images from the tests' registry */
            argv[n++] = "--registry";
            argv[n++] = a->registry;
            argv[n++] = "--insecure-registry";
            argv[n++] = a->registry;
        }
        argv[n] = NULL;
        char logp[420];
        snprintf(logp, sizeof logp, "%s.log", a->dir);
        FILE *f = freopen(logp, "a", stdout);
        (void)f;
        dup2(1, 2);
        close_range(3, ~0U, 0);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    a->pid = pid;
}

void th_agent_start(th_agent *a, th_daemon *d, const char *name, const char *const *extra)
{
    th_agent_start_in(a, d, NULL, name, extra);
}

static void agent_start(th_agent *a, th_daemon *d, const char *netns, const char *servers,
                        const char *name, const char *const *extra);

void th_agent_start_in(th_agent *a, th_daemon *d, const char *netns, const char *name,
                       const char *const *extra)
{
    agent_start(a, d, netns, NULL, name, extra);
}

void th_agent_start_on(th_agent *a, th_daemon *d, const char *servers, const char *name,
                       const char *const *extra)
{
    agent_start(a, d, NULL, servers, name, extra);
}

static void agent_start(th_agent *a, th_daemon *d, const char *netns, const char *servers,
                        const char *name, const char *const *extra)
{
    memset(a, 0, sizeof *a);
    if (servers)
        snprintf(a->servers, sizeof a->servers, "%s", servers);
    if (netns)
        snprintf(a->netns, sizeof a->netns, "%s", netns);
    snprintf(a->name, sizeof a->name, "%s", name);
    snprintf(a->dir, sizeof a->dir, "%s/agent-%s", d->dir, name);
    snprintf(a->registry, sizeof a->registry, "%s", th_registry());
    th_resp r = th_post(d, "/v1/nodes/join-tokens", TH_ADMIN, NULL);
    cr_assert_eq(r.status, 201, "join token: %s", r.body);
    snprintf(a->join, sizeof a->join, "%s", th_str(&r, "token"));
    th_free(&r);
    agent_launch(a, d, extra);
    for (int i = 0; i < 500; i++) {
        r = th_get(d, "/v1/nodes?limit=200", TH_ADMIN);
        char needle[96];
        snprintf(needle, sizeof needle, "\"name\":\"%s\"", name);
        int found = strstr(r.body, needle) != NULL;
        th_free(&r);
        if (found)
            return;
        int st;
        if (waitpid(a->pid, &st, WNOHANG) == a->pid)
            cr_assert_fail("cohort-agent %s exited during start-up; see %s.log", name, a->dir);
        sleep_ms(20);
    }
    cr_assert_fail("cohort-agent %s did not register within 10 s", name);
}

void th_agent_restart(th_agent *a, th_daemon *d, const char *const *extra)
{
    agent_launch(a, d, extra);
}

void th_agent_cleanup(th_agent *a)
{
    if (a->pid > 0)
        th_agent_stop(a);
    /* An agent killed and not restarted leaves its (empty) cgroup subtrees,
     * one a line. */
    char path[512], cg[1100];
    snprintf(path, sizeof path, "%s/cgroup", a->dir);
    FILE *f = a->dir[0] ? fopen(path, "r") : NULL;
    while (f && fgets(cg, sizeof cg, f)) {
        cg[strcspn(cg, "\n")] = '\0';
        if (cg[0])
            rmdir(cg);
    }
    if (f)
        fclose(f);
    /* and, killed, the network namespaces of its jobs (its log names where) */
    char log[600], line[1024], prefix[300] = "";
    snprintf(log, sizeof log, "%s.log", a->dir);
    f = a->dir[0] ? fopen(log, "r") : NULL;
    while (f && fgets(line, sizeof line, f)) {
        char *at = strstr(line, "/run/netns/"), *end = at ? strstr(at, "-j<job>") : NULL;
        if (end)
            snprintf(prefix, sizeof prefix, "%.*s", (int)(end - at - 11), at + 11);
    }
    if (f)
        fclose(f);
    DIR *nd = prefix[0] ? opendir("/run/netns") : NULL;
    struct dirent *e;
    while (nd && (e = readdir(nd)) != NULL)
        if (!strncmp(e->d_name, prefix, strlen(prefix)) && e->d_name[strlen(prefix)] == '-')
            util_system("umount -l '/run/cohort-sys/%s' 2>/dev/null; "
                        "rmdir '/run/cohort-sys/%s' 2>/dev/null; "
                        "ip netns delete '%s' 2>/dev/null",
                        e->d_name, e->d_name, e->d_name);
    if (nd)
        closedir(nd);
}

/* For a job stuck short of its state: the end of every agent's log in the
 * test's directory, and where the runtime's processes are blocked. */
static void warn_where_workers_are(const th_daemon *d)
{
    static char out[6000];
    char cmd[700];
    snprintf(cmd, sizeof cmd,
             "for f in '%s'/agent-*.log; do [ -f \"$f\" ] && echo \"== $f\" && tail -c 1500 \"$f\"; "
             "done; echo '== processes'; ps -eo pid,ppid,stat,wchan:24,etime,args 2>/dev/null | "
             "grep -E 'crun|cohort-(shim|init)|[.]init' | grep -v grep | head -30",
             d->dir);
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    while (fread(cmd, 1, sizeof cmd, p) > 0)
        ;
    pclose(p);
    cr_log_warn("%s", out);
}

int th_wait_state(th_daemon *d, const char *tok, long job, const char *want, int timeout_ms,
                  char *seen)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%ld", job);
    seen[0] = '\0';
    for (int waited = 0; waited <= timeout_ms; waited += 50) {
        th_resp r = th_get(d, path, tok);
        snprintf(seen, 16, "%s", th_str(&r, "state"));
        if (!strcmp(seen, want)) {
            th_free(&r);
            return 1;
        }
        if (!strcmp(seen, "SUCCEEDED") || !strcmp(seen, "FAILED") || !strcmp(seen, "CANCELLED")) {
            /* Why, for whoever reads a failed test. */
            cr_log_warn("job %ld ended %s: %s", job, seen, th_str(&r, "reason"));
            th_free(&r);
            return 0;
        }
        th_free(&r);
        sleep_ms(50);
    }
    /* Why, for whoever reads a failed test in CI: the job and its events. */
    th_resp r = th_get(d, path, tok);
    cr_log_warn("job %ld is still %s after %d ms: %.1500s", job, th_str(&r, "state"), timeout_ms,
                r.body ? r.body : "");
    th_free(&r);
    snprintf(path, sizeof path, "/v1/jobs/%ld/events?limit=20", job);
    r = th_get(d, path, tok);
    cr_log_warn("its events: %.3000s", r.body ? r.body : "");
    th_free(&r);
    warn_where_workers_are(d);
    return 0;
}

th_resp th_create(th_daemon *d, const char *path, const char *tok, const char *json)
{
    th_resp r = th_post(d, path, tok, json);
    cr_assert_eq(r.status, 201, "POST %s %s: %ld %s", path, json, r.status, r.body);
    return r;
}

long th_submit(th_daemon *d, const char *tok, const char *json)
{
    th_resp r = th_create(d, "/v1/jobs", tok, json);
    long id = (long)th_num(&r, "id");
    th_free(&r);
    return id;
}

long th_cancel(th_daemon *d, const char *tok, long job)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%ld/cancel", job);
    th_resp r = th_post(d, path, tok, NULL);
    long status = r.status;
    th_free(&r);
    return status;
}

long th_id(th_daemon *d, const char *path, const char *tok)
{
    th_resp r = th_get(d, path, tok);
    double id = th_num(&r, "id");
    cr_assert(id > 0, "GET %s: %ld %s", path, r.status, r.body);
    th_free(&r);
    return (long)id;
}

int th_connect(th_daemon *d)
{
    const char *port = strrchr(d->base, ':') + 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0, "connect to %s: %s",
              d->base, strerror(errno));
    return s;
}

void th_put_text(th_daemon *d, const char *tok, const char *ws, const char *path,
                 const char *text, const char *mode)
{
    char p[512];
    snprintf(p, sizeof p, "/v1/workspaces/%s/files/%s%s%s", ws, path, mode ? "?mode=" : "",
             mode ? mode : "");
    th_resp r = th_put_file(d, p, tok, text, strlen(text));
    cr_assert_eq(r.status, 201, "upload %s: %s", path, r.body);
    th_free(&r);
}

int th_count_marked(const char *marker)
{
    DIR *dp = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (dp && (e = readdir(dp)) != NULL) {
        char path[300], buf[4096];
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < got; i++)
            if (!buf[i])
                buf[i] = ' ';
        buf[got] = '\0';
        n += strstr(buf, marker) != NULL;
    }
    if (dp)
        closedir(dp);
    return n;
}

const char *th_shared_image_cache(void)
{
    static char path[600];
    char build[512];
    snprintf(build, sizeof build, "%s", COHORT_AGENT_BIN);
    *strrchr(build, '/') = '\0';
    snprintf(path, sizeof path, "%s/test-image-cache", build);
    return path;
}

void th_put_quota(th_daemon *d, const char *tenant, const char *json)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/tenants/%s/quota", tenant);
    th_resp r = th_req(d, "PUT", path, TH_ADMIN, "application/json", json, strlen(json), NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    th_free(&r);
}
