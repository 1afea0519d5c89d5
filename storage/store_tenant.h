/*
 * store_tenant: tenants, their users and the users' API tokens.
 * Tokens are stored only as SHA-256 hashes.
 */
#ifndef COHORT_STORE_TENANT_H
#define COHORT_STORE_TENANT_H

#include <stdint.h>

#include "storage/store.h"
#include "lib/util.h"

typedef struct store_tenant {
    int64_t id;
    char name[UTIL_NAME_MAX + 1];
    int is_platform;
    int64_t created_at;
} store_tenant;

typedef struct store_user {
    int64_t id;
    int64_t tenant_id;
    char tenant[UTIL_NAME_MAX + 1];
    char name[UTIL_NAME_MAX + 1];
    char role[16];
    int64_t created_at;
} store_user;

typedef struct store_token {
    int64_t id;
    int64_t user_id;
    int64_t tenant_id;
    char name[UTIL_NAME_MAX + 1];
    int64_t created_at;
    int64_t expires_at; /* 0: never */
    int64_t revoked_at; /* 0: live */
} store_token;

/* Who a live token belongs to. */
typedef struct store_principal {
    int64_t token_id;
    int64_t token_expires_at; /* 0: never */
    store_user user;
    int tenant_is_platform;
} store_principal;

/* Finds the live (not revoked, not expired at now_ms) token with this hash;
 * the hash is compared again in constant time.  STORE_NOTFOUND otherwise. */
store_rc store_token_lookup(store *s, const uint8_t hash[UTIL_SHA256_LEN], int64_t now_ms,
                       store_principal *out);

store_rc store_tenant_insert(store_tx *tx, const char *name, int64_t *id);
store_rc store_tenant_by_name(store *s, const char *name, store_tenant *out);
/* Lists tenants with id > after, at most limit, in id order (platform tenant excluded). */
store_rc store_tenant_list(store *s, int64_t after, int limit,
                      void (*row)(void *arg, const store_tenant *t), void *arg);

store_rc store_user_insert(store_tx *tx, int64_t tenant_id, const char *name, const char *role,
                      int64_t *id);
store_rc store_user_get(store *s, int64_t id, store_user *out);
store_rc store_user_list(store *s, int64_t tenant_id, int64_t after, int limit,
                    void (*row)(void *arg, const store_user *u), void *arg);
/* Number of platform admins: 0 on a fresh database. */
store_rc store_platform_admin_count(store *s, int64_t *n);
/* Inside a write: the platform tenant's id. */
store_rc store_platform_tenant_tx(store_tx *tx, int64_t *id);

store_rc store_token_insert(store_tx *tx, int64_t user_id, const char *name,
                       const uint8_t hash[UTIL_SHA256_LEN], int64_t expires_at, int64_t *id);
store_rc store_token_get(store *s, int64_t id, store_token *out);
/* The user's tokens live at now_ms (not revoked, not expired) into *n. */
store_rc store_token_count_live(store *s, int64_t user_id, int64_t now_ms, int64_t *n);
store_rc store_token_list(store *s, int64_t user_id, int64_t after, int limit,
                     void (*row)(void *arg, const store_token *t), void *arg);
/* Revokes a live token; STORE_NOTFOUND when absent or already revoked. */
store_rc store_token_revoke(store_tx *tx, int64_t id, int64_t now_ms);

#endif
