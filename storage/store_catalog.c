/*
 * store_catalog: SQL for worker specs and images.
 */
#include "storage/store_catalog.h"

#include "storage/store_int.h"

#define SPEC_COLS STORE_SPEC_COLS

void store_spec_row(store_st *st, void *out)
{
    store_spec *sp = out;
    sp->id = store_col_int64(st, 0);
    store_col_copy(st, 1, sp->name, sizeof sp->name);
    sp->cpus = store_col_int64(st, 2);
    sp->memory_mb = store_col_int64(st, 3);
    sp->gpus = store_col_int64(st, 4);
    store_col_copy(st, 5, sp->gpu_type, sizeof sp->gpu_type);
    sp->price_per_hour = store_col_int64(st, 6);
    store_col_copy(st, 7, sp->currency, sizeof sp->currency);
    sp->created_at = store_col_int64(st, 8);
    sp->updated_at = store_col_int64(st, 9);
}

STORE_ROWS(spec_rows, store_spec, store_spec_row)

store_rc store_spec_get(store *s, const char *name, store_spec *out)
{
    static const char sql[] = "SELECT " SPEC_COLS " FROM worker_specs WHERE name = ?1";
    return store_get_one(store_prep(store_reader(s), sql, STORE_ARGS(STORE_T(name))), store_spec_row,
                         out);
}

store_rc store_spec_list(store *s, int64_t after, int limit,
                    void (*row)(void *arg, const store_spec *sp), void *arg)
{
    static const char sql[] =
        "SELECT " SPEC_COLS " FROM worker_specs WHERE id > ?1 ORDER BY id LIMIT ?2";
    struct spec_rows r = {row, arg};
    return store_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(after),
            STORE_I(limit))), spec_rows, &r);
}

static void spec_bind(store_st *st, const store_spec *sp, int64_t now)
{
    store_bind_text(st, 1, sp->name);
    store_bind_int64(st, 2, sp->cpus);
    store_bind_int64(st, 3, sp->memory_mb);
    store_bind_int64(st, 4, sp->gpus);
    store_bind_text(st, 5, sp->gpu_type[0] ? sp->gpu_type : NULL);
    store_bind_int64(st, 6, sp->price_per_hour);
    store_bind_text(st, 7, sp->currency);
    store_bind_int64(st, 8, now);
}

store_rc store_spec_insert(store_tx *tx, const store_spec *sp, int64_t *id)
{
    static const char sql[] =
        "INSERT INTO worker_specs(name, cpus, memory_mb, gpus, gpu_type, price_per_hour,"
        " currency, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_stmt(c, sql);
    if (!st)
        return STORE_EIO;
    spec_bind(st, sp, sp->updated_at);
    return store_step_change(c, st, id);
}

store_rc store_spec_update(store_tx *tx, const store_spec *sp)
{
    static const char sql[] =
        "UPDATE worker_specs SET cpus = ?2, memory_mb = ?3, gpus = ?4, gpu_type = ?5,"
        " price_per_hour = ?6, currency = ?7, updated_at = ?8 WHERE name = ?1";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_stmt(c, sql);
    if (!st)
        return STORE_EIO;
    spec_bind(st, sp, sp->updated_at);
    return store_step_change(c, st, NULL);
}

#define IMAGE_COLS STORE_IMAGE_COLS

void store_image_row(store_st *st, void *out)
{
    store_image *im = out;
    im->id = store_col_int64(st, 0);
    im->tenant_id = store_col_int64(st, 1);
    store_col_copy(st, 2, im->name, sizeof im->name);
    store_col_copy(st, 3, im->reference, sizeof im->reference);
    store_col_copy(st, 4, im->framework, sizeof im->framework);
    store_col_copy(st, 5, im->username, sizeof im->username);
    store_col_copy(st, 6, im->password, sizeof im->password);
    im->created_at = store_col_int64(st, 7);
}

STORE_ROWS(image_rows, store_image, store_image_row)

store_rc store_image_get(store *s, int64_t tenant_id, const char *name, store_image *out)
{
    /* The tenant's own first (tenant_id IS NULL sorts its public one after). */
    static const char sql[] = "SELECT " IMAGE_COLS " FROM images WHERE name = ?1"
                              " AND (tenant_id IS NULL OR tenant_id = ?2)"
                              " ORDER BY tenant_id IS NULL LIMIT 1";
    return store_get_one(store_prep(store_reader(s), sql, STORE_ARGS(STORE_T(name),
            STORE_I(tenant_id))), store_image_row, out);
}

store_rc store_image_list(store *s, int64_t tenant_id, int64_t after, int limit,
                     void (*row)(void *arg, const store_image *im), void *arg)
{
    static const char sql[] = "SELECT " IMAGE_COLS " FROM images WHERE id > ?1"
                              " AND (?3 < 0 OR tenant_id IS NULL OR tenant_id = ?3)"
                              " ORDER BY id LIMIT ?2";
    struct image_rows r = {row, arg};
    return store_each(store_prep(store_reader(s), sql, STORE_ARGS(STORE_I(after), STORE_I(limit),
            STORE_I(tenant_id))), image_rows, &r);
}

store_rc store_image_set_password(store_tx *tx, int64_t id, const char *password)
{
    static const char sql[] = "UPDATE images SET password = ?2 WHERE id = ?1";
    return store_exec(store_tx_conn(tx), NULL, sql, STORE_ARGS(STORE_I(id), STORE_T(password)));
}

store_rc store_image_insert(store_tx *tx, const store_image *im, int64_t *id)
{
    static const char sql[] =
        "INSERT INTO images(tenant_id, name, reference, framework, username, password,"
        " created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
    store_conn *c = store_tx_conn(tx);
    store_st *st = store_stmt(c, sql);
    if (!st)
        return STORE_EIO;
    if (im->tenant_id > 0)
        store_bind_int64(st, 1, im->tenant_id);
    else
        store_bind_null(st, 1);
    store_bind_text(st, 2, im->name);
    store_bind_text(st, 3, im->reference[0] ? im->reference : NULL);
    store_bind_text(st, 4, im->framework);
    store_bind_text(st, 5, im->username[0] ? im->username : NULL);
    store_bind_text(st, 6, im->username[0] ? im->password : NULL);
    store_bind_int64(st, 7, im->created_at);
    return store_step_change(c, st, id);
}
