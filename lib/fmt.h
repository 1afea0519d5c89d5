/*
 * fmt: formatting into fixed buffers, with what happens to text that does
 * not fit said by the name.  Owns nothing.
 *
 *   fmt_whole   a path, a key, a URL, a value: whole or nothing.  0, or -1
 *               when it does not fit (and then buf is "", so that a cut
 *               path is never used by mistake).  The result must be read.
 *   fmt_path    dir "/" name, the same way.
 *   fmt_cut     a message for a person (an error, a reason, a log line),
 *               or a value whose bound was checked where it came in (a
 *               column the API bounded): cut to fit, by design; it never
 *               fails.
 *
 * banned.h turns bare snprintf into a compile error in the code that has
 * moved to these (COHORT_FMT_STRICT), as git's banned.h does for strcpy.
 */
#ifndef COHORT_FMT_H
#define COHORT_FMT_H

#include <stddef.h>

int fmt_whole(char *buf, size_t n, const char *f, ...)
    __attribute__((format(printf, 3, 4), warn_unused_result));
int fmt_path(char *buf, size_t n, const char *dir, const char *name)
    __attribute__((warn_unused_result));
void fmt_cut(char *buf, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));

#endif
