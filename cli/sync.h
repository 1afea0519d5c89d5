/*
 * sync: a local directory into a workspace or dataset (only what changed),
 * and a volume's files into a local directory.
 *
 * push walks DIR (regular files; symbolic links and other kinds are named
 * on stderr and left out; `.git` and what DIR/.cohortignore names are
 * skipped), lists the volume's files with their SHA-256 sums, and uploads
 * each file whose size, executable bit or sum differs, with mode 755 when
 * any of its x bits is set, else 644.  Files only the volume has stay.
 *
 * .cohortignore: one pattern a line, '#' comments, blank lines ignored;
 * a pattern without '/' matches a name at any depth, one with '/' matches
 * the path from DIR (a leading '/' only anchors), a trailing '/' matches
 * directories only, '!' takes a path back in; the last match wins.  The
 * patterns are fnmatch(3)'s ('*' does not cross '/').
 */
#ifndef COHORT_CLI_SYNC_H
#define COHORT_CLI_SYNC_H

#include <stdint.h>

#include "cli/cli.h"

typedef struct sync_stats {
    long sent, unchanged, left_out;
    int64_t bytes_sent;
} sync_stats;

/* Creates volume name of kind ("workspaces" or "datasets") unless it exists:
 * CLI_OK or an exit code (printed). */
int sync_ensure(cli *c, const char *kind, const char *name);
/* push as above: CLI_OK or an exit code (printed). */
int sync_push(cli *c, const char *kind, const char *name, const char *dir, sync_stats *st);
/* Every file of the volume into dir (made when missing), each written to a
 * temporary file and renamed, with its mode: CLI_OK or an exit code. */
int sync_pull(cli *c, const char *kind, const char *name, const char *dir, sync_stats *st);

#endif
