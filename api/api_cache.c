/*
 * api_cache: SHA-256 key -> value tables with a deadline per entry (see
 * api_cache.h).  Owns nothing but the locking; the storage is the owner's.
 */
#include "api/api_cache.h"

#include <string.h>

#include "lib/util.h"

struct head {
    uint8_t key[API_CACHE_KEY];
    int64_t until;
};

static unsigned slot_of(const api_cache *c, const uint8_t *key)
{
    return (unsigned)(((unsigned)key[0] | (unsigned)key[1] << 8 | (unsigned)key[2] << 16) %
                      c->slots);
}

static struct head *entry(api_cache *c, unsigned i)
{
    return (struct head *)(c->mem + (size_t)i * c->stride);
}

static pthread_mutex_t *lock_of(api_cache *c, unsigned i)
{
    return &c->lock[i % API_CACHE_STRIPES];
}

int api_cache_get(api_cache *c, const uint8_t key[API_CACHE_KEY], int64_t now, void *out)
{
    unsigned i = slot_of(c, key);
    int hit = 0;
    pthread_mutex_lock(lock_of(c, i));
    struct head *e = entry(c, i);
    if (e->until > now && util_ct_equal(e->key, key, API_CACHE_KEY)) {
        memcpy(out, e + 1, c->size);
        hit = 1;
    }
    pthread_mutex_unlock(lock_of(c, i));
    return hit;
}

void api_cache_put(api_cache *c, const uint8_t key[API_CACHE_KEY], int64_t until, const void *value)
{
    unsigned i = slot_of(c, key);
    pthread_mutex_lock(lock_of(c, i));
    struct head *e = entry(c, i);
    memcpy(e->key, key, API_CACHE_KEY);
    memcpy(e + 1, value, c->size);
    e->until = until;
    pthread_mutex_unlock(lock_of(c, i));
}

void api_cache_forget(api_cache *c, int (*match)(const void *value, void *arg), void *arg)
{
    for (unsigned i = 0; i < c->slots; i++) {
        pthread_mutex_lock(lock_of(c, i));
        struct head *e = entry(c, i);
        if (e->until && (!match || match(e + 1, arg)))
            e->until = 0;
        pthread_mutex_unlock(lock_of(c, i));
    }
}
