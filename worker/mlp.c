/*
 * mlp.c: forward and backward passes of the perceptron (see mlp.h).
 * Matrix products are cblas_sgemm calls, row-major throughout.
 */
#include "worker/mlp.h"
#include "lib/fmt.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/rng.h"

int mlp_init(struct mlp *m, const int *sizes, int nsizes, int max_batch, size_t extra,
             char *err, size_t errlen)
{
    size_t off = 0;
    memset(m, 0, sizeof *m);
    if (nsizes < 2 || nsizes > MLP_MAX_LAYERS + 1) {
        fmt_cut(err, errlen, "a model needs 2 to %d layer sizes, got %d", MLP_MAX_LAYERS + 1,
                 nsizes);
        return -1;
    }
    if (max_batch < 1 || max_batch > 1 << 20) {
        fmt_cut(err, errlen, "batch size %d is outside 1 to %d", max_batch, 1 << 20);
        return -1;
    }
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] < 1 || sizes[i] > 1 << 16) {
            fmt_cut(err, errlen, "layer size %d is outside 1 to 65536", sizes[i]);
            return -1;
        }
        m->sizes[i] = sizes[i];
    }
    m->nlayers = nsizes - 1;
    m->max_batch = max_batch;
    m->extra = extra;
    for (int l = 0; l < m->nlayers; l++) {
        m->w_off[l] = off;
        off += (size_t)sizes[l + 1] * (size_t)sizes[l];
        m->b_off[l] = off;
        off += (size_t)sizes[l + 1];
    }
    m->nparams = off;
    m->params = calloc(off, sizeof(float));
    m->grads = calloc(off + extra, sizeof(float));
    for (int l = 0; l <= m->nlayers; l++) {
        m->act[l] = malloc((size_t)max_batch * (size_t)sizes[l] * sizeof(float));
        m->delta[l] = malloc((size_t)max_batch * (size_t)sizes[l] * sizeof(float));
        if (!m->act[l] || !m->delta[l])
            break;
    }
    if (!m->params || !m->grads || !m->act[m->nlayers] || !m->delta[m->nlayers]) {
        fmt_cut(err, errlen, "out of memory for a model of %zu parameters", off);
        mlp_free(m);
        return -1;
    }
    return 0;
}

void mlp_lend_grads(struct mlp *m, float *buf)
{
    if (!m->grads_lent)
        free(m->grads);
    memset(buf, 0, (m->nparams + m->extra) * sizeof(float));
    m->grads = buf;
    m->grads_lent = 1;
}

void mlp_free(struct mlp *m)
{
    free(m->params);
    if (!m->grads_lent)
        free(m->grads);
    for (int l = 0; l <= MLP_MAX_LAYERS; l++) {
        free(m->act[l]);
        free(m->delta[l]);
    }
    memset(m, 0, sizeof *m);
}

void mlp_init_params(struct mlp *m, uint64_t seed)
{
    struct rng r;
    rng_seed(&r, seed);
    for (int l = 0; l < m->nlayers; l++) {
        float bound = 1.0f / sqrtf((float)m->sizes[l]);
        size_t nw = (size_t)m->sizes[l + 1] * (size_t)m->sizes[l];
        float *w = m->params + m->w_off[l], *b = m->params + m->b_off[l];
        for (size_t i = 0; i < nw; i++)
            w[i] = (float)((2.0 * rng_unit(&r) - 1.0) * bound);
        for (int i = 0; i < m->sizes[l + 1]; i++)
            b[i] = (float)((2.0 * rng_unit(&r) - 1.0) * bound);
    }
}

float *mlp_input(struct mlp *m)
{
    return m->act[0];
}

void mlp_shape(const struct mlp *m, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i <= m->nlayers && used < len; i++) { /* a label: cut to fit */
        fmt_cut(buf + used, len - used, i ? "-%d" : "%d", m->sizes[i]);
        used += strlen(buf + used);
    }
}

/* Logits of the batch in act[nlayers]; hidden layers through ReLU. */
COHORT_VECTOR static void forward(struct mlp *m, int batch)
{
    for (int l = 0; l < m->nlayers; l++) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        const float *b = m->params + m->b_off[l];
        float *z = m->act[l + 1];
        for (int r = 0; r < batch; r++)
            memcpy(z + (size_t)r * out, b, (size_t)out * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f, m->act[l],
                    in, m->params + m->w_off[l], in, 1.0f, z, out);
        if (l + 1 < m->nlayers)
            for (size_t i = 0, n = (size_t)batch * out; i < n; i++)
                z[i] = z[i] > 0.0f ? z[i] : 0.0f;
    }
}

/* Turns one row of logits into probabilities in place; returns the loss of
 * `label` (-log p), computed from the log-sum-exp so it stays finite. */
static float softmax_row(float *z, int n, int label)
{
    float mx = z[0], sum = 0.0f, zl;
    for (int k = 1; k < n; k++)
        mx = z[k] > mx ? z[k] : mx;
    zl = z[label] - mx;
    for (int k = 0; k < n; k++) {
        z[k] = expf(z[k] - mx);
        sum += z[k];
    }
    for (int k = 0; k < n; k++)
        z[k] /= sum;
    return logf(sum) - zl;
}

COHORT_VECTOR float mlp_train_step(struct mlp *m, const uint8_t *labels, int batch)
{
    int L = m->nlayers, classes = m->sizes[L];
    float *d = m->delta[L];
    double loss = 0.0;
    float inv = 1.0f / (float)batch;

    forward(m, batch);
    for (int r = 0; r < batch; r++) {
        float *z = m->act[L] + (size_t)r * classes, *dr = d + (size_t)r * classes;
        loss += softmax_row(z, classes, labels[r]);
        for (int k = 0; k < classes; k++)
            dr[k] = z[k] * inv;
        dr[labels[r]] -= inv;
    }
    for (int l = L - 1; l >= 0; l--) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        float *gw = m->grads + m->w_off[l], *gb = m->grads + m->b_off[l];
        const float *dl = m->delta[l + 1];
        /* dW = D^T A, db = column sums of D */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, batch, 1.0f, dl, out,
                    m->act[l], in, 0.0f, gw, in);
        memcpy(gb, dl, (size_t)out * sizeof(float));
        for (int r = 1; r < batch; r++) {
            const float *row = dl + (size_t)r * out;
            for (int k = 0; k < out; k++)
                gb[k] += row[k];
        }
        if (l == 0)
            break;  /* nobody needs the input's gradient */
        /* D_prev = D W, through the ReLU of layer l's output */
        float *dp = m->delta[l];
        const float *a = m->act[l];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in, out, 1.0f, dl, out,
                    m->params + m->w_off[l], in, 0.0f, dp, in);
        for (size_t i = 0, n = (size_t)batch * in; i < n; i++)
            if (a[i] <= 0.0f)
                dp[i] = 0.0f;
    }
    return (float)(loss / batch);
}

void mlp_evaluate(struct mlp *m, const uint8_t *labels, int batch, double *correct,
                  double *loss_sum)
{
    int L = m->nlayers, classes = m->sizes[L];
    forward(m, batch);
    for (int r = 0; r < batch; r++) {
        float *z = m->act[L] + (size_t)r * classes;
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (z[k] > z[best])
                best = k;
        *correct += best == labels[r];
        *loss_sum += softmax_row(z, classes, labels[r]);
    }
}
