/*
 * harness: what the integration tests share.  Starts a real cohortd on a
 * free loopback port in a fresh data dir, restarts or kills it, and sends
 * HTTP requests to it with libcurl.
 *
 * Under tests/with-postgres (COHORT_TEST_PG names the server's socket
 * directory) every cohortd runs on a PostgreSQL database of its own,
 * created here, instead of SQLite; th_db_* then ask that database.
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
    char store[400]; /* --store: a PostgreSQL URL under with-postgres, else "" */
} th_daemon;

/* ms since the epoch of the API's "YYYY-MM-DDTHH:MM:SS.mmmZ", parsed here
 * on purpose (not with cohortd's own code). */
long long th_ms_of(const char *s);

/* Whether this run's cohortd stores in PostgreSQL (tests/with-postgres). */
int th_pg(void);
/* The --store target of data dir dir: "sqlite:DIR/FILE", or under
 * with-postgres a URL of a database of its own (one per dir, created when
 * missing, so a store opened again in dir finds its data). */
void th_store_target(const char *dir, const char *file, char *out, size_t n);
/* The output of sql run on target by sqlite3 or psql (rows as "a|b" lines). */
void th_store_query(const char *target, const char *sql, char *out, size_t n);

typedef struct th_resp {
    long status;
    char *body;      /* NUL-terminated, owned */
    size_t len;
    cJSON *json;     /* parsed body or NULL, owned */
    char location[256];
    int replayed;
} th_resp;

/* A loopback TCP port free now (for a cohortd that must keep its port across
 * restarts, or a registry), from 20000-29499: outside the kernel's ephemeral
 * range and the agents' rendezvous ports, and never the same for two tests
 * of one run.  Where the ephemeral range reaches below 29500, the kernel's
 * choice instead. */
int th_free_port(void);
/* A loopback TCP port that nothing listens on for the rest of this test: it
 * stays bound (never listening, without SO_REUSEADDR) in the test's process,
 * so no registry or daemon started beside it can take it; connecting to it
 * is refused. */
int th_closed_port(void);
/* Starts cohortd with a new data dir; extra_args may be NULL. Aborts the test on failure. */
void th_start(th_daemon *d, const char *const *extra_args);
/* The same, without COHORT_ADMIN_TOKEN in its environment. */
void th_start_no_admin(th_daemon *d, const char *const *extra_args);
/* As th_start, in an existing directory dir (the caller's: a file system of its own, say). */
void th_start_in(th_daemon *d, const char *dir, const char *const *extra_args);
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
/* PUT /v1/tenants/TENANT/quota with json, as the platform admin; asserts 200. */
void th_put_quota(th_daemon *d, const char *tenant, const char *json);
/* The body (or the parsed JSON) of r, which is the caller's to free, and the
 * rest of r freed. */
char *th_take_body(th_resp *r);
cJSON *th_take_json(th_resp *r);
/* GET path, which must answer 200: its body (its JSON), the caller's. */
char *th_get_body(th_daemon *d, const char *path, const char *token);
cJSON *th_get_json(th_daemon *d, const char *path, const char *token);
/* Up to n-1 bytes of the file at path into buf: 0, or -1 when it cannot be opened. */
int th_read_text(const char *path, char *buf, size_t n);

/* A step that must answer WANT: asserts the status of the response RESP
 * (an expression; its body goes in the message) and frees it.  th_expect
 * checks the same and lets the test go on.  For test files, which include
 * criterion.h. */
#define th_must(RESP, WANT) TH_STATUS_(cr_assert_eq, RESP, WANT)
#define th_expect(RESP, WANT) TH_STATUS_(cr_expect_eq, RESP, WANT)
#define TH_STATUS_(CHECK, RESP, WANT)                                                              \
    do {                                                                                           \
        th_resp status_ = (RESP);                                                                  \
        CHECK(status_.status, (WANT), "%s", status_.body ? status_.body : "");                     \
        th_free(&status_);                                                                         \
    } while (0)

/* The error code / field of an error response ("" when absent). */
const char *th_err_code(const th_resp *r);
/* Checks (cr_expect) that r answered status with the error code and field
 * given (NULL: either not checked), then frees r. */
void th_expect_error(th_resp r, long status, const char *code, const char *field);
const char *th_err_field(const th_resp *r);
/* r->json[key] as a string / number. */
const char *th_str(const th_resp *r, const char *key);
double th_num(const th_resp *r, const char *key);
/* Number of items in a list response. */
int th_items(const th_resp *r);

/* Creates (when missing) tenant, a user in it with role, and a token; writes the
 * token into tok (80 bytes) and returns the user id. */
long th_user(th_daemon *d, const char *tenant, const char *user, const char *role, char *tok);

/* SHA-256 (hex) of the database's rows (`sqlite3 DB .dump`, or pg_dump's
 * data without its sequences' positions, which a refused INSERT moves,
 * and without the random key of its \restrict line):
 * equal before and after means nothing changed. */
void th_db_digest(th_daemon *d, char out[65]);
/* The output of running sql through the sqlite3 shell (or psql, rows as
 * "a|b" lines as sqlite3 prints them) on the database. */
void th_db_query(th_daemon *d, const char *sql, char *out, size_t n);
/* The engine's own check of the whole database into out: "ok\n" when it is
 * intact (SQLite's PRAGMA integrity_check; on PostgreSQL, amcheck's
 * verify_heapam on every table and bt_index_check on every index). */
void th_db_check(th_daemon *d, char *out, size_t n);

/* ---- agents ---- */

typedef struct th_agent {
    pid_t pid;
    char netns[32]; /* run inside this network namespace when set */
    char dir[400];
    char name[64];
    char join[80];
    char registry[64]; /* its default registry (th_registry) */
    char servers[400]; /* --server when not d's base (th_agent_start_on) */
} th_agent;

/*
 * The tests' OCI registry: docker-registry on a free loopback port, started
 * on first use in a test (th_cleanup stops it), serving storage built once
 * per build dir with the test images: cohort/cohort:bookworm (busybox: what
 * the built-in "native" and "cohort" images name) and cohort/worker:test
 * (busybox and cohort-worker with its libraries).  Returns "127.0.0.1:PORT".
 * Agents started by th_agent_start take it as their default registry and
 * run containers, unless their extra args name a --runtime.
 */
const char *th_registry(void);
void th_registry_stop(void);
/* Another registry over the same storage, listening at ip (a test network's
 * address); "ip:port".  Agents given "--registry" in their extra args take
 * that one and no other. */
const char *th_registry_on(const char *ip);
/* Adds the real built-in image cohort/pytorch:bookworm (scripts/build-images:
 * Debian's python3-torch; minutes the first time on a machine, cached in
 * /var/cache/cohort/images after that) to the tests' registry storage. */
void th_registry_add_pytorch(void);
/* An image cache (BUILD/test-image-cache) for agents of different tests to
 * share, as the agents of one machine would: the big images are unpacked
 * once per build, not once per test. */
const char *th_shared_image_cache(void);
/* Pushes a fresh busybox image as repo_tag to the tests' registry, with
 * tests/make-test-image options (may be NULL); its exit status. */
int th_push_image(const char *repo_tag, const char *const *opts);

/* 1 when the tests may create namespaces (root); otherwise the caller skips. */
int th_can_sandbox(void);
/* Starts cohort-agent for d with a fresh join token and waits until its node is
 * registered; extra args (may be NULL) are appended. */
void th_agent_start(th_agent *a, th_daemon *d, const char *name, const char *const *extra);
/* The same, inside network namespace netns (made by the caller). */
void th_agent_start_in(th_agent *a, th_daemon *d, const char *netns, const char *name,
                       const char *const *extra);
/* The same with --server servers (several cohortd: "URL1,URL2"). */
void th_agent_start_on(th_agent *a, th_daemon *d, const char *servers, const char *name,
                       const char *const *extra);
/* Starts it again with the same data dir (it keeps its node identity). */
void th_agent_restart(th_agent *a, th_daemon *d, const char *const *extra);
/* SIGTERM (it stops its workers) and wait; returns its exit status. */
int th_agent_stop(th_agent *a);
void th_agent_kill9(th_agent *a);
void th_agent_cleanup(th_agent *a);

/* Processes on this machine whose command line holds marker (a job's
 * processes, seen from the host whatever namespaces they are in). */
int th_count_marked(const char *marker);

/* Polls the job until its state is want (or a final state), at most timeout_ms;
 * returns 1 when it reached want.  The last state seen goes to seen[16]. */
int th_wait_state(th_daemon *d, const char *tok, long job, const char *want, int timeout_ms,
                  char *seen);
/* POSTs json to path as tok; the test stops unless it answered 201.  The
 * response is the caller's to check further and th_free. */
th_resp th_create(th_daemon *d, const char *path, const char *tok, const char *json);
/* Submits the job (a POST /v1/jobs body) as tok: its id; the test stops
 * unless it was accepted. */
long th_submit(th_daemon *d, const char *tok, const char *json);
/* Asks to cancel the job as tok: the answer's status. */
long th_cancel(th_daemon *d, const char *tok, long job);
/* The "id" of what GET path answers as tok; the test fails when it has none. */
long th_id(th_daemon *d, const char *path, const char *tok);
/* A TCP socket connected to cohortd, for requests curl will not send. */
int th_connect(th_daemon *d);
/* Writes a file into a workspace through the API (mode "755" or NULL). */
void th_put_text(th_daemon *d, const char *tok, const char *ws, const char *path,
                 const char *text, const char *mode);

#endif
