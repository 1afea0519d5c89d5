/*
 * cli: what the commands of `cohort` share: the connection to cohortd (URL,
 * token, one libcurl handle), the output options, the exit codes, and one
 * request function that turns every answer into either JSON or an error
 * printed the same way.  cohort speaks only the REST API (openapi.yaml).
 */
#ifndef COHORT_CLI_H
#define COHORT_CLI_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "lib/util.h"

/* Exit codes: distinct for scripts (cohort.1, EXIT STATUS). */
enum {
    CLI_OK = 0,
    CLI_FAILED = 1,      /* a followed job failed or was cancelled; a local file error */
    CLI_USAGE = 2,       /* the command line is wrong */
    CLI_REFUSED = 3,     /* the server answered 4xx */
    CLI_UNREACHABLE = 4, /* no answer, or a 5xx, after the retries */
};

#define CLI_URL_MAX 512
#define CLI_TOKEN_MAX 256

typedef struct cli {
    char url[CLI_URL_MAX];     /* without a trailing slash */
    char token[CLI_TOKEN_MAX];
    int json;                  /* --json: the API's own JSON */
    const char *fields;        /* -o FIELD,...: those fields, tab-separated, no header */
    int tty;                   /* stdout is a terminal */
    int progress;              /* stderr is a terminal: progress bars */
    int retries;               /* tries after the first for a retryable failure */
    void *curl;                /* CURL *, made on first use */
} cli;

/* One answer.  body is NUL-terminated and owned; json is the parsed body
 * when it was JSON, also owned.  cli_resp_free releases both. */
typedef struct cli_resp {
    long status;
    util_buf body;
    cJSON *json;
    long long next_offset;     /* X-Next-Offset, or -1 */
    int replayed;              /* Idempotent-Replayed: true */
} cli_resp;

void cli_resp_free(cli_resp *r);

/* What a request sends.  All optional but method and path (which carries its
 * query, already escaped). */
typedef struct cli_req {
    const char *method;
    const char *path;
    const char *json;          /* a JSON body */
    const char *accept;        /* Accept header */
    const char *idem_key;      /* Idempotency-Key: also makes a POST safe to retry */
    int upload_fd;             /* a file to PUT (with upload_size bytes), or -1 */
    int64_t upload_size;
    int download_fd;           /* write the body here instead of into r->body, or -1 */
    int no_retry;
    /* called as bytes move (sent for an upload, received otherwise) */
    void (*progress)(void *arg, int64_t done);
    void *progress_arg;
} cli_req;

#define CLI_REQ(M, P) ((cli_req){.method = (M), .path = (P), .upload_fd = -1, .download_fd = -1})

/*
 * Sends rq and waits for the answer.  GET, PUT, DELETE and POSTs with an
 * idempotency key are tried again (up to c->retries times, after Retry-After
 * or a growing pause) when no answer came or it was 429, 502, 503 or 504.
 * Returns CLI_OK for a 2xx; otherwise prints "cohort: CODE: MESSAGE" (the
 * API's error) or why nothing answered to stderr and returns CLI_REFUSED or
 * CLI_UNREACHABLE.  r is filled either way (the caller frees it).
 */
int cli_request(cli *c, const cli_req *rq, cli_resp *r);
/* The same, without printing: the caller reports. */
int cli_request_quiet(cli *c, const cli_req *rq, cli_resp *r);
/* Prints r's error the way cli_request does (for cli_request_quiet's callers). */
void cli_report(const cli_resp *r, int rc);
/* GET path into *out (the caller's, cJSON_Delete): CLI_OK or as cli_request. */
int cli_get_json(cli *c, const char *path, cJSON **out);
/* POST json (may be NULL) to path; *out as cli_get_json (out may be NULL). */
int cli_post_json(cli *c, const char *path, const char *json, cJSON **out);

/*
 * GET path (which may hold a query; "limit" and "cursor" are added) page by
 * page while next_cursor says there is more, or only the first page when
 * !all; the items of key ("items", or "lines" for invoices) go into *items,
 * and the first page's body, with its items removed, into *page when page is
 * not NULL (both the caller's).  CLI_OK or an exit code (printed).
 */
int cli_list(cli *c, const char *path, const char *key, int all, cJSON **items, cJSON **page);

/* Appends s to b, escaped for a URL's path segment or query value. */
void cli_escape(util_buf *b, const char *s);
/* Prints the error in a usage message to stderr: CLI_USAGE. */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "cohort: " and the message to stderr: code (returned). */
int cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A random idempotency key ("cohort-" and 32 hex digits) into out[48]. */
void cli_new_key(char out[48]);
/* A job id (or another positive integer) from s: 0, or CLI_USAGE (printed). */
int cli_id(const char *s, const char *what, int64_t *id);
/* "3m", "2h" or "4d" since the API's time t, or "-". */
void cli_age(const char *t, char *buf, size_t n);
/* The usage text of command name (main.c's table), or "". */
const char *cli_usage_of(const char *name);
/* Stops the libcurl handle. */
void cli_close(cli *c);

/* config: ~/.config/cohort/config (or $XDG_CONFIG_HOME/cohort/config), 0600.
 * cli_config_load fills c->url and c->token from it, then from COHORT_URL and
 * COHORT_TOKEN, which win.  cli_config_save writes url and token there
 * (temporary file, fsync, rename): 0, or -1 with the reason printed. */
void cli_config_load(cli *c);
int cli_config_save(const char *url, const char *token);
/* The config file's path into out. */
int cli_config_path(char *out, size_t n);

#endif
