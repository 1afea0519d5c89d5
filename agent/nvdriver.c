/*
 * nvdriver: the host driver's user-space files for GPU containers (see
 * nvdriver.h).
 */
#include "agent/nvdriver.h"
#include "lib/fmt.h"

#include "agent/fileutil.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What CUDA programs load from the driver (the display, video and OpenGL
 * parts of the driver are left out: training needs none of them). */
static const char *const driver_libs[] = {
    "libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so", "libnvidia-gpucomp.so", "libnvidia-cfg.so", "libnvidia-opencl.so",
    "libnvidia-allocator.so", "libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so",
    "libnvidia-fatbinaryloader.so", "libnvidia-compiler.so", NULL};

static const char *const driver_bins[] = {"nvidia-smi", "nvidia-debugdump",
                                          "nvidia-cuda-mps-control", "nvidia-cuda-mps-server",
                                          NULL};

/* The tag ldconfig gives this machine's own libraries, or NULL to take all. */
#if defined(__x86_64__)
#define NATIVE_TAG "x86-64"
#elif defined(__aarch64__)
#define NATIVE_TAG "AArch64"
#else
#define NATIVE_TAG NULL
#endif

/* 1 when name is one of the driver's libraries: a listed name, alone or
 * followed by a version (".1", ".550.54.15"). */
static int is_driver_lib(const char *name, size_t len)
{
    for (int i = 0; driver_libs[i]; i++) {
        size_t k = strlen(driver_libs[i]);
        if (len >= k && !strncmp(name, driver_libs[i], k) && (len == k || name[k] == '.'))
            return 1;
    }
    return 0;
}

static int has_name(const cJSON *list, const char *name, size_t len)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, list)
    {
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
        if (n && strlen(n) == len && !strncmp(n, name, len))
            return 1;
    }
    return 0;
}

static int add_file(cJSON *list, const char *name, size_t nlen, const char *path, size_t plen)
{
    char nbuf[256], pbuf[PATH_MAX];
    if (nlen >= sizeof nbuf || plen >= sizeof pbuf)
        return 0; /* no driver file has such a name: not one of ours */
    memcpy(nbuf, name, nlen);
    nbuf[nlen] = '\0';
    memcpy(pbuf, path, plen);
    pbuf[plen] = '\0';
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "name", nbuf) ||
        !cJSON_AddStringToObject(o, "path", pbuf) || !cJSON_AddItemToArray(list, o)) {
        cJSON_Delete(o);
        return -1;
    }
    return 0;
}

/* One line of `ldconfig -p`: "\tNAME (TAGS) => PATH". */
static int parse_line(cJSON *list, const char *line, size_t len)
{
    const char *end = line + len, *p = line;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    const char *name = p;
    while (p < end && *p != ' ')
        p++;
    size_t nlen = (size_t)(p - name);
    const char *open = memchr(p, '(', (size_t)(end - p));
    const char *close = open ? memchr(open, ')', (size_t)(end - open)) : NULL;
    const char *arrow = close ? strstr(close, "=> ") : NULL;
    if (!nlen || !arrow || arrow >= end || !is_driver_lib(name, nlen) || has_name(list, name, nlen))
        return 0;
    if (NATIVE_TAG) {
        size_t tl = strlen(NATIVE_TAG);
        int native = 0;
        for (const char *t = open; t + tl <= close; t++)
            native |= !strncmp(t, NATIVE_TAG, tl);
        if (!native)
            return 0;
    }
    const char *path = arrow + 3;
    return path[0] == '/' ? add_file(list, name, nlen, path, (size_t)(end - path)) : 0;
}

cJSON *nvd_parse_ldconfig(const char *text)
{
    cJSON *list = cJSON_CreateArray();
    for (const char *p = text; list && p && *p;) {
        size_t len = strcspn(p, "\n");
        if (parse_line(list, p, len) != 0) {
            cJSON_Delete(list);
            return NULL;
        }
        p += len + (p[len] == '\n');
    }
    return list;
}

cJSON *nvd_find(char *err, size_t errlen)
{
    cJSON *out = cJSON_CreateObject(), *libs = NULL, *bins = NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    FILE *p = popen("ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null", "r");
    if (!out || !p) {
        fmt_cut(err, errlen, "cannot run ldconfig -p: %s", strerror(errno));
        goto fail;
    }
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *n = realloc(text, cap = cap ? cap * 2 : 65536);
            if (!n)
                goto oom;
            text = n;
        }
        size_t got = fread(text + len, 1, cap - len - 1, p);
        len += got;
        if (got == 0)
            break;
    }
    text[len] = '\0';
    pclose(p);
    p = NULL;
    libs = nvd_parse_ldconfig(text);
    if (!libs || !cJSON_AddItemToObject(out, "libs", libs))
        goto oom;
    bins = cJSON_AddArrayToObject(out, "bins");
    for (int i = 0; bins && driver_bins[i]; i++) {
        char path[PATH_MAX];
        if (fu_find_program(driver_bins[i], path, sizeof path) == 0 &&
            add_file(bins, driver_bins[i], strlen(driver_bins[i]), path, strlen(path)) != 0)
            goto oom;
    }
    if (!bins)
        goto oom;
    free(text);
    return out;
oom:
    cJSON_Delete(libs && !cJSON_GetObjectItem(out, "libs") ? libs : NULL);
    fmt_cut(err, errlen, "out of memory listing the GPU driver's files");
fail:
    if (p)
        pclose(p);
    free(text);
    cJSON_Delete(out);
    return NULL;
}
