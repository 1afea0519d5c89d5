/*
 * util: path and name validation, tokens, hashing.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "storage/store_bill.h"
#include "lib/launch_spec.h"
#include "lib/util.h"

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

Test(util, dates_parse_strictly_and_agree_with_timegm)
{
    int64_t ms;
    cr_assert_eq(util_parse_time("2026-11-22", &ms), 0);
    struct tm tm = {.tm_year = 126, .tm_mon = 10, .tm_mday = 22};
    cr_expect_eq(ms, (int64_t)timegm(&tm) * 1000);
    cr_assert_eq(util_parse_time("2024-02-29T23:59:58.250Z", &ms), 0);
    struct tm leap = {.tm_year = 124, .tm_mon = 1, .tm_mday = 29, .tm_hour = 23, .tm_min = 59,
                      .tm_sec = 58};
    cr_expect_eq(ms, (int64_t)timegm(&leap) * 1000 + 250);
    static const char *const bad[] = {"2026-02-29", "2026-13-01", "2026-1-01", "1969-12-31",
                                      "2026-11-22T24:00:00Z", "2026-11-22T10:00:00", "yesterday",
                                      "2026-11-22T10:00:00+01:00", "2026-11-22 ", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(util_parse_time(bad[i], &ms), -1, "accepted '%s'", bad[i]);
    int64_t from, to;
    cr_assert_eq(util_parse_month("2024-12", &from, &to), 0);
    cr_expect_eq(to - from, 31LL * 86400000);
    cr_assert_eq(util_parse_month("2024-02", &from, &to), 0);
    cr_expect_eq(to - from, 29LL * 86400000);
    cr_expect_eq(util_parse_month("2024-00", &from, &to), -1);
    int64_t s, n;
    util_month_bounds(from + 12345678, &s, &n);
    cr_expect_eq(s, from);
    cr_expect_eq(n, to);
}

Test(util, billing_rules_round_seconds_up_and_amounts_half_up)
{
    cr_expect_eq(store_bill_seconds(1000, 1000, 0), 0);
    cr_expect_eq(store_bill_seconds(1000, 1001, 0), 1); /* a started second is billed */
    cr_expect_eq(store_bill_seconds(1000, 3000, 0), 2);
    cr_expect_eq(store_bill_seconds(1000, 3001, 0), 3);
    cr_expect_eq(store_bill_seconds(1000, 100000, 5), 5); /* never past max_runtime_seconds */
    cr_expect_eq(store_bill_seconds(0, 5000, 0), 0);      /* never started */
    cr_expect_eq(store_bill_amount(1, 3600), 1);
    cr_expect_eq(store_bill_amount(1800, 1), 1);  /* 0.5 rounds up */
    cr_expect_eq(store_bill_amount(1799, 1), 0);  /* 0.4997 rounds down */
    cr_expect_eq(store_bill_amount(5400, 5), 8);  /* 7.5 */
    cr_expect_eq(store_bill_amount(10, 0), 0);
    cr_expect_eq(store_bill_estimate(5, 4, 5400), 32); /* per rank, then times the ranks */
    cr_expect_eq(store_bill_estimate(2000000000LL, 10000, 30LL * 86400), -1);
}

/* ---- the access log's writer (server/alog.c) ---- */

#include <pthread.h>
#include <unistd.h>

#include "server/alog.h"

struct putter {
    alog *a;
    int id;
};

static void *put_lines(void *arg)
{
    struct putter *p = arg;
    char line[64];
    for (int i = 0; i < 20000; i++) {
        int n = snprintf(line, sizeof line, "thread %d line %d end\n", p->id, i);
        alog_put(p->a, line, (size_t)n);
    }
    return NULL;
}

/* Four threads put 20,000 lines each through a buffer far smaller than
 * them: every line arrives whole, once, in each thread's order. */
Test(alog, every_line_arrives_whole_and_in_order)
{
    char path[] = "/tmp/cohort-alog-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    FILE *f = fdopen(fd, "w");
    char err[128];
    alog *a = alog_open(f, 4096, err, sizeof err);
    cr_assert_not_null(a, "%s", err);
    pthread_t t[4];
    struct putter p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = (struct putter){a, i};
        cr_assert_eq(pthread_create(&t[i], NULL, put_lines, &p[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    alog_close(a);
    FILE *in = fopen(path, "r");
    cr_assert_not_null(in);
    int next[4] = {0}, lines = 0, id, n;
    char line[128], end[8];
    while (fgets(line, sizeof line, in)) {
        cr_assert_eq(sscanf(line, "thread %d line %d %7s", &id, &n, end), 3, "torn: %s", line);
        cr_assert_str_eq(end, "end");
        cr_assert(id >= 0 && id < 4);
        cr_assert_eq(n, next[id], "thread %d: line %d after %d", id, n, next[id] - 1);
        next[id]++;
        lines++;
    }
    fclose(in);
    unlink(path);
    cr_expect_eq(lines, 80000);
}

/* ---- image references and container configs (agent/oci.c) ---- */

#include <cjson/cJSON.h>

#include "agent/oci.h"

Test(util, image_references_are_strict)
{
    static const char *const good[] = {
        "127.0.0.1:5000/cohort/pytorch:bookworm", "registry.example.com/a/b/c:1.2-rc_3",
        "localhost:5000/x", "h/x@sha256:" "0123456789abcdef0123456789abcdef"
                            "0123456789abcdef0123456789abcdef",
        "h/a.b-c__d:Tag_1", NULL};
    static const char *const bad[] = {
        "", "x", "-h/x", "h/-x", "h/X:1", "h/x:", "h/x:-1", "h//x", "h/x/", "h/../x", "h/x y",
        "h/x:1@sha256:00", "h/x@sha256:" "0123456789ABCDEF0123456789abcdef"
                           "0123456789abcdef0123456789abcdef",
        "h/x;rm -rf /", "h/x\n", NULL};
    for (int i = 0; good[i]; i++)
        cr_expect(util_image_ref_valid(good[i]), "refused %s", good[i]);
    for (int i = 0; bad[i]; i++)
        cr_expect(!util_image_ref_valid(bad[i]), "accepted '%s'", bad[i]);
    char longref[600];
    memset(longref, 'a', sizeof longref);
    memcpy(longref, "h/", 2);
    longref[sizeof longref - 1] = '\0';
    cr_expect(!util_image_ref_valid(longref), "no bound on the length");
    /* a digest alone: one check for cohortd, the agent and the references */
    cr_expect(util_digest_valid("sha256:0123456789abcdef0123456789abcdef"
                                "0123456789abcdef0123456789abcdef"));
    static const char *const bad_digests[] = {
        "", "sha256:", "sha512:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeF",
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n", NULL};
    for (int i = 0; bad_digests[i]; i++)
        cr_expect(!util_digest_valid(bad_digests[i]), "accepted digest '%s'", bad_digests[i]);
}

/* The first rule in rules naming syscall, or NULL. */
static const cJSON *rule_for(const cJSON *rules, const char *syscall, const char *action)
{
    const cJSON *r, *n;
    cJSON_ArrayForEach(r, rules)
    {
        cJSON_ArrayForEach(n, cJSON_GetObjectItem(r, "names"))
        {
            if (!strcmp(n->valuestring, syscall) &&
                (!action || !strcmp(cJSON_GetObjectItem(r, "action")->valuestring, action)))
                return r;
        }
    }
    return NULL;
}

Test(oci, seccomp_rules_follow_the_capabilities_and_arch_and_forbid_user_namespaces)
{
    const char *profile =
        "{\"defaultAction\":\"SCMP_ACT_ERRNO\",\"defaultErrnoRet\":38,"
        "\"archMap\":[{\"architecture\":\"SCMP_ARCH_X86_64\",\"subArchitectures\":[\"SCMP_ARCH_X86\"]},"
        "{\"architecture\":\"SCMP_ARCH_AARCH64\",\"subArchitectures\":[]}],"
        "\"syscalls\":["
        "{\"names\":[\"read\",\"clone\",\"unshare\"],\"action\":\"SCMP_ACT_ALLOW\"},"
        "{\"names\":[\"mount\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"caps\":[\"CAP_SYS_ADMIN\"]}},"
        "{\"names\":[\"umount2\"],\"action\":\"SCMP_ACT_ERRNO\",\"errnoRet\":1,"
        "\"excludes\":{\"caps\":[\"CAP_SYS_ADMIN\"]}},"
        "{\"names\":[\"arch_prctl\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"arches\":[\"amd64\"]}},"
        "{\"names\":[\"arm_only\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"arches\":[\"arm64\"]}},"
        "{\"names\":[\"kill\"],\"action\":\"SCMP_ACT_ALLOW\",\"includes\":{\"caps\":[\"CAP_KILL\"]}}]}";
    char err[256];
    cJSON *in = cJSON_Parse(profile);
    cJSON *out = oci_seccomp_convert(in, err, sizeof err);
    cr_assert_not_null(out, "%s", err);
    const cJSON *rules = cJSON_GetObjectItem(out, "syscalls");
    cr_expect_not_null(rule_for(rules, "read", "SCMP_ACT_ALLOW"));
    cr_expect_null(rule_for(rules, "mount", NULL), "a CAP_SYS_ADMIN rule was kept");
    cr_expect_not_null(rule_for(rules, "umount2", "SCMP_ACT_ERRNO"));
    cr_expect_not_null(rule_for(rules, "kill", "SCMP_ACT_ALLOW"), "CAP_KILL is given");
#if defined(__x86_64__)
    cr_expect_not_null(rule_for(rules, "arch_prctl", NULL));
    cr_expect_null(rule_for(rules, "arm_only", NULL));
    cr_expect_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(out, "architectures"), 0)->valuestring,
                     "SCMP_ARCH_X86_64");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(out, "architectures")), 1,
                 "32-bit system calls are allowed");
#endif
    /* clone and unshare: allowed only without CLONE_NEWUSER, EPERM with it */
    for (const char *const *sc = (const char *const[]){"clone", "unshare", NULL}; *sc; sc++) {
        const cJSON *allow = rule_for(rules, *sc, "SCMP_ACT_ALLOW");
        const cJSON *deny = rule_for(rules, *sc, "SCMP_ACT_ERRNO");
        cr_assert_not_null(allow, "%s", *sc);
        cr_assert_not_null(deny, "%s", *sc);
        const cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItem(allow, "args"), 0);
        const cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(deny, "args"), 0);
        cr_assert_not_null(a, "%s: the allow rule has no condition", *sc);
        cr_expect_eq(cJSON_GetObjectItem(a, "value")->valuedouble, 0x10000000);
        cr_expect_eq(cJSON_GetObjectItem(a, "valueTwo")->valuedouble, 0);
        cr_expect_eq(cJSON_GetObjectItem(b, "valueTwo")->valuedouble, 0x10000000);
        cr_expect_eq(cJSON_GetObjectItem(deny, "errnoRet")->valuedouble, 1);
    }
    cr_expect_not_null(rule_for(rules, "clone3", "SCMP_ACT_ERRNO"));
    cJSON_Delete(in);
    cJSON_Delete(out);
    cJSON *not_a_profile = cJSON_Parse("{\"x\":1}");
    cr_expect_null(oci_seccomp_convert(not_a_profile, err, sizeof err));
    cJSON_Delete(not_a_profile);
}

/* A worker's container as the shim describes it, without binds. */
static oci_spec test_spec(char **argv, char **env)
{
    return (oci_spec){.rootfs = "/cache/abc/rootfs", .init = "/cache/.cohort-init",
                      .init_at = "/cohort/.init", .mount_root = "/cohort", .argv = argv,
                      .env = env, .cwd = "/cohort/workspace", .hostname = "node1",
                      .uid_base = 268500992, .shm_mb = 64};
}

Test(oci, a_container_config_maps_root_away_and_keeps_what_it_must_read_only)
{
    char *argv[] = {"/cohort/workspace/train.sh", "--local_rank=0", NULL};
    char *env[] = {"RANK=0", NULL};
    oci_bind binds[] = {{"/data/ws", "/cohort/workspace", 0}, {"/data/ds", "/cohort/datasets/d", 1}};
    oci_spec s = test_spec(argv, env);
    s.binds = binds;
    s.nbinds = 2;
    s.shm_mb = 1024;
    char err[128];
    char *text = oci_config(&s, err, sizeof err);
    cr_assert_not_null(text, "%s", err);
    cJSON *c = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(c);
    const cJSON *l = cJSON_GetObjectItem(c, "linux"), *p = cJSON_GetObjectItem(c, "process");
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(l, "uidMappings"), 0);
    cr_expect_eq(cJSON_GetObjectItem(m, "containerID")->valuedouble, 0);
    cr_expect_eq(cJSON_GetObjectItem(m, "hostID")->valuedouble, 268500992);
    cr_expect_eq(cJSON_GetObjectItem(m, "size")->valuedouble, 65536);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "root"), "readonly")));
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(p, "noNewPrivileges")));
    char *caps = cJSON_PrintUnformatted(cJSON_GetObjectItem(p, "capabilities"));
    cr_expect_null(strstr(caps, "SYS_ADMIN"), "%s", caps);
    cr_expect_null(strstr(caps, "NET_ADMIN"), "%s", caps);
    cr_expect_null(strstr(caps, "SYS_PTRACE"), "%s", caps);
    free(caps);
    char *ns = cJSON_PrintUnformatted(cJSON_GetObjectItem(l, "namespaces"));
    for (const char *const *k = (const char *const[]){"pid", "ipc", "uts", "mount", "user", NULL};
         *k; k++) {
        char want[32];
        snprintf(want, sizeof want, "\"%s\"", *k);
        cr_expect_not_null(strstr(ns, want), "no %s namespace: %s", *k, ns);
    }
    cr_expect_null(strstr(ns, "network"), "the host network is meant: %s", ns);
    free(ns);
    /* init first, the program after it; the dataset read-only, both idmapped */
    cr_expect_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(p, "args"), 0)->valuestring,
                     "/cohort/.init");
    char *mounts = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "mounts"));
    cr_expect_not_null(strstr(mounts, "\"destination\":\"/cohort/datasets/d\",\"type\":\"bind\","
                                      "\"source\":\"/data/ds\",\"options\":[\"rbind\",\"ro\""),
                       "%s", mounts);
    cr_expect_not_null(strstr(mounts, "\"source\":\"/data/ws\",\"options\":[\"rbind\",\"rw\",\"nosuid\","
                                      "\"nodev\",\"idmap\"]"),
                       "%s", mounts);
    cr_expect_not_null(strstr(mounts, "size=1024m"), "%s", mounts);
    free(mounts);
    cJSON_Delete(c);
}

Test(util, utf8_is_checked_as_rfc_3629_defines_it)
{
    static const char *const good[] = {"", "plain ascii", "gr\xc3\xbc\xc3\x9f", "\xe2\x82\xac",
                                       "\xf0\x9f\x9a\x80", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf",
                                       "\xed\x9f\xbf", "\xee\x80\x80", NULL};
    static const struct {
        const char *s;
        size_t at;
    } bad[] = {{"\xff\xfe", 0},       {"ab\xc0\xaf", 2},     {"\xe0\x80\xaf", 0},
               {"\xed\xa0\x80", 0},   {"x\xed\xbf\xbf", 1}, {"\xe2\x82", 0},
               {"a\x80z", 1},         {"\xf4\x90\x80\x80", 0}, {"\xf0\x8f\xbf\xbf", 0},
               {"\xc3", 0},           {"\xc3(", 0},         {"ok\xf5\x80\x80\x80", 2}};
    for (int i = 0; good[i]; i++)
        cr_expect_eq(util_utf8_invalid_at(good[i], strlen(good[i])), strlen(good[i]),
                     "valid #%d refused", i);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(util_utf8_invalid_at(bad[i].s, strlen(bad[i].s)), bad[i].at,
                     "invalid #%zu: want offset %zu", i, bad[i].at);
    cr_expect_eq(util_relpath_valid("d\xc3\xa9j\xc3\xa0/vu.py", 12), 1);
    cr_expect_eq(util_relpath_valid("bad\xff.py", 7), 0);
}

Test(util, i64s_grows_past_any_fixed_size_and_keeps_order)
{
    util_i64s a = {0};
    for (int64_t i = 0; i < 100000; i++)
        cr_assert_eq(util_i64s_push(&a, i * 3), 0);
    cr_expect_eq(a.n, 100000);
    cr_expect_geq(a.cap, a.n);
    int ok = 1;
    for (size_t i = 0; i < a.n; i++)
        ok &= a.v[i] == (int64_t)i * 3;
    cr_expect(ok, "values out of place");
    free(a.v);
}

/* The host GPU driver's files, as the agent lists them from `ldconfig -p`
 * and binds them into GPU containers. */
#include "agent/nvdriver.h"

static const char *driver_path(const cJSON *list, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, list)
    {
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "name")), name))
            return cJSON_GetStringValue(cJSON_GetObjectItem(e, "path"));
    }
    return NULL;
}

Test(nvdriver, the_driver_libraries_of_this_architecture_and_nothing_else)
{
    const char *text =
        "1523 libs found in cache `/etc/ld.so.cache'\n"
        "\tlibnvidia-ml.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-ml.so.1\n"
        "\tlibnvidia-glcore.so.550.54.15 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-glcore.so.550.54.15\n"
        "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12\n"
        "\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1\n"
        "\tlibcuda.so.1 (libc6) => /lib/i386-linux-gnu/libcuda.so.1\n"
        "\tlibcuda.so.1 (libc6,x86-64) => /opt/old/libcuda.so.1\n"
        "\tlibcuda.so (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so\n"
        "\tlibcudadebugger.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcudadebugger.so.1\n"
        "\tlibnvidia-ptxjitcompiler.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1\n"
        "\tlibcuda.sox (libc6,x86-64) => /x/libcuda.sox\n"
        "\tlibnvidia-cfg.so.1 (libc6,x86-64) => relative/libnvidia-cfg.so.1\n"
        "garbage without the arrow\n"
        "\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n";
    cJSON *libs = nvd_parse_ldconfig(text);
    cr_assert_not_null(libs);
    char *all = cJSON_PrintUnformatted(libs);
#if defined(__x86_64__)
    cr_expect_eq(cJSON_GetArraySize(libs), 5, "%s", all);
    cr_expect_str_eq(driver_path(libs, "libcuda.so.1"), "/lib/x86_64-linux-gnu/libcuda.so.1",
                     "the linker's first, of this architecture: %s", all);
    cr_expect_not_null(driver_path(libs, "libcuda.so"), "%s", all);
    cr_expect_not_null(driver_path(libs, "libnvidia-ml.so.1"), "%s", all);
    cr_expect_not_null(driver_path(libs, "libcudadebugger.so.1"), "%s", all);
    cr_expect_not_null(driver_path(libs, "libnvidia-ptxjitcompiler.so.1"), "%s", all);
#endif
    cr_expect_null(driver_path(libs, "libcudart.so.12"), "CUDA's runtime is the image's: %s", all);
    cr_expect_null(driver_path(libs, "libnvidia-glcore.so.550.54.15"), "no OpenGL: %s", all);
    cr_expect_null(driver_path(libs, "libcuda.sox"), "%s", all);
    cr_expect_null(driver_path(libs, "libnvidia-cfg.so.1"), "a relative path: %s", all);
    cr_expect_null(driver_path(libs, "libc.so.6"), "%s", all);
    free(all);
    cJSON_Delete(libs);
    libs = nvd_parse_ldconfig("");
    cr_assert_not_null(libs);
    cr_expect_eq(cJSON_GetArraySize(libs), 0);
    cJSON_Delete(libs);
}

/* On this machine: whatever the driver is, the listing works and holds
 * only absolute paths that exist. */
Test(nvdriver, this_nodes_listing_names_existing_files)
{
    char err[256] = "";
    cJSON *d = nvd_find(err, sizeof err);
    cr_assert_not_null(d, "%s", err);
    static const char *const kinds[] = {"libs", "bins"};
    for (int k = 0; k < 2; k++) {
        const cJSON *list = cJSON_GetObjectItem(d, kinds[k]), *e;
        cr_assert(cJSON_IsArray(list), "%s", kinds[k]);
        cJSON_ArrayForEach(e, list)
        {
            const char *path = cJSON_GetStringValue(cJSON_GetObjectItem(e, "path"));
            cr_expect(path && path[0] == '/' && access(path, R_OK) == 0, "%s", path);
        }
    }
    cJSON_Delete(d);
}

Test(oci, the_drivers_files_are_bound_read_only_and_not_idmapped)
{
    char *argv[] = {"/cohort/workspace/train.py", NULL};
    char *env[] = {"LD_LIBRARY_PATH=/cohort/.nvidia/lib", NULL};
    oci_bind files[] = {{"/lib/x86_64-linux-gnu/libcuda.so.1", "/cohort/.nvidia/lib/libcuda.so.1", 1},
                        {"/usr/bin/nvidia-smi", "/cohort/.nvidia/bin/nvidia-smi", 1}};
    oci_spec s = test_spec(argv, env);
    s.files = files;
    s.nfiles = 2;
    char err[128];
    char *text = oci_config(&s, err, sizeof err);
    cr_assert_not_null(text, "%s", err);
    cr_expect_not_null(strstr(text, "{\"destination\":\"/cohort/.nvidia/lib/libcuda.so.1\","
                                    "\"type\":\"bind\",\"source\":\"/lib/x86_64-linux-gnu/"
                                    "libcuda.so.1\",\"options\":[\"bind\",\"ro\",\"nosuid\","
                                    "\"nodev\"]}"),
                       "%s", text);
    cr_expect_not_null(strstr(text, "\"destination\":\"/cohort/.nvidia/bin/nvidia-smi\""), "%s",
                       text);
    free(text);
}

/* ---- shim_req: what does not fit is refused, never cut ---- */

#include <stdlib.h>

#include "agent/shim_req.h"

/* A launch request of a host-process worker with nargs arguments, nhide
 * paths to hide and nenv variables: parsed into r, its result returned. */
static int parse_sized(shim_req *r, int nargs, int nhide, int nenv, char *err, size_t errlen)
{
    cJSON *req = cJSON_CreateObject(), *spec = cJSON_AddObjectToObject(req, "spec");
    cJSON_AddStringToObject(req, "dir", "/tmp/cohort-w1");
    cJSON_AddStringToObject(spec, "framework", "native");
    cJSON_AddStringToObject(spec, "program", "run.sh");
    cJSON_AddStringToObject(spec, "mount_root", "/cohort");
    cJSON_AddStringToObject(spec, "workspace", "/tmp/ws");
    cJSON *args = cJSON_AddArrayToObject(spec, "args"), *hide = cJSON_AddArrayToObject(spec, "hide");
    cJSON *env = cJSON_AddObjectToObject(spec, "env");
    char v[64];
    for (int i = 0; i < nargs; i++) {
        snprintf(v, sizeof v, "--arg%d", i);
        cJSON_AddItemToArray(args, cJSON_CreateString(v));
    }
    for (int i = 0; i < nhide; i++) {
        snprintf(v, sizeof v, "/srv/hidden%d", i);
        cJSON_AddItemToArray(hide, cJSON_CreateString(v));
    }
    for (int i = 0; i < nenv; i++) {
        snprintf(v, sizeof v, "VAR%d", i);
        cJSON_AddStringToObject(env, v, "x");
    }
    char *text = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    int rc = shim_req_parse(text, r, err, errlen);
    free(text);
    return rc;
}

Test(shim_req, arguments_paths_and_variables_past_their_bounds_are_refused)
{
    char err[256];
    shim_req r;
    cr_assert_eq(parse_sized(&r, SHIM_MAX_ARGS, SHIM_MAX_HIDE - 1, SHIM_REQ_MAX_ENV, err,
                             sizeof err), 0, "%s", err);
    int n = 0;
    while (r.sp.args[n])
        n++;
    cr_expect_eq(n, SHIM_MAX_ARGS, "%d of %d arguments kept", n, SHIM_MAX_ARGS);
    cr_expect_str_eq(r.sp.args[SHIM_MAX_ARGS - 1], "--arg297");
    cr_expect_eq(r.sp.nhide, SHIM_MAX_HIDE - 1);
    shim_req_free(&r);

    static const struct {
        int args, hide, env;
        const char *says;
    } over[] = {
        {SHIM_MAX_ARGS + 1, 0, 0, "more than 298 arguments"},
        {0, SHIM_MAX_HIDE, 0, "more than 63 paths to hide"},
        {0, 0, SHIM_REQ_MAX_ENV + 1, "more than 280 variables"},
    };
    for (size_t i = 0; i < sizeof over / sizeof *over; i++) {
        err[0] = '\0';
        cr_expect_eq(parse_sized(&r, over[i].args, over[i].hide, over[i].env, err, sizeof err), -1,
                     "case %zu was accepted", i);
        cr_expect(strstr(err, over[i].says) != NULL, "case %zu: '%s'", i, err);
        shim_req_free(&r);
    }
}

/* ---- seal: secrets at rest ---- */

#include "api/seal.h"

Test(seal, a_sealed_value_opens_with_its_key_only_and_not_once_changed)
{
    char dir1[] = "/tmp/cohort-seal-XXXXXX", dir2[] = "/tmp/cohort-seal-XXXXXX", err[256];
    cr_assert_not_null(mkdtemp(dir1));
    cr_assert_not_null(mkdtemp(dir2));
    seal *a = seal_open(dir1, err, sizeof err), *b = seal_open(dir2, err, sizeof err);
    cr_assert(a && b, "%s", err);
    char plain[256], sealed[SEAL_LEN(255)], opened[256];
    memset(plain, 'p', 255);
    plain[255] = '\0';
    cr_assert_eq(seal_encrypt(a, plain, sealed, sizeof sealed), 0, "255 bytes do not fit");
    /* Neither the text nor its base64 ("cHBw" per "ppp") shows through; a run of
     * three letters alone turns up by chance in one value of a thousand. */
    cr_expect(seal_is_sealed(sealed) && !strstr(sealed, "pppppppppppp") &&
                  !strstr(sealed, "cHBwcHBwcHBw"),
              "%s", sealed);
    cr_assert_eq(seal_decrypt(a, sealed, opened, sizeof opened), 0);
    cr_expect_str_eq(opened, plain);
    cr_expect_eq(seal_decrypt(b, sealed, opened, sizeof opened), -1, "another key opened it");
    char again[SEAL_LEN(255)];
    cr_assert_eq(seal_encrypt(a, plain, again, sizeof again), 0);
    cr_expect_str_neq(again, sealed, "the same value sealed twice looks the same");
    sealed[10] = sealed[10] == 'A' ? 'B' : 'A';
    cr_expect_eq(seal_decrypt(a, sealed, opened, sizeof opened), -1, "a changed value opened");
    seal_close(a);
    seal *a2 = seal_open(dir1, err, sizeof err); /* the key file, read back */
    cr_assert_not_null(a2, "%s", err);
    cr_assert_eq(seal_decrypt(a2, again, opened, sizeof opened), 0, "the kept key does not open");
    seal_close(a2);
    seal_close(b);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir1, dir2);
    cr_expect_eq(system(cmd), 0);
}

/* ---- fmt: whole or cut, by name ---- */

#include "lib/fmt.h"

/* What does not fit is refused whole (and leaves ""), never cut, for a
 * path; a message is cut to fit. */
Test(fmt, a_path_fits_whole_or_not_at_all_and_a_message_is_cut)
{
    char b[8];
    cr_expect_eq(fmt_whole(b, sizeof b, "%s-%d", "ab", 42), 0);
    cr_expect_str_eq(b, "ab-42");
    cr_expect_eq(fmt_whole(b, sizeof b, "%s", "1234567"), 0, "seven and the NUL fit");
    cr_expect_eq(fmt_whole(b, sizeof b, "%s", "12345678"), -1, "eight do not");
    cr_expect_str_eq(b, "", "a cut text was left behind: '%s'", b);
    cr_expect_eq(fmt_path(b, sizeof b, "/a", "b"), 0);
    cr_expect_str_eq(b, "/a/b");
    cr_expect_eq(fmt_path(b, sizeof b, "/tmp", "abc"), -1, "/tmp/abc is nine bytes");
    cr_expect_str_eq(b, "");
    cr_expect_eq(fmt_whole(b, 0, "x"), -1, "no room at all");
    fmt_cut(b, sizeof b, "error: %s", "long");
    cr_expect_str_eq(b, "error: ", "a message is cut to fit: '%s'", b);
}

/* ---- ratelimit: buckets per key in a fixed table ---- */

#include "server/ratelimit.h"

/* Requests of one key past its burst wait; keys that share a set of the
 * table (here thousands of keys, so every set is full many times over)
 * never buy more than the rate: taking a slot never fills a bucket. */
Test(ratelimit, keys_made_to_collide_share_a_bucket_and_gain_none)
{
    ratelimit *r = ratelimit_new(10.0, 20.0);
    cr_assert_not_null(r);
    int64_t now = 1000000;
    int ok = 0;
    for (int i = 0; i < 100; i++)
        ok += ratelimit_take(r, 7, now) == 0;
    cr_expect_eq(ok, 20, "one key's burst of 20 let %d through", ok);
    int64_t wait = ratelimit_take(r, 7, now);
    cr_expect(wait > 0 && wait <= 101, "a key past its burst waits %lld ms",
              (long long)wait);
    cr_expect_eq(ratelimit_take(r, 7, now + 100), 0, "one token back after 100 ms");
    /* a charge after the fact puts the key in debt, at most 60 s of it */
    ratelimit_charge(r, 7, 30.0, now + 100);
    wait = ratelimit_take(r, 7, now + 100);
    cr_expect(wait > 2900 && wait <= 3101, "30 owed at 10/s: %lld ms", (long long)wait);
    ratelimit_charge(r, 7, 1e9, now + 100);
    wait = ratelimit_take(r, 7, now + 100);
    cr_expect(wait > 59000 && wait <= RATELIMIT_DEBT_S * 1000 + 101, "a debt past 60 s: %lld ms",
              (long long)wait);
    /* 20,000 keys, more than the table holds, each asking every 10 ms
     * for 0.5 s at 1 a second with a burst of 1: whatever slots they
     * share, together they get no more than each key's own due (its burst
     * and half a token), where a slot that came back full at each switch
     * would grant them nearly every request. */
    ratelimit *q = ratelimit_new(1.0, 1.0);
    cr_assert_not_null(q);
    long granted = 0, asked = 0;
    for (int round = 0; round < 50; round++)
        for (int64_t k = 1; k <= 20000; k++, asked++)
            granted += ratelimit_take(q, k * 1000003, now + round * 10) == 0;
    cr_expect_leq(granted, 20000L * 3 / 2, "%ld of %ld granted", granted, asked);
    cr_expect_geq(granted, 1000, "the table grants nearly nothing: %ld", granted);
    ratelimit_free(r);
    ratelimit_free(q);
}

/* ---- regtoken: tokens signed, and read back ---- */

#include "api/regtoken.h"

/* A token reads back as what it grants, and only while it lives; a token
 * of another key, an altered one and text that is no JWT read as nothing. */
Test(regtoken, a_token_reads_back_as_its_grants_and_nothing_else)
{
    char dir1[] = "/tmp/cohort-rt-XXXXXX", dir2[] = "/tmp/cohort-rt-XXXXXX", err[256];
    cr_assert_not_null(mkdtemp(dir1));
    cr_assert_not_null(mkdtemp(dir2));
    regtoken *a = regtoken_open(dir1, err, sizeof err), *b = regtoken_open(dir2, err, sizeof err);
    cr_assert(a && b, "%s", err);
    regtoken_access g = {"repository", "acme/app", {"pull", NULL}};
    int64_t now = 1800000000;
    char *jwt = regtoken_sign(a, "acme/alice", &g, 1, now, 0);
    char *other = regtoken_sign(b, "acme/alice", &g, 1, now, 0);
    char *short_lived = regtoken_sign(a, "acme/alice", &g, 1, now, now + 20);
    cr_assert(jwt && other && short_lived);

    regtoken_grant *r = regtoken_verify(a, jwt, now + 1);
    cr_assert_not_null(r, "its own token does not read back");
    cr_expect(regtoken_grant_allows(r, "repository", "acme/app", "pull"));
    cr_expect(!regtoken_grant_allows(r, "repository", "acme/app", "push"), "push from pull");
    cr_expect(!regtoken_grant_allows(r, "repository", "acme/app2", "pull"), "another repo");
    cr_expect(!regtoken_grant_allows(r, "registry", "catalog", "*"), "the catalog");
    cr_expect_eq(regtoken_grant_exp(r), now + REGTOKEN_TTL_S);
    cr_expect_str_eq(regtoken_grant_subject(r), "acme/alice");
    regtoken_grant_free(r);

    cr_expect_null(regtoken_verify(a, jwt, now + REGTOKEN_TTL_S), "read back once expired");
    cr_expect_null(regtoken_verify(a, jwt, now - 60), "read back before its time");
    cr_expect_null(regtoken_verify(a, short_lived, now + 20), "outlived its own end");
    cr_expect_null(regtoken_verify(a, other, now + 1), "another key's token read back");
    cr_expect_null(regtoken_verify(b, jwt, now + 1), "read back by another key");
    /* every byte of the claims altered in turn: none reads back */
    const char *dot = strchr(jwt, '.');
    size_t body = (size_t)(dot - jwt) + 1, end = (size_t)(strchr(dot + 1, '.') - jwt), bad = 0;
    for (size_t i = body; i < end; i++) {
        char saved = jwt[i];
        jwt[i] = saved == 'A' ? 'B' : 'A';
        regtoken_grant *x = regtoken_verify(a, jwt, now + 1);
        bad += x != NULL;
        regtoken_grant_free(x);
        jwt[i] = saved;
    }
    cr_expect_eq(bad, 0, "%zu altered tokens read back", bad);
    static const char *const junk[] = {"", ".", "..", "a.b.c", "a.b.c.d", "coh_abcdef",
                                       "eyJ.eyJ.AAAA"};
    for (size_t i = 0; i < sizeof junk / sizeof *junk; i++)
        cr_expect_null(regtoken_verify(a, junk[i], now), "'%s' read back", junk[i]);
    free(jwt);
    free(other);
    free(short_lived);
    regtoken_close(a);
    regtoken_close(b);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir1, dir2);
    cr_expect_eq(system(cmd), 0);
}

/* ---- cgroup: the device allow-list on cgroup v2 ---- */

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "agent/cgroup.h"

/* In a child joined to w: 0 when open(path) succeeds, else its errno. */
static int open_in(cg_worker *w, const char *path)
{
    pid_t p = fork();
    if (p == 0) {
        if (cg_join(w) != 0)
            _exit(200);
        int fd = open(path, O_RDONLY | O_NONBLOCK);
        _exit(fd >= 0 ? 0 : errno);
    }
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 255;
}

/* A worker's cgroup v2 directory carries an eBPF device program: inside
 * it the standard devices open and a host device off the list does not
 * (EPERM), until the list names it (a GPU's node, say). */
Test(cgroup, a_v2_workers_devices_are_an_allow_list)
{
    char mnt[512] = "", line[1024], dev[256], dir[512], type[64], base[600], err[512];
    if (geteuid() != 0)
        cr_skip_test("needs root");
    FILE *f = fopen("/proc/self/mounts", "r");
    while (f && !mnt[0] && fgets(line, sizeof line, f))
        if (sscanf(line, "%255s %511s %63s", dev, dir, type) == 3 && !strcmp(type, "cgroup2"))
            snprintf(mnt, sizeof mnt, "%s", dir);
    if (f)
        fclose(f);
    if (!mnt[0])
        cr_skip_test("no cgroup v2 hierarchy is mounted here");
    snprintf(base, sizeof base, "%s/cohort-devtest-%d", mnt, (int)getpid());
    cr_assert(mkdir(base, 0755) == 0 || errno == EEXIST, "%s: %s", base, strerror(errno));
    cg_root root;
    cr_assert_eq(cg_open(base, "t", &root, err, sizeof err), 0, "%s", err);
    cr_expect(root.devices, "no device program on cgroup v2");
    static const char *const kmsg[] = {"/dev/kmsg", NULL};
    const cg_limits plain = {0, 0, 0, NULL, 1}, with_kmsg = {0, 0, 0, kmsg, 1};
    cg_worker w;
    cr_assert_eq(cg_worker_make(&root, 1, &plain, &w, err, sizeof err), 0, "%s", err);
    cr_expect_eq(open_in(&w, "/dev/null"), 0, "/dev/null refused");
    cr_expect_eq(open_in(&w, "/dev/urandom"), 0, "/dev/urandom refused");
    cr_expect_eq(open_in(&w, "/dev/kmsg"), EPERM, "/dev/kmsg opened off the list");
    cg_usage u;
    cg_worker_end(&w, &u, 1000);
    cr_assert_eq(cg_worker_make(&root, 2, &with_kmsg, &w, err, sizeof err), 0, "%s", err);
    cr_expect_eq(open_in(&w, "/dev/kmsg"), 0, "/dev/kmsg refused though listed");
    cg_worker_end(&w, &u, 1000);
    cg_close(&root);
    rmdir(base);
}

/* A launch spec as cohortd writes one: rank 1 of 4, two a node. */
static const char launch_ok[] =
    "{\"id\":7,\"job_id\":3,\"attempt\":1,\"rank\":1,\"image\":\"native\","
    "\"framework\":\"native\",\"program\":\"bin/train\",\"mount_root\":\"/cohort\","
    "\"workspace\":\"/data/volumes/1/ws\",\"datasets\":[{\"name\":\"ds\",\"path\":\"/data/d\"}],"
    "\"hide\":[\"/data/volumes\"],\"args\":[\"--local_rank=1\"],"
    "\"resources\":{\"cpus\":1,\"memory_mb\":2048,\"gpus\":0},"
    "\"image_digest\":\"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\","
    "\"env\":{\"MASTER_ADDR\":\"10.0.0.1\",\"MASTER_PORT\":\"29500\",\"WORLD_SIZE\":\"4\","
    "\"RANK\":\"1\",\"LOCAL_RANK\":\"1\",\"NODE_RANK\":\"0\",\"WORKER_PER_NODE\":\"2\","
    "\"BACKEND\":\"gloo\",\"DATASETS_PATH\":\"/cohort/datasets\",\"DATASETS\":\"ds\","
    "\"WORKSPACE\":\"/cohort/workspace\",\"EPOCHS\":\"2\",\"LR\":\"0.1\",\"BATCH_SIZE\":\"8\"}}";

/* launch_ok with obj[key] (obj: "" for the spec, or one of its objects)
 * set to the JSON value, or removed when value is NULL; why it is refused
 * into why ("" when it is not). */
static void launch_fault(const char *obj, const char *key, const char *value, char *why,
                         size_t n)
{
    cJSON *spec = cJSON_Parse(launch_ok);
    cJSON *in = obj[0] ? cJSON_GetObjectItemCaseSensitive(spec, obj) : spec;
    cJSON_DeleteItemFromObjectCaseSensitive(in, key);
    if (value)
        cJSON_AddItemToObject(in, key, cJSON_Parse(value));
    why[0] = '\0';
    if (launch_spec_check(spec, why, n) == 0)
        why[0] = '\0';
    cJSON_Delete(spec);
}

/* One check of what cohortd sends and the agent takes: each fault is
 * refused with a reason that names it (the agent fails the worker with it),
 * and a spec as cohortd writes it passes (api_flow checks cohortd's own). */
Test(launch, each_fault_of_a_launch_spec_is_refused_by_name)
{
    char why[256], many[4096];
    size_t at = 0;
    for (int i = 0; i < LAUNCH_MAX_ARGS + 1; i++)
        at += (size_t)snprintf(many + at, sizeof many - at, "%s\"a\"", i ? "," : "[");
    snprintf(many + at, sizeof many - at, "]");
    static const struct {
        const char *obj, *key, *value, *want;
    } faults[] = {
        {"", "workspace", NULL, "no workspace (is the workspace gone?)"},
        {"", "workspace", "null", "no workspace"},
        {"", "id", "\"7\"", "its id is not a whole number"},
        {"", "rank", "1.5", "its rank is not a whole number"},
        {"", "attempt", "0", "its attempt is not above 0"},
        {"", "env", "[]", "its env is not an object"},
        {"", "program", "\"../x\"", "program is not a path inside"},
        {"", "workspace", "\"rel/ws\"", "workspace is not an absolute path"},
        {"", "image_digest", "\"sha256:zz\"", "image_digest"},
        {"", "datasets", "[{\"name\":\"ds\",\"path\":null}]", "dataset ds is missing"},
        {"", "args", "[1]", "an argument is not text"},
        {"", "hide", "[\"rel\"]", "a path to hide"},
        {"resources", "cpus", "-1", "resources' cpus"},
        {"resources", "memory_mb", NULL, "resources' memory_mb"},
        {"env", "LOCAL_RANK", "\"abc\"", "LOCAL_RANK='abc'"},
        {"env", "LOCAL_RANK", "\"2\"", "LOCAL_RANK='2' is not a whole number from 0 to 1"},
        {"env", "LOCAL_RANK", "\"+1\"", "LOCAL_RANK='+1'"},
        {"env", "RANK", "\"3\"", "RANK 3 is not NODE_RANK 0 x WORKER_PER_NODE 2 + LOCAL_RANK 1"},
        {"env", "RANK", "\"4\"", "RANK='4' is not a whole number from 0 to 3"},
        {"env", "WORLD_SIZE", "\"5\"", "WORLD_SIZE 5 is not a multiple of WORKER_PER_NODE 2"},
        {"env", "WORLD_SIZE", "\"10001\"", "WORLD_SIZE='10001'"},
        {"env", "NODE_RANK", "\"2\"", "NODE_RANK='2' is not a whole number from 0 to 1"},
        {"env", "BACKEND", "\"mpi\"", "BACKEND='mpi' is not gloo or nccl"},
        {"env", "LR", "\"0\"", "LR='0'"},
        {"env", "LR", "\"0.1x\"", "LR='0.1x'"},
        {"env", "MASTER_PORT", "\"70000\"", "MASTER_PORT='70000'"},
        {"env", "MASTER_ADDR", "\"a b\"", "MASTER_ADDR='a b'"},
        {"env", "EPOCHS", NULL, "EPOCHS is not set"},
        {"env", "BATCH_SIZE", "\"0\"", "BATCH_SIZE='0'"},
        {"env", "X", "5", "variable X is not NAME=text"},
    };
    launch_fault("", "nothing", NULL, why, sizeof why);
    cr_expect_str_eq(why, "", "a valid spec was refused");
    launch_fault("env", "LR", "\"9.99999999999997e-311\"", why, sizeof why);
    cr_expect_str_eq(why, "", "a tiny learning rate cohortd takes was refused");
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
        launch_fault(faults[i].obj, faults[i].key, faults[i].value, why, sizeof why);
        cr_expect(strstr(why, faults[i].want) != NULL, "%s.%s=%s: got '%s'", faults[i].obj,
                  faults[i].key, faults[i].value ? faults[i].value : "(none)", why);
    }
    launch_fault("", "args", many, why, sizeof why);
    cr_expect(strstr(why, "more than 257 arguments") != NULL, "%s", why);
    cr_expect_eq(launch_spec_check(NULL, why, sizeof why), -1);
    long long v;
    cr_expect_eq(launch_int_text("-3", -5, 5, &v), 0);
    cr_expect_eq(v, -3);
    cr_expect_eq(launch_int_text("-3", 0, 5, &v), -1, "a sign where none is allowed");
    cr_expect_eq(launch_int_text(" 3", 0, 5, &v), -1);
    cr_expect_eq(launch_int_text("99999999999999999999", 0, 5, &v), -1);
    cr_expect_eq(launch_int_text(NULL, 0, 5, &v), -1);
}
