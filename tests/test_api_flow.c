/*
 * The whole happy path over HTTP against a real cohortd: tenant, users,
 * tokens, a workspace with an uploaded file, a dataset, and a job through
 * create / get / list / cancel / delete / events; idempotent submits;
 * token revocation and expiry; pagination.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "lib/launch_spec.h"
#include "lib/util.h"
#include "tests/harness.h"

static th_daemon d;

static void setup(void)
{
    th_start(&d, NULL);
}

static void teardown(void)
{
    int st = th_stop(&d);
    th_cleanup(&d);
    cr_expect_eq(st, 0, "cohortd did not stop cleanly (status %d)", st);
}

TestSuite(api_flow, .init = setup, .fini = teardown, .timeout = 120);

#define JOB_BODY                                                                               \
    "{\"name\":\"mnist\",\"image\":\"native\",\"datasets\":[\"mnist\"],\"workspace\":\"ws\","  \
    "\"code_path\":\"bin/train\",\"args\":[\"--hidden\",\"256\"],\"epochs\":3,\"lr\":0.05,"   \
    "\"batch_size\":64,\"worker_spec\":\"cpu-small\",\"worker_count\":4,"                      \
    "\"workers_per_node\":2,\"max_runtime_seconds\":5400,\"max_retries\":2,"                    \
    "\"env\":{\"OMP_NUM_THREADS\":\"1\"}}"

static void make_volumes(const char *tok)
{
    th_resp r = th_create(&d, "/v1/workspaces", tok, "{\"name\":\"ws\"}");
    cr_expect_str_eq(r.location, "/v1/workspaces/ws");
    th_free(&r);
    const char prog[] = "#!/bin/sh\necho hello\n";
    r = th_req(&d, "PUT", "/v1/workspaces/ws/files/bin/train?mode=755", tok,
               "application/octet-stream", prog, sizeof prog - 1, NULL);
    cr_assert_eq(r.status, 201, "%s", r.body);
    cr_expect_eq(th_num(&r, "size"), sizeof prog - 1);
    cr_expect_str_eq(th_str(&r, "mode"), "755");
    th_free(&r);
    th_must(th_post(&d, "/v1/datasets", tok, "{\"name\":\"mnist\"}"), 201);
    th_must(th_put_file(&d, "/v1/datasets/mnist/files/raw/train-images-idx3-ubyte", tok, "IDX", 3), 201);
}

Test(api_flow, tenant_user_token_and_whoami)
{
    char tok[80];
    long uid = th_user(&d, "acme", "alice", "member", tok);
    th_resp r = th_get(&d, "/v1/whoami", tok);
    cr_assert_eq(r.status, 200);
    cr_expect_str_eq(th_str(&r, "user"), "alice");
    cr_expect_str_eq(th_str(&r, "tenant"), "acme");
    cr_expect_str_eq(th_str(&r, "role"), "member");
    cr_expect_eq((long)th_num(&r, "user_id"), uid);
    th_free(&r);

    r = th_get(&d, "/v1/tenants", TH_ADMIN);
    cr_assert_eq(r.status, 200);
    cr_expect_eq(th_items(&r), 1);
    th_free(&r);
    r = th_get(&d, "/v1/tenants/acme/users", tok);
    cr_assert_eq(r.status, 200);
    cr_expect_eq(th_items(&r), 1);
    th_free(&r);

    /* The token is stored only as a hash. */
    char out[256];
    th_db_query(&d,
                th_pg() ? "SELECT count(*) FROM api_tokens WHERE position('coh_'::bytea in hash) > 0"
                        : "SELECT count(*) FROM api_tokens WHERE instr(hash, 'coh_') > 0",
                out, sizeof out);
    cr_expect_str_eq(out, "0\n");
    th_db_query(&d, "SELECT length(hash) FROM api_tokens WHERE id = 2", out, sizeof out);
    cr_expect_str_eq(out, "32\n");
}

Test(api_flow, token_revoke_and_expiry)
{
    char tok[80], path[64];
    long uid = th_user(&d, "acme", "bob", "member", tok);
    snprintf(path, sizeof path, "/v1/users/%ld/tokens", uid);
    th_resp r = th_create(&d, path, tok, "{\"name\":\"short\",\"expires_in_seconds\":1}");
    char shortlived[80];
    snprintf(shortlived, sizeof shortlived, "%s", th_str(&r, "token"));
    cr_expect_eq(strlen(shortlived), 68);
    th_free(&r);
    th_expect(th_get(&d, "/v1/whoami", shortlived), 200);
    sleep(2);
    r = th_get(&d, "/v1/whoami", shortlived);
    cr_expect_eq(r.status, 401, "an expired token still works");
    th_free(&r);

    r = th_get(&d, path, tok);
    cr_assert_eq(r.status, 200);
    cr_expect_eq(th_items(&r), 2);
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), 0);
    long tid = (long)cJSON_GetObjectItem(first, "id")->valuedouble;
    th_free(&r);
    snprintf(path, sizeof path, "/v1/tokens/%ld", tid);
    th_expect(th_del(&d, path, tok), 204);
    r = th_get(&d, "/v1/whoami", tok);
    cr_expect_eq(r.status, 401, "a revoked token still works");
    th_free(&r);
}

Test(api_flow, job_lifecycle)
{
    char tok[80];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);

    th_resp r = th_create(&d, "/v1/jobs", tok, JOB_BODY);
    cr_expect_str_eq(th_str(&r, "state"), "PENDING");
    cr_expect_str_eq(th_str(&r, "tenant"), "acme");
    cr_expect_str_eq(th_str(&r, "user"), "alice");
    cr_expect_str_eq(th_str(&r, "framework"), "native");
    const cJSON *price = cJSON_GetObjectItem(r.json, "price");
    cr_expect_str_eq(cJSON_GetObjectItem(price, "currency")->valuestring, "USD");
    /* cpu-small costs 5 per worker-hour: each rank is billed on its own,
     * 1.5 h = 7.5 rounded half up to 8, and 4 ranks at most 32. */
    cr_expect_eq(cJSON_GetObjectItem(price, "per_hour")->valuedouble, 20);
    cr_expect_eq(cJSON_GetObjectItem(price, "estimated_max")->valuedouble, 32);
    long id = (long)th_num(&r, "id");
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%ld", id);
    cr_expect_str_eq(r.location, path);
    th_free(&r);

    r = th_get(&d, path, tok);
    cr_assert_eq(r.status, 200);
    cr_expect_str_eq(th_str(&r, "name"), "mnist");
    cr_expect_str_eq(th_str(&r, "code_path"), "bin/train");
    cr_expect_eq(th_num(&r, "worker_count"), 4);
    cr_expect_eq(th_num(&r, "workers_per_node"), 2);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "env"), "OMP_NUM_THREADS")
                         ->valuestring,
                     "1");
    th_free(&r);

    r = th_get(&d, "/v1/jobs?state=PENDING", tok);
    cr_expect_eq(th_items(&r), 1);
    th_free(&r);
    r = th_get(&d, "/v1/jobs?state=RUNNING", tok);
    cr_expect_eq(th_items(&r), 0);
    th_free(&r);
    r = th_get(&d, "/v1/jobs?name=mnist", tok);
    cr_expect_eq(th_items(&r), 1);
    th_free(&r);

    /* A pending job cannot be deleted; cancel it first. */
    th_expect(th_del(&d, path, tok), 409);
    snprintf(path, sizeof path, "/v1/jobs/%ld/cancel", id);
    r = th_post(&d, path, tok, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(th_str(&r, "state"), "CANCELLED");
    th_free(&r);
    r = th_post(&d, path, tok, NULL);
    cr_expect_eq(r.status, 409, "cancelling twice: %s", r.body);
    th_free(&r);

    snprintf(path, sizeof path, "/v1/jobs/%ld/events", id);
    r = th_get(&d, path, tok);
    cr_assert_eq(r.status, 200);
    cr_assert_eq(th_items(&r), 2);
    const cJSON *items = cJSON_GetObjectItem(r.json, "items");
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 0), "to")->valuestring,
                     "PENDING");
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 1), "to")->valuestring,
                     "CANCELLED");
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 1), "from")->valuestring,
                     "PENDING");
    th_free(&r);

    snprintf(path, sizeof path, "/v1/jobs/%ld", id);
    th_expect(th_del(&d, path, tok), 204);
    th_expect(th_get(&d, path, tok), 404);
    char out[64];
    th_db_query(&d, "SELECT count(*) FROM job_events", out, sizeof out);
    cr_expect_str_eq(out, "0\n", "events outlived their job");
    /* A deleted job's id is never handed out again. */
    r = th_create(&d, "/v1/jobs", tok, JOB_BODY);
    cr_expect_gt((long)th_num(&r, "id"), id, "job id %ld reused", id);
    th_free(&r);
}

Test(api_flow, files_roundtrip_and_listing)
{
    char tok[80];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    th_resp r = th_get(&d, "/v1/workspaces/ws/files/bin/train", tok);
    cr_assert_eq(r.status, 200);
    cr_expect_str_eq(r.body, "#!/bin/sh\necho hello\n");
    th_free(&r);
    /* Overwrite keeps one file, whole. */
    th_expect(th_put_file(&d, "/v1/workspaces/ws/files/bin/train", tok, "v2", 2), 201);
    r = th_get(&d, "/v1/workspaces/ws/files/bin/train", tok);
    cr_expect_str_eq(r.body, "v2");
    th_free(&r);
    for (int i = 0; i < 5; i++) {
        char p[80];
        snprintf(p, sizeof p, "/v1/workspaces/ws/files/data/f%d.txt", i);
        th_expect(th_put_file(&d, p, tok, "x", 1), 201);
    }
    r = th_get(&d, "/v1/workspaces/ws/files?limit=4", tok);
    cr_assert_eq(r.status, 200);
    cr_expect_eq(th_items(&r), 4);
    char cursor[256];
    snprintf(cursor, sizeof cursor, "%s", th_str(&r, "next_cursor"));
    cr_expect_str_eq(cursor, "data/f2.txt"); /* bin/train, data/f0..f2 */
    th_free(&r);
    char p[400];
    snprintf(p, sizeof p, "/v1/workspaces/ws/files?limit=4&cursor=%s", cursor);
    r = th_get(&d, p, tok);
    cr_expect_eq(th_items(&r), 2, "%s", r.body); /* data/f3.txt, data/f4.txt */
    th_free(&r);
    th_expect(th_del(&d, "/v1/workspaces/ws/files/data/f0.txt", tok), 204);
    th_expect(th_get(&d, "/v1/workspaces/ws/files/data/f0.txt", tok), 404);
    /* With their SHA-256 sums on asking (what cohort's uploads compare). */
    r = th_get(&d, "/v1/workspaces/ws/files?prefix=bin/&sha256=true", tok);
    cr_assert_eq(r.status, 200, "%s", r.body);
    uint8_t sum[UTIL_SHA256_LEN];
    char hex[2 * UTIL_SHA256_LEN + 1];
    util_sha256("v2", 2, sum);
    util_hex(sum, sizeof sum, hex);
    cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), 0);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(first, "sha256")), hex, "%s", r.body);
    cr_expect_eq(th_num(&r, "sha256_skipped"), 0, "%s", r.body);
    th_free(&r);
    r = th_get(&d, "/v1/workspaces/ws/files?prefix=bin/", tok);
    cr_expect(!strstr(r.body, "sha256"), "sums unasked: %s", r.body);
    th_free(&r);
    th_expect_error(th_get(&d, "/v1/workspaces/ws/files?sha256=yes", tok), 400, "invalid_value",
                    "sha256");

    /* A sealed dataset takes no more writes. */
    th_expect(th_post(&d, "/v1/datasets/mnist/seal", tok, NULL), 200);
    th_expect_error(th_put_file(&d, "/v1/datasets/mnist/files/more", tok, "x", 1), 409, "sealed",
                    NULL);

    /* Deleting a workspace removes its files from disk. */
    th_expect(th_del(&d, "/v1/workspaces/ws", tok), 204);
    th_expect(th_post(&d, "/v1/workspaces", tok, "{\"name\":\"ws\"}"), 201);
    r = th_get(&d, "/v1/workspaces/ws/files", tok);
    cr_expect_eq(th_items(&r), 0, "a new workspace sees an old one's files: %s", r.body);
    th_free(&r);
}

Test(api_flow, idempotent_submit)
{
    char tok[80];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    th_resp a = th_req(&d, "POST", "/v1/jobs", tok, NULL, JOB_BODY, strlen(JOB_BODY),
                       "Idempotency-Key: run-42");
    cr_assert_eq(a.status, 201, "%s", a.body);
    th_resp b = th_req(&d, "POST", "/v1/jobs", tok, NULL, JOB_BODY, strlen(JOB_BODY),
                       "Idempotency-Key: run-42");
    cr_assert_eq(b.status, 201, "%s", b.body);
    cr_expect_eq(th_num(&a, "id"), th_num(&b, "id"), "the same key made two jobs");
    cr_expect(b.replayed);
    const char other[] = "{\"name\":\"other\",\"image\":\"native\",\"workspace\":\"ws\","
                         "\"code_path\":\"bin/train\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                         "\"worker_spec\":\"cpu-small\",\"worker_count\":1}";
    th_resp c = th_req(&d, "POST", "/v1/jobs", tok, NULL, other, strlen(other),
                       "Idempotency-Key: run-42");
    cr_expect_eq(c.status, 409, "%s", c.body);
    th_resp l = th_get(&d, "/v1/jobs", tok);
    cr_expect_eq(th_items(&l), 1);
    th_free(&a);
    th_free(&b);
    th_free(&c);
    th_free(&l);
}

/* What a write answered holds the time it stored: key of r (which it frees)
 * is the same in a fresh GET of path. */
static void expect_same_time(th_resp *r, const char *key, const char *path)
{
    char answered[40];
    snprintf(answered, sizeof answered, "%s", th_str(r, key));
    th_free(r);
    th_resp g = th_get(&d, path, TH_ADMIN);
    cr_expect(answered[0], "no %s in the answer", key);
    cr_expect_str_eq(th_str(&g, key), answered, "%s of %s: stored %s, answered %s", key, path,
                     th_str(&g, key), answered);
    th_free(&g);
}

Test(api_flow, job_list_pagination)
{
    char tok[80];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    for (int i = 0; i < 7; i++) {
        th_must(th_post(&d, "/v1/jobs", tok, JOB_BODY), 201);
    }
    int seen = 0, pages = 0;
    char path[128] = "/v1/jobs?limit=3";
    double last = 1e18;
    for (;;) {
        th_resp r = th_get(&d, path, tok);
        cr_assert_eq(r.status, 200);
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(r.json, "items"))
        {
            double id = cJSON_GetObjectItem(it, "id")->valuedouble;
            cr_expect_lt(id, last, "pages overlap or are out of order");
            last = id;
            seen++;
        }
        pages++;
        const cJSON *next = cJSON_GetObjectItem(r.json, "next_cursor");
        if (!cJSON_IsString(next)) {
            th_free(&r);
            break;
        }
        snprintf(path, sizeof path, "/v1/jobs?limit=3&cursor=%s", next->valuestring);
        th_free(&r);
    }
    cr_expect_eq(seen, 7);
    cr_expect_eq(pages, 3);
    th_resp r = th_get(&d, "/v1/jobs?limit=201", tok);
    cr_expect_eq(r.status, 400);
    th_free(&r);
}

Test(api_flow, catalog_and_health)
{
    th_resp r = th_get(&d, "/healthz", NULL);
    cr_expect_eq(r.status, 200);
    th_free(&r);
    char tok[80];
    th_user(&d, "acme", "alice", "viewer", tok);
    r = th_get(&d, "/v1/worker-specs", tok);
    cr_assert_eq(r.status, 200);
    cr_expect_geq(th_items(&r), 4);
    th_free(&r);
    /* The built-in images, each a reference served by the node's default
     * registry, none with credentials. */
    r = th_get(&d, "/v1/images", tok);
    cr_expect_eq(th_items(&r), 4, "%s", r.body);
    cr_expect(strstr(r.body, "\"name\":\"pytorch\",\"reference\":\"cohort/pytorch:bookworm\"") &&
                  strstr(r.body, "\"name\":\"cohort\",\"reference\":\"cohort/cohort:bookworm\"") &&
                  !strstr(r.body, "\"has_credentials\":true"),
              "%s", r.body);
    th_free(&r);
    th_expect(th_post(&d, "/v1/worker-specs", TH_ADMIN,
                      "{\"name\":\"a100\",\"cpus\":12,\"memory_mb\":98304,\"gpus\":1,"
                      "\"gpu_type\":\"a100\",\"price_per_hour\":310,\"currency\":\"EUR\"}"),
              201);
    r = th_req(&d, "PUT", "/v1/worker-specs/a100", TH_ADMIN, NULL, "{\"price_per_hour\":290}",
               22, NULL);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(th_num(&r, "price_per_hour"), 290);
    cr_expect_eq(th_num(&r, "cpus"), 12);
    expect_same_time(&r, "updated_at", "/v1/worker-specs/a100");
    r = th_create(&d, "/v1/images", TH_ADMIN,
                  "{\"name\":\"jax\",\"reference\":\"registry.example.com:5000/ml/jax:0.4\","
                  "\"framework\":\"native\"}");
    cr_expect_str_eq(th_str(&r, "visibility"), "public");
    cr_expect_str_eq(th_str(&r, "reference"), "registry.example.com:5000/ml/jax:0.4");
    expect_same_time(&r, "created_at", "/v1/images/jax");
    /* /metrics names tenants and their spend: a platform admin's only */
    th_expect(th_get(&d, "/metrics", NULL), 401);
    char member[80];
    th_user(&d, "acme", "mo", "member", member);
    th_expect(th_get(&d, "/metrics", member), 403);
    r = th_get(&d, "/metrics", TH_ADMIN);
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.body, "cohort_http_requests_total{route=\"/v1/images\",status=\"201\"} 1"),
              "%s", r.body);
    cr_expect(strstr(r.body, "cohort_http_request_duration_seconds_bucket{le=\"+Inf\"}"));
    cr_expect(strstr(r.body, "cohort_jobs{state=\"PENDING\"} 0\n"), "%s", r.body);
    cr_expect(strstr(r.body, "cohort_jobs{state=\"CANCELLED\"} 0\n"), "%s", r.body);
    th_free(&r);
}

/* Start-up behaviour, each test with a daemon of its own. */
TestSuite(startup, .timeout = 60);

static int read_file(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t got = fread(out, 1, n - 1, f);
    out[got] = '\0';
    fclose(f);
    return 0;
}

Test(startup, generated_admin_token_is_printed_once_and_saved_0600)
{
    th_daemon g;
    th_start_no_admin(&g, NULL);
    char path[400], tokfile[128], log[4096];
    snprintf(path, sizeof path, "%s/admin-token", g.dir);
    cr_assert_eq(read_file(path, tokfile, sizeof tokfile), 0, "no %s", path);
    tokfile[strcspn(tokfile, "\n")] = '\0';
    cr_expect_eq(strlen(tokfile), 68);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_expect_eq(sb.st_mode & 0777, 0600, "admin-token mode %o", sb.st_mode & 0777);
    th_resp r = th_get(&g, "/v1/whoami", tokfile);
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(th_str(&r, "role"), "platform_admin");
    th_free(&r);
    cr_expect_eq(th_stop(&g), 0);
    snprintf(path, sizeof path, "%s/cohortd.log", g.dir);
    cr_assert_eq(read_file(path, log, sizeof log), 0);
    cr_expect(strstr(log, tokfile) != NULL, "the token was not printed");
    /* A restart prints no token and keeps the same one. */
    th_restart(&g, NULL);
    r = th_get(&g, "/v1/whoami", tokfile);
    cr_expect_eq(r.status, 200);
    th_free(&r);
    cr_expect_eq(th_stop(&g), 0);
    cr_assert_eq(read_file(path, log, sizeof log), 0);
    const char *first = strstr(log, tokfile);
    cr_expect(first && !strstr(first + 1, tokfile), "the token was printed twice");
    th_cleanup(&g);
}

Test(startup, access_log_has_one_line_per_request)
{
    th_daemon g;
    char logpath[128];
    snprintf(logpath, sizeof logpath, "/tmp/cohort-access-%d.log", (int)getpid());
    unlink(logpath);
    const char *args[] = {"--access-log", logpath, NULL};
    th_start(&g, args);
    th_resp r = th_get(&g, "/v1/whoami", TH_ADMIN);
    th_free(&r);
    r = th_get(&g, "/v1/jobs/999", TH_ADMIN);
    th_free(&r);
    r = th_get(&g, "/v1/whoami", NULL);
    th_free(&r);
    cr_expect_eq(th_stop(&g), 0);
    char log[4096];
    cr_assert_eq(read_file(logpath, log, sizeof log), 0);
    /* Lines are written as requests complete, which need not be the order
     * they were sent in: look for each one. */
    int lines = 0, whoami = 0, missing = 0, anonymous = 0;
    char ts[64], method[16], p[256], tenant[64];
    int status;
    long bytes, micros;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        cr_assert_eq(sscanf(line, "%63s %15s %255s %d %ld %ld %63s", ts, method, p, &status, &bytes,
                            &micros, tenant),
                     7, "bad line: %s", line);
        cr_expect_gt(bytes, 0);
        cr_expect_geq(micros, 0);
        cr_expect_str_eq(method, "GET");
        lines++;
        if (!strcmp(p, "/v1/whoami") && status == 200 && !strcmp(tenant, "platform"))
            whoami++;
        else if (!strcmp(p, "/v1/jobs/999") && status == 404 && !strcmp(tenant, "platform"))
            missing++;
        else if (!strcmp(p, "/v1/whoami") && status == 401 && !strcmp(tenant, "-"))
            anonymous++;
        else
            cr_expect_fail("unexpected line: %s", line);
    }
    cr_expect(whoami == 1 && missing == 1 && anonymous == 1, "lines: %d %d %d", whoami, missing,
              anonymous);
    cr_expect_eq(lines, 3);
    unlink(logpath);
    th_cleanup(&g);
}

/* The console's files at every path outside the API; --web-dir picks them. */
Test(api_flow, console_served_outside_the_api)
{
    th_resp r = th_get(&d, "/", NULL);
    cr_assert_eq(r.status, 200);
    cr_expect(strstr(r.body, "<script type=\"module\" src=\"/js/app.js\">") != NULL, "%s", r.body);
    th_free(&r);
    r = th_get(&d, "/jobs/12", NULL); /* a page of the console's router */
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.body, "/js/app.js") != NULL);
    th_free(&r);
    th_expect(th_get(&d, "/js/app.js", NULL), 200);
    static const char *const missing[] = {"/js/nope.js", "/README.md", "/.hidden", "/js/.x.js",
                                          "/v1/nope", "/v1", NULL};
    for (int i = 0; missing[i]; i++) {
        r = th_get(&d, missing[i], NULL);
        cr_expect_eq(r.status, 404, "%s: %ld", missing[i], r.status);
        cr_expect(strstr(r.body, "\"not_found\"") != NULL, "%s: %s", missing[i], r.body);
        th_free(&r);
    }

    /* An explicit web root must exist; 'off' serves none. */
    char out[2048], other[600];
    snprintf(other, sizeof other, "%s/second", d.dir);
    const char *bad[] = {"--listen", "127.0.0.1:0", "--data-dir", other, "--web-dir",
                         "/nonexistent/web", NULL};
    cr_expect_eq(th_cohortd_once(bad, out, sizeof out), 1, "%s", out);
    cr_expect(strstr(out, "/nonexistent/web") != NULL, "%s", out);
    th_stop(&d);
    const char *off[] = {"--web-dir", "off", NULL};
    th_restart(&d, off);
    r = th_get(&d, "/", NULL);
    cr_expect_eq(r.status, 404);
    cr_expect(strstr(r.body, "serves no console") != NULL, "%s", r.body);
    th_free(&r);
    th_expect(th_get(&d, "/healthz", NULL), 200);
}

/* Registers a node of cpus CPUs by the agents' API (no agent runs); its
 * node token into tok[80] unless tok is NULL. */
static void register_node(const char *name, int cpus, char *tok)
{
    th_resp r = th_create(&d, "/v1/nodes/join-tokens", TH_ADMIN, NULL);
    char body[512];
    snprintf(body, sizeof body,
             "{\"join_token\":\"%s\",\"name\":\"%s\",\"address\":\"127.0.0.1\",\"cpus\":%d,"
             "\"memory_mb\":65536,\"port_lo\":40000,\"port_hi\":40099}",
             th_str(&r, "token"), name, cpus);
    th_free(&r);
    r = th_create(&d, "/v1/agent/register", NULL, body);
    if (tok)
        snprintf(tok, 80, "%s", th_str(&r, "node_token"));
    th_free(&r);
}

/*
 * A job no registered node could ever hold is refused (422 never_fits),
 * and a node that joins right after is counted at once: the submit path
 * keeps the nodes' capacities for a second, but a "never" is checked on a
 * fresh read.
 */
Test(api_flow, never_fits_is_refused_and_a_new_node_counts_at_once)
{
    char tok[80];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    const char big[] = "{\"name\":\"big\",\"image\":\"native\",\"workspace\":\"ws\","
                       "\"code_path\":\"bin/train\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                       "\"worker_spec\":\"cpu-large\",\"worker_count\":1}";
    register_node("small", 2, NULL);
    th_resp r = th_post(&d, "/v1/jobs", tok, big);
    cr_assert_eq(r.status, 422, "%s", r.body);
    cr_expect(strstr(r.body, "never_fits") && strstr(r.body, "can never fit"), "%s", r.body);
    th_free(&r);
    register_node("large", 16, NULL);
    th_must(th_post(&d, "/v1/jobs", tok, big), 201);
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One long poll of the desired state, as an agent sends it. */
struct poll {
    const char *tok;
    char path[128];
    long long ms; /* how long it took */
    th_resp r;
};

static void *poll_run(void *arg)
{
    struct poll *p = arg;
    long long t0 = mono_ms();
    p->r = th_get(&d, p->path, p->tok);
    p->ms = mono_ms() - t0;
    return NULL;
}

static void poll_start(struct poll *p, pthread_t *t, const char *tok, int wait)
{
    p->tok = tok;
    th_resp now = th_get(&d, "/v1/agent/desired", tok);
    cr_assert_eq(now.status, 200, "%s", now.body);
    snprintf(p->path, sizeof p->path, "/v1/agent/desired?version=%s&wait=%d",
             th_str(&now, "version"), wait);
    th_free(&now);
    cr_assert_eq(pthread_create(t, NULL, poll_run, p), 0);
}

/*
 * A long poll wakes when its own node's desired state changes, and a
 * change on another node leaves it waiting: placing a job on one node of
 * two answers that node's agent at once and the other's only at its
 * deadline, with its version as it was.
 */
Test(api_flow, a_placement_wakes_the_long_poll_of_its_node_only)
{
    char tok[80], small[80], large[80];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    register_node("small", 2, small);
    register_node("large", 16, large);
    struct poll ps = {0}, pl = {0};
    pthread_t ts, tl;
    poll_start(&ps, &ts, small, 2);
    poll_start(&pl, &tl, large, 20);
    usleep(300 * 1000); /* both parked */
    th_submit(&d, tok,
              "{\"name\":\"big\",\"image\":\"native\",\"workspace\":\"ws\","
              "\"code_path\":\"bin/train\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
              "\"worker_spec\":\"cpu-large\",\"worker_count\":1}");
    pthread_join(tl, NULL);
    cr_expect_eq(pl.r.status, 200, "%s", pl.r.body);
    cr_expect_lt(pl.ms, 10000, "the large node's poll waited %lld ms", pl.ms);
    cr_expect(strstr(pl.r.body, "\"rank\"") != NULL, "no worker: %s", pl.r.body);
    pthread_join(ts, NULL);
    cr_expect_eq(ps.r.status, 200, "%s", ps.r.body);
    cr_expect_geq(ps.ms, 1900, "the small node's poll was woken after %lld ms", ps.ms);
    char want[64];
    snprintf(want, sizeof want, "version=%s&", th_str(&ps.r, "version"));
    cr_expect(strstr(ps.path, want) != NULL, "version moved: %s after %s", ps.r.body, ps.path);
    cr_expect(strstr(ps.r.body, "\"workers\":[]") != NULL, "%s", ps.r.body);
    th_free(&ps.r);
    th_free(&pl.r);
}

/* Every launch spec node token tok is sent passes the one check the agent
 * makes (lib/launch_spec.h); how many there were. */
static int desired_specs_pass(const char *tok)
{
    char why[256];
    cJSON *j = th_get_json(&d, "/v1/agent/desired", tok);
    const cJSON *w;
    int n = 0;
    cJSON_ArrayForEach(w, cJSON_GetObjectItem(j, "workers"))
    {
        why[0] = '\0';
        cr_expect_eq(launch_spec_check(w, why, sizeof why), 0, "refused: %s", why);
        n++;
    }
    cJSON_Delete(j);
    return n;
}

/*
 * What cohortd sends an agent is what the agent takes: every launch spec of
 * a native job of 4 ranks, 2 a node, with datasets, arguments and variables
 * of its own, and of a TensorFlow job (TF_CONFIG), passes the agent's check.
 */
Test(api_flow, the_launch_specs_cohortd_writes_pass_the_agents_check)
{
    char tok[80], n1[80], n2[80], seen[16];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    register_node("a", 8, n1);
    register_node("b", 8, n2);
    long a = th_submit(&d, tok,
                       "{\"name\":\"four\",\"image\":\"native\",\"workspace\":\"ws\","
                       "\"datasets\":[\"mnist\"],\"code_path\":\"bin/train\",\"epochs\":3,"
                       "\"lr\":1e-05,\"batch_size\":64,\"args\":[\"--x\",\"y z\"],"
                       "\"env\":{\"MINE\":\"1\"},\"worker_spec\":\"cpu-small\","
                       "\"worker_count\":4,\"workers_per_node\":2}");
    long b = th_submit(&d, tok,
                       "{\"name\":\"tf\",\"image\":\"tensorflow\",\"workspace\":\"ws\","
                       "\"code_path\":\"bin/train\",\"epochs\":1,\"lr\":0.5,\"batch_size\":8,"
                       "\"worker_spec\":\"cpu-small\",\"worker_count\":2}");
    cr_assert(th_wait_state(&d, tok, a, "STARTING", 10000, seen), "job a is %s", seen);
    cr_assert(th_wait_state(&d, tok, b, "STARTING", 10000, seen), "job b is %s", seen);
    cr_expect_eq(desired_specs_pass(n1) + desired_specs_pass(n2), 6);
}

/* Whether the desired state answered to node token tok says drained. */
static int desired_drained(const char *tok)
{
    cJSON *j = th_get_json(&d, "/v1/agent/desired", tok);
    int on = cJSON_IsTrue(cJSON_GetObjectItem(j, "drained"));
    cJSON_Delete(j);
    return on;
}

/*
 * An agent's requests find their node through a cache of node tokens; a
 * drain or undrain is seen by the node's very next request all the same,
 * and its long poll is woken by it.
 */
Test(api_flow, a_drain_reaches_the_nodes_agent_at_once)
{
    char tok[80];
    register_node("n1", 4, tok);
    cr_assert_eq(desired_drained(tok), 0); /* looked up, and cached */
    struct poll p = {0};
    pthread_t t;
    poll_start(&p, &t, tok, 20);
    usleep(300 * 1000);
    th_must(th_post(&d, "/v1/nodes/1/drain", TH_ADMIN, NULL), 200);
    pthread_join(t, NULL);
    cr_expect_lt(p.ms, 10000, "the poll was not woken by the drain (%lld ms)", p.ms);
    cr_expect(strstr(p.r.body, "\"drained\":true") != NULL, "%s", p.r.body);
    th_free(&p.r);
    cr_expect_eq(desired_drained(tok), 1);
    th_must(th_post(&d, "/v1/nodes/1/undrain", TH_ADMIN, NULL), 200);
    cr_expect_eq(desired_drained(tok), 0);
}

/* Registers node name at address as an agent of network net ("job" or
 * "host") with 4 CPUs; its node token into tok[80]. */
static void register_at(const char *name, const char *address, const char *net, char *tok)
{
    th_resp r = th_create(&d, "/v1/nodes/join-tokens", TH_ADMIN, NULL);
    char body[512];
    snprintf(body, sizeof body,
             "{\"join_token\":\"%s\",\"name\":\"%s\",\"address\":\"%s\",\"cpus\":4,"
             "\"memory_mb\":65536,\"port_lo\":40000,\"port_hi\":40099,\"network\":\"%s\"}",
             th_str(&r, "token"), name, address, net);
    th_free(&r);
    r = th_create(&d, "/v1/agent/register", NULL, body);
    cr_assert_eq(r.status, 201, "%s", r.body);
    snprintf(tok, 80, "%s", th_str(&r, "node_token"));
    th_free(&r);
}

/* The one worker in node token tok's desired state (the caller frees). */
static cJSON *desired_worker(const char *tok)
{
    for (int i = 0; i < 100; i++) {
        cJSON *j = th_get_json(&d, "/v1/agent/desired", tok);
        cJSON *w = cJSON_DetachItemFromArray(cJSON_GetObjectItem(j, "workers"), 0);
        cJSON_Delete(j);
        if (w)
            return w;
        usleep(50 * 1000);
    }
    cr_assert_fail("no worker was placed on the node");
    return NULL;
}

static const char pair_job[] =
    "{\"name\":\"pair\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"bin/train\","
    "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":2,"
    "\"workers_per_node\":1}";

/*
 * A job over two nodes whose agents give jobs networks of their own gets
 * one overlay: each agent is told the VNI, its own overlay address and the
 * other node (by its own address), and MASTER_ADDR is rank 0's node on it.
 * Over nodes that keep the host's network, no overlay and the node's
 * address, as before.
 */
Test(api_flow, a_job_over_job_network_nodes_gets_one_overlay)
{
    char tok[80], a[80], b[80], h1[80], h2[80];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    register_at("a", "192.0.2.10", "job", a);
    register_at("b", "192.0.2.11", "job", b);
    th_must(th_post(&d, "/v1/jobs", tok, pair_job), 201);
    cJSON *w[2] = {desired_worker(a), desired_worker(b)};
    long vni = -1;
    for (int i = 0; i < 2; i++) {
        cJSON *net = cJSON_GetObjectItem(w[i], "job_network");
        cr_assert_not_null(net, "worker %d has no job_network", i);
        long me = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(w[i], "rank"));
        char want[40];
        snprintf(want, sizeof want, "10.77.0.%ld", me + 1);
        cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(net, "address")), want);
        cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(net, "local")),
                         i ? "192.0.2.11" : "192.0.2.10");
        cJSON *peers = cJSON_GetObjectItem(net, "peers");
        cr_assert_eq(cJSON_GetArraySize(peers), 1);
        cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(peers, 0),
                                                                   "node")),
                         i ? "192.0.2.10" : "192.0.2.11");
        long v = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(net, "vni"));
        cr_expect(v > 0 && (vni < 0 || v == vni), "VNI %ld, then %ld", vni, v);
        vni = v;
        cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(
                             cJSON_GetObjectItem(w[i], "env"), "MASTER_ADDR")),
                         "10.77.0.1");
        cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(
                             cJSON_GetObjectItem(w[i], "env"), "GLOO_SOCKET_IFNAME")),
                         "eth0", "Gloo would take the loopback");
        cJSON_Delete(w[i]);
    }
    /* Two nodes of the host's network: the node's own address, no overlay. */
    th_must(th_post(&d, "/v1/nodes/1/drain", TH_ADMIN, NULL), 200);
    th_must(th_post(&d, "/v1/nodes/2/drain", TH_ADMIN, NULL), 200);
    register_at("h1", "192.0.2.20", "host", h1);
    register_at("h2", "192.0.2.21", "host", h2);
    th_must(th_post(&d, "/v1/jobs", tok, pair_job), 201);
    cJSON *x = desired_worker(h1);
    cr_expect_null(cJSON_GetObjectItem(x, "job_network"));
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(x, "env"),
                                                             "MASTER_ADDR"));
    cr_expect(m && (!strcmp(m, "192.0.2.20") || !strcmp(m, "192.0.2.21")), "MASTER_ADDR %s", m);
    cJSON_Delete(x);
    th_resp r = th_get(&d, "/v1/nodes/3", TH_ADMIN);
    cr_expect_str_eq(th_str(&r, "network"), "host");
    th_free(&r);
    r = th_create(&d, "/v1/nodes/join-tokens", TH_ADMIN, NULL);
    char body[512];
    snprintf(body, sizeof body,
             "{\"join_token\":\"%s\",\"name\":\"x\",\"address\":\"192.0.2.9\",\"cpus\":4,"
             "\"memory_mb\":65536,\"port_lo\":40000,\"port_hi\":40099,\"network\":\"vxlan\"}",
             th_str(&r, "token"));
    th_free(&r);
    th_expect(th_post(&d, "/v1/agent/register", NULL, body), 422);
}

/* The heartbeat of a worker of node tok: running, having run digest. */
static void beat_digest(const char *tok, long worker, char hex)
{
    char body[256], digest[72] = "sha256:";
    memset(digest + 7, hex, 64);
    digest[71] = '\0';
    snprintf(body, sizeof body,
             "{\"workers\":[{\"id\":%ld,\"state\":\"running\",\"image_digest\":\"%s\"}]}", worker,
             digest);
    th_must(th_post(&d, "/v1/agent/heartbeat", tok, body), 200);
}

/*
 * Ranks of one placement resolve the job's tag at once on their nodes; one
 * that ran another digest than the one the job pinned (the tag moved in
 * between) is failed with the reason, and its attempt with it, rather
 * than training on another image.
 */
Test(api_flow, a_rank_that_ran_another_digest_fails_its_attempt)
{
    char tok[80], a[80], b[80], seen[16];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    register_at("a", "192.0.2.10", "host", a);
    register_at("b", "192.0.2.11", "host", b);
    long id = th_submit(&d, tok, pair_job);
    cJSON *wa = desired_worker(a), *wb = desired_worker(b);
    long ida = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(wa, "id"));
    long idb = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(wb, "id"));
    cJSON_Delete(wa);
    cJSON_Delete(wb);
    beat_digest(a, ida, 'a');
    beat_digest(b, idb, 'b');
    cr_assert(th_wait_state(&d, tok, id, "FAILED", 10000, seen), "job is %s", seen);
    char p[96];
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, tok);
    cr_expect_str_eq(th_str(&r, "image_digest"),
                     "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    cr_expect(strstr(r.body, "the tag moved") != NULL, "%s", r.body);
    th_free(&r);
}

/* POST /v1/agent/register of node name with join token join: the status,
 * and its node token into tok[80] when 201. */
static int register_with(const char *join, const char *name, char *tok)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"join_token\":\"%s\",\"name\":\"%s\",\"address\":\"192.0.2.30\",\"cpus\":4,"
             "\"memory_mb\":65536,\"port_lo\":40000,\"port_hi\":40099}",
             join, name);
    th_resp r = th_post(&d, "/v1/agent/register", NULL, body);
    int st = r.status;
    if (st == 201 && tok)
        snprintf(tok, 80, "%s", th_str(&r, "node_token"));
    th_free(&r);
    return st;
}

/* A join token made with body (NULL: the defaults) into join[80]; its id. */
static long join_token(const char *body, char *join)
{
    th_resp r = th_create(&d, "/v1/nodes/join-tokens", TH_ADMIN, body);
    snprintf(join, 80, "%s", th_str(&r, "token"));
    long id = (long)th_num(&r, "id");
    th_free(&r);
    return id;
}

/*
 * Trust in nodes can be withdrawn: a join token admits one node unless
 * made for more, expires (an hour unless told), and can be revoked; the
 * list says which is which.  A revoked node's token is refused at once,
 * its worker is lost (and its job goes on as after a lost node), and its
 * row stays with revoked_at.
 */
Test(api_flow, join_tokens_expire_are_used_up_and_nodes_are_revoked)
{
    char j1[80], j2[80], j3[80], j4[80], n1[80], tok[80], seen[16], p[96];
    th_resp r = th_create(&d, "/v1/nodes/join-tokens", TH_ADMIN, NULL);
    long long left = th_ms_of(th_str(&r, "expires_at")) - (long long)time(NULL) * 1000;
    cr_expect(left > 3590 * 1000LL && left <= 3601 * 1000LL, "expires in %lld ms", left);
    cr_expect_eq(th_num(&r, "uses"), 1, "%s", r.body);
    th_free(&r);
    /* one use by default */
    join_token(NULL, j1);
    cr_expect_eq(register_with(j1, "a", n1), 201);
    cr_expect_eq(register_with(j1, "b", NULL), 401, "a one-use token admitted a second node");
    /* two uses */
    join_token("{\"uses\":2}", j2);
    cr_expect_eq(register_with(j2, "c", NULL), 201);
    cr_expect_eq(register_with(j2, "d", NULL), 201);
    cr_expect_eq(register_with(j2, "e", NULL), 401);
    /* expired */
    join_token("{\"expires_in_seconds\":1}", j3);
    usleep(1100 * 1000);
    cr_expect_eq(register_with(j3, "f", NULL), 401, "an expired token admitted a node");
    /* revoked */
    long id4 = join_token("{\"uses\":0}", j4);
    snprintf(p, sizeof p, "/v1/nodes/join-tokens/%ld", id4);
    th_must(th_req(&d, "DELETE", p, TH_ADMIN, NULL, NULL, 0, NULL), 200);
    cr_expect_eq(register_with(j4, "g", NULL), 401, "a revoked token admitted a node");
    th_expect(th_req(&d, "DELETE", p, TH_ADMIN, NULL, NULL, 0, NULL), 404);
    r = th_get(&d, "/v1/nodes/join-tokens", TH_ADMIN);
    cr_assert_eq(r.status, 200, "%s", r.body);
    static const char *const want[] = {"used", "used", "expired", "revoked"};
    const cJSON *items = cJSON_GetObjectItem(r.json, "items");
    cr_assert_eq(cJSON_GetArraySize(items), 5, "%s", r.body); /* the defaults' one too */
    for (int i = 0; i < 4; i++) {
        const cJSON *t = cJSON_GetArrayItem(items, i + 1);
        cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(t, "state")), want[i],
                         "token %d: %s", i + 1, r.body);
    }
    cr_expect(strstr(r.body, "\"token\"") == NULL, "a listing shows a secret: %s", r.body);
    th_free(&r);
    th_user(&d, "acme", "alice", "member", tok);
    th_expect(th_get(&d, "/v1/nodes/join-tokens", tok), 403);

    /* Node "a" runs a worker, then is revoked. */
    make_volumes(tok);
    th_must(th_post(&d, "/v1/nodes/2/drain", TH_ADMIN, NULL), 200); /* c and d: not there */
    th_must(th_post(&d, "/v1/nodes/3/drain", TH_ADMIN, NULL), 200);
    long job = th_submit(&d, tok,
                         "{\"name\":\"w\",\"image\":\"native\",\"workspace\":\"ws\","
                         "\"code_path\":\"bin/train\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                         "\"worker_spec\":\"cpu-small\",\"worker_count\":1}");
    cr_assert(th_wait_state(&d, tok, job, "STARTING", 10000, seen) ||
                  th_wait_state(&d, tok, job, "RUNNING", 1000, seen),
              "job is %s", seen);
    th_must(th_post(&d, "/v1/agent/heartbeat", n1, "{\"workers\":[]}"), 200);
    r = th_req(&d, "DELETE", "/v1/nodes/1", TH_ADMIN, NULL, NULL, 0, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect(th_str(&r, "revoked_at") != NULL, "%s", r.body);
    cr_expect_str_eq(th_str(&r, "state"), "down");
    th_free(&r);
    th_expect(th_post(&d, "/v1/agent/heartbeat", n1, "{\"workers\":[]}"), 401);
    th_expect(th_get(&d, "/v1/agent/desired", n1), 401);
    cr_expect(th_wait_state(&d, tok, job, "FAILED", 10000, seen), "job is %s", seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld", job);
    r = th_get(&d, p, tok);
    cr_expect(strstr(r.body, "node revoked") != NULL, "%s", r.body);
    th_free(&r);
    r = th_get(&d, "/v1/nodes/1", TH_ADMIN);
    cr_expect_eq(r.status, 200, "the revoked node's row is gone");
    cr_expect_eq(th_num(&r, "join_token_id"), 2, "%s", r.body);
    th_free(&r);
    /* what is revoked stays so: a second revoke, a drain and an undrain
     * are refused, saying so (a probe's undrain was taken) */
    th_expect_error(th_req(&d, "DELETE", "/v1/nodes/1", TH_ADMIN, NULL, NULL, 0, NULL), 409,
                    "conflict", NULL);
    th_expect_error(th_post(&d, "/v1/nodes/1/undrain", TH_ADMIN, NULL), 409, "conflict", NULL);
    th_expect_error(th_post(&d, "/v1/nodes/1/drain", TH_ADMIN, NULL), 409, "conflict", NULL);
    th_expect(th_req(&d, "DELETE", "/v1/nodes/1", tok, NULL, NULL, 0, NULL), 403);
    th_expect(th_req(&d, "DELETE", "/v1/nodes/77", TH_ADMIN, NULL, NULL, 0, NULL), 404);
}

/* A heartbeat by node token tok: the new token it was sent into out[80]
 * (or "" when none); the status. */
static long beat(const char *tok, char *out)
{
    th_resp r = th_post(&d, "/v1/agent/heartbeat", tok, "{\"workers\":[]}");
    long st = r.status;
    const char *t = st == 200 ? th_str(&r, "node_token") : NULL;
    snprintf(out, 80, "%s", t ? t : "");
    th_free(&r);
    return st;
}

/* Node 1's token_rotation: "" for none. */
static void rotation_of_node1(char *out, size_t n)
{
    th_resp r = th_get(&d, "/v1/nodes/1", TH_ADMIN);
    const char *v = th_str(&r, "token_rotation");
    snprintf(out, n, "%s", v ? v : "");
    th_free(&r);
}

/*
 * A node token is rotated when a platform admin asks, or when it is older
 * than --node-token-rotate: the next heartbeat's answer carries a new one.
 * The old one works until the new one is first used, then is refused at
 * once; an answer lost on the way (the old token used again) gets another
 * new token and the lost one is forgotten.  A revoked node cannot ask.
 */
Test(api_flow, a_node_token_is_rotated_and_the_old_one_refused_on_first_use)
{
    char join[80], t1[80], t2[80], t3[80], t4[80], got[80], state[16], member[80];
    join_token(NULL, join);
    cr_assert_eq(register_with(join, "a", t1), 201);
    cr_expect_eq(beat(t1, got), 200);
    cr_expect_str_eq(got, "", "a fresh token was rotated unasked");
    rotation_of_node1(state, sizeof state);
    cr_expect_str_eq(state, "");
    th_user(&d, "acme", "alice", "member", member);
    th_expect(th_post(&d, "/v1/nodes/1/rotate-token", member, NULL), 403);
    th_expect(th_post(&d, "/v1/nodes/9/rotate-token", TH_ADMIN, NULL), 404);
    th_resp r = th_post(&d, "/v1/nodes/1/rotate-token", TH_ADMIN, NULL);
    cr_assert_eq(r.status, 202, "%s", r.body);
    cr_expect_str_eq(th_str(&r, "token_rotation"), "asked");
    th_free(&r);

    /* sent, and the answer lost: the old token is still the node's */
    cr_expect_eq(beat(t1, t2), 200);
    cr_assert_eq(strlen(t2), strlen(t1), "no new token was sent");
    cr_expect_str_neq(t2, t1);
    rotation_of_node1(state, sizeof state);
    cr_expect_str_eq(state, "sent");
    cr_expect_eq(beat(t1, t3), 200, "the old token was refused before the new one was used");
    cr_assert_eq(strlen(t3), strlen(t1), "a lost answer's token was not sent again");
    cr_expect_str_neq(t3, t2);
    /* (t2, sent before t3, is never used by an agent that lost it: its use
     * revokes the node, as a_token_used_again_after_its_rotation shows) */

    /* the first use of the newest one makes it the node's */
    cr_expect_eq(beat(t3, got), 200);
    cr_expect_str_eq(got, "", "a rotation went on after its token was used");
    th_expect(th_get(&d, "/v1/agent/desired", t1), 401);
    cr_expect_eq(beat(t1, got), 401, "the old token works after the new one was used");
    th_expect(th_get(&d, "/v1/agent/desired", t3), 200);
    rotation_of_node1(state, sizeof state);
    cr_expect_str_eq(state, "");

    /* by age: a token older than --node-token-rotate is replaced unasked */
    const char *const args[] = {"--node-token-rotate", "1", NULL};
    cr_assert_eq(th_stop(&d), 0);
    th_restart(&d, args);
    usleep(1100 * 1000);
    cr_expect_eq(beat(t3, t4), 200);
    cr_assert_eq(strlen(t4), strlen(t1), "a token past its age was not rotated");
    cr_expect_eq(beat(t4, got), 200);
    cr_expect_eq(beat(t3, got), 401);

    /* a revoked node's token stays refused, and no rotation is asked */
    th_must(th_req(&d, "DELETE", "/v1/nodes/1", TH_ADMIN, NULL, NULL, 0, NULL), 200);
    cr_expect_eq(beat(t4, got), 401);
    th_expect_error(th_post(&d, "/v1/nodes/1/rotate-token", TH_ADMIN, NULL), 409, "conflict",
                    NULL);
}

/* A node registers at a host name or an IP address, nothing else: a
 * probe's node registered at "x\nMASTER_INJECT=1", which would have become
 * other nodes' workers' MASTER_ADDR, and a second's at "127.1" and "0",
 * which the resolver reads as loopback and the wildcard. */
Test(api_flow, a_node_registers_at_a_host_name_or_address_only)
{
    static const char *const bad[] = {"a\\nb", "x\\nMASTER_INJECT=1", "a\\tb", "$(id)", "x=y",
                                      "-oProxyCommand=x", "a:b", "[::1]", "\\u00e9x", "a..b",
                                      "-a.b", "a b", "a/b", "", "127.1", "0x7f.1", "0",
                                      "999.999.999.999", "1.2.3", "123"};
    static const char *const good[] = {"127.0.0.1", "node-1.example", "::1", "fe80::1", "n2",
                                       "10.0.0.7", "gpu7.rack-3"};
    char body[512], join[80], name[16];
    join_token("{\"uses\":0}", join);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(body, sizeof body,
                 "{\"join_token\":\"%s\",\"name\":\"b%zu\",\"address\":\"%s\",\"cpus\":4,"
                 "\"memory_mb\":4096,\"port_lo\":40000,\"port_hi\":40099}",
                 join, i, bad[i]);
        th_expect_error(th_post(&d, "/v1/agent/register", NULL, body), 422, "invalid_value",
                        "address");
    }
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        snprintf(name, sizeof name, "g%zu", i);
        snprintf(body, sizeof body,
                 "{\"join_token\":\"%s\",\"name\":\"%s\",\"address\":\"%s\",\"cpus\":4,"
                 "\"memory_mb\":4096,\"port_lo\":40000,\"port_hi\":40099}",
                 join, name, good[i]);
        th_expect(th_post(&d, "/v1/agent/register", NULL, body), 201);
    }
}

/* A log chunk's offset is decimal digits or refused: "-1", "abc" and a
 * number past 2^63 were each taken as 0, a resend (a probe's). */
Test(api_flow, a_log_chunks_offset_is_a_number_or_refused)
{
    char node[80], p[96];
    static const char *const bad[] = {"-1", "abc", "99999999999999999999", "", "1e3", "+1"};
    register_node("a", 8, node);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(p, sizeof p, "/v1/agent/logs/1?offset=%s", bad[i]);
        th_expect_error(th_req(&d, "PUT", p, node, "application/octet-stream", "x", 1, NULL), 400,
                        "invalid_value", "offset");
    }
    th_expect_error(th_req(&d, "PUT", "/v1/agent/logs/1", node, "application/octet-stream", "x",
                           1, NULL),
                    400, "invalid_value", "offset");
    th_expect(th_req(&d, "PUT", "/v1/agent/logs/1?offset=0", node, "application/octet-stream",
                     "x", 1, NULL),
              404); /* a number: on to the worker, which is not this node's */
}

/* A fresh one-use join token (kept until the next call). */
static const char *join2(void)
{
    static char j[80];
    join_token(NULL, j);
    return j;
}

/* Node 1's revoked_reason into out ("" while it is not revoked). */
static void node1_revoked(char *out, size_t n)
{
    th_resp r = th_get(&d, "/v1/nodes/1", TH_ADMIN);
    snprintf(out, n, "%s", r.status == 200 && th_str(&r, "revoked_at")[0]
                                ? th_str(&r, "revoked_reason")
                                : "");
    th_free(&r);
}

/*
 * A token a rotation replaced, used again once the agent's own requests
 * still on their way are in (5 s), says that two parties hold the node's
 * token: the node is revoked, with why, its worker is lost, and neither
 * token works.  Found by a probe: a stolen token and a rotation took a node
 * over, and the real agent was shut out with nothing to show for it.
 */
Test(api_flow, a_token_used_again_after_its_rotation_revokes_its_node, .timeout = 60)
{
    char join[80], t1[80], t2[80], got[80], why[200], tok[80], seen[16];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    join_token(NULL, join);
    cr_assert_eq(register_with(join, "a", t1), 201);
    long job = th_submit(&d, tok,
                         "{\"name\":\"w\",\"image\":\"native\",\"workspace\":\"ws\","
                         "\"code_path\":\"bin/train\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                         "\"worker_spec\":\"cpu-small\",\"worker_count\":1}");
    cr_assert(th_wait_state(&d, tok, job, "STARTING", 10000, seen), "job is %s", seen);
    th_must(th_post(&d, "/v1/nodes/1/rotate-token", TH_ADMIN, NULL), 202);
    cr_expect_eq(beat(t1, t2), 200);
    cr_assert_eq(strlen(t2), strlen(t1));
    cr_expect_eq(beat(t2, got), 200); /* the new one is the node's now */
    /* at once: a request of its own agent still on its way, refused only */
    cr_expect_eq(beat(t1, got), 401);
    node1_revoked(why, sizeof why);
    cr_expect_str_eq(why, "", "revoked within the grace");
    cr_expect_eq(beat(t2, got), 200);
    usleep(5300 * 1000);
    cr_expect_eq(beat(t1, got), 401);
    node1_revoked(why, sizeof why);
    cr_expect(strstr(why, "two holders") != NULL, "not revoked: '%s'", why);
    cr_expect_eq(beat(t2, got), 401, "the new token works on a revoked node");
    cr_expect(th_wait_state(&d, tok, job, "FAILED", 10000, seen), "job is %s", seen);

    /* Two parties heartbeating with one token while a rotation is asked
     * each get a successor, the later one forgetting the earlier: the
     * forgotten one used (a second probe's race) revokes at once. */
    char u1[80], s1[80], s2[80], why2[200];
    cr_assert_eq(register_with(join2(), "b", u1), 201);
    th_must(th_post(&d, "/v1/nodes/2/rotate-token", TH_ADMIN, NULL), 202);
    cr_expect_eq(beat(u1, s1), 200); /* the agent's */
    cr_expect_eq(beat(u1, s2), 200); /* the thief's, a moment later */
    cr_assert(s1[0] && s2[0] && strcmp(s1, s2), "%s %s", s1, s2);
    cr_expect_eq(beat(s1, got), 401);
    th_resp r = th_get(&d, "/v1/nodes/2", TH_ADMIN);
    snprintf(why2, sizeof why2, "%s", th_str(&r, "revoked_reason"));
    th_free(&r);
    cr_expect(strstr(why2, "two holders") != NULL, "not revoked at once: '%s'", why2);
    cr_expect_eq(beat(s2, got), 401, "the thief's successor works on a revoked node");
}

/* A priority past 1000 is a tier across tenants: a platform admin's only. */
Test(api_flow, only_a_platform_admin_sets_a_tier)
{
    char tok[80], body[512];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    static const char fmt[] =
        "{\"name\":\"p\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"bin/train\","
        "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\","
        "\"worker_count\":1,\"priority\":%d}";
    snprintf(body, sizeof body, fmt, 1000);
    th_must(th_post(&d, "/v1/jobs", tok, body), 201);
    snprintf(body, sizeof body, fmt, 1001);
    th_resp r = th_post(&d, "/v1/jobs", tok, body);
    cr_expect_eq(r.status, 422, "%s", r.body);
    cr_expect(strstr(r.body, "platform admin") != NULL, "%s", r.body);
    th_free(&r);
    /* and on a pending job: the member within its range, the admin a tier */
    th_expect(th_post(&d, "/v1/jobs/1/priority", tok, "{\"priority\":1001}"), 422);
    r = th_post(&d, "/v1/jobs/1/priority", tok, "{\"priority\":-5}");
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(th_num(&r, "priority"), -5);
    th_free(&r);
    r = th_post(&d, "/v1/jobs/1/priority", TH_ADMIN, "{\"priority\":5000}");
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(th_num(&r, "priority"), 5000);
    th_free(&r);
    char other[80];
    th_user(&d, "globex", "bob", "member", other);
    th_expect(th_post(&d, "/v1/jobs/1/priority", other, "{\"priority\":1}"), 404);
    th_must(th_post(&d, "/v1/jobs/1/cancel", tok, NULL), 200);
    th_expect(th_post(&d, "/v1/jobs/1/priority", tok, "{\"priority\":1}"), 409);
}

/* The directory holding name, found under dir: into out; 0 or -1. */
static int find_dir_of(const char *dir, const char *name, char *out, size_t n)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "find '%s' -name '%s' -type f -printf '%%h' -quit", dir, name);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    pclose(p);
    return got > 0 ? 0 : -1;
}

/*
 * An upload cut off by a crash leaves its temporary file: cohortd removes
 * those at its next start (in the background), and only those older than
 * the start.
 */
Test(api_flow, an_upload_cut_by_a_crash_leaves_nothing_after_a_restart)
{
    char tok[80], dir[600], stale[700], late[700];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok); /* bin/train in ws */
    char vol[300];
    snprintf(vol, sizeof vol, "%s/volumes", d.dir);
    cr_assert_eq(find_dir_of(vol, "train", dir, sizeof dir), 0, "no bin/train under %s", vol);
    snprintf(stale, sizeof stale, "%s/.cohort-upload-00112233445566778899aabbccddeeff", dir);
    FILE *f = fopen(stale, "w");
    cr_assert_not_null(f);
    fputs("half a file", f);
    fclose(f);
    struct timespec old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, stale, old, 0), 0);
    th_kill9(&d);
    th_restart(&d, NULL);
    snprintf(late, sizeof late, "%s/.cohort-upload-ffeeddccbbaa99887766554433221100", dir);
    sleep(1); /* this one is newer than the start: an upload in flight */
    f = fopen(late, "w");
    cr_assert_not_null(f);
    fclose(f);
    int gone = 0;
    for (int i = 0; i < 100 && !gone; i++, usleep(50000))
        gone = access(stale, F_OK) != 0;
    cr_expect(gone, "%s is still there", stale);
    cr_expect_eq(access(late, F_OK), 0, "an upload newer than the start was removed");
    th_expect(th_get(&d, "/v1/workspaces/ws/files/bin/train", tok), 200);
}

/* The error code of response r (the caller frees r): into out. */
static void error_code(th_resp *r, char *out, size_t n)
{
    const cJSON *e = cJSON_GetObjectItem(r->json, "error");
    snprintf(out, n, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(e, "code")) ?: "");
}

/* A quote refuses what a create of the same shape refuses, with the same
 * status and code: an unknown spec, a shape no node could ever hold, an
 * estimate past what the platform bills. */
Test(api_flow, a_quote_refuses_what_a_create_refuses)
{
    char tok[80];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    register_node("small", 2, NULL);
    static const char *const shapes[] = {
        "\"worker_spec\":\"nope\",\"worker_count\":1",
        "\"worker_spec\":\"cpu-large\",\"worker_count\":1",
        "\"worker_spec\":\"cpu-small\",\"worker_count\":4,\"workers_per_node\":4",
        "\"worker_spec\":\"cpu-small\",\"worker_count\":1,\"max_runtime_seconds\":0",
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        char q[512], c[1024], qc[64], cc[64];
        snprintf(q, sizeof q, "{%s}", shapes[i]);
        snprintf(c, sizeof c,
                 "{\"name\":\"s\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":"
                 "\"bin/train\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,%s}",
                 shapes[i]);
        th_resp rq = th_post(&d, "/v1/quote", tok, q), rc = th_post(&d, "/v1/jobs", tok, c);
        error_code(&rq, qc, sizeof qc);
        error_code(&rc, cc, sizeof cc);
        cr_expect_eq(rq.status, rc.status, "%s: quote %ld, create %ld", shapes[i], rq.status,
                     rc.status);
        cr_expect_geq(rq.status, 400, "%s: quoted %s", shapes[i], rq.body);
        cr_expect_str_eq(qc, cc, "%s: quote %s, create %s", shapes[i], rq.body, rc.body);
        th_free(&rq);
        th_free(&rc);
    }
    th_must(th_post(&d, "/v1/quote", tok, "{\"worker_spec\":\"cpu-small\",\"worker_count\":2}"),
            200);
}

/* PUT of n bytes as workspace file name: the response (the caller frees). */
static th_resp put_bytes(const char *tok, const char *name, size_t n)
{
    static char buf[1 << 20];
    char p[128];
    memset(buf, 'q', n < sizeof buf ? n : sizeof buf);
    snprintf(p, sizeof p, "/v1/workspaces/ws/files/%s", name);
    return th_req(&d, "PUT", p, tok, "application/octet-stream", buf, n, NULL);
}

/* n chunked PUTs of size bytes each (race-N.bin), their chunks sent in
 * turn so that all are under way at once: how many were answered 201. */
static int race_uploads(const char *tok, int n, int size)
{
    int fds[8], landed = 0;
    char head[512], chunk[10000 + 16];
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_port = htons((uint16_t)atoi(strrchr(d.base, ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_leq(n, 8);
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&a, sizeof a) == 0);
        int h = snprintf(head, sizeof head,
                         "PUT /v1/workspaces/ws/files/race-%d.bin HTTP/1.1\r\nHost: x\r\n"
                         "Authorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n\r\n",
                         i, tok);
        cr_assert_eq(send(fds[i], head, (size_t)h, MSG_NOSIGNAL), h);
    }
    int h = snprintf(chunk, sizeof chunk, "%x\r\n", 10000);
    memset(chunk + h, 'r', 10000);
    memcpy(chunk + h + 10000, "\r\n", 2);
    for (int sent = 0; sent < size; sent += 10000)
        for (int i = 0; i < n; i++)
            send(fds[i], chunk, (size_t)h + 10002, MSG_NOSIGNAL); /* a refused one may close */
    for (int i = 0; i < n; i++) {
        char resp[256] = "";
        struct timeval tv = {10, 0};
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        send(fds[i], "0\r\n\r\n", 5, MSG_NOSIGNAL);
        ssize_t k = recv(fds[i], resp, sizeof resp - 1, 0);
        resp[k > 0 ? k : 0] = '\0';
        landed += !strncmp(resp, "HTTP/1.1 201", 12);
        close(fds[i]);
    }
    return landed;
}

/*
 * A tenant keeps what its quota allows: an upload that would pass
 * max_storage_bytes is refused storage_quota_exceeded and leaves nothing;
 * a job past max_pending_jobs is refused quota_exceeded; /v1/quota shows
 * both; a tenant without a quota of its own has the platform's default.
 */
Test(api_flow, storage_and_pending_quotas_hold)
{
    char tok[80], other[80];
    th_stop(&d);
    const char *args[] = {"--storage-scan", "200", "--default-storage-quota", "50000", NULL};
    th_restart(&d, args);
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    th_put_quota(&d, "acme", "{\"max_storage_bytes\":300000,\"max_pending_jobs\":2}");
    th_resp r;
    r = put_bytes(tok, "a.bin", 200000);
    cr_expect_eq(r.status, 201, "%s", r.body);
    th_free(&r);
    r = put_bytes(tok, "b.bin", 200000);
    cr_expect_eq(r.status, 507, "%s", r.body);
    cr_expect(strstr(r.body, "storage_quota_exceeded") != NULL, "%s", r.body);
    th_free(&r);
    th_expect(th_get(&d, "/v1/workspaces/ws/files/b.bin", tok), 404);
    usleep(600 * 1000); /* a walk: the first file measured, not only counted */
    r = th_get(&d, "/v1/quota", tok);
    const cJSON *sb = cJSON_GetObjectItem(r.json, "storage_bytes");
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(sb, "limit")), 300000, "%s", r.body);
    double used = cJSON_GetNumberValue(cJSON_GetObjectItem(sb, "used"));
    cr_expect(used >= 200000 && used < 300000, "used %g: %s", used, r.body);
    th_free(&r);
    /* pending jobs (no node: they wait) */
    static const char job[] =
        "{\"name\":\"w\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"bin/train\","
        "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}";
    th_must(th_post(&d, "/v1/jobs", tok, job), 201);
    th_must(th_post(&d, "/v1/jobs", tok, job), 201);
    th_expect_error(th_post(&d, "/v1/jobs", tok, job), 422, "quota_exceeded", "max_pending_jobs");
    r = th_get(&d, "/v1/quota", tok);
    const cJSON *pj = cJSON_GetObjectItem(r.json, "pending_jobs");
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(pj, "used")), 2, "%s", r.body);
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(pj, "limit")), 2, "%s", r.body);
    th_free(&r);
    /* Uploads side by side take the quota left one byte at a time: of four
     * of 60,000 bytes, chunked and interleaved, against 100,000 left, at
     * most one lands. */
    int landed = race_uploads(tok, 4, 60000);
    cr_expect_leq(landed, 1, "%d of 4 uploads landed past the quota", landed);
    usleep(600 * 1000);
    r = th_get(&d, "/v1/quota", tok);
    sb = cJSON_GetObjectItem(r.json, "storage_bytes");
    used = cJSON_GetNumberValue(cJSON_GetObjectItem(sb, "used"));
    cr_expect(used <= 300000, "used %g of a 300,000-byte quota: %s", used, r.body);
    th_free(&r);
    /* another tenant: the platform's default of 50,000 bytes */
    th_user(&d, "globex", "bob", "member", other);
    th_must(th_post(&d, "/v1/workspaces", other, "{\"name\":\"ws\"}"), 201);
    r = put_bytes(other, "c.bin", 60000);
    cr_expect_eq(r.status, 507, "%s", r.body);
    th_free(&r);
    r = put_bytes(other, "d.bin", 40000);
    cr_expect_eq(r.status, 201, "%s", r.body);
    th_free(&r);
}

/* The files and directories one tenant keeps are bounded (--max-files), so
 * that no tenant uses up the file system's inodes: a new file past the
 * bound is refused 507, one that replaces a file still lands, a removal
 * makes room; what a job writes counts at the next walk, and a tenant past
 * the bound submits nothing. */
Test(api_flow, a_tenants_file_count_is_bounded)
{
    char tok[80];
    th_stop(&d);
    const char *args[] = {"--storage-scan", "200", "--max-files", "10", NULL};
    th_restart(&d, args);
    th_user(&d, "acme", "alice", "member", tok);
    /* workspaces/, ws, bin, bin/train, datasets/, mnist, raw, raw/...: 8 */
    make_volumes(tok);
    usleep(600 * 1000);
    th_resp r = put_bytes(tok, "c1.bin", 10);
    cr_expect_eq(r.status, 201, "%s", r.body);
    th_free(&r);
    r = put_bytes(tok, "c2.bin", 10);
    cr_expect_eq(r.status, 201, "%s", r.body);
    th_free(&r);
    r = put_bytes(tok, "c3.bin", 10);
    cr_expect_eq(r.status, 507, "an eleventh entry: %s", r.body);
    cr_expect(strstr(r.body, "storage_quota_exceeded") && strstr(r.body, "files"), "%s", r.body);
    th_free(&r);
    th_expect(th_get(&d, "/v1/workspaces/ws/files/c3.bin", tok), 404);
    r = put_bytes(tok, "c1.bin", 20); /* replaces: no new entry */
    cr_expect_eq(r.status, 201, "%s", r.body);
    th_free(&r);
    r = th_get(&d, "/v1/quota", tok);
    const cJSON *f = cJSON_GetObjectItem(r.json, "files");
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(f, "limit")), 10, "%s", r.body);
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(f, "used")), 10, "%s", r.body);
    th_free(&r);
    th_expect(th_del(&d, "/v1/workspaces/ws/files/c2.bin", tok), 204);
    r = put_bytes(tok, "c3.bin", 10);
    cr_expect_eq(r.status, 201, "after a removal: %s", r.body);
    th_free(&r);
    /* Files a job wrote (made here on disk, as a job's would be) count at
     * the next walk: past the bound, the tenant submits nothing. */
    char dir[600];
    DIR *vd;
    struct dirent *e;
    snprintf(dir, sizeof dir, "%s/volumes", d.dir);
    cr_assert_not_null(vd = opendir(dir));
    long tenant = 0;
    while ((e = readdir(vd)) != NULL)
        if (atol(e->d_name) > 0)
            tenant = atol(e->d_name);
    closedir(vd);
    cr_assert_gt(tenant, 0);
    char cmd[900];
    snprintf(cmd, sizeof cmd, "cd '%s/volumes/%ld' && w=$(ls | head -1) && "
             "for i in 1 2 3 4; do : > \"$w/job-$i\"; done", d.dir, tenant);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    usleep(600 * 1000);
    static const char job[] =
        "{\"name\":\"w\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":\"bin/train\","
        "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}";
    r = th_post(&d, "/v1/jobs", tok, job);
    cr_expect_eq(r.status, 507, "a tenant past the bound submitted: %s", r.body);
    cr_expect(strstr(r.body, "files") != NULL, "%s", r.body);
    th_free(&r);
}

/* What one user or tenant may pile up is bounded: 100 live tokens a user,
 * 1,000 workspaces a tenant (then 422 quota_exceeded, nothing made); a
 * revoked token frees its place. */
Test(api_flow, tokens_and_workspaces_are_bounded, .timeout = 120)
{
    char tok[80], path[96], body[64];
    long uid = th_user(&d, "acme", "alice", "member", tok);
    snprintf(path, sizeof path, "/v1/users/%ld/tokens", uid);
    long last = 0;
    for (int i = 1; i < 100; i++) {
        snprintf(body, sizeof body, "{\"name\":\"t%d\"}", i);
        th_resp r = th_post(&d, path, TH_ADMIN, body);
        cr_assert_eq(r.status, 201, "token %d: %s", i + 1, r.body);
        last = (long)th_num(&r, "id");
        th_free(&r);
    }
    th_expect_error(th_post(&d, path, TH_ADMIN, "{\"name\":\"one-too-many\"}"), 422,
                    "quota_exceeded", NULL);
    char rev[128];
    snprintf(rev, sizeof rev, "/v1/tokens/%ld", last);
    th_resp r = th_req(&d, "DELETE", rev, TH_ADMIN, NULL, NULL, 0, NULL);
    cr_expect(r.status == 200 || r.status == 204, "revoke: %ld %s", r.status, r.body);
    th_free(&r);
    th_must(th_post(&d, path, TH_ADMIN, "{\"name\":\"in-its-place\"}"), 201);
    for (int i = 0; i < 1000; i++) {
        snprintf(body, sizeof body, "{\"name\":\"w%d\"}", i);
        th_resp w = th_post(&d, "/v1/workspaces", tok, body);
        cr_assert_eq(w.status, 201, "workspace %d: %s", i + 1, w.body);
        th_free(&w);
    }
    th_expect_error(th_post(&d, "/v1/workspaces", tok, "{\"name\":\"w1000\"}"), 422,
                    "quota_exceeded", NULL);
    th_expect(th_get(&d, "/v1/workspaces/w1000", tok), 404);
}

/*
 * A job's metric rows are bounded (100,000): COHORT_METRIC lines past it
 * stay in the log only, and the job's events say so once.  Sent through
 * the agents' log API, as an agent ships a rank's output.
 */
/* A one-worker job of tok's placed on the node registered as name at
 * address (its token into node): the job's id, and its worker's in *wid. */
static long job_on_fake_node(const char *tok, const char *name, const char *address, char *node,
                             long *wid)
{
    char body[400];
    register_at(name, address, "host", node);
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"image\":\"native\",\"workspace\":\"ws\",\"code_path\":"
             "\"bin/train\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":"
             "\"cpu-small\",\"worker_count\":1}",
             name);
    long id = th_submit(&d, tok, body);
    cJSON *w = desired_worker(node);
    *wid = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(w, "id"));
    cJSON_Delete(w);
    return id;
}

/* The storage use of a tenant as /v1/quota says it. */
static double storage_used(const char *tok)
{
    th_resp r = th_get(&d, "/v1/quota", tok);
    double used = cJSON_GetNumberValue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "storage_bytes"), "used"));
    th_free(&r);
    return used;
}

/*
 * A node's word on what its worker hides in deleted files is believed only
 * up to the size of the volumes' file system: a figure of 2^62 bytes (a
 * probe's, which failed the tenant's jobs on every node) counts as the
 * file system's size, and two such figures do not overflow the sum.
 */
Test(api_flow, a_nodes_hidden_bytes_count_no_more_than_its_file_system_holds)
{
    char tok[80], node[80], seen[16], path[512], body[256];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    register_node("a", 8, node);
    for (int i = 0; i < 2; i++)
        th_submit(&d, tok,
                  "{\"name\":\"h\",\"image\":\"native\",\"workspace\":\"ws\","
                  "\"code_path\":\"bin/train\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                  "\"worker_spec\":\"cpu-small\",\"worker_count\":1}");
    cr_assert(th_wait_state(&d, tok, 2, "STARTING", 10000, seen), "job 2 is %s", seen);
    for (int w = 1; w <= 2; w++) {
        snprintf(body, sizeof body,
                 "{\"workers\":[{\"id\":%d,\"state\":\"running\","
                 "\"hidden_bytes\":4611686018427387903}]}",
                 w);
        th_must(th_post(&d, "/v1/agent/heartbeat", node, body), 200);
    }
    struct statvfs sv;
    snprintf(path, sizeof path, "%s/volumes", d.dir);
    cr_assert_eq(statvfs(path, &sv), 0);
    double fs = (double)sv.f_blocks * (double)sv.f_frsize, used = storage_used(tok);
    cr_expect(used >= fs && used <= 2 * fs + 1e9, "used %g with a file system of %g", used, fs);
}

/* A job's logs count in its tenant's storage (bounded per job by
 * --log-limit, they were not per tenant): past the quota the job is
 * stopped and nothing more is submitted; deleting the job removes them and
 * gives the room back. */
Test(api_flow, a_jobs_logs_count_in_its_tenants_storage, .timeout = 120)
{
    char tok[80], node[80], p[128], body[160];
    th_stop(&d);
    const char *args[] = {"--storage-scan", "200", NULL};
    th_restart(&d, args);
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    th_put_quota(&d, "acme", "{\"max_storage_bytes\":600000}");
    th_resp r;
    long wid, id = job_on_fake_node(tok, "l", "192.0.2.41", node, &wid);
    static char chunk[400000];
    memset(chunk, 'x', sizeof chunk);
    double before = storage_used(tok);
    snprintf(p, sizeof p, "/v1/agent/logs/%ld?offset=0", wid);
    th_must(th_req(&d, "PUT", p, node, "application/octet-stream", chunk, 300000, NULL), 200);
    usleep(700 * 1000); /* a walk or two */
    double with_logs = storage_used(tok);
    cr_expect(with_logs >= before + 300000, "300,000 bytes of log not counted: %g, then %g",
              before, with_logs);
    snprintf(p, sizeof p, "/v1/agent/logs/%ld?offset=300000", wid);
    th_must(th_req(&d, "PUT", p, node, "application/octet-stream", chunk, 400000, NULL), 200);
    char seen[16];
    cr_expect(th_wait_state(&d, tok, id, "FAILED", 10000, seen), "past the quota the job is %s",
              seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    r = th_get(&d, p, tok);
    cr_expect(strstr(r.body, "logs") && strstr(r.body, "storage_quota_exceeded"), "%s", r.body);
    th_free(&r);
    /* the worker ends, the job is deleted: its logs go, and the room comes back */
    snprintf(body, sizeof body, "{\"workers\":[{\"id\":%ld,\"state\":\"exited\","
                                "\"exit_code\":143}]}", wid);
    th_must(th_post(&d, "/v1/agent/heartbeat", node, body), 200);
    th_resp del = th_del(&d, p, tok);
    for (int i = 0; i < 50 && del.status == 409; i++) { /* its worker's end, written */
        th_free(&del);
        usleep(100 * 1000);
        del = th_del(&d, p, tok);
    }
    cr_expect_eq(del.status, 204, "%s", del.body);
    th_free(&del);
    usleep(700 * 1000);
    double after = storage_used(tok);
    cr_expect(after < with_logs - 250000, "the deleted job's logs still count: %g", after);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/logs/%ld", d.dir, id);
    struct stat sb;
    cr_expect_neq(stat(dir, &sb), 0, "%s is still there", dir);
}

Test(api_flow, a_jobs_metric_rows_are_bounded, .timeout = 120)
{
    char tok[80], node[80], p[128];
    th_user(&d, "acme", "alice", "member", tok);
    make_volumes(tok);
    long wid, id = job_on_fake_node(tok, "m", "192.0.2.40", node, &wid);
    static char chunk[1024 * 40];
    size_t n = 0;
    for (int i = 0; i < 1024; i++)
        n += (size_t)snprintf(chunk + n, sizeof chunk - n, "COHORT_METRIC {\"i\":%05d}\n", i);
    long long off = 0;
    for (int c = 0; c < 100; c++) { /* 102,400 metric lines */
        snprintf(p, sizeof p, "/v1/agent/logs/%ld?offset=%lld", wid, off);
        th_resp r = th_req(&d, "PUT", p, node, "application/octet-stream", chunk, n, NULL);
        cr_assert_eq(r.status, 200, "chunk %d: %s", c, r.body);
        th_free(&r);
        off += (long long)n;
    }
    char out[64];
    snprintf(p, sizeof p, "SELECT count(*) FROM job_metrics WHERE job_id = %ld", id);
    th_db_query(&d, p, out, sizeof out);
    cr_expect_eq(atol(out), 100000, "%s metric rows stored", out);
    snprintf(p, sizeof p, "/v1/jobs/%ld/events", id);
    th_resp r = th_get(&d, p, tok);
    cr_expect(strstr(r.body, "100000 metric rows") != NULL, "%s", r.body);
    const char *first = strstr(r.body, "metric rows"), *again = first ? strstr(first + 1, "metric rows") : NULL;
    cr_expect_null(again, "said more than once: %s", r.body);
    th_free(&r);
}

/* The network a node's agent gives jobs follows its heartbeats: an agent
 * restarted with another --network is that kind at once (a job network
 * only at an IPv4 address, as at registration). */
Test(api_flow, a_nodes_network_follows_its_agent)
{
    char a[80], h[80];
    register_at("a", "192.0.2.50", "job", a);
    th_must(th_post(&d, "/v1/agent/heartbeat", a, "{\"workers\":[],\"network\":\"host\"}"), 200);
    th_resp r = th_get(&d, "/v1/nodes/1", TH_ADMIN);
    cr_expect_str_eq(th_str(&r, "network"), "host", "%s", r.body);
    th_free(&r);
    th_must(th_post(&d, "/v1/agent/heartbeat", a, "{\"workers\":[],\"network\":\"job\"}"), 200);
    r = th_get(&d, "/v1/nodes/1", TH_ADMIN);
    cr_expect_str_eq(th_str(&r, "network"), "job", "%s", r.body);
    th_free(&r);
    th_expect(th_post(&d, "/v1/agent/heartbeat", a, "{\"workers\":[],\"network\":\"vxlan\"}"),
              422);
    register_at("h", "node-h.example", "host", h);
    th_must(th_post(&d, "/v1/agent/heartbeat", h, "{\"workers\":[],\"network\":\"job\"}"), 200);
    r = th_get(&d, "/v1/nodes/2", TH_ADMIN);
    cr_expect_str_eq(th_str(&r, "network"), "host", "a job network at a host name: %s", r.body);
    th_free(&r);
}
