/*
 * ckpt: cohort-worker's checkpoints: the model's parameters, the
 * optimiser's state and the number of finished epochs and steps, written to
 * <dir>/epoch-NNNNNN.ckpt through a temporary file, fsync and rename (never
 * a torn file), with a CRC-32 over all of it.  The newest two are kept.
 */
#ifndef COHORT_CKPT_H
#define COHORT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "worker/mlp.h"
#include "worker/optim.h"

/* Creates dir when missing.  Returns 0, or -1 with a message. */
int ckpt_save(const char *dir, const struct mlp *m, const struct optim *o, int epoch,
              int64_t step, char *err, size_t errlen);

/* Loads the newest valid checkpoint under dir into m and o (skipping, with
 * a warning on stderr, files whose CRC fails).  Returns 1 when one was
 * loaded (path names it), 0 when there is none, -1 with a message when one
 * exists but was written for another model or optimiser. */
int ckpt_load_latest(const char *dir, struct mlp *m, struct optim *o, int *epoch,
                     int64_t *step, char *path, size_t pathlen, char *err, size_t errlen);

#endif
