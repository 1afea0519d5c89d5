/*
 * Durability and shutdown: kill -9 cohortd while clients submit; after a
 * restart every job that got a 201 is there and the database passes
 * PRAGMA integrity_check.  SIGTERM lets a request in flight finish.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"

#define CLIENTS 8

static th_daemon d;
static char tok[80];

static void setup(void)
{
    th_start(&d, NULL);
    th_user(&d, "acme", "alice", "member", tok);
    th_resp r = th_post(&d, "/v1/workspaces", tok, "{\"name\":\"ws\"}");
    cr_assert_eq(r.status, 201);
    th_free(&r);
    r = th_put_file(&d, "/v1/workspaces/ws/files/t.py", tok, "x", 1);
    cr_assert_eq(r.status, 201);
    th_free(&r);
}

static void teardown(void)
{
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

    th_restart(&d, NULL);
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
    th_db_query(&d, "PRAGMA integrity_check", out, sizeof out);
    cr_expect_str_eq(out, "ok\n");
    th_db_query(&d, "SELECT count(*) FROM jobs j WHERE NOT EXISTS (SELECT 1 FROM job_events e"
                    " WHERE e.job_id = j.id)",
                out, sizeof out);
    cr_expect_str_eq(out, "0\n", "a job without its submit event");
    cr_log_info("%d acknowledged jobs all survived kill -9", acked);
}

Test(durability, sigterm_lets_a_request_in_flight_finish)
{
    const char *port = strrchr(d.base, ':') + 1;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(s, (struct sockaddr *)&a, sizeof a), 0);
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
    th_db_query(&d, "PRAGMA integrity_check", out, sizeof out);
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
