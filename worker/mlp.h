/*
 * mlp: a multilayer perceptron on the CPU (ReLU hidden layers, softmax
 * cross-entropy), its forward and backward passes through OpenBLAS.
 *
 * All parameters live in one flat float buffer (each layer's weights,
 * out x in row-major, then its biases), and all gradients in another of the
 * same layout, so a data-parallel step averages them with one allreduce and
 * a checkpoint writes them with one write.  An mlp owns its buffers.
 */
#ifndef COHORT_MLP_H
#define COHORT_MLP_H

#include <stddef.h>
#include <stdint.h>

#define MLP_MAX_LAYERS 8

/* Marks a loop-heavy function to be compiled for several x86-64 levels and
 * dispatched at load time (GCC's target_clones); elsewhere, and under the
 * sanitizers, a plain function. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define COHORT_VECTOR __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define COHORT_VECTOR
#endif

struct mlp {
    int nlayers;                       /* weight layers */
    int sizes[MLP_MAX_LAYERS + 1];     /* sizes[0] inputs ... sizes[nlayers] classes */
    size_t nparams;
    float *params;
    float *grads;                      /* nparams, plus `extra` floats after them */
    size_t extra;
    int grads_lent;                    /* grads is another's (mlp_lend_grads) */
    size_t w_off[MLP_MAX_LAYERS], b_off[MLP_MAX_LAYERS];
    int max_batch;
    float *act[MLP_MAX_LAYERS + 1];    /* act[0]: the input batch; act[l]: layer l's output */
    float *delta[MLP_MAX_LAYERS + 1];
};

/* sizes: nsizes entries, input first, classes last.  Buffers are sized for
 * batches of up to max_batch rows; `extra` floats follow the gradients (the
 * trainer rides its loss on the gradients' allreduce).  Returns 0, or -1
 * with a message. */
int mlp_init(struct mlp *m, const int *sizes, int nsizes, int max_batch, size_t extra,
             char *err, size_t errlen);
void mlp_free(struct mlp *m);
/* Puts the gradients into buf (nparams + extra floats, zeroed here), which
 * stays its owner's (a communicator's shared memory: comm_buffer). */
void mlp_lend_grads(struct mlp *m, float *buf);

/* torch.nn.Linear's default: weights and biases uniform in
 * (-1/sqrt(in), 1/sqrt(in)), from the seed. */
void mlp_init_params(struct mlp *m, uint64_t seed);

/* The input batch buffer (max_batch x sizes[0]) to fill before a pass. */
float *mlp_input(struct mlp *m);

/* Forward and backward on the first `batch` rows of mlp_input(): writes the
 * gradients of the mean loss over the batch into m->grads and returns that
 * mean loss.  labels: batch entries below sizes[nlayers]. */
float mlp_train_step(struct mlp *m, const uint8_t *labels, int batch);

/* Forward only: adds the number of correct predictions and the summed loss
 * of the batch. */
void mlp_evaluate(struct mlp *m, const uint8_t *labels, int batch, double *correct,
                  double *loss_sum);

/* The model's shape as text, e.g. "784-256-128-10". */
void mlp_shape(const struct mlp *m, char *buf, size_t len);

#endif
