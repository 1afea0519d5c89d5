/*
 * fuzz: the entry points every fuzz target defines, as libFuzzer names
 * them.  Built with clang's -fsanitize=fuzzer (make fuzz) they are fuzzed;
 * built with replay.c (every build) they replay the seed corpus under
 * tests/fuzz/corpus as a regression test.
 */
#ifndef COHORT_FUZZ_H
#define COHORT_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Once, before the first input; returns 0. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
/* One input; returns 0.  A finding aborts (a sanitizer, or fuzz_check). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A property of the code under test that must hold: aborts with the
 * message when it does not, so the fuzzer keeps the input. */
#define fuzz_check(cond, msg)                                                                  \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_check failed at %s:%d: %s (%s)\n", __FILE__, __LINE__, msg,  \
                    #cond);                                                                    \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#endif
