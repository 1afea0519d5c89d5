/*
 * ratelimit: a token bucket per key (cohortd keys them by tenant, whatever
 * the number of its tokens), so that one client flooding the API cannot
 * starve the others.  Each key may
 * make per_s requests a second on average and burst at once.  Buckets live
 * in a fixed table of sets of four: a key keeps its slot while fewer than
 * four other keys of its set are used after it, and a key that takes a
 * slot takes over its tokens as they stand (never a full bucket), so the
 * table's size bounds the memory and keys made to collide share one
 * bucket, never gain one each.  Thread-safe.
 */
#ifndef COHORT_RATELIMIT_H
#define COHORT_RATELIMIT_H

#include <stdint.h>

typedef struct ratelimit ratelimit;

/* NULL when per_s <= 0 (no limit) or out of memory. */
ratelimit *ratelimit_new(double per_s, double burst);
void ratelimit_free(ratelimit *r);
/* Takes one request of key at now_ms (monotonic): 0 when it may go,
 * otherwise the milliseconds until it may (nothing is taken). */
int64_t ratelimit_take(ratelimit *r, int64_t key, int64_t now_ms);
/* The same for a request that costs cost (>= 1; at most the burst). */
int64_t ratelimit_take_n(ratelimit *r, int64_t key, double cost, int64_t now_ms);
/* Charges key cost more, after the fact, whatever it has left (a download,
 * whose size the request did not say): its bucket may fall into debt, at
 * most RATELIMIT_DEBT_S seconds of its rate, which its next requests wait
 * out. */
#define RATELIMIT_DEBT_S 60
void ratelimit_charge(ratelimit *r, int64_t key, double cost, int64_t now_ms);

#endif
