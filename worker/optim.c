/*
 * optim.c: SGD with momentum and Adam (see optim.h).
 */
#include "worker/optim.h"

#include "worker/mlp.h"  /* COHORT_VECTOR */

#include <math.h>
#include <stdlib.h>
#include <string.h>

int optim_init(struct optim *o, enum optim_kind kind, size_t n, float lr, float momentum)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->lr = lr;
    o->momentum = momentum;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->n = n;
    o->m = calloc(n, sizeof(float));
    if (kind == OPTIM_ADAM)
        o->v = calloc(n, sizeof(float));
    if (!o->m || (kind == OPTIM_ADAM && !o->v)) {
        optim_free(o);
        return -1;
    }
    return 0;
}

void optim_free(struct optim *o)
{
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

size_t optim_state_len(const struct optim *o)
{
    return o->kind == OPTIM_ADAM ? 2 * o->n : o->n;
}

const char *optim_name(enum optim_kind k)
{
    return k == OPTIM_ADAM ? "adam" : "sgd";
}

COHORT_VECTOR void optim_step(struct optim *o, float *restrict p, const float *restrict g)
{
    size_t n = o->n;
    float lr = o->lr;
    if (o->kind == OPTIM_SGD) {
        float mu = o->momentum, *restrict buf = o->m;
        if (mu == 0.0f) {
            for (size_t i = 0; i < n; i++)
                p[i] -= lr * g[i];
        } else if (o->t == 0) {
            for (size_t i = 0; i < n; i++) {
                buf[i] = g[i];
                p[i] -= lr * buf[i];
            }
        } else {
            for (size_t i = 0; i < n; i++) {
                buf[i] = mu * buf[i] + g[i];
                p[i] -= lr * buf[i];
            }
        }
    } else {
        float b1 = o->beta1, b2 = o->beta2, *restrict m = o->m, *restrict v = o->v;
        double t = (double)(o->t + 1);
        float c1 = (float)(1.0 - pow(b1, t)), c2 = (float)(1.0 - pow(b2, t));
        float step = lr / c1, rc2 = 1.0f / sqrtf(c2);
        for (size_t i = 0; i < n; i++) {
            m[i] = b1 * m[i] + (1.0f - b1) * g[i];
            v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
            p[i] -= step * m[i] / (sqrtf(v[i]) * rc2 + o->eps);
        }
    }
    o->t++;
}
