/*
 * Durability and shutdown: kill -9 cohortd while clients submit; after a
 * restart every job that got a 201 is there and the database passes
 * its engine's integrity check.  SIGTERM lets a request in flight finish.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"

#define CLIENTS 8

static th_daemon d;
static char tok[80];

/* Eight clients share one token here: no per-token rate limit (test_limits has it). */
static const char *const unlimited[] = {"--rate-limit", "0", NULL};

static void setup(void)
{
    th_start(&d, unlimited);
    th_user(&d, "acme", "alice", "member", tok);
    th_must(th_post(&d, "/v1/workspaces", tok, "{\"name\":\"ws\"}"), 201);
    th_must(th_put_file(&d, "/v1/workspaces/ws/files/t.py", tok, "x", 1), 201);
}

/* The full-disk test's cohortd and mount: undone here too if it fails half-way. */
static th_daemon full;
static char full_dir[64];

static void teardown(void)
{
    if (full_dir[0]) {
        char cmd[200];
        th_stop(&full);
        snprintf(cmd, sizeof cmd, "umount '%s' && rmdir '%s'", full_dir, full_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot unmount %s\n", full_dir);
        full_dir[0] = '\0';
    }
    th_stop(&d);
    th_cleanup(&d);
}

TestSuite(durability, .init = setup, .fini = teardown, .timeout = 240);

/* A client process: submits until the server goes away, writing the name of
 * every job that got a 201 to its file. */
static void client(int c)
{
    char path[300], body[512];
    snprintf(path, sizeof path, "%s/acked-%d", d.dir, c);
    FILE *f = fopen(path, "w");
    if (!f)
        _exit(2);
    for (int i = 0; i < 100000; i++) {
        snprintf(body, sizeof body,
                 "{\"name\":\"c%d-%d\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                 "\"code_path\":\"t.py\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                 "\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
                 c, i);
        th_resp r = th_post(&d, "/v1/jobs", tok, body);
        long st = r.status;
        th_free(&r);
        if (st == 201) {
            fprintf(f, "c%d-%d\n", c, i);
            fflush(f);
        } else if (st == 0) {
            break; /* the server is gone */
        }
    }
    fclose(f);
    _exit(0);
}

Test(durability, kill9_during_submits_loses_no_acknowledged_job)
{
    pid_t kids[CLIENTS];
    for (int c = 0; c < CLIENTS; c++) {
        kids[c] = fork();
        cr_assert(kids[c] >= 0);
        if (kids[c] == 0)
            client(c);
    }
    struct timespec ts = {1, 500000000};
    nanosleep(&ts, NULL);
    th_kill9(&d);
    for (int c = 0; c < CLIENTS; c++)
        waitpid(kids[c], NULL, 0);

    th_restart(&d, unlimited);
    int acked = 0;
    for (int c = 0; c < CLIENTS; c++) {
        char path[300], name[64];
        snprintf(path, sizeof path, "%s/acked-%d", d.dir, c);
        FILE *f = fopen(path, "r");
        cr_assert(f);
        while (fgets(name, sizeof name, f)) {
            name[strcspn(name, "\n")] = '\0';
            char q[128];
            snprintf(q, sizeof q, "/v1/jobs?name=%s", name);
            th_resp r = th_get(&d, q, tok);
            cr_expect_eq(th_items(&r), 1, "job %s got a 201 but is gone after kill -9", name);
            th_free(&r);
            acked++;
        }
        fclose(f);
    }
    cr_expect_gt(acked, 50, "too few submits before the kill to mean anything (%d)", acked);
    char out[256];
    th_db_check(&d, out, sizeof out);
    cr_expect_str_eq(out, "ok\n");
    th_db_query(&d, "SELECT count(*) FROM jobs j WHERE NOT EXISTS (SELECT 1 FROM job_events e"
                    " WHERE e.job_id = j.id)",
                out, sizeof out);
    cr_expect_str_eq(out, "0\n", "a job without its submit event");
    cr_log_info("%d acknowledged jobs all survived kill -9", acked);
}

Test(durability, sigterm_lets_a_request_in_flight_finish)
{
    int s = th_connect(&d);
    char head[512];
    int n = snprintf(head, sizeof head,
                     "PUT /v1/workspaces/ws/files/slow.bin HTTP/1.1\r\nHost: x\r\n"
                     "Authorization: Bearer %s\r\nContent-Length: 10\r\n\r\n12345",
                     tok);
    cr_assert_eq(write(s, head, (size_t)n), n);
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL);
    kill(d.pid, SIGTERM);
    nanosleep(&ts, NULL);
    cr_assert_eq(write(s, "67890", 5), 5);
    char resp[1024] = "";
    ssize_t got = read(s, resp, sizeof resp - 1);
    close(s);
    cr_assert_gt(got, 0);
    cr_expect(strncmp(resp, "HTTP/1.1 201", 12) == 0, "in-flight upload got: %s", resp);
    int st;
    waitpid(d.pid, &st, 0);
    d.pid = 0;
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cohortd did not exit cleanly");
    /* New connections are refused once it has stopped. */
    th_resp r = th_get(&d, "/healthz", NULL);
    cr_expect_eq(r.status, 0);
    th_free(&r);
    th_restart(&d, NULL);
    r = th_get(&d, "/v1/workspaces/ws/files/slow.bin", tok);
    cr_expect_str_eq(r.body, "1234567890");
    th_free(&r);
    char out[64];
    th_db_check(&d, out, sizeof out);
    cr_expect_str_eq(out, "ok\n");
}

Test(durability, one_cohortd_per_data_dir)
{
    char out[2048];
    const char *args[] = {"--listen", "127.0.0.1:0", "--data-dir", d.dir, NULL};
    int st = th_cohortd_once(args, out, sizeof out);
    cr_expect_eq(st, 1, "a second cohortd on the same data dir: status %d, %s", st, out);
    cr_expect(strstr(out, "already using") != NULL, "%s", out);
    th_resp r = th_get(&d, "/healthz", NULL);
    cr_expect_eq(r.status, 200, "the first one was disturbed");
    th_free(&r);
}

/* What cohortd keeps is its own: a data dir made 0755 by someone else
 * loses its read and write bits for others (its search bit stays), and the
 * database, made 0644 by someone else, and its WAL are 0600: no other user
 * of the machine reads tokens' hashes, jobs or bills there. */
Test(durability, the_data_dir_and_the_database_are_cohortds_alone)
{
    char dir[] = "/tmp/cohort-private-XXXXXX", path[200];
    struct stat sb;
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(chmod(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/cohort.db", dir);
    int fd = open(path, O_WRONLY | O_CREAT, 0644); /* an empty file is an empty database */
    cr_assert_geq(fd, 0);
    fchmod(fd, 0644);
    close(fd);
    th_daemon own = {0};
    th_start_in(&own, dir, NULL);
    th_must(th_post(&own, "/v1/tenants", TH_ADMIN, "{\"name\":\"kept\"}"), 201);
    cr_assert_eq(stat(dir, &sb), 0);
    cr_expect_eq(sb.st_mode & 0777, 0711, "the data dir is %o", (unsigned)(sb.st_mode & 0777));
    static const char *const files[] = {"cohort.db", "cohort.db-wal", "secrets.key",
                                        "registry-key.pem"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (th_pg() && i < 2)
            continue; /* the database lives in PostgreSQL there */
        cr_assert_eq(stat(path, &sb), 0, "%s", path);
        cr_expect_eq(sb.st_mode & 077, 0, "%s is %o", files[i], (unsigned)(sb.st_mode & 0777));
    }
    th_stop(&own);
    th_cleanup(&own);
}

Test(durability, help_lists_every_option)
{
    char out[4096];
    const char *args[] = {"--help", NULL};
    cr_expect_eq(th_cohortd_once(args, out, sizeof out), 0);
    static const char *const opts[] = {"--listen", "--data-dir", "--body-limit", "--upload-limit",
                                       "--threads", "--access-log", "COHORT_LISTEN",
                                       "COHORT_DATA_DIR", "COHORT_ADMIN_TOKEN", "--web-dir",
                                       "COHORT_WEB_DIR", NULL};
    for (int i = 0; opts[i]; i++)
        cr_expect(strstr(out, opts[i]) != NULL, "--help does not mention %s", opts[i]);
    const char *bad[] = {"--listen", "nonsense", NULL};
    cr_expect_eq(th_cohortd_once(bad, out, sizeof out), 2, "%s", out);
}

/* ---- a full disk ---- */

/* Fills the file system under dir with one file, to the last byte it takes. */
static void fill_disk(const char *dir)
{
    char path[300], block[65536];
    snprintf(path, sizeof path, "%s/filler", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
    memset(block, 'x', sizeof block);
    for (size_t chunk = sizeof block; chunk > 0; chunk /= 2)
        while (write(fd, block, chunk) == (ssize_t)chunk)
            ;
    close(fd);
}

static void free_disk(const char *dir)
{
    char path[300];
    snprintf(path, sizeof path, "%s/filler", dir);
    cr_assert_eq(unlink(path), 0, "%s: %s", path, strerror(errno));
}

static char *job_body(int i, char *out, size_t n)
{
    snprintf(out, n,
             "{\"name\":\"full-%d\",\"image\":\"pytorch\",\"workspace\":\"ws\","
             "\"code_path\":\"t.py\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
             "\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
             i);
    return out;
}

/*
 * cohortd's data dir on a 16 MB tmpfs, filled to the last byte: creates of
 * jobs, workspaces and files answer 507 no_space and leave nothing behind,
 * reads go on working, and once space is freed everything works again with
 * an intact database.
 */
Test(durability, a_full_disk_answers_507_and_keeps_nothing_half_done)
{
    /* A skipped test gets no .fini: the suite's cohortd is stopped here. */
    if (geteuid() != 0 || th_pg())
        teardown();
    if (geteuid() != 0)
        cr_skip_test("mounting a small file system needs root");
    if (th_pg())
        cr_skip_test("on PostgreSQL the database is on the server's disk, not in the data dir;"
                     " this test fills the data dir");
    char *dir = full_dir, tk[80], body[512], out[256];
    snprintf(full_dir, sizeof full_dir, "/tmp/cohort-full-XXXXXX");
    cr_assert(mkdtemp(full_dir));
    char cmd[200];
    snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=16m,mode=0711 cohort-full '%s'", dir);
    if (system(cmd) != 0) {
        rmdir(full_dir);
        full_dir[0] = '\0';
        cr_assert_fail("%s failed", cmd);
    }
    th_start_in(&full, dir, unlimited);
    th_user(&full, "acme", "alice", "member", tk);
    th_must(th_post(&full, "/v1/workspaces", tk, "{\"name\":\"ws\"}"), 201);
    th_must(th_put_file(&full, "/v1/workspaces/ws/files/t.py", tk, "x", 1), 201);
    th_resp r;

    fill_disk(dir);
    /* The WAL may still have room for a few rows; creates go on until the
     * disk really refuses one, and each answer tells the truth. */
    int acked = 0, refused = 0, i;
    for (i = 0; i < 2000 && !refused; i++) {
        r = th_post(&full, "/v1/jobs", tk, job_body(i, body, sizeof body));
        cr_assert(r.status == 201 || r.status == 507, "job create on a full disk: %ld %s",
                  r.status, r.body);
        if (r.status == 507) {
            cr_expect_str_eq(th_err_code(&r), "no_space", "%s", r.body);
            refused = 1;
        } else {
            acked++;
        }
        th_free(&r);
    }
    cr_assert(refused, "%d job creates on a full disk all succeeded", i);
    r = th_post(&full, "/v1/workspaces", tk, "{\"name\":\"ws2\"}");
    cr_expect_eq(r.status, 507, "workspace create on a full disk: %ld %s", r.status, r.body);
    cr_expect_str_eq(th_err_code(&r), "no_space", "%s", r.body);
    th_free(&r);
    static char big[1 << 20];
    r = th_put_file(&full, "/v1/workspaces/ws/files/big.bin", tk, big, sizeof big);
    cr_expect_eq(r.status, 507, "upload on a full disk: %ld %s", r.status, r.body);
    th_free(&r);
    /* Reads work, and what was refused is not there. */
    r = th_get(&full, "/v1/jobs?limit=200", tk);
    cr_expect_eq(r.status, 200);
    th_free(&r);
    r = th_get(&full, "/v1/workspaces/ws2", tk);
    cr_expect_eq(r.status, 404, "a refused workspace is listed: %s", r.body);
    th_free(&r);
    r = th_get(&full, "/v1/workspaces/ws/files/big.bin", tk);
    cr_expect_eq(r.status, 404, "a refused upload left a file: %ld", r.status);
    th_free(&r);

    /* cohortd starts again on the full disk: reads served, writes 507. */
    cr_assert_eq(th_stop(&full), 0);
    th_restart(&full, unlimited);
    r = th_get(&full, "/v1/jobs?limit=200", tk);
    cr_expect_eq(r.status, 200, "a read after a restart on a full disk: %ld %s", r.status,
                 r.body);
    th_free(&r);
    r = th_post(&full, "/v1/jobs", tk, job_body(i, body, sizeof body));
    cr_expect_eq(r.status, 507, "a write after a restart on a full disk: %ld %s", r.status,
                 r.body);
    th_free(&r);

    free_disk(dir);
    r = th_post(&full, "/v1/jobs", tk, job_body(i, body, sizeof body));
    cr_expect_eq(r.status, 201, "after space is freed: %ld %s", r.status, r.body);
    th_free(&r);
    r = th_post(&full, "/v1/workspaces", tk, "{\"name\":\"ws2\"}");
    cr_expect_eq(r.status, 201, "after space is freed: %ld %s", r.status, r.body);
    th_free(&r);
    th_stop(&full);
    th_db_query(&full, "SELECT count(*) FROM jobs", out, sizeof out);
    cr_expect_eq(atoi(out), acked + 1, "%d acknowledged + 1 after, the database has %s", acked,
                 out);
    th_db_check(&full, out, sizeof out);
    cr_expect_str_eq(out, "ok\n");
    cr_log_info("full disk: %d job creates acknowledged before the first 507", acked);
    snprintf(cmd, sizeof cmd, "umount '%s' && rmdir '%s'", dir, dir);
    cr_expect_eq(system(cmd), 0, "%s", cmd);
    full_dir[0] = '\0';
}
