/*
 * api_billing: money over HTTP.  Quotes, a job's cost per attempt and rank,
 * usage grouped by day, job, user or worker spec, the caller's quota beside
 * its use and money, monthly invoices, and the platform admin's credits and
 * budget settings.  Tables answer in CSV too (Accept: text/csv).  Every
 * number comes from the ledger (store_bill.h) or, for ranks still running,
 * from the same billing rules at the time of the request.
 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "api/stuse.h"
#include "storage/store_bill.h"
#include "storage/store_catalog.h"
#include "storage/store_job.h"

/* ---- CSV ---- */

static int wants_csv(const api_req *rq)
{
    const char *a = rq->header ? rq->header(rq->h, "Accept") : NULL;
    return a && strstr(a, "text/csv") != NULL;
}

/* One text field, quoted.  A leading = + - @ (or tab, CR) would make a
 * spreadsheet run it as a formula: such a field gets a leading ' . */
static void csv_text(util_buf *b, const char *s, int last)
{
    util_buf_append(b, "\"", 1);
    if (strchr("=+-@\t\r", s[0]) && s[0])
        util_buf_append(b, "'", 1);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            util_buf_append(b, "\"", 1);
        util_buf_append(b, p, 1);
    }
    util_buf_append(b, last ? "\"\r\n" : "\",", last ? 3 : 2);
}

static void csv_int(util_buf *b, int64_t v, int last)
{
    util_buf_printf(b, last ? "%lld\r\n" : "%lld,", (long long)v);
}

static void csv_time(util_buf *b, int64_t ms, int last)
{
    char t[32] = "";
    if (ms > 0)
        util_rfc3339(ms, t);
    util_buf_printf(b, last ? "%s\r\n" : "%s,", t);
}

static void csv_send(api_resp *rs, util_buf *b)
{
    if (b->oom) {
        free(b->buf);
        api_error(rs, 500, "internal", NULL, "out of memory");
        return;
    }
    free(rs->body);
    rs->body = b->buf ? b->buf : strdup("");
    rs->len = b->len;
    rs->status = 200;
    rs->ctype = "text/csv; charset=utf-8";
}

/* ---- whose numbers ---- */

int api_billing_tenant(api_ctx *ctx, const api_req *rq, int64_t *id, char *name, api_resp *rs)
{
    const char *want = rq->query(rq->h, "tenant");
    if (!want || !want[0] || !strcmp(want, rq->who->user.tenant)) {
        *id = api_tenant_of(rq->who);
        fmt_cut(name, UTIL_NAME_MAX + 1, "%s", rq->who->user.tenant);
        return 0;
    }
    store_tenant t;
    int rc = util_name_valid(want) ? store_tenant_by_name(ctx->st, want, &t) : STORE_NOTFOUND;
    if (rc == STORE_OK && !api_is_platform_admin(rq->who))
        rc = STORE_NOTFOUND; /* another tenant's numbers: as if it did not exist */
    if (rc != STORE_OK)
        return api_store_error(rs, rc, "tenant");
    *id = t.id;
    fmt_cut(name, UTIL_NAME_MAX + 1, "%s", t.name);
    return 0;
}

/* The tenant in the path: the caller's own or, for the platform admin, any. */
static int tenant_in_path(api_ctx *ctx, const api_req *rq, store_tenant *t, api_resp *rs)
{
    int rc = util_name_valid(rq->param[0]) ? store_tenant_by_name(ctx->st, rq->param[0], t)
                                           : STORE_NOTFOUND;
    if (rc == STORE_OK && !api_is_platform_admin(rq->who) && t->id != api_tenant_of(rq->who))
        rc = STORE_NOTFOUND;
    return rc == STORE_OK ? 0 : api_store_error(rs, rc, "tenant");
}

/* ---- quote ---- */

void api_quote(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"worker_spec", "worker_count", "workers_per_node",
                                         "max_runtime_seconds", NULL};
    const char *spec_name;
    int64_t count, max_rt = 0, per_node = 0, est;
    store_spec sp;
    cJSON *in = api_parse_object(rq, rs);
    if (!in || api_fields_known(in, fields, rs) ||
        api_name(in, "worker_spec", 1, &spec_name, rs) < 0 ||
        api_int(in, "worker_count", 1, 1, API_MAX_WORKERS, &count, rs) < 0 ||
        api_int(in, "workers_per_node", 0, 1, LAUNCH_MAX_PER_NODE, &per_node, rs) < 0 ||
        api_int(in, "max_runtime_seconds", 0, 1, API_MAX_RUNTIME, &max_rt, rs) < 0)
        goto out;
    /* What a create of the same shape refuses, refused alike, with its codes. */
    int rc = store_spec_get(ctx->st, spec_name, &sp);
    if (rc == STORE_NOTFOUND) {
        api_error(rs, 422, "not_found", "worker_spec", "no worker spec named '%s'", spec_name);
        goto out;
    }
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "worker spec");
        goto out;
    }
    if (per_node > 0 && count % per_node) {
        api_error(rs, 422, "invalid_value", "workers_per_node",
                  "worker_count must be a multiple of workers_per_node");
        goto out;
    }
    store_job shape = {0};
    shape.tenant_id = api_tenant_of(rq->who);
    shape.worker_count = count;
    shape.workers_per_node = per_node;
    shape.cpus = sp.cpus;
    shape.memory_mb = sp.memory_mb;
    shape.gpus = sp.gpus;
    if (api_job_estimate(sp.price_per_hour, count, max_rt, &est, rs) ||
        api_job_could_fit(ctx, &shape, rs))
        goto out;
    sched_config cfg = {.min_hold_s = ctx->min_hold_s, .budget_grace_s = ctx->budget_grace_s};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "worker_spec", sp.name);
    cJSON_AddNumberToObject(o, "worker_count", (double)count);
    cJSON_AddStringToObject(o, "currency", sp.currency);
    cJSON_AddNumberToObject(o, "price_per_worker_hour", (double)sp.price_per_hour);
    cJSON_AddNumberToObject(o, "price_per_hour", (double)(sp.price_per_hour * count));
    if (max_rt > 0) {
        cJSON_AddNumberToObject(o, "max_runtime_seconds", (double)max_rt);
        cJSON_AddNumberToObject(o, "estimated_max", (double)est);
    } else {
        cJSON_AddNullToObject(o, "max_runtime_seconds");
        cJSON_AddNullToObject(o, "estimated_max");
    }
    /* What admission sets aside; without a bound, a minimum that grows as it runs. */
    cJSON_AddNumberToObject(o, "hold", (double)sched_hold(&cfg, sp.price_per_hour, count, max_rt));
    cJSON_AddNumberToObject(o, "min_hold_seconds", (double)ctx->min_hold_s);
    api_json(rs, 200, o);
out:
    cJSON_Delete(in);
}

/* ---- a job's cost ---- */

struct cost_acc {
    cJSON *attempts, *cur, *ranks;
    int64_t cur_attempt, att_amount, att_seconds;
    int64_t total, charged, seconds;
    int running;
    util_buf *csv;
    int64_t job_id;
    const char *currency;
};

static void cost_close_attempt(struct cost_acc *a)
{
    if (!a->cur)
        return;
    cJSON_AddNumberToObject(a->cur, "seconds", (double)a->att_seconds);
    cJSON_AddNumberToObject(a->cur, "amount", (double)a->att_amount);
    a->cur = NULL;
}

static void cost_row(void *arg, const store_rank_cost *c)
{
    struct cost_acc *a = arg;
    int live = !c->charged && c->started_at > 0 && c->finished_at == 0;
    a->total += c->amount;
    a->seconds += c->seconds;
    if (c->charged)
        a->charged += c->amount;
    a->running |= live;
    if (a->csv) {
        csv_int(a->csv, a->job_id, 0);
        csv_int(a->csv, c->attempt, 0);
        csv_int(a->csv, c->rank, 0);
        csv_text(a->csv, c->state, 0);
        csv_time(a->csv, c->started_at, 0);
        csv_time(a->csv, c->finished_at, 0);
        csv_int(a->csv, c->seconds, 0);
        csv_int(a->csv, c->amount, 0);
        csv_text(a->csv, c->charged ? "true" : "false", 0);
        csv_text(a->csv, a->currency, 1);
        return;
    }
    if (!a->cur || c->attempt != a->cur_attempt) {
        cost_close_attempt(a);
        a->cur = cJSON_CreateObject();
        cJSON_AddItemToArray(a->attempts, a->cur);
        cJSON_AddNumberToObject(a->cur, "attempt", (double)c->attempt);
        a->ranks = cJSON_AddArrayToObject(a->cur, "ranks");
        a->cur_attempt = c->attempt;
        a->att_amount = a->att_seconds = 0;
    }
    a->att_amount += c->amount;
    a->att_seconds += c->seconds;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "rank", (double)c->rank);
    cJSON_AddStringToObject(r, "state", c->state);
    api_add_time(r, "started_at", c->started_at);
    api_add_time(r, "finished_at", c->finished_at);
    cJSON_AddNumberToObject(r, "seconds", (double)c->seconds);
    cJSON_AddNumberToObject(r, "amount", (double)c->amount);
    cJSON_AddBoolToObject(r, "charged", c->charged);
    cJSON_AddItemToArray(a->ranks, r);
}

int64_t api_job_cost_total(api_ctx *ctx, int64_t job_id)
{
    struct cost_acc a = {0};
    a.attempts = cJSON_CreateArray();
    int rc = store_job_cost(ctx->st, job_id, util_now_ms(), cost_row, &a);
    cJSON_Delete(a.attempts);
    return rc == STORE_OK ? a.total : -1;
}

void api_job_cost(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_job j;
    if (api_job_find(ctx, rq, &j, rs))
        return;
    util_buf csv = {0};
    struct cost_acc a = {0};
    a.job_id = j.id;
    a.currency = j.currency;
    if (wants_csv(rq)) {
        a.csv = &csv;
        util_buf_printf(&csv, "job_id,attempt,rank,state,started_at,finished_at,seconds,amount,"
                              "charged,currency\r\n");
    }
    a.attempts = cJSON_CreateArray();
    int rc = store_job_cost(ctx->st, j.id, util_now_ms(), cost_row, &a);
    cost_close_attempt(&a);
    if (rc != STORE_OK) {
        cJSON_Delete(a.attempts);
        free(csv.buf);
        api_store_error(rs, rc, "job cost");
    } else if (a.csv) {
        cJSON_Delete(a.attempts);
        csv_send(rs, &csv);
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "job_id", (double)j.id);
        cJSON_AddStringToObject(o, "state", store_job_state_name(j.state));
        cJSON_AddStringToObject(o, "currency", j.currency);
        cJSON_AddNumberToObject(o, "price_per_worker_hour", (double)j.price_per_hour);
        cJSON_AddItemToObject(o, "attempts", a.attempts);
        cJSON_AddNumberToObject(o, "seconds", (double)a.seconds);
        cJSON_AddNumberToObject(o, "total", (double)a.total);
        cJSON_AddNumberToObject(o, "charged", (double)a.charged);
        cJSON_AddBoolToObject(o, "running", a.running);
        api_json(rs, 200, o);
    }
    store_job_clear(&j);
}

/* ---- usage and invoices ---- */

struct usage_acc {
    api_list pg;   /* the page of groups (JSON) */
    util_buf *csv; /* or every group as CSV */
    const char *group;
};

static void day_name(int64_t day, char out[16])
{
    char t[32];
    util_rfc3339(day * 86400000, t);
    fmt_cut(out, 16, "%.10s", t);
}

static void usage_row(void *arg, const store_usage *u)
{
    struct usage_acc *a = arg;
    char day[16] = "";
    if (!strcmp(a->group, "day"))
        day_name(u->key, day);
    if (a->csv) {
        if (!strcmp(a->group, "day"))
            csv_text(a->csv, day, 0);
        else if (!strcmp(a->group, "worker_spec"))
            csv_text(a->csv, u->name, 0);
        else {
            csv_int(a->csv, u->key, 0);
            csv_text(a->csv, u->name, 0);
        }
        csv_int(a->csv, u->worker_seconds, 0);
        csv_int(a->csv, u->gpu_seconds, 0);
        csv_int(a->csv, u->amount, 0);
        csv_text(a->csv, u->currency, 1);
        return;
    }
    /* Integers as written by api_add_int: an invoice has a line per job, and
     * cJSON prints each double through printf and reads it back. */
    cJSON *o = cJSON_CreateObject();
    if (!strcmp(a->group, "day")) {
        cJSON_AddStringToObject(o, "day", day);
    } else if (!strcmp(a->group, "job")) {
        api_add_int(o, "job_id", u->key);
        cJSON_AddStringToObject(o, "job_name", u->name);
    } else if (!strcmp(a->group, "user")) {
        api_add_int(o, "user_id", u->key);
        cJSON_AddStringToObject(o, "user", u->name);
    } else {
        cJSON_AddStringToObject(o, "worker_spec", u->name);
    }
    api_add_int(o, "worker_seconds", u->worker_seconds);
    api_add_int(o, "gpu_seconds", u->gpu_seconds);
    api_add_int(o, "amount", u->amount);
    api_add_int(o, "entries", u->entries);
    api_list_add(&a->pg, o, u->key);
}

/* The page of usage groups asked for (CSV: all of them) into a, with the
 * period's totals.  STORE_OK, or the store's error. */
static int usage_read(api_ctx *ctx, int64_t tenant, int64_t from, int64_t to, struct usage_acc *a,
                      store_usage *total)
{
    int whole = a->csv || !strcmp(a->group, "worker_spec");
    int rc = store_usage_group(ctx->st, tenant, from, to, a->group, whole ? 0 : a->pg.cursor,
                               whole ? 0 : a->pg.limit, usage_row, a);
    if (rc == STORE_OK && !a->csv)
        rc = store_usage_total(ctx->st, tenant, from, to, total);
    if (whole)
        a->pg.limit = 0; /* no next page */
    return rc;
}

static void total_json(cJSON *o, const store_usage *t)
{
    api_add_int(o, "worker_seconds", t->worker_seconds);
    api_add_int(o, "gpu_seconds", t->gpu_seconds);
    api_add_int(o, "amount", t->amount);
}

static const char *usage_header(const char *group)
{
    if (!strcmp(group, "day"))
        return "day,worker_seconds,gpu_seconds,amount,currency\r\n";
    if (!strcmp(group, "job"))
        return "job_id,job_name,worker_seconds,gpu_seconds,amount,currency\r\n";
    if (!strcmp(group, "user"))
        return "user_id,user,worker_seconds,gpu_seconds,amount,currency\r\n";
    return "worker_spec,worker_seconds,gpu_seconds,amount,currency\r\n";
}

/* A time query parameter; def when absent.  0, or -1 with rs set (400). */
static int time_param(const api_req *rq, const char *key, int64_t def, int64_t *out,
                      api_resp *rs)
{
    const char *v = rq->query(rq->h, key);
    if (!v || !v[0]) {
        *out = def;
        return 0;
    }
    if (strlen(v) > 40 || util_parse_time(v, out) != 0) {
        api_error(rs, 400, "invalid_value", key,
                  "%s must be a date (YYYY-MM-DD) or a UTC time (YYYY-MM-DDTHH:MM:SSZ)", key);
        return -1;
    }
    return 0;
}

void api_usage(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    int64_t tenant, now = util_now_ms(), month, next, from, to;
    char tname[UTIL_NAME_MAX + 1];
    if (api_billing_tenant(ctx, rq, &tenant, tname, rs))
        return;
    util_month_bounds(now, &month, &next);
    if (time_param(rq, "from", month, &from, rs) || time_param(rq, "to", now + 1, &to, rs))
        return;
    if (to <= from) {
        api_error(rs, 400, "invalid_value", "to", "to must be after from");
        return;
    }
    const char *group = rq->query(rq->h, "group_by");
    if (!group || !group[0])
        group = "day";
    if (strcmp(group, "day") && strcmp(group, "job") && strcmp(group, "user") &&
        strcmp(group, "worker_spec")) {
        api_error(rs, 400, "invalid_value", "group_by",
                  "group_by must be day, job, user or worker_spec");
        return;
    }
    struct usage_acc a = {.group = group};
    if (api_list_open(rq, &a.pg, rs))
        return;
    store_account acct;
    store_usage total;
    int rc = store_account_get(ctx->st, tenant, &acct);
    util_buf csv = {0};
    if (wants_csv(rq)) {
        a.csv = &csv;
        util_buf_printf(&csv, "%s", usage_header(group));
    }
    if (rc == STORE_OK)
        rc = usage_read(ctx, tenant, from, to, &a, &total);
    if (rc != STORE_OK) {
        cJSON_Delete(a.pg.items);
        free(csv.buf);
        api_store_error(rs, rc, "usage");
        return;
    }
    if (a.csv) {
        csv_send(rs, &csv);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tenant", tname);
    api_add_time(o, "from", from);
    api_add_time(o, "to", to);
    cJSON_AddStringToObject(o, "group_by", group);
    cJSON_AddStringToObject(o, "currency", acct.currency);
    cJSON_AddItemToObject(o, "items", a.pg.items ? a.pg.items : cJSON_CreateArray());
    api_list_next(o, &a.pg, a.pg.limit);
    total_json(cJSON_AddObjectToObject(o, "total"), &total);
    api_json(rs, 200, o);
}

static void credit_row(void *arg, const store_entry *e)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "id", (double)e->id);
    api_add_time(c, "at", e->at);
    cJSON_AddNumberToObject(c, "amount", (double)e->amount);
    cJSON_AddStringToObject(c, "note", e->note);
    cJSON_AddItemToArray(arg, c);
}

void api_invoice(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    int64_t tenant, from, to;
    char tname[UTIL_NAME_MAX + 1];
    if (api_billing_tenant(ctx, rq, &tenant, tname, rs))
        return;
    if (util_parse_month(rq->param[0], &from, &to) != 0) {
        api_error(rs, 400, "invalid_value", "month", "the month must be YYYY-MM (1970 or later)");
        return;
    }
    struct usage_acc a = {.group = "job"};
    if (api_list_open(rq, &a.pg, rs))
        return;
    store_account acct;
    store_usage total;
    int rc = store_account_get(ctx->st, tenant, &acct);
    util_buf csv = {0};
    if (wants_csv(rq)) {
        a.csv = &csv;
        util_buf_printf(&csv, "%s", usage_header("job"));
    }
    if (rc == STORE_OK)
        rc = usage_read(ctx, tenant, from, to, &a, &total);
    cJSON *credits = cJSON_CreateArray();
    if (rc == STORE_OK && !a.csv)
        rc = store_ledger_list(ctx->st, tenant, from, to, "credit", credit_row, credits);
    if (rc != STORE_OK) {
        cJSON_Delete(a.pg.items);
        cJSON_Delete(credits);
        free(csv.buf);
        api_store_error(rs, rc, "invoice");
        return;
    }
    if (a.csv) {
        cJSON_Delete(credits);
        csv_send(rs, &csv);
        return;
    }
    int64_t credited = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, credits)
    {
        credited += (int64_t)cJSON_GetObjectItem(c, "amount")->valuedouble;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tenant", tname);
    cJSON_AddStringToObject(o, "month", rq->param[0]);
    api_add_time(o, "from", from);
    api_add_time(o, "to", to);
    /* Charges are dated when their rank ended (never later than now): once
     * the month is over nothing more can fall into it. */
    cJSON_AddBoolToObject(o, "final", util_now_ms() >= to);
    cJSON_AddStringToObject(o, "currency", acct.currency);
    cJSON_AddItemToObject(o, "lines", a.pg.items ? a.pg.items : cJSON_CreateArray());
    api_list_next(o, &a.pg, a.pg.limit);
    api_add_int(o, "worker_seconds", total.worker_seconds);
    api_add_int(o, "gpu_seconds", total.gpu_seconds);
    api_add_int(o, "total", total.amount);
    cJSON_AddItemToObject(o, "credits", credits);
    cJSON_AddNumberToObject(o, "credits_total", (double)credited);
    api_json(rs, 200, o);
}

/* ---- quota: limits beside use, and money ---- */

static void limit_json(cJSON *o, const char *key, int64_t limit, int64_t used)
{
    cJSON *l = cJSON_AddObjectToObject(o, key);
    api_add_int_if(l, "limit", limit, limit >= 0);
    cJSON_AddNumberToObject(l, "used", (double)used);
}

static void account_json(cJSON *o, const store_account *a)
{
    cJSON_AddStringToObject(o, "currency", a->currency);
    cJSON_AddNumberToObject(o, "balance", (double)a->balance);
    cJSON_AddBoolToObject(o, "enforce", a->enforce);
    api_add_int_if(o, "monthly_cap", a->monthly_cap, a->monthly_cap >= 0);
}

void api_my_quota(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    int64_t tenant;
    char tname[UTIL_NAME_MAX + 1];
    if (api_billing_tenant(ctx, rq, &tenant, tname, rs))
        return;
    store_quota q;
    store_use use = {0};
    store_money m;
    int rc = store_quota_get(ctx->st, tenant, &q);
    if (rc == STORE_OK)
        rc = store_tenant_use(ctx->st, tenant, &use);
    if (rc == STORE_OK) {
        store_read_begin(ctx->st);
        store_tx *rtx = store_read_tx(ctx->st);
        rc = rtx ? store_money_tx(rtx, tenant, util_now_ms(), &m, NULL, NULL) : STORE_EIO;
        store_read_end(ctx->st);
    }
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "quota");
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tenant", tname);
    limit_json(o, "running_jobs", q.max_running_jobs, use.jobs);
    limit_json(o, "workers", q.max_workers, use.workers);
    limit_json(o, "cpus", q.max_cpus, use.cpus);
    limit_json(o, "gpus", q.max_gpus, use.gpus);
    limit_json(o, "storage_bytes", stuse_quota(ctx->stuse, tenant), stuse_used(ctx->stuse, tenant));
    limit_json(o, "files", stuse_max_files(ctx->stuse), stuse_files(ctx->stuse, tenant));
    int64_t pending = 0, max_pending = q.max_pending_jobs >= 0 ? q.max_pending_jobs
                                                               : ctx->default_max_pending;
    if (store_job_count_pending(ctx->st, tenant, INT64_MAX / 2, &pending) == STORE_OK)
        limit_json(o, "pending_jobs", max_pending, pending);
    cJSON *money = cJSON_AddObjectToObject(o, "money");
    account_json(money, &m.acct);
    cJSON_AddNumberToObject(money, "held", (double)m.reserved);
    cJSON_AddNumberToObject(money, "running_cost", (double)m.live);
    cJSON_AddNumberToObject(money, "spent_this_month", (double)m.spent_month);
    /* What a new job could hold now; null when nothing limits it. */
    int64_t left = INT64_MAX;
    if (m.acct.enforce)
        left = m.acct.balance - m.reserved;
    if (m.acct.monthly_cap >= 0 && m.acct.monthly_cap - m.spent_month - m.reserved < left)
        left = m.acct.monthly_cap - m.spent_month - m.reserved;
    if (left == INT64_MAX)
        cJSON_AddNullToObject(money, "available");
    else
        cJSON_AddNumberToObject(money, "available", (double)(left > 0 ? left : 0));
    api_json(rs, 200, o);
}

/* ---- admin: credits and budgets ---- */

struct credit_new {
    int64_t tenant_id, amount, user_id, id;
    char note[STORE_NOTE_MAX + 1];
    store_account after;
};

static store_rc credit_write(store_tx *tx, void *arg)
{
    struct credit_new *c = arg;
    int rc = store_credit_add(tx, c->tenant_id, c->amount, c->note, c->user_id, util_now_ms(),
                              &c->id);
    if (rc == STORE_OK)
        rc = store_account_get_tx(tx, c->tenant_id, &c->after);
    return rc;
}

void api_credit_add(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"amount", "note", NULL};
    cJSON *in = NULL;
    store_tenant t;
    struct credit_new c = {0};
    const char *note = NULL;
    if (tenant_in_path(ctx, rq, &t, rs))
        goto out;
    if (!api_is_platform_admin(rq->who)) {
        api_forbid(rs, "platform_admin");
        goto out;
    }
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        api_int(in, "amount", 1, 1, 1000000000000LL, &c.amount, rs) < 0 ||
        api_str(in, "note", 0, STORE_NOTE_MAX, &note, rs) < 0)
        goto out;
    c.tenant_id = t.id;
    c.user_id = rq->who->user.id;
    fmt_cut(c.note, sizeof c.note, "%s", note ? note : "");
    int rc = store_write(ctx->st, credit_write, &c);
    if (rc == STORE_INVALID) {
        api_error(rs, 422, "invalid_value", "amount",
                  "the balance would pass the largest amount the platform keeps (%lld)",
                  STORE_MONEY_MAX);
        goto out;
    }
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "credit");
        goto out;
    }
    sched_wake(ctx->sched); /* jobs waiting on the budget may fit now */
    cJSON *o = api_object(c.id, NULL);
    cJSON_AddStringToObject(o, "tenant", t.name);
    cJSON_AddNumberToObject(o, "amount", (double)c.amount);
    cJSON_AddStringToObject(o, "note", c.note);
    account_json(cJSON_AddObjectToObject(o, "account"), &c.after);
    api_json(rs, 201, o);
out:
    cJSON_Delete(in);
}

void api_budget_get(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    store_tenant t;
    store_account a;
    if (tenant_in_path(ctx, rq, &t, rs))
        return;
    int rc = store_account_get(ctx->st, t.id, &a);
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "budget");
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tenant", t.name);
    account_json(o, &a);
    api_json(rs, 200, o);
}

static store_rc budget_write(store_tx *tx, void *arg)
{
    store_account *a = arg;
    int rc = store_account_set(tx, a);
    if (rc == STORE_OK)
        rc = store_account_get_tx(tx, a->tenant_id, a);
    return rc;
}

void api_budget_put(api_ctx *ctx, const api_req *rq, api_resp *rs)
{
    static const char *const fields[] = {"enforce", "monthly_cap", "currency", NULL};
    cJSON *in = NULL;
    store_tenant t;
    store_account a;
    const char *cur = NULL;
    if (tenant_in_path(ctx, rq, &t, rs))
        goto out;
    if (!api_is_platform_admin(rq->who)) {
        api_forbid(rs, "platform_admin");
        goto out;
    }
    int rc = store_account_get(ctx->st, t.id, &a);
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "budget");
        goto out;
    }
    /* A PUT sets the whole budget: a member left out takes its default. */
    a.enforce = 0;
    a.monthly_cap = -1;
    if (!(in = api_parse_object(rq, rs)) || api_fields_known(in, fields, rs) ||
        api_bool(in, "enforce", 0, &a.enforce, rs) < 0 ||
        api_str(in, "currency", 0, 3, &cur, rs) < 0)
        goto out;
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(in, "monthly_cap");
    if (cap && !cJSON_IsNull(cap) &&
        api_int(in, "monthly_cap", 0, 0, STORE_MONEY_MAX, &a.monthly_cap, rs) < 0)
        goto out;
    if (cur) {
        if (strlen(cur) != 3 || cur[0] < 'A' || cur[0] > 'Z' || cur[1] < 'A' || cur[1] > 'Z' ||
            cur[2] < 'A' || cur[2] > 'Z') {
            api_error(rs, 400, "invalid_value", "currency",
                      "currency must be an ISO 4217 code such as USD");
            goto out;
        }
        fmt_cut(a.currency, sizeof a.currency, "%s", cur);
    }
    rc = store_write(ctx->st, budget_write, &a);
    if (rc == STORE_CONFLICT) {
        api_error(rs, 409, "currency_in_use", "currency",
                  "the tenant's ledger already holds entries in another currency");
        goto out;
    }
    if (rc != STORE_OK) {
        api_store_error(rs, rc, "budget");
        goto out;
    }
    sched_wake(ctx->sched);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tenant", t.name);
    account_json(o, &a);
    api_json(rs, 200, o);
out:
    cJSON_Delete(in);
}
