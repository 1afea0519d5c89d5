/*
 * sampler: torch's DistributedSampler, for cohort-worker.  Each rank of a
 * world visits a disjoint shard of the data set's indices, every shard the
 * same length (the permutation is padded by repeating its head), reshuffled
 * each epoch from the seed and the epoch number alone, so every rank
 * computes the same permutation without talking to the others.
 */
#ifndef COHORT_SAMPLER_H
#define COHORT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* Indices one rank visits per epoch: ceil(n / world). */
size_t sampler_len(size_t n, int world);

/* Writes the sampler_len(n, world) indices of `rank` for `epoch` into out.
 * With shuffle 0 the permutation is the identity.  Returns 0, or -1 when
 * out of memory or the arguments are out of range. */
int sampler_indices(uint32_t *out, size_t n, int world, int rank, uint64_t seed, int epoch,
                    int shuffle);

#endif
