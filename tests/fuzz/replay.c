/*
 * replay: runs a fuzz target over files without libFuzzer, so that every
 * build (gcc, ASan+UBSan) replays the seed corpus as a regression test.
 *   fuzz_<name> FILE_OR_DIR...
 * Exits 0 when every input ran (a finding aborts first), 1 when an input
 * could not be read, 2 when none was given.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

#define REPLAY_MAX_INPUT (16u << 20)

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = -1;
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    buf = malloc(REPLAY_MAX_INPUT);
    if (buf) {
        len = fread(buf, 1, REPLAY_MAX_INPUT, f);
        if (!ferror(f)) {
            /* A copy of exactly len bytes: ASan sees a read past the input. */
            uint8_t *exact = malloc(len ? len : 1);
            if (exact) {
                memcpy(exact, buf, len);
                LLVMFuzzerTestOneInput(exact, len);
                free(exact);
                rc = 0;
            }
        }
    }
    if (rc < 0)
        fprintf(stderr, "replay: %s: cannot read\n", path);
    free(buf);
    fclose(f);
    return rc;
}

static int run_path(const char *path, int *count)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        (*count)++;
        return run_file(path);
    }
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort), rc = 0;
    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char sub[4096];
        if (names[i]->d_name[0] != '.' &&
            snprintf(sub, sizeof sub, "%s/%s", path, names[i]->d_name) < (int)sizeof sub &&
            run_path(sub, count) != 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    int count = 0, rc = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &count) != 0)
            rc = 1;
    printf("replay: %d inputs, %s\n", count, rc ? "some unreadable" : "all ran");
    return rc;
}
