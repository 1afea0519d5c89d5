/*
 * train.c: the training loop of cohort-worker (see train.h).
 *
 * Every rank holds the whole model and the whole data set, visits its own
 * shard of each epoch (sampler.h), and after each step averages gradients
 * with the others in one allreduce of one flat buffer (the step's loss
 * rides in the last float).  Rank 0 loads the newest checkpoint and
 * broadcasts parameters, optimiser state and position, so every rank starts
 * from the same place; rank 0 alone prints progress and writes checkpoints.
 *
 * With BACKEND=nccl the model trains on the rank's GPU (gpu.h): the host
 * copies of the parameters and optimiser state are then filled from the
 * device only where a checkpoint or a dump needs them, and every collective
 * works on device buffers.
 */
#include "worker/train.h"
#include "lib/fmt.h"

#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/clock.h"
#include "worker/ckpt.h"
#include "worker/comm.h"
#include "worker/data.h"
#include "worker/gpu.h"
#include "worker/mlp.h"
#include "worker/optim.h"
#include "worker/rng.h"
#include "worker/sampler.h"

#define CLASSES 10
#define EVAL_BATCH 512

/* A call into gpu.h where the build has it; elsewhere the model is never on
 * a GPU (g stays NULL), and the branch that would call it fails. */
#ifdef COHORT_HAVE_GPU
#define GPU(call) (call)
#define GPU_PTR(call) (call)
#define GPU_STR(call) (call)
#else
#define GPU(call) (-1)
#define GPU_PTR(call) NULL
#define GPU_STR(call) ""
#endif

struct opts {
    int epochs;
    float lr;
    int batch;
    int sizes[MLP_MAX_LAYERS + 1];
    int nsizes;                  /* hidden sizes parsed; input and output added later */
    enum optim_kind optim;
    float momentum;
    uint64_t seed;
    int log_every;
    int threads;
    long long max_steps;         /* 0: no limit */
    const char *dump_params;
    const char *data_dir;
    const char *ckpt_dir;
    int checkpoint;
    int shuffle;
    int eval_only;
    int timeout_s;
    char data_buf[4096];
    char ckpt_buf[4096];
};

static double now_s(void)
{
    return (double)util_mono_us() / 1e6;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: cohort-worker train [options]\n"
        "  Trains an MLP on MNIST-format data with the ranks of the job (env:// start-up:\n"
        "  MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, BACKEND).\n"
        "  --epochs N          epochs in all (env EPOCHS; default 1)\n"
        "  --lr X              learning rate (env LR; default 0.01)\n"
        "  --batch-size B      per-rank batch size (env BATCH_SIZE; default 64)\n"
        "  --hidden A,B,...    hidden layer sizes (default 256,128)\n"
        "  --optimizer NAME    sgd (momentum) or adam (default sgd)\n"
        "  --momentum M        SGD momentum (default 0.9)\n"
        "  --seed S            initialisation and shuffle seed (default 1)\n"
        "  --no-shuffle        visit the data in file order\n"
        "  --log-every N       a progress line every N steps (default 100; 0: epochs only)\n"
        "  --threads N         OpenBLAS threads per rank (default 1)\n"
        "  --max-steps K       stop after K steps in all\n"
        "  --data DIR          data set directory (default $DATASETS_PATH/<first of $DATASETS>)\n"
        "  --checkpoint-dir D  (default $WORKSPACE/checkpoints)\n"
        "  --no-checkpoint     neither resume nor write checkpoints\n"
        "  --eval-only         evaluate the newest checkpoint on the test set, no training\n"
        "  --dump-params FILE  rank 0 writes the final parameters (raw float32) there\n"
        "  --timeout SECS      collective and rendezvous timeout (env COHORT_COMM_TIMEOUT;\n"
        "                      default 30)\n"
        "  --local_rank=N      accepted as torch.distributed.launch passes it\n");
}

static int parse_int(const char *name, const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    long long n;
    errno = 0;
    n = v ? strtoll(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || n < lo || n > hi) {
        fprintf(stderr, "cohort-worker: %s must be an integer from %lld to %lld, got '%s'\n",
                name, lo, hi, v ? v : "");
        return -1;
    }
    *out = n;
    return 0;
}

static int parse_float(const char *name, const char *v, double lo, double hi, float *out)
{
    char *end;
    double d;
    errno = 0;
    d = v ? strtod(v, &end) : 0;
    if (!v || errno || *end || end == v || !isfinite(d) || d < lo || d > hi) {
        fprintf(stderr, "cohort-worker: %s must be a number from %g to %g, got '%s'\n", name, lo,
                hi, v ? v : "");
        return -1;
    }
    *out = (float)d;
    return 0;
}

static int parse_hidden(const char *v, struct opts *o)
{
    char buf[256], *save = NULL, *tok;
    o->nsizes = 0;
    if (!v || strlen(v) >= sizeof buf)
        goto bad;
    memcpy(buf, v, strlen(v) + 1);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long n;
        if (o->nsizes == MLP_MAX_LAYERS - 1 || parse_int("--hidden", tok, 1, 65536, &n) < 0)
            goto bad;
        o->sizes[1 + o->nsizes++] = (int)n;
    }
    return 0;
bad:
    fprintf(stderr, "cohort-worker: --hidden takes 0 to %d comma-separated sizes, got '%s'\n",
            MLP_MAX_LAYERS - 1, v ? v : "");
    return -1;
}

enum {
    OPT_EPOCHS = 256, OPT_LR, OPT_BATCH, OPT_HIDDEN, OPT_OPTIMIZER, OPT_MOMENTUM, OPT_SEED,
    OPT_NO_SHUFFLE, OPT_LOG_EVERY, OPT_THREADS, OPT_MAX_STEPS, OPT_DATA, OPT_CKPT_DIR,
    OPT_NO_CKPT, OPT_EVAL_ONLY, OPT_DUMP, OPT_TIMEOUT, OPT_LOCAL_RANK
};

static const struct option options[] = {
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"lr", required_argument, NULL, OPT_LR},
    {"batch-size", required_argument, NULL, OPT_BATCH},
    {"hidden", required_argument, NULL, OPT_HIDDEN},
    {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"seed", required_argument, NULL, OPT_SEED},
    {"no-shuffle", no_argument, NULL, OPT_NO_SHUFFLE},
    {"log-every", required_argument, NULL, OPT_LOG_EVERY},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"max-steps", required_argument, NULL, OPT_MAX_STEPS},
    {"data", required_argument, NULL, OPT_DATA},
    {"checkpoint-dir", required_argument, NULL, OPT_CKPT_DIR},
    {"no-checkpoint", no_argument, NULL, OPT_NO_CKPT},
    {"eval-only", no_argument, NULL, OPT_EVAL_ONLY},
    {"dump-params", required_argument, NULL, OPT_DUMP},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"local_rank", required_argument, NULL, OPT_LOCAL_RANK}, /* as torch.distributed.launch */
    {"local-rank", required_argument, NULL, OPT_LOCAL_RANK},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

/* An integer option's value into *out (an int). */
static int opt_int(const char *name, const char *v, long long lo, long long hi, int *out)
{
    long long n;
    if (parse_int(name, v, lo, hi, &n) < 0)
        return -1;
    *out = (int)n;
    return 0;
}

/* A path option's value: not empty. */
static int opt_path(const char *name, const char *v, const char **out)
{
    if (!*v) {
        fprintf(stderr, "cohort-worker: %s needs a path\n", name);
        return -1;
    }
    *out = v;
    return 0;
}

/* One option of the command line (code from the table above, its value in v). */
static int parse_option(int code, const char *v, struct opts *o)
{
    long long n;
    switch (code) {
    case OPT_EPOCHS: return opt_int("--epochs", v, 1, 1000000, &o->epochs);
    case OPT_LR: return parse_float("--lr", v, 1e-12, 100, &o->lr);
    case OPT_BATCH: return opt_int("--batch-size", v, 1, 65536, &o->batch);
    case OPT_HIDDEN: return parse_hidden(v, o);
    case OPT_MOMENTUM: return parse_float("--momentum", v, 0, 0.9999, &o->momentum);
    case OPT_LOG_EVERY: return opt_int("--log-every", v, 0, 1 << 30, &o->log_every);
    case OPT_THREADS: return opt_int("--threads", v, 1, 256, &o->threads);
    case OPT_TIMEOUT: return opt_int("--timeout", v, 1, 86400, &o->timeout_s);
    case OPT_DATA: return opt_path("--data", v, &o->data_dir);
    case OPT_CKPT_DIR: return opt_path("--checkpoint-dir", v, &o->ckpt_dir);
    case OPT_DUMP: return opt_path("--dump-params", v, &o->dump_params);
    case OPT_NO_SHUFFLE: o->shuffle = 0; return 0;
    case OPT_NO_CKPT: o->checkpoint = 0; return 0;
    case OPT_EVAL_ONLY: o->eval_only = 1; return 0;
    case OPT_SEED:
        if (parse_int("--seed", v, 0, 1LL << 62, &n) < 0)
            return -1;
        o->seed = (uint64_t)n;
        return 0;
    case OPT_MAX_STEPS: return parse_int("--max-steps", v, 1, 1LL << 40, &o->max_steps);
    case OPT_OPTIMIZER:
        if (!strcmp(v, "sgd") || !strcmp(v, "adam")) {
            o->optim = !strcmp(v, "sgd") ? OPTIM_SGD : OPTIM_ADAM;
            return 0;
        }
        fprintf(stderr, "cohort-worker: --optimizer is sgd or adam, got '%s'\n", v);
        return -1;
    case OPT_LOCAL_RANK:
        if (parse_int("--local_rank", v, 0, 65535, &n) < 0)
            return -1;
        if (!getenv("LOCAL_RANK")) { /* the environment wins where it says */
            char buf[16];
            fmt_cut(buf, sizeof buf, "%lld", n); /* 0..65535 */
            setenv("LOCAL_RANK", buf, 1);
        }
        return 0;
    default: return -1;
    }
}

/* Where the data and checkpoints are when no option said: the rank
 * environment the agent exports. */
static int default_paths(struct opts *o)
{
    if (!o->data_dir) {
        const char *root = getenv("DATASETS_PATH"), *list = getenv("DATASETS");
        size_t first = list ? strcspn(list, ",") : 0;
        if (!root || !*root || !list || first == 0) {
            fprintf(stderr, "cohort-worker: no data: set --data DIR, or DATASETS_PATH and "
                            "DATASETS (the agent does)\n");
            return -1;
        }
        if (fmt_whole(o->data_buf, sizeof o->data_buf, "%s/%.*s", root, (int)first, list) != 0) {
            fprintf(stderr, "cohort-worker: DATASETS_PATH and DATASETS make too long a path\n");
            return -1;
        }
        o->data_dir = o->data_buf;
    }
    if (o->checkpoint && !o->ckpt_dir) {
        const char *ws = getenv("WORKSPACE");
        if (ws && *ws) {
            if (fmt_path(o->ckpt_buf, sizeof o->ckpt_buf, ws, "checkpoints") != 0) {
                fprintf(stderr, "cohort-worker: WORKSPACE is too long a path\n");
                return -1;
            }
            o->ckpt_dir = o->ckpt_buf;
        } else {
            o->checkpoint = 0;  /* nowhere to keep them; said at start-up */
        }
    }
    return 0;
}

/* Environment first, then flags.  Returns 0, 1 for --help, or -1. */
static int parse(int argc, char **argv, struct opts *o)
{
    long long n;
    const char *e;

    memset(o, 0, sizeof *o);
    o->epochs = 1;
    o->lr = 0.01f;
    o->batch = 64;
    o->optim = OPTIM_SGD;
    o->momentum = 0.9f;
    o->seed = 1;
    o->log_every = 100;
    o->threads = 1;
    o->checkpoint = 1;
    o->shuffle = 1;
    o->timeout_s = 30;
    o->sizes[1] = 256;
    o->sizes[2] = 128;
    o->nsizes = 2;

    if ((e = getenv("EPOCHS")) && *e && opt_int("EPOCHS", e, 1, 1000000, &o->epochs) < 0)
        return -1;
    if ((e = getenv("LR")) && *e && parse_float("LR", e, 1e-12, 100, &o->lr) < 0)
        return -1;
    if ((e = getenv("BATCH_SIZE")) && *e && opt_int("BATCH_SIZE", e, 1, 65536, &o->batch) < 0)
        return -1;
    if ((e = getenv("COHORT_COMM_TIMEOUT")) && *e) {
        if (parse_int("COHORT_COMM_TIMEOUT", e, 1, 86400, &n) < 0)
            return -1;
        o->timeout_s = (int)n;
    }

    int code;
    opterr = 0; /* the messages below name the option as given */
    optind = 0; /* glibc: a full reset, for a second call in one process */
    while ((code = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (code == 'h')
            return 1;
        if (code == '?' || code == ':') {
            fprintf(stderr, "cohort-worker: %s '%s' (see --help)\n",
                    code == '?' ? "unknown option" : "a value is missing after",
                    argv[optind - 1]);
            return -1;
        }
        if (parse_option(code, optarg, o) < 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "cohort-worker: unexpected argument '%s' (see --help)\n", argv[optind]);
        return -1;
    }
    return default_paths(o);
}

/* Fills the model's input with the batch's images, scaled to [0, 1], and
 * labels with their labels. */
COHORT_VECTOR static void gather(struct mlp *m, const struct dataset *d, const uint32_t *idx, int batch,
                   uint8_t *labels)
{
    size_t px = (size_t)d->rows * d->cols;
    float *x = mlp_input(m);
    for (int r = 0; r < batch; r++) {
        const uint8_t *src = d->images + (size_t)idx[r] * px;
        float *dst = x + (size_t)r * px;
        for (size_t k = 0; k < px; k++)
            dst[k] = (float)src[k] * (1.0f / 255.0f);
        labels[r] = d->labels[idx[r]];
    }
}

/* Sums 3 floats over the ranks: -1 when the collective failed (comm_errmsg
 * says why), -2 when the device did (gpu_errmsg says why). */
static int coll_sum3(comm *c, gpu_model *g, float *sums)
{
    if (!g)
        return comm_allreduce(c, sums, 3, COMM_SUM);
    void *dev = GPU_PTR(gpu_scratch(g));
    if (GPU(gpu_put(g, dev, sums, 3 * sizeof(float))) < 0)
        return -2;
    if (comm_allreduce(c, dev, 3, COMM_SUM) < 0)
        return -1;
    return GPU(gpu_get(g, sums, dev, 3 * sizeof(float))) < 0 ? -2 : 0;
}

/* Rank 0's bytes to every rank, from host memory; the same codes. */
static int coll_bcast(comm *c, gpu_model *g, void *host, size_t bytes)
{
    if (!g)
        return comm_broadcast(c, host, bytes, 0);
    void *dev = GPU_PTR(gpu_scratch(g));
    if (GPU(gpu_put(g, dev, host, bytes)) < 0)
        return -2;
    if (comm_broadcast(c, dev, bytes, 0) < 0)
        return -1;
    return GPU(gpu_get(g, host, dev, bytes)) < 0 ? -2 : 0;
}

/* Sharded evaluation: rank r takes items r, r + world, ...; sums are
 * allreduced so every rank learns the totals.  0, or -1 (the collective)
 * or -2 (the device) as coll_sum3. */
static int evaluate(comm *c, struct mlp *m, gpu_model *g, const struct dataset *test,
                    double *acc, double *loss)
{
    int world = comm_size(c), rank = comm_rank(c);
    uint32_t idx[EVAL_BATCH];
    uint8_t labels[EVAL_BATCH];
    double correct = 0, loss_sum = 0;
    float sums[3];
    uint32_t i = (uint32_t)rank;

    while (i < test->n) {
        int b = 0;
        for (; b < EVAL_BATCH && i < test->n; i += (uint32_t)world)
            idx[b++] = i;
        gather(m, test, idx, b, labels);
        if (!g)
            mlp_evaluate(m, labels, b, &correct, &loss_sum);
        else if (GPU(gpu_evaluate(g, mlp_input(m), labels, b, &correct, &loss_sum)) < 0)
            return -2;
    }
    sums[0] = (float)correct;
    sums[1] = (float)loss_sum;
    sums[2] = 0;
    int rc = coll_sum3(c, g, sums);
    if (rc < 0)
        return rc;
    *acc = sums[0] / (double)test->n;
    *loss = sums[1] / (double)test->n;
    return 0;
}

static int dump(const char *path, const struct mlp *m)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(m->params, sizeof(float), m->nparams, f) == m->nparams;
    if (f)
        ok = (fclose(f) == 0) && ok;
    if (!ok)
        fprintf(stderr, "cohort-worker: cannot write %s: %s\n", path, strerror(errno));
    return ok ? 0 : -1;
}

/* What every rank must agree on at start: rank 0's position and state. */
struct start {
    int64_t epoch_done;
    int64_t step;
    int64_t optim_t;
    int64_t loaded;
};

/* A rank's training run: what run_open sets up and run_close frees. */
struct run {
    struct opts o;
    struct comm_config cfg;
    struct dataset train, test;
    struct mlp m;
    struct optim opt;
    struct start st;
    comm *c;
    gpu_model *g;      /* the model on this rank's GPU (BACKEND=nccl), else NULL */
    uint32_t *idx;     /* this rank's shard of an epoch */
    uint8_t *labels;
    size_t per;        /* items in a shard */
    long long steps_per_epoch, steps_done;
    int rank, world;
    char shape[128], path[4300], err[1024];
};

/* Says why a collective (-1: comm_errmsg) or the GPU (-2: gpu_errmsg, or
 * r->err before it opened) failed; returns -1. */
static int failed(const struct run *r, int why)
{
    if (why < -1) /* the device's why is kept on it; before it opened, in r->err */
        fprintf(stderr, "cohort-worker: rank %d: GPU: %s\n", r->rank,
                r->g ? GPU_STR(gpu_errmsg(r->g)) : r->err);
    else
        fprintf(stderr, "cohort-worker: %s\n", comm_errmsg(r->c));
    return -1;
}

/* Rank 0: the newest checkpoint into the model and optimiser, if any. */
static void resume(struct run *r)
{
    int ep = 0;
    int64_t step = 0;
    int rc = ckpt_load_latest(r->o.ckpt_dir, &r->m, &r->opt, &ep, &step, r->path, sizeof r->path,
                              r->err, sizeof r->err);
    if (rc < 0) {
        fprintf(stderr, "cohort-worker: %s\n", r->err);
        r->st.loaded = -1;
    } else if (rc > 0) {
        r->st = (struct start){ep, step, r->opt.t, 1};
        printf("resumed from %s: %d epoch%s done, step %lld\n", r->path, ep, ep == 1 ? "" : "s",
               (long long)step);
    } else {
        mlp_init_params(&r->m, r->o.seed); /* a damaged file may have been half read */
        memset(r->opt.m, 0, r->opt.n * sizeof(float));
        if (r->opt.v)
            memset(r->opt.v, 0, r->opt.n * sizeof(float));
    }
}

/* Everything up to the first step: the data, the model, the rendezvous,
 * rank 0's checkpoint, the GPU, and every rank on rank 0's parameters,
 * state and position.  0, or -1 (said on stderr). */
static int run_open(struct run *r)
{
    struct opts *o = &r->o;
    /* Data first: a bad file is found before the other ranks are kept waiting. */
    if (data_load(o->data_dir, 1, CLASSES, &r->train, r->err, sizeof r->err) < 0 ||
        data_load(o->data_dir, 0, CLASSES, &r->test, r->err, sizeof r->err) < 0) {
        fprintf(stderr, "cohort-worker: %s\n", r->err);
        return -1;
    }
    if (r->test.rows != r->train.rows || r->test.cols != r->train.cols) {
        fprintf(stderr, "cohort-worker: training items are %ux%u but test items %ux%u\n",
                r->train.rows, r->train.cols, r->test.rows, r->test.cols);
        return -1;
    }
    o->sizes[0] = (int)(r->train.rows * r->train.cols);
    o->sizes[o->nsizes + 1] = CLASSES;
    if (mlp_init(&r->m, o->sizes, o->nsizes + 2, o->batch > EVAL_BATCH ? o->batch : EVAL_BATCH, 1,
                 r->err, sizeof r->err) < 0 ||
        optim_init(&r->opt, o->optim, r->m.nparams, o->lr, o->momentum) < 0) {
        fprintf(stderr, "cohort-worker: %s\n", r->m.params ? "out of memory" : r->err);
        return -1;
    }
    mlp_shape(&r->m, r->shape, sizeof r->shape);
    r->cfg.shm_buffer_bytes = (r->m.nparams + 1) * sizeof(float);
    if (comm_init(&r->cfg, &r->c, r->err, sizeof r->err) < 0) {
        fprintf(stderr, "cohort-worker: %s\n", r->err);
        return -1;
    }
    /* Over shared memory the gradients are written straight into this rank's
     * slot, and reduced there: nothing is copied in or out. */
    float *shared = comm_buffer(r->c, r->m.nparams + 1);
    if (shared)
        mlp_lend_grads(&r->m, shared);
    r->rank = comm_rank(r->c);
    r->world = comm_size(r->c);
    mlp_init_params(&r->m, o->seed);
    if (r->rank == 0 && o->checkpoint)
        resume(r);
    /* On a GPU from here: the device starts from this rank's host copy. */
    if (r->cfg.backend == COMM_BACKEND_NCCL &&
        GPU(gpu_open(comm_local_rank(r->c), &r->m, &r->opt, &r->g, r->err, sizeof r->err)) < 0) {
        fprintf(stderr, "cohort-worker: rank %d: %s\n", r->rank, r->err);
        return -1;
    }
    int rc = coll_bcast(r->c, r->g, &r->st, sizeof r->st);
    if (rc < 0)
        return failed(r, rc);
    if (r->st.loaded < 0) {
        if (r->rank != 0)
            fprintf(stderr, "cohort-worker: rank 0 could not resume (see its log)\n");
        return -1;
    }
    gpu_model *g = r->g;
    if (comm_broadcast(r->c, g ? GPU_PTR(gpu_params(g)) : r->m.params,
                       r->m.nparams * sizeof(float), 0) < 0)
        return failed(r, -1);
    if (r->st.loaded) {
        float *sm = g ? GPU_PTR(gpu_state_m(g)) : r->opt.m;
        float *sv = g ? GPU_PTR(gpu_state_v(g)) : r->opt.v;
        if (comm_broadcast(r->c, sm, r->opt.n * sizeof(float), 0) < 0 ||
            (r->opt.v && comm_broadcast(r->c, sv, r->opt.n * sizeof(float), 0) < 0))
            return failed(r, -1);
        r->opt.t = r->st.optim_t;
    }
    r->steps_done = r->st.step;
    r->per = sampler_len(r->train.n, r->world);
    r->steps_per_epoch = (long long)((r->per + (size_t)o->batch - 1) / (size_t)o->batch);
    r->idx = malloc(r->per * sizeof *r->idx);
    r->labels = malloc((size_t)(o->batch > EVAL_BATCH ? o->batch : EVAL_BATCH));
    if (!r->idx || !r->labels) {
        fprintf(stderr, "cohort-worker: out of memory\n");
        return -1;
    }
    return 0;
}

/* --eval-only: the test set on the parameters every rank now has. */
static int run_eval_only(struct run *r)
{
    double acc, tloss;
    int rc = evaluate(r->c, &r->m, r->g, &r->test, &acc, &tloss);
    if (rc < 0)
        return failed(r, rc);
    if (r->rank == 0)
        printf("evaluation of %s on %d rank%s: test loss %.4f, accuracy %.2f%% (%.0f/%u)\n",
               r->st.loaded ? r->path : "the initial parameters", r->world,
               r->world == 1 ? "" : "s", tloss, 100.0 * acc, acc * r->test.n, r->test.n);
    return comm_finish(r->c) < 0 ? failed(r, -1) : 0;
}

/* One step on the batch of b items at idx: forward and backward, the
 * gradients (and the loss, in the last float) averaged over the ranks, the
 * optimiser.  0 or what failed() takes; *comm_s grows by the allreduce. */
static int step(struct run *r, const uint32_t *idx, int b, float *loss, double *comm_s)
{
    gpu_model *g = r->g;
    gather(&r->m, &r->train, idx, b, r->labels);
    if (!g)
        r->m.grads[r->m.nparams] = mlp_train_step(&r->m, r->labels, b);
    else if (GPU(gpu_train_step(g, mlp_input(&r->m), r->labels, b)) < 0)
        return -2;
    double ta = now_s();
    if (comm_allreduce(r->c, g ? GPU_PTR(gpu_grads(g)) : r->m.grads, r->m.nparams + 1,
                       COMM_AVG) < 0)
        return -1;
    *comm_s += now_s() - ta;
    if (!g) {
        *loss = r->m.grads[r->m.nparams];
        optim_step(&r->opt, r->m.params, r->m.grads);
    } else if (GPU(gpu_get(g, loss, GPU_PTR(gpu_grads(g)) + r->m.nparams, sizeof *loss)) < 0 ||
               GPU(gpu_optim_step(g, &r->opt)) < 0) {
        return -2;
    }
    return 0;
}

/* Rank 0 at an epoch's end: its summary and metric, and a checkpoint. */
static int epoch_done(struct run *r, int epoch, double loss_sum, long long steps,
                      long long samples, double secs, double comm_s)
{
    double acc, tloss;
    int rc = evaluate(r->c, &r->m, r->g, &r->test, &acc, &tloss);
    if (rc < 0)
        return failed(r, rc);
    if (r->rank != 0)
        return 0;
    double sps = samples / secs;
    printf("epoch %d done: train loss %.4f, test loss %.4f, accuracy %.2f%% (%.0f/%u), "
           "%.0f samples/s (per step: %.3f ms, of which %.3f ms in allreduce)\n",
           epoch, loss_sum / (double)steps, tloss, 100.0 * acc, acc * r->test.n, r->test.n, sps,
           1e3 * secs / (double)steps, 1e3 * comm_s / (double)steps);
    printf("COHORT_METRIC {\"epoch\":%d,\"step\":%lld,\"loss\":%.6f,\"accuracy\":%.6f,"
           "\"samples_per_s\":%.1f}\n",
           epoch, r->steps_done, loss_sum / (double)steps, acc, sps);
    if (!r->o.checkpoint)
        return 0;
    if (r->g && GPU(gpu_to_host(r->g, &r->m, &r->opt)) < 0)
        return failed(r, -2);
    if (ckpt_save(r->o.ckpt_dir, &r->m, &r->opt, epoch, r->steps_done, r->err, sizeof r->err) < 0) {
        fprintf(stderr, "cohort-worker: %s\n", r->err);
        return -1;
    }
    printf("checkpoint saved: epoch %d\n", epoch);
    return 0;
}

/* One epoch over this rank's shard, with rank 0's progress lines every
 * --log-every steps.  0, 1 once --max-steps is reached, or -1. */
static int run_epoch(struct run *r, int epoch)
{
    const struct opts *o = &r->o;
    double t0 = now_s(), loss_sum = 0, win_t0 = t0, win_loss = 0, comm_s = 0;
    long long samples = 0, steps = 0, win_samples = 0;
    int win_steps = 0, rc;
    if (sampler_indices(r->idx, r->train.n, r->world, r->rank, o->seed, epoch, o->shuffle) < 0) {
        fprintf(stderr, "cohort-worker: out of memory for the sampler\n");
        return -1;
    }
    for (size_t off = 0; off < r->per; off += (size_t)o->batch) {
        int b = (int)(r->per - off < (size_t)o->batch ? r->per - off : (size_t)o->batch);
        float loss;
        if ((rc = step(r, r->idx + off, b, &loss, &comm_s)) < 0)
            return failed(r, rc);
        r->steps_done++;
        steps++;
        samples += (long long)b * r->world;
        win_samples += (long long)b * r->world;
        loss_sum += loss;
        win_loss += loss;
        win_steps++;
        if (r->rank == 0 && o->log_every > 0 && steps % o->log_every == 0) {
            double t = now_s(), sps = win_samples / (t - win_t0);
            printf("epoch %d step %lld/%lld loss %.4f %.0f samples/s\n", epoch, steps,
                   r->steps_per_epoch, win_loss / win_steps, sps);
            printf("COHORT_METRIC {\"epoch\":%d,\"step\":%lld,\"loss\":%.6f,"
                   "\"samples_per_s\":%.1f}\n",
                   epoch, r->steps_done, win_loss / win_steps, sps);
            win_t0 = t;
            win_samples = 0;
            win_loss = 0;
            win_steps = 0;
        }
        if (o->max_steps && r->steps_done >= o->max_steps)
            break;
    }
    if (epoch_done(r, epoch, loss_sum, steps, samples, now_s() - t0, comm_s) < 0)
        return -1;
    return o->max_steps && r->steps_done >= o->max_steps;
}

/* After the last epoch: rank 0's --dump-params, and nobody leaves while
 * another rank may still need it. */
static int run_finish(struct run *r)
{
    if (r->rank == 0 && r->o.dump_params) {
        if (r->g && GPU(gpu_to_host(r->g, &r->m, &r->opt)) < 0)
            return failed(r, -2);
        if (dump(r->o.dump_params, &r->m) < 0)
            return -1;
    }
    if (comm_finish(r->c) < 0)
        return failed(r, -1);
    if (r->rank == 0)
        printf("training finished: %lld steps\n", r->steps_done);
    return 0;
}

static void run_close(struct run *r)
{
    free(r->idx);
    free(r->labels);
#ifdef COHORT_HAVE_GPU
    gpu_close(r->g);
#endif
    comm_destroy(r->c);
    optim_free(&r->opt);
    mlp_free(&r->m);
    data_free(&r->train);
    data_free(&r->test);
}

int train_main(int argc, char **argv)
{
    int status = 2;
    struct run *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "cohort-worker: out of memory\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = parse(argc, argv, &r->o);
    if (rc != 0) {
        if (rc > 0)
            usage(stdout);
        status = rc > 0 ? 0 : 2;
        goto out;
    }
    openblas_set_num_threads(r->o.threads);
    if (comm_config_from_env(&r->cfg, r->err, sizeof r->err) < 0) {
        fprintf(stderr, "cohort-worker: %s\n", r->err);
        goto out;
    }
    r->cfg.timeout_ms = r->o.timeout_s * 1000;
#ifndef COHORT_HAVE_GPU
    if (r->cfg.backend == COMM_BACKEND_NCCL) {
        fprintf(stderr, "cohort-worker: BACKEND=nccl: %s\n",
                comm_have_nccl() ? "this build has NCCL but not the GPU trainer (no nvcc or "
                                   "cuBLAS was found); run with BACKEND=gloo"
                                 : "this cohort-worker was built without CUDA/NCCL");
        goto out;
    }
#endif
    status = 1;
    if (run_open(r) != 0)
        goto out;
    if (r->o.eval_only) {
        status = run_eval_only(r) == 0 ? 0 : 1;
        goto out;
    }
    if (r->rank == 0) {
        printf("cohort-worker: %d rank%s over %s, model %s, %s lr %g, batch %d per rank, "
               "%u training and %u test items from %s, epochs %d, %lld steps per epoch\n",
               r->world, r->world == 1 ? "" : "s",
               r->world > 1 ? comm_transport(r->c) : comm_backend_name(r->cfg.backend), r->shape,
               optim_name(r->o.optim), (double)r->o.lr, r->o.batch, r->train.n, r->test.n,
               r->o.data_dir, r->o.epochs, r->steps_per_epoch);
        if (!r->o.checkpoint)
            printf("checkpoints off (%s)\n",
                   getenv("WORKSPACE") ? "--no-checkpoint" : "no WORKSPACE set");
    }
    rc = 0;
    for (int epoch = (int)r->st.epoch_done + 1; rc == 0 && epoch <= r->o.epochs; epoch++)
        rc = run_epoch(r, epoch);
    if (rc >= 0 && run_finish(r) == 0)
        status = 0;
out:
    run_close(r);
    free(r);
    return status;
}
