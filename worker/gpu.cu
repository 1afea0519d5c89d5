/*
 * gpu.cu: the model and optimiser of gpu.h on a CUDA device.
 *
 * Matrices are row-major as in mlp.c; cuBLAS is column-major, so each
 * product is written for the transposes (a row-major r x c matrix is a
 * column-major c x r one).  Every call is checked; the first failure is
 * reported with its call and the step goes no further.
 */
#include "worker/gpu.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#define THREADS 256

struct gpu_model {
    int device;
    int nlayers;
    int sizes[MLP_MAX_LAYERS + 1];
    size_t w_off[MLP_MAX_LAYERS], b_off[MLP_MAX_LAYERS];
    size_t nparams, nstate;
    int max_batch;
    int adam;
    float lr, momentum, beta1, beta2, eps;
    cudaStream_t stream;
    cublasHandle_t blas;
    float *params, *grads, *m, *v;
    float *act[MLP_MAX_LAYERS + 1], *delta[MLP_MAX_LAYERS + 1];
    float *ones;      /* max_batch ones: column sums as a product */
    float *row_loss;  /* per row of a batch */
    uint8_t *labels;
    double *sums;     /* evaluation: correct, loss */
    void *scratch;
    char err[512];    /* why the last call failed (gpu_errmsg) */
};

/* ---- kernels ---- */

/* z (rows x n) += bias per row; ReLU when relu. */
__global__ void k_bias_act(float *z, const float *b, int rows, int n, int relu)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * n)
        return;
    float v = z[i] + b[i % n];
    z[i] = relu && v < 0.0f ? 0.0f : v;
}

/* Softmax cross-entropy per row, as mlp.c's softmax_row: the loss of the
 * label into loss[r], (p - onehot) / batch into d. */
__global__ void k_softmax_xent(const float *z, const uint8_t *labels, int rows, int n, float inv,
                               float *d, float *loss)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const float *zr = z + (size_t)r * n;
    float *dr = d + (size_t)r * n;
    float mx = zr[0], sum = 0.0f;
    for (int k = 1; k < n; k++)
        mx = zr[k] > mx ? zr[k] : mx;
    for (int k = 0; k < n; k++)
        sum += expf(zr[k] - mx);
    int label = labels[r];
    for (int k = 0; k < n; k++)
        dr[k] = expf(zr[k] - mx) / sum * inv;
    dr[label] -= inv;
    loss[r] = logf(sum) - (zr[label] - mx);
}

/* out[0] = mean of v[0..n) (one block). */
__global__ void k_mean(const float *v, int n, float *out)
{
    __shared__ double part[THREADS];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += v[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[0] = (float)(part[0] / n);
}

/* Evaluation per row: a correct prediction and the loss, summed into sums. */
__global__ void k_eval(const float *z, const uint8_t *labels, int rows, int n, double *sums)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    const float *zr = z + (size_t)r * n;
    int best = 0;
    float mx = zr[0], sum = 0.0f;
    for (int k = 1; k < n; k++) {
        if (zr[k] > zr[best])
            best = k;
        mx = zr[k] > mx ? zr[k] : mx;
    }
    for (int k = 0; k < n; k++)
        sum += expf(zr[k] - mx);
    atomicAdd(&sums[0], best == labels[r] ? 1.0 : 0.0);
    atomicAdd(&sums[1], (double)(logf(sum) - (zr[labels[r]] - mx)));
}

/* d[i] = 0 where the layer's output a[i] was cut by the ReLU. */
__global__ void k_relu_back(float *d, const float *a, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && a[i] <= 0.0f)
        d[i] = 0.0f;
}

/* torch.optim.SGD: first: the buffer starts at the gradient. */
__global__ void k_sgd(float *p, const float *g, float *buf, size_t n, float lr, float mu, int first)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    if (mu == 0.0f) {
        p[i] -= lr * g[i];
        return;
    }
    float b = first ? g[i] : mu * buf[i] + g[i];
    buf[i] = b;
    p[i] -= lr * b;
}

/* torch.optim.Adam, bias-corrected: step = lr / c1, rc2 = 1 / sqrt(c2). */
__global__ void k_adam(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2,
                       float step, float rc2, float eps)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float gi = g[i];
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= step * mi / (sqrtf(vi) * rc2 + eps);
}

/* ---- checks ---- */

/* 1 when e is success; else 0, why kept on g. */
static int cuda_ok(gpu_model *g, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    snprintf(g->err, sizeof g->err, "%s: %s", what, cudaGetErrorString(e));
    return 0;
}

static int blas_ok(gpu_model *g, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 1;
    snprintf(g->err, sizeof g->err, "%s: cuBLAS status %d", what, (int)s);
    return 0;
}

extern "C" const char *gpu_errmsg(const gpu_model *g)
{
    return g->err;
}

static unsigned blocks(size_t n)
{
    return (unsigned)((n + THREADS - 1) / THREADS);
}

/* ---- model ---- */

extern "C" int gpu_open(int device, const struct mlp *mh, const struct optim *o, gpu_model **out,
                        char *err, size_t errlen)
{
    gpu_model *g = (gpu_model *)calloc(1, sizeof *g);
    int ok = g != NULL;
    if (!ok)
        snprintf(err, errlen, "out of memory");
    if (ok) {
        g->device = device;
        g->nlayers = mh->nlayers;
        memcpy(g->sizes, mh->sizes, sizeof g->sizes);
        memcpy(g->w_off, mh->w_off, sizeof g->w_off);
        memcpy(g->b_off, mh->b_off, sizeof g->b_off);
        g->nparams = mh->nparams;
        g->nstate = o->n;
        g->max_batch = mh->max_batch;
        g->adam = o->kind == OPTIM_ADAM;
        g->lr = o->lr;
        g->momentum = o->momentum;
        g->beta1 = o->beta1;
        g->beta2 = o->beta2;
        g->eps = o->eps;
        ok = cuda_ok(g, cudaSetDevice(device), "cudaSetDevice") &&
             cuda_ok(g, cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking),
                     "cudaStreamCreate") &&
             blas_ok(g, cublasCreate(&g->blas), "cublasCreate") &&
             blas_ok(g, cublasSetStream(g->blas, g->stream), "cublasSetStream");
    }
    size_t rows = ok ? (size_t)g->max_batch : 0;
    const char *ma = "cudaMalloc";
    ok = ok && cuda_ok(g, cudaMalloc((void **)&g->params, g->nparams * sizeof(float)), ma) &&
         cuda_ok(g, cudaMalloc((void **)&g->grads, (g->nparams + 1) * sizeof(float)), ma) &&
         cuda_ok(g, cudaMalloc((void **)&g->m, g->nstate * sizeof(float)), "cudaMalloc") &&
         (!g->adam ||
          cuda_ok(g, cudaMalloc((void **)&g->v, g->nstate * sizeof(float)), "cudaMalloc")) &&
         cuda_ok(g, cudaMalloc((void **)&g->ones, rows * sizeof(float)), "cudaMalloc") &&
         cuda_ok(g, cudaMalloc((void **)&g->row_loss, rows * sizeof(float)), "cudaMalloc") &&
         cuda_ok(g, cudaMalloc((void **)&g->labels, rows), "cudaMalloc") &&
         cuda_ok(g, cudaMalloc((void **)&g->sums, 2 * sizeof(double)), "cudaMalloc") &&
         cuda_ok(g, cudaMalloc(&g->scratch, 256), "cudaMalloc");
    for (int l = 0; ok && l <= g->nlayers; l++)
        ok = cuda_ok(g, cudaMalloc((void **)&g->act[l], rows * g->sizes[l] * sizeof(float)),
                     "cudaMalloc") &&
             (l == 0 ||
              cuda_ok(g, cudaMalloc((void **)&g->delta[l], rows * g->sizes[l] * sizeof(float)),
                      "cudaMalloc"));
    if (ok) {
        float *ones = (float *)malloc(rows * sizeof(float));
        for (size_t i = 0; ones && i < rows; i++)
            ones[i] = 1.0f;
        ok = ones && gpu_put(g, g->ones, ones, rows * sizeof(float)) == 0 &&
             gpu_put(g, g->params, mh->params, g->nparams * sizeof(float)) == 0 &&
             gpu_put(g, g->m, o->m, g->nstate * sizeof(float)) == 0 &&
             (!g->adam || gpu_put(g, g->v, o->v, g->nstate * sizeof(float)) == 0);
        if (!ones)
            snprintf(g->err, sizeof g->err, "out of memory");
        free(ones);
    }
    if (!ok) {
        if (g) /* no handle to keep it on */
            snprintf(err, errlen, "%s", g->err);
        gpu_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

extern "C" void gpu_close(gpu_model *g)
{
    if (!g)
        return;
    if (g->stream)
        cudaStreamSynchronize(g->stream);
    cudaFree(g->params);
    cudaFree(g->grads);
    cudaFree(g->m);
    cudaFree(g->v);
    cudaFree(g->ones);
    cudaFree(g->row_loss);
    cudaFree(g->labels);
    cudaFree(g->sums);
    cudaFree(g->scratch);
    for (int l = 0; l <= MLP_MAX_LAYERS; l++) {
        cudaFree(g->act[l]);
        cudaFree(g->delta[l]);
    }
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    free(g);
}

extern "C" float *gpu_params(gpu_model *g) { return g->params; }
extern "C" float *gpu_grads(gpu_model *g) { return g->grads; }
extern "C" float *gpu_state_m(gpu_model *g) { return g->m; }
extern "C" float *gpu_state_v(gpu_model *g) { return g->v; }
extern "C" void *gpu_scratch(gpu_model *g) { return g->scratch; }

/* One copy between host and device on g's stream, waited for. */
static int copy(gpu_model *g, void *to, const void *from, size_t bytes, cudaMemcpyKind kind,
                const char *what)
{
    return cuda_ok(g, cudaMemcpyAsync(to, from, bytes, kind, g->stream), what) &&
                   cuda_ok(g, cudaStreamSynchronize(g->stream), what)
               ? 0
               : -1;
}

extern "C" int gpu_put(gpu_model *g, void *dev, const void *host, size_t bytes)
{
    return copy(g, dev, host, bytes, cudaMemcpyHostToDevice, "copy to the device");
}

extern "C" int gpu_get(gpu_model *g, void *host, const void *dev, size_t bytes)
{
    return copy(g, host, dev, bytes, cudaMemcpyDeviceToHost, "copy from the device");
}

/* Logits of act[0]'s batch rows in act[nlayers]. */
static int forward(gpu_model *g, int batch)
{
    const float one = 1.0f, zero = 0.0f;
    for (int l = 0; l < g->nlayers; l++) {
        int in = g->sizes[l], outn = g->sizes[l + 1];
        /* Z^T (out x batch) = W (out x in) X^T (in x batch) */
        if (!blas_ok(g, cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, outn, batch, in, &one,
                                 g->params + g->w_off[l], in, g->act[l], in, &zero, g->act[l + 1],
                                 outn),
                     "forward product"))
            return -1;
        size_t n = (size_t)batch * outn;
        k_bias_act<<<blocks(n), THREADS, 0, g->stream>>>(g->act[l + 1], g->params + g->b_off[l],
                                                         batch, outn, l + 1 < g->nlayers);
    }
    return cuda_ok(g, cudaGetLastError(), "forward kernels") ? 0 : -1;
}

/* The batch's inputs and labels onto the device. */
static int load(gpu_model *g, const float *x, const uint8_t *labels, int batch)
{
    if (batch < 1 || batch > g->max_batch) {
        snprintf(g->err, sizeof g->err, "batch of %d rows (at most %d)", batch, g->max_batch);
        return -1;
    }
    size_t xb = (size_t)batch * g->sizes[0] * sizeof(float);
    return cuda_ok(g, cudaMemcpyAsync(g->act[0], x, xb, cudaMemcpyHostToDevice, g->stream),
                   "copy of the batch") &&
                   cuda_ok(g, cudaMemcpyAsync(g->labels, labels, (size_t)batch,
                                           cudaMemcpyHostToDevice, g->stream),
                           "copy of the labels")
               ? 0
               : -1;
}

extern "C" int gpu_train_step(gpu_model *g, const float *x, const uint8_t *labels, int batch)
{
    const float one = 1.0f, zero = 0.0f;
    int L = g->nlayers, classes = g->sizes[L];
    if (load(g, x, labels, batch) < 0 || forward(g, batch) < 0)
        return -1;
    k_softmax_xent<<<blocks((size_t)batch), THREADS, 0, g->stream>>>(
        g->act[L], g->labels, batch, classes, 1.0f / (float)batch, g->delta[L], g->row_loss);
    k_mean<<<1, THREADS, 0, g->stream>>>(g->row_loss, batch, g->grads + g->nparams);
    for (int l = L - 1; l >= 0; l--) {
        int in = g->sizes[l], outn = g->sizes[l + 1];
        const float *dl = g->delta[l + 1];
        /* dW^T (in x out) = A^T (in x batch) D (batch x out) */
        if (!blas_ok(g, cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, outn, batch, &one,
                                 g->act[l], in, dl, outn, &zero, g->grads + g->w_off[l], in),
                     "weight gradient") ||
            /* db = D^T ones: the column sums of D */
            !blas_ok(g, cublasSgemv(g->blas, CUBLAS_OP_N, outn, batch, &one, dl, outn, g->ones, 1,
                                 &zero, g->grads + g->b_off[l], 1),
                     "bias gradient"))
            return -1;
        if (l == 0)
            break;
        /* D_prev^T (in x batch) = W^T (in x out) D^T (out x batch) */
        if (!blas_ok(g, cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, outn, &one,
                                 g->params + g->w_off[l], in, dl, outn, &zero, g->delta[l], in),
                     "input gradient"))
            return -1;
        size_t n = (size_t)batch * in;
        k_relu_back<<<blocks(n), THREADS, 0, g->stream>>>(g->delta[l], g->act[l], n);
    }
    return cuda_ok(g, cudaGetLastError(), "backward kernels") &&
                   cuda_ok(g, cudaStreamSynchronize(g->stream), "training step")
               ? 0
               : -1;
}

extern "C" int gpu_optim_step(gpu_model *g, struct optim *o)
{
    size_t n = g->nparams;
    if (!g->adam) {
        k_sgd<<<blocks(n), THREADS, 0, g->stream>>>(g->params, g->grads, g->m, n, g->lr,
                                                     g->momentum, o->t == 0);
    } else {
        double t = (double)(o->t + 1);
        float c1 = (float)(1.0 - pow(g->beta1, t)), c2 = (float)(1.0 - pow(g->beta2, t));
        k_adam<<<blocks(n), THREADS, 0, g->stream>>>(g->params, g->grads, g->m, g->v, n, g->beta1,
                                                      g->beta2, g->lr / c1, 1.0f / sqrtf(c2),
                                                      g->eps);
    }
    o->t++;
    return cuda_ok(g, cudaGetLastError(), "optimiser step") ? 0 : -1;
}

extern "C" int gpu_evaluate(gpu_model *g, const float *x, const uint8_t *labels, int batch,
                            double *correct, double *loss_sum)
{
    double sums[2];
    if (!cuda_ok(g, cudaMemsetAsync(g->sums, 0, sizeof sums, g->stream), "evaluation") ||
        load(g, x, labels, batch) < 0 || forward(g, batch) < 0)
        return -1;
    k_eval<<<blocks((size_t)batch), THREADS, 0, g->stream>>>(g->act[g->nlayers], g->labels, batch,
                                                             g->sizes[g->nlayers], g->sums);
    if (!cuda_ok(g, cudaGetLastError(), "evaluation kernel") ||
        gpu_get(g, sums, g->sums, sizeof sums) < 0)
        return -1;
    *correct += sums[0];
    *loss_sum += sums[1];
    return 0;
}

extern "C" int gpu_to_host(gpu_model *g, struct mlp *m, struct optim *o)
{
    if (gpu_get(g, m->params, g->params, g->nparams * sizeof(float)) < 0 ||
        gpu_get(g, o->m, g->m, g->nstate * sizeof(float)) < 0 ||
        (g->adam && gpu_get(g, o->v, g->v, g->nstate * sizeof(float)) < 0))
        return -1;
    return 0;
}
