/*
 * ratelimit.c: token buckets in a fixed table (see ratelimit.h).  A slot
 * belongs to the last key that used it; locks are striped over the slots.
 */
#include "server/ratelimit.h"

#include <pthread.h>
#include <stdlib.h>

#define RL_WAYS 4      /* the slots one key may take: a set */
#define RL_SETS 2048   /* 8,192 slots in all */
#define RL_LOCKS 64

struct bucket {
    int64_t key; /* 0: empty (tenant ids start at 1, addresses are negative) */
    int64_t last_ms;
    double tokens;
};

struct ratelimit {
    double per_ms, burst;
    pthread_mutex_t lock[RL_LOCKS];
    struct bucket slot[RL_SETS][RL_WAYS];
};

ratelimit *ratelimit_new(double per_s, double burst)
{
    ratelimit *r;
    if (per_s <= 0 || !(r = calloc(1, sizeof *r)))
        return NULL;
    r->per_ms = per_s / 1000.0;
    r->burst = burst >= 1 ? burst : 1;
    for (int i = 0; i < RL_LOCKS; i++)
        pthread_mutex_init(&r->lock[i], NULL);
    return r;
}

void ratelimit_free(ratelimit *r)
{
    if (!r)
        return;
    for (int i = 0; i < RL_LOCKS; i++)
        pthread_mutex_destroy(&r->lock[i]);
    free(r);
}

int64_t ratelimit_take(ratelimit *r, int64_t key, int64_t now_ms)
{
    return ratelimit_take_n(r, key, 1.0, now_ms);
}

/* b's tokens brought up to now_ms (an empty slot is full). */
static void refill(const ratelimit *r, struct bucket *b, int64_t now_ms)
{
    if (b->key == 0) {
        b->tokens = r->burst;
        b->last_ms = now_ms;
    } else if (now_ms > b->last_ms) {
        b->tokens += (double)(now_ms - b->last_ms) * r->per_ms;
        if (b->tokens > r->burst)
            b->tokens = r->burst;
        b->last_ms = now_ms;
    }
}

/*
 * key's bucket in set: its own, or else the one of the set used longest
 * ago, which key takes over as it stands.  Taking a slot never fills it:
 * keys that share a full set share that slot's tokens, so two keys made to
 * collide buy no more than one.
 */
static struct bucket *find(const ratelimit *r, struct bucket *set, int64_t key, int64_t now_ms)
{
    struct bucket *oldest = &set[0];
    for (int w = 0; w < RL_WAYS; w++) {
        if (set[w].key == key)
            return &set[w];
        if (set[w].key == 0 || (oldest->key != 0 && set[w].last_ms < oldest->last_ms))
            oldest = &set[w];
    }
    refill(r, oldest, now_ms);
    oldest->key = key;
    return oldest;
}

/* The set of key, and its lock. */
static struct bucket *set_of(ratelimit *r, int64_t key, pthread_mutex_t **m)
{
    /* Fibonacci hashing spreads consecutive ids over the table. */
    size_t i = (size_t)(((uint64_t)key * 11400714819323198485ull) >> 53) % RL_SETS;
    *m = &r->lock[i % RL_LOCKS];
    return r->slot[i];
}

void ratelimit_charge(ratelimit *r, int64_t key, double cost, int64_t now_ms)
{
    pthread_mutex_t *m;
    struct bucket *set = set_of(r, key, &m);
    double floor = -r->per_ms * 1000.0 * RATELIMIT_DEBT_S;
    if (cost <= 0)
        return;
    pthread_mutex_lock(m);
    struct bucket *b = find(r, set, key, now_ms);
    refill(r, b, now_ms);
    b->tokens = b->tokens - cost < floor ? floor : b->tokens - cost;
    pthread_mutex_unlock(m);
}

int64_t ratelimit_take_n(ratelimit *r, int64_t key, double cost, int64_t now_ms)
{
    if (cost < 1.0)
        cost = 1.0;
    if (cost > r->burst)
        cost = r->burst; /* a request costlier than the burst would never go */
    pthread_mutex_t *m;
    struct bucket *set = set_of(r, key, &m);
    int64_t wait = 0;
    pthread_mutex_lock(m);
    struct bucket *b = find(r, set, key, now_ms);
    refill(r, b, now_ms);
    if (b->tokens >= cost)
        b->tokens -= cost;
    else
        wait = (int64_t)((cost - b->tokens) / r->per_ms) + 1;
    pthread_mutex_unlock(m);
    return wait;
}
