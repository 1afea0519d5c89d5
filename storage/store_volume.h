/*
 * store_volume: the rows of datasets and workspaces (their files live on
 * disk, see api_files).  Both belong to a tenant; datasets of the platform
 * tenant are public.
 */
#ifndef COHORT_STORE_VOLUME_H
#define COHORT_STORE_VOLUME_H

#include <stdint.h>

#include "storage/store.h"
#include "lib/util.h"

typedef enum { STORE_DATASET = 0, STORE_WORKSPACE = 1 } store_vol_kind;

typedef struct store_volume {
    int64_t id;
    int64_t tenant_id;
    char tenant[UTIL_NAME_MAX + 1];
    char name[UTIL_NAME_MAX + 1];
    int sealed;    /* datasets only */
    int is_public; /* owned by the platform tenant */
    int64_t created_at;
} store_volume;

/* The tenant's own volume called name; with with_public also a public
 * dataset of that name when the tenant has none. */
store_rc store_volume_get(store *s, store_vol_kind k, int64_t tenant_id, const char *name,
                     int with_public, store_volume *out);
/* The tenant's volumes (and with with_public the public datasets) with
 * id > after, in id order, at most limit. */
store_rc store_volume_list(store *s, store_vol_kind k, int64_t tenant_id, int with_public,
                      int64_t after, int limit, void (*row)(void *arg, const store_volume *v),
                      void *arg);
store_rc store_volume_insert(store_tx *tx, store_vol_kind k, int64_t tenant_id, const char *name,
                        int64_t *id);
store_rc store_volume_delete(store_tx *tx, store_vol_kind k, int64_t id);
/* The tenant's volumes of kind k into *n. */
store_rc store_volume_count(store *s, store_vol_kind k, int64_t tenant_id, int64_t *n);
store_rc store_dataset_seal(store_tx *tx, int64_t id);

#endif
