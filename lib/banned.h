/*
 * banned.h: string functions that write without a bound, made compile
 * errors in Cohort's C code (as git's banned.h does).  Every C file gets it
 * first (-include, from CMakeLists.txt); it includes the system headers that
 * declare them before it renames them, so their declarations stay intact.
 * Use snprintf, memcpy with a checked length, or util_buf instead.
 */
#ifndef COHORT_BANNED_H
#define COHORT_BANNED_H

#include <stdio.h>
#include <string.h>

#define COHORT_BANNED(func) sorry_##func##_is_banned_in_cohort_use_snprintf_or_memcpy

#undef strcpy
#define strcpy(dst, src) COHORT_BANNED(strcpy)
#undef strcat
#define strcat(dst, src) COHORT_BANNED(strcat)
#undef sprintf
#define sprintf(...) COHORT_BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) COHORT_BANNED(vsprintf)
#undef gets
#define gets(buf) COHORT_BANNED(gets)

/* Where the code has moved to lib/fmt.h, a bare snprintf, whose cut goes
 * unseen, does not compile either: fmt_whole or fmt_path where the text
 * must be whole, fmt_cut where a cut is meant (COHORT_FMT_STRICT, set per
 * target in CMakeLists.txt as each part moves). */
#ifdef COHORT_FMT_STRICT
#undef snprintf
#define snprintf(...) sorry_snprintf_is_banned_here_use_fmt_whole_or_fmt_cut
#endif

#endif
