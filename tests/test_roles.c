/*
 * Roles: a viewer cannot submit, a member cannot create users, a tenant
 * admin cannot touch another tenant or the catalog.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/harness.h"

static th_daemon d;
static char viewer[80], member[80], tadmin[80], other_admin[80];

#define JOB                                                                                    \
    "{\"name\":\"j\",\"image\":\"pytorch\",\"workspace\":\"ws\",\"code_path\":\"t.py\","      \
    "\"epochs\":1,\"lr\":0.1,\"batch_size\":8,\"worker_spec\":\"cpu-small\",\"worker_count\":1}"

static void setup(void)
{
    th_start(&d, NULL);
    th_user(&d, "acme", "vera", "viewer", viewer);
    th_user(&d, "acme", "mark", "member", member);
    th_user(&d, "acme", "tara", "tenant_admin", tadmin);
    th_user(&d, "globex", "gus", "tenant_admin", other_admin);
    th_must(th_post(&d, "/v1/workspaces", member, "{\"name\":\"ws\"}"), 201);
    th_must(th_put_file(&d, "/v1/workspaces/ws/files/t.py", member, "x", 1), 201);
}

static void teardown(void)
{
    cr_expect_eq(th_stop(&d), 0);
    th_cleanup(&d);
}

TestSuite(roles, .init = setup, .fini = teardown, .timeout = 120);

static void expect_status(long want, const char *method, const char *path, const char *tok,
                          const char *body)
{
    th_resp r = th_req(&d, method, path, tok, body ? "application/json" : NULL, body,
                       body ? strlen(body) : 0, NULL);
    cr_expect_eq(r.status, want, "%s %s: want %ld, got %ld %s", method, path, want, r.status,
                 r.body);
    th_free(&r);
}

Test(roles, viewer_reads_but_cannot_change)
{
    expect_status(403, "POST", "/v1/jobs", viewer, JOB);
    expect_status(403, "POST", "/v1/workspaces", viewer, "{\"name\":\"w2\"}");
    expect_status(403, "PUT", "/v1/workspaces/ws/files/x", viewer, "{}");
    expect_status(403, "DELETE", "/v1/workspaces/ws/files/t.py", viewer, NULL);
    expect_status(200, "GET", "/v1/jobs", viewer, NULL);
    expect_status(200, "GET", "/v1/workspaces/ws/files/t.py", viewer, NULL);
    /* The member's job exists; the viewer sees it but cannot cancel it. */
    char p[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/cancel", th_submit(&d, member, JOB));
    expect_status(403, "POST", p, viewer, NULL);
    expect_status(200, "POST", p, member, NULL);
}

Test(roles, member_cannot_manage_users_or_others_tokens)
{
    expect_status(403, "POST", "/v1/tenants/acme/users", member,
                  "{\"name\":\"newbie\",\"role\":\"member\"}");
    expect_status(201, "POST", "/v1/tenants/acme/users", tadmin,
                  "{\"name\":\"newbie\",\"role\":\"member\"}");
    /* tara may mint tokens for vera; mark may not. */
    th_resp r = th_get(&d, "/v1/whoami", viewer);
    char p[64];
    snprintf(p, sizeof p, "/v1/users/%ld/tokens", (long)th_num(&r, "user_id"));
    th_free(&r);
    expect_status(403, "POST", p, member, "{\"name\":\"x\"}");
    expect_status(201, "POST", p, tadmin, "{\"name\":\"x\"}");
    /* Only a platform admin makes platform admins, and only in the platform tenant. */
    expect_status(422, "POST", "/v1/tenants/acme/users", tadmin,
                  "{\"name\":\"boss\",\"role\":\"platform_admin\"}");
}

/* A tenant admin of the platform tenant is still no platform admin: it
 * makes none, mints no token of one, and reads or revokes none of theirs. */
Test(roles, the_platform_tenants_admin_cannot_become_a_platform_admin)
{
    char padmin[80], boss[80], p[96];
    th_user(&d, "platform", "pat", "tenant_admin", padmin);
    long boss_id = th_user(&d, "platform", "boss", "platform_admin", boss);
    expect_status(403, "POST", "/v1/tenants/platform/users", padmin,
                  "{\"name\":\"usurper\",\"role\":\"platform_admin\"}");
    snprintf(p, sizeof p, "/v1/users/%ld/tokens", boss_id);
    expect_status(403, "POST", p, padmin, "{\"name\":\"stolen\"}");
    expect_status(403, "GET", p, padmin, NULL);
    th_resp r = th_get(&d, "/v1/whoami", boss);
    char tp[64];
    snprintf(tp, sizeof tp, "/v1/tokens/%ld", (long)th_num(&r, "token_id"));
    th_free(&r);
    expect_status(403, "DELETE", tp, padmin, NULL);
    /* and so its own token still reads as a tenant admin's, the boss's lives */
    r = th_get(&d, "/v1/whoami", padmin);
    cr_expect_str_eq(th_str(&r, "role"), "tenant_admin");
    th_free(&r);
    expect_status(200, "GET", "/v1/whoami", boss, NULL);
    expect_status(403, "POST", "/v1/tenants", padmin, "{\"name\":\"newco\"}");
    /* a platform admin still does both */
    expect_status(201, "POST", "/v1/tenants/platform/users", boss,
                  "{\"name\":\"second\",\"role\":\"platform_admin\"}");
    expect_status(201, "POST", p, boss, "{\"name\":\"mine\"}");
}

Test(roles, tenant_admin_cannot_touch_other_tenants_or_catalog)
{
    expect_status(404, "POST", "/v1/tenants/globex/users", tadmin,
                  "{\"name\":\"mole\",\"role\":\"tenant_admin\"}");
    expect_status(403, "POST", "/v1/tenants", tadmin, "{\"name\":\"newco\"}");
    expect_status(403, "POST", "/v1/worker-specs", tadmin,
                  "{\"name\":\"cheap\",\"cpus\":1,\"memory_mb\":1,\"price_per_hour\":0,"
                  "\"currency\":\"USD\"}");
    expect_status(403, "PUT", "/v1/worker-specs/cpu-small", tadmin, "{\"price_per_hour\":0}");
    /* A tenant admin's image is private to its tenant (test_containers
     * runs one); a member registers none. */
    expect_status(201, "POST", "/v1/images", tadmin,
                  "{\"name\":\"x\",\"reference\":\"cohort/x:1\",\"framework\":\"native\"}");
    th_resp r = th_get(&d, "/v1/worker-specs/cpu-small", tadmin);
    cr_expect_eq(th_num(&r, "price_per_hour"), 5, "the price changed");
    th_free(&r);
    /* Tenants listing shows a tenant admin only its own tenant. */
    r = th_get(&d, "/v1/tenants", tadmin);
    cr_expect_eq(th_items(&r), 1);
    cr_expect_null(strstr(r.body, "globex"));
    th_free(&r);
}
