/*
 * data: MNIST-format data sets (IDX files) for cohort-worker: finding them
 * in a dataset directory (torchvision's MNIST/raw layout or flat files,
 * plain or gzip), reading them with every header and length checked, and
 * writing them (cohort-worker mkdata).  A dataset owns its arrays.
 */
#ifndef COHORT_DATA_H
#define COHORT_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DATA_MAX_ITEMS  10000000u
#define DATA_MAX_SIDE   1024u

struct dataset {
    uint32_t n;           /* items */
    uint32_t rows, cols;  /* pixels per item: rows * cols */
    uint8_t *images;      /* n * rows * cols */
    uint8_t *labels;      /* n */
};

/* Loads the training (train != 0) or test split found under dir.  Labels
 * must be below `classes`.  Returns 0, or -1 with a message naming the file
 * and what is wrong with it. */
int data_load(const char *dir, int train, int classes, struct dataset *out, char *err,
              size_t errlen);
/* Reads one pair of IDX files (plain or gzip). */
int data_load_files(const char *images, const char *labels, int classes, struct dataset *out,
                    char *err, size_t errlen);
void data_free(struct dataset *d);

/* Writes d as IDX files <dir>/<prefix>-images-idx3-ubyte and
 * <prefix>-labels-idx1-ubyte (".gz" appended and compressed when gz),
 * each through a temporary file and a rename. */
int data_write(const char *dir, const char *prefix, const struct dataset *d, int gz,
               char *err, size_t errlen);

#endif
