/*
 * harness: what the integration tests share.  Starts a real cohortd on a
 * free loopback port in a fresh data dir, restarts or kills it, and sends
 * HTTP requests to it with libcurl.
 */
#ifndef COHORT_TEST_HARNESS_H
#define COHORT_TEST_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#define TH_ADMIN "test-admin-token-0123456789abcdef"

typedef struct th_daemon {
    pid_t pid;
    int no_admin_env; /* start without COHORT_ADMIN_TOKEN: cohortd makes a token */
    char dir[256];   /* data dir */
    char base[160];  /* http://127.0.0.1:PORT */
    char db[300];    /* the SQLite file */
} th_daemon;

typedef struct th_resp {
    long status;
    char *body;      /* NUL-terminated, owned */
    size_t len;
    cJSON *json;     /* parsed body or NULL, owned */
    char location[256];
    int replayed;
} th_resp;

/* Starts cohortd with a new data dir; extra_args may be NULL. Aborts the test on failure. */
void th_start(th_daemon *d, const char *const *extra_args);
/* The same, without COHORT_ADMIN_TOKEN in its environment. */
void th_start_no_admin(th_daemon *d, const char *const *extra_args);
/* Starts it again on the same data dir (after th_stop or th_kill9). */
void th_restart(th_daemon *d, const char *const *extra_args);
/* SIGTERM and wait; returns the exit status (0 on a clean stop). */
int th_stop(th_daemon *d);
void th_kill9(th_daemon *d);
/* Removes the data dir. */
void th_cleanup(th_daemon *d);

/* Runs cohortd with args to its end (at most 10 s), capturing its output into
 * out; returns its exit status. */
int th_cohortd_once(const char *const *args, char *out, size_t n);

/* One request.  body may be NULL; ctype defaults to application/json when body is set. */
th_resp th_req(th_daemon *d, const char *method, const char *path, const char *token,
               const char *ctype, const void *body, size_t len, const char *extra_header);
th_resp th_get(th_daemon *d, const char *path, const char *token);
th_resp th_del(th_daemon *d, const char *path, const char *token);
th_resp th_post(th_daemon *d, const char *path, const char *token, const char *json);
th_resp th_put_file(th_daemon *d, const char *path, const char *token, const void *data,
                    size_t len);
void th_free(th_resp *r);

/* The error code / field of an error response ("" when absent). */
const char *th_err_code(const th_resp *r);
const char *th_err_field(const th_resp *r);
/* r->json[key] as a string / number. */
const char *th_str(const th_resp *r, const char *key);
double th_num(const th_resp *r, const char *key);
/* Number of items in a list response. */
int th_items(const th_resp *r);

/* Creates (when missing) tenant, a user in it with role, and a token; writes the
 * token into tok (80 bytes) and returns the user id. */
long th_user(th_daemon *d, const char *tenant, const char *user, const char *role, char *tok);

/* SHA-256 (hex) of `sqlite3 DB .dump`: equal before and after means nothing changed. */
void th_db_digest(th_daemon *d, char out[65]);
/* The output of running sql through the sqlite3 shell on the database. */
void th_db_query(th_daemon *d, const char *sql, char *out, size_t n);

#endif
