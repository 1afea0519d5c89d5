/*
 * api: the REST resources of cohortd, independent of the HTTP library.
 *
 * The server matches a route (api_route_match), authenticates the caller
 * (api_authenticate), reads the body within the route's bound, and calls
 * the route's handler with an api_req.  The handler fills an api_resp:
 * a finished response, a file to send, a durable write for the server to
 * hand to the store before finishing, or an upload to stream into.
 */
#ifndef COHORT_API_H
#define COHORT_API_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "scheduler/sched_service.h"
#include "storage/store.h"
#include "storage/store_node.h"
#include "storage/store_tenant.h"

#define API_MAX_PARAMS 3
#define API_DEFAULT_BODY_LIMIT (1024 * 1024)
#define API_DEFAULT_UPLOAD_LIMIT ((int64_t)1 << 30)
#define API_LIST_MAX 200
#define API_LIST_DEFAULT 50

enum api_method { API_GET, API_POST, API_PUT, API_DELETE, API_METHOD_OTHER };
enum api_body { API_BODY_NONE, API_BODY_JSON, API_BODY_UPLOAD, API_BODY_RAW };

typedef struct api_ctx {
    store *st;
    char data_dir[4096];     /* datasets and workspaces live under <data_dir>/volumes */
    size_t body_limit;       /* bytes of a JSON body */
    int64_t upload_limit;    /* bytes of one uploaded file */
    sched_service *sched;    /* woken by submits and reports; NULL: none */
    int64_t heartbeat_s;     /* what agents are told */
    int64_t lease_s;
    int64_t node_token_rotate_s; /* a node token this old is rotated; 0: only when asked */
    int64_t min_hold_s;      /* the scheduler's, for quotes */
    int64_t budget_grace_s;
    int web_fd;              /* the console's web root (api_web_open); -1: none */
    struct api_log_budget *logs; /* stored output per job (api_logs_open); NULL: unbounded */
    struct api_beats *beats; /* liveness-only heartbeats (api_beats_open); NULL: each written */
    struct regtoken *regtoken; /* the registry's token signer (regtoken.h); NULL: none */
    struct seal *seal;       /* what seals secrets at rest (seal.h); NULL: none */
    char registry[256];      /* HOST:PORT of the registry it signs for (--registry) */
    struct stuse *stuse;     /* tenants' storage use and quota (stuse.h); NULL: none */
    struct fsquota *fsq;     /* btrfs's stop at the quota (fsquota.h); NULL: the walk's only */
    int64_t default_max_pending; /* jobs a tenant without its own quota has waiting; -1 */
} api_ctx;

#define API_DEFAULT_LOG_LIMIT ((int64_t)256 << 20)

/* Where a worker finds its volumes inside its sandbox. */
#define API_MOUNT_ROOT "/cohort"
/* Host uids of tenants' containers: tenant t's root is API_UID_BASE + t x
 * 65536, its range 65536 uids; far above the host's own users and the usual
 * /etc/subuid ranges, and below 2^32 for every tenant id < API_UID_TENANTS. */
#define API_UID_BASE (1LL << 28)
#define API_UID_TENANTS 61439

enum api_auth { API_AUTH_NONE = 0, API_AUTH_USER = 1, API_AUTH_NODE = 2 };

typedef struct api_req {
    enum api_method method;
    const char *path;
    const char *param[API_MAX_PARAMS]; /* path captures, in pattern order */
    const char *(*query)(void *h, const char *key);
    const char *(*header)(void *h, const char *key);
    void *h;
    const char *body;
    size_t body_len;
    const store_principal *who; /* user routes: the caller */
    const store_node *node;     /* agent routes: the calling node */
    int waited;                 /* called again after a wait: answer now */
} api_req;

typedef struct api_resp api_resp;

/* A response streamed as it is produced (follow=true logs).  read() gives
 * up to n bytes: > 0 bytes, 0 when nothing is ready yet (the server asks
 * again shortly), -1 at the end.  The server calls done() once. */
typedef struct api_stream {
    ssize_t (*read)(struct api_stream *s, char *buf, size_t n);
    void (*done)(struct api_stream *s);
    void *state;
} api_stream;

/* A file upload in progress: the server writes the body into fd, at most
 * limit bytes, then calls finish (or abort when the body was not whole). */
typedef struct api_upload {
    int fd;
    int64_t limit;
    int64_t written;
    int64_t quota_left;  /* the tenant's storage quota left at open; -1: none */
    /* Takes n more bytes of the tenant's quota before they are written (so
     * that uploads side by side cannot each take what is left): 0, or -1
     * when they do not fit.  NULL: no quota. */
    int (*reserve)(struct api_upload *up, int64_t n);
    void *state;
    void (*finish)(api_ctx *ctx, const api_req *rq, api_resp *rs, struct api_upload *up);
    void (*abort)(struct api_upload *up); /* frees state, removes the partial file */
} api_upload;

struct api_resp {
    int status;
    char *body;                /* owned, malloc'd */
    size_t len;
    const char *ctype;         /* static string */
    char location[192];        /* Location header when not empty */
    char replayed;             /* Idempotent-Replayed: true */
    int fd;                    /* >= 0: send fsize bytes of this file from foffset; the server closes it */
    int64_t fsize;
    int64_t foffset;
    const char *xname;         /* one extra header, when set (static name) */
    char xvalue[64];
    const char *cache;         /* Cache-Control (static string); NULL: no-store */
    /* A durable write: the server runs write_fn through store_submit and
     * then finish with its result; finish owns and frees write_ctx. */
    store_write_fn write_fn;
    store_write_many_fn write_many; /* NULL, or what applies several such writes at once */
    void *write_ctx;
    void (*finish)(api_ctx *ctx, api_resp *rs, void *write_ctx, int rc);
    api_upload *upload;        /* set by an upload route's handler: owned by the server */
    api_stream *stream;        /* a streamed body: owned by the server once set */
    /* A long poll: the server parks the request until the desired-state
     * version of node wait_node passes wait_version or wait_ms pass, then calls the handler
     * again with rq->waited set. */
    uint64_t wait_version;
    int64_t wait_node; /* whose version (sched_version) */
    int64_t wait_ms;
    char tenant[UTIL_NAME_MAX + 1]; /* for the access log */
};

typedef void (*api_handler)(api_ctx *ctx, const api_req *rq, api_resp *rs);

typedef struct api_route {
    enum api_method method;
    const char *pattern;    /* "/v1/jobs/{}" ; "{*}" captures the rest of the path */
    api_handler fn;
    enum api_body body;
    enum api_auth auth;     /* which bearer token the route takes */
} api_route;

/* The route for method and path, filling rq->param with the captures,
 * copied one after another into buf (the caller's: at least
 * strlen(path) + API_MAX_PARAMS + 1 bytes, alive as long as rq).
 * NULL when none; *other_method is set when the path exists for another
 * method (405). */
const api_route *api_route_match(enum api_method m, const char *path, api_req *rq, char *buf,
                                 int *other_method);
/* Every route, ending with a zeroed entry (for the OpenAPI check). */
const api_route *api_routes(void);
/* Percent-decodes s in place (paths and query values): exactly two hex
 * digits after '%', anything else kept as it is; %00 becomes 0x01 so a NUL
 * can never cut a path short (validators refuse control bytes).  Returns the
 * new length. */
size_t api_percent_decode(char *s);
enum api_method api_method_parse(const char *s);
const char *api_method_name(enum api_method m);

/*
 * Resolves "Bearer <token>" to its principal.  0 on success; otherwise fills
 * rs with 401 and returns -1.
 */
int api_authenticate(api_ctx *ctx, const char *authorization, store_principal *who,
                     api_resp *rs);
/* The same, for a platform admin only: 0, or -1 with rs set to 401 or 403. */
int api_authenticate_admin(api_ctx *ctx, const char *authorization, store_principal *who,
                           api_resp *rs);

/* Resolves an agent's "Bearer <node token>"; 0, or -1 with rs set to 401. */
int api_authenticate_node(api_ctx *ctx, const char *authorization, store_node *node,
                          api_resp *rs);

/* Seals the registry passwords of images kept in the clear by an earlier
 * cohortd (at start): 0, or -1 with err set. */
int api_images_reseal(api_ctx *ctx, char *err, size_t errlen);

/* First start: creates the platform admin with token (or a generated one,
 * written to out).  Sets *created to 1 when it did. */
/*
 * A signal from another cohortd on the same database (store_on_signal's
 * callback; arg is the api_ctx): "forget N" drops token N from the token
 * cache; the scheduler's signals go to sched_signal; NULL (some may be
 * lost) does both for everything.
 */
void api_on_signal(void *arg, const char *what);
/* store_on_nodes's callback (arg is the api_ctx): commits here or in another
 * cohortd changed these nodes; their cached lookups are dropped and the
 * scheduler wakes their agents' long polls. */
void api_on_nodes(void *arg, const int64_t *ids, size_t n);

int api_bootstrap_admin(api_ctx *ctx, const char *token, char out[UTIL_TOKEN_LEN + 1],
                        int *created, char *err, size_t errlen);

/*
 * The console (api_web.c).  api_web_open sets ctx->web_fd to the directory
 * dir (which must hold index.html); 0, or -1 with a message in err.
 * api_web_serve answers a GET of path outside the API from it: 1 when rs
 * was filled (the file, index.html for a page of the console, or 404), 0
 * when path belongs to the API.
 */
int api_web_open(api_ctx *ctx, const char *dir, char *err, size_t errlen);
void api_web_close(api_ctx *ctx);
int api_web_serve(api_ctx *ctx, const char *path, api_resp *rs);

/*
 * Workers' output (api_logs.c): api_logs_open bounds what is stored of one
 * job, every rank and attempt together, to limit bytes; past it a rank's
 * log ends with a line saying so, the job gets one event, and the rest is
 * dropped (the agent is told it was taken, so the job is never held up).
 * 0, or -1 with a message.  api_logs_close frees it.
 */
int api_logs_open(api_ctx *ctx, int64_t limit, char *err, size_t errlen);

/*
 * Heartbeats that only say a node is alive, written together every half
 * second by a thread of their own (api_beats.c).  open: 0, or -1 with a
 * message in err.  close: writes what is pending and stops the thread
 * (before the store closes).  note: 0 when node_id's time at was taken,
 * -1 when the caller must write it itself.
 */
int api_beats_open(api_ctx *ctx, char *err, size_t errlen);
void api_beats_close(api_ctx *ctx);
int api_beats_note(api_ctx *ctx, int64_t node_id, int64_t at);
void api_logs_close(api_ctx *ctx);

/* Sent with every response: the console's scripts and styles come only from
 * cohortd itself, never inline, and no page of it may be framed. */
#define API_CSP                                                                                  \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "            \
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "                 \
    "frame-ancestors 'none'"

/* Error body {"error":{"code","message","field"?}} with status. */
void api_error(api_resp *rs, int status, const char *code, const char *field,
               const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Frees what rs owns and closes its file. */
void api_resp_clear(api_resp *rs);

/*
 * Removes, in a thread of its own, the temporary files of uploads that a
 * crash cut off (their names start ".cohort-upload-", and they are older
 * than this call) anywhere under DATA_DIR/volumes: the server serves
 * meanwhile.  0, or -1 when the thread could not start.
 */
int api_uploads_sweep(const char *data_dir);

#endif
