/*
 * main: `cohort`, the command-line client of cohortd.  The command table
 * (name, function, usage), the options every command takes (--json,
 * -o FIELD,..., --url, --help), and the dispatch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli/cmd.h"
#include "lib/fmt.h"

static const struct command {
    const char *name;
    int (*run)(cli *, int, char **);
    int login;                /* needs a URL and token */
    const char *usage;
} commands[] = {
    {"login", cmd_login, 0,
     "cohort login [URL]\n"
     "  Asks for an API token (without echo; or reads it from stdin), checks it\n"
     "  with the server and keeps URL and token in ~/.config/cohort/config (0600).\n"
     "  COHORT_URL and COHORT_TOKEN override the file.\n"},
    {"logout", cmd_logout, 0, "cohort logout\n  Forgets the token kept by login.\n"},
    {"whoami", cmd_whoami, 1, "cohort whoami\n  The user, role and tenant of the token.\n"},
    {"submit", cmd_submit, 1,
     "cohort submit [JOBFILE] [options] [CODE_PATH [ARGS...]]\n"
     "  Submits a job and prints its id, state and price.  JOBFILE (.yaml, .yml or\n"
     "  .json) holds the job's fields (those of POST /v1/jobs) and `code: DIR`;\n"
     "  options override it.  With code, DIR is uploaded into the workspace first:\n"
     "  only files whose size, sum or executable bit changed, skipping .git and\n"
     "  what DIR/.cohortignore names.  Everything after CODE_PATH goes to the\n"
     "  program.  A create that may have been lost is sent again with the same\n"
     "  Idempotency-Key: it never makes two jobs.\n"
     "  -f, --file JOBFILE       the job file (or as the first argument)\n"
     "  --name NAME              (default: CODE_PATH's name without extension)\n"
     "  --image IMAGE            pytorch, cohort, native, or a tenant's own\n"
     "  --dataset NAME[,NAME]    mounted read-only (repeatable)\n"
     "  --workspace NAME         mounted writable (default with --code: DIR's name)\n"
     "  --code DIR               upload DIR into the workspace first\n"
     "  --epochs N  --lr X  --batch-size N   (defaults 1, 0.01, 64)\n"
     "  --spec SPEC              worker spec (cohort specs)\n"
     "  --workers N              worker count (default 1)\n"
     "  --per-node N             workers per node (must divide --workers)\n"
     "  --priority N  --max-runtime SECONDS  --retries N\n"
     "  --env NAME=VALUE         an extra variable (repeatable)\n"
     "  --follow                 stream every rank's log until the job ends; exit 0\n"
     "                           when it succeeded, 1 when it failed or was cancelled\n"},
    {"quote", cmd_quote, 1,
     "cohort quote [JOBFILE] [--spec SPEC] [--workers N] [--max-runtime SECONDS]\n"
     "  What the job would cost: per hour, at most, and the hold at admission.\n"},
    {"jobs", cmd_jobs, 1,
     "cohort jobs [--state STATE] [--name NAME] [--all]\n"
     "  The tenant's jobs, newest first: those not ended, or in STATE, or --all.\n"},
    {"show", cmd_show, 1,
     "cohort show ID\n  One job: state, reason, queue position, cost so far, image digest, ...\n"},
    {"events", cmd_events, 1, "cohort events ID\n  A job's state changes with their reasons.\n"},
    {"workers", cmd_workers, 1,
     "cohort workers ID\n  A job's workers: rank, node, state, exit status, CPU and memory.\n"},
    {"logs", cmd_logs, 1,
     "cohort logs ID [-f] [--rank N] [--attempt N] [--tail BYTES]\n"
     "  What the job's ranks printed (every rank, each line led by [RANK], unless\n"
     "  --rank).  -f follows the output until the job ends.\n"},
    {"cancel", cmd_cancel, 1, "cohort cancel ID...\n  Cancels jobs (SIGTERM, then SIGKILL after the node's grace).\n"},
    {"retry", cmd_retry, 1, "cohort retry ID\n  Runs an ended job again as its next attempt.\n"},
    {"ws", cmd_ws, 1,
     "cohort ws ls [NAME] | push DIR NAME | pull NAME DIR | rm NAME\n"
     "  Workspaces: list them or a workspace's files; upload a directory (only what\n"
     "  changed, executable bits kept, .cohortignore honoured); download one.\n"},
    {"ds", cmd_ds, 1,
     "cohort ds ls [NAME] | push DIR NAME [--seal] | pull NAME DIR | seal NAME | rm NAME\n"
     "  Datasets, as ws; --seal makes the dataset read-only once uploaded.\n"},
    {"quota", cmd_quota, 1, "cohort quota\n  Limits beside use, and the money: balance, held, spent, cap, available.\n"},
    {"usage", cmd_usage, 1,
     "cohort usage [--by day|job|user|worker_spec] [--from DATE] [--to DATE] [--csv]\n"
     "  Charged worker-seconds and amounts of a period (default this month), grouped.\n"},
    {"invoice", cmd_invoice, 1,
     "cohort invoice [YYYY-MM] [--csv]\n  A month's invoice (default this month): a line per job, totals, credits.\n"},
    {"images", cmd_images, 1, "cohort images\n  The images jobs may name.\n"},
    {"specs", cmd_specs, 1, "cohort specs\n  Worker specs and their prices.\n"},
    {"tenants", cmd_tenants, 1, "cohort tenants\n  Every tenant (platform admin).\n"},
    {"tenant", cmd_tenant, 1, "cohort tenant create NAME\n  Makes a tenant (platform admin).\n"},
    {"users", cmd_users, 1, "cohort users [TENANT]\n  A tenant's users (default your own).\n"},
    {"user", cmd_user, 1,
     "cohort user create TENANT NAME [--role member|viewer|tenant_admin|platform_admin]\n"
     "  Makes a user (a tenant admin in its tenant; a platform admin anywhere).\n"},
    {"token", cmd_token, 1,
     "cohort token create [USER] [--name NAME] [--expires SECONDS]\n"
     "  Makes an API token for USER (an id, a name in your tenant, or TENANT/NAME;\n"
     "  default yourself) and prints it alone on stdout: it is shown once.\n"},
    {"nodes", cmd_nodes, 1, "cohort nodes\n  Nodes with their capacity in use (platform admin).\n"},
    {"node", cmd_node, 1, "cohort node drain|undrain|rm|rotate-token NODE\n  NODE is an id or a name (platform admin).\n"},
    {"join-token", cmd_join_token, 1,
     "cohort join-token [create] [--uses N] [--expires SECONDS] | ls | revoke ID\n"
     "  Tokens with which agents register (platform admin); create prints it once.\n"},
};

#define NCOMMANDS (sizeof commands / sizeof *commands)

static const char *const general =
    "usage: cohort [--json] [-o FIELD,...] [--url URL] COMMAND [ARGS...]\n"
    "\n"
    "  --json          print the API's own JSON\n"
    "  -o FIELD,...    print those fields (dot paths, e.g. price.cost_so_far), tab-\n"
    "                  separated, one line per item, no header\n"
    "  --url URL       the server (else COHORT_URL, else the login's)\n"
    "  The token is COHORT_TOKEN's, else the login's.\n"
    "\n"
    "commands:\n";

static const char *const footer =
    "\n"
    "`cohort COMMAND --help` tells more; man cohort tells all.\n"
    "exit status: 0 done; 1 the followed job failed, or a local error; 2 a usage\n"
    "error; 3 the server refused (4xx); 4 the server could not be reached or failed.\n";

const char *cli_usage_of(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(commands[i].name, name))
            return commands[i].usage;
    return "";
}

static void help(FILE *f)
{
    fputs(general, f);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const char *u = commands[i].usage + strlen("cohort "); /* its first line, less that */
        const char *nl = strchr(u, '\n');
        fprintf(f, "  %.*s\n", (int)(nl ? nl - u : (long)strlen(u)), u);
    }
    fputs(footer, f);
}

/* Options of submit and quote that take a value: the scan for the general
 * options must not read that value as one. */
static int takes_value(const char *a)
{
    static const char *const v[] = {"-f", "--file", "--name", "--image", "--dataset",
                                    "--workspace", "--code", "--epochs", "--lr", "--batch-size",
                                    "--spec", "--workers", "--per-node", "--priority",
                                    "--max-runtime", "--retries", "--env"};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (!strcmp(a, v[i]))
            return 1;
    return 0;
}

/*
 * Takes the general options out of argv (before the command, or among its
 * arguments up to "--" or, for submit and quote, up to the program's name),
 * and finds --help.  Returns the new argc, or -1 on a usage error.
 */
static int general_options(cli *c, int argc, char **argv, int *want_help)
{
    int out = 1, stop = 0, cmd_seen = 0, free_args = 0, skip = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (stop || skip) {
            skip = 0;
            argv[out++] = argv[i];
            continue;
        }
        if (!strcmp(a, "--")) {
            stop = 1;
            argv[out++] = argv[i];
        } else if (!strcmp(a, "--json")) {
            c->json = 1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--url")) {
            if (i + 1 >= argc)
                return cli_usage("%s takes a value", a), -1;
            if (a[1] == 'o' || a[2] == 'o')
                c->fields = argv[++i];
            else if (fmt_whole(c->url, sizeof c->url, "%s", argv[++i]) != 0)
                return cli_usage("--url: too long"), -1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *want_help = 1;
        } else {
            if (cmd_seen && free_args && a[0] != '-' && !strstr(a, ".yaml") &&
                !strstr(a, ".yml") && !strstr(a, ".json"))
                stop = 1; /* the program and its arguments follow */
            if (!cmd_seen && a[0] != '-') {
                cmd_seen = 1;
                free_args = !strcmp(a, "submit") || !strcmp(a, "quote");
            }
            skip = free_args && takes_value(a);
            argv[out++] = argv[i];
        }
    }
    argv[out] = NULL;
    return out;
}

int main(int argc, char **argv)
{
    cli c = {.retries = 3, .tty = isatty(1), .progress = isatty(2)};
    int want_help = 0, rc;
    cli_config_load(&c);
    char url_flag[CLI_URL_MAX] = "";
    argc = general_options(&c, argc, argv, &want_help);
    if (argc < 0)
        return CLI_USAGE;
    fmt_cut(url_flag, sizeof url_flag, "%s", c.url);
    if (argc < 2) {
        help(want_help ? stdout : stderr);
        return want_help ? CLI_OK : CLI_USAGE;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--version")) {
        if (argc > 2)
            fputs(cli_usage_of(argv[2]), stdout);
        else if (!strcmp(argv[1], "help"))
            help(stdout);
        else
            puts("cohort 1 (REST API v1)");
        return CLI_OK;
    }
    const struct command *cmd = NULL;
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(commands[i].name, argv[1]))
            cmd = &commands[i];
    if (!cmd) {
        fprintf(stderr, "cohort: no command '%s'\n", argv[1]);
        help(stderr);
        return CLI_USAGE;
    }
    if (want_help) {
        fputs(cmd->usage, stdout);
        return CLI_OK;
    }
    size_t n = strlen(c.url);
    while (n && c.url[n - 1] == '/')
        c.url[--n] = '\0';
    if (cmd->login && (!c.url[0] || !c.token[0]))
        return cli_fail(CLI_USAGE, "not logged in: run `cohort login URL` (or set COHORT_URL and "
                                   "COHORT_TOKEN)");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = cmd->run(&c, argc - 1, argv + 1);
    if (rc == CLI_USAGE)
        fprintf(stderr, "usage: %s", cmd->usage);
    cli_close(&c);
    curl_global_cleanup();
    fflush(stdout);
    return rc;
}
