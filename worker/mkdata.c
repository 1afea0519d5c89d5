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

int train_mkdata_main(int argc, char **argv)
{
    const char *dir = NULL;
    long long ntrain = 60000, ntest = 10000, seed = 7;
    double noise = 60;
    int gz = 0, status = 1;
    static float t[NCLASS][SIDE * SIDE];
    struct dataset tr = { 0 }, te = { 0 };
    struct rng r;
    char err[512];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long long *dst = NULL;
        if (!strcmp(a, "--gzip")) {
            gz = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: cohort-worker mkdata DIR [--train N] [--test M] [--seed S] "
                   "[--noise SIGMA] [--gzip]\n"
                   "  writes a learnable synthetic data set (10 classes, 28x28) as\n"
                   "  DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]\n");
            return 0;
        }
        if (!strcmp(a, "--train"))
            dst = &ntrain;
        else if (!strcmp(a, "--test"))
            dst = &ntest;
        else if (!strcmp(a, "--seed"))
            dst = &seed;
        if (dst || !strcmp(a, "--noise")) {
            char *end;
            if (i + 1 >= argc) {
                fprintf(stderr, "cohort-worker mkdata: %s needs a value\n", a);
                return 2;
            }
            errno = 0;
            if (dst) {
                *dst = strtoll(argv[++i], &end, 10);
                if (errno || *end || *dst < 1 || *dst > DATA_MAX_ITEMS) {
                    fprintf(stderr, "cohort-worker mkdata: %s must be from 1 to %u\n", a,
                            DATA_MAX_ITEMS);
                    return 2;
                }
            } else {
                noise = strtod(argv[++i], &end);
                if (errno || *end || !(noise >= 0 && noise <= 1000)) {
                    fprintf(stderr, "cohort-worker mkdata: --noise must be from 0 to 1000\n");
                    return 2;
                }
            }
            continue;
        }
        if (a[0] == '-' || dir) {
            fprintf(stderr, "cohort-worker mkdata: unexpected argument '%s' (see --help)\n", a);
            return 2;
        }
        dir = a;
    }
    if (!dir) {
        fprintf(stderr, "cohort-worker mkdata: which directory? (see --help)\n");
        return 2;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "cohort-worker mkdata: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    rng_seed(&r, (uint64_t)seed);
    templates(t, &r);
    if (make(&tr, (uint32_t)ntrain, t, &r, noise) < 0 || make(&te, (uint32_t)ntest, t, &r, noise) < 0) {
        fprintf(stderr, "cohort-worker mkdata: out of memory\n");
        goto out;
    }
    if (data_write(dir, "train", &tr, gz, err, sizeof err) < 0 ||
        data_write(dir, "t10k", &te, gz, err, sizeof err) < 0) {
        fprintf(stderr, "cohort-worker mkdata: %s\n", err);
        goto out;
    }
    printf("wrote %lld training and %lld test items to %s\n", ntrain, ntest, dir);
    status = 0;
out:
    data_free(&tr);
    data_free(&te);
    return status;
}
