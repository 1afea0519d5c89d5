/*
 * ckpt.c: checkpoint files (see ckpt.h).  Layout, host byte order (the
 * magic tells a foreign file): header, parameters, optimiser state, CRC-32.
 */
#include "worker/ckpt.h"
#include "lib/fmt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MAGIC "COHORTCK"
#define VERSION 1u
#define KEEP 2

struct header {
    char magic[8];
    uint32_t version;
    uint32_t nsizes;
    uint32_t sizes[MLP_MAX_LAYERS + 1];
    uint32_t optim;
    uint32_t epoch;
    int64_t step;
    int64_t optim_t;
    uint64_t nparams;
    uint64_t nstate;
};

/* zlib's crc32 over len bytes, in pieces its uInt length can hold. */
static uLong crc_more(uLong crc, const uint8_t *p, size_t len)
{
    while (len) {
        uInt piece = len > (1u << 30) ? 1u << 30 : (uInt)len;
        crc = crc32(crc, p, piece);
        p += piece;
        len -= piece;
    }
    return crc;
}

/* All len bytes of p written (out set) or read: 0, or -1 (an error, or the
 * end of the file before len bytes). */
static int io_all(int fd, uint8_t *p, size_t len, int out)
{
    while (len) {
        size_t piece = len > (1u << 30) ? 1u << 30 : len;
        ssize_t n = out ? write(fd, p, piece) : read(fd, p, piece);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t len, uLong *crc)
{
    *crc = crc_more(*crc, buf, len);
    return io_all(fd, (uint8_t *)buf, len, 1);
}

static int read_all(int fd, void *buf, size_t len, uLong *crc)
{
    if (io_all(fd, buf, len, 0) != 0)
        return -1;
    if (crc)
        *crc = crc_more(*crc, buf, len);
    return 0;
}

static int mkdirs(const char *dir)
{
    char tmp[4096];
    size_t len = strlen(dir);
    if (len >= sizeof tmp)
        return -1;
    memcpy(tmp, dir, len + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* Epoch numbers of the checkpoint files in dir, newest first. */
static int list(const char *dir, int *epochs, int max)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d)
        return 0;
    while ((e = readdir(d)) && n < max) {
        int ep;
        char tail[8];
        if (sscanf(e->d_name, "epoch-%d.ck%7s", &ep, tail) == 2 && !strcmp(tail, "pt") &&
            ep >= 0)
            epochs[n++] = ep;
    }
    closedir(d);
    for (int i = 1; i < n; i++)  /* insertion sort, descending */
        for (int j = i; j > 0 && epochs[j] > epochs[j - 1]; j--) {
            int t = epochs[j];
            epochs[j] = epochs[j - 1];
            epochs[j - 1] = t;
        }
    return n;
}

int ckpt_save(const char *dir, const struct mlp *m, const struct optim *o, int epoch,
              int64_t step, char *err, size_t errlen)
{
    struct header h;
    char path[4200], tmp[4300];
    uLong crc = crc32(0, NULL, 0);
    uint32_t c;
    int fd = -1, dfd, eps[256], n;

    memset(&h, 0, sizeof h);
    memcpy(h.magic, MAGIC, 8);
    h.version = VERSION;
    h.nsizes = (uint32_t)m->nlayers + 1;
    for (int i = 0; i <= m->nlayers; i++)
        h.sizes[i] = (uint32_t)m->sizes[i];
    h.optim = o->kind;
    h.epoch = (uint32_t)epoch;
    h.step = step;
    h.optim_t = o->t;
    h.nparams = m->nparams;
    h.nstate = optim_state_len(o);

    if (mkdirs(dir) < 0) {
        fmt_cut(err, errlen, "cannot create checkpoint directory %s: %s", dir, strerror(errno));
        return -1;
    }
    if (fmt_whole(path, sizeof path, "%s/epoch-%06d.ckpt", dir, epoch) != 0 ||
        fmt_whole(tmp, sizeof tmp, "%s.tmp", path) != 0) {
        fmt_cut(err, errlen, "checkpoint directory %.200s...: the path is too long", dir);
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write_all(fd, &h, sizeof h, &crc) < 0 ||
        write_all(fd, m->params, m->nparams * sizeof(float), &crc) < 0 ||
        write_all(fd, o->m, o->n * sizeof(float), &crc) < 0 ||
        (o->v && write_all(fd, o->v, o->n * sizeof(float), &crc) < 0))
        goto fail;
    c = (uint32_t)crc;
    if (write_all(fd, &c, sizeof c, &crc) < 0 || fsync(fd) < 0)
        goto fail;
    if (close(fd) < 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) < 0)
        goto fail;
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);  /* the rename itself is durable */
        close(dfd);
    }
    n = list(dir, eps, 256);
    for (int i = KEEP; i < n; i++) {
        if (fmt_whole(tmp, sizeof tmp, "%s/epoch-%06d.ckpt", dir, eps[i]) == 0)
            unlink(tmp);
    }
    return 0;
fail:
    fmt_cut(err, errlen, "cannot write checkpoint %s: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return -1;
}

/* 0 loaded, 1 damaged (skip it), -1 incompatible (err set). */
static int load_one(const char *path, struct mlp *m, struct optim *o, int *epoch, int64_t *step,
                    char *err, size_t errlen)
{
    struct header h;
    uLong crc = crc32(0, NULL, 0);
    uint32_t stored;
    char want[128], have[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC), ret = 1, same;

    if (fd < 0)
        return 1;
    if (read_all(fd, &h, sizeof h, &crc) < 0 || memcmp(h.magic, MAGIC, 8) ||
        h.version != VERSION || h.nsizes < 2 || h.nsizes > MLP_MAX_LAYERS + 1)
        goto out;
    same = h.nsizes == (uint32_t)m->nlayers + 1 && h.optim == o->kind &&
           h.nparams == m->nparams && h.nstate == optim_state_len(o);
    for (uint32_t i = 0; same && i < h.nsizes; i++)
        same = h.sizes[i] == (uint32_t)m->sizes[i];
    if (!same) {
        size_t u = 0;
        for (uint32_t i = 0; i < h.nsizes && u < sizeof have; i++) { /* a label */
            fmt_cut(have + u, sizeof have - u, i ? "-%u" : "%u", h.sizes[i]);
            u += strlen(have + u);
        }
        mlp_shape(m, want, sizeof want);
        fmt_cut(err, errlen, "checkpoint %s holds a %s model with %s; this run asks for %s "
                 "with %s (remove the checkpoints or run the same model)", path, have,
                 optim_name((enum optim_kind)h.optim), want, optim_name(o->kind));
        ret = -1;
        goto out;
    }
    if (read_all(fd, m->params, m->nparams * sizeof(float), &crc) < 0 ||
        read_all(fd, o->m, o->n * sizeof(float), &crc) < 0 ||
        (o->v && read_all(fd, o->v, o->n * sizeof(float), &crc) < 0) ||
        read_all(fd, &stored, sizeof stored, NULL) < 0 || stored != (uint32_t)crc)
        goto out;
    *epoch = (int)h.epoch;
    *step = h.step;
    o->t = h.optim_t;
    ret = 0;
out:
    close(fd);
    return ret;
}

int ckpt_load_latest(const char *dir, struct mlp *m, struct optim *o, int *epoch,
                     int64_t *step, char *path, size_t pathlen, char *err, size_t errlen)
{
    int eps[256], n = list(dir, eps, 256);
    for (int i = 0; i < n; i++) {
        int rc;
        if (fmt_whole(path, pathlen, "%s/epoch-%06d.ckpt", dir, eps[i]) != 0)
            continue;
        rc = load_one(path, m, o, epoch, step, err, errlen);
        if (rc == 0)
            return 1;
        if (rc < 0)
            return -1;
        fprintf(stderr, "cohort-worker: skipping damaged checkpoint %s\n", path);
    }
    return 0;  /* the caller re-initialises: a damaged file may have been half read */
}
