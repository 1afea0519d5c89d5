/*
 * api_cache: a fixed table from a SHA-256 key (a token's hash) to a value
 * of one type, each entry good until a time of its own.  A key lives in
 * the slot its first bytes name, and a newer key takes the slot over:
 * there is no eviction to tune and nothing grows.  The owner declares a
 * table with API_CACHE (static storage, zeroed: empty) and keeps it exact
 * with api_cache_forget whenever what a value says stops being true.
 * Safe from any thread.
 */
#ifndef COHORT_API_CACHE_H
#define COHORT_API_CACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define API_CACHE_KEY 32 /* UTIL_SHA256_LEN */
#define API_CACHE_STRIPES 32

typedef struct api_cache {
    unsigned char *mem; /* slots entries of stride bytes */
    size_t slots, size, stride;
    pthread_mutex_t lock[API_CACHE_STRIPES];
} api_cache;

/* An entry: its key, the ms time it is good until (0: empty), its value. */
#define API_CACHE_STRIDE(size) ((API_CACHE_KEY + 8 + (size) + 7) / 8 * 8)

/* Declares static api_cache NAME of SLOTS entries holding TYPE values. */
#define API_CACHE(NAME, SLOTS, TYPE)                                                               \
    static _Alignas(8) unsigned char NAME##_mem[(SLOTS)*API_CACHE_STRIDE(sizeof(TYPE))];           \
    static api_cache NAME = {NAME##_mem,                                                           \
                             (SLOTS),                                                              \
                             sizeof(TYPE),                                                         \
                             API_CACHE_STRIDE(sizeof(TYPE)),                                       \
                             {[0 ... API_CACHE_STRIPES - 1] = PTHREAD_MUTEX_INITIALIZER}}

/* Copies key's value into out (size bytes) and returns 1 when an entry
 * for key is good at now; 0 otherwise. */
int api_cache_get(api_cache *c, const uint8_t key[API_CACHE_KEY], int64_t now, void *out);
/* Keeps value (size bytes, copied) for key until the ms time until. */
void api_cache_put(api_cache *c, const uint8_t key[API_CACHE_KEY], int64_t until,
                   const void *value);
/* Drops every entry whose value match(value, arg) says 1 for; match NULL
 * drops them all. */
void api_cache_forget(api_cache *c, int (*match)(const void *value, void *arg), void *arg);

#endif
