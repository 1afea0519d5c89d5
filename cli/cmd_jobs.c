/*
 * cmd_jobs: submit, quote, jobs, show, events, workers, logs, cancel, retry.
 */
#include <ctype.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "lib/fmt.h"
#include "cli/follow.h"
#include "cli/jobfile.h"
#include "cli/out.h"
#include "cli/sync.h"

#define SUBMIT_TRIES 6 /* a lost create is sent again with its idempotency key */

static void cell_money(const cJSON *o, const char *key, char *buf, size_t n)
{
    const cJSON *v = out_find(o, key);
    const char *cur = cJSON_GetStringValue(out_find(o, "price.currency"));
    if (cJSON_IsNumber(v))
        out_money(v->valuedouble, cur, buf, n);
    else
        fmt_cut(buf, n, "-");
}

static void fmt_cost(const cJSON *o, char *b, size_t n) { cell_money(o, "price.cost_so_far", b, n); }
static void fmt_per_hour(const cJSON *o, char *b, size_t n) { cell_money(o, "price.per_hour", b, n); }
static void fmt_max(const cJSON *o, char *b, size_t n) { cell_money(o, "price.estimated_max", b, n); }

static void fmt_age(const cJSON *o, char *b, size_t n)
{
    cli_age(cJSON_GetStringValue(out_find(o, "created_at")), b, n);
}

static void fmt_shape(const cJSON *o, char *b, size_t n)
{
    char count[32];
    out_text(out_find(o, "worker_count"), count, sizeof count);
    fmt_cut(b, n, "%s x %s", count, cJSON_GetStringValue(out_find(o, "worker_spec")) ?: "?");
}

/* ---- submit and quote ---- */

struct spec {
    cJSON *body;
    char *code;       /* the directory to upload, or NULL */
    int follow, dry;
};

static const struct option submit_opts[] = {
    {"file", required_argument, 0, 'f'},      {"name", required_argument, 0, 'n'},
    {"image", required_argument, 0, 'i'},     {"dataset", required_argument, 0, 'd'},
    {"workspace", required_argument, 0, 'w'}, {"code", required_argument, 0, 'C'},
    {"epochs", required_argument, 0, 'E'},    {"lr", required_argument, 0, 'L'},
    {"batch-size", required_argument, 0, 'B'}, {"spec", required_argument, 0, 's'},
    {"workers", required_argument, 0, 'N'},   {"per-node", required_argument, 0, 'P'},
    {"priority", required_argument, 0, 'p'},  {"max-runtime", required_argument, 0, 'T'},
    {"retries", required_argument, 0, 'R'},   {"env", required_argument, 0, 'e'},
    {"follow", no_argument, 0, 'F'},          {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

static const char *flag_key(int opt)
{
    switch (opt) {
    case 'n': return "name";
    case 'i': return "image";
    case 'd': return "datasets";
    case 'w': return "workspace";
    case 'E': return "epochs";
    case 'L': return "lr";
    case 'B': return "batch_size";
    case 's': return "worker_spec";
    case 'N': return "worker_count";
    case 'P': return "workers_per_node";
    case 'p': return "priority";
    case 'T': return "max_runtime_seconds";
    case 'R': return "max_retries";
    case 'e': return "env";
    default: return NULL;
    }
}

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int is_jobfile(const char *s)
{
    return has_suffix(s, ".yaml") || has_suffix(s, ".yml") || has_suffix(s, ".json");
}

/* The job file's code directory, taken relative to the file's own. */
static char *code_beside(const char *file, char *code)
{
    if (!code || code[0] == '/' || !strchr(file, '/'))
        return code;
    char *copy = strdup(file);
    util_buf b = {0};
    if (copy)
        util_buf_printf(&b, "%s/%s", dirname(copy), code);
    free(copy);
    free(code);
    return b.oom ? NULL : b.buf;
}

/* A workspace name from a directory's name: lower case, [a-z0-9._-]. */
static void name_from_dir(const char *dir, char out[UTIL_NAME_MAX + 1])
{
    char *abs = realpath(dir, NULL);
    const char *base = abs ? strrchr(abs, '/') + 1 : dir;
    size_t n = 0;
    for (const char *p = base; *p && n < UTIL_NAME_MAX; p++) {
        char ch = (char)tolower((unsigned char)*p);
        out[n++] = isalnum((unsigned char)ch) || ch == '.' || ch == '_' || ch == '-' ? ch : '-';
    }
    out[n] = '\0';
    if (!n || !isalnum((unsigned char)out[0]))
        fmt_cut(out, UTIL_NAME_MAX + 1, "code");
    free(abs);
}

static void set_default(cJSON *body, const char *key, const char *value)
{
    char err[16];
    if (!cJSON_GetObjectItemCaseSensitive(body, key))
        jf_set(body, key, value, err, sizeof err);
}

/* The job's defaults and derived fields, once file and flags are in. */
static int fill_defaults(struct spec *sp)
{
    cJSON *b = sp->body;
    const char *code_path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "code_path"));
    if (!code_path)
        return cli_usage("no program: name the file to run (CODE_PATH, or code_path: in the job file)");
    if (!cJSON_GetObjectItemCaseSensitive(b, "workspace")) {
        if (!sp->code)
            return cli_usage("no workspace: give --workspace NAME, or --code DIR to upload one");
        char ws[UTIL_NAME_MAX + 1];
        name_from_dir(sp->code, ws);
        set_default(b, "workspace", ws);
    }
    if (!cJSON_GetObjectItemCaseSensitive(b, "name")) {
        char nm[201];
        const char *base = strrchr(code_path, '/') ? strrchr(code_path, '/') + 1 : code_path;
        fmt_cut(nm, sizeof nm, "%s", base); /* a default name: the API bounds it anyway */
        char *dot = strrchr(nm, '.');
        if (dot && dot != nm)
            *dot = '\0';
        set_default(b, "name", nm);
    }
    set_default(b, "epochs", "1");
    set_default(b, "lr", "0.01");
    set_default(b, "batch_size", "64");
    set_default(b, "worker_count", "1");
    return CLI_OK;
}

/* Reads submit's (or quote's) command line into sp: CLI_OK, CLI_USAGE, or
 * -1 after --help. */
static int parse_submit(int argc, char **argv, struct spec *sp, const char *usage)
{
    char err[512];
    const char *file = NULL;
    sp->body = NULL;
    sp->code = NULL;
    cJSON *flags = cJSON_CreateObject();
    char *code_flag = NULL;
    int opt, rc = CLI_OK;
    optind = 1;
    while (rc == CLI_OK) {
        opt = getopt_long(argc, argv, "+hf:", submit_opts, NULL);
        if (opt == -1 && !file && optind < argc && is_jobfile(argv[optind])) {
            file = argv[optind++]; /* the job file; its options may follow it */
            continue;
        }
        if (opt == -1)
            break;
        const char *key = flag_key(opt);
        if (opt == 'h') {
            fputs(usage, stdout);
            rc = -1;
        } else if (opt == 'f') {
            file = optarg;
        } else if (opt == 'C') {
            free(code_flag);
            code_flag = strdup(optarg);
        } else if (opt == 'F') {
            sp->follow = 1;
        } else if (key && !strcmp(key, "datasets")) { /* --dataset a,b or repeated */
            char *copy = strdup(optarg), *save = NULL;
            for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && rc == CLI_OK;
                 t = strtok_r(NULL, ",", &save))
                if (jf_set(flags, key, t, err, sizeof err))
                    rc = cli_usage("%s", err);
            free(copy);
        } else if (key) {
            if (jf_set(flags, key, optarg, err, sizeof err))
                rc = cli_usage("%s", err);
        } else {
            rc = CLI_USAGE;
        }
    }
    if (rc == CLI_OK && file) {
        if (jf_load(file, &sp->body, &sp->code, err, sizeof err))
            rc = cli_fail(CLI_USAGE, "%s", err);
        else
            sp->code = code_beside(file, sp->code);
    }
    if (rc == CLI_OK && !sp->body)
        sp->body = cJSON_CreateObject();
    if (rc == CLI_OK && code_flag) {
        free(sp->code);
        sp->code = code_flag;
        code_flag = NULL;
    }
    /* flags win over the file */
    cJSON *it;
    while (rc == CLI_OK && (it = flags->child) != NULL) {
        cJSON_DetachItemViaPointer(flags, it);
        cJSON_DeleteItemFromObjectCaseSensitive(sp->body, it->string);
        cJSON_AddItemToObject(sp->body, it->string, it);
    }
    if (rc == CLI_OK && optind < argc) { /* CODE_PATH [ARGS...] */
        jf_set(sp->body, "code_path", argv[optind++], err, sizeof err);
        if (optind < argc)
            cJSON_DeleteItemFromObjectCaseSensitive(sp->body, "args");
        while (optind < argc)
            jf_set(sp->body, "args", argv[optind++], err, sizeof err);
    }
    cJSON_Delete(flags);
    free(code_flag);
    if (rc != CLI_OK) {
        cJSON_Delete(sp->body);
        free(sp->code);
        sp->body = NULL;
        sp->code = NULL;
    }
    return rc;
}

static void print_submitted(cli *c, const cJSON *j, int replayed)
{
    char per_hour[48], max[48];
    fmt_per_hour(j, per_hour, sizeof per_hour);
    fmt_max(j, max, sizeof max);
    if (c->json) {
        out_json(c, j);
        return;
    }
    char shape[96], id[32];
    fmt_shape(j, shape, sizeof shape);
    out_text(out_find(j, "id"), id, sizeof id);
    printf("job %s submitted%s: %s, %s at %s/hour", id, replayed ? " (already, by an earlier try)" : "",
           cJSON_GetStringValue(out_find(j, "state")) ?: "?", shape, per_hour);
    if (cJSON_IsNumber(out_find(j, "price.estimated_max")))
        printf(", at most %s", max);
    putchar('\n');
}

static int upload_code(cli *c, struct spec *sp)
{
    const char *ws = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sp->body, "workspace"));
    sync_stats st;
    int rc = sync_ensure(c, "workspaces", ws);
    if (rc == CLI_OK)
        rc = sync_push(c, "workspaces", ws, sp->code, &st);
    if (rc == CLI_OK) {
        char sent[32];
        out_bytes((double)st.bytes_sent, sent, sizeof sent);
        fprintf(stderr, "cohort: code %s -> workspace %s: %ld file%s sent (%s), %ld unchanged\n",
                sp->code, ws, st.sent, st.sent == 1 ? "" : "s", sent, st.unchanged);
    }
    return rc;
}

static int finish_follow(cli *c, int64_t id)
{
    char state[16] = "";
    int rc = follow_job(c, id, -1, 0, state);
    if (rc != CLI_OK)
        return rc;
    char path[64];
    cJSON *j = NULL;
    fmt_cut(path, sizeof path, "/v1/jobs/%lld", (long long)id);
    if (cli_get_json(c, path, &j) == CLI_OK) {
        const char *reason = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "reason"));
        char cost[48];
        fmt_cost(j, cost, sizeof cost);
        fprintf(stderr, "cohort: job %lld %s%s%s, cost %s\n", (long long)id, state,
                reason ? ": " : "", reason ? reason : "", cost);
    }
    cJSON_Delete(j);
    return !strcmp(state, "SUCCEEDED") ? CLI_OK : CLI_FAILED;
}

int cmd_submit(cli *c, int argc, char **argv)
{
    struct spec sp = {0};
    int rc = parse_submit(argc, argv, &sp, cli_usage_of("submit"));
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    rc = fill_defaults(&sp);
    if (rc == CLI_OK && sp.code)
        rc = upload_code(c, &sp);
    char *body = rc == CLI_OK ? cJSON_PrintUnformatted(sp.body) : NULL;
    char key[48];
    cli_new_key(key);
    cli_resp r = {0};
    cli_req rq = CLI_REQ("POST", "/v1/jobs");
    rq.json = body;
    rq.idem_key = key;
    int saved = c->retries;
    c->retries = SUBMIT_TRIES - 1;
    if (rc == CLI_OK)
        rc = body ? cli_request(c, &rq, &r) : cli_fail(CLI_FAILED, "out of memory");
    c->retries = saved;
    int64_t id = 0;
    if (rc == CLI_OK && cJSON_IsNumber(out_find(r.json, "id"))) {
        id = (int64_t)out_find(r.json, "id")->valuedouble;
        print_submitted(c, r.json, r.replayed);
        fflush(stdout);
    }
    if (rc == CLI_OK && sp.follow)
        rc = finish_follow(c, id);
    cli_resp_free(&r);
    free(body);
    cJSON_Delete(sp.body);
    free(sp.code);
    return rc;
}

int cmd_quote(cli *c, int argc, char **argv)
{
    struct spec sp = {0};
    int rc = parse_submit(argc, argv, &sp, cli_usage_of("quote"));
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    cJSON *q = cJSON_CreateObject();
    static const char *const keys[] = {"worker_spec", "worker_count", "max_runtime_seconds"};
    for (size_t i = 0; i < 3; i++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(sp.body, keys[i]);
        if (v)
            cJSON_AddItemToObject(q, keys[i], cJSON_Duplicate(v, 1));
    }
    if (!cJSON_GetObjectItemCaseSensitive(q, "worker_count"))
        cJSON_AddNumberToObject(q, "worker_count", 1);
    char *body = cJSON_PrintUnformatted(q);
    cJSON *o = NULL;
    rc = cli_post_json(c, "/v1/quote", body, &o);
    if (rc == CLI_OK && c->json) {
        out_json(c, o);
    } else if (rc == CLI_OK) {
        const char *cur = cJSON_GetStringValue(out_find(o, "currency"));
        char ph[48], mx[48], hold[48];
        const cJSON *v = out_find(o, "price_per_hour"), *m = out_find(o, "estimated_max"),
                    *h = out_find(o, "hold");
        out_money(cJSON_IsNumber(v) ? v->valuedouble : 0, cur, ph, sizeof ph);
        out_money(cJSON_IsNumber(m) ? m->valuedouble : 0, cur, mx, sizeof mx);
        out_money(cJSON_IsNumber(h) ? h->valuedouble : 0, cur, hold, sizeof hold);
        if (c->fields)
            rc = out_view(c, o, NULL, 0);
        else
            printf("%s/hour; at most %s; held at admission %s\n", ph,
                   cJSON_IsNumber(m) ? mx : "unbounded (no max runtime)", hold);
    }
    cJSON_Delete(o);
    cJSON_Delete(q);
    free(body);
    cJSON_Delete(sp.body);
    free(sp.code);
    return rc;
}

/* ---- jobs, show, events, workers ---- */

static const out_col job_cols[] = {
    {"ID", "id", NULL},           {"NAME", "name", NULL},   {"STATE", "state", NULL},
    {"WORKERS", NULL, fmt_shape}, {"COST", NULL, fmt_cost}, {"AGE", NULL, fmt_age},
    {"REASON", "reason", NULL},
};

static int id_cmp(const void *a, const void *b)
{
    double x = out_find(*(const cJSON *const *)a, "id")->valuedouble;
    double y = out_find(*(const cJSON *const *)b, "id")->valuedouble;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Sorts items newest first (several states were fetched one after another). */
static void sort_by_id(cJSON *items)
{
    int n = cJSON_GetArraySize(items), k = 0;
    cJSON **v = n ? calloc((size_t)n, sizeof *v) : NULL;
    if (!v)
        return;
    while (items->child)
        v[k++] = cJSON_DetachItemViaPointer(items, items->child);
    qsort(v, (size_t)k, sizeof *v, id_cmp);
    for (int i = 0; i < k; i++)
        cJSON_AddItemToArray(items, v[i]);
    free(v);
}

int cmd_jobs(cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"state", required_argument, 0, 's'}, {"name", required_argument, 0, 'n'},
        {"all", no_argument, 0, 'a'},         {0, 0, 0, 0},
    };
    const char *state = NULL, *name = NULL;
    int all = 0, opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "s:n:a", opts, NULL)) != -1) {
        if (opt == 's')
            state = optarg;
        else if (opt == 'n')
            name = optarg;
        else if (opt == 'a')
            all = 1;
        else
            return CLI_USAGE;
    }
    if (optind < argc)
        return cli_usage("jobs takes no argument '%s'", argv[optind]);
    static const char *const active[] = {"PENDING", "STARTING", "RUNNING"};
    const char *const *states = state || all ? &state : active;
    size_t nstates = state || all ? 1 : 3;
    cJSON *items = cJSON_CreateArray();
    int rc = CLI_OK;
    for (size_t i = 0; rc == CLI_OK && i < nstates; i++) {
        util_buf p = {0};
        util_buf_printf(&p, "/v1/jobs?");
        if (states[i]) {
            util_buf_printf(&p, "state=");
            cli_escape(&p, states[i]);
            util_buf_printf(&p, "&");
        }
        if (name) {
            util_buf_printf(&p, "name=");
            cli_escape(&p, name);
        }
        cJSON *got = NULL;
        rc = cli_list(c, p.buf, "items", 1, &got, NULL);
        while (got && got->child)
            cJSON_AddItemToArray(items, cJSON_DetachItemViaPointer(got, got->child));
        cJSON_Delete(got);
        free(p.buf);
    }
    if (rc == CLI_OK) {
        sort_by_id(items);
        rc = out_items(c, items, job_cols, sizeof job_cols / sizeof *job_cols);
    }
    cJSON_Delete(items);
    return rc;
}

/* The path /v1/jobs/ID[suffix] of argv[1] into path[n]: 0, or CLI_USAGE. */
static int job_path(int argc, char **argv, const char *suffix, char *path, size_t n)
{
    int64_t id;
    if (argc != 2)
        return cli_usage("%s takes one job id", argv[0]);
    if (cli_id(argv[1], "the job id", &id))
        return CLI_USAGE;
    fmt_cut(path, n, "/v1/jobs/%lld%s", (long long)id, suffix);
    return 0;
}

int cmd_show(cli *c, int argc, char **argv)
{
    static const out_col rows[] = {
        {"id", "id", NULL},
        {"name", "name", NULL},
        {"state", "state", NULL},
        {"reason", "reason", NULL},
        {"queue position", "position", NULL},
        {"attempt", "attempt", NULL},
        {"user", "user", NULL},
        {"image", "image", NULL},
        {"image digest", "image_digest", NULL},
        {"workers", NULL, fmt_shape},
        {"per node", "workers_per_node", NULL},
        {"datasets", "datasets", NULL},
        {"workspace", "workspace", NULL},
        {"program", "code_path", NULL},
        {"args", "args", NULL},
        {"epochs", "epochs", NULL},
        {"lr", "lr", NULL},
        {"batch size", "batch_size", NULL},
        {"priority", "priority", NULL},
        {"max runtime (s)", "max_runtime_seconds", NULL},
        {"retries", "max_retries", NULL},
        {"price", NULL, fmt_per_hour},
        {"cost so far", NULL, fmt_cost},
        {"created", "created_at", NULL},
        {"started", "started_at", NULL},
        {"finished", "finished_at", NULL},
    };
    cJSON *o = NULL;
    char path[96];
    int rc = job_path(argc, argv, "", path, sizeof path);
    if (rc == CLI_OK)
        rc = cli_get_json(c, path, &o);
    if (rc == CLI_OK && c->json)
        out_json(c, o);
    else if (rc == CLI_OK)
        rc = out_view(c, o, rows, sizeof rows / sizeof *rows);
    cJSON_Delete(o);
    return rc;
}

static int job_list_cmd(cli *c, int argc, char **argv, const char *suffix, const out_col *cols,
                        size_t ncol)
{
    char path[96];
    cJSON *items = NULL;
    int rc = job_path(argc, argv, suffix, path, sizeof path);
    if (rc == CLI_OK)
        rc = cli_list(c, path, "items", 1, &items, NULL);
    if (rc == CLI_OK)
        rc = out_items(c, items, cols, ncol);
    cJSON_Delete(items);
    return rc;
}

int cmd_events(cli *c, int argc, char **argv)
{
    static const out_col cols[] = {
        {"AT", "at", NULL}, {"ATTEMPT", "attempt", NULL}, {"FROM", "from", NULL},
        {"TO", "to", NULL}, {"REASON", "reason", NULL},
    };
    return job_list_cmd(c, argc, argv, "/events", cols, sizeof cols / sizeof *cols);
}

int cmd_workers(cli *c, int argc, char **argv)
{
    static const out_col cols[] = {
        {"RANK", "rank", NULL},       {"ATTEMPT", "attempt", NULL}, {"NODE", "node_id", NULL},
        {"STATE", "state", NULL},     {"EXIT", "exit_code", NULL},  {"SIGNAL", "signal", NULL},
        {"CPU_S", "cpu_seconds", NULL}, {"MEM_MB", "memory_peak_mb", NULL},
        {"MESSAGE", "message", NULL},
    };
    return job_list_cmd(c, argc, argv, "/workers", cols, sizeof cols / sizeof *cols);
}

/* ---- logs ---- */

/* Prints one rank's log of attempt (0: the current) from its start, or its
 * last tail bytes. */
static int print_log(cli *c, int64_t id, int rank, int64_t attempt, long tail, int prefix)
{
    long long off = 0;
    int rc;
    for (;;) {
        char path[200];
        char at[40] = "";
        if (attempt)
            fmt_cut(at, sizeof at, "&attempt=%lld", (long long)attempt); /* 30 at most */
        /* numbers only: 200 bytes hold them all */
        if (tail)
            fmt_cut(path, sizeof path, "/v1/jobs/%lld/logs?rank=%d%s&tail=%ld", (long long)id,
                    rank, at, tail);
        else
            fmt_cut(path, sizeof path, "/v1/jobs/%lld/logs?rank=%d%s&offset=%lld&limit=8388608",
                    (long long)id, rank, at, off);
        cli_resp r;
        cli_req rq = CLI_REQ("GET", path);
        rc = cli_request(c, &rq, &r);
        if (rc == CLI_OK && r.body.len) {
            if (prefix) {
                for (char *p = r.body.buf, *e; p < r.body.buf + r.body.len; p = e + 1) {
                    e = memchr(p, '\n', (size_t)(r.body.buf + r.body.len - p));
                    if (!e)
                        e = r.body.buf + r.body.len;
                    printf("[%d] %.*s\n", rank, (int)(e - p), p);
                }
            } else {
                fwrite(r.body.buf, 1, r.body.len, stdout);
            }
        }
        int more = rc == CLI_OK && !tail && r.next_offset > off;
        off = r.next_offset;
        cli_resp_free(&r);
        if (!more)
            break;
    }
    return rc;
}

int cmd_logs(cli *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"follow", no_argument, 0, 'f'},        {"rank", required_argument, 0, 'r'},
        {"attempt", required_argument, 0, 'a'}, {"tail", required_argument, 0, 't'},
        {0, 0, 0, 0},
    };
    int follow = 0, opt;
    int64_t rank = -1, attempt = 0, tail = 0, id;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "fr:a:t:", opts, NULL)) != -1) {
        if (opt == 'f')
            follow = 1;
        else if (opt == 'r' && !strcmp(optarg, "0"))
            rank = 0;
        else if (opt == 'r' && cli_id(optarg, "--rank", &rank))
            return CLI_USAGE;
        else if (opt == 'a' && cli_id(optarg, "--attempt", &attempt))
            return CLI_USAGE;
        else if (opt == 't' && cli_id(optarg, "--tail", &tail))
            return CLI_USAGE;
        else if (opt == '?')
            return CLI_USAGE;
    }
    if (optind + 1 != argc)
        return cli_usage("logs takes one job id");
    if (cli_id(argv[optind], "the job id", &id))
        return CLI_USAGE;
    if (follow && tail)
        return cli_usage("--tail reads the end once: not with -f");
    if (follow) {
        char state[16];
        return follow_job(c, id, (int)rank, attempt, state);
    }
    char path[64];
    cJSON *j = NULL;
    fmt_cut(path, sizeof path, "/v1/jobs/%lld", (long long)id);
    int rc = cli_get_json(c, path, &j);
    const cJSON *w = out_find(j, "worker_count");
    int world = cJSON_IsNumber(w) ? (int)w->valuedouble : 1;
    cJSON_Delete(j);
    if (rc == CLI_OK && rank >= world)
        return cli_usage("--rank: the job has ranks 0..%d", world - 1);
    for (int r = rank >= 0 ? (int)rank : 0; rc == CLI_OK && r < (rank >= 0 ? rank + 1 : world); r++)
        rc = print_log(c, id, r, attempt, (long)tail, rank < 0 && world > 1);
    return rc;
}

/* ---- cancel, retry ---- */

int cmd_cancel(cli *c, int argc, char **argv)
{
    if (argc < 2)
        return cli_usage("cancel takes one job id or more");
    int rc = CLI_OK;
    for (int i = 1; i < argc; i++) {
        int64_t id;
        if (cli_id(argv[i], "a job id", &id))
            return CLI_USAGE;
    }
    for (int i = 1; i < argc; i++) {
        char path[64];
        cJSON *o = NULL;
        fmt_cut(path, sizeof path, "/v1/jobs/%s/cancel", argv[i]);
        int one = cli_post_json(c, path, NULL, &o);
        if (one == CLI_OK)
            printf("job %s: %s\n", argv[i], cJSON_GetStringValue(out_find(o, "state")) ?: "cancelled");
        else if (rc == CLI_OK)
            rc = one;
        cJSON_Delete(o);
    }
    return rc;
}

int cmd_retry(cli *c, int argc, char **argv)
{
    int64_t id;
    if (argc != 2)
        return cli_usage("retry takes one job id");
    if (cli_id(argv[1], "the job id", &id))
        return CLI_USAGE;
    char path[64];
    cJSON *o = NULL;
    fmt_cut(path, sizeof path, "/v1/jobs/%lld/retry", (long long)id);
    int rc = cli_post_json(c, path, NULL, &o);
    if (rc == CLI_OK && c->json)
        out_json(c, o);
    else if (rc == CLI_OK) {
        char att[32];
        out_text(out_find(o, "attempt"), att, sizeof att);
        printf("job %lld: %s, attempt %s\n", (long long)id,
               cJSON_GetStringValue(out_find(o, "state")) ?: "?", att);
    }
    cJSON_Delete(o);
    return rc;
}
