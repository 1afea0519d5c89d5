/*
 * test_cli: the built `cohort` binary against a real cohortd (and, where
 * jobs must run, a real agent with containers): login and its file, the
 * exit codes of refusals, unreachable servers and usage errors, job files
 * and flags, code uploads that send only what changed, --follow with the
 * job's own result, logs, cancel, usage and invoices as JSON and CSV, and
 * README's first session run as printed.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/util.h"
#include "tests/harness.h"

static th_daemon d;
static th_agent ag;
static int have_agent;
static char tok[80];
static char work[256]; /* the test's directory: HOME, code, outputs */

static void teardown(void)
{
    if (have_agent)
        th_agent_cleanup(&ag);
    have_agent = 0;
    th_stop(&d);
    th_cleanup(&d);
    if (work[0] && !getenv("COHORT_TEST_KEEP"))
        util_system("rm -rf '%s'", work);
    work[0] = '\0';
}

TestSuite(cli, .fini = teardown, .timeout = 240);

/* cohortd and a fresh work dir. */
static void bare_platform(void)
{
    th_start(&d, NULL);
    snprintf(work, sizeof work, "/tmp/cohort-cli-XXXXXX");
    cr_assert(mkdtemp(work), "mkdtemp");
    util_system("mkdir -p '%s/home'", work);
}

/* The same with a member alice of acme (tok). */
static void platform(void)
{
    bare_platform();
    th_user(&d, "acme", "alice", "member", tok);
}

/* A node of 2 CPUs, as make run's on a small machine. */
static void agent(void)
{
    if (!th_can_sandbox())
        cr_skip_test("needs root to run containers");
    const char *extra[] = {"--cpus", "2", "--memory-mb", "8192", "--image-cache",
                           th_shared_image_cache(), NULL};
    th_agent_start(&ag, &d, "n1", extra);
    have_agent = 1;
}

/* The output of the last run. */
static char out[1 << 16], err[1 << 14];

/*
 * Runs `cohort ARGS` (ARGS: shell words, formatted) in the work dir with
 * HOME there, COHORT_URL set to cohortd, and COHORT_TOKEN to token unless
 * it is NULL (then the login's); stdin from the file input (or /dev/null).
 * Its stdout and stderr land in out and err; returns its exit status.
 */
static int run(const char *token, const char *input, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int run(const char *token, const char *input, const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char tokenv[128] = "";
    if (token)
        snprintf(tokenv, sizeof tokenv, "COHORT_TOKEN='%s' ", token);
    int me = (int)getpid(); /* a forked child runs beside its parent */
    int st = util_system("cd '%s' && env -u COHORT_TOKEN -u COHORT_URL -u XDG_CONFIG_HOME "
                         "HOME='%s/home' COHORT_URL='%s' %s%s %s < %s > out-%d.txt 2> err-%d.txt",
                         work, work, d.base, tokenv, COHORT_CLI_BIN, args,
                         input ? input : "/dev/null", me, me);
    char p[400];
    snprintf(p, sizeof p, "%s/out-%d.txt", work, me);
    th_read_text(p, out, sizeof out);
    snprintf(p, sizeof p, "%s/err-%d.txt", work, me);
    th_read_text(p, err, sizeof err);
    cr_log_info("cohort %s -> %d\nstdout: %s\nstderr: %s", args, WEXITSTATUS(st), out, err);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_file(const char *rel, const char *text, int mode)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", work, rel);
    char *slash = strrchr(p, '/');
    *slash = '\0';
    util_system("mkdir -p '%s'", p);
    *slash = '/';
    FILE *f = fopen(p, "w");
    cr_assert(f, "cannot write %s", p);
    fputs(text, f);
    fclose(f);
    chmod(p, (mode_t)mode);
}

/* The number before `what` in err ("3 files sent" -> 3), or -1. */
static long count_before(const char *what)
{
    const char *p = strstr(err, what);
    if (!p)
        return -1;
    while (p > err && p[-1] == ' ')
        p--;
    while (p > err && p[-1] >= '0' && p[-1] <= '9')
        p--;
    return strtol(p, NULL, 10);
}

Test(cli, login_keeps_the_token_private_and_whoami_reads_it)
{
    platform();
    write_file("tok.txt", tok, 0600);
    cr_assert_eq(run(NULL, "tok.txt", "login %s", d.base), 0, "%s", err);
    cr_expect(strstr(out, "alice (member) of acme"), "%s", out);
    char p[400];
    struct stat sb;
    snprintf(p, sizeof p, "%s/home/.config/cohort/config", work);
    cr_assert_eq(stat(p, &sb), 0, "no config at %s", p);
    cr_expect_eq(sb.st_mode & 0777, 0600, "config mode %o", sb.st_mode & 0777);
    snprintf(p, sizeof p, "%s/home/.config/cohort", work);
    stat(p, &sb);
    cr_expect_eq(sb.st_mode & 0077, 0, "config dir mode %o", sb.st_mode & 0777);
    /* the login's token, no COHORT_TOKEN */
    cr_assert_eq(run(NULL, NULL, "whoami"), 0);
    cr_expect(strstr(out, "alice (member) of acme"), "%s", out);
    cr_assert_eq(run(NULL, NULL, "--json whoami"), 0);
    cJSON *me = cJSON_Parse(out);
    cr_assert(me, "--json printed no JSON: %s", out);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(me, "tenant")), "acme");
    cJSON_Delete(me);
    cr_assert_eq(run(NULL, NULL, "whoami -o user,role"), 0);
    cr_expect_str_eq(out, "alice\tmember\n");
    /* a wrong token is refused at login and nothing is kept */
    write_file("bad.txt", "coh_0000000000000000000000000000000000000000000000000000000000000000\n",
               0600);
    cr_expect_eq(run(NULL, "bad.txt", "login %s", d.base), 3);
    cr_assert_eq(run(NULL, NULL, "whoami"), 0, "the earlier login was lost");
    cr_assert_eq(run(NULL, NULL, "logout"), 0);
    cr_expect_eq(run(NULL, NULL, "whoami"), 2, "logged out, still answered");
    cr_expect(strstr(err, "not logged in"), "%s", err);
}

Test(cli, errors_have_distinct_exit_codes)
{
    platform();
    cr_expect_eq(run("coh_wrong", NULL, "jobs"), 3);
    cr_expect(strstr(err, "unauthorized (401)"), "%s", err);
    cr_expect_eq(run(tok, NULL, "show 424242"), 3);
    cr_expect(strstr(err, "not_found (404)"), "%s", err);
    cr_expect_eq(run(tok, NULL, "show x"), 2);
    cr_expect_eq(run(tok, NULL, "jobs --bogus"), 2);
    cr_expect_eq(run(tok, NULL, "no-such-command"), 2);
    cr_expect_eq(run(tok, NULL, "submit --image native --workers two run.sh"), 2);
    cr_expect(strstr(err, "worker_count must be a whole number"), "%s", err);
    /* a refusal names the API's code and field */
    cr_expect_eq(run(tok, NULL, "submit --image native --workspace none --spec cpu-small run.sh"), 3);
    cr_expect(strstr(err, "(404)") || strstr(err, "(422)"), "%s", err);
    /* a server that is down: no answer after the retries */
    int port = th_closed_port();
    int st = util_system("cd '%s' && HOME='%s/home' COHORT_URL=http://127.0.0.1:%d COHORT_TOKEN=%s "
                         "%s jobs > out.txt 2> err.txt", work, work, port, tok, COHORT_CLI_BIN);
    char p[400];
    snprintf(p, sizeof p, "%s/err.txt", work);
    th_read_text(p, err, sizeof err);
    cr_expect_eq(WEXITSTATUS(st), 4, "%s", err);
    cr_expect(strstr(err, "cannot reach the server"), "%s", err);
    cr_expect_eq(run(tok, NULL, "--help"), 0);
    cr_expect(strstr(out, "\n  submit [JOBFILE] [options] [CODE_PATH [ARGS...]]\n  quote "), "%s", out);
    cr_expect_eq(run(tok, NULL, "logs --help"), 0);
    cr_expect(strstr(out, "cohort logs ID"), "%s", out);
}

static const char job_yaml[] =
    "# the smoke job\n"
    "name: smoke\n"
    "image: native\n"
    "code: .\n"
    "workspace: smoke-code\n"
    "code_path: run.sh\n"
    "worker_spec: cpu-small\n"
    "worker_count: 2\n"
    "epochs: 3\n"
    "lr: 0.05\n"
    "args: [--flag, \"two words\"]\n"
    "env:\n"
    "  EXIT_WITH: \"3\"\n";

static void code_dir(void)
{
    write_file("code/job.yaml", job_yaml, 0644);
    write_file("code/run.sh",
               "#!/bin/sh\necho \"rank $RANK of $WORLD_SIZE says $*\"\n"
               "echo \"to stderr $RANK\" >&2\nexit ${EXIT_WITH:-0}\n", 0755);
    write_file("code/sub/lib.py", "x = 1\n", 0644);
    write_file("code/data/big.bin", "not sent\n", 0644);
    write_file("code/scratch.tmp", "not sent\n", 0644);
    write_file("code/keep.tmp", "sent: taken back in\n", 0644);
    write_file("code/.cohortignore", "# not code\ndata/\n*.tmp\n!keep.tmp\n", 0644);
    write_file("code/.git/config", "never sent\n", 0644);
}

Test(cli, submit_uploads_only_what_changed)
{
    platform();
    code_dir();
    cr_assert_eq(run(tok, NULL, "submit code/job.yaml"), 0, "%s", err);
    cr_expect(strstr(out, "job 1 submitted: PENDING, 2 x cpu-small"), "%s", out);
    /* run.sh, sub/lib.py, keep.tmp, job.yaml, .cohortignore */
    cr_expect_eq(count_before("files sent"), 5, "%s", err);
    cJSON *files = th_get_json(&d, "/v1/workspaces/smoke-code/files", tok);
    char *listed = cJSON_PrintUnformatted(files);
    cr_expect(strstr(listed, "\"path\":\"run.sh\",\"size\":") && strstr(listed, "\"mode\":\"755\""),
              "%s", listed);
    cr_expect(strstr(listed, "sub/lib.py") && strstr(listed, "keep.tmp"), "%s", listed);
    cr_expect(!strstr(listed, "data/") && !strstr(listed, "scratch.tmp") && !strstr(listed, ".git"),
              "%s", listed);
    free(listed);
    cJSON_Delete(files);
    /* what the file says reached the job, typed */
    cJSON *j = th_get_json(&d, "/v1/jobs/1", tok);
    cr_expect_eq(cJSON_GetObjectItem(j, "epochs")->valuedouble, 3);
    cr_expect_float_eq(cJSON_GetObjectItem(j, "lr")->valuedouble, 0.05, 1e-9);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "args"), 1)),
                     "two words");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "env"),
                                                              "EXIT_WITH")), "3");
    cJSON_Delete(j);
    /* again: nothing changed, nothing sent */
    cr_assert_eq(run(tok, NULL, "submit code/job.yaml --workers 1 --name again"), 0, "%s", err);
    cr_expect_eq(count_before("files sent"), 0, "%s", err);
    cr_expect_eq(count_before("unchanged"), 5, "%s", err);
    j = th_get_json(&d, "/v1/jobs/2", tok);
    cr_expect_eq(cJSON_GetObjectItem(j, "worker_count")->valuedouble, 1, "the flag lost");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "name")), "again");
    cJSON_Delete(j);
    /* one file's content, one file's mode */
    write_file("code/sub/lib.py", "x = 2\n", 0644);
    write_file("code/keep.tmp", "sent: taken back in\n", 0755);
    cr_assert_eq(run(tok, "/dev/null", "--json submit code/job.yaml"), 0, "%s", err);
    cr_expect_eq(count_before("files sent"), 2, "%s", err);
    cr_expect_eq(count_before("unchanged"), 3, "%s", err);
    j = cJSON_Parse(out);
    cr_assert(j, "--json submit printed %s", out);
    cr_expect_eq(cJSON_GetObjectItem(j, "id")->valuedouble, 3);
    cJSON_Delete(j);
    /* flags alone, the program and its arguments last */
    cr_assert_eq(run(tok, NULL, "submit --image native --spec cpu-small --workspace smoke-code "
                                "run.sh --json x"), 0, "%s", err);
    j = th_get_json(&d, "/v1/jobs/4", tok);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "name")), "run");
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "args"), 0)),
                     "--json", "an argument of the program was taken as cohort's");
    cJSON_Delete(j);
    /* the list, for scripts */
    cr_assert_eq(run(tok, NULL, "jobs -o id,state,worker_count"), 0);
    cr_expect_str_eq(out, "4\tPENDING\t1\n3\tPENDING\t2\n2\tPENDING\t1\n1\tPENDING\t2\n");
    cr_assert_eq(run(tok, NULL, "cancel 1 2 3 4"), 0, "%s", err);
    cr_assert_eq(run(tok, NULL, "jobs"), 0);
    cr_expect_str_eq(out, "ID  NAME  STATE  WORKERS  COST  AGE  REASON\n", "ended jobs listed");
    cr_assert_eq(run(tok, NULL, "jobs --all -o id,state"), 0);
    cr_expect(strstr(out, "1\tCANCELLED\n"), "%s", out);
}

Test(cli, job_files_are_checked_before_anything_is_sent)
{
    platform();
    write_file("unknown.yaml", "name: x\nimage: native\nwokers: 2\n", 0644);
    cr_expect_eq(run(tok, NULL, "submit unknown.yaml"), 2);
    cr_expect(strstr(err, "unknown field wokers"), "%s", err);
    write_file("alias.yaml", "name: &n x\nimage: *n\n", 0644);
    cr_expect_eq(run(tok, NULL, "submit alias.yaml"), 2);
    cr_expect(strstr(err, "line 1") && strstr(err, "not taken"), "%s", err);
    write_file("type.json", "{\"name\":\"x\",\"worker_count\":\"two\"}", 0644);
    cr_expect_eq(run(tok, NULL, "submit type.json"), 2);
    cr_expect(strstr(err, "worker_count must be a whole number"), "%s", err);
    write_file("list.yaml", "name: x\ndatasets: mnist\n", 0644);
    cr_expect_eq(run(tok, NULL, "submit list.yaml"), 2);
    cr_expect(strstr(err, "datasets must be a list"), "%s", err);
    cJSON *jobs = th_get_json(&d, "/v1/jobs", tok);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(jobs, "items")), 0, "a bad file made a job");
    cJSON_Delete(jobs);
}

Test(cli, a_workspace_goes_and_comes_back_whole)
{
    platform();
    code_dir();
    cr_assert_eq(run(tok, NULL, "ws push code mine"), 0, "%s", err);
    cr_expect_eq(count_before("files sent"), 5, "%s", err);
    cr_assert_eq(run(tok, NULL, "ws ls mine -o path,mode"), 0);
    cr_expect_str_eq(out, ".cohortignore\t644\njob.yaml\t644\nkeep.tmp\t644\nrun.sh\t755\n"
                          "sub/lib.py\t644\n");
    /* on a terminal (script(1) gives it one), a progress bar; piped, none */
    cr_expect(!strstr(err, "upload"), "a bar when piped: %s", err);
    util_system("cd '%s' && HOME='%s/home' COHORT_URL='%s' COHORT_TOKEN='%s' "
                "script -qec '%s ws push code tty' /dev/null > tty.txt 2>&1", work, work, d.base, tok,
                COHORT_CLI_BIN);
    char p[400], tty[4096];
    snprintf(p, sizeof p, "%s/tty.txt", work);
    th_read_text(p, tty, sizeof tty);
    cr_expect(strstr(tty, "upload 100%") && strstr(tty, "/s"), "no progress bar: %s", tty);
    cr_assert_eq(run(tok, NULL, "ws pull mine back"), 0, "%s", err);
    cr_expect_eq(util_system("cd '%s' && cmp code/run.sh back/run.sh && cmp code/sub/lib.py "
                             "back/sub/lib.py && test -x back/run.sh && test ! -x back/job.yaml",
                             work), 0, "what came back differs");
    cr_assert_eq(run(tok, NULL, "ds push code/sub lib --seal"), 0, "%s", err);
    cr_expect(strstr(err, "sealed"), "%s", err);
    cr_expect_eq(run(tok, NULL, "ds push code/sub lib"), 0, "nothing changed, yet %s", err);
    cr_expect_eq(count_before("files sent"), 0, "%s", err);
    write_file("code/sub/lib.py", "x = 3\n", 0644);
    cr_expect_eq(run(tok, NULL, "ds push code/sub lib"), 3, "a sealed dataset took a file");
    cr_expect(strstr(err, "(409)"), "%s", err);
    cr_assert_eq(run(tok, NULL, "ds ls -o name,sealed"), 0);
    cr_expect_str_eq(out, "lib\ttrue\n");
}

Test(cli, follow_ends_with_the_jobs_result)
{
    platform();
    agent();
    code_dir();
    /* two ranks, both exit 3: every line of each, led by its rank; exit 1 */
    cr_assert_eq(run(tok, NULL, "submit code/job.yaml --follow"), 1, "%s\n%s", out, err);
    /* (the agent puts --local_rank=N before the job's own arguments) */
    cr_expect(strstr(out, "[0] rank 0 of 2 says --local_rank=0 --flag two words\n"), "%s", out);
    cr_expect(strstr(out, "[1] rank 1 of 2 says --local_rank=1 --flag two words\n"), "%s", out);
    cr_expect(strstr(out, "[1] to stderr 1\n"), "%s", out);
    cr_expect(strstr(err, "job 1 FAILED"), "%s", err);
    /* one rank, exit 0: its lines without a lead; exit 0 */
    cr_assert_eq(run(tok, NULL, "submit code/job.yaml --workers 1 --env EXIT_WITH=0 --follow"), 0,
                 "%s\n%s", out, err);
    cr_expect(strstr(out, "\nrank 0 of 1 says --local_rank=0 --flag two words\n") && !strstr(out, "[0]"),
              "%s", out);
    cr_expect(strstr(err, "job 2 SUCCEEDED"), "%s", err);
    /* logs of one rank, afterwards */
    cr_assert_eq(run(tok, NULL, "logs 1 --rank 1"), 0, "%s", err);
    cr_expect(strstr(out, "rank 1 of 2 says") && !strstr(out, "rank 0"), "%s", out);
    cr_assert_eq(run(tok, NULL, "workers 1 -o rank,exit_code"), 0, "%s", err);
    cr_expect_str_eq(out, "0\t3\n1\t3\n");
    /* a running job, cancelled: follow ends, and says so with exit 1 */
    write_file("code/sleep.sh", "#!/bin/sh\necho started\nexec sleep 60\n", 0755);
    cr_assert_eq(run(tok, NULL, "submit code/job.yaml --workers 1 sleep.sh"), 0, "%s", err);
    char seen[16];
    cr_assert(th_wait_state(&d, tok, 3, "RUNNING", 30000, seen), "job 3 %s", seen);
    /* cancelled 2 s into the follow, from another shell */
    util_system("(sleep 2; HOME='%s/home' COHORT_URL='%s' COHORT_TOKEN='%s' %s cancel 3 "
                "> '%s/cancel.txt' 2>&1) &", work, d.base, tok, COHORT_CLI_BIN, work);
    cr_assert_eq(run(tok, NULL, "logs 3 -f"), 0, "%s", err);
    cr_expect(strstr(out, "started"), "%s", out);
    cr_assert(th_wait_state(&d, tok, 3, "CANCELLED", 30000, seen), "job 3 %s", seen);
    cr_assert_eq(run(tok, NULL, "show 3 -o state"), 0);
    cr_expect_str_eq(out, "CANCELLED\n");
    /* what the jobs cost: as JSON, and the month's invoice as CSV */
    cr_assert_eq(run(tok, NULL, "--json usage --by job"), 0, "%s", err);
    cJSON *u = cJSON_Parse(out);
    cr_assert(u, "usage --json: %s", out);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(u, "items")), 3, "%s", out);
    cr_expect(cJSON_GetObjectItem(cJSON_GetObjectItem(u, "total"), "worker_seconds")->valuedouble >= 3,
              "%s", out);
    cJSON_Delete(u);
    cr_assert_eq(run(tok, NULL, "invoice --csv"), 0, "%s", err);
    cr_expect(!strncmp(out, "job_id,job_name,worker_seconds,gpu_seconds,amount,currency\n", 58), "%s", out);
    cr_expect(strstr(out, "\n1,\"smoke\",") && strstr(out, "\n2,\"smoke\","), "%s", out);
}

/*
 * A proxy in front of cohortd that loses one answer: the first POST /v1/jobs
 * reaches cohortd, which makes the job, and its client gets the connection
 * closed instead of the answer.  One request per connection (it closes each
 * after its answer; libcurl then connects again).
 */
struct lossy {
    int lsock, port, lost;
    pthread_t t;
};

/* Reads one HTTP message (headers, then Content-Length bytes) from fd. */
static ssize_t read_message(int fd, char *buf, size_t n)
{
    size_t got = 0;
    for (;;) {
        buf[got] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            const char *cl = strcasestr(buf, "\r\nContent-Length:");
            size_t want = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0);
            if (got >= want)
                return (ssize_t)got;
        }
        if (got + 1 >= n)
            return -1;
        ssize_t r = read(fd, buf + got, n - 1 - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
}

static void *lossy_run(void *arg)
{
    struct lossy *l = arg;
    static char req[1 << 16], resp[1 << 16];
    int c;
    while ((c = accept(l->lsock, NULL, NULL)) >= 0) {
        ssize_t n = read_message(c, req, sizeof req);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        a.sin_port = htons((uint16_t)atoi(strrchr(d.base, ':') + 1));
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (n > 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0 && write(s, req, (size_t)n) == n) {
            ssize_t m = read_message(s, resp, sizeof resp);
            if (!l->lost && !strncmp(req, "POST /v1/jobs ", 14))
                l->lost = 1; /* made, and its answer lost */
            else if (m > 0 && write(c, resp, (size_t)m) != m)
                cr_log_info("proxy: short write");
        }
        close(s);
        close(c);
    }
    return NULL;
}

static void lossy_start(struct lossy *l)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    l->lsock = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(bind(l->lsock, (struct sockaddr *)&a, sizeof a) == 0 && listen(l->lsock, 16) == 0);
    getsockname(l->lsock, (struct sockaddr *)&a, &len);
    l->port = ntohs(a.sin_port);
    pthread_create(&l->t, NULL, lossy_run, l);
}

Test(cli, a_lost_answer_never_makes_two_jobs)
{
    platform();
    th_must(th_post(&d, "/v1/workspaces", tok, "{\"name\":\"ws\"}"), 201);
    th_put_text(&d, tok, "ws", "run.sh", "#!/bin/sh\nexit 0\n", "755");
    struct lossy l = {0};
    lossy_start(&l);
    int st = util_system("cd '%s' && HOME='%s/home' COHORT_URL=http://127.0.0.1:%d COHORT_TOKEN=%s "
                         "%s submit --image native --workspace ws --spec cpu-small run.sh "
                         "> out.txt 2> err.txt", work, work, l.port, tok, COHORT_CLI_BIN);
    shutdown(l.lsock, SHUT_RDWR);
    close(l.lsock);
    pthread_join(l.t, NULL);
    char p[400];
    snprintf(p, sizeof p, "%s/out.txt", work);
    th_read_text(p, out, sizeof out);
    cr_assert(l.lost, "the proxy lost no answer");
    cr_expect_eq(WEXITSTATUS(st), 0, "%s", out);
    cr_expect(strstr(out, "job 1 submitted (already, by an earlier try)"), "%s", out);
    cJSON *jobs = th_get_json(&d, "/v1/jobs", tok);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(jobs, "items")), 1, "two jobs made");
    cJSON_Delete(jobs);
}

/* The fenced sh block after README's marker, with make run's URL turned
 * into this cohortd's, behind "set -euo pipefail", into a fresh buffer (the
 * caller's). */
static char *readme_block(const char *marker)
{
    char path[512];
    static char text[1 << 17];
    snprintf(path, sizeof path, "%s/README.md", COHORT_SOURCE_DIR);
    cr_assert_eq(th_read_text(path, text, sizeof text), 0);
    const char *m = strstr(text, marker);
    cr_assert(m, "README has no marker %s", marker);
    const char *p = strstr(m, "```sh\n");
    cr_assert(p, "no sh block after %s", marker);
    p += 6;
    const char *end = strstr(p, "\n```");
    cr_assert(end, "the block after %s does not end", marker);
    util_buf s = {0};
    util_buf_printf(&s, "set -euo pipefail\n");
    while (p < end) {
        const char *hit = strstr(p, "http://127.0.0.1:8080");
        if (!hit || hit > end)
            hit = end;
        util_buf_printf(&s, "%.*s", (int)(hit - p), p);
        if (hit < end)
            util_buf_printf(&s, "%s", d.base);
        p = hit < end ? hit + strlen("http://127.0.0.1:8080") : end;
    }
    util_buf_printf(&s, "\n");
    return s.buf;
}

/* Runs script (bash) in the work dir as a user would, at most 600 s: its
 * exit status, with its output in out. */
static int run_script(const char *name, const char *script)
{
    write_file(name, script, 0755);
    int st = util_system("cd '%s' && env -u COHORT_TOKEN -u COHORT_URL HOME='%s/home' "
                         "timeout 600 bash %s > out.txt 2>&1", work, work, name);
    char p[400];
    snprintf(p, sizeof p, "%s/out.txt", work);
    th_read_text(p, out, sizeof out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(cli, readme_first_session_works_as_printed, .timeout = 900)
{
    if (!th_can_sandbox())
        cr_skip_test("needs root to run containers");
    bare_platform(); /* README makes the tenant and its user */
    th_registry_add_pytorch();
    agent();
    char bin[512];
    /* As printed, on this cohortd instead of make run's: its URL, its admin
     * token in cohort-data/, build/ being this build and cli/ the source's. */
    snprintf(bin, sizeof bin, "%s", COHORT_CLI_BIN);
    *strrchr(bin, '/') = '\0';
    util_system("cd '%s' && mkdir -p cohort-data && printf %%s '%s' > cohort-data/admin-token && "
                "ln -s '%s' build && ln -s '%s/cli' cli", work, TH_ADMIN, bin, COHORT_SOURCE_DIR);
    char *script = readme_block("<!-- first session: tests/test_cli.c runs this block -->");
    int rc = run_script("first.sh", script);
    cr_assert_eq(rc, 0, "README's first session failed (%d):\n%s\n---\n%s", rc, script, out);
    free(script);
    /* it trained, both ranks, and was billed */
    cr_expect(strstr(out, "[0] rank 0/2 epoch 1 loss") && strstr(out, "[1] rank 1/2 epoch 1 loss"),
              "%s", out);
    cr_expect(strstr(out, "job 1 SUCCEEDED"), "%s", out);
    cr_expect(strstr(out, "1    mnist"), "usage lists no job:\n%s", out);

    /* the same with curl, for scripts: the ids it takes are the answers' */
    script = readme_block("<!-- curl session: tests/test_cli.c runs this block -->");
    util_buf s = {0};
    util_buf_printf(&s, "%secho \"JOB=$JOB TOKEN=$TOKEN\"\n", script);
    free(script);
    rc = run_script("curl.sh", s.buf);
    cr_assert_eq(rc, 0, "README's curl session failed (%d):\n%s\n---\n%s", rc, s.buf, out);
    free(s.buf);
    const char *ids = strstr(out, "JOB=");
    cr_assert(ids, "%s", out);
    long job = strtol(ids + 4, NULL, 10);
    char bob[80];
    cr_assert_eq(sscanf(strstr(ids, "TOKEN=") + 6, "%79s", bob), 1, "%s", out);
    char seen[16];
    cr_expect(th_wait_state(&d, bob, job, "SUCCEEDED", 300000, seen), "the curl job %ld ended %s",
              job, seen);
}
