/*
 * cmd: cohort's commands, one function each, called by main with argv[0]
 * the command's name.  Each returns an exit code (cli.h) and prints its own
 * errors.  Their usage texts live with the command table in main.c.
 */
#ifndef COHORT_CLI_CMD_H
#define COHORT_CLI_CMD_H

#include "cli/cli.h"

/* cmd_jobs.c */
int cmd_submit(cli *c, int argc, char **argv);
int cmd_quote(cli *c, int argc, char **argv);
int cmd_jobs(cli *c, int argc, char **argv);
int cmd_show(cli *c, int argc, char **argv);
int cmd_events(cli *c, int argc, char **argv);
int cmd_workers(cli *c, int argc, char **argv);
int cmd_logs(cli *c, int argc, char **argv);
int cmd_cancel(cli *c, int argc, char **argv);
int cmd_retry(cli *c, int argc, char **argv);

/* cmd_vol.c */
int cmd_ws(cli *c, int argc, char **argv);
int cmd_ds(cli *c, int argc, char **argv);

/* cmd_acct.c: the account, money and the catalogue */
int cmd_login(cli *c, int argc, char **argv);
int cmd_logout(cli *c, int argc, char **argv);
int cmd_whoami(cli *c, int argc, char **argv);
int cmd_quota(cli *c, int argc, char **argv);
int cmd_usage(cli *c, int argc, char **argv);
int cmd_invoice(cli *c, int argc, char **argv);
int cmd_images(cli *c, int argc, char **argv);
int cmd_specs(cli *c, int argc, char **argv);

/* cmd_admin.c */
int cmd_tenants(cli *c, int argc, char **argv);
int cmd_tenant(cli *c, int argc, char **argv);
int cmd_users(cli *c, int argc, char **argv);
int cmd_user(cli *c, int argc, char **argv);
int cmd_token(cli *c, int argc, char **argv);
int cmd_nodes(cli *c, int argc, char **argv);
int cmd_node(cli *c, int argc, char **argv);
int cmd_join_token(cli *c, int argc, char **argv);

#endif
