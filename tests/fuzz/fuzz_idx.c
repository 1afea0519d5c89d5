/*
 * fuzz_idx: cohort-worker's loader of IDX data sets, plain or gzip.  A
 * tenant's dataset is untrusted input to every worker that mounts it.  The
 * input is two files, images then labels, split at the offset its first
 * two bytes give; they are written to memory files (memfd) and loaded with
 * data_load_files, the function the trainer uses.  Checked: a load either
 * fails with a message or gives a dataset whose sizes match its header's
 * limits and whose labels are below the classes.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fuzz/fuzz.h"
#include "worker/data.h"

#define CLASSES 10

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static int memfile(const uint8_t *p, size_t n, char *path, size_t len)
{
    int fd = memfd_create("fuzz-idx", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (n && write(fd, p, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char images[64], labels[64], err[512] = "";
    struct dataset d;
    if (size < 2)
        return 0;
    size_t split = ((size_t)data[0] << 8 | data[1]), rest = size - 2;
    if (split > rest)
        split = rest;
    int fi = memfile(data + 2, split, images, sizeof images);
    int fl = memfile(data + 2 + split, rest - split, labels, sizeof labels);
    if (fi >= 0 && fl >= 0) {
        if (data_load_files(images, labels, CLASSES, &d, err, sizeof err) == 0) {
            fuzz_check(d.n >= 1 && d.n <= DATA_MAX_ITEMS && d.rows >= 1 &&
                           d.rows <= DATA_MAX_SIDE && d.cols >= 1 && d.cols <= DATA_MAX_SIDE,
                       "a dataset outside the limits");
            for (uint32_t i = 0; i < d.n; i++)
                fuzz_check(d.labels[i] < CLASSES, "a label past the classes");
            /* every pixel is there: touch the last one */
            volatile uint8_t last = d.images[(size_t)d.n * d.rows * d.cols - 1];
            (void)last;
            data_free(&d);
        } else {
            fuzz_check(err[0] != '\0', "a failed load without a message");
        }
    }
    if (fi >= 0)
        close(fi);
    if (fl >= 0)
        close(fl);
    return 0;
}
