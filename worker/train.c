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

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "storage/clock.h"
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
#else
#define GPU(call) (-1)
#define GPU_PTR(call) NULL
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

    if ((e = getenv("EPOCHS")) && *e) {
        if (parse_int("EPOCHS", e, 1, 1000000, &n) < 0)
            return -1;
        o->epochs = (int)n;
    }
    if ((e = getenv("LR")) && *e && parse_float("LR", e, 1e-12, 100, &o->lr) < 0)
        return -1;
    if ((e = getenv("BATCH_SIZE")) && *e) {
        if (parse_int("BATCH_SIZE", e, 1, 65536, &n) < 0)
            return -1;
        o->batch = (int)n;
    }
    if ((e = getenv("COHORT_COMM_TIMEOUT")) && *e) {
        if (parse_int("COHORT_COMM_TIMEOUT", e, 1, 86400, &n) < 0)
            return -1;
        o->timeout_s = (int)n;
    }

    for (int i = 1; i < argc; i++) {
        char *a = argv[i], *v = NULL, *eq;
        char name[64];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return 1;
        if (strncmp(a, "--", 2)) {
            fprintf(stderr, "cohort-worker: unexpected argument '%s' (see --help)\n", a);
            return -1;
        }
        eq = strchr(a, '=');
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            v = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
        }
#define VALUE() (v ? v : (i + 1 < argc ? (v = argv[++i]) : NULL))
        if (!strcmp(name, "--no-checkpoint")) {
            o->checkpoint = 0;
        } else if (!strcmp(name, "--eval-only")) {
            o->eval_only = 1;
        } else if (!strcmp(name, "--no-shuffle")) {
            o->shuffle = 0;
        } else if (!strcmp(name, "--local_rank") || !strcmp(name, "--local-rank")) {
            if (parse_int(name, VALUE(), 0, 65535, &n) < 0)
                return -1;
            if (!getenv("LOCAL_RANK")) {   /* the environment wins where it says */
                char buf[16];
                snprintf(buf, sizeof buf, "%lld", n);
                setenv("LOCAL_RANK", buf, 1);
            }
        } else if (!strcmp(name, "--epochs")) {
            if (parse_int(name, VALUE(), 1, 1000000, &n) < 0)
                return -1;
            o->epochs = (int)n;
        } else if (!strcmp(name, "--lr")) {
            if (parse_float(name, VALUE(), 1e-12, 100, &o->lr) < 0)
                return -1;
        } else if (!strcmp(name, "--batch-size")) {
            if (parse_int(name, VALUE(), 1, 65536, &n) < 0)
                return -1;
            o->batch = (int)n;
        } else if (!strcmp(name, "--hidden")) {
            if (parse_hidden(VALUE(), o) < 0)
                return -1;
        } else if (!strcmp(name, "--optimizer")) {
            const char *x = VALUE();
            if (x && !strcmp(x, "sgd")) {
                o->optim = OPTIM_SGD;
            } else if (x && !strcmp(x, "adam")) {
                o->optim = OPTIM_ADAM;
            } else {
                fprintf(stderr, "cohort-worker: --optimizer is sgd or adam, got '%s'\n",
                        x ? x : "");
                return -1;
            }
        } else if (!strcmp(name, "--momentum")) {
            if (parse_float(name, VALUE(), 0, 0.9999, &o->momentum) < 0)
                return -1;
        } else if (!strcmp(name, "--seed")) {
            if (parse_int(name, VALUE(), 0, 1LL << 62, &n) < 0)
                return -1;
            o->seed = (uint64_t)n;
        } else if (!strcmp(name, "--log-every")) {
            if (parse_int(name, VALUE(), 0, 1 << 30, &n) < 0)
                return -1;
            o->log_every = (int)n;
        } else if (!strcmp(name, "--threads")) {
            if (parse_int(name, VALUE(), 1, 256, &n) < 0)
                return -1;
            o->threads = (int)n;
        } else if (!strcmp(name, "--max-steps")) {
            if (parse_int(name, VALUE(), 1, 1LL << 40, &n) < 0)
                return -1;
            o->max_steps = n;
        } else if (!strcmp(name, "--timeout")) {
            if (parse_int(name, VALUE(), 1, 86400, &n) < 0)
                return -1;
            o->timeout_s = (int)n;
        } else if (!strcmp(name, "--dump-params") || !strcmp(name, "--data") ||
                   !strcmp(name, "--checkpoint-dir")) {
            const char *x = VALUE();
            if (!x || !*x) {
                fprintf(stderr, "cohort-worker: %s needs a path\n", name);
                return -1;
            }
            if (!strcmp(name, "--dump-params"))
                o->dump_params = x;
            else if (!strcmp(name, "--data"))
                o->data_dir = x;
            else
                o->ckpt_dir = x;
        } else {
            fprintf(stderr, "cohort-worker: unknown option '%s' (see --help)\n", a);
            return -1;
        }
#undef VALUE
    }

    if (!o->data_dir) {
        const char *root = getenv("DATASETS_PATH"), *list = getenv("DATASETS");
        size_t first = list ? strcspn(list, ",") : 0;
        if (!root || !*root || !list || first == 0) {
            fprintf(stderr, "cohort-worker: no data: set --data DIR, or DATASETS_PATH and "
                            "DATASETS (the agent does)\n");
            return -1;
        }
        snprintf(o->data_buf, sizeof o->data_buf, "%s/%.*s", root, (int)first, list);
        o->data_dir = o->data_buf;
    }
    if (o->checkpoint && !o->ckpt_dir) {
        const char *ws = getenv("WORKSPACE");
        if (ws && *ws) {
            snprintf(o->ckpt_buf, sizeof o->ckpt_buf, "%s/checkpoints", ws);
            o->ckpt_dir = o->ckpt_buf;
        } else {
            o->checkpoint = 0;  /* nowhere to keep them; said at start-up */
        }
    }
    return 0;
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
 * says why), -2 when the device did (err says why). */
static int coll_sum3(comm *c, gpu_model *g, float *sums, char *err, size_t errlen)
{
    (void)err, (void)errlen; /* for the device alone */
    if (!g)
        return comm_allreduce(c, sums, 3, COMM_SUM);
    void *dev = GPU_PTR(gpu_scratch(g));
    if (GPU(gpu_put(g, dev, sums, 3 * sizeof(float), err, errlen)) < 0)
        return -2;
    if (comm_allreduce(c, dev, 3, COMM_SUM) < 0)
        return -1;
    return GPU(gpu_get(g, sums, dev, 3 * sizeof(float), err, errlen)) < 0 ? -2 : 0;
}

/* Rank 0's bytes to every rank, from host memory; the same codes. */
static int coll_bcast(comm *c, gpu_model *g, void *host, size_t bytes, char *err, size_t errlen)
{
    (void)err, (void)errlen; /* for the device alone */
    if (!g)
        return comm_broadcast(c, host, bytes, 0);
    void *dev = GPU_PTR(gpu_scratch(g));
    if (GPU(gpu_put(g, dev, host, bytes, err, errlen)) < 0)
        return -2;
    if (comm_broadcast(c, dev, bytes, 0) < 0)
        return -1;
    return GPU(gpu_get(g, host, dev, bytes, err, errlen)) < 0 ? -2 : 0;
}

/* Sharded evaluation: rank r takes items r, r + world, ...; sums are
 * allreduced so every rank learns the totals.  Returns 0 or -1. */
static int evaluate(comm *c, struct mlp *m, gpu_model *g, const struct dataset *test,
                    double *acc, double *loss, char *err, size_t errlen)
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
        else if (GPU(gpu_evaluate(g, mlp_input(m), labels, b, &correct, &loss_sum, err, errlen)) < 0)
            return -2;
    }
    sums[0] = (float)correct;
    sums[1] = (float)loss_sum;
    sums[2] = 0;
    if (coll_sum3(c, g, sums, err, errlen) < 0)
        return -1;
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

int train_main(int argc, char **argv)
{
    struct opts o;
    struct comm_config cfg;
    struct dataset train = { 0 }, test = { 0 };
    struct mlp m = { 0 };
    struct optim opt = { 0 };
    struct start st = { 0 };
    comm *c = NULL;
    gpu_model *g = NULL;
    uint32_t *idx = NULL;
    uint8_t *labels = NULL;
    char err[1024], shape[128], path[4300];
    int rc, rank = 0, world, status = 1;
    long long steps_done = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    rc = parse(argc, argv, &o);
    if (rc != 0) {
        if (rc > 0)
            usage(stdout);
        return rc > 0 ? 0 : 2;
    }
    openblas_set_num_threads(o.threads);
    if (comm_config_from_env(&cfg, err, sizeof err) < 0) {
        fprintf(stderr, "cohort-worker: %s\n", err);
        return 2;
    }
    cfg.timeout_ms = o.timeout_s * 1000;
#ifndef COHORT_HAVE_GPU
    if (cfg.backend == COMM_BACKEND_NCCL) {
        fprintf(stderr, "cohort-worker: BACKEND=nccl: %s\n",
                comm_have_nccl() ? "this build has NCCL but not the GPU trainer (no nvcc or "
                                   "cuBLAS was found); run with BACKEND=gloo"
                                 : "this cohort-worker was built without CUDA/NCCL");
        return 2;
    }
#endif

    /* Data first: a bad file is found before the other ranks are kept waiting. */
    if (data_load(o.data_dir, 1, CLASSES, &train, err, sizeof err) < 0 ||
        data_load(o.data_dir, 0, CLASSES, &test, err, sizeof err) < 0) {
        fprintf(stderr, "cohort-worker: %s\n", err);
        goto out;
    }
    if (test.rows != train.rows || test.cols != train.cols) {
        fprintf(stderr, "cohort-worker: training items are %ux%u but test items %ux%u\n",
                train.rows, train.cols, test.rows, test.cols);
        goto out;
    }
    o.sizes[0] = (int)(train.rows * train.cols);
    o.sizes[o.nsizes + 1] = CLASSES;
    if (mlp_init(&m, o.sizes, o.nsizes + 2, o.batch > EVAL_BATCH ? o.batch : EVAL_BATCH, 1, err,
                 sizeof err) < 0 ||
        optim_init(&opt, o.optim, m.nparams, o.lr, o.momentum) < 0) {
        fprintf(stderr, "cohort-worker: %s\n", m.params ? "out of memory" : err);
        goto out;
    }
    mlp_shape(&m, shape, sizeof shape);

    if (comm_init(&cfg, &c, err, sizeof err) < 0) {
        fprintf(stderr, "cohort-worker: %s\n", err);
        goto out;
    }
    rank = comm_rank(c);
    world = comm_size(c);

    mlp_init_params(&m, o.seed);
    if (rank == 0 && o.checkpoint) {
        int ep = 0;
        int64_t step = 0;
        rc = ckpt_load_latest(o.ckpt_dir, &m, &opt, &ep, &step, path, sizeof path, err,
                              sizeof err);
        if (rc < 0) {
            fprintf(stderr, "cohort-worker: %s\n", err);
            st.loaded = -1;
        } else if (rc > 0) {
            st = (struct start){ ep, step, opt.t, 1 };
            printf("resumed from %s: %d epoch%s done, step %lld\n", path, ep, ep == 1 ? "" : "s",
                   (long long)step);
        } else {
            mlp_init_params(&m, o.seed);   /* a damaged file may have been half read */
            memset(opt.m, 0, opt.n * sizeof(float));
            if (opt.v)
                memset(opt.v, 0, opt.n * sizeof(float));
        }
    }
    /* On a GPU from here: the device starts from this rank's host copy. */
    if (cfg.backend == COMM_BACKEND_NCCL &&
        GPU(gpu_open(comm_local_rank(c), &m, &opt, &g, err, sizeof err)) < 0) {
        fprintf(stderr, "cohort-worker: rank %d: %s\n", rank, err);
        goto out;
    }
    /* Everyone starts from rank 0's parameters, state and position. */
    rc = coll_bcast(c, g, &st, sizeof st, err, sizeof err);
    if (rc < 0)
        goto coll_failed;
    if (st.loaded < 0) {
        if (rank != 0)
            fprintf(stderr, "cohort-worker: rank 0 could not resume (see its log)\n");
        goto out;
    }
    if (comm_broadcast(c, g ? GPU_PTR(gpu_params(g)) : m.params, m.nparams * sizeof(float), 0) < 0)
        goto comm_failed;
    if (st.loaded) {
        float *sm = g ? GPU_PTR(gpu_state_m(g)) : opt.m, *sv = g ? GPU_PTR(gpu_state_v(g)) : opt.v;
        if (comm_broadcast(c, sm, opt.n * sizeof(float), 0) < 0 ||
            (opt.v && comm_broadcast(c, sv, opt.n * sizeof(float), 0) < 0))
            goto comm_failed;
        opt.t = st.optim_t;
    }
    steps_done = st.step;
    if (o.eval_only) {
        double acc, tloss;
        rc = evaluate(c, &m, g, &test, &acc, &tloss, err, sizeof err);
        if (rc < 0)
            goto coll_failed;
        if (rank == 0)
            printf("evaluation of %s on %d rank%s: test loss %.4f, accuracy %.2f%% (%.0f/%u)\n",
                   st.loaded ? path : "the initial parameters", world, world == 1 ? "" : "s",
                   tloss, 100.0 * acc, acc * test.n, test.n);
        if (comm_finish(c) < 0)
            goto comm_failed;
        status = 0;
        goto out;
    }

    size_t per = sampler_len(train.n, world);
    long long steps_per_epoch = (long long)((per + (size_t)o.batch - 1) / (size_t)o.batch);
    idx = malloc(per * sizeof *idx);
    labels = malloc((size_t)(o.batch > EVAL_BATCH ? o.batch : EVAL_BATCH));
    if (!idx || !labels) {
        fprintf(stderr, "cohort-worker: out of memory\n");
        goto out;
    }
    if (rank == 0) {
        printf("cohort-worker: %d rank%s over %s, model %s, %s lr %g, batch %d per rank, "
               "%u training and %u test items from %s, epochs %d, %lld steps per epoch\n",
               world, world == 1 ? "" : "s", comm_backend_name(cfg.backend), shape,
               optim_name(o.optim), (double)o.lr, o.batch, train.n, test.n, o.data_dir,
               o.epochs, steps_per_epoch);
        if (!o.checkpoint)
            printf("checkpoints off (%s)\n", getenv("WORKSPACE") ? "--no-checkpoint"
                                                                 : "no WORKSPACE set");
    }

    for (int epoch = (int)st.epoch_done + 1; epoch <= o.epochs; epoch++) {
        double t0 = now_s(), loss_sum = 0, acc, tloss, secs;
        long long samples = 0, step_in_epoch = 0, win_samples = 0;
        double win_t0 = t0, win_loss = 0, t_comm = 0, ta;
        int win_steps = 0;

        if (sampler_indices(idx, train.n, world, rank, o.seed, epoch, o.shuffle) < 0) {
            fprintf(stderr, "cohort-worker: out of memory for the sampler\n");
            goto out;
        }
        for (size_t off = 0; off < per; off += (size_t)o.batch) {
            int b = (int)(per - off < (size_t)o.batch ? per - off : (size_t)o.batch);
            float loss;
            gather(&m, &train, idx + off, b, labels);
            if (!g) {
                m.grads[m.nparams] = mlp_train_step(&m, labels, b);
            } else if (GPU(gpu_train_step(g, mlp_input(&m), labels, b, err, sizeof err)) < 0) {
                goto gpu_failed;
            }
            ta = now_s();
            if (comm_allreduce(c, g ? GPU_PTR(gpu_grads(g)) : m.grads, m.nparams + 1, COMM_AVG) < 0)
                goto comm_failed;
            t_comm += now_s() - ta;
            if (!g) {
                loss = m.grads[m.nparams];
                optim_step(&opt, m.params, m.grads);
            } else if (GPU(gpu_get(g, &loss, GPU_PTR(gpu_grads(g)) + m.nparams, sizeof loss, err,
                                   sizeof err)) < 0 ||
                       GPU(gpu_optim_step(g, &opt, err, sizeof err)) < 0) {
                goto gpu_failed;
            }
            steps_done++;
            step_in_epoch++;
            samples += (long long)b * world;
            win_samples += (long long)b * world;
            loss_sum += loss;
            win_loss += loss;
            win_steps++;
            if (rank == 0 && o.log_every > 0 && step_in_epoch % o.log_every == 0) {
                double t = now_s(), sps = win_samples / (t - win_t0);
                printf("epoch %d step %lld/%lld loss %.4f %.0f samples/s\n", epoch,
                       step_in_epoch, steps_per_epoch, win_loss / win_steps, sps);
                printf("COHORT_METRIC {\"epoch\":%d,\"step\":%lld,\"loss\":%.6f,"
                       "\"samples_per_s\":%.1f}\n", epoch, steps_done, win_loss / win_steps, sps);
                win_t0 = t;
                win_samples = 0;
                win_loss = 0;
                win_steps = 0;
            }
            if (o.max_steps && steps_done >= o.max_steps)
                break;
        }
        secs = now_s() - t0;
        rc = evaluate(c, &m, g, &test, &acc, &tloss, err, sizeof err);
        if (rc < 0)
            goto coll_failed;
        if (rank == 0) {
            double sps = samples / secs;
            printf("epoch %d done: train loss %.4f, test loss %.4f, accuracy %.2f%% (%.0f/%u), "
                   "%.0f samples/s (per step: %.3f ms, of which %.3f ms in allreduce)\n", epoch,
                   loss_sum / (double)step_in_epoch, tloss, 100.0 * acc, acc * test.n, test.n,
                   sps, 1e3 * secs / (double)step_in_epoch,
                   1e3 * t_comm / (double)step_in_epoch);
            printf("COHORT_METRIC {\"epoch\":%d,\"step\":%lld,\"loss\":%.6f,\"accuracy\":%.6f,"
                   "\"samples_per_s\":%.1f}\n", epoch, steps_done,
                   loss_sum / (double)step_in_epoch, acc, sps);
            if (g && o.checkpoint && GPU(gpu_to_host(g, &m, &opt, err, sizeof err)) < 0)
                goto gpu_failed;
            if (o.checkpoint) {
                if (ckpt_save(o.ckpt_dir, &m, &opt, epoch, steps_done, err, sizeof err) < 0) {
                    fprintf(stderr, "cohort-worker: %s\n", err);
                    goto out;
                }
                printf("checkpoint saved: epoch %d\n", epoch);
            }
        }
        if (o.max_steps && steps_done >= o.max_steps)
            break;
    }
    if (rank == 0 && o.dump_params && g && GPU(gpu_to_host(g, &m, &opt, err, sizeof err)) < 0)
        goto gpu_failed;
    if (rank == 0 && o.dump_params && dump(o.dump_params, &m) < 0)
        goto out;
    /* Nobody leaves while another rank may still need it. */
    if (comm_finish(c) < 0)
        goto comm_failed;
    if (rank == 0)
        printf("training finished: %lld steps\n", steps_done);
    status = 0;
    goto out;
coll_failed: /* rc from coll_*() or evaluate() */
    if (rc < -1)
        goto gpu_failed;
comm_failed:
    fprintf(stderr, "cohort-worker: %s\n", comm_errmsg(c));
    goto out;
gpu_failed:
    fprintf(stderr, "cohort-worker: rank %d: GPU: %s\n", rank, err);
out:
    free(idx);
    free(labels);
#ifdef COHORT_HAVE_GPU
    gpu_close(g);
#endif
    comm_destroy(c);
    optim_free(&opt);
    mlp_free(&m);
    data_free(&train);
    data_free(&test);
    return status;
}
