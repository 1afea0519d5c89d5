/*
 * store_volume: SQL for datasets and workspaces.  The two tables have the
 * same shape; each statement exists once per table.
 */
#include "storage/store_volume.h"

#include "storage/store_int.h"

#define VOL_SELECT(table, sealed)                                                          \
    "SELECT " STORE_VOL_COLS(sealed) " FROM " table " v JOIN tenants t ON t.id = v.tenant_id"

static const char *const get_sql[2] = {
    VOL_SELECT("datasets", "v.sealed")
    " WHERE v.name = ?1 AND (v.tenant_id = ?2 OR (?3 <> 0 AND t.is_platform = 1))"
    " ORDER BY t.is_platform LIMIT 1",
    VOL_SELECT("workspaces", "0") " WHERE v.name = ?1 AND v.tenant_id = ?2",
};

static const char *const list_sql[2] = {
    VOL_SELECT("datasets", "v.sealed")
    " WHERE (v.tenant_id = ?1 OR (?2 <> 0 AND t.is_platform = 1)) AND v.id > ?3"
    " ORDER BY v.id LIMIT ?4",
    VOL_SELECT("workspaces", "0") " WHERE v.tenant_id = ?1 AND v.id > ?3 ORDER BY v.id LIMIT ?4",
};

static const char *const insert_sql[2] = {
    "INSERT INTO datasets(tenant_id, name, created_at) VALUES (?1, ?2, ?3) RETURNING id",
    "INSERT INTO workspaces(tenant_id, name, created_at) VALUES (?1, ?2, ?3) RETURNING id",
};

static const char *const delete_sql[2] = {
    "DELETE FROM datasets WHERE id = ?1",
    "DELETE FROM workspaces WHERE id = ?1",
};

void store_vol_row(store_st *st, void *out)
{
    store_volume *v = out;
    v->id = store_col_int64(st, 0);
    v->tenant_id = store_col_int64(st, 1);
    store_col_copy(st, 2, v->tenant, sizeof v->tenant);
    store_col_copy(st, 3, v->name, sizeof v->name);
    v->sealed = store_col_int(st, 4);
    v->is_public = store_col_int(st, 5);
    v->created_at = store_col_int64(st, 6);
}

STORE_ROWS(vol_rows, store_volume, store_vol_row)

store_rc store_volume_get(store *s, store_vol_kind k, int64_t tenant_id, const char *name,
                     int with_public, store_volume *out)
{
    store_st *st = store_read_stmt(s, get_sql[k]);
    if (st) {
        store_bind_text(st, 1, name);
        store_bind_int64(st, 2, tenant_id);
        if (k == STORE_DATASET)
            store_bind_int64(st, 3, with_public != 0);
    }
    return store_get_one(st, store_vol_row, out);
}

store_rc store_volume_list(store *s, store_vol_kind k, int64_t tenant_id, int with_public,
                      int64_t after, int limit, void (*row)(void *arg, const store_volume *v),
                      void *arg)
{
    struct vol_rows r = {row, arg};
    store_st *st = store_read_stmt(s, list_sql[k]);
    if (st) {
        store_bind_int64(st, 1, tenant_id);
        if (k == STORE_DATASET)
            store_bind_int64(st, 2, with_public != 0);
        store_bind_int64(st, 3, after);
        store_bind_int64(st, 4, limit);
    }
    return store_each(st, vol_rows, &r);
}

store_rc store_volume_insert(store_tx *tx, store_vol_kind k, int64_t tenant_id, const char *name,
                        int64_t *id)
{
    return store_exec(store_tx_conn(tx), id, insert_sql[k], STORE_ARGS(STORE_I(tenant_id),
            STORE_T(name), STORE_I(util_now_ms())));
}

store_rc store_volume_count(store *s, store_vol_kind k, int64_t tenant_id, int64_t *n)
{
    static const char *const sql[2] = {
        "SELECT count(*) FROM datasets WHERE tenant_id = ?1",
        "SELECT count(*) FROM workspaces WHERE tenant_id = ?1"};
    return store_int64(store_reader(s), n, sql[k == STORE_WORKSPACE], STORE_ARGS(STORE_I(tenant_id)));
}

store_rc store_volume_delete(store_tx *tx, store_vol_kind k, int64_t id)
{
    return store_tx_exec_id(tx, delete_sql[k], id);
}

store_rc store_dataset_seal(store_tx *tx, int64_t id)
{
    static const char sql[] = "UPDATE datasets SET sealed = 1 WHERE id = ?1";
    return store_tx_exec_id(tx, sql, id);
}
