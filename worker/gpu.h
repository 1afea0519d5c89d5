/*
 * gpu: cohort-worker's model and optimiser on a CUDA device, for
 * BACKEND=nccl.  The same multilayer perceptron and update rules as mlp.h
 * and optim.h (whose host copies stay the reference: a checkpoint is written
 * from them), with the matrix products through cuBLAS and the rest in small
 * kernels.  Gradients (and the loss after them) live in one device buffer,
 * so a step averages them with one NCCL allreduce.
 *
 * Built only with CUDA (COHORT_HAVE_GPU); a gpu_model owns its device
 * memory, its stream and its cuBLAS handle.
 */
#ifndef COHORT_GPU_H
#define COHORT_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "worker/mlp.h"
#include "worker/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpu_model gpu_model;

/* A device copy of m (shape and parameters) and o (state) on CUDA device
 * `device`, for batches of up to m->max_batch rows of up to m->sizes[0]
 * floats.  0, or -1 with a message. */
int gpu_open(int device, const struct mlp *m, const struct optim *o, gpu_model **out, char *err,
             size_t errlen);
void gpu_close(gpu_model *g);

/* Device buffers, for the collectives: the parameters (nparams floats), the
 * gradients (nparams floats, then the batch's mean loss), the optimiser's
 * state (o->n floats each; v is NULL for SGD), and a scratch area of at least
 * 64 bytes. */
float *gpu_params(gpu_model *g);
float *gpu_grads(gpu_model *g);
float *gpu_state_m(gpu_model *g);
float *gpu_state_v(gpu_model *g);
void *gpu_scratch(gpu_model *g);

/* Each call below returns 0, or -1 with why in gpu_errmsg(g). */
const char *gpu_errmsg(const gpu_model *g);

/* Copies between host and device memory, waiting for the copy. */
int gpu_put(gpu_model *g, void *dev, const void *host, size_t bytes);
int gpu_get(gpu_model *g, void *host, const void *dev, size_t bytes);

/* Forward and backward on batch rows of x (host, batch x sizes[0]) with
 * their labels: the gradients of the batch's mean loss into gpu_grads(),
 * that loss after them.  Waits until they are there.  0 or -1. */
int gpu_train_step(gpu_model *g, const float *x, const uint8_t *labels, int batch);

/* One optimiser step from gpu_grads() (allreduced by then); o->t counts it,
 * as optim_step() does.  0 or -1. */
int gpu_optim_step(gpu_model *g, struct optim *o);

/* Forward only: adds the batch's correct predictions and summed loss. */
int gpu_evaluate(gpu_model *g, const float *x, const uint8_t *labels, int batch,
                 double *correct, double *loss_sum);

/* Copies the parameters into m->params and the optimiser's state into o
 * (for a checkpoint or a dump).  0 or -1. */
int gpu_to_host(gpu_model *g, struct mlp *m, struct optim *o);

#ifdef __cplusplus
}
#endif

#endif
