/*
 * Containers from the attacker's side: a tenant's job, run by a real agent
 * in a crun container from an image in a real registry, tries to reach what
 * it must not (the control plane's files, the agent's, the host's, another
 * tenant's, other workers) and to gain what it must not (mounts, devices,
 * modules, the clock); each attempt must fail, and the host's view must
 * agree.  Then images: private ones per tenant, clear failures for a missing
 * tag or a stopped registry, one pull per image and node, and a stop that
 * leaves nothing behind.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <ftw.h>
#include <time.h>
#include <unistd.h>

#include "lib/util.h"
#include "tests/harness.h"

static th_daemon d;
static th_agent ag;
static char tok[80], tok_b[80];

/* A registry that wants a password: robot / right-pw (htpasswd, bcrypt). */
static pid_t auth_pid;

static void auth_registry_stop(void)
{
    if (auth_pid > 0) {
        kill(auth_pid, SIGTERM);
        waitpid(auth_pid, NULL, 0);
        auth_pid = 0;
    }
}

static void node_unmount(void);

static void out_cleanup(void);
static void btrfs_cleanup(void);

static void teardown(void)
{
    out_cleanup();
    node_unmount();
    auth_registry_stop();
    th_agent_cleanup(&ag);
    th_stop(&d);
    th_cleanup(&d);
    btrfs_cleanup();
}

TestSuite(containers, .fini = teardown, .timeout = 120);

/* cohortd, one agent running containers, tenant acme (member alice, "ws",
 * dataset "ds") and tenant globex (member bob, "ws"). */
static const char *const *cohortd_args; /* a test's own cohortd options, or NULL */

static char platform_dir[64]; /* a test's own data dir (a mount), or "" */

static void platform_base(void)
{
    if (!th_can_sandbox())
        cr_skip_test("needs root to run containers");
    if (platform_dir[0])
        th_start_in(&d, platform_dir, cohortd_args);
    else
        th_start(&d, cohortd_args);
    th_user(&d, "acme", "alice", "member", tok);
    th_user(&d, "globex", "bob", "member", tok_b);
    const char *toks[] = {tok, tok_b};
    for (int i = 0; i < 2; i++) {
        th_must(th_post(&d, "/v1/workspaces", toks[i], "{\"name\":\"ws\"}"), 201);
    }
    th_must(th_post(&d, "/v1/datasets", tok, "{\"name\":\"ds\"}"), 201);
    th_must(th_put_file(&d, "/v1/datasets/ds/files/a.txt", tok, "hello", 5), 201);
}

static void platform(const char *const *agent_args)
{
    platform_base();
    const char *base[] = {"--cpus", "8", "--memory-mb", "65536", NULL};
    th_agent_start(&ag, &d, "n1", agent_args ? agent_args : base);
}

static long submit_as(const char *t, const char *prog, const char *image, const char *extra)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"name\":\"probe\",\"image\":\"%s\",\"workspace\":\"ws\",\"code_path\":\"%s\","
             "\"epochs\":1,\"lr\":0.1,\"batch_size\":1,\"worker_spec\":\"cpu-small\","
             "\"worker_count\":1%s}",
             image, prog, extra ? extra : "");
    return th_submit(&d, t, body);
}

static char *fetch_as(const char *t, const char *path)
{
    char p[256];
    snprintf(p, sizeof p, "/v1/workspaces/ws/files/%s", path);
    return th_get_body(&d, p, t);
}

/* The value of KEY in KEY=VALUE lines ("" when absent). */
static void value_of(const char *text, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    out[0] = '\0';
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (!strncmp(p, key, kl) && p[kl] == '=') {
            snprintf(out, n, "%.*s", (int)strcspn(p + kl + 1, "\n"), p + kl + 1);
            return;
        }
    }
}

/* The host pid of a running job's only worker (its container's init). */
static long worker_pid(long job)
{
    char p[128], path[700], buf[64];
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", job);
    th_resp r = th_get(&d, p, TH_ADMIN);
    const cJSON *w = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), 0);
    cr_assert_not_null(w, "%s", r.body);
    long wid = (long)cJSON_GetObjectItem(w, "id")->valuedouble;
    th_free(&r);
    snprintf(path, sizeof path, "%s/workers/%ld/pid", ag.dir, wid);
    for (int i = 0; i < 100; i++) {
        if (th_read_text(path, buf, sizeof buf) == 0 && atol(buf) > 0)
            return atol(buf);
        usleep(50000);
    }
    cr_assert_fail("no pid file at %s", path);
    return 0;
}

/* What a worker must not reach, one line each: KEY=what it got. */
#define ESCAPE_PROG                                                                            \
    "#!/bin/sh\n"                                                                              \
    "o=\"$WORKSPACE/escape.tmp\"\n"                                                            \
    "try() { k=$1; shift; r=$(\"$@\" 2>&1); s=$?; "                                           \
    "echo \"$k=$s $(echo \"$r\" | head -c 300 | tr '\\n' ' ')\" >> \"$o\"; }\n"               \
    ": > \"$o\"\n"                                                                             \
    "echo \"ID=$(id -u):$(id -g)\" >> \"$o\"\n"                                                \
    "try DATADIR ls \"$COHORTD_DIR\"\n"                                                        \
    "try SECRET cat \"$COHORTD_DIR/secret\"\n"                                                 \
    "try DB cat \"$COHORTD_DIR/cohort.db\"\n"                                                  \
    "try SHADOW cat /etc/shadow\n"                                                             \
    "try AGENTDIR ls \"$AGENT_DIR\"\n"                                                         \
    "try NODETOKEN cat \"$AGENT_DIR/node.json\"\n"                                             \
    "try AGENTENV cat \"/proc/$AGENT_PID/environ\"\n"                                          \
    "try OTHERWS ls \"$OTHER_WS\"\n"                                                           \
    "try OTHERPID kill -0 \"$OTHER_PID\"\n"                                                    \
    "echo \"PROCS=$(ls /proc | grep -c '^[0-9]')\" >> \"$o\"\n"                                \
    "try MOUNT mount -t tmpfs none /tmp\n"                                                     \
    "try UMOUNT umount /proc\n"                                                                \
    "try MKNOD mknod /tmp/sda b 8 0\n"                                                         \
    "echo x > /tmp/m.ko\n"                                                                     \
    "try INSMOD insmod /tmp/m.ko\n"                                                            \
    "try CLOCK date -s 2001-01-01\n"                                                           \
    "try UNSHARE unshare -U -r -m true\n"                                                      \
    "try DSWRITE touch \"$DATASETS_PATH/ds/new\"\n"                                            \
    "try ROOTWRITE touch /bin/new\n"                                                           \
    "mv \"$o\" \"$WORKSPACE/escape.txt\"\n"                                                    \
    "sleep 3\n"

/* The status code and message of one attempt: must have failed (status not
 * 0), and the message may be required to hold want. */
static void expect_failed(const char *text, const char *key, const char *want)
{
    char v[512];
    value_of(text, key, v, sizeof v);
    cr_expect(v[0] && strncmp(v, "0 ", 2) && strcmp(v, "0"), "%s succeeded: '%s'", key, v);
    if (want)
        cr_expect(strstr(v, want) != NULL, "%s: '%s' does not say '%s'", key, v, want);
}

/* One member's job tries every way out it can think of; each fails, and the
 * host sees it as the tenant's unprivileged uid in a user namespace of its
 * own, while another tenant's worker runs on beside it untouched. */
Test(containers, a_job_cannot_reach_the_host_the_platform_or_another_tenant, .timeout = 90)
{
    char seen[16], env[2048], p[128], path[700], buf[4096];
    platform(NULL);
    /* A secret of cohortd's, beside its database. */
    snprintf(path, sizeof path, "%s/secret", d.dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("do-not-leak\n", f);
    fclose(f);
    /* globex's worker: a target to signal */
    th_put_text(&d, tok_b, "ws", "idle.sh", "#!/bin/sh\nexec sleep 60\n", "755");
    long other = submit_as(tok_b, "idle.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok_b, other, "RUNNING", 30000, seen), "%s", seen);
    long other_pid = worker_pid(other);
    long other_ws = th_id(&d, "/v1/workspaces/ws", tok_b);
    long globex = th_id(&d, "/v1/tenants/globex", TH_ADMIN);
    snprintf(env, sizeof env,
             ",\"datasets\":[\"ds\"],\"env\":{\"COHORTD_DIR\":\"%s\",\"AGENT_DIR\":\"%s\","
             "\"AGENT_PID\":\"%d\",\"OTHER_WS\":\"%s/volumes/%ld/workspaces/%ld\","
             "\"OTHER_PID\":\"%ld\"}",
             d.dir, ag.dir, (int)ag.pid, d.dir, globex, other_ws, other_pid);
    th_put_text(&d, tok, "ws", "escape.sh", ESCAPE_PROG, "755");
    long id = submit_as(tok, "escape.sh", "native", env);
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 30000, seen), "%s", seen);

    /* The host's view of the running worker. */
    long pid = worker_pid(id);
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    cr_assert_eq(th_read_text(path, buf, sizeof buf), 0);
    char *uid = strstr(buf, "\nUid:");
    cr_assert_not_null(uid);
    long acme = th_id(&d, "/v1/tenants/acme", TH_ADMIN);
    long base = (1L << 28) + acme * 65536;
    cr_expect_eq(strtol(uid + 5, NULL, 10), base, "on the host it runs as uid %ld, not %ld",
                 strtol(uid + 5, NULL, 10), base);
    char ns_worker[128] = "", ns_host[128] = "";
    snprintf(path, sizeof path, "/proc/%ld/ns/user", pid);
    cr_assert_gt(readlink(path, ns_worker, sizeof ns_worker - 1), 0);
    cr_assert_gt(readlink("/proc/self/ns/user", ns_host, sizeof ns_host - 1), 0);
    cr_expect_str_neq(ns_worker, ns_host, "the worker is in the host's user namespace");

    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 30000, seen), "%s", seen);
    char *t = fetch_as(tok, "escape.txt");
    char v[512];
    value_of(t, "ID", v, sizeof v);
    cr_expect_str_eq(v, "0:0", "inside it is root");
    /* Each escape the program tried, and the error it must have met ("":
     * any failure will do). */
    static const char *const refused[][2] = {
        {"DATADIR", "No such file"},
        {"SECRET", "No such file"},
        {"DB", "No such file"},
        {"AGENTDIR", "No such file"},
        {"NODETOKEN", "No such file"},
        {"AGENTENV", ""},
        {"OTHERWS", "No such file"},
        {"OTHERPID", ""},
        {"MOUNT", ""},
        {"UMOUNT", ""},
        {"MKNOD", ""},
        {"INSMOD", ""},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        expect_failed(t, refused[i][0], refused[i][1]);
    value_of(t, "CLOCK", v, sizeof v); /* busybox's date exits 0 all the same */
    cr_expect(strstr(v, "not permitted") != NULL, "CLOCK: %s", v);
    expect_failed(t, "UNSHARE", "not permitted");
    expect_failed(t, "DSWRITE", "Read-only file system");
    expect_failed(t, "ROOTWRITE", "Read-only file system");
    value_of(t, "PROCS", v, sizeof v);
    cr_expect_lt(atoi(v), 8, "it sees %s processes", v);
    /* The host's /etc/shadow never reached it. */
    char shadow[4096] = "";
    if (th_read_text("/etc/shadow", shadow, sizeof shadow) == 0 && shadow[0]) {
        shadow[strcspn(shadow, "\n")] = '\0';
        value_of(t, "SHADOW", v, sizeof v);
        cr_expect(strstr(v, shadow) == NULL, "it read the host's /etc/shadow: %s", v);
    }
    cr_expect(strstr(t, "do-not-leak") == NULL, "cohortd's secret leaked: %s", t);
    free(t);
    /* The other tenant's worker ran on. */
    snprintf(p, sizeof p, "/v1/jobs/%ld", other);
    th_resp r = th_get(&d, p, tok_b);
    cr_expect_str_eq(th_str(&r, "state"), "RUNNING");
    th_free(&r);
}

/* Files a worker writes are the tenant's through the API, and files the
 * API wrote the worker can read and overwrite: on the host they stay
 * owned by uid 0 (idmapped mounts). */
Test(containers, workspace_files_cross_between_the_api_and_the_container)
{
    char seen[16], path[700];
    platform(NULL);
    th_put_text(&d, tok, "ws", "data.txt", "from the api\n", NULL);
    th_put_text(&d, tok, "ws", "rw.sh",
                "#!/bin/sh\n"
                "cat data.txt > copy.txt && echo 'from the worker' > data.txt && "
                "mkdir -p out && echo made > out/new.txt\n",
                "755");
    long id = submit_as(tok, "rw.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 30000, seen), "%s", seen);
    char *t = fetch_as(tok, "copy.txt");
    cr_expect_str_eq(t, "from the api\n");
    free(t);
    t = fetch_as(tok, "data.txt");
    cr_expect_str_eq(t, "from the worker\n");
    free(t);
    t = fetch_as(tok, "out/new.txt");
    cr_expect_str_eq(t, "made\n");
    free(t);
    long ws = th_id(&d, "/v1/workspaces/ws", tok);
    long acme = th_id(&d, "/v1/tenants/acme", TH_ADMIN);
    struct stat sb;
    snprintf(path, sizeof path, "%s/volumes/%ld/workspaces/%ld/out/new.txt", d.dir, acme, ws);
    cr_assert_eq(stat(path, &sb), 0, "%s", path);
    cr_expect_eq(sb.st_uid, 0, "the worker's file is owned by host uid %d", (int)sb.st_uid);
}

/* A program that ignores SIGTERM and leaves a grandchild that ignores it
 * too: cancelled, it is killed after the grace period, and nothing of it
 * stays: no process, no crun state, no bundle. */
Test(containers, cancel_of_a_stubborn_container_leaves_nothing)
{
    char seen[16], p[128], prog[512], marker[64], path[700];
    platform(NULL);
    snprintf(marker, sizeof marker, "stubborn-%d", (int)getpid());
    snprintf(prog, sizeof prog,
             "#!/bin/sh\ntrap '' TERM\n"
             "sh -c \"trap '' TERM; while :; do sleep 1; done\" %s &\n"
             "exec sh -c \"trap '' TERM; while :; do sleep 1; done\" %s\n",
             marker, marker);
    th_put_text(&d, tok, "ws", "stub.sh", prog, "755");
    long id = submit_as(tok, "stub.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 30000, seen), "%s", seen);
    for (int i = 0; i < 50 && th_count_marked(marker) < 2; i++)
        usleep(100000);
    cr_assert_geq(th_count_marked(marker), 2, "the program and its grandchild run");
    snprintf(p, sizeof p, "/v1/jobs/%ld/cancel", id);
    th_must(th_post(&d, p, tok, NULL), 200);
    int left = 1;
    for (int i = 0; i < 100 && left; i++, usleep(100000))
        left = th_count_marked(marker);
    cr_expect_eq(left, 0, "%d processes outlived the cancel", left);
    /* crun knows no container of this agent's, and no bundle is left. */
    snprintf(path, sizeof path, "crun --root '%s/crun' list -q | grep -c . | grep -qx 0", ag.dir);
    int none = 0;
    for (int i = 0; i < 50 && !none; i++, usleep(100000))
        none = system(path) == 0;
    cr_expect(none, "crun still lists a container");
    snprintf(path, sizeof path, "ls -d '%s'/workers/*/bundle 2>/dev/null | grep -q .", ag.dir);
    cr_expect_neq(system(path), 0, "a bundle directory is left");
}

/* The file name in the cgroup of process pid that holds controller ctl
 * (cgroup v1), or in its cgroup v2 directory where no v1 hierarchy has
 * ctl: read whole into buf, 0; -1 when there is none. */
static int cgroup_file(long pid, const char *ctl, const char *name, char *buf, size_t n)
{
    char path[1200], line[1024], v2[512] = "", mnt[512] = "";
    snprintf(path, sizeof path, "/proc/%ld/cgroup", pid);
    FILE *f = fopen(path, "r");
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *b = '\0';
        b[1 + strcspn(b + 1, "\n")] = '\0';
        if (!strcmp(a + 1, "")) {
            snprintf(v2, sizeof v2, "%s", b + 1);
            continue;
        }
        for (char *s = NULL, *c = strtok_r(a + 1, ",", &s); c; c = strtok_r(NULL, ",", &s))
            if (!strcmp(c, ctl)) {
                snprintf(path, sizeof path, "/sys/fs/cgroup/%s%s/%s", ctl, b + 1, name);
                found = 1;
            }
    }
    if (f)
        fclose(f);
    if (!found && v2[0]) {
        FILE *m = fopen("/proc/self/mounts", "r");
        char dev[256], dir[512], type[64];
        while (m && fgets(line, sizeof line, m))
            if (sscanf(line, "%255s %511s %63s", dev, dir, type) == 3 && !strcmp(type, "cgroup2"))
                snprintf(mnt, sizeof mnt, "%s", dir);
        if (m)
            fclose(m);
        snprintf(path, sizeof path, "%s%s/%s", mnt, v2, name);
        found = mnt[0] != 0;
    }
    return found ? th_read_text(path, buf, n) : -1;
}

/* The reason a job ended with, once it has ended in want. */
static void expect_ended(const char *t, long id, const char *want, const char *reason)
{
    char seen[16], p[64];
    cr_assert(th_wait_state(&d, t, id, want, 60000, seen), "job %ld: %s", id, seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, t);
    const char *why = th_str(&r, "reason");
    cr_expect(why && strstr(why, reason), "job %ld ended '%s', not with '%s'", id,
              why ? why : "(no reason)", reason);
    th_free(&r);
}

/* A fork bomb, a memory bomb and four busy loops, in jobs of one tenant:
 * each is held to its cgroup (on cgroup v2, or the v1 hierarchies of a
 * hybrid host), the bombs fail only their own jobs with a reason, and the
 * agent, cohortd and another tenant's job run on. */
Test(containers, bombs_and_busy_loops_are_held_to_their_worker_spec, .timeout = 150)
{
    char seen[16], buf[4096], p[128];
    const char *args[] = {"--cpus", "8", "--memory-mb", "65536", "--worker-pids", "128", NULL};
    platform(args);
    th_must(th_post(&d, "/v1/worker-specs", TH_ADMIN,
                    "{\"name\":\"cpu-tiny\",\"cpus\":1,\"memory_mb\":256,\"gpus\":0,"
                    "\"price_per_hour\":1,\"currency\":\"USD\"}"), 201);
    th_put_text(&d, tok_b, "ws", "idle.sh", "#!/bin/sh\nexec sleep 120\n", "755");
    long other = submit_as(tok_b, "idle.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok_b, other, "RUNNING", 30000, seen), "%s", seen);

    /* Four busy loops for 4 s on a 1-CPU spec, seen from the host. */
    th_put_text(&d, tok, "ws", "busy.sh",
                "#!/bin/sh\nfor i in 1 2 3 4; do (while :; do :; done) & done\n"
                "sleep 4\nkill $(jobs -p)\n",
                "755");
    long busy = submit_as(tok, "busy.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok, busy, "RUNNING", 30000, seen), "%s", seen);
    long pid = worker_pid(busy);
    buf[0] = '\0';
    cr_expect_eq(cgroup_file(pid, "pids", "pids.max", buf, sizeof buf), 0, "no pids.max");
    cr_expect_eq(atol(buf), 128, "pids.max is '%s'", buf);
    buf[0] = '\0';
    if (cgroup_file(pid, "memory", "memory.limit_in_bytes", buf, sizeof buf) != 0)
        cgroup_file(pid, "memory", "memory.max", buf, sizeof buf);
    cr_expect_eq(atoll(buf), 2048LL << 20, "the memory limit is '%s'", buf);
    if (cgroup_file(pid, "devices", "devices.list", buf, sizeof buf) == 0) {
        cr_expect(strstr(buf, "c 1:3 rwm") != NULL, "null is not allowed: %s", buf);
        cr_expect(strstr(buf, "a *:* rwm") == NULL && strstr(buf, "b ") == NULL,
                  "more than the allow-list: %s", buf);
    }

    /* The bombs, both at once. */
    th_put_text(&d, tok, "ws", "forks.sh",
                "#!/bin/sh\nn=0\nwhile [ $n -lt 2000 ]; do sleep 60 & n=$((n+1)); done\nexit 3\n",
                "755");
    th_put_text(&d, tok, "ws", "mem.sh",
                "#!/bin/sh\nexec awk 'BEGIN { s = \"x\"; for (i = 0; i < 30; i++) s = s s; "
                "print length(s) }'\n",
                "755");
    long forks = submit_as(tok, "forks.sh", "native", NULL);
    long mem = th_submit(&d, tok,
                         "{\"name\":\"mem\",\"image\":\"native\",\"workspace\":\"ws\","
                         "\"code_path\":\"mem.sh\",\"epochs\":1,\"lr\":0.1,\"batch_size\":1,"
                         "\"worker_spec\":\"cpu-tiny\",\"worker_count\":1}");
    expect_ended(tok, forks, "FAILED", "limit of 128 processes");
    expect_ended(tok, mem, "FAILED", "out of memory");
    cr_assert(th_wait_state(&d, tok, busy, "SUCCEEDED", 30000, seen), "%s", seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers", busy);
    th_resp r = th_get(&d, p, tok);
    const cJSON *w = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), 0);
    const cJSON *cpu = cJSON_GetObjectItem(w, "cpu_seconds");
    cr_assert(cJSON_IsNumber(cpu), "no cpu_seconds: %s", r.body);
    /* 4 s of one CPU, and a start: far from the 8 s two free cores give */
    cr_expect(cpu->valuedouble > 1.0 && cpu->valuedouble < 6.0, "four loops used %.2f CPU-s",
              cpu->valuedouble);
    th_free(&r);

    cr_expect_eq(kill(ag.pid, 0), 0, "the agent died");
    th_must(th_get(&d, "/healthz", NULL), 200);
    snprintf(p, sizeof p, "/v1/jobs/%ld", other);
    r = th_get(&d, p, tok_b);
    cr_expect_str_eq(th_str(&r, "state"), "RUNNING", "the other tenant's job");
    th_free(&r);
}

/* crun gives a container's root the ownership of its standard streams: they
 * are the shim's pipes, so no host file changes owner or mode, however the
 * job tries (a chmod through /proc/self/fd), and its output still reaches
 * its log. */
Test(containers, no_host_file_changes_owner_when_containers_run)
{
    char seen[16], p[128], path[1200];
    struct stat before, after, log;
    platform(NULL);
    cr_assert_eq(stat("/dev/null", &before), 0);
    th_put_text(&d, tok, "ws", "fds.sh",
                "#!/bin/sh\nls -l /proc/$$/fd/ > fds.txt 2>&1\n"
                "chmod 0777 /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2 /dev/null 2>/dev/null\n"
                "echo out-line-$$; echo err-line >&2\n",
                "755");
    for (int i = 0; i < 2; i++) {
        long id = submit_as(tok, "fds.sh", "native", NULL);
        cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 30000, seen), "%s", seen);
        snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=0", id);
        char *text = th_get_body(&d, p, tok);
        cr_expect(text && strstr(text, "out-line-") && strstr(text, "err-line"), "log: %s", text);
        free(text);
    }
    char *fds = fetch_as(tok, "fds.txt");
    cr_expect(fds && strstr(fds, "0 -> pipe:") && strstr(fds, "1 -> pipe:") &&
                  strstr(fds, "2 -> pipe:"),
              "the standard streams are not pipes: %s", fds);
    cr_expect(fds && !strstr(fds, "/dev/null"), "a stream is /dev/null: %s", fds);
    free(fds);
    cr_assert_eq(stat("/dev/null", &after), 0);
    cr_expect(after.st_uid == before.st_uid && after.st_gid == before.st_gid &&
                  after.st_mode == before.st_mode,
              "the host's /dev/null went from %d:%d %o to %d:%d %o", (int)before.st_uid,
              (int)before.st_gid, (unsigned)before.st_mode, (int)after.st_uid,
              (int)after.st_gid, (unsigned)after.st_mode);
    snprintf(path, sizeof path, "ls %s/workers/*/output.log 2>/dev/null | head -1 > %s/log.path",
             ag.dir, ag.dir);
    if (system(path) == 0) {
        char lp[700] = "";
        snprintf(path, sizeof path, "%s/log.path", ag.dir);
        if (th_read_text(path, lp, sizeof lp) == 0 && lp[0]) {
            lp[strcspn(lp, "\n")] = '\0';
            cr_assert_eq(stat(lp, &log), 0, "%s", lp);
            cr_expect_eq(log.st_uid, 0, "the worker's log is owned by uid %d", (int)log.st_uid);
        }
    }
}

/* Lines of the agent's log that hold text. */
static int log_count(const char *text)
{
    char path[600], line[2048];
    snprintf(path, sizeof path, "%s.log", ag.dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, text) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* Two jobs of one image, started together on one node: one pull, one
 * unpack; both run from it, and both record its digest. */
Test(containers, two_jobs_of_one_image_pull_and_unpack_it_once)
{
    char seen[16], p[128];
    platform(NULL);
    th_put_text(&d, tok, "ws", "ok.sh", "#!/bin/sh\nsleep 1\n", "755");
    long a = submit_as(tok, "ok.sh", "native", NULL);
    long b = submit_as(tok, "ok.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok, a, "SUCCEEDED", 30000, seen), "%s", seen);
    cr_assert(th_wait_state(&d, tok, b, "SUCCEEDED", 30000, seen), "%s", seen);
    cr_expect_eq(log_count("cohort-shim: pulled "), 1, "pulls");
    cr_expect_eq(log_count("cohort-shim: unpacked "), 1, "unpacks");
    char digest[2][80];
    long ids[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "/v1/jobs/%ld", ids[i]);
        th_resp r = th_get(&d, p, tok);
        snprintf(digest[i], sizeof digest[i], "%s", th_str(&r, "image_digest"));
        th_free(&r);
        cr_expect(!strncmp(digest[i], "sha256:", 7) && strlen(digest[i]) == 71,
                  "job %ld: image_digest '%s'", ids[i], digest[i]);
    }
    cr_expect_str_eq(digest[0], digest[1]);
}

/* A gang's first worker on a node pulls its image, then keeps it locked
 * shared while it runs and waits for its peers.  A peer that found the image
 * missing a moment before must still get it, not wait for that lock to be
 * free.  Here the test plays the first worker: it holds the image's lock
 * shared before the image is there, and a job of that image must run. */
Test(containers, an_image_held_shared_by_a_peer_is_still_pulled)
{
    char seen[16], admin[80], cmd[1024], digest[128] = "", lockp[700];
    platform(NULL);
    th_user(&d, "acme", "root", "tenant_admin", admin);
    snprintf(cmd, sizeof cmd, "'%s/tests/make-test-image' %s acme/held:1 --env WHICH=held",
             COHORT_SOURCE_DIR, th_registry());
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    while (fgets(digest, sizeof digest, p) && strncmp(digest, "sha256:", 7))
        ;
    cr_assert_eq(pclose(p), 0, "pushing acme/held:1");
    digest[strcspn(digest, "\n")] = '\0';
    cr_assert_eq(strlen(digest), 71, "make-test-image printed '%s'", digest);
    th_must(th_post(&d, "/v1/images", admin,
                    "{\"name\":\"held\",\"reference\":\"acme/held:1\",\"framework\":\"native\"}"),
            201);
    snprintf(lockp, sizeof lockp, "%s/images/%s.lock", ag.dir, digest + 7);
    int fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert(fd >= 0, "%s: %s", lockp, strerror(errno));
    cr_assert_eq(flock(fd, LOCK_SH), 0);
    th_put_text(&d, tok, "ws", "ok.sh", "#!/bin/sh\nexit 0\n", "755");
    long a = submit_as(tok, "ok.sh", "held", NULL);
    int ok = th_wait_state(&d, tok, a, "SUCCEEDED", 30000, seen);
    close(fd);
    cr_assert(ok, "a job of an image a peer held shared is %s", seen);
    cr_expect_eq(log_count("cohort-shim: unpacked "), 1, "unpacks");
}

/* A tenant admin's private image: its tenant's jobs run it; for another
 * tenant it does not exist (404, and a job naming it is refused). */
Test(containers, a_private_image_is_its_tenants_alone)
{
    char seen[16], admin[80];
    platform(NULL);
    th_user(&d, "acme", "root", "tenant_admin", admin);
    const char *opts[] = {"--env", "FLAVOUR=acme-private", NULL};
    cr_assert_eq(th_push_image("acme/tools:1", opts), 0);
    th_resp r = th_post(&d, "/v1/images", tok,
                        "{\"name\":\"tools\",\"reference\":\"acme/tools:1\",\"framework\":\"native\"}");
    cr_expect_eq(r.status, 403, "a member registered an image: %s", r.body);
    th_free(&r);
    r = th_create(&d, "/v1/images", admin,
                  "{\"name\":\"tools\",\"reference\":\"acme/tools:1\",\"framework\":\"native\","
                  "\"username\":\"u\",\"password\":\"s3cret-pw\"}");
    cr_expect_str_eq(th_str(&r, "visibility"), "private");
    cr_expect(strstr(r.body, "s3cret-pw") == NULL, "the password came back: %s", r.body);
    th_free(&r);
    r = th_get(&d, "/v1/images/tools", tok);
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.body, "s3cret-pw") == NULL && strstr(r.body, "\"has_credentials\":true"),
              "%s", r.body);
    th_free(&r);
    /* globex sees nothing of it */
    th_expect(th_get(&d, "/v1/images/tools", tok_b), 404);
    r = th_get(&d, "/v1/images", tok_b);
    cr_expect(strstr(r.body, "tools") == NULL, "%s", r.body);
    th_free(&r);
    th_put_text(&d, tok_b, "ws", "x.sh", "#!/bin/sh\nexit 0\n", "755");
    th_expect(
        th_post(&d, "/v1/jobs", tok_b,
                "{\"name\":\"x\",\"image\":\"tools\",\"workspace\":\"ws\",\"code_path\":\"x.sh\","
                "\"epochs\":1,\"lr\":0.1,\"batch_size\":1,\"worker_spec\":\"cpu-small\","
                "\"worker_count\":1}"),
        422);
    /* acme runs it: its Env is there (the registry ignores the credentials) */
    th_put_text(&d, tok, "ws", "flavour.sh", "#!/bin/sh\necho \"$FLAVOUR\" > flavour.txt\n", "755");
    long id = submit_as(tok, "flavour.sh", "tools", NULL);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 30000, seen), "%s", seen);
    char *t = fetch_as(tok, "flavour.txt");
    cr_expect_str_eq(t, "acme-private\n");
    free(t);
    /* the password was given to the agent, and it kept it nowhere */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "grep -rqs s3cret-pw '%s' '%s.log'", ag.dir, ag.dir);
    cr_expect_neq(system(cmd), 0, "the password lies in the agent's files");
}

/* An attempt whose image cannot be had fails with a reason that says why. */
static void expect_reason(const char *reference, const char *want)
{
    char seen[16], body[512], p[64], admin[80];
    th_user(&d, "acme", "root", "tenant_admin", admin);
    snprintf(body, sizeof body,
             "{\"name\":\"img\",\"reference\":\"%s\",\"framework\":\"native\"}", reference);
    th_must(th_post(&d, "/v1/images", admin, body), 201);
    th_put_text(&d, tok, "ws", "x.sh", "#!/bin/sh\nexit 0\n", "755");
    long id = submit_as(tok, "x.sh", "img", NULL);
    cr_assert(th_wait_state(&d, tok, id, "FAILED", 60000, seen), "%s", seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, tok);
    cr_expect(strstr(th_str(&r, "reason"), want) != NULL, "reason: %s", th_str(&r, "reason"));
    th_free(&r);
    /* and the agent runs on */
    cr_expect_eq(kill(ag.pid, 0), 0, "the agent died");
}

Test(containers, a_missing_tag_fails_the_attempt_and_says_so)
{
    platform(NULL);
    expect_reason("cohort/cohort:no-such-tag", "no such image or tag");
}

Test(containers, a_stopped_registry_fails_the_attempt_and_says_so)
{
    char ref[128];
    platform(NULL);
    /* Not th_free_port(): CI saw a registry that a test beside this one
     * started take that port first, and the attempt failed on its 401. */
    snprintf(ref, sizeof ref, "127.0.0.1:%d/cohort/cohort:bookworm", th_closed_port());
    expect_reason(ref, "is unreachable");
}

/*
 * A crun that never starts its container (CI saw one, once in a few runs,
 * hold a worker at "starting the container"): a wrapper put first on the
 * agent's PATH stalls the first `run` it is given (or every one, with
 * always) before the real crun is reached.  The shim must notice within
 * --start-timeout, say where crun was blocked, kill it and start again.
 */
static void stalling_crun(char *dir, size_t n, int always)
{
    char real[512] = "", path[700], script[2048];
    FILE *w = popen("command -v crun", "r");
    cr_assert(w && fgets(real, sizeof real, w), "no crun on PATH");
    pclose(w);
    real[strcspn(real, "\n")] = '\0';
    snprintf(dir, n, "/tmp/cohort-stall-%d", (int)getpid());
    mkdir(dir, 0755);
    /* The shim gives crun no environment: full paths only. */
    snprintf(script, sizeof script,
             "#!/bin/sh\n"
             "for a; do\n"
             "  if [ \"$a\" = run ] && { [ %d = 1 ] || [ ! -e %s/stalled ]; }; then\n"
             "    echo $$ >> %s/stalled\n"
             "    exec /bin/sleep 1000\n"
             "  fi\n"
             "done\n"
             "exec %s \"$@\"\n",
             always, dir, dir, real);
    snprintf(path, sizeof path, "%s/crun", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(script, f);
    fclose(f);
    chmod(path, 0755);
    char *old = getenv("PATH"), newpath[4096];
    snprintf(newpath, sizeof newpath, "%s:%s", dir, old ? old : "/usr/sbin:/usr/bin:/sbin:/bin");
    setenv("PATH", newpath, 1);
}

/* The pids the wrapper stalled, each one checked to be gone. */
static int stalled_runs(const char *dir, int *alive)
{
    char path[600], buf[256];
    snprintf(path, sizeof path, "%s/stalled", dir);
    int n = 0;
    *alive = 0;
    if (th_read_text(path, buf, sizeof buf) != 0)
        return 0;
    for (char *p = buf, *end; *p; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        n++;
        char stat[64], st[512];
        snprintf(stat, sizeof stat, "/proc/%ld/stat", pid);
        /* gone, or a zombie of a process that is itself going */
        if (th_read_text(stat, st, sizeof st) == 0 && !strstr(st, ") Z "))
            (*alive)++;
    }
    return n;
}

/* A job on an agent whose crun stalls (always, or only its first run), with
 * a start timeout of 1 s; the job's id once it has ended in want. */
static long stalled_job(char *dir, size_t n, int always, const char *want)
{
    char seen[16];
    const char *args[] = {"--cpus", "8", "--memory-mb", "65536", "--start-timeout", "1", NULL};
    platform_base();
    stalling_crun(dir, n, always);
    th_agent_start(&ag, &d, "n1", args);
    th_put_text(&d, tok, "ws", "ok.sh", "#!/bin/sh\necho started\n", "755");
    long id = submit_as(tok, "ok.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok, id, want, 30000, seen), "%s", seen);
    return id;
}

Test(containers, a_crun_that_never_starts_is_killed_and_run_again)
{
    char dir[256], cmd[700];
    stalled_job(dir, sizeof dir, 0, "SUCCEEDED");
    int alive;
    cr_expect_eq(stalled_runs(dir, &alive), 1, "the wrapper stalled one crun run");
    cr_expect_eq(alive, 0, "the stalled crun is still there");
    cr_expect_eq(log_count("crun wrote no pid file within 1000 ms"), 1,
                 "the agent's log says what happened");
    cr_expect_geq(log_count(" sleep S "), 1, "the log names where crun was blocked");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

Test(containers, a_crun_that_never_starts_twice_fails_the_attempt_and_says_where)
{
    char dir[256], cmd[700], p[64];
    long id = stalled_job(dir, sizeof dir, 1, "FAILED");
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, tok);
    const char *why = th_str(&r, "reason");
    cr_expect(strstr(why, "did not start within 1 s, twice") && strstr(why, "sleep"),
              "reason: %s", why);
    th_free(&r);
    int alive;
    cr_expect_eq(stalled_runs(dir, &alive), 2, "two tries");
    cr_expect_eq(alive, 0, "a stalled crun is still there");
    cr_expect_eq(kill(ag.pid, 0), 0, "the agent died");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* Unpacked images in the agent's cache (directories named by a digest). */
static int cached_images(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/images", ag.dir);
    DIR *dp = opendir(path);
    struct dirent *e;
    int n = 0;
    while (dp && (e = readdir(dp)) != NULL)
        n += strlen(e->d_name) == 64 && !strchr(e->d_name, '.');
    if (dp)
        closedir(dp);
    return n;
}

/* Past --image-cache-max, images no worker uses are evicted, least recently
 * used first; an image a running worker uses stays. */
Test(containers, unused_images_are_evicted_past_the_bound_and_used_ones_stay, .timeout = 180)
{
    char seen[16], admin[80], body[256];
    const char *args[] = {"--cpus", "8", "--memory-mb", "65536", "--image-cache-max", "1", NULL};
    platform(args);
    th_user(&d, "acme", "root", "tenant_admin", admin);
    static const char *const names[] = {"one", "two", "three"};
    for (int i = 0; i < 3; i++) {
        char repo[64], envv[64];
        snprintf(repo, sizeof repo, "acme/%s:1", names[i]);
        snprintf(envv, sizeof envv, "WHICH=%s", names[i]);
        const char *opts[] = {"--env", envv, NULL}; /* a different digest each */
        cr_assert_eq(th_push_image(repo, opts), 0);
        snprintf(body, sizeof body,
                 "{\"name\":\"%s\",\"reference\":\"%s\",\"framework\":\"native\"}", names[i], repo);
        th_must(th_post(&d, "/v1/images", admin, body), 201);
    }
    th_put_text(&d, tok, "ws", "long.sh", "#!/bin/sh\nsleep 30\n", "755");
    th_put_text(&d, tok, "ws", "short.sh", "#!/bin/sh\nexit 0\n", "755");
    /* "one" runs on while "two" is pulled: both images stay, over the bound. */
    long a = submit_as(tok, "long.sh", "one", NULL);
    cr_assert(th_wait_state(&d, tok, a, "RUNNING", 30000, seen), "%s", seen);
    long b = submit_as(tok, "short.sh", "two", NULL);
    cr_assert(th_wait_state(&d, tok, b, "SUCCEEDED", 30000, seen), "%s", seen);
    cr_expect_eq(cached_images(), 2, "an image in use was evicted");
    cr_expect_eq(log_count("cohort-shim: evicted "), 0);
    /* "one" ends; "three" comes: "one" and "two" are unused and go. */
    th_cancel(&d, tok, a);
    cr_assert(th_wait_state(&d, tok, a, "CANCELLED", 30000, seen), "%s", seen);
    long c = submit_as(tok, "short.sh", "three", NULL);
    cr_assert(th_wait_state(&d, tok, c, "SUCCEEDED", 30000, seen), "%s", seen);
    cr_expect_eq(log_count("cohort-shim: evicted "), 2);
    cr_expect_eq(cached_images(), 1, "the unused images stayed");
    /* and an evicted image is pulled again when wanted */
    long again = submit_as(tok, "short.sh", "one", NULL);
    cr_assert(th_wait_state(&d, tok, again, "SUCCEEDED", 30000, seen), "%s", seen);
}

/* One try at starting a registry that asks who its clients are (auth, the
 * lines of its auth: section) on a port free a moment ago: 0 once it asks,
 * -1 when it exited first (a process beside this test took the port in
 * between). */
static int auth_registry_try(char *addr, size_t n, const char *auth)
{
    char conf[600], cmd[1200];
    snprintf(addr, n, "127.0.0.1:%d", th_free_port());
    snprintf(conf, sizeof conf, "%s/auth-registry.yml", d.dir);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fprintf(f, "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
               "    rootdirectory: %s/auth-registry\nhttp:\n  addr: %s\nauth:\n%s",
            d.dir, addr, auth);
    fclose(f);
    auth_pid = fork();
    cr_assert_geq(auth_pid, 0);
    if (auth_pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execlp("docker-registry", "docker-registry", "serve", conf, (char *)NULL);
        _exit(127);
    }
    snprintf(cmd, sizeof cmd,
             "curl -s -m 5 -o /dev/null -w '%%{http_code}' http://%s/v2/ | grep -q 401", addr);
    for (int i = 0; i < 100; i++) {
        int up = system(cmd) == 0;
        if (up)
            usleep(50000);
        if (waitpid(auth_pid, NULL, WNOHANG) == auth_pid) {
            auth_pid = 0;
            return -1;
        }
        if (up)
            return 0;
        usleep(50000);
    }
    cr_assert_fail("the password registry did not start at %s", addr);
    return -1;
}

static void auth_registry(char *addr, size_t n)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "htpasswd -Bbn robot right-pw > '%s/htpasswd'", d.dir);
    cr_assert_eq(system(cmd), 0, "htpasswd (apache2-utils) is needed");
    char auth[700];
    snprintf(auth, sizeof auth, "  htpasswd:\n    realm: cohort-test\n    path: %s/htpasswd\n",
             d.dir);
    int tries = 0;
    while (auth_registry_try(addr, n, auth) != 0)
        cr_assert_lt(++tries, 3, "the password registry lost its port three times");
    snprintf(cmd, sizeof cmd,
             "'%s/tests/make-test-image' %s acme/secret:1 --creds robot:right-pw >/dev/null",
             COHORT_SOURCE_DIR, addr);
    cr_assert_eq(system(cmd), 0, "pushing to the registry with a password");
}

/* A private image behind a password: with the right one its jobs run; a
 * wrong one, or none, fails the attempt with a reason that says the
 * registry refused the credentials. */
Test(containers, refused_credentials_fail_the_attempt_and_say_so)
{
    char addr[64], seen[16], admin[80], body[512], p[64], insecure[160];
    platform_base();
    auth_registry(addr, sizeof addr);
    /* the agent speaks plain HTTP to it too */
    snprintf(insecure, sizeof insecure, "%s,%s", th_registry(), addr);
    const char *args[] = {"--cpus", "8", "--registry", th_registry(), "--insecure-registry",
                          insecure, NULL};
    th_agent_start(&ag, &d, "n1", args);
    th_user(&d, "acme", "root", "tenant_admin", admin);
    static const struct {
        const char *name, *creds, *want;
    } cases[] = {
        {"right", ",\"username\":\"robot\",\"password\":\"right-pw\"", NULL},
        {"wrong", ",\"username\":\"robot\",\"password\":\"wrong-pw\"", "refused the credentials"},
        {"none", "", "refused the credentials"},
    };
    th_put_text(&d, tok, "ws", "x.sh", "#!/bin/sh\nexit 0\n", "755");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body,
                 "{\"name\":\"%s\",\"reference\":\"%s/acme/secret:1\",\"framework\":\"native\"%s}",
                 cases[i].name, addr, cases[i].creds);
        th_must(th_post(&d, "/v1/images", admin, body), 201);
        long id = submit_as(tok, "x.sh", cases[i].name, NULL);
        const char *want = cases[i].want ? "FAILED" : "SUCCEEDED";
        cr_expect(th_wait_state(&d, tok, id, want, 60000, seen), "%s: %s", cases[i].name, seen);
        snprintf(p, sizeof p, "/v1/jobs/%ld", id);
        th_resp r = th_get(&d, p, tok);
        if (cases[i].want)
            cr_expect(strstr(th_str(&r, "reason"), cases[i].want) != NULL, "%s: %s",
                      cases[i].name, th_str(&r, "reason"));
        cr_expect(strstr(r.body, "right-pw") == NULL && strstr(r.body, "wrong-pw") == NULL,
                  "a password in the job: %s", r.body);
        th_free(&r);
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "grep -rqs -e right-pw -e wrong-pw '%s' '%s.log'", ag.dir, ag.dir);
    cr_expect_neq(system(cmd), 0, "a password lies in the agent's files or log");
}

/* ---- a log flood ---- */

#define FLOOD_LIMIT (1 << 20)
#define FLOOD_MARK "this job's stored output reached its limit"

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/*
 * A job prints 1 GB as fast as it can beside a quiet one, under a 1 MB
 * --log-limit: the flood ends as soon as it would without the limit (never
 * held up by its log), cohortd stores at most the limit of it, ending with a
 * line that says so, the job's events say so once, and the quiet job's log
 * is whole.
 */
Test(containers, a_log_flood_stores_only_the_jobs_limit_and_spares_other_jobs, .timeout = 240)
{
    static const char *const args[] = {"--log-limit", "1048576", NULL};
    char seen[64], path[512];
    cohortd_args = args;
    platform(NULL);
    th_put_text(&d, tok, "ws", "flood.sh",
                "#!/bin/sh\nyes 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvw"
                " | head -c 1000000000\necho flood-done\n",
                "755");
    th_put_text(&d, tok, "ws", "quiet.sh",
                "#!/bin/sh\ni=0\nwhile [ $i -lt 1000 ]; do echo quiet-line-$i; i=$((i+1)); done\n"
                "echo quiet-done\n",
                "755");
    long flood = submit_as(tok, "flood.sh", "native", NULL);
    long quiet = submit_as(tok, "quiet.sh", "native", NULL);
    cr_assert_eq(th_wait_state(&d, tok, flood, "SUCCEEDED", 180000, seen), 1, "flood: %s", seen);
    cr_assert_eq(th_wait_state(&d, tok, quiet, "SUCCEEDED", 60000, seen), 1, "quiet: %s", seen);

    /* What cohortd keeps of the flood: the limit, then the note. */
    snprintf(path, sizeof path, "%s/logs/%ld/1/0.log", d.dir, flood);
    long size = file_size(path);
    cr_expect(size > 0 && size <= FLOOD_LIMIT + 200, "the flood's stored log is %ld bytes", size);
    char lp[128];
    snprintf(lp, sizeof lp, "/v1/jobs/%ld/logs?rank=0&tail=300", flood);
    th_resp r = th_get(&d, lp, tok);
    cr_expect_eq(r.status, 200);
    cr_expect(r.body && strstr(r.body, FLOOD_MARK), "the log does not say it was cut: %s",
              r.body ? r.body : "");
    th_free(&r);
    snprintf(lp, sizeof lp, "/v1/jobs/%ld/events", flood);
    r = th_get(&d, lp, tok);
    int notes = 0;
    for (const char *p = r.body; p && (p = strstr(p, "--log-limit")) != NULL; p++)
        notes++;
    cr_expect_eq(notes, 1, "events of the flood: %s", r.body);
    th_free(&r);
    /* The quiet job's log is whole. */
    snprintf(lp, sizeof lp, "/v1/jobs/%ld/logs?rank=0", quiet);
    r = th_get(&d, lp, tok);
    cr_expect(r.body && strstr(r.body, "quiet-line-0\n") && strstr(r.body, "quiet-line-999\n") &&
                  strstr(r.body, "quiet-done"),
              "the quiet job lost output");
    cr_expect(r.body && !strstr(r.body, FLOOD_MARK), "the quiet job was cut");
    th_free(&r);
    long total = 0;
    snprintf(path, sizeof path, "%s/logs", d.dir);
    char cmd[600], out[64] = "";
    snprintf(cmd, sizeof cmd, "du -sb '%s' | cut -f1", path);
    FILE *f = popen(cmd, "r");
    if (f && fgets(out, sizeof out, f))
        total = atol(out);
    if (f)
        pclose(f);
    cr_expect_lt(total, 4L << 20, "cohortd's logs hold %ld bytes", total);
    /* On the node: the flood's output.log went through all 1 GB, but only
     * its newest MB is still on disk (what cohortd took or cut is punched). */
    long node_size = 0, node_disk = 0;
    snprintf(cmd, sizeof cmd, "find '%s/workers' -name output.log -printf '%%s %%b\\n'", ag.dir);
    f = popen(cmd, "r");
    long sz, blocks;
    while (f && fscanf(f, "%ld %ld", &sz, &blocks) == 2) {
        node_size = sz > node_size ? sz : node_size;
        node_disk += blocks * 512;
    }
    if (f)
        pclose(f);
    cr_expect_geq(node_size, 1000000000L, "the node's largest output.log is %ld bytes", node_size);
    cr_expect_lt(node_disk, 3L << 20, "the node's output.logs take %ld bytes of disk", node_disk);
    snprintf(lp, sizeof lp, "/v1/jobs/%ld", flood);
    r = th_get(&d, lp, tok);
    const char *st = th_str(&r, "started_at"), *fin = th_str(&r, "finished_at");
    cr_log_info("flood: 1 GB printed (%s to %s), %ld bytes stored for it, %ld in all logs; "
                "on the node: %ld bytes written, %ld on disk",
                st ? st : "?", fin ? fin : "?", size, total, node_size, node_disk);
    th_free(&r);
}

/* ---- a full disk on the node ---- */

static char node_mount[600];

static void node_unmount(void)
{
    char cmd[700];
    if (!node_mount[0])
        return;
    th_agent_cleanup(&ag);
    snprintf(cmd, sizeof cmd, "umount '%s'", node_mount);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot unmount %s\n", node_mount);
    node_mount[0] = '\0';
}

static void fill_node(const char *dir, int on)
{
    char path[700], block[65536];
    snprintf(path, sizeof path, "%s/filler", dir);
    if (!on) {
        cr_assert_eq(unlink(path), 0);
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert(fd >= 0);
    memset(block, 'x', sizeof block);
    for (size_t chunk = sizeof block; chunk > 0; chunk /= 2)
        while (write(fd, block, chunk) == (ssize_t)chunk)
            ;
    close(fd);
}

/*
 * The agent's data dir on a 64 MB file system, filled to the last byte: a
 * job started there fails with a reason that says the node's disk is full,
 * the agent runs on and reports, and once space is freed the next job runs.
 */
Test(containers, a_full_disk_on_the_node_fails_the_job_and_spares_the_agent, .timeout = 180)
{
    char seen[64], cmd[700], lp[128];
    platform_base();
    snprintf(node_mount, sizeof node_mount, "%s/agent-n1", d.dir);
    cr_assert_eq(mkdir(node_mount, 0711), 0);
    snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=64m,mode=0711 cohort-node '%s'", node_mount);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    const char *base[] = {"--cpus", "8", "--memory-mb", "65536", NULL};
    th_agent_start(&ag, &d, "n1", base);
    th_put_text(&d, tok, "ws", "talk.sh",
                "#!/bin/sh\ni=0\nwhile [ $i -lt 200 ]; do echo line-$i; i=$((i+1)); done\n", "755");
    long warm = submit_as(tok, "talk.sh", "native", NULL);
    cr_assert_eq(th_wait_state(&d, tok, warm, "SUCCEEDED", 60000, seen), 1, "warm-up: %s", seen);

    fill_node(node_mount, 1);
    long full = submit_as(tok, "talk.sh", "native", NULL);
    int failed = th_wait_state(&d, tok, full, "FAILED", 60000, seen);
    snprintf(lp, sizeof lp, "/v1/jobs/%ld", full);
    th_resp r = th_get(&d, lp, tok);
    const char *reason = th_str(&r, "reason");
    cr_expect_eq(failed, 1, "a job on a full node: %s (%s)", seen, reason ? reason : "");
    cr_expect(reason && (strstr(reason, "space") || strstr(reason, "disk")),
              "the reason does not say the disk is full: %s", reason ? reason : "(none)");
    cr_log_info("full node: job %ld %s: %s", full, seen, reason ? reason : "");
    th_free(&r);
    cr_expect_eq(kill(ag.pid, 0), 0, "the agent died");
    r = th_get(&d, "/v1/nodes?limit=10", TH_ADMIN);
    cr_expect(r.body && strstr(r.body, "\"state\":\"up\""), "the node is not up: %s", r.body);
    th_free(&r);

    fill_node(node_mount, 0);
    long after = submit_as(tok, "talk.sh", "native", NULL);
    cr_expect_eq(th_wait_state(&d, tok, after, "SUCCEEDED", 60000, seen), 1,
                 "after space was freed: %s", seen);
    node_unmount();
}

/* Whether the host's kernel log holds marker: /dev/kmsg read from its
 * first record to its last, without waiting for more. */
static int kmsg_holds(const char *marker)
{
    char rec[8192];
    int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    cr_assert(fd >= 0, "/dev/kmsg: %s", strerror(errno));
    int found = 0;
    for (;;) {
        ssize_t n = read(fd, rec, sizeof rec - 1);
        if (n < 0 && errno == EPIPE) /* records overwritten while reading */
            continue;
        if (n <= 0)
            break;
        rec[n] = '\0';
        found |= strstr(rec, marker) != NULL;
    }
    close(fd);
    return found;
}

/* Pushes acme/NAME:1 with the make-test-image options opts and registers it
 * as image NAME of acme (by its tenant admin). */
static void push_acme_image(const char *name, const char *const *opts)
{
    char admin[80], repo[128], body[512];
    th_user(&d, "acme", "root", "tenant_admin", admin);
    snprintf(repo, sizeof repo, "acme/%s:1", name);
    cr_assert_eq(th_push_image(repo, opts), 0, "pushing %s", repo);
    snprintf(body, sizeof body, "{\"name\":\"%s\",\"reference\":\"%s\",\"framework\":\"native\"}",
             name, repo);
    th_must(th_post(&d, "/v1/images", admin, body), 201);
}

/* Tries the device nodes its image carried, one KEY=status line each, and
 * lists them. */
#define DEVICES_PROG                                                                           \
    "#!/bin/sh\n"                                                                              \
    "o=\"$WORKSPACE/devices.tmp\"\n"                                                           \
    ": > \"$o\"\n"                                                                             \
    "echo \"$MARKER\" 2>/dev/null > /kmsg; echo \"KMSG=$?\" >> \"$o\"\n"                       \
    "head -c 512 /disk 2>/dev/null > /dev/null; echo \"DISK=$?\" >> \"$o\"\n"                  \
    "echo x 2>/dev/null > /mynull; echo \"NULL=$?\" >> \"$o\"\n"                               \
    "for f in /kmsg /mynull /disk; do\n"                                                       \
    "    if [ -c $f ] || [ -b $f ]; then echo \"NODE=$f\" >> \"$o\"; fi\n"                     \
    "done\n"                                                                                   \
    "ls -l /kmsg /mynull /disk >> \"$o\" 2>&1\n"                                               \
    "mv \"$o\" \"$WORKSPACE/devices.txt\"\n"

/* An image that carries device nodes (/dev/kmsg's numbers at /kmsg,
 * /dev/null's at /mynull, and the host's disk at /disk, all mode 0666):
 * in its container none of them is a device any more, nothing its job
 * wrote reaches the host's kernel log, and the agent says what it dropped. */
Test(containers, an_images_device_files_are_not_live_in_its_container)
{
    char seen[16], disk[64] = "", marker[96], env[256], v[64];
    platform(NULL);
    struct stat root;
    cr_assert_eq(stat("/", &root), 0);
    int with_disk = major(root.st_dev) != 0; /* 0:N is an overlay or tmpfs: no disk */
    snprintf(disk, sizeof disk, "disk:b:%u:%u", major(root.st_dev), minor(root.st_dev));
    const char *opts[] = {"--dev", "kmsg:c:1:11", "--dev", "mynull:c:1:3",
                          with_disk ? "--dev" : NULL, disk, NULL};
    push_acme_image("devs", opts);
    snprintf(marker, sizeof marker, "cohort-kmsg-job-%d-%lld", (int)getpid(),
             (long long)time(NULL));
    snprintf(env, sizeof env, ",\"env\":{\"MARKER\":\"%s\"}", marker);
    th_put_text(&d, tok, "ws", "devices.sh", DEVICES_PROG, "755");
    long id = submit_as(tok, "devices.sh", "devs", env);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 60000, seen), "%s", seen);
    char *t = fetch_as(tok, "devices.txt");
    cr_log_info("devices: %s", t);
    static const char *const tried[] = {"KMSG", "DISK", "NULL"};
    for (size_t i = 0; i < sizeof tried / sizeof *tried; i++) {
        value_of(t, tried[i], v, sizeof v);
        cr_expect(v[0] && strcmp(v, "0"), "%s: the device of the image worked: %s", tried[i], t);
    }
    cr_expect(strstr(t, "NODE=") == NULL, "a device node is in the container: %s", t);
    cr_expect(strstr(t, "\nc") == NULL && strstr(t, "\nb") == NULL, "ls lists a device: %s", t);
    free(t);
    /* the host's kernel log: the test's own line is there, the job's is not */
    char mine[128], line[140];
    snprintf(mine, sizeof mine, "cohort-kmsg-test-%d-%lld", (int)getpid(), (long long)time(NULL));
    int n = snprintf(line, sizeof line, "%s\n", mine); /* a record ends at its newline */
    int fd = open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
    cr_assert(fd >= 0 && write(fd, line, (size_t)n) == n, "/dev/kmsg: %s", strerror(errno));
    close(fd);
    cr_expect(kmsg_holds(mine), "the test cannot read the kernel log");
    cr_expect(!kmsg_holds(marker), "the job wrote to the host's kernel log");
    snprintf(v, sizeof v, "dropped %d device files", with_disk ? 3 : 2);
    cr_expect_eq(log_count(v), 1, "the agent's log does not say '%s'", v);
}

/* Whether the directory at path holds anything (-1 when it is gone). */
static int dir_entries(const char *path)
{
    DIR *dp = opendir(path);
    struct dirent *e;
    int n = 0;
    if (!dp)
        return -1;
    while ((e = readdir(dp)) != NULL)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(dp);
    return n;
}

/* Regular files under a tree that are set-ID or carry a file capability:
 * counted by armed_entry (nftw has no context pointer). */
static int armed_count;
static char armed_first[600];

static int armed_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)ftw;
    char v[64];
    if ((flag == FTW_F || flag == FTW_D) && !S_ISLNK(sb->st_mode) &&
        ((sb->st_mode & 06000) ||
         (S_ISREG(sb->st_mode) && lgetxattr(path, "security.capability", v, sizeof v) >= 0))) {
        if (!armed_count++)
            snprintf(armed_first, sizeof armed_first, "%s", path);
    }
    return 0;
}

static int armed_under(const char *dir)
{
    armed_count = 0;
    armed_first[0] = '\0';
    nftw(dir, armed_entry, 32, FTW_PHYS);
    return armed_count;
}

/* Tries to make set-ID and capable files in the workspace, one KEY=done or
 * KEY=refused line each (PLAIN, an ordinary chmod, is the control), and
 * says what the image's set-ID program looks like inside. */
#define SETID_PROG                                                                             \
    "#!/bin/sh\n"                                                                              \
    "W=\"$WORKSPACE\"\n"                                                                       \
    "t() { k=$1; shift; if \"$@\" >/dev/null 2>&1; then echo \"$k=done\"; "                    \
    "else echo \"$k=refused\"; fi; }\n"                                                        \
    "cp /bin/busybox \"$W/a\"; cp /bin/busybox \"$W/b\"\n"                                     \
    "{ t SETUID chmod 4755 \"$W/a\"\n"                                                         \
    "  t SETGID chmod 2755 \"$W/b\"\n"                                                         \
    "  t PLAIN chmod 700 \"$W/b\"\n"                                                           \
    "  t CREATE perl -e 'use Fcntl; sysopen(my $f, \"'\"$W\"'/c\", O_CREAT|O_WRONLY, 04755) "     \
    "or exit 1'\n"                                                                             \
    "  t SETCAP perl -e '$v=pack(\"VVVVV\",0x02000001,130,0,0,0); "                            \
    "exit(syscall(188,\"'\"$W\"'/a\",\"security.capability\",$v,20,0)==0?0:1)'\n"             \
    "  echo \"IMAGE=$(ls -l /usr/local/bin/sid | cut -c1-10)\"\n"                               \
    "} > \"$W/setid.tmp\"; mv \"$W/setid.tmp\" \"$W/setid.txt\"\n"

/* Neither an image nor a job puts a set-ID or capable file on the node's
 * disk: the image's set-ID, file-capable program is disarmed when it is
 * unpacked (under a path every uid may walk, it was a root shell for any
 * local user), and a job's chmod u+s, g+s, a set-ID create and a file
 * capability are refused (through the idmapped workspace the container's
 * root is the host's root). */
Test(containers, no_set_id_or_capable_file_reaches_the_node, .timeout = 120)
{
    char seen[16], path[700];
    platform(NULL);
    const char *opts[] = {"--setid", "/usr/local/bin/sid", NULL};
    push_acme_image("setid", opts);
    th_put_text(&d, tok, "ws", "setid.sh", SETID_PROG, "755");
    long id = submit_as(tok, "setid.sh", "setid", NULL);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 60000, seen), "%s", seen);
    char *t = fetch_as(tok, "setid.txt");
    cr_log_info("setid: %s", t);
    static const char *const want[] = {"SETUID=refused", "SETGID=refused", "PLAIN=done",
                                       "CREATE=refused", "SETCAP=refused", "IMAGE=-rwxr-xr-x"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(t && strstr(t, want[i]) != NULL, "not %s: %s", want[i], t ? t : "");
    free(t);
    cr_expect_eq(armed_under(ag.dir), 0, "%d armed files in the agent's dir, first %s",
                 armed_count, armed_first);
    snprintf(path, sizeof path, "%s/volumes", d.dir);
    cr_expect_eq(armed_under(path), 0, "%d armed files in the volumes, first %s", armed_count,
                 armed_first);
    cr_expect_eq(log_count("took the set-ID bits and file capabilities off 2 files"), 1,
                 "the agent's log does not say it disarmed the image");
}

/* An image whose etc links to a host directory (one an attacker knows is
 * there, such as /etc/cron.d; here an empty one the test makes) and whose
 * proc links to a host path that does not exist: the agent, root, makes
 * the containers' mount points (/etc/hosts, /etc/resolv.conf) inside the
 * image's root, never through its links: the host directory stays empty,
 * the other path absent.  The job may fail, with a reason that says why. */
Test(containers, an_image_whose_etc_is_a_link_out_creates_nothing_on_the_host)
{
    char seen[16], evil[64], absent[80], etc_link[96], proc_link[112], p[64];
    platform(NULL);
    snprintf(evil, sizeof evil, "/tmp/cohort-evil-%d", (int)getpid());
    snprintf(absent, sizeof absent, "%s-proc", evil);
    snprintf(etc_link, sizeof etc_link, "etc:%s", evil);
    snprintf(proc_link, sizeof proc_link, "proc:%s", absent);
    cr_assert(mkdir(evil, 0755) == 0 || errno == EEXIST, "%s: %s", evil, strerror(errno));
    const char *opts[] = {"--link", etc_link, "--link", proc_link, NULL};
    push_acme_image("linked", opts);
    th_put_text(&d, tok, "ws", "ok.sh", "#!/bin/sh\nexit 0\n", "755");
    long id = submit_as(tok, "ok.sh", "linked", NULL);
    /* Either end will do (th_wait_state would log a warning, which fails
     * the suite's exit status, at the one it did not ask for). */
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = {0};
    for (int i = 0; i < 600; i++, usleep(100000)) {
        th_free(&r);
        r = th_get(&d, p, tok);
        snprintf(seen, sizeof seen, "%s", th_str(&r, "state") ? th_str(&r, "state") : "");
        if (!strcmp(seen, "SUCCEEDED") || !strcmp(seen, "FAILED"))
            break;
    }
    int ended = !strcmp(seen, "SUCCEEDED");
    const char *reason = th_str(&r, "reason");
    cr_log_info("a job of an image whose etc links out: %s (%s)", seen, reason ? reason : "");
    cr_expect(ended || (!strcmp(seen, "FAILED") && reason && strstr(reason, "/etc/hosts")),
              "the job is %s, and its reason does not say why: %s", seen,
              reason ? reason : "(none)");
    th_free(&r);
    int made = dir_entries(evil);
    struct stat sb;
    int absent_made = lstat(absent, &sb) == 0;
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", evil, absent);
    cr_expect_eq(system(cmd), 0);
    cr_expect_eq(made, 0, "the agent made %d files in the host's %s", made, evil);
    cr_expect(!absent_made, "the host's %s was made", absent);
    cr_expect_eq(kill(ag.pid, 0), 0, "the agent died");
}

/* A tag re-pushed while a job runs (a re-tag by whoever can push to it):
 * the job's later attempt still runs the digest its first rank resolved,
 * although the node asks the registry again for every worker. */
Test(containers, a_retag_mid_job_changes_nothing_for_its_later_attempts, .timeout = 150)
{
    char seen[16], p[128], first[80];
    const char *args[] = {"--cpus", "8", "--memory-mb", "65536", "--image-resolve-ttl", "0", NULL};
    platform(args);
    const char *one[] = {"--env", "MARK=one", NULL}, *two[] = {"--env", "MARK=two", NULL};
    push_acme_image("pinned", one);
    /* attempt 1 waits for "go", then fails; attempt 2 says which image it got */
    th_put_text(&d, tok, "ws", "pin.sh",
                "#!/bin/sh\nif [ ! -f first.txt ]; then echo \"$MARK\" > first.txt\n"
                "  while [ ! -f go ]; do sleep 0.2; done; exit 1; fi\n"
                "echo \"$MARK\" > second.txt\n",
                "755");
    long id = submit_as(tok, "pin.sh", "pinned", ",\"max_retries\":1");
    th_resp f = {0};
    /* until it holds its line: the shell makes the file before it writes */
    for (int i = 0; i < 300 && (f.status != 200 || f.len == 0); i++) {
        th_free(&f);
        usleep(100000);
        f = th_get(&d, "/v1/workspaces/ws/files/first.txt", tok);
    }
    cr_assert_eq(f.status, 200, "attempt 1 never started");
    cr_expect_str_eq(f.body, "one\n");
    th_free(&f);
    char *t;
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, tok);
    snprintf(first, sizeof first, "%s", th_str(&r, "image_digest") ? th_str(&r, "image_digest") : "");
    th_free(&r);
    cr_assert(!strncmp(first, "sha256:", 7), "no digest pinned: '%s'", first);

    cr_assert_eq(th_push_image("acme/pinned:1", two), 0, "re-pushing the tag");
    th_put_text(&d, tok, "ws", "go", "", NULL);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 60000, seen), "%s", seen);
    t = fetch_as(tok, "second.txt");
    cr_expect(t && !strcmp(t, "one\n"), "attempt 2 ran the re-tagged image: %s", t ? t : "");
    free(t);
    r = th_get(&d, p, tok);
    cr_expect_str_eq(th_str(&r, "image_digest"), first);
    cr_expect_eq(th_num(&r, "attempt"), 2);
    th_free(&r);
    /* Both attempts' workers ran the pinned digest. */
    snprintf(p, sizeof p, "/v1/jobs/%ld/workers?attempt=2", id);
    r = th_get(&d, p, tok);
    const cJSON *w = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"), 0);
    const char *ran = cJSON_GetStringValue(cJSON_GetObjectItem(w, "image_digest"));
    cr_expect(ran && !strcmp(ran, first), "attempt 2's worker: %s", r.body);
    th_free(&r);
}

/* ---- the registry's token authentication (cohortd its token server) ---- */

/* A registry that takes cohortd's tokens only, at addr. */
static void token_registry(char *addr, size_t n)
{
    char auth[900];
    snprintf(auth, sizeof auth,
             "  token:\n    realm: %s/v1/registry/token\n    service: cohort-registry\n"
             "    issuer: cohortd\n    rootcertbundle: %s/registry-cert.pem\n",
             d.base, d.dir);
    int tries = 0;
    while (auth_registry_try(addr, n, auth) != 0)
        cr_assert_lt(++tries, 3, "the token registry lost its port three times");
}

/* Whether a push of the test image to addr/repo with the API token as the
 * password (NULL: none) was taken. */
static int push_with(const char *addr, const char *repo, const char *api_token)
{
    char cmd[3600], creds[2200] = "";
    if (api_token)
        snprintf(creds, sizeof creds, " --creds 'anyone:%s'", api_token);
    snprintf(cmd, sizeof cmd, "'%s/tests/make-test-image' %s %s%s >/dev/null 2>&1",
             COHORT_SOURCE_DIR, addr, repo, creds);
    return system(cmd) == 0;
}

/* Whether addr/repo's manifest could be read with the API token (NULL: as
 * nobody). */
static int pull_with(const char *addr, const char *repo, const char *api_token)
{
    char cmd[3600], creds[2200] = "";
    if (api_token)
        snprintf(creds, sizeof creds, " --creds 'anyone:%s'", api_token);
    snprintf(cmd, sizeof cmd,
             "skopeo inspect --raw --tls-verify=false%s docker://%s/%s >/dev/null 2>&1", creds,
             addr, repo);
    return system(cmd) == 0;
}

/* The HTTP status of the registry's catalog with a token cohortd gave the
 * API token for registry:catalog:*. */
static int catalog_with(const char *addr, const char *api_token)
{
    char cmd[1600], out[64] = "";
    snprintf(cmd, sizeof cmd,
             "t=$(curl -s -m 5 -u 'anyone:%s' '%s/v1/registry/token?service=cohort-registry&"
             "scope=registry:catalog:*' | sed -n 's/.*\"token\":\"\\([^\"]*\\)\".*/\\1/p'); "
             "curl -s -m 5 -o /dev/null -w '%%{http_code}' -H \"Authorization: Bearer $t\" "
             "http://%s/v2/_catalog > '%s/catalog.code'",
             api_token, d.base, addr, d.dir);
    if (system(cmd) != 0)
        return -1;
    snprintf(cmd, sizeof cmd, "%s/catalog.code", d.dir);
    th_read_text(cmd, out, sizeof out);
    return atoi(out);
}

/* Each tenant's repositories are its own: its tenant admins push there,
 * its users pull, nobody else does either; cohort/ is pulled by anyone and
 * pushed by a platform admin; the catalog is a platform admin's; an API
 * token that is not one gets nothing. */
Test(containers, the_registry_takes_cohort_tokens_and_keeps_tenants_apart, .timeout = 150)
{
    char addr[64], a_admin[80], b_admin[80];
    platform_base();
    th_user(&d, "acme", "root", "tenant_admin", a_admin);
    th_user(&d, "globex", "groot", "tenant_admin", b_admin);
    token_registry(addr, sizeof addr);

    cr_expect(push_with(addr, "acme/app:1", a_admin), "acme's admin cannot push to acme/");
    cr_expect(push_with(addr, "globex/app:1", b_admin), "globex's admin cannot push to globex/");
    cr_expect(push_with(addr, "cohort/base:1", TH_ADMIN), "the platform admin cannot push cohort/");
    cr_expect(!push_with(addr, "globex/app:1", a_admin), "acme's admin pushed to globex/");
    cr_expect(!push_with(addr, "acme/app:2", tok), "a member pushed");
    cr_expect(!push_with(addr, "cohort/base:1", a_admin), "a tenant admin pushed to cohort/");
    cr_expect(!push_with(addr, "acme/app:3", NULL), "an anonymous push was taken");

    cr_expect(pull_with(addr, "acme/app:1", tok), "acme's member cannot pull acme/");
    cr_expect(!pull_with(addr, "acme/app:1", tok_b), "globex's member pulled acme/");
    cr_expect(!pull_with(addr, "acme/app:1", b_admin), "globex's admin pulled acme/");
    cr_expect(!pull_with(addr, "acme/app:1", NULL), "an anonymous pull of acme/");
    cr_expect(!pull_with(addr, "acme/app:1", "coh_not-a-token-of-anyone-at-all-here-0123456789"),
              "a made-up token pulled acme/");
    cr_expect(pull_with(addr, "cohort/base:1", NULL), "cohort/ is not public");
    cr_expect(pull_with(addr, "cohort/base:1", tok_b), "a member cannot pull cohort/");

    cr_expect_eq(catalog_with(addr, TH_ADMIN), 200, "the platform admin's catalog");
    cr_expect_eq(catalog_with(addr, a_admin), 401, "a tenant admin read the catalog");

    /* Images of this registry lie in their tenant's namespace (or cohort/). */
    th_expect_error(th_post(&d, "/v1/images", b_admin,
                            "{\"name\":\"stolen\",\"reference\":\"acme/app:1\","
                            "\"framework\":\"native\"}"),
                    422, "invalid_value", "reference");
    static const char *const aliases[] = {"127.0.0.1:5000/", "localhost:5000/",
                                          "127.0.0.2:5000/"};
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++) {
        char stolen[256];
        snprintf(stolen, sizeof stolen,
                 "{\"name\":\"stolen\",\"reference\":\"%sacme/app:1\",\"framework\":\"native\"}",
                 aliases[i]);
        th_expect_error(th_post(&d, "/v1/images", b_admin, stolen), 422, "invalid_value",
                        "reference");
    }
    /* a name the registry would not take is no scope (found by a probe:
     * evil/../acme/secret was signed with push) */
    th_expect_error(th_get(&d, "/v1/registry/token?scope=repository:globex/../acme/app:push",
                           b_admin),
                    400, "invalid_value", "scope");
    /* A token cohortd signed, shown as a password, buys what it holds and
     * nothing more: pull of acme/app, neither a push there nor another
     * tenant's repository; altered, it buys nothing. */
    th_resp r = th_get(&d, "/v1/registry/token?service=cohort-registry&"
                           "scope=repository:acme/app:pull", tok);
    char jwt[2048];
    snprintf(jwt, sizeof jwt, "%s", th_str(&r, "token"));
    th_free(&r);
    cr_assert(strchr(jwt, '.'), "no token: %s", jwt);
    cr_expect(pull_with(addr, "acme/app:1", jwt), "its pull token does not pull acme/app");
    cr_expect(!pull_with(addr, "globex/app:1", jwt), "acme's pull token pulled globex/");
    cr_expect(!push_with(addr, "acme/app:4", jwt), "a pull token pushed");
    char *sig = strrchr(jwt, '.') + 1;
    sig[3] = sig[3] == 'A' ? 'B' : 'A';
    cr_expect(!pull_with(addr, "acme/app:1", jwt), "an altered pull token pulled");

    /* A job of acme's runs its image: the agent, which has no credentials
     * of its own, pulls with the token its launch spec carries, through an
     * auth file: skopeo, wrapped here, never has it on its command line,
     * where every user of the host reads it. */
    char wrap[512], log[600], path[4096];
    snprintf(wrap, sizeof wrap, "%s/bin", d.dir);
    snprintf(log, sizeof log, "%s/skopeo.argv", d.dir);
    mkdir(wrap, 0755);
    snprintf(path, sizeof path, "%s/skopeo", wrap);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\necho \"$*\" >> '%s'\nexec /usr/bin/skopeo \"$@\"\n", log);
    fclose(f);
    chmod(path, 0755);
    char *old_path = strdup(getenv("PATH"));
    snprintf(path, sizeof path, "%s:%s", wrap, old_path);
    setenv("PATH", path, 1);
    const char *args[] = {"--cpus", "8", "--registry", addr, "--insecure-registry", addr, NULL};
    th_agent_start(&ag, &d, "n1", args);
    setenv("PATH", old_path, 1);
    free(old_path);
    th_must(th_post(&d, "/v1/images", a_admin,
                    "{\"name\":\"app\",\"reference\":\"acme/app:1\",\"framework\":\"native\"}"),
            201);
    th_put_text(&d, tok, "ws", "ok.sh", "#!/bin/sh\necho ran\n", "755");
    char seen[16], cmd[1200];
    long id = submit_as(tok, "ok.sh", "app", NULL);
    cr_expect(th_wait_state(&d, tok, id, "SUCCEEDED", 60000, seen), "the job is %s", seen);
    /* The token stays out of the worker's files on the node. */
    snprintf(cmd, sizeof cmd, "grep -rqs -e registry_token -e eyJ0eXAi '%s/workers'", ag.dir);
    cr_expect_neq(system(cmd), 0, "a registry token lies in the worker's files");
    snprintf(cmd, sizeof cmd, "grep -q 'acme/app' '%s'", log);
    cr_expect_eq(system(cmd), 0, "the wrapped skopeo never pulled acme/app");
    snprintf(cmd, sizeof cmd, "grep -q -e eyJ -e registry-token '%s'", log);
    cr_expect_neq(system(cmd), 0, "a token was on skopeo's command line");
}

/* A private image's registry password is sealed at rest (secrets.key beside
 * the registry's key, 0600 both, neither in the database): the database
 * holds no password, one kept in the clear by an earlier cohortd is sealed
 * at the next start, and jobs of both images still pull with it. */
Test(containers, registry_passwords_are_sealed_at_rest_and_still_pull, .timeout = 150)
{
    char addr[64], admin[80], listen[32], insecure[160], out[4096], sql[1024], seen[16], p[700];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", th_free_port());
    const char *dargs[] = {"--listen", listen, NULL};
    cohortd_args = dargs;
    platform_base();
    auth_registry(addr, sizeof addr);
    th_user(&d, "acme", "root", "tenant_admin", admin);
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\":\"sealed\",\"reference\":\"%s/acme/secret:1\",\"framework\":\"native\","
             "\"username\":\"robot\",\"password\":\"right-pw\"}", addr);
    th_must(th_post(&d, "/v1/images", admin, body), 201);
    long acme = th_id(&d, "/v1/tenants/acme", TH_ADMIN);
    snprintf(sql, sizeof sql,
             "INSERT INTO images(tenant_id, name, reference, framework, username, password,"
             " created_at) VALUES (%ld, 'legacy', '%s/acme/secret:1', 'native', 'robot',"
             " 'right-pw', 0)", acme, addr);
    th_db_query(&d, sql, out, sizeof out);
    th_db_query(&d, "SELECT name, password FROM images WHERE username IS NOT NULL ORDER BY name",
                out, sizeof out);
    cr_expect(strstr(out, "sealed|enc1:") != NULL, "not sealed: %s", out);
    cr_expect(strstr(out, "legacy|right-pw") != NULL, "the old row: %s", out);

    cr_assert_eq(th_stop(&d), 0);
    th_restart(&d, dargs);
    th_db_query(&d, "SELECT name, password FROM images WHERE username IS NOT NULL ORDER BY name",
                out, sizeof out);
    cr_expect(strstr(out, "right-pw") == NULL, "a password in the clear: %s", out);
    cr_expect(strstr(out, "legacy|enc1:") != NULL && strstr(out, "sealed|enc1:") != NULL,
              "not both sealed: %s", out);
    static const char *const keys[] = {"secrets.key", "registry-key.pem"};
    for (int i = 0; i < 2; i++) {
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", d.dir, keys[i]);
        cr_assert_eq(stat(p, &sb), 0, "%s", p);
        cr_expect_eq(sb.st_mode & 0777, 0600, "%s is %o", keys[i], (unsigned)(sb.st_mode & 0777));
    }

    snprintf(insecure, sizeof insecure, "%s,%s", th_registry(), addr);
    const char *args[] = {"--cpus", "8", "--registry", th_registry(), "--insecure-registry",
                          insecure, NULL};
    th_agent_start(&ag, &d, "n1", args);
    th_put_text(&d, tok, "ws", "x.sh", "#!/bin/sh\nexit 0\n", "755");
    static const char *const images[] = {"sealed", "legacy"};
    for (int i = 0; i < 2; i++) {
        long id = submit_as(tok, "x.sh", images[i], NULL);
        cr_expect(th_wait_state(&d, tok, id, "SUCCEEDED", 60000, seen), "%s: %s", images[i],
                  seen);
    }
}

/* ---- a network of the job's own ---- */

/* A job's ranks on one node meet over their own loopback, and a job of
 * another tenant on the same node reaches neither them nor the node's
 * services (cohortd, the registry), nor does the node itself reach them. */
Test(containers, a_job_on_one_node_has_a_network_of_its_own, .timeout = 120)
{
    char seen[16], env[512], path[700], text[65536];
    platform(NULL);
    /* acme: rank 0 listens on MASTER_PORT, rank 1 says hello after 8 s */
    th_put_text(&d, tok, "ws", "pair.sh",
                "#!/bin/sh\nif [ \"$RANK\" = 0 ]; then nc -l -p \"$MASTER_PORT\" > got.txt; "
                "else sleep 8; echo \"hello from rank 1 via $MASTER_ADDR\" | "
                "nc \"$MASTER_ADDR\" \"$MASTER_PORT\"; fi\n",
                "755");
    long victim = th_submit(&d, tok,
                            "{\"name\":\"pair\",\"image\":\"native\",\"workspace\":\"ws\","
                            "\"code_path\":\"pair.sh\",\"epochs\":1,\"lr\":0.1,\"batch_size\":1,"
                            "\"worker_spec\":\"cpu-small\",\"worker_count\":2}");
    cr_assert(th_wait_state(&d, tok, victim, "RUNNING", 30000, seen), "%s", seen);
    /* its port, as the agent was told it */
    snprintf(path, sizeof path, "/v1/jobs/%ld/workers", victim);
    th_resp r = th_get(&d, path, TH_ADMIN);
    long wid = (long)cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "items"),
                                                            0), "id")->valuedouble;
    th_free(&r);
    snprintf(path, sizeof path, "%s/workers/%ld/spec.json", ag.dir, wid);
    cr_assert_eq(th_read_text(path, text, sizeof text), 0, "%s", path);
    cJSON *spec = cJSON_Parse(text);
    const char *port = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(spec, "env"), "MASTER_PORT"));
    cr_assert_not_null(port);
    const char *cport = strrchr(d.base, ':') + 1;
    snprintf(env, sizeof env,
             ",\"env\":{\"VICTIM_PORT\":\"%s\",\"COHORTD_PORT\":\"%s\",\"REGISTRY\":\"%s\"}",
             port, cport, th_registry());
    /* globex, on the same node, tries the port, cohortd and the registry */
    th_put_text(&d, tok_b, "ws", "reach.sh",
                "#!/bin/sh\nt() { k=$1; shift; if \"$@\" > /dev/null 2>&1; then echo \"$k=reached\"; "
                "else echo \"$k=no\"; fi; }\n"
                "{ t VICTIM sh -c \"echo evil | nc -w 2 127.0.0.1 $VICTIM_PORT\"\n"
                "  t COHORTD wget -q -T 2 -O - http://127.0.0.1:$COHORTD_PORT/healthz\n"
                "  t REGISTRY wget -q -T 2 -O - http://$REGISTRY/v2/\n"
                "  t LO sh -c 'nc -l -p 40000 & sleep 0.3; echo x | nc -w 2 127.0.0.1 40000'\n"
                "  echo \"NETDEVS=$(ls /sys/class/net | tr '\\n' ' ')|\"\n"
                "} > reach.txt\n",
                "755");
    long attacker = submit_as(tok_b, "reach.sh", "native", env);
    cr_assert(th_wait_state(&d, tok_b, attacker, "SUCCEEDED", 30000, seen), "%s", seen);
    /* the node itself does not reach it either */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "echo host | nc -w 2 127.0.0.1 %s >/dev/null 2>&1", port);
    int host_reached = system(cmd) == 0;
    cJSON_Delete(spec);
    cr_assert(th_wait_state(&d, tok, victim, "SUCCEEDED", 30000, seen), "%s", seen);

    char *got = th_get_body(&d, "/v1/workspaces/ws/files/got.txt", tok);
    cr_expect_str_eq(got, "hello from rank 1 via 127.0.0.1\n", "rank 0 heard: %s", got);
    free(got);
    char *t = th_get_body(&d, "/v1/workspaces/ws/files/reach.txt", tok_b);
    /* its /sys shows its own network devices, not the node's (nor other
     * jobs' veths and their traffic counters) */
    static const char *const want[] = {"VICTIM=no", "COHORTD=no", "REGISTRY=no", "LO=reached",
                                       "NETDEVS=lo |"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(strstr(t, want[i]) != NULL, "not %s: %s", want[i], t);
    free(t);
    cr_expect(!host_reached, "the node reached the job's port %s", port);
    /* The namespace goes with the attempt's last worker (the agent's log
     * names its prefix). */
    char prefix[200] = "", line[1024], ns[300];
    snprintf(path, sizeof path, "%s.log", ag.dir);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        char *at = strstr(line, "/run/netns/"), *end = at ? strstr(at, "-j<job>") : NULL;
        if (end) /* "/run/netns/cohort-n1-HASH-j<job>-a<attempt>" */
            snprintf(prefix, sizeof prefix, "%.*s", (int)(end - at), at);
    }
    if (f)
        fclose(f);
    cr_assert(prefix[0], "the agent did not say where jobs' networks lie");
    snprintf(ns, sizeof ns, "%s-j%ld-a1", prefix, victim);
    struct stat sb;
    int gone = 0;
    for (int i = 0; i < 100 && !gone; i++, usleep(100000))
        gone = stat(ns, &sb) != 0;
    cr_expect(gone, "%s is still there", ns);
    snprintf(path, sizeof path, "/run/cohort-sys/%s", ns + strlen("/run/netns/"));
    cr_expect_neq(stat(path, &sb), 0, "its sysfs %s is still there", path);
}

/* A listener for the egress test: python3 in namespace ns (or the host's,
 * ns ""), on 0.0.0.0:port for 60 s, writing each peer's address to log. */
static void peer_logger(const char *ns, int port, const char *log)
{
    util_system("%s%s timeout 60 /usr/bin/python3 -c \"import socket\n"
                "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                "s.bind(('0.0.0.0', %d)); s.listen(8)\n"
                "while True:\n"
                "    c, a = s.accept(); open('%s', 'a').write(a[0] + '\\n'); c.close()\n"
                "\" >/dev/null 2>&1 &",
                ns[0] ? "ip netns exec " : "", ns, port, log);
}

/* The same for UDP datagrams to ports 4789 and 4790 (VXLAN's) and 5000 (a
 * control), a line "PORT ADDRESS" each. */
static void udp_logger(const char *ns, const char *log)
{
    util_system("ip netns exec %s timeout 60 /usr/bin/python3 -c \"import socket, threading\n"
                "def run(p):\n"
                "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', p))\n"
                "    while True:\n"
                "        b, a = s.recvfrom(2048); open('%s', 'a').write('%%d %%s\\n' %% (p, a[0]))\n"
                "for q in (4790, 5000): threading.Thread(target=run, args=(q,), daemon=True).start()\n"
                "run(4789)\n"
                "\" >/dev/null 2>&1 &",
                ns, log);
}

static char out_tag[16];

static void out_cleanup(void)
{
    if (out_tag[0])
        util_system("ip netns del %s 2>/dev/null; ip link del %s-h 2>/dev/null; "
                    "ip link del %s-p 2>/dev/null; true", out_tag, out_tag, out_tag);
    out_tag[0] = '\0';
}

/* --egress on: a job goes out through NAT to a network beyond the node (a
 * namespace of the test's at 198.51.100.2, a documentation range standing
 * in for the internet), and reaches nothing else: not the node at any of
 * its addresses, not another job's way out, not a private range beyond
 * the node (192.168.254.2, the same namespace). */
Test(containers, egress_on_goes_out_through_nat_and_reaches_nothing_of_the_node, .timeout = 150)
{
    char seen[16], path[700], hostlog[700], outlog[700], udplog[700], sub[32], env[1536];
    int net = 100 + getpid() % 150, hport = th_free_port();
    if (!th_can_sandbox())
        cr_skip_test("needs root to run containers");
    snprintf(out_tag, sizeof out_tag, "cte%d", (int)getpid() % 100000);
    cr_assert_eq(util_system("ip netns add %s && ip link add %s-h type veth peer name %s-n && "
                             "ip link set %s-n netns %s && ip addr add 198.51.100.1/24 dev %s-h && "
                             "ip addr add 192.168.254.1/24 dev %s-h && ip link set %s-h up && "
                             "ip -n %s addr add 198.51.100.2/24 dev %s-n && "
                             "ip -n %s addr add 192.168.254.2/24 dev %s-n && "
                             "ip -n %s link set %s-n up && ip -n %s link set lo up",
                             out_tag, out_tag, out_tag, out_tag, out_tag, out_tag, out_tag,
                             out_tag, out_tag, out_tag, out_tag, out_tag, out_tag, out_tag,
                             out_tag), 0);
    platform_base();
    snprintf(outlog, sizeof outlog, "%s/outside.log", d.dir);
    snprintf(hostlog, sizeof hostlog, "%s/host.log", d.dir);
    peer_logger(out_tag, 8080, outlog);
    snprintf(udplog, sizeof udplog, "%s/outside-udp.log", d.dir);
    udp_logger(out_tag, udplog);
    peer_logger("", hport, hostlog);
    snprintf(sub, sizeof sub, "10.78.%d.0/24", net);
    const char *args[] = {"--cpus", "8", "--memory-mb", "65536", "--egress", "on",
                          "--egress-subnet", sub, NULL};
    th_agent_start(&ag, &d, "n1", args);
    /* globex's job: the first lease of the subnet (.2), listening */
    th_put_text(&d, tok_b, "ws", "listen.sh", "#!/bin/sh\nnc -l -p 9000 > got.txt\n", "755");
    long victim = submit_as(tok_b, "listen.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok_b, victim, "RUNNING", 30000, seen), "%s", seen);
    snprintf(env, sizeof env,
             ",\"env\":{\"NET\":\"10.78.%d\",\"HPORT\":\"%d\",\"COHORTD\":\"%s\"}", net, hport,
             d.base + strlen("http://"));
    th_put_text(&d, tok, "ws", "out.sh",
                "#!/bin/sh\nt() { k=$1; shift; if \"$@\" > /dev/null 2>&1; then echo \"$k=reached\"; "
                "else echo \"$k=no\"; fi; }\n"
                "{ t OUT sh -c 'echo hi | nc -w 3 198.51.100.2 8080'\n"
                "  t PRIVATE sh -c 'echo hi | nc -w 3 192.168.254.2 8080'\n"
                "  t VICTIM sh -c \"echo evil | nc -w 3 $NET.2 9000\"\n"
                "  t GATEWAY sh -c \"echo hi | nc -w 3 $NET.1 $HPORT\"\n"
                "  t HOSTSIDE sh -c \"echo hi | nc -w 3 198.51.100.1 $HPORT\"\n"
                "  t COHORTD wget -q -T 3 -O - http://$COHORTD/healthz\n"
                "  for p in 4789 4790 5000; do ./sendudp udp 198.51.100.2 $p; done; sleep 1\n"
                "} > out.txt\n",
                "755");
    FILE *bf = fopen(COHORT_RENDEZVOUS_BIN, "rb"); /* its UDP mode */
    cr_assert_not_null(bf);
    static char bin[2 << 20];
    size_t bn = fread(bin, 1, sizeof bin, bf);
    fclose(bf);
    th_must(th_put_file(&d, "/v1/workspaces/ws/files/sendudp?mode=755", tok, bin, bn), 201);
    long id = submit_as(tok, "out.sh", "native", env);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 60000, seen), "%s", seen);
    char *t = th_get_body(&d, "/v1/workspaces/ws/files/out.txt", tok);
    static const char *const want[] = {"OUT=reached", "PRIVATE=no", "VICTIM=no",
                                       "GATEWAY=no",  "HOSTSIDE=no", "COHORTD=no"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(strstr(t, want[i]) != NULL, "not %s: %s", want[i], t);
    free(t);
    /* Beyond the node, the job is the node: masqueraded behind 198.51.100.1. */
    char text[4096] = "";
    th_read_text(outlog, text, sizeof text);
    cr_expect_str_eq(text, "198.51.100.1\n", "the outside saw: %s", text);
    text[0] = '\0';
    th_read_text(hostlog, text, sizeof text);
    cr_expect_str_eq(text, "", "the node's listener was reached from: %s", text);
    /* Nothing from a job speaks into any node's overlay (VXLAN, UDP 4789..). */
    text[0] = '\0';
    th_read_text(udplog, text, sizeof text);
    cr_expect_str_eq(text, "5000 198.51.100.1\n", "UDP the outside got from a job: %s", text);
    snprintf(path, sizeof path, "/v1/jobs/%ld/cancel", victim);
    th_must(th_post(&d, path, tok_b, NULL), 200);
}

/* A job names files with bytes that are not UTF-8: the workspace's listing
 * is still JSON, lists the rest, and says how many it could not list. */
Test(containers, a_file_named_in_bytes_not_utf8_leaves_the_listing_json)
{
    char seen[16];
    platform(NULL);
    th_put_text(&d, tok, "ws", "names.sh",
                "#!/bin/sh\nprintf x > \"$(printf 'bad\\377name')\"\n"
                "mkdir \"$(printf 'dir\\376')\" && printf y > \"$(printf 'dir\\376')/in.txt\"\n"
                "printf z > good.txt\n",
                "755");
    long id = submit_as(tok, "names.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 30000, seen), "%s", seen);
    th_resp r = th_get(&d, "/v1/workspaces/ws/files", tok);
    cr_assert_eq(r.status, 200);
    cr_assert_not_null(r.json, "not JSON: %s", r.body);
    cr_expect(strstr(r.body, "good.txt") != NULL, "%s", r.body);
    cr_expect_eq(th_num(&r, "unlisted_not_utf8"), 2, "%s", r.body);
    th_free(&r);
}

/* A job that writes past its tenant's quota into a file it deleted and
 * keeps open, which no walk of the volumes sees, is stopped all the same:
 * its agent counts such files in every heartbeat (found by a probe: 1 GiB
 * past a 100 MB quota that way). */
Test(containers, a_deleted_open_file_counts_in_the_storage_quota, .timeout = 180)
{
    char seen[16], p[64];
    const char *args[] = {"--storage-scan", "300", "--heartbeat", "1", NULL};
    cohortd_args = args;
    platform(NULL);
    /* Three ways to keep 3 MiB nobody can name (the second and third found
     * by a probe): an open descriptor; a mapping whose descriptor is
     * closed; and one deleted file among more than the agent once told
     * apart (256), held by a later process. */
    static const struct {
        const char *name, *text;
    } ways[] = {
        {"hide-fd.sh", "#!/bin/sh\nexec 7>hidden.bin\nrm -f hidden.bin\n"
                       "dd if=/dev/zero bs=1048576 count=3 >&7 2>/dev/null\nsync\nsleep 60\n"},
        {"hide-map.sh", "#!/bin/sh\nexec ./hold hold-mapped hidden.bin 3145728 60\n"},
        {"hide-many.sh", "#!/bin/sh\ni=0\nwhile [ $i -lt 300 ]; do exec 3>e$i; rm -f e$i; "
                         "sleep 60 & i=$((i + 1)); done\nexec 3>&-\n"
                         "( exec 7>hidden.bin; rm -f hidden.bin; dd if=/dev/zero bs=1048576 "
                         "count=3 >&7 2>/dev/null; sync; sleep 60 ) &\nwait\n"},
    };
    for (size_t i = 0; i < sizeof ways / sizeof *ways; i++)
        th_put_text(&d, tok, "ws", ways[i].name, ways[i].text, "755");
    FILE *f = fopen(COHORT_RENDEZVOUS_BIN, "rb"); /* it maps a file, asked to */
    cr_assert_not_null(f);
    static char bin[2 << 20];
    size_t n = fread(bin, 1, sizeof bin, f);
    fclose(f);
    th_must(th_put_file(&d, "/v1/workspaces/ws/files/hold?mode=755", tok, bin, n), 201);
    th_put_quota(&d, "acme", "{\"max_storage_bytes\":2097152}"); /* its program fits */
    for (size_t i = 0; i < sizeof ways / sizeof *ways; i++) {
        long id = submit_as(tok, ways[i].name, "native", NULL);
        cr_expect(th_wait_state(&d, tok, id, "FAILED", 40000, seen), "%s: the job is %s",
                  ways[i].name, seen);
        snprintf(p, sizeof p, "/v1/jobs/%ld", id);
        th_resp r = th_get(&d, p, tok);
        cr_expect(strstr(r.body, "storage_quota_exceeded") != NULL, "%s: %s", ways[i].name,
                  r.body);
        th_free(&r);
        usleep(1500 * 1000); /* its workers' ends reported: what they held is gone */
    }
}

/* A worker its agent adopted after a restart is measured as one it
 * launched: a deleted file it holds open from then on counts, and stops
 * it past the quota (before, the agent knew a workspace's file system only
 * from a launch, and an adopted worker hid what it liked). */
Test(containers, an_adopted_workers_deleted_open_file_counts_too, .timeout = 120)
{
    char seen[16], p[64];
    const char *args[] = {"--storage-scan", "300", "--heartbeat", "1", NULL};
    cohortd_args = args;
    platform(NULL);
    th_put_text(&d, tok, "ws", "later.sh",
                "#!/bin/sh\nwhile [ ! -e go ]; do sleep 0.2; done\nexec 7>hidden.bin\n"
                "rm -f hidden.bin\ndd if=/dev/zero bs=1048576 count=3 >&7 2>/dev/null\nsync\n"
                "sleep 60\n",
                "755");
    th_put_quota(&d, "acme", "{\"max_storage_bytes\":2097152}");
    long id = submit_as(tok, "later.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok, id, "RUNNING", 40000, seen), "the job is %s", seen);
    th_agent_kill9(&ag);
    usleep(300 * 1000);
    th_agent_restart(&ag, &d, NULL);
    th_put_text(&d, tok, "ws", "go", "", "644");
    cr_expect(th_wait_state(&d, tok, id, "FAILED", 40000, seen), "the job is %s", seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    th_resp r = th_get(&d, p, tok);
    cr_expect(strstr(r.body, "storage_quota_exceeded") != NULL, "%s", r.body);
    cr_expect_eq(th_num(&r, "attempt"), 1, "the worker was started again, not adopted: %s",
                 r.body);
    th_free(&r);
}

/* A job that writes past its tenant's storage quota inside its workspace
 * is stopped within a walk of the volumes, saying why, and the tenant may
 * submit nothing more until it frees some; another tenant runs on. */
Test(containers, a_job_that_writes_past_the_storage_quota_is_stopped, .timeout = 120)
{
    char seen[16], p[64];
    const char *args[] = {"--storage-scan", "300", NULL};
    cohortd_args = args;
    platform(NULL);
    th_put_quota(&d, "acme", "{\"max_storage_bytes\":1048576}");
    th_resp r;
    th_put_text(&d, tok, "ws", "fill.sh",
                "#!/bin/sh\ndd if=/dev/zero of=big bs=1048576 count=3 2>/dev/null\nsleep 60\n",
                "755");
    th_put_text(&d, tok_b, "ws", "calm.sh", "#!/bin/sh\nsleep 8\n", "755");
    long id = submit_as(tok, "fill.sh", "native", NULL);
    long calm = submit_as(tok_b, "calm.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok, id, "FAILED", 30000, seen), "job is %s", seen);
    snprintf(p, sizeof p, "/v1/jobs/%ld", id);
    r = th_get(&d, p, tok);
    cr_expect(strstr(r.body, "storage_quota_exceeded") != NULL, "%s", r.body);
    th_free(&r);
    th_expect_error(th_post(&d, "/v1/jobs", tok,
                            "{\"name\":\"more\",\"image\":\"native\",\"workspace\":\"ws\","
                            "\"code_path\":\"fill.sh\",\"epochs\":1,\"lr\":0.1,\"batch_size\":1,"
                            "\"worker_spec\":\"cpu-small\",\"worker_count\":1}"),
                    507, "storage_quota_exceeded", NULL);
    cr_expect(th_wait_state(&d, tok_b, calm, "SUCCEEDED", 30000, seen), "the other tenant's "
              "job is %s", seen);
}

/* ---- btrfs: the file system stops a write at the quota ---- */

static char btrfs_img[80];

static void btrfs_cleanup(void)
{
    if (platform_dir[0]) {
        util_system("umount -l '%s' 2>/dev/null; rmdir '%s' 2>/dev/null; true", platform_dir,
                    platform_dir);
        platform_dir[0] = '\0';
    }
    if (btrfs_img[0]) {
        unlink(btrfs_img);
        btrfs_img[0] = '\0';
    }
}

/*
 * cohortd's data dir on btrfs (a loop-mounted file of the test's): every
 * workspace is a subvolume in its tenant's qgroup, limited to its quota, so
 * a job's write past the quota fails in the job itself with EDQUOT ("Disk
 * quota exceeded"), at once; the quota can be raised, and a workspace
 * deleted, as anywhere.
 */
Test(containers, on_btrfs_a_write_past_the_quota_fails_in_the_job, .timeout = 150)
{
    char seen[16];
    if (!th_can_sandbox())
        cr_skip_test("needs root to mount a file system");
    if (access("/usr/bin/btrfs", X_OK) != 0 || access("/usr/sbin/mkfs.btrfs", X_OK) != 0)
        cr_skip_test("btrfs-progs is not installed (scripts/install-deps installs it)");
    snprintf(btrfs_img, sizeof btrfs_img, "/tmp/cohort-btrfs-%d.img", (int)getpid());
    snprintf(platform_dir, sizeof platform_dir, "/tmp/cohort-btrfs-%d", (int)getpid());
    cr_assert_eq(util_system("truncate -s 400M '%s' && mkfs.btrfs -q '%s' >/dev/null 2>&1 && "
                             "mkdir -p '%s' && mount -o loop '%s' '%s' && chmod 0711 '%s'",
                             btrfs_img, btrfs_img, platform_dir, btrfs_img, platform_dir,
                             platform_dir),
                 0, "cannot make a btrfs file system at %s", platform_dir);
    const char *args[] = {"--storage-scan", "60000", NULL}; /* the walk stays out of it */
    cohortd_args = args;
    platform(NULL);
    th_put_quota(&d, "acme", "{\"max_storage_bytes\":2097152}");
    th_resp r;
    /* What it says goes to its log: the workspace, full, takes nothing more. */
    th_put_text(&d, tok, "ws", "fill.sh",
                "#!/bin/sh\ndd if=/dev/zero of=big bs=1048576 count=5 conv=fsync\n"
                "echo \"dd=$? size=$(wc -c < big)\"\n",
                "755");
    long id = submit_as(tok, "fill.sh", "native", NULL);
    cr_assert(th_wait_state(&d, tok, id, "SUCCEEDED", 60000, seen), "job is %s", seen);
    char p[96];
    snprintf(p, sizeof p, "/v1/jobs/%ld/logs?rank=0", id);
    r = th_get(&d, p, tok);
    cr_expect(strstr(r.body, "dd=0") == NULL, "dd wrote 5 MiB past a 2 MiB quota: %s", r.body);
    cr_expect(strstr(r.body, "quota exceeded") != NULL, "not EDQUOT: %s", r.body);
    const char *sz = strstr(r.body, "size=");
    long big = sz ? atol(sz + 5) : -1;
    cr_expect(big >= 0 && big <= 2097152, "big is %ld bytes: %s", big, r.body);
    th_free(&r);
    /* globex, without a quota of its own (the default, 20 GiB), writes on */
    th_put_text(&d, tok_b, "ws", "fill.sh",
                "#!/bin/sh\ndd if=/dev/zero of=big bs=1048576 count=5 conv=fsync\n", "755");
    long other = submit_as(tok_b, "fill.sh", "native", NULL);
    cr_expect(th_wait_state(&d, tok_b, other, "SUCCEEDED", 60000, seen), "globex: %s", seen);
    /* a workspace (a subvolume) is deleted as any */
    th_must(th_post(&d, "/v1/workspaces", tok, "{\"name\":\"gone\"}"), 201);
    r = th_req(&d, "DELETE", "/v1/workspaces/gone", tok, NULL, NULL, 0, NULL);
    cr_expect(r.status == 200 || r.status == 204, "delete: %ld %s", r.status, r.body);
    th_free(&r);
}
