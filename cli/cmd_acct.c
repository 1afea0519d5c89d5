/*
 * cmd_acct: login, logout, whoami; quota, usage, invoice; images, specs.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cmd.h"
#include "lib/fmt.h"
#include "cli/out.h"

/* ---- login ---- */

/* Reads a token from stdin (without echo on a terminal) into out. */
static int read_token(const char *url, char *out, size_t n)
{
    struct termios old, quiet;
    int tty = isatty(0) && tcgetattr(0, &old) == 0;
    if (tty) {
        fprintf(stderr, "API token for %s: ", url);
        quiet = old;
        quiet.c_lflag &= ~(tcflag_t)ECHO;
        tcsetattr(0, TCSAFLUSH, &quiet);
    }
    char *got = fgets(out, (int)n, stdin);
    if (tty) {
        tcsetattr(0, TCSAFLUSH, &old);
        fputc('\n', stderr);
    }
    if (!got)
        return -1;
    size_t len = strcspn(out, "\r\n");
    if (out[len] == '\0' && len == n - 1)
        return -1; /* longer than any token */
    out[len] = '\0';
    while (len && (out[len - 1] == ' ' || out[len - 1] == '\t'))
        out[--len] = '\0';
    return len ? 0 : -1;
}

int cmd_login(cli *c, int argc, char **argv)
{
    if (argc > 2)
        return cli_usage("login takes the server's URL");
    if (argc == 2) {
        if (strncmp(argv[1], "http://", 7) && strncmp(argv[1], "https://", 8))
            return cli_usage("the URL starts http:// or https://, not '%s'", argv[1]);
        if (fmt_whole(c->url, sizeof c->url, "%s", argv[1]) != 0)
            return cli_usage("the URL is too long");
        size_t n = strlen(c->url);
        while (n && c->url[n - 1] == '/')
            c->url[--n] = '\0';
    }
    if (!c->url[0])
        return cli_usage("login takes the server's URL (http://HOST:PORT)");
    if (read_token(c->url, c->token, sizeof c->token) != 0)
        return cli_fail(CLI_USAGE, "no token read (give it on stdin: cohort login URL < FILE)");
    cJSON *me = NULL;
    int rc = cli_get_json(c, "/v1/whoami", &me);
    if (rc == CLI_OK && cli_config_save(c->url, c->token) != 0)
        rc = CLI_FAILED;
    if (rc == CLI_OK) {
        char path[4096];
        cli_config_path(path, sizeof path);
        printf("logged in to %s as %s (%s) of %s; saved in %s\n", c->url,
               cJSON_GetStringValue(out_find(me, "user")) ?: "?",
               cJSON_GetStringValue(out_find(me, "role")) ?: "?",
               cJSON_GetStringValue(out_find(me, "tenant")) ?: "?", path);
    }
    cJSON_Delete(me);
    return rc;
}

int cmd_logout(cli *c, int argc, char **argv)
{
    (void)argv;
    if (argc != 1)
        return cli_usage("logout takes no argument");
    return cli_config_save(c->url, "") == 0 ? CLI_OK : CLI_FAILED;
}

int cmd_whoami(cli *c, int argc, char **argv)
{
    static const out_col rows[] = {
        {"user", "user", NULL}, {"user id", "user_id", NULL}, {"tenant", "tenant", NULL},
        {"role", "role", NULL}, {"token id", "token_id", NULL},
    };
    (void)argv;
    if (argc != 1)
        return cli_usage("whoami takes no argument");
    cJSON *me = NULL;
    int rc = cli_get_json(c, "/v1/whoami", &me);
    if (rc == CLI_OK && c->json)
        out_json(c, me);
    else if (rc == CLI_OK && c->fields)
        rc = out_view(c, me, rows, 5);
    else if (rc == CLI_OK)
        printf("%s (%s) of %s at %s\n", cJSON_GetStringValue(out_find(me, "user")) ?: "?",
               cJSON_GetStringValue(out_find(me, "role")) ?: "?",
               cJSON_GetStringValue(out_find(me, "tenant")) ?: "?", c->url);
    cJSON_Delete(me);
    return rc;
}

/* ---- money ---- */

static const char *cur_of(const cJSON *o)
{
    return cJSON_GetStringValue(out_find(o, "money.currency"))
               ?: cJSON_GetStringValue(out_find(o, "currency"));
}

static void limit_row(const cJSON *q, const char *key, const char *head)
{
    char used[32], lim[32];
    const cJSON *l = out_find(out_find(q, key), "limit");
    out_text(out_find(out_find(q, key), "used"), used, sizeof used);
    out_text(l, lim, sizeof lim);
    if (!strcmp(key, "storage_bytes")) {
        const cJSON *u = out_find(out_find(q, key), "used");
        out_bytes(cJSON_IsNumber(u) ? u->valuedouble : 0, used, sizeof used);
        if (cJSON_IsNumber(l))
            out_bytes(l->valuedouble, lim, sizeof lim);
    }
    printf("%-14s %s of %s\n", head, used, cJSON_IsNumber(l) ? lim : "no limit");
}

static void money_row(const cJSON *q, const char *key, const char *head)
{
    char buf[48];
    const cJSON *v = out_find(q, key);
    if (cJSON_IsNumber(v))
        out_money(v->valuedouble, cur_of(q), buf, sizeof buf);
    else
        fmt_cut(buf, sizeof buf, "no limit");
    printf("%-14s %s\n", head, buf);
}

int cmd_quota(cli *c, int argc, char **argv)
{
    (void)argv;
    if (argc != 1)
        return cli_usage("quota takes no argument");
    cJSON *q = NULL;
    int rc = cli_get_json(c, "/v1/quota", &q);
    if (rc == CLI_OK && (c->json || c->fields)) {
        if (c->json)
            out_json(c, q);
        else
            rc = out_view(c, q, NULL, 0);
    } else if (rc == CLI_OK) {
        printf("%-14s %s\n", "tenant", cJSON_GetStringValue(out_find(q, "tenant")) ?: "?");
        limit_row(q, "running_jobs", "running jobs");
        limit_row(q, "pending_jobs", "pending jobs");
        limit_row(q, "workers", "workers");
        limit_row(q, "cpus", "cpus");
        limit_row(q, "gpus", "gpus");
        limit_row(q, "storage_bytes", "storage");
        money_row(q, "money.balance", "balance");
        money_row(q, "money.held", "held");
        money_row(q, "money.spent_this_month", "spent (month)");
        money_row(q, "money.monthly_cap", "monthly cap");
        money_row(q, "money.available", "available");
    }
    cJSON_Delete(q);
    return rc;
}

static void fmt_amount(const cJSON *o, char *b, size_t n)
{
    const cJSON *v = out_find(o, "amount");
    if (cJSON_IsNumber(v))
        out_money(v->valuedouble, cJSON_GetStringValue(out_find(o, "currency")), b, n);
    else
        fmt_cut(b, n, "-");
}

/* Prints a CSV export of path (Accept: text/csv) to stdout. */
static int csv(cli *c, const char *path)
{
    cli_resp r;
    cli_req rq = CLI_REQ("GET", path);
    rq.accept = "text/csv";
    int rc = cli_request(c, &rq, &r);
    if (rc == CLI_OK)
        fwrite(r.body.buf ? r.body.buf : "", 1, r.body.len, stdout);
    cli_resp_free(&r);
    return rc;
}

/* The currency of the page onto each item, for the amount column. */
static void stamp_currency(cJSON *items, const cJSON *page)
{
    const char *cur = cJSON_GetStringValue(out_find(page, "currency"));
    cJSON *it;
    cJSON_ArrayForEach(it, items) {
        if (cur && !cJSON_GetObjectItemCaseSensitive(it, "currency"))
            cJSON_AddStringToObject(it, "currency", cur);
    }
}

int cmd_usage(cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"by", required_argument, 0, 'b'}, {"from", required_argument, 0, 'F'},
        {"to", required_argument, 0, 'T'}, {"csv", no_argument, 0, 'c'},
        {0, 0, 0, 0},
    };
    const char *by = "day", *from = NULL, *to = NULL;
    int as_csv = 0, opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt == 'b')
            by = optarg;
        else if (opt == 'F')
            from = optarg;
        else if (opt == 'T')
            to = optarg;
        else if (opt == 'c')
            as_csv = 1;
        else
            return CLI_USAGE;
    }
    if (optind != argc)
        return cli_usage("usage takes no argument '%s'", argv[optind]);
    util_buf p = {0};
    util_buf_printf(&p, "/v1/usage?group_by=");
    cli_escape(&p, by);
    if (from) {
        util_buf_printf(&p, "&from=");
        cli_escape(&p, from);
    }
    if (to) {
        util_buf_printf(&p, "&to=");
        cli_escape(&p, to);
    }
    if (as_csv) {
        int rc = csv(c, p.buf);
        free(p.buf);
        return rc;
    }
    cJSON *items = NULL, *page = NULL;
    int rc = cli_list(c, p.buf, "items", 1, &items, &page);
    free(p.buf);
    if (rc == CLI_OK && c->json) {
        cJSON_AddItemReferenceToObject(page, "items", items);
        out_json(c, page);
    } else if (rc == CLI_OK) {
        const char *key = !strcmp(by, "job") ? "job_id" : !strcmp(by, "user") ? "user" : by;
        int job = !strcmp(by, "job");
        out_col cols[] = {
            {job ? "JOB" : !strcmp(by, "user") ? "USER" : !strcmp(by, "day") ? "DAY" : "SPEC", key, NULL},
            {"NAME", "job_name", NULL},
            {"WORKER_S", "worker_seconds", NULL}, {"GPU_S", "gpu_seconds", NULL},
            {"AMOUNT", NULL, fmt_amount},
        };
        if (!job) /* the name column is the job's */
            memmove(&cols[1], &cols[2], 3 * sizeof *cols);
        stamp_currency(items, page);
        rc = out_table(c, items, cols, job ? 5 : 4);
        if (rc == CLI_OK && !c->fields) {
            char total[48], from_s[32], to_s[32];
            const cJSON *t = out_find(page, "total.amount");
            out_money(cJSON_IsNumber(t) ? t->valuedouble : 0, cur_of(page), total, sizeof total);
            out_text(out_find(page, "from"), from_s, sizeof from_s);
            out_text(out_find(page, "to"), to_s, sizeof to_s);
            printf("total %s from %s to %s\n", total, from_s, to_s);
        }
    }
    cJSON_Delete(items);
    cJSON_Delete(page);
    return rc;
}

int cmd_invoice(cli *c, int argc, char **argv)
{
    static const struct option opts[] = {{"csv", no_argument, 0, 'c'}, {0, 0, 0, 0}};
    int as_csv = 0, opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt != 'c')
            return CLI_USAGE;
        as_csv = 1;
    }
    if (argc - optind > 1)
        return cli_usage("invoice takes at most a month (YYYY-MM)");
    char month[16];
    if (optind < argc) {
        int64_t a, b;
        if (util_parse_month(argv[optind], &a, &b) != 0)
            return cli_usage("the month is YYYY-MM, not '%s'", argv[optind]);
        fmt_cut(month, sizeof month, "%s", argv[optind]);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(month, sizeof month, "%Y-%m", &tm);
    }
    char path[64];
    fmt_cut(path, sizeof path, "/v1/invoices/%s", month);
    if (as_csv)
        return csv(c, path);
    cJSON *items = NULL, *page = NULL;
    int rc = cli_list(c, path, "lines", 1, &items, &page);
    if (rc == CLI_OK && c->json) {
        cJSON_AddItemReferenceToObject(page, "lines", items);
        out_json(c, page);
    } else if (rc == CLI_OK) {
        static const out_col cols[] = {
            {"JOB", "job_id", NULL},        {"NAME", "job_name", NULL},
            {"WORKER_S", "worker_seconds", NULL}, {"GPU_S", "gpu_seconds", NULL},
            {"AMOUNT", NULL, fmt_amount},
        };
        stamp_currency(items, page);
        rc = out_table(c, items, cols, sizeof cols / sizeof *cols);
        if (rc == CLI_OK && !c->fields) {
            char total[48], credits[48];
            const cJSON *t = out_find(page, "total"), *cr = out_find(page, "credits_total");
            out_money(cJSON_IsNumber(t) ? t->valuedouble : 0, cur_of(page), total, sizeof total);
            out_money(cJSON_IsNumber(cr) ? cr->valuedouble : 0, cur_of(page), credits,
                      sizeof credits);
            printf("%s: total %s, credits %s%s\n", month, total, credits,
                   cJSON_IsTrue(out_find(page, "final")) ? " (final)" : " (month not over)");
        }
    }
    cJSON_Delete(items);
    cJSON_Delete(page);
    return rc;
}

/* ---- the catalogue ---- */

static int simple_list(cli *c, int argc, const char *path, const out_col *cols, size_t n)
{
    if (argc != 1)
        return cli_usage("this command takes no argument");
    return out_list_get(c, path, cols, n);
}

int cmd_images(cli *c, int argc, char **argv)
{
    static const out_col cols[] = {
        {"NAME", "name", NULL}, {"FRAMEWORK", "framework", NULL},
        {"VISIBILITY", "visibility", NULL}, {"REFERENCE", "reference", NULL},
    };
    (void)argv;
    return simple_list(c, argc, "/v1/images", cols, sizeof cols / sizeof *cols);
}

static void fmt_price(const cJSON *o, char *b, size_t n)
{
    const cJSON *v = out_find(o, "price_per_hour");
    out_money(cJSON_IsNumber(v) ? v->valuedouble : 0, cJSON_GetStringValue(out_find(o, "currency")),
              b, n);
}

int cmd_specs(cli *c, int argc, char **argv)
{
    static const out_col cols[] = {
        {"NAME", "name", NULL},          {"CPUS", "cpus", NULL},
        {"MEMORY_MB", "memory_mb", NULL}, {"GPUS", "gpus", NULL},
        {"GPU_TYPE", "gpu_type", NULL},   {"PRICE/WORKER-HOUR", NULL, fmt_price},
    };
    (void)argv;
    return simple_list(c, argc, "/v1/worker-specs", cols, sizeof cols / sizeof *cols);
}
