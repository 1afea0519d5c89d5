/*
 * cmd_vol: workspaces and datasets: ls, push, pull (and seal, rm).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd.h"
#include "lib/fmt.h"
#include "cli/out.h"
#include "cli/sync.h"

static void fmt_size(const cJSON *o, char *b, size_t n)
{
    const cJSON *v = out_find(o, "size");
    if (cJSON_IsNumber(v))
        out_bytes(v->valuedouble, b, n);
    else
        fmt_cut(b, n, "-");
}

/* ls: the volumes, or one volume's files. */
static int vol_ls(cli *c, const char *kind, int argc, char **argv)
{
    static const out_col vols[] = {
        {"NAME", "name", NULL}, {"SEALED", "sealed", NULL}, {"CREATED", "created_at", NULL},
    };
    static const out_col files[] = {
        {"PATH", "path", NULL}, {"SIZE", NULL, fmt_size}, {"MODE", "mode", NULL},
        {"MODIFIED", "modified_at", NULL},
    };
    if (argc > 3)
        return cli_usage("ls takes at most one name");
    util_buf p = {0};
    util_buf_printf(&p, "/v1/%s", kind);
    if (argc == 3) {
        util_buf_printf(&p, "/");
        cli_escape(&p, argv[2]);
        util_buf_printf(&p, "/files");
    }
    cJSON *items = NULL;
    int rc = p.oom ? CLI_FAILED : cli_list(c, p.buf, "items", 1, &items, NULL);
    free(p.buf);
    if (rc == CLI_OK && argc == 3)
        rc = out_items(c, items, files, sizeof files / sizeof *files);
    else if (rc == CLI_OK && !strcmp(kind, "workspaces")) /* a workspace is never sealed */
        rc = out_items(c, items, (const out_col[]){vols[0], vols[2]}, 2);
    else if (rc == CLI_OK)
        rc = out_items(c, items, vols, sizeof vols / sizeof *vols);
    cJSON_Delete(items);
    return rc;
}

static void report(const char *what, const char *name, const sync_stats *st, int push)
{
    char bytes[32];
    out_bytes((double)st->bytes_sent, bytes, sizeof bytes);
    if (push)
        fprintf(stderr, "cohort: %s %s: %ld file%s sent (%s), %ld unchanged%s\n", what, name,
                st->sent, st->sent == 1 ? "" : "s", bytes, st->unchanged,
                st->left_out ? ", some left out (above)" : "");
    else
        fprintf(stderr, "cohort: %s %s: %ld file%s received (%s)\n", what, name, st->sent,
                st->sent == 1 ? "" : "s", bytes);
}

static int seal(cli *c, const char *name)
{
    util_buf p = {0};
    util_buf_printf(&p, "/v1/datasets/");
    cli_escape(&p, name);
    util_buf_printf(&p, "/seal");
    int rc = p.oom ? CLI_FAILED : cli_post_json(c, p.buf, NULL, NULL);
    if (rc == CLI_OK)
        fprintf(stderr, "cohort: dataset %s sealed: read-only from now on\n", name);
    free(p.buf);
    return rc;
}

static int vol_rm(cli *c, const char *kind, const char *name)
{
    util_buf p = {0};
    util_buf_printf(&p, "/v1/%s/", kind);
    cli_escape(&p, name);
    cli_resp r;
    cli_req rq = CLI_REQ("DELETE", p.buf);
    int rc = p.oom ? CLI_FAILED : cli_request(c, &rq, &r);
    cli_resp_free(&r);
    free(p.buf);
    return rc;
}

static int vol(cli *c, const char *kind, const char *what, int argc, char **argv)
{
    int do_seal = 0;
    for (int i = 2; i < argc; i++) /* --seal may stand anywhere after the verb */
        if (!strcmp(argv[i], "--seal")) {
            do_seal = 1;
            memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof *argv);
            argc--, i--;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage("%s: unknown option %s", what, argv[i]);
        }
    const char *verb = argc > 1 ? argv[1] : "";
    sync_stats st;
    int rc;
    if (do_seal && (strcmp(verb, "push") || strcmp(kind, "datasets")))
        return cli_usage("--seal goes with ds push");
    if (!strcmp(verb, "ls"))
        return vol_ls(c, kind, argc, argv);
    if (!strcmp(verb, "push") && argc == 4) {
        rc = sync_ensure(c, kind, argv[3]);
        if (rc == CLI_OK)
            rc = sync_push(c, kind, argv[3], argv[2], &st);
        if (rc == CLI_OK)
            report(what, argv[3], &st, 1);
        return rc == CLI_OK && do_seal ? seal(c, argv[3]) : rc;
    }
    if (!strcmp(verb, "pull") && argc == 4) {
        rc = sync_pull(c, kind, argv[2], argv[3], &st);
        if (rc == CLI_OK)
            report(what, argv[2], &st, 0);
        return rc;
    }
    if (!strcmp(verb, "seal") && argc == 3 && !strcmp(kind, "datasets"))
        return seal(c, argv[2]);
    if (!strcmp(verb, "rm") && argc == 3)
        return vol_rm(c, kind, argv[2]);
    return cli_usage("%s: ls [NAME] | push DIR NAME | pull NAME DIR | rm NAME", what);
}

int cmd_ws(cli *c, int argc, char **argv)
{
    return vol(c, "workspaces", "workspace", argc, argv);
}

int cmd_ds(cli *c, int argc, char **argv)
{
    return vol(c, "datasets", "dataset", argc, argv);
}
