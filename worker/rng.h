/*
 * rng: the worker's deterministic random numbers (splitmix64).  Every rank
 * that seeds it alike draws the same sequence, which is what the sampler's
 * shuffle and the parameter initialisation rely on.
 */
#ifndef COHORT_RNG_H
#define COHORT_RNG_H

#include <math.h>
#include <stdint.h>

struct rng {
    uint64_t s;
};

static inline void rng_seed(struct rng *r, uint64_t seed)
{
    r->s = seed ^ 0x6a09e667f3bcc909ull;
}

static inline uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n), without modulo bias. */
static inline uint64_t rng_below(struct rng *r, uint64_t n)
{
    uint64_t lim = -n % n, x;
    do
        x = rng_next(r);
    while (x < lim);
    return x % n;
}

/* Uniform in [0, 1). */
static inline double rng_unit(struct rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Standard normal (Box-Muller). */
static inline double rng_normal(struct rng *r)
{
    double u = rng_unit(r), v = rng_unit(r);
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

#endif
