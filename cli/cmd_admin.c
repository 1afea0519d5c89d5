/*
 * cmd_admin: tenants, users, tokens, nodes and join tokens (what tenant
 * and platform admins do; cohortd decides who may).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "lib/fmt.h"
#include "cli/out.h"

/* POSTs {"name": name, extra...} to path and prints what was made. */
static int create_named(cli *c, const char *path, cJSON *body, const char *what)
{
    char *s = cJSON_PrintUnformatted(body);
    cJSON *o = NULL;
    int rc = s ? cli_post_json(c, path, s, &o) : CLI_FAILED;
    if (rc == CLI_OK && c->json) {
        out_json(c, o);
    } else if (rc == CLI_OK) {
        char id[32];
        out_text(out_find(o, "id"), id, sizeof id);
        printf("%s %s made (id %s)\n", what, cJSON_GetStringValue(out_find(o, "name")) ?: "?", id);
    }
    cJSON_Delete(o);
    free(s);
    return rc;
}

int cmd_tenants(cli *c, int argc, char **argv)
{
    static const out_col cols[] = {
        {"ID", "id", NULL}, {"NAME", "name", NULL}, {"CREATED", "created_at", NULL},
    };
    (void)argv;
    if (argc != 1)
        return cli_usage("tenants takes no argument");
    return out_list_get(c, "/v1/tenants", cols, sizeof cols / sizeof *cols);
}

int cmd_tenant(cli *c, int argc, char **argv)
{
    if (argc != 3 || strcmp(argv[1], "create"))
        return cli_usage("tenant create NAME");
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "name", argv[2]);
    int rc = create_named(c, "/v1/tenants", b, "tenant");
    cJSON_Delete(b);
    return rc;
}

/* The caller's tenant into out. */
static int my_tenant(cli *c, char *out, size_t n, int64_t *my_id)
{
    cJSON *me = NULL;
    int rc = cli_get_json(c, "/v1/whoami", &me);
    if (rc == CLI_OK) {
        fmt_cut(out, n, "%s", cJSON_GetStringValue(out_find(me, "tenant")) ?: "");
        const cJSON *id = out_find(me, "user_id");
        if (my_id)
            *my_id = cJSON_IsNumber(id) ? (int64_t)id->valuedouble : 0;
    }
    cJSON_Delete(me);
    return rc;
}

static void users_path(util_buf *p, const char *tenant)
{
    util_buf_printf(p, "/v1/tenants/");
    cli_escape(p, tenant);
    util_buf_printf(p, "/users");
}

int cmd_users(cli *c, int argc, char **argv)
{
    static const out_col cols[] = {
        {"ID", "id", NULL}, {"NAME", "name", NULL}, {"ROLE", "role", NULL},
        {"CREATED", "created_at", NULL},
    };
    char tenant[UTIL_NAME_MAX + 1];
    if (argc > 2)
        return cli_usage("users takes at most a tenant");
    int rc = argc == 2 ? (fmt_whole(tenant, sizeof tenant, "%s", argv[1]) == 0
                              ? CLI_OK
                              : cli_usage("a tenant's name has at most %d bytes", UTIL_NAME_MAX))
                       : my_tenant(c, tenant, sizeof tenant, NULL);
    if (rc)
        return rc;
    util_buf p = {0};
    users_path(&p, tenant);
    rc = p.oom ? CLI_FAILED : out_list_get(c, p.buf, cols, sizeof cols / sizeof *cols);
    free(p.buf);
    return rc;
}

int cmd_user(cli *c, int argc, char **argv)
{
    static const struct option opts[] = {{"role", required_argument, 0, 'r'}, {0, 0, 0, 0}};
    const char *role = "member";
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "r:", opts, NULL)) != -1) {
        if (opt != 'r')
            return CLI_USAGE;
        role = optarg;
    }
    if (argc - optind != 3 || strcmp(argv[optind], "create"))
        return cli_usage("user create TENANT NAME [--role ROLE]");
    util_buf p = {0};
    users_path(&p, argv[optind + 1]);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "name", argv[optind + 2]);
    cJSON_AddStringToObject(b, "role", role);
    int rc = p.oom ? CLI_FAILED : create_named(c, p.buf, b, "user");
    cJSON_Delete(b);
    free(p.buf);
    return rc;
}

/* A positive whole number in s, quietly: 1 with *v set, or 0. */
static int number(const char *s, int64_t *v)
{
    char *end;
    long long n = s && *s ? strtoll(s, &end, 10) : 0;
    if (n < 1 || *end)
        return 0;
    *v = n;
    return 1;
}

/* The id of user spec: a number, NAME in the caller's tenant, or
 * TENANT/NAME; NULL for the caller. */
static int user_id_of(cli *c, const char *spec, int64_t *id)
{
    char tenant[UTIL_NAME_MAX + 1] = "";
    int64_t mine = 0;
    if (spec && number(spec, id))
        return CLI_OK;
    const char *slash = spec ? strchr(spec, '/') : NULL;
    const char *name = slash ? slash + 1 : spec;
    int rc = CLI_OK;
    if (slash && (size_t)(slash - spec) < sizeof tenant)
        fmt_cut(tenant, sizeof tenant, "%.*s", (int)(slash - spec), spec);
    else
        rc = my_tenant(c, tenant, sizeof tenant, &mine);
    if (rc || !spec) {
        *id = mine;
        return rc;
    }
    util_buf p = {0};
    users_path(&p, tenant);
    cJSON *items = NULL;
    rc = p.oom ? CLI_FAILED : cli_list(c, p.buf, "items", 1, &items, NULL);
    free(p.buf);
    *id = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, items) {
        const char *nm = cJSON_GetStringValue(out_find(it, "name"));
        if (nm && !strcmp(nm, name) && cJSON_IsNumber(out_find(it, "id")))
            *id = (int64_t)out_find(it, "id")->valuedouble;
    }
    cJSON_Delete(items);
    if (rc == CLI_OK && !*id)
        rc = cli_fail(CLI_REFUSED, "no user %s in tenant %s", name, tenant);
    return rc;
}

int cmd_token(cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"name", required_argument, 0, 'n'}, {"expires", required_argument, 0, 'e'},
        {0, 0, 0, 0},
    };
    const char *name = "cli";
    int64_t expires = 0, uid;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "n:e:", opts, NULL)) != -1) {
        if (opt == 'n')
            name = optarg;
        else if (opt != 'e' || cli_id(optarg, "--expires (seconds)", &expires))
            return CLI_USAGE;
    }
    if (argc - optind < 1 || argc - optind > 2 || strcmp(argv[optind], "create"))
        return cli_usage("token create [USER] [--name NAME] [--expires SECONDS]");
    int rc = user_id_of(c, argc - optind == 2 ? argv[optind + 1] : NULL, &uid);
    if (rc)
        return rc;
    cJSON *b = cJSON_CreateObject(), *o = NULL;
    cJSON_AddStringToObject(b, "name", name);
    if (expires)
        cJSON_AddNumberToObject(b, "expires_in_seconds", (double)expires);
    char *s = cJSON_PrintUnformatted(b), path[64];
    fmt_cut(path, sizeof path, "/v1/users/%lld/tokens", (long long)uid);
    rc = s ? cli_post_json(c, path, s, &o) : CLI_FAILED;
    if (rc == CLI_OK && c->json) {
        out_json(c, o);
    } else if (rc == CLI_OK) { /* the secret alone on stdout, for `> FILE` */
        char id[32];
        out_text(out_find(o, "id"), id, sizeof id);
        printf("%s\n", cJSON_GetStringValue(out_find(o, "token")) ?: "");
        fprintf(stderr, "cohort: token %s for user %lld: shown this once, keep it\n", id,
                (long long)uid);
    }
    cJSON_Delete(o);
    cJSON_Delete(b);
    free(s);
    return rc;
}

/* ---- nodes ---- */

static void fmt_cpus(const cJSON *o, char *b, size_t n)
{
    char used[16], cap[16];
    out_text(out_find(o, "allocated.cpus"), used, sizeof used);
    out_text(out_find(o, "capacity.cpus"), cap, sizeof cap);
    fmt_cut(b, n, "%s/%s", used, cap);
}

static void fmt_gpus(const cJSON *o, char *b, size_t n)
{
    char used[16], cap[16];
    out_text(out_find(o, "allocated.gpus"), used, sizeof used);
    out_text(out_find(o, "capacity.gpus"), cap, sizeof cap);
    fmt_cut(b, n, "%s/%s", used, cap);
}

int cmd_nodes(cli *c, int argc, char **argv)
{
    static const out_col cols[] = {
        {"ID", "id", NULL},          {"NAME", "name", NULL},       {"STATE", "state", NULL},
        {"DRAINED", "drained", NULL}, {"NETWORK", "network", NULL}, {"CPUS", NULL, fmt_cpus},
        {"GPUS", NULL, fmt_gpus},    {"WORKERS", "allocated.workers", NULL},
        {"ADDRESS", "address", NULL},
    };
    (void)argv;
    if (argc != 1)
        return cli_usage("nodes takes no argument");
    return out_list_get(c, "/v1/nodes", cols, sizeof cols / sizeof *cols);
}

/* A node's id from its id or name. */
static int node_id_of(cli *c, const char *spec, int64_t *id)
{
    if (number(spec, id))
        return CLI_OK;
    cJSON *items = NULL;
    int rc = cli_list(c, "/v1/nodes", "items", 1, &items, NULL);
    *id = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, items) {
        const char *nm = cJSON_GetStringValue(out_find(it, "name"));
        if (nm && !strcmp(nm, spec) && cJSON_IsNumber(out_find(it, "id")))
            *id = (int64_t)out_find(it, "id")->valuedouble;
    }
    cJSON_Delete(items);
    if (rc == CLI_OK && !*id)
        rc = cli_fail(CLI_REFUSED, "no node %s", spec);
    return rc;
}

int cmd_node(cli *c, int argc, char **argv)
{
    /* what each action posts (NULL: DELETE of the node), and what it says */
    static const struct {
        const char *verb, *post, *said;
    } acts[] = {
        {"drain", "drain", "drained"},
        {"undrain", "undrain", "undrained"},
        {"rm", NULL, "removed"},
        {"rotate-token", "rotate-token",
         "a new token is sent with its next heartbeat; the old one is refused once it is used"},
    };
    size_t a = 0;
    while (argc == 3 && a < sizeof acts / sizeof *acts && strcmp(argv[1], acts[a].verb))
        a++;
    if (argc != 3 || a == sizeof acts / sizeof *acts)
        return cli_usage("node drain|undrain|rm|rotate-token NODE (its id or name)");
    int64_t id;
    int rc = node_id_of(c, argv[2], &id);
    if (rc)
        return rc;
    char path[64];
    if (!acts[a].post) {
        fmt_cut(path, sizeof path, "/v1/nodes/%lld", (long long)id);
        cli_resp r;
        cli_req rq = CLI_REQ("DELETE", path);
        rc = cli_request(c, &rq, &r);
        cli_resp_free(&r);
    } else {
        fmt_cut(path, sizeof path, "/v1/nodes/%lld/%s", (long long)id, acts[a].post);
        rc = cli_post_json(c, path, NULL, NULL);
    }
    if (rc == CLI_OK)
        printf("node %s: %s\n", argv[2], acts[a].said);
    return rc;
}

int cmd_join_token(cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"uses", required_argument, 0, 'u'}, {"expires", required_argument, 0, 'e'},
        {0, 0, 0, 0},
    };
    static const out_col cols[] = {
        {"ID", "id", NULL},           {"STATE", "state", NULL}, {"USES", "uses", NULL},
        {"USED", "used", NULL},       {"EXPIRES", "expires_at", NULL},
    };
    int64_t uses = -1, expires = 0, id;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "u:e:", opts, NULL)) != -1) {
        if (opt == 'u' && !strcmp(optarg, "0"))
            uses = 0;
        else if (opt == 'u' && cli_id(optarg, "--uses", &uses) == 0)
            continue;
        else if (opt != 'e' || cli_id(optarg, "--expires (seconds)", &expires))
            return CLI_USAGE;
    }
    const char *verb = optind < argc ? argv[optind] : "create";
    if (!strcmp(verb, "ls") && optind + 1 == argc)
        return out_list_get(c, "/v1/nodes/join-tokens", cols, sizeof cols / sizeof *cols);
    if (!strcmp(verb, "revoke") && optind + 2 == argc) {
        if (cli_id(argv[optind + 1], "the join token's id", &id))
            return CLI_USAGE;
        char path[64];
        fmt_cut(path, sizeof path, "/v1/nodes/join-tokens/%lld", (long long)id);
        cli_resp r;
        cli_req rq = CLI_REQ("DELETE", path);
        int rc = cli_request(c, &rq, &r);
        cli_resp_free(&r);
        if (rc == CLI_OK)
            printf("join token %lld revoked\n", (long long)id);
        return rc;
    }
    if (strcmp(verb, "create") || argc - optind > 1)
        return cli_usage("join-token [create] [--uses N] [--expires SECONDS] | ls | revoke ID");
    cJSON *b = cJSON_CreateObject(), *o = NULL;
    if (uses >= 0)
        cJSON_AddNumberToObject(b, "uses", (double)uses);
    if (expires)
        cJSON_AddNumberToObject(b, "expires_in_seconds", (double)expires);
    char *s = cJSON_PrintUnformatted(b);
    int rc = s ? cli_post_json(c, "/v1/nodes/join-tokens", s, &o) : CLI_FAILED;
    if (rc == CLI_OK && c->json) {
        out_json(c, o);
    } else if (rc == CLI_OK) {
        char tid[32], exp[48];
        out_text(out_find(o, "id"), tid, sizeof tid);
        out_text(out_find(o, "expires_at"), exp, sizeof exp);
        printf("%s\n", cJSON_GetStringValue(out_find(o, "token")) ?: "");
        fprintf(stderr, "cohort: join token %s, until %s: give it to cohort-agent --join-token\n",
                tid, exp);
    }
    cJSON_Delete(o);
    cJSON_Delete(b);
    free(s);
    return rc;
}
