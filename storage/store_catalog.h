/*
 * store_catalog: the platform's catalog: worker specs (with prices) and
 * images.  Written by the platform admin, read by everyone.
 */
#ifndef COHORT_STORE_CATALOG_H
#define COHORT_STORE_CATALOG_H

#include <stdint.h>

#include "storage/store.h"
#include "lib/util.h"

typedef struct store_spec {
    int64_t id;
    char name[UTIL_NAME_MAX + 1];
    int64_t cpus;
    int64_t memory_mb;
    int64_t gpus;
    char gpu_type[UTIL_NAME_MAX + 1]; /* "" when none */
    int64_t price_per_hour;           /* minor units per worker-hour */
    char currency[4];                 /* ISO 4217 */
    int64_t created_at, updated_at;
} store_spec;

#define STORE_IMAGE_REF_MAX 511
#define STORE_CRED_MAX 255
#define STORE_CRED_SEALED_MAX 511 /* a password as kept: sealed (api/seal.h) */

typedef struct store_image {
    int64_t id;
    int64_t tenant_id;                    /* 0: a platform image, public */
    char name[UTIL_NAME_MAX + 1];
    char reference[STORE_IMAGE_REF_MAX + 1]; /* "" when none */
    char framework[16];
    char username[STORE_CRED_MAX + 1];    /* "" when anonymous */
    char password[STORE_CRED_SEALED_MAX + 1]; /* sealed at rest (api/seal.h); never
                                               * leaves cohortd but for the agent */
    int64_t created_at;
} store_image;

/* The password of image id, as kept (sealed): 0 or a STORE_ code. */
store_rc store_image_set_password(store_tx *tx, int64_t id, const char *password);

store_rc store_spec_get(store *s, const char *name, store_spec *out);
/* Lists with id > after, in id order, at most limit. */
store_rc store_spec_list(store *s, int64_t after, int limit,
                    void (*row)(void *arg, const store_spec *sp), void *arg);
/* Inserts sp, created and updated at sp->updated_at (the caller's clock, so
 * that what it answers is what is stored). */
store_rc store_spec_insert(store_tx *tx, const store_spec *sp, int64_t *id);
/* Updates every field but the name; STORE_NOTFOUND when absent. */
/* Updates the spec named sp->name to sp, updated at sp->updated_at. */
store_rc store_spec_update(store_tx *tx, const store_spec *sp);

/* The image name as tenant_id sees it: its own private image of that name,
 * else the public one.  tenant_id 0: only public images. */
store_rc store_image_get(store *s, int64_t tenant_id, const char *name, store_image *out);
/* Public images and tenant_id's own (tenant_id -1: every image). */
store_rc store_image_list(store *s, int64_t tenant_id, int64_t after, int limit,
                     void (*row)(void *arg, const store_image *im), void *arg);
/* Inserts im, created at im->created_at. */
store_rc store_image_insert(store_tx *tx, const store_image *im, int64_t *id);

#endif
