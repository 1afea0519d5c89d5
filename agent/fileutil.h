/*
 * fileutil: the small files the agent, its shims and the cgroup code read
 * (a pid, a status line, a cgroup's counters), read whole in one call.
 */
#ifndef COHORT_AGENT_FILEUTIL_H
#define COHORT_AGENT_FILEUTIL_H

#include <stddef.h>

/* The longest data dir (and image cache) path the agent takes: every path
 * it makes under them, in buffers of 4,200 bytes or more, then fits. */
#define AGENT_DIR_MAX 3800

/* Up to n-1 bytes of path into buf, NUL-terminated: 0, or -1 with errno. */
int fu_read(const char *path, char *buf, size_t n);

/* The same for dir/name (a path too long for the buffer fails: ENAMETOOLONG). */
int fu_read_in(const char *dir, const char *name, char *buf, size_t n);

/* The first prog on $PATH (or, without one, the usual system directories)
 * that is executable, into out: 0, or -1. */
int fu_find_program(const char *prog, char *out, size_t n);

#endif
