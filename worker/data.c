/*
 * data.c: IDX files (see data.h).  zlib's gz* functions read plain and
 * gzip files alike, so one reader covers both.
 */
#include "worker/data.h"
#include "lib/fmt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_UBYTE 0x08

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads exactly len bytes; -1 with a message when the file ends early or
 * the gzip stream is damaged. */
static int read_exact(gzFile f, const char *path, void *buf, size_t len, const char *what,
                      char *err, size_t errlen)
{
    uint8_t *p = buf;
    size_t got = 0;
    while (got < len) {
        unsigned chunk = len - got > (1u << 30) ? 1u << 30 : (unsigned)(len - got);
        int n = gzread(f, p + got, chunk);
        if (n < 0) {
            int zerr;
            const char *m = gzerror(f, &zerr);
            fmt_cut(err, errlen, "%s: damaged file while reading %s: %s", path, what,
                     zerr == Z_ERRNO ? strerror(errno) : m);
            return -1;
        }
        if (n == 0) {
            fmt_cut(err, errlen, "%s: truncated: %s needs %zu bytes, the file has %zu", path,
                     what, len, got);
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

/* Reads exactly len bytes into a buffer it allocates (*out, the caller's to
 * free), growing it as the bytes arrive: a header that promises far more
 * than the file holds costs what the file holds, not what it promises. */
static int read_alloc(gzFile f, const char *path, uint8_t **out, size_t len, const char *what,
                      char *err, size_t errlen)
{
    size_t cap = len < ((size_t)1 << 20) ? len : (size_t)1 << 20, got = 0;
    uint8_t *buf = malloc(cap ? cap : 1);
    while (buf && got < len) {
        if (got == cap) {
            size_t ncap = cap > len / 2 ? len : cap * 2;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb)
                break;
            buf = nb;
            cap = ncap;
        }
        if (read_exact(f, path, buf + got, cap - got, what, err, errlen) < 0) {
            /* A short file: say what the header promised, not this chunk. */
            if (strstr(err, ": truncated: "))
                fmt_cut(err, errlen, "%s: truncated: %s needs %zu bytes, the file has fewer "
                         "than %zu", path, what, len, cap);
            free(buf);
            return -1;
        }
        got = cap;
    }
    if (!buf || got < len) {
        fmt_cut(err, errlen, "%s: out of memory for %s (%zu bytes)", path, what, len);
        free(buf);
        return -1;
    }
    *out = buf;
    return 0;
}

/* Opens an IDX file and checks its header: unsigned bytes, `dims`
 * dimensions.  dim[] receives them. */
static gzFile idx_open(const char *path, int dims, uint32_t *dim, char *err, size_t errlen)
{
    uint8_t h[4 + 4 * 3];
    gzFile f;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fmt_cut(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        fmt_cut(err, errlen, "%s: cannot open: out of memory", path);
        return NULL;
    }
    gzbuffer(f, 1 << 17);
    if (read_exact(f, path, h, 4 + 4 * (size_t)dims, "the IDX header", err, errlen) < 0)
        goto fail;
    if (h[0] != 0 || h[1] != 0 || h[2] != IDX_UBYTE || h[3] != dims) {
        fmt_cut(err, errlen,
                 "%s: not an IDX file of unsigned bytes with %d dimensions (magic %02x %02x "
                 "%02x %02x)", path, dims, h[0], h[1], h[2], h[3]);
        goto fail;
    }
    for (int i = 0; i < dims; i++)
        dim[i] = be32(h + 4 + 4 * i);
    return f;
fail:
    gzclose(f);
    return NULL;
}

int data_load_files(const char *images, const char *labels, int classes, struct dataset *out,
                    char *err, size_t errlen)
{
    uint32_t di[3], dl[1];
    gzFile fi = NULL, fl = NULL;
    size_t px;
    uint8_t extra;
    int ret = -1;

    memset(out, 0, sizeof *out);
    fi = idx_open(images, 3, di, err, errlen);
    if (!fi)
        goto out;
    fl = idx_open(labels, 1, dl, err, errlen);
    if (!fl)
        goto out;
    if (di[0] == 0 || di[0] > DATA_MAX_ITEMS || di[1] == 0 || di[1] > DATA_MAX_SIDE ||
        di[2] == 0 || di[2] > DATA_MAX_SIDE) {
        fmt_cut(err, errlen, "%s: %u images of %ux%u is outside the limits (1 to %u images, "
                 "sides 1 to %u)", images, di[0], di[1], di[2], DATA_MAX_ITEMS, DATA_MAX_SIDE);
        goto out;
    }
    if (dl[0] != di[0]) {
        fmt_cut(err, errlen, "%s has %u labels but %s has %u images", labels, dl[0], images,
                 di[0]);
        goto out;
    }
    px = (size_t)di[1] * di[2];
    if (read_alloc(fi, images, &out->images, (size_t)di[0] * px, "the pixels", err, errlen) < 0 ||
        read_alloc(fl, labels, &out->labels, di[0], "the labels", err, errlen) < 0)
        goto out;
    if (gzread(fi, &extra, 1) != 0 || gzread(fl, &extra, 1) != 0) {
        fmt_cut(err, errlen, "%s or %s: bytes after the last item (not an IDX file of the "
                 "size its header gives)", images, labels);
        goto out;
    }
    for (uint32_t i = 0; i < di[0]; i++) {
        if (out->labels[i] >= classes) {
            fmt_cut(err, errlen, "%s: label %u of item %u is not below the %d classes of the "
                     "model", labels, out->labels[i], i, classes);
            goto out;
        }
    }
    out->n = di[0];
    out->rows = di[1];
    out->cols = di[2];
    ret = 0;
out:
    if (fi)
        gzclose(fi);
    if (fl)
        gzclose(fl);
    if (ret < 0)
        data_free(out);
    return ret;
}

void data_free(struct dataset *d)
{
    free(d->images);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Looks for <dir>/<sub><stem><sep>idxN-ubyte[.gz] in every layout torchvision
 * and the MNIST site use. */
static int find(const char *dir, const char *stem, const char *kind, char *out, size_t len)
{
    static const char *const subs[] = { "", "raw/", "MNIST/raw/", "mnist/raw/", "mnist/" };
    static const char *const seps[] = { "-", "." };
    static const char *const exts[] = { "", ".gz" };
    for (size_t s = 0; s < sizeof subs / sizeof *subs; s++)
        for (size_t p = 0; p < 2; p++)
            for (size_t e = 0; e < 2; e++) {
                if (fmt_whole(out, len, "%s/%s%s%s%s-ubyte%s", dir, subs[s], stem, seps[p],
                              kind, exts[e]) == 0 &&
                    is_file(out))
                    return 0;
            }
    return -1;
}

int data_load(const char *dir, int train, int classes, struct dataset *out, char *err,
              size_t errlen)
{
    const char *stem = train ? "train" : "t10k";
    char img[4096], lbl[4096];
    if (find(dir, train ? "train-images" : "t10k-images", "idx3", img, sizeof img) < 0 ||
        find(dir, train ? "train-labels" : "t10k-labels", "idx1", lbl, sizeof lbl) < 0) {
        fmt_cut(err, errlen, "%s: no %s split in MNIST layout (looked for %s-images-idx3-ubyte "
                 "and %s-labels-idx1-ubyte, optionally .gz, flat or under MNIST/raw/)", dir,
                 train ? "training" : "test", stem, stem);
        return -1;
    }
    return data_load_files(img, lbl, classes, out, err, errlen);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);  p[3] = (uint8_t)v;
}

/* Writes header + payload to path through path.tmp, fsync and rename. */
static int write_idx(const char *path, const uint8_t *hdr, size_t hlen, const uint8_t *data,
                     size_t len, int gz, char *err, size_t errlen)
{
    char tmp[4200];
    int fd, ok;
    fd = fmt_whole(tmp, sizeof tmp, "%s.tmp", path) == 0
             ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
             : (errno = ENAMETOOLONG, -1);
    if (fd < 0) {
        fmt_cut(err, errlen, "%s: %s", tmp, strerror(errno));
        return -1;
    }
    if (gz) {
        int fd2 = dup(fd);
        gzFile f = fd2 >= 0 ? gzdopen(fd2, "wb6") : NULL;
        ok = f && gzwrite(f, hdr, (unsigned)hlen) == (int)hlen;
        for (size_t off = 0; ok && off < len; off += 1u << 24) {
            unsigned chunk = len - off > 1u << 24 ? 1u << 24 : (unsigned)(len - off);
            ok = gzwrite(f, data + off, chunk) == (int)chunk;
        }
        if (f)
            ok = gzclose(f) == Z_OK && ok;
        else if (fd2 >= 0)
            close(fd2);
    } else {
        ok = write(fd, hdr, hlen) == (ssize_t)hlen;
        for (size_t off = 0; ok && off < len;) {
            ssize_t n = write(fd, data + off, len - off);
            ok = n > 0;
            off += ok ? (size_t)n : 0;
        }
    }
    ok = ok && fsync(fd) == 0;
    ok = (close(fd) == 0) && ok;
    if (!ok || rename(tmp, path) < 0) {
        fmt_cut(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int data_write(const char *dir, const char *prefix, const struct dataset *d, int gz,
               char *err, size_t errlen)
{
    char path[4096];
    uint8_t h[16];
    const char *ext = gz ? ".gz" : "";

    h[0] = h[1] = 0;
    h[2] = IDX_UBYTE;
    h[3] = 3;
    put32(h + 4, d->n);
    put32(h + 8, d->rows);
    put32(h + 12, d->cols);
    if (fmt_whole(path, sizeof path, "%s/%s-images-idx3-ubyte%s", dir, prefix, ext) != 0 ||
        write_idx(path, h, 16, d->images, (size_t)d->n * d->rows * d->cols, gz, err, errlen) < 0)
        return path[0] ? -1 : (fmt_cut(err, errlen, "%.200s...: the path is too long", dir), -1);
    h[3] = 1;
    if (fmt_whole(path, sizeof path, "%s/%s-labels-idx1-ubyte%s", dir, prefix, ext) != 0) {
        fmt_cut(err, errlen, "%.200s...: the path is too long", dir);
        return -1;
    }
    return write_idx(path, h, 8, d->labels, d->n, gz, err, errlen);
}
