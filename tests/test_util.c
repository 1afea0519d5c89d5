/*
 * util: path and name validation, tokens, hashing.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "storage/util.h"

Test(util, relpath_accepts_plain_relative_paths)
{
    static const char *const ok[] = {"a", "a/b", "train.py", "data/x.tar.gz", ".hidden",
                                     "a/..b", "...", NULL};
    for (int i = 0; ok[i]; i++)
        cr_expect(util_relpath_valid(ok[i], strlen(ok[i])), "%s refused", ok[i]);
}

Test(util, relpath_refuses_escapes_and_control_bytes)
{
    static const char *const bad[] = {"", "/etc/passwd", "..", "../x", "a/../b", "a/..",
                                      "./a", "a/./b", "a//b", "a/", "a\\b", "a\x01", "a\nb",
                                      "a\x7f", NULL};
    for (int i = 0; bad[i]; i++)
        cr_expect(!util_relpath_valid(bad[i], strlen(bad[i])), "'%s' accepted", bad[i]);
    cr_expect(!util_relpath_valid("a\0b", 3), "embedded NUL accepted");
    char longp[1100];
    memset(longp, 'a', sizeof longp);
    cr_expect(!util_relpath_valid(longp, sizeof longp));
}

Test(util, names)
{
    cr_expect(util_name_valid("a"));
    cr_expect(util_name_valid("mnist-v2.1_x"));
    cr_expect(!util_name_valid(""));
    cr_expect(!util_name_valid("-a"));
    cr_expect(!util_name_valid(".a"));
    cr_expect(!util_name_valid("A"));
    cr_expect(!util_name_valid("a/b"));
    char n[65];
    memset(n, 'a', 64);
    n[64] = '\0';
    cr_expect(!util_name_valid(n));
    n[63] = '\0';
    cr_expect(util_name_valid(n));
}

Test(util, tokens_are_random_and_well_formed)
{
    char a[UTIL_TOKEN_LEN + 1], b[UTIL_TOKEN_LEN + 1];
    cr_assert_eq(util_token_new(a), 0);
    cr_assert_eq(util_token_new(b), 0);
    cr_expect_eq(strlen(a), 68);
    cr_expect(!strncmp(a, "coh_", 4));
    cr_expect_str_neq(a, b);
}

Test(util, sha256_known_vector)
{
    uint8_t h[32];
    char hex[65];
    util_sha256("abc", 3, h);
    util_hex(h, 32, hex);
    cr_expect_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    cr_expect(util_ct_equal("abcd", "abcd", 4));
    cr_expect(!util_ct_equal("abcd", "abce", 4));
}

Test(util, rfc3339_matches_gmtime)
{
    static const long long cases[] = {0, 1, 999, 86399999, 951782400000LL /* 2000-02-29 */,
                                      1798675200123LL, 4102444799999LL, 253402300799999LL,
                                      -1, -86400000LL, -2208988800000LL};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char got[32], want[40];
        util_rfc3339(cases[i], got);
        long long ms = cases[i];
        time_t s = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
        struct tm tm;
        gmtime_r(&s, &tm);
        size_t n = strftime(want, sizeof want, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(want + n, sizeof want - n, ".%03dZ", (int)(ms - (long long)s * 1000));
        cr_expect_str_eq(got, want, "%lld", ms);
    }
}
