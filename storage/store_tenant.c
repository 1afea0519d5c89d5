/*
 * store_tenant: SQL for tenants, users and API tokens.
 */
#include "storage/store_tenant.h"

#include <string.h>

#include "storage/store_int.h"

#define USER_COLS "u.id, u.tenant_id, t.name, u.name, u.role, u.created_at, t.is_platform"

static void user_row(store_st *st, int i, store_user *u, int *is_platform)
{
    u->id = store_col_int64(st, i);
    u->tenant_id = store_col_int64(st, i + 1);
    store_col_copy(st, i + 2, u->tenant, sizeof u->tenant);
    store_col_copy(st, i + 3, u->name, sizeof u->name);
    store_col_copy(st, i + 4, u->role, sizeof u->role);
    u->created_at = store_col_int64(st, i + 5);
    if (is_platform)
        *is_platform = store_col_int(st, i + 6);
}

/* A user of a USER_COLS row. */
static void user_only(store_st *st, void *out)
{
    user_row(st, 0, out, NULL);
}

STORE_ROWS(user_rows, store_user, user_only)

store_rc store_token_lookup(store *s, const uint8_t hash[UTIL_SHA256_LEN], int64_t now_ms,
                       store_principal *out)
{
    static const char sql[] =
        "SELECT k.id, k.hash, " USER_COLS ", coalesce(k.expires_at, 0) FROM api_tokens k"
        " JOIN users u ON u.id = k.user_id JOIN tenants t ON t.id = u.tenant_id"
        " WHERE k.hash = ?1 AND k.revoked_at IS NULL"
        " AND (k.expires_at IS NULL OR k.expires_at > ?2)";
    store_st *st = store_prep(store_reader(s), sql, STORE_ARGS(STORE_B(hash, UTIL_SHA256_LEN),
            STORE_I(now_ms)));
    if (!st)
        return STORE_EIO;
    int rc = store_step(st);
    if (rc == STORE_ROW) {
        if (store_col_equal(st, 1, hash, UTIL_SHA256_LEN)) {
            out->token_id = store_col_int64(st, 0);
            user_row(st, 2, &out->user, &out->tenant_is_platform);
            out->token_expires_at = store_col_int64(st, 9);
            rc = STORE_OK;
        } else {
            rc = STORE_NOTFOUND;
        }
    } else {
        rc = rc == STORE_DONE ? STORE_NOTFOUND : rc;
    }
    store_reset(st);
    return rc;
}

store_rc store_tenant_insert(store_tx *tx, const char *name, int64_t *id)
{
    static const char sql[] = "INSERT INTO tenants(name, created_at) VALUES (?1, ?2) RETURNING id";
    return store_exec(store_tx_conn(tx), id, sql, STORE_ARGS(STORE_T(name),
            STORE_I(util_now_ms())));
}

static void tenant_row(store_st *st, void *out)
{
    store_tenant *t = out;
    t->id = store_col_int64(st, 0);
    store_col_copy(st, 1, t->name, sizeof t->name);
    t->is_platform = store_col_int(st, 2);
    t->created_at = store_col_int64(st, 3);
}

STORE_ROWS(tenant_rows, store_tenant, tenant_row)

store_rc store_tenant_by_name(store *s, const char *name, store_tenant *out)
{
    static const char sql[] =
        "SELECT id, name, is_platform, created_at FROM tenants WHERE name = ?1";
    return store_get_one(store_prep(store_reader(s), sql, STORE_ARGS(STORE_T(name))), tenant_row,
                         out);
}

store_rc store_tenant_list(store *s, int64_t after, int limit,
                      void (*row)(void *arg, const store_tenant *t), void *arg)
{
    static const char sql[] = "SELECT id, name, is_platform, created_at FROM tenants"
                              " WHERE id > ?1 AND is_platform = 0 ORDER BY id LIMIT ?2";
    struct tenant_rows r = {row, arg};
    return store_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(after),
            STORE_I(limit))), tenant_rows, &r);
}

store_rc store_user_insert(store_tx *tx, int64_t tenant_id, const char *name, const char *role,
                      int64_t *id)
{
    static const char sql[] =
        "INSERT INTO users(tenant_id, name, role, created_at) VALUES (?1, ?2, ?3, ?4)"
        " RETURNING id";
    return store_exec(store_tx_conn(tx), id, sql, STORE_ARGS(STORE_I(tenant_id), STORE_T(name),
            STORE_T(role), STORE_I(util_now_ms())));
}

store_rc store_user_get(store *s, int64_t id, store_user *out)
{
    static const char sql[] = "SELECT " USER_COLS " FROM users u"
                              " JOIN tenants t ON t.id = u.tenant_id WHERE u.id = ?1";
    return store_get_one(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(id))), user_only, out);
}

store_rc store_user_list(store *s, int64_t tenant_id, int64_t after, int limit,
                    void (*row)(void *arg, const store_user *u), void *arg)
{
    static const char sql[] = "SELECT " USER_COLS " FROM users u"
                              " JOIN tenants t ON t.id = u.tenant_id"
                              " WHERE u.tenant_id = ?1 AND u.id > ?2 ORDER BY u.id LIMIT ?3";
    struct user_rows r = {row, arg};
    return store_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(tenant_id),
            STORE_I(after), STORE_I(limit))), user_rows, &r);
}

store_rc store_platform_admin_count(store *s, int64_t *n)
{
    static const char sql[] = "SELECT count(*) FROM users WHERE role = 'platform_admin'";
    return store_int64(store_reader(s), n, sql, NULL);
}

store_rc store_platform_tenant_tx(store_tx *tx, int64_t *id)
{
    static const char sql[] = "SELECT id FROM tenants WHERE is_platform = 1";
    return store_int64(store_tx_conn(tx), id, sql, NULL);
}

store_rc store_token_insert(store_tx *tx, int64_t user_id, const char *name,
                       const uint8_t hash[UTIL_SHA256_LEN], int64_t expires_at, int64_t *id)
{
    static const char sql[] = "INSERT INTO api_tokens(user_id, name, hash, created_at, expires_at)"
                              " VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_prep(c, sql, STORE_ARGS(STORE_I(user_id), STORE_T(name),
            STORE_B(hash, UTIL_SHA256_LEN), STORE_I(util_now_ms())));
    if (!st)
        return STORE_EIO;
    if (expires_at > 0)
        store_bind_int64(st, 5, expires_at);
    return store_step_change(c, st, id);
}

#define TOKEN_COLS                                                                         \
    "k.id, k.user_id, u.tenant_id, k.name, k.created_at, coalesce(k.expires_at, 0),"       \
    " coalesce(k.revoked_at, 0)"

static void token_row(store_st *st, void *out)
{
    store_token *t = out;
    t->id = store_col_int64(st, 0);
    t->user_id = store_col_int64(st, 1);
    t->tenant_id = store_col_int64(st, 2);
    store_col_copy(st, 3, t->name, sizeof t->name);
    t->created_at = store_col_int64(st, 4);
    t->expires_at = store_col_int64(st, 5);
    t->revoked_at = store_col_int64(st, 6);
}

STORE_ROWS(token_rows, store_token, token_row)

store_rc store_token_get(store *s, int64_t id, store_token *out)
{
    static const char sql[] = "SELECT " TOKEN_COLS " FROM api_tokens k"
                              " JOIN users u ON u.id = k.user_id WHERE k.id = ?1";
    return store_get_one(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(id))), token_row, out);
}

store_rc store_token_count_live(store *s, int64_t user_id, int64_t now_ms, int64_t *n)
{
    static const char sql[] = "SELECT count(*) FROM api_tokens WHERE user_id = ?1"
                              " AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?2)";
    return store_int64(store_reader(s), n, sql, STORE_ARGS(STORE_I(user_id), STORE_I(now_ms)));
}

store_rc store_token_list(store *s, int64_t user_id, int64_t after, int limit,
                     void (*row)(void *arg, const store_token *t), void *arg)
{
    static const char sql[] = "SELECT " TOKEN_COLS " FROM api_tokens k"
                              " JOIN users u ON u.id = k.user_id"
                              " WHERE k.user_id = ?1 AND k.id > ?2 ORDER BY k.id LIMIT ?3";
    struct token_rows r = {row, arg};
    return store_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(user_id), STORE_I(after),
            STORE_I(limit))), token_rows, &r);
}

store_rc store_token_revoke(store_tx *tx, int64_t id, int64_t now_ms)
{
    static const char sql[] =
        "UPDATE api_tokens SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL";
    return store_exec(store_tx_conn(tx), NULL, sql, STORE_ARGS(STORE_I(id), STORE_I(now_ms)));
}
