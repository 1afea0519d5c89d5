/*
 * sampler.c: DistributedSampler semantics (see sampler.h).
 */
#include "worker/sampler.h"

#include <stdlib.h>

#include "worker/rng.h"

size_t sampler_len(size_t n, int world)
{
    return world > 0 ? (n + (size_t)world - 1) / (size_t)world : 0;
}

int sampler_indices(uint32_t *out, size_t n, int world, int rank, uint64_t seed, int epoch,
                    int shuffle)
{
    size_t per = sampler_len(n, world), total;
    uint32_t *perm;
    struct rng r;

    if (n == 0 || n > UINT32_MAX || world < 1 || rank < 0 || rank >= world)
        return -1;
    perm = malloc(n * sizeof *perm);
    if (!perm)
        return -1;
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    if (shuffle) {
        rng_seed(&r, seed * 1000003ull + (uint64_t)epoch);
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)rng_below(&r, i + 1);
            uint32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    /* Padded to world * per by wrapping around; rank takes every world-th. */
    total = per * (size_t)world;
    for (size_t k = 0, i = (size_t)rank; i < total; i += (size_t)world, k++)
        out[k] = perm[i % n];
    free(perm);
    return 0;
}
