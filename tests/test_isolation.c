/*
 * Isolation between tenants: with tenant B's token, every object of tenant
 * A (job, dataset, workspace, file, user, token, tenant) is 404, absent
 * from every list, and cannot be changed.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/harness.h"

static th_daemon d;
static char ta[80], tb[80];
static long alice, job;
static long alice_token;

static void setup(void)
{
    th_start(&d, NULL);
    alice = th_user(&d, "tenant-a", "alice", "tenant_admin", ta);
    th_user(&d, "tenant-b", "mallory", "tenant_admin", tb);
    th_must(th_post(&d, "/v1/workspaces", ta, "{\"name\":\"secret-ws\"}"), 201);
    th_must(th_put_file(&d, "/v1/workspaces/secret-ws/files/train.py", ta, "secret", 6), 201);
    th_must(th_post(&d, "/v1/datasets", ta, "{\"name\":\"secret-ds\"}"), 201);
    th_must(th_put_file(&d, "/v1/datasets/secret-ds/files/x.bin", ta, "secret", 6), 201);
    job =
        th_submit(&d, ta,
                  "{\"name\":\"a-job\",\"image\":\"pytorch\",\"datasets\":[\"secret-ds\"],"
                  "\"workspace\":\"secret-ws\",\"code_path\":\"train.py\",\"epochs\":1,"
                  "\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}");
    char path[64];
    snprintf(path, sizeof path, "/v1/users/%ld/tokens", alice);
    th_resp r = th_get(&d, path, ta);
    alice_token = (long)cJSON_GetObjectItem(
                      cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), 0), "id")
                      ->valuedouble;
    th_free(&r);
}

static void teardown(void)
{
    cr_expect_eq(th_stop(&d), 0);
    th_cleanup(&d);
}

TestSuite(isolation, .init = setup, .fini = teardown, .timeout = 120);

static void expect_404(const char *method, const char *path, const char *body)
{
    th_resp r = th_req(&d, method, path, tb, body ? "application/json" : NULL, body,
                       body ? strlen(body) : 0, NULL);
    cr_expect_eq(r.status, 404, "%s %s as tenant B: %ld %s", method, path, r.status, r.body);
    cr_expect_null(strstr(r.body, "secret"), "%s %s leaked data: %s", method, path, r.body);
    cr_expect_null(strstr(r.body, "a-job"), "%s %s leaked data: %s", method, path, r.body);
    th_free(&r);
}

Test(isolation, every_object_of_tenant_a_is_404_for_b)
{
    /* Each route names one of A's objects: by its id where the route takes
     * one (the path is a format for it), by its name otherwise.  A body of ""
     * means none. */
    enum { BY_NAME = 0 };
    const struct {
        const char *method, *path;
        long id;
        const char *body;
    } tries[] = {
        {"GET", "/v1/jobs/%ld", job, ""},
        {"DELETE", "/v1/jobs/%ld", job, ""},
        {"POST", "/v1/jobs/%ld/cancel", job, ""},
        {"GET", "/v1/jobs/%ld/events", job, ""},
        {"GET", "/v1/workspaces/secret-ws", BY_NAME, ""},
        {"DELETE", "/v1/workspaces/secret-ws", BY_NAME, ""},
        {"GET", "/v1/workspaces/secret-ws/files", BY_NAME, ""},
        {"GET", "/v1/workspaces/secret-ws/files/train.py", BY_NAME, ""},
        {"DELETE", "/v1/workspaces/secret-ws/files/train.py", BY_NAME, ""},
        {"PUT", "/v1/workspaces/secret-ws/files/evil.py", BY_NAME, "{}"},
        {"GET", "/v1/datasets/secret-ds", BY_NAME, ""},
        {"POST", "/v1/datasets/secret-ds/seal", BY_NAME, ""},
        {"GET", "/v1/datasets/secret-ds/files/x.bin", BY_NAME, ""},
        {"DELETE", "/v1/datasets/secret-ds", BY_NAME, ""},
        {"GET", "/v1/tenants/tenant-a", BY_NAME, ""},
        {"GET", "/v1/tenants/tenant-a/users", BY_NAME, ""},
        {"POST", "/v1/tenants/tenant-a/users", BY_NAME, "{\"name\":\"spy\",\"role\":\"member\"}"},
        {"GET", "/v1/users/%ld", alice, ""},
        {"GET", "/v1/users/%ld/tokens", alice, ""},
        {"POST", "/v1/users/%ld/tokens", alice, "{\"name\":\"stolen\"}"},
        {"DELETE", "/v1/tokens/%ld", alice_token, ""},
    };
    for (size_t i = 0; i < sizeof tries / sizeof *tries; i++) {
        char p[128];
        if (strchr(tries[i].path, '%'))
            snprintf(p, sizeof p, tries[i].path, tries[i].id);
        else
            snprintf(p, sizeof p, "%s", tries[i].path);
        expect_404(tries[i].method, p, tries[i].body[0] ? tries[i].body : NULL);
    }
}

Test(isolation, lists_of_b_hold_nothing_of_a)
{
    static const char *const lists[] = {"/v1/jobs", "/v1/workspaces", "/v1/datasets",
                                        "/v1/tenants", NULL};
    for (int i = 0; lists[i]; i++) {
        th_resp r = th_get(&d, lists[i], tb);
        cr_expect_eq(r.status, 200, "%s", lists[i]);
        cr_expect_null(strstr(r.body, "secret"), "%s leaked: %s", lists[i], r.body);
        cr_expect_null(strstr(r.body, "tenant-a"), "%s leaked: %s", lists[i], r.body);
        th_free(&r);
    }
}

Test(isolation, nothing_of_a_changed_by_b)
{
    /* After every attempt above, A's objects are intact. */
    char p[64];
    cr_expect_eq(th_cancel(&d, tb, job), 404);
    th_resp r = th_del(&d, "/v1/workspaces/secret-ws/files/train.py", tb);
    th_free(&r);
    snprintf(p, sizeof p, "/v1/jobs/%ld", job);
    r = th_get(&d, p, ta);
    cr_expect_str_eq(th_str(&r, "state"), "PENDING");
    th_free(&r);
    r = th_get(&d, "/v1/workspaces/secret-ws/files/train.py", ta);
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(r.body, "secret");
    th_free(&r);
    r = th_get(&d, "/v1/whoami", ta);
    cr_expect_eq(r.status, 200, "alice's token was revoked by another tenant");
    th_free(&r);
}

Test(isolation, b_cannot_use_a_dataset_or_workspace_in_a_job)
{
    th_resp r = th_post(&d, "/v1/workspaces", tb, "{\"name\":\"mine\"}");
    th_free(&r);
    r = th_put_file(&d, "/v1/workspaces/mine/files/t.py", tb, "x", 1);
    th_free(&r);
    th_expect_error(th_post(&d, "/v1/jobs", tb,
                            "{\"name\":\"j\",\"image\":\"pytorch\",\"datasets\":[\"secret-ds\"],"
                            "\"workspace\":\"mine\",\"code_path\":\"t.py\",\"epochs\":1,\"lr\":0.1,"
                            "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}"),
                    422, NULL, "datasets");
    th_expect_error(th_post(&d, "/v1/jobs", tb,
                            "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"secret-ws\","
                            "\"code_path\":\"train.py\",\"epochs\":1,\"lr\":0.1,"
                            "\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}"),
                    422, NULL, "workspace");
}

Test(isolation, public_datasets_are_readable_but_not_writable)
{
    th_must(th_post(&d, "/v1/datasets", TH_ADMIN, "{\"name\":\"mnist-public\"}"), 201);
    th_must(th_put_file(&d, "/v1/datasets/mnist-public/files/a", TH_ADMIN, "pub", 3), 201);
    th_resp r = th_get(&d, "/v1/datasets/mnist-public/files/a", tb);
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(r.body, "pub");
    th_free(&r);
    r = th_get(&d, "/v1/datasets", tb);
    cr_expect(strstr(r.body, "mnist-public") != NULL);
    th_free(&r);
    th_expect(th_put_file(&d, "/v1/datasets/mnist-public/files/a", tb, "evil", 4), 403);
    th_expect(th_del(&d, "/v1/datasets/mnist-public", tb), 403);
}
