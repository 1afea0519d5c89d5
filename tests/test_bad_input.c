/*
 * Bad input gets a clear error (status, code, field) and changes nothing:
 * the database dump is byte-identical before and after, and nothing is
 * written outside a volume.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "tests/harness.h"

static th_daemon d;
static char tok[80];
static long ws_id, tenant_id;
static char digest[65];

static void setup(void)
{
    th_start(&d, NULL);
    th_user(&d, "acme", "alice", "member", tok);
    th_resp r = th_create(&d, "/v1/workspaces", tok, "{\"name\":\"ws\"}");
    ws_id = (long)th_num(&r, "id");
    th_free(&r);
    th_must(th_put_file(&d, "/v1/workspaces/ws/files/train.py", tok, "x", 1), 201);
    tenant_id = th_id(&d, "/v1/tenants/acme", TH_ADMIN);
    th_db_digest(&d, digest);
}

static void teardown(void)
{
    char after[65];
    th_db_digest(&d, after);
    cr_expect_str_eq(after, digest, "bad input changed the database");
    cr_expect_eq(th_stop(&d), 0);
    th_cleanup(&d);
}

TestSuite(bad_input, .init = setup, .fini = teardown, .timeout = 120);

#define BASE                                                                                   \
    "\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\",\"code_path\":\"train.py\","   \
    "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1"

struct bad {
    const char *why;
    const char *body;
    long status;
    const char *code;
    const char *field;
};

static void submit_bad(const struct bad *b)
{
    th_resp r = th_post(&d, "/v1/jobs", tok, b->body);
    cr_expect_eq(r.status, b->status, "%s: want %ld got %ld %s", b->why, b->status, r.status,
                 r.body);
    if (b->code)
        cr_expect_str_eq(th_err_code(&r), b->code, "%s: %s", b->why, r.body);
    if (b->field)
        cr_expect_str_eq(th_err_field(&r), b->field, "%s: %s", b->why, r.body);
    cr_expect(strstr(r.body, "\"message\":\"") != NULL, "%s: no message: %s", b->why, r.body);
    th_free(&r);
}

/* A raw NUL byte in a body (which JSON never holds) is refused, not taken
 * for the end of a name: "ab\0cd" was created as tenant "ab" (201). */
Test(bad_input, a_raw_nul_in_a_body_is_refused)
{
    static const char ws[] = "{\"name\":\"ab\0cd\"}";
    th_resp r = th_req(&d, "POST", "/v1/workspaces", tok, "application/json", ws,
                       sizeof ws - 1, NULL);
    cr_expect_eq(r.status, 400, "%ld %s", r.status, r.body);
    cr_expect_str_eq(th_err_code(&r), "invalid_json", "%s", r.body);
    th_free(&r);
    static const char job[] = "{" BASE ",\"env\":{\"A\":\"x\0y\"}}";
    r = th_req(&d, "POST", "/v1/jobs", tok, "application/json", job, sizeof job - 1, NULL);
    cr_expect_eq(r.status, 400, "%ld %s", r.status, r.body);
    th_free(&r);
    r = th_get(&d, "/v1/workspaces/ab", tok);
    cr_expect_eq(r.status, 404, "a workspace 'ab' was made: %s", r.body);
    th_free(&r);
}

Test(bad_input, job_bodies)
{
    static const struct bad cases[] = {
        {"malformed", "{\"name\":", 400, "invalid_json", NULL},
        {"not an object", "[1,2]", 400, "invalid_json", NULL},
        {"trailing data", "{" BASE "} x", 400, "invalid_json", NULL},
        {"NaN literal", "{" BASE ",\"lr\":NaN}", 400, "invalid_json", NULL},
        {"NUL in a string", "{\"name\":\"a\\u0000b\"}", 400, "invalid_json", NULL},
        {"epochs as string", "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                             "\"code_path\":\"train.py\",\"epochs\":\"3\",\"lr\":0.1,"
                             "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
         400, "invalid_type", "epochs"},
        {"lr as string NaN", "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                             "\"code_path\":\"train.py\",\"epochs\":3,\"lr\":\"NaN\","
                             "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
         400, "invalid_type", "lr"},
        {"fractional batch", "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                             "\"code_path\":\"train.py\",\"epochs\":3,\"lr\":0.1,"
                             "\"batch_size\":8.5,\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
         400, "invalid_type", "batch_size"},
        {"negative epochs", "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                            "\"code_path\":\"train.py\",\"epochs\":-1,\"lr\":0.1,"
                            "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
         422, "invalid_value", "epochs"},
        {"10^9 workers", "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                         "\"code_path\":\"train.py\",\"epochs\":1,\"lr\":0.1,"
                         "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1e9}",
         422, "invalid_value", "worker_count"},
        {"lr overflow", "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                        "\"code_path\":\"train.py\",\"epochs\":1,\"lr\":1e400,"
                        "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
         422, "invalid_value", "lr"},
        {"lr zero", "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                    "\"code_path\":\"train.py\",\"epochs\":1,\"lr\":0,"
                    "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
         422, "invalid_value", "lr"},
        {"missing workspace", "{\"name\":\"j\",\"image\":\"pytorch\",\"code_path\":\"train.py\","
                              "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                              "\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
         400, "missing_field", "workspace"},
        {"set state", "{" BASE ",\"state\":\"RUNNING\"}", 400, "unknown_field", "state"},
        {"set tenant", "{" BASE ",\"tenant\":\"other\"}", 400, "unknown_field", "tenant"},
        {"set price", "{" BASE ",\"price\":0}", 400, "unknown_field", "price"},
        {"duplicate key", "{" BASE ",\"name\":\"again\"}", 400, "duplicate_field", "name"},
        {"env RANK", "{" BASE ",\"env\":{\"RANK\":\"0\"}}", 422, "reserved", "env"},
        {"env MASTER_ADDR", "{" BASE ",\"env\":{\"MASTER_ADDR\":\"evil\"}}", 422, "reserved", "env"},
        {"env bad name", "{" BASE ",\"env\":{\"A-B\":\"x\"}}", 422, "invalid_value", "env"},
        {"env non-string", "{" BASE ",\"env\":{\"A\":1}}", 400, "invalid_type", "env"},
        {"args non-string", "{" BASE ",\"args\":[1]}", 400, "invalid_type", "args"},
        {"unknown image", "{\"name\":\"j\",\"image\":\"nope\",\"workspace\":\"ws\","
                          "\"code_path\":\"train.py\",\"epochs\":1,\"lr\":0.1,"
                          "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
         422, "not_found", "image"},
        {"unknown spec", "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                         "\"code_path\":\"train.py\",\"epochs\":1,\"lr\":0.1,"
                         "\"batch_size\":8,\"worker_spec\":\"huge\",\"worker_count\":1}",
         422, "not_found", "worker_spec"},
        {"unknown dataset", "{" BASE ",\"datasets\":[\"nope\"]}", 422, "not_found", "datasets"},
        {"uneven per node", "{" BASE ",\"workers_per_node\":2}", 422, "invalid_value",
         "workers_per_node"},
        {"name with newline", "{\"name\":\"a\\nb\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                              "\"code_path\":\"train.py\",\"epochs\":1,\"lr\":0.1,"
                              "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}",
         422, "invalid_value", "name"},
        {NULL, NULL, 0, NULL, NULL},
    };
    for (const struct bad *b = cases; b->why; b++)
        submit_bad(b);
}

Test(bad_input, code_path_outside_workspace)
{
    static const char *const paths[] = {"../train.py", "/etc/passwd", "a/../../x", "./train.py",
                                        "..", "a//b", "missing.py", NULL};
    char body[512];
    for (int i = 0; paths[i]; i++) {
        snprintf(body, sizeof body,
                 "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\",\"code_path\":\"%s\","
                 "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\","
                 "\"worker_count\":1}",
                 paths[i]);
        struct bad b = {paths[i], body, 422, NULL, "code_path"};
        submit_bad(&b);
    }
}

Test(bad_input, bodies_too_large_deep_or_not_json)
{
    size_t n = 10u << 20;
    char *big = malloc(n);
    cr_assert(big);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    th_expect_error(th_req(&d, "POST", "/v1/jobs", tok, NULL, big, n, NULL), 413, "too_large",
                    NULL);
    /* Chunked, so the size is not known up front. */
    th_expect(th_req(&d, "POST", "/v1/jobs", tok, NULL, big, n, "Transfer-Encoding: chunked"), 413);
    free(big);

    size_t depth = 10000;
    char *deep = malloc(2 * depth + 1);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[2 * depth] = '\0';
    th_expect_error(th_post(&d, "/v1/jobs", tok, deep), 400, "invalid_json", NULL);
    free(deep);

    th_expect(
        th_req(&d, "POST", "/v1/jobs", tok, "application/x-www-form-urlencoded", "name=x", 6, NULL),
        415);
    th_expect(th_post(&d, "/v1/jobs",
                      "coh_0000000000000000000000000000000000000000000000000000000000000000", "{}"),
              401);
    th_expect(th_post(&d, "/v1/jobs", NULL, "{}"), 401);
}

Test(bad_input, file_paths_that_try_to_leave)
{
    static const char *const paths[] = {
        "/v1/workspaces/ws/files/../../etc/passwd",
        "/v1/workspaces/ws/files/%2e%2e/%2e%2e/etc/passwd",
        "/v1/workspaces/ws/files/a/%2E%2E/%2E%2E/x",
        "/v1/workspaces/ws/files//etc/passwd",
        "/v1/workspaces/ws/files/a%00b",
        "/v1/workspaces/ws/files/a%2f..%2f..%2fx",
        "/v1/workspaces/ws/files/a\\..\\x",
        NULL,
    };
    for (int i = 0; paths[i]; i++) {
        th_resp r = th_req(&d, "PUT", paths[i], tok, "application/octet-stream", "pwn", 3, NULL);
        cr_expect(r.status == 422 || r.status == 404, "PUT %s: %ld %s", paths[i], r.status,
                  r.body);
        th_free(&r);
        r = th_get(&d, paths[i], tok);
        cr_expect(r.status == 422 || r.status == 404, "GET %s: %ld %s", paths[i], r.status,
                  r.body);
        cr_expect_null(strstr(r.body, "root:"), "GET %s leaked a host file", paths[i]);
        th_free(&r);
    }
    struct stat sb;
    cr_expect(stat("/x", &sb) != 0 && errno == ENOENT);
}

Test(bad_input, planted_symlinks_are_never_followed)
{
    char outside[300], wsdir[512], link[700], cmd[1024];
    snprintf(outside, sizeof outside, "%s/outside", d.dir);
    mkdir(outside, 0755);
    snprintf(cmd, sizeof cmd, "printf original > %s/victim", outside);
    cr_assert_eq(system(cmd), 0);
    snprintf(wsdir, sizeof wsdir, "%s/volumes/%ld/workspaces/%ld", d.dir, tenant_id, ws_id);
    snprintf(link, sizeof link, "%s/evil-dir", wsdir);
    cr_assert_eq(symlink(outside, link), 0, "%s: %s", link, strerror(errno));
    snprintf(link, sizeof link, "%s/evil-file", wsdir);
    snprintf(cmd, sizeof cmd, "%s/victim", outside);
    cr_assert_eq(symlink(cmd, link), 0);

    th_resp r = th_get(&d, "/v1/workspaces/ws/files/evil-dir/victim", tok);
    cr_expect_eq(r.status, 422, "%s", r.body);
    th_free(&r);
    r = th_get(&d, "/v1/workspaces/ws/files/evil-file", tok);
    cr_expect_eq(r.status, 422, "%s", r.body);
    cr_expect_null(strstr(r.body, "original"));
    th_free(&r);
    th_expect(th_put_file(&d, "/v1/workspaces/ws/files/evil-dir/victim", tok, "pwned", 5), 422);
    th_expect(th_put_file(&d, "/v1/workspaces/ws/files/evil-dir/new", tok, "pwned", 5), 422);
    th_expect(th_del(&d, "/v1/workspaces/ws/files/evil-dir/victim", tok), 422);
    th_expect_error(
        th_post(&d, "/v1/jobs", tok,
                "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\","
                "\"code_path\":\"evil-dir/victim\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,"
                "\"worker_spec\":\"cpu-small\",\"worker_count\":1}"),
        422, NULL, "code_path");

    /* The files outside are untouched and nothing new appeared there. */
    FILE *f = fopen(cmd, "r");
    char buf[32] = "";
    cr_assert(f);
    cr_expect(fgets(buf, sizeof buf, f) != NULL);
    fclose(f);
    cr_expect_str_eq(buf, "original");
    snprintf(link, sizeof link, "%s/new", outside);
    struct stat sb;
    cr_expect(stat(link, &sb) != 0, "a file was created outside the workspace");
}

Test(bad_input, bad_names_and_catalog_values)
{
    th_expect_error(th_post(&d, "/v1/workspaces", tok, "{\"name\":\"Bad Name\"}"), 422, NULL,
                    "name");
    th_expect(th_post(&d, "/v1/workspaces", tok, "{\"name\":\"../up\"}"), 422);
    th_expect(th_post(&d, "/v1/workspaces", tok, "{\"name\":\"ws\"}"), 409);
    th_expect_error(th_post(&d, "/v1/worker-specs", TH_ADMIN,
                            "{\"name\":\"x\",\"cpus\":-1,\"memory_mb\":1,\"price_per_hour\":1,"
                            "\"currency\":\"USD\"}"),
                    422, NULL, "cpus");
    /* money must be integer minor units */
    th_resp r = th_post(&d, "/v1/worker-specs", TH_ADMIN,
                        "{\"name\":\"x\",\"cpus\":1,\"memory_mb\":1,\"price_per_hour\":1.5,"
                        "\"currency\":\"USD\"}");
    cr_expect_eq(r.status, 400, "%s", r.body);
    th_free(&r);
    th_expect(th_post(&d, "/v1/worker-specs", TH_ADMIN,
                      "{\"name\":\"x\",\"cpus\":1,\"memory_mb\":1,\"price_per_hour\":1,"
                      "\"currency\":\"dollars\"}"),
              422);
    th_expect(th_post(&d, "/v1/images", TH_ADMIN,
                      "{\"name\":\"x\",\"reference\":\"cohort/x:1\",\"framework\":\"caffe\"}"),
              422);
    /* References that are not one: an option, a path, upper case, a broken
     * digest, a tag and nothing else, a space; each refused, nothing stored. */
    static const char *const refs[] = {"-o/x:1",       "../x:1",          "cohort/X:1",
                                       "h:5000/x@sha256:abc", "h/x:",     "h/x:1@sha256:0",
                                       "h/x y:1",      "h//x:1",          "h/x/:1",
                                       "/x:1",         ""};
    char db0[65], db1[65];
    th_db_digest(&d, db0);
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"name\":\"bad%zu\",\"reference\":\"%s\",\"framework\":\"native\"}", i,
                 refs[i]);
        r = th_post(&d, "/v1/images", TH_ADMIN, body);
        cr_expect_eq(r.status, 422, "reference '%s': %ld %s", refs[i], r.status, r.body);
        cr_expect_str_eq(th_err_field(&r), "reference", "reference '%s'", refs[i]);
        th_free(&r);
    }
    /* credentials come in pairs */
    th_expect(th_post(&d, "/v1/images", TH_ADMIN,
                      "{\"name\":\"y\",\"reference\":\"cohort/y:1\",\"framework\":\"native\","
                      "\"username\":\"u\"}"),
              422);
    th_db_digest(&d, db1);
    cr_expect_str_eq(db0, db1, "a refused image changed the database");
    th_expect(th_get(&d, "/v1/jobs/abc", tok), 404);
    th_expect(th_get(&d, "/v1/jobs?state=BOGUS", tok), 400);
}

/* The answer to an oversized body comes from the headers alone: no byte of
 * the body is sent, and the 413 arrives anyway. */
Test(bad_input, too_large_is_refused_before_the_body_is_read)
{
    static const char *const routes[] = {"POST /v1/jobs", "PUT /v1/workspaces/ws/files/big", NULL};
    for (int i = 0; routes[i]; i++) {
        int s = th_connect(&d);
        char head[512];
        int n = snprintf(head, sizeof head,
                         "%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                         "Content-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n",
                         routes[i], tok);
        cr_assert_eq(write(s, head, (size_t)n), n);
        struct pollfd p = {s, POLLIN, 0};
        cr_assert_eq(poll(&p, 1, 5000), 1, "%s: no answer without the body", routes[i]);
        char resp[512] = "";
        ssize_t got = read(s, resp, sizeof resp - 1);
        close(s);
        cr_assert_gt(got, 0);
        cr_expect(!strncmp(resp, "HTTP/1.1 413", 12), "%s: %s", routes[i], resp);
    }
}

/* ---- text that is not UTF-8 ---- */

static const char *const bad_utf8[] = {
    "\xff\xfe",         /* never in UTF-8 */
    "\xc0\xaf",         /* overlong '/' */
    "\xe0\x80\xaf",     /* overlong '/', three bytes */
    "\xed\xa0\x80",     /* a UTF-16 surrogate, encoded */
    "\xe2\x82",         /* truncated euro sign */
    "a\x80z",           /* a stray continuation byte */
    "\xf4\x90\x80\x80", /* past U+10FFFF */
    NULL};

/* Every string field of a job, one at a time, with each malformed sequence:
 * 400 invalid_utf8 naming the field. */
Test(bad_input, job_strings_that_are_not_utf8_are_refused_naming_the_field)
{
    static const char *const tmpl[][2] = {
        {"name", "{\"name\":\"%s\",\"image\":\"pytorch\",\"workspace\":\"ws\",\"code_path\":"
                 "\"train.py\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":"
                 "\"cpu-small\",\"worker_count\":1}"},
        {"image", "{\"name\":\"j\",\"image\":\"%s\",\"workspace\":\"ws\",\"code_path\":"
                  "\"train.py\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":"
                  "\"cpu-small\",\"worker_count\":1}"},
        {"workspace", "{" BASE ",\"workspace\":\"%s\"}"},
        {"code_path", "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\",\"code_path\":"
                      "\"%s\",\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":"
                      "\"cpu-small\",\"worker_count\":1}"},
        {"worker_spec", "{" BASE ",\"worker_spec\":\"%s\"}"},
        {"datasets", "{" BASE ",\"datasets\":[\"%s\"]}"},
        {"args", "{" BASE ",\"args\":[\"--ok\",\"%s\"]}"},
        {"env", "{" BASE ",\"env\":{\"FOO\":\"%s\"}}"},
        {"env", "{" BASE ",\"env\":{\"F%sO\":\"x\"}}"},
    };
    char body[1024];
    int n = 0;
    for (size_t t = 0; t < sizeof tmpl / sizeof tmpl[0]; t++) {
        for (int b = 0; bad_utf8[b]; b++) {
            snprintf(body, sizeof body, tmpl[t][1], bad_utf8[b]);
            th_resp r = th_post(&d, "/v1/jobs", tok, body);
            cr_expect_eq(r.status, 400, "%s with bad text #%d: %ld %s", tmpl[t][0], b, r.status,
                         r.body);
            cr_expect_str_eq(th_err_code(&r), "invalid_utf8", "%s #%d: %s", tmpl[t][0], b,
                             r.body);
            cr_expect_str_eq(th_err_field(&r), tmpl[t][0], "%s #%d: %s", tmpl[t][0], b, r.body);
            th_free(&r);
            n++;
        }
    }
    /* A member name that is not UTF-8 is refused too (no field to name). */
    th_expect_error(th_post(&d, "/v1/jobs", tok, "{\"na\xffme\":\"j\"}"), 400, "invalid_utf8",
                    NULL);
    cr_log_info("%d malformed strings refused", n);
}

/* Every route that takes a JSON body (but the agent's heartbeat, behind a
 * node token) refuses a malformed string before anything else. */
Test(bad_input, every_json_route_refuses_strings_that_are_not_utf8)
{
    char bob_tok[80], path[256], body[256];
    long uid = th_user(&d, "acme", "bob", "tenant_admin", bob_tok);
    int routes = 0;
    th_db_digest(&d, digest); /* bob is the only change this test makes */
    for (const api_route *rt = api_routes(); rt->pattern; rt++) {
        if (rt->body != API_BODY_JSON || rt->auth == API_AUTH_NODE)
            continue;
        const char *p = rt->pattern, *param = strstr(p, "{}");
        const char *value = !strncmp(p, "/v1/tenants/", 12)   ? "acme"
                            : !strncmp(p, "/v1/worker-specs/", 17) ? "cpu-small"
                            : !strncmp(p, "/v1/jobs/", 9)          ? "1" /* refused before */
                                                                   : NULL;
        char idbuf[24];
        if (!strncmp(p, "/v1/users/", 10)) {
            snprintf(idbuf, sizeof idbuf, "%ld", uid);
            value = idbuf;
        }
        if (param) {
            cr_assert(value, "no value for the parameter of %s", p);
            snprintf(path, sizeof path, "%.*s%s%s", (int)(param - p), p, value, param + 2);
        } else {
            snprintf(path, sizeof path, "%s", p);
        }
        for (int b = 0; bad_utf8[b]; b++) {
            snprintf(body, sizeof body, "{\"name\":\"%s\"}", bad_utf8[b]);
            th_resp r = th_req(&d, api_method_name(rt->method), path,
                               rt->auth == API_AUTH_USER ? TH_ADMIN : NULL, NULL, body,
                               strlen(body), NULL);
            cr_expect_eq(r.status, 400, "%s %s #%d: %ld %s", api_method_name(rt->method), path,
                         b, r.status, r.body);
            cr_expect_str_eq(th_err_code(&r), "invalid_utf8", "%s %s #%d: %s",
                             api_method_name(rt->method), path, b, r.body);
            th_free(&r);
        }
        routes++;
    }
    cr_expect_geq(routes, 15, "only %d JSON routes", routes);
    cr_log_info("%d JSON routes refuse malformed UTF-8", routes);
}

/* 1 when s is valid UTF-8 (checked here, not with cohortd's own code). */
static int utf8_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : *p >= 0xC2 && *p <= 0xDF ? 1 : (*p & 0xF0) == 0xE0 ? 2
              : *p >= 0xF0 && *p <= 0xF4 ? 3 : -1;
        if (n < 0)
            return 0;
        for (int i = 1; i <= n; i++)
            if ((p[i] & 0xC0) != 0x80)
                return 0;
        p += n + 1;
    }
    return 1;
}

/* An error that quotes a name shortened to 64 bytes never cuts a
 * character: the body is valid UTF-8 whatever the name. */
Test(bad_input, an_error_quoting_a_long_multibyte_name_stays_utf8)
{
    char body[512], name[300] = "";
    /* 63 ASCII bytes, then two-byte characters: byte 64 falls inside one */
    memset(name, 'x', 63);
    for (int i = 0; i < 40; i++)
        memcpy(name + 63 + 2 * i, "\xc3\xa9", 3); /* with its NUL, overwritten by the next */
    static const char *const tmpl[] = {"{\"%s\":1}", "{\"name\":\"j\",\"env\":{\"%s\":1}}"};
    for (int t = 0; t < 2; t++) {
        snprintf(body, sizeof body, tmpl[t], name);
        th_resp r = th_post(&d, "/v1/jobs", tok, body);
        cr_expect_eq(r.status, 400, "%s", r.body);
        cr_expect(utf8_ok(r.body), "not UTF-8: %s", r.body);
        cr_expect_not_null(r.json, "not JSON: %s", r.body);
        th_free(&r);
    }
}

/* Sends req to cohortd as it is and reads the answer's first 2 KiB into out. */
static void raw_exchange(const char *req, char *out, size_t n)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_port = htons((uint16_t)atoi(strrchr(d.base, ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t k = recv(fd, out, n - 1, 0);
    out[k > 0 ? k : 0] = '\0';
    close(fd);
}

/* Content-Length and Transfer-Encoding together (how requests are
 * smuggled, and how a body once passed the budget its length reserved) are
 * refused. */
Test(bad_input, a_body_framed_twice_is_refused)
{
    static const char raw[] = "POST /v1/workspaces HTTP/1.1\r\nHost: x\r\n"
                              "Content-Type: application/json\r\nContent-Length: 1\r\n"
                              "Transfer-Encoding: chunked\r\nAuthorization: Bearer ";
    char req[512], resp[2048] = "";
    snprintf(req, sizeof req, "%s%s\r\n\r\n10\r\n{\"name\":\"twice\"}\r\n0\r\n\r\n", raw, tok);
    raw_exchange(req, resp, sizeof resp);
    cr_expect(!strncmp(resp, "HTTP/1.1 400", 12), "%s", resp);
    th_expect(th_get(&d, "/v1/workspaces/twice", tok), 404);
}
