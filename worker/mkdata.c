/*
 * mkdata.c: `cohort-worker mkdata DIR --train N --test M`: a learnable
 * synthetic data set in MNIST's IDX layout.  Each of the ten classes has a
 * template (a few Gaussian blobs on 28x28); an item is its class's template
 * shifted by up to two pixels, with Gaussian noise, clipped to bytes.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "worker/data.h"
#include "worker/rng.h"
#include "worker/train.h"

#define SIDE 28
#define NCLASS 10

static void templates(float t[NCLASS][SIDE * SIDE], struct rng *r)
{
    for (int c = 0; c < NCLASS; c++) {
        float mx = 0;
        memset(t[c], 0, sizeof t[c]);
        for (int b = 0; b < 4; b++) {
            double cy = 5 + rng_unit(r) * 18, cx = 5 + rng_unit(r) * 18;
            double s = 1.5 + rng_unit(r) * 2.5;
            for (int y = 0; y < SIDE; y++)
                for (int x = 0; x < SIDE; x++) {
                    double d2 = (y - cy) * (y - cy) + (x - cx) * (x - cx);
                    t[c][y * SIDE + x] += (float)exp(-d2 / (2 * s * s));
                }
        }
        for (int i = 0; i < SIDE * SIDE; i++)
            mx = t[c][i] > mx ? t[c][i] : mx;
        for (int i = 0; i < SIDE * SIDE; i++)
            t[c][i] = 230.0f * t[c][i] / mx;
    }
}

static int make(struct dataset *d, uint32_t n, float t[NCLASS][SIDE * SIDE], struct rng *r,
                double noise)
{
    d->n = n;
    d->rows = d->cols = SIDE;
    d->images = malloc((size_t)n * SIDE * SIDE);
    d->labels = malloc(n);
    if (!d->images || !d->labels)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        int c = (int)rng_below(r, NCLASS);
        int dy = (int)rng_below(r, 5) - 2, dx = (int)rng_below(r, 5) - 2;
        uint8_t *img = d->images + (size_t)i * SIDE * SIDE;
        d->labels[i] = (uint8_t)c;
        for (int y = 0; y < SIDE; y++)
            for (int x = 0; x < SIDE; x++) {
                int sy = y - dy, sx = x - dx;
                double v = (sy >= 0 && sy < SIDE && sx >= 0 && sx < SIDE)
                               ? t[c][sy * SIDE + sx] : 0.0;
                v += noise * rng_normal(r);
                img[y * SIDE + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : lround(v));
            }
    }
    return 0;
}

/* What mkdata is asked to write. */
struct mkdata_args {
    const char *dir;
    long long ntrain, ntest, seed;
    double noise;
    int gz;
};

/* One "--name value" option at argv[*i] into a (*i moves past the value):
 * 0, 1 when argv[*i] is no such option, or 2 said on stderr. */
static int mkdata_value(int argc, char **argv, int *i, struct mkdata_args *a)
{
    const char *o = argv[*i];
    long long *dst = !strcmp(o, "--train") ? &a->ntrain
                     : !strcmp(o, "--test") ? &a->ntest
                     : !strcmp(o, "--seed") ? &a->seed
                                            : NULL;
    char *end;
    if (!dst && strcmp(o, "--noise"))
        return 1;
    if (*i + 1 >= argc) {
        fprintf(stderr, "cohort-worker mkdata: %s needs a value\n", o);
        return 2;
    }
    errno = 0;
    if (dst) {
        *dst = strtoll(argv[++*i], &end, 10);
        if (errno || *end || *dst < 1 || *dst > DATA_MAX_ITEMS) {
            fprintf(stderr, "cohort-worker mkdata: %s must be from 1 to %u\n", o, DATA_MAX_ITEMS);
            return 2;
        }
        return 0;
    }
    a->noise = strtod(argv[++*i], &end);
    if (errno || *end || !(a->noise >= 0 && a->noise <= 1000)) {
        fprintf(stderr, "cohort-worker mkdata: --noise must be from 0 to 1000\n");
        return 2;
    }
    return 0;
}

/* The command line into a: 0, -1 when --help was answered, or 2 said. */
static int mkdata_args_read(int argc, char **argv, struct mkdata_args *a)
{
    *a = (struct mkdata_args){NULL, 60000, 10000, 7, 60, 0};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--gzip")) {
            a->gz = 1;
            continue;
        }
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            printf("usage: cohort-worker mkdata DIR [--train N] [--test M] [--seed S] "
                   "[--noise SIGMA] [--gzip]\n"
                   "  writes a learnable synthetic data set (10 classes, 28x28) as\n"
                   "  DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]\n");
            return -1;
        }
        int v = mkdata_value(argc, argv, &i, a);
        if (v == 0)
            continue;
        if (v == 2)
            return 2;
        if (o[0] == '-' || a->dir) {
            fprintf(stderr, "cohort-worker mkdata: unexpected argument '%s' (see --help)\n", o);
            return 2;
        }
        a->dir = o;
    }
    if (!a->dir) {
        fprintf(stderr, "cohort-worker mkdata: which directory? (see --help)\n");
        return 2;
    }
    return 0;
}

int train_mkdata_main(int argc, char **argv)
{
    static float t[NCLASS][SIDE * SIDE];
    struct dataset tr = { 0 }, te = { 0 };
    struct mkdata_args a;
    struct rng r;
    char err[512];
    int status = 1, rc = mkdata_args_read(argc, argv, &a);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (mkdir(a.dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "cohort-worker mkdata: %s: %s\n", a.dir, strerror(errno));
        return 1;
    }
    rng_seed(&r, (uint64_t)a.seed);
    templates(t, &r);
    if (make(&tr, (uint32_t)a.ntrain, t, &r, a.noise) < 0 ||
        make(&te, (uint32_t)a.ntest, t, &r, a.noise) < 0) {
        fprintf(stderr, "cohort-worker mkdata: out of memory\n");
        goto out;
    }
    if (data_write(a.dir, "train", &tr, a.gz, err, sizeof err) < 0 ||
        data_write(a.dir, "t10k", &te, a.gz, err, sizeof err) < 0) {
        fprintf(stderr, "cohort-worker mkdata: %s\n", err);
        goto out;
    }
    printf("wrote %lld training and %lld test items to %s\n", a.ntrain, a.ntest, a.dir);
    status = 0;
out:
    data_free(&tr);
    data_free(&te);
    return status;
}
