/*
 * optim: the optimisers of cohort-worker, with torch.optim's update rules:
 * SGD with momentum (no dampening, buffer starts at the first gradient) and
 * Adam (bias-corrected).  An optim owns its state buffers, which a
 * checkpoint saves beside the parameters.
 */
#ifndef COHORT_OPTIM_H
#define COHORT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

enum optim_kind { OPTIM_SGD = 0, OPTIM_ADAM = 1 };

struct optim {
    enum optim_kind kind;
    float lr, momentum, beta1, beta2, eps;
    size_t n;
    float *m;      /* SGD: momentum buffer; Adam: first moment */
    float *v;      /* Adam: second moment; NULL for SGD */
    int64_t t;     /* steps taken */
};

/* Returns 0, or -1 when out of memory. */
int optim_init(struct optim *o, enum optim_kind kind, size_t n, float lr, float momentum);
void optim_free(struct optim *o);
/* Floats of state beside the parameters (what a checkpoint stores). */
size_t optim_state_len(const struct optim *o);
void optim_step(struct optim *o, float *params, const float *grads);
const char *optim_name(enum optim_kind k);

#endif
