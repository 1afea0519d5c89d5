/*
 * fuzz_job_spec: POST /v1/jobs short of the commit.  The input is the
 * request body; api_job_create parses and validates it against a real
 * store (a tenant with a workspace holding t.py and sub/u.py, a sealed
 * dataset, a node that fits the built-in specs).  A body that passes is
 * handed back as a deferred write, which is finished as if the disk were
 * full: nothing is written, and every input takes the same path a request
 * does up to the database.  Checked on every input: the answer is one of
 * the statuses the API documents for a create, never a 500.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "api/api_int.h"
#include "storage/store_node.h"
#include "storage/store_tenant.h"
#include "storage/store_volume.h"
#include "tests/fuzz/fuzz.h"

static api_ctx ctx;
static store_principal who;
static char data_dir[64];

static void die(const char *what)
{
    fprintf(stderr, "fuzz_job_spec: setting up: %s\n", what);
    exit(1);
}

static store_rc setup_write(store_tx *tx, void *arg)
{
    int64_t tenant, user, ws, ds;
    store_node n;
    uint8_t hash[UTIL_SHA256_LEN] = {1};
    int rc;
    (void)arg;
    if ((rc = store_tenant_insert(tx, "acme", &tenant)) ||
        (rc = store_user_insert(tx, tenant, "alice", "tenant_admin", &user)) ||
        (rc = store_volume_insert(tx, STORE_WORKSPACE, tenant, "ws", &ws)) ||
        (rc = store_volume_insert(tx, STORE_DATASET, tenant, "mnist", &ds)) ||
        (rc = store_dataset_seal(tx, ds)))
        return rc;
    memset(&n, 0, sizeof n);
    snprintf(n.name, sizeof n.name, "node-1");
    snprintf(n.address, sizeof n.address, "127.0.0.1");
    n.cpus = 64;
    n.memory_mb = 1 << 20;
    n.gpus = 8;
    snprintf(n.gpu_type, sizeof n.gpu_type, "h100");
    n.port_lo = 30000;
    n.port_hi = 30999;
    return store_node_insert(tx, &n, hash);
}

static void cleanup(void)
{
    char cmd[128];
    store_close(ctx.st);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_job_spec: cannot remove %s\n", data_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char err[256], db[128];
    store_tenant t;
    store_volume ws;
    (void)argc;
    (void)argv;
    snprintf(data_dir, sizeof data_dir, "/tmp/cohort-fuzz-XXXXXX");
    if (!mkdtemp(data_dir))
        die("mkdtemp");
    snprintf(db, sizeof db, "%s/cohort.db", data_dir);
    if (!(ctx.st = store_open(db, err, sizeof err)))
        die(err);
    atexit(cleanup);
    snprintf(ctx.data_dir, sizeof ctx.data_dir, "%s", data_dir);
    ctx.body_limit = API_DEFAULT_BODY_LIMIT;
    ctx.upload_limit = API_DEFAULT_UPLOAD_LIMIT;
    ctx.min_hold_s = 3600;
    ctx.web_fd = -1;
    if (store_write(ctx.st, setup_write, NULL) != STORE_OK)
        die("the tenant, volumes and node");
    if (store_tenant_by_name(ctx.st, "acme", &t) != STORE_OK ||
        store_volume_get(ctx.st, STORE_WORKSPACE, t.id, "ws", 0, &ws) != STORE_OK)
        die("reading back");
    int root = api_volume_root(&ctx, STORE_WORKSPACE, &ws, 1);
    if (root < 0 || mkdirat(root, "sub", 0755) != 0)
        die("the workspace's directory");
    int fd = openat(root, "t.py", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    int fd2 = openat(root, "sub/u.py", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || fd2 < 0 || symlinkat("t.py", root, "link.py") != 0)
        die("the workspace's files");
    close(fd);
    close(fd2);
    close(root);
    who.user.id = 2;
    who.user.tenant_id = t.id;
    snprintf(who.user.tenant, sizeof who.user.tenant, "acme");
    snprintf(who.user.name, sizeof who.user.name, "alice");
    snprintf(who.user.role, sizeof who.user.role, "tenant_admin");
    return 0;
}

static const char *idem_key;

static const char *header(void *h, const char *key)
{
    (void)h;
    return strcmp(key, "Idempotency-Key") ? NULL : idem_key;
}

static const char *no_query(void *h, const char *key)
{
    (void)h;
    (void)key;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    api_req rq;
    api_resp rs;
    if (size < 1 || size > API_DEFAULT_BODY_LIMIT)
        return 0;
    /* The first byte: with or without an Idempotency-Key. */
    idem_key = data[0] & 1 ? "fuzz-key" : NULL;
    memset(&rq, 0, sizeof rq);
    memset(&rs, 0, sizeof rs);
    rs.fd = -1;
    rq.method = API_POST;
    rq.path = "/v1/jobs";
    rq.header = header;
    rq.query = no_query;
    rq.body = (const char *)data + 1;
    rq.body_len = size - 1;
    rq.who = &who;
    api_job_create(&ctx, &rq, &rs);
    if (rs.write_fn) {
        fuzz_check(rs.status == 0 && rs.finish && rs.write_ctx, "a deferred write with an answer");
        rs.finish(&ctx, &rs, rs.write_ctx, STORE_FULL);
        fuzz_check(rs.status == 507, "a refused write answered other than 507");
    } else {
        fuzz_check(rs.status == 400 || rs.status == 404 || rs.status == 409 ||
                       rs.status == 413 || rs.status == 422,
                   "a job create answered outside 400/404/409/413/422");
        fuzz_check(rs.body && strstr(rs.body, "\"error\""), "an error without its body");
    }
    if (getenv("FUZZ_VERBOSE")) /* for whoever grows the corpus: what each seed reached */
        fprintf(stderr, "%d %.200s\n", rs.status, rs.body ? rs.body : "");
    api_resp_clear(&rs);
    return 0;
}
