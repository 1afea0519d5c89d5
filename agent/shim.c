/*
 * shim: namespaces, mounts and the namespace's init for one worker.
 * Runs in forked copies of the agent; every path out ends in _exit.
 */
#include "agent/shim.h"
#include "lib/fmt.h"

#include "agent/fileutil.h"
#include "agent/netns.h"
#include "agent/oci.h"
#include "lib/clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Writes text to dir/name atomically (rename).  No fsync: after a crash of
 * the node its workers are gone anyway and cohortd reports them lost; what
 * counts is what cohortd recorded. */
static void put_file(int dfd, const char *name, const char *text)
{
    char tmp[64];
    fmt_cut(tmp, sizeof tmp, ".%s.tmp", name);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    size_t n = strlen(text);
    int ok = write(fd, text, n) == (ssize_t)n;
    close(fd);
    if (ok)
        renameat(dfd, tmp, dfd, name);
}

static void __attribute__((noreturn, format(printf, 2, 3))) give_up(int dfd, const char *fmt, ...)
{
    char msg[300], line[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fmt_cut(line, sizeof line, "error %s\n", msg);
    put_file(dfd, "status", line);
    _exit(1);
}

/* a/b into out: 0, or -1 (out empty) when it does not fit. */
static int path_join(char *out, size_t n, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la + 1 + lb + 1 > n) {
        if (n)
            out[0] = '\0';
        return -1;
    }
    memcpy(out, a, la);
    out[la] = '/';
    memcpy(out + la + 1, b, lb + 1);
    return 0;
}

/* A bind mount of src at dst, read-only through every submount when ro. */
static int bind(const char *src, const char *dst, int ro, char *err, size_t errlen)
{
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0) {
        fmt_cut(err, errlen, "cannot bind %s: %s", src, strerror(errno));
        return -1;
    }
    if (!ro)
        return 0;
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY};
    if (mount_setattr(AT_FDCWD, dst, AT_RECURSIVE, &attr, sizeof attr) == 0)
        return 0;
    /* Older kernels: the top mount at least. */
    if (mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_REC, NULL) != 0) {
        fmt_cut(err, errlen, "cannot make %.200s read-only: %s", dst, strerror(errno));
        return -1;
    }
    return 0;
}

static int setup_mounts(const shim_spec *sp, char *err, size_t errlen)
{
    char path[4096], dir[4096];
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        fmt_cut(err, errlen, "cannot make mounts private: %s", strerror(errno));
        return -1;
    }
    if (mount("tmpfs", sp->mount_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") != 0) {
        fmt_cut(err, errlen, "cannot mount a tmpfs at %s: %s", sp->mount_root, strerror(errno));
        return -1;
    }
    path_join(dir, sizeof dir, sp->mount_root, "datasets");
    path_join(path, sizeof path, sp->mount_root, "workspace");
    if (mkdir(dir, 0755) != 0 || mkdir(path, 0755) != 0) {
        fmt_cut(err, errlen, "cannot lay out %s: %s", sp->mount_root, strerror(errno));
        return -1;
    }
    if (bind(sp->workspace, path, 0, err, errlen) != 0)
        return -1;
    for (int i = 0; i < sp->ndatasets; i++) {
        if (path_join(path, sizeof path, dir, sp->ds_name[i]) != 0 || mkdir(path, 0755) != 0) {
            fmt_cut(err, errlen, "cannot lay out dataset %s", sp->ds_name[i]);
            return -1;
        }
        if (bind(sp->ds_path[i], path, 1, err, errlen) != 0)
            return -1;
    }
    /* The layout itself is fixed now; the binds keep their own modes. */
    if (mount(NULL, sp->mount_root, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0) {
        fmt_cut(err, errlen, "cannot seal %s: %s", sp->mount_root, strerror(errno));
        return -1;
    }
    /* Nothing else of any tenant's storage, nor the agent's state. */
    for (int i = 0; i < sp->nhide; i++) {
        struct stat sb;
        if (stat(sp->hide[i], &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        if (mount("tmpfs", sp->hide[i], "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "size=4k,mode=0555") != 0) {
            fmt_cut(err, errlen, "cannot hide %s: %s", sp->hide[i], strerror(errno));
            return -1;
        }
    }
    return 0;
}

static void forward(int sig)
{
    kill(-1, sig); /* from the namespace's init: every other process in it */
}

/* The worker itself, after fork in the new PID namespace. */
static void __attribute__((noreturn)) worker(const shim_spec *sp, int logfd, int errpipe)
{
    char prog[4096], ws[4096];
    path_join(ws, sizeof ws, sp->mount_root, "workspace");
    path_join(prog, sizeof prog, ws, sp->program);
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    int e = 0;
    if (chdir(ws) != 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        e = errno;
    int null = open("/dev/null", O_RDONLY);
    if (!e && (null < 0 || dup2(null, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0))
        e = errno;
    /* No descriptor of the agent or the shim reaches the program. */
    if (!e)
        close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    char *argv[SHIM_MAX_ARGS + 3]; /* launcher, program, arguments (shim_req bounds them) */
    int n = 0;
    if (sp->launcher)
        argv[n++] = (char *)sp->launcher;
    argv[n++] = prog;
    for (int i = 0; sp->args[i] && i < SHIM_MAX_ARGS; i++)
        argv[n++] = sp->args[i];
    argv[n] = NULL;
    if (!e) {
        execve(argv[0], argv, sp->env);
        e = errno;
    }
    ssize_t w = write(errpipe, &e, sizeof e);
    (void)w;
    _exit(127);
}

/* PID 1 of the worker's namespace: starts the worker, forwards stop
 * signals, reaps, and reports how the worker ended on result. */
static void __attribute__((noreturn)) ns_init(const shim_spec *sp, int logfd, int result)
{
    char line[320];
    int ep[2];
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0 ||
        pipe2(ep, O_CLOEXEC) != 0) {
        fmt_cut(line, sizeof line, "error cannot prepare the namespace: %s\n", strerror(errno));
        ssize_t w = write(result, line, strlen(line));
        (void)w;
        _exit(1);
    }
    struct sigaction sa = {0};
    sa.sa_handler = forward;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    pid_t w = fork();
    if (w == 0) {
        close(ep[0]);
        worker(sp, logfd, ep[1]);
    }
    close(ep[1]);
    int e = 0;
    ssize_t got;
    while ((got = read(ep[0], &e, sizeof e)) < 0 && errno == EINTR)
        ;
    if (got == (ssize_t)sizeof e) {
        fmt_cut(line, sizeof line, "error cannot start %s%s%s: %s\n",
                 sp->launcher ? sp->launcher : "", sp->launcher ? " " : "", sp->program,
                 strerror(e));
        ssize_t wr = write(result, line, strlen(line));
        (void)wr;
        _exit(1);
    }
    int st = 0;
    for (;;) {
        pid_t r = waitpid(-1, &st, 0);
        if (r == w)
            break;
        if (r < 0 && errno != EINTR)
            break;
    }
    if (WIFSIGNALED(st))
        fmt_cut(line, sizeof line, "signal %d\n", WTERMSIG(st));
    else
        fmt_cut(line, sizeof line, "exit %d\n", WEXITSTATUS(st));
    ssize_t wr = write(result, line, strlen(line));
    (void)wr;
    kill(-1, SIGKILL); /* anything the worker left behind */
    _exit(0);
}

/* 1 when an agent holds its lock now. */
static int agent_alive(int lockfd)
{
    if (lockfd < 0)
        return 1;
    if (flock(lockfd, LOCK_SH | LOCK_NB) == 0) {
        flock(lockfd, LOCK_UN); /* leave it free for the next agent */
        return 0;
    }
    return 1;
}

/* Whether the agent is there, and what follows when it is not. */
struct lease {
    int64_t gone_since, term_at; /* monotonic ms; 0: not so */
};

/* One look at the agent's lock: no agent for the lease stops the worker
 * (target): SIGTERM, then SIGKILL after the grace period. */
static void lease_step(struct lease *l, int lockfd, const shim_spec *sp, pid_t target)
{
    int64_t now = util_mono_ms();
    if (agent_alive(lockfd)) {
        l->gone_since = 0;
    } else if (!l->gone_since) {
        l->gone_since = now;
    } else if (!l->term_at && now - l->gone_since > sp->lease_ms) {
        kill(target, SIGTERM);
        l->term_at = now;
    } else if (l->term_at && now - l->term_at > sp->grace_ms) {
        kill(target, SIGKILL);
    }
}

/* Waits for init (woken at once by SIGCHLD); stops the worker when no agent
 * has been alive for the lease. */
static int wait_init(pid_t init, int lockfd, const shim_spec *sp)
{
    int st = 0;
    struct lease l = {0, 0};
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    for (;;) {
        pid_t r = waitpid(init, &st, WNOHANG);
        if (r == init || (r < 0 && errno != EINTR))
            return st;
        lease_step(&l, lockfd, sp, init);
        struct timespec ts = {0, 500 * 1000000L};
        sigtimedwait(&chld, NULL, &ts);
    }
}

/* What the worker's cgroup counted, as lines for the status file; then the
 * cgroup goes. */
static void end_cgroup(cg_worker *cg, char *text, size_t n)
{
    cg_usage u;
    if (cg_worker_end(cg, &u, 2000) != 0)
        fprintf(stderr, "cohort-shim: a cgroup of the worker stays (%s): %s\n",
                cg->path[0] ? cg->path : cg->v1[CG_V1_PIDS], strerror(errno));
    fmt_cut(text, n,
             "cpu_us %lld\nmemory_peak %lld\nmemory_max %lld\noom_kills %lld\npids_max %lld\n"
             "forks_refused %lld\n",
             (long long)u.cpu_us, (long long)u.memory_peak, (long long)u.memory_max,
             (long long)u.oom_kills, (long long)u.pids_max, (long long)u.forks_refused);
}

/* The shim's last act: the worker's status file, which holds line (how it
 * ended) and what its cgroups (cg, or NULL) used, the cgroups removed. */
static _Noreturn void finish(int dfd, cg_worker *cg, const char *line)
{
    char status[1200], usage[384] = "";
    if (cg)
        end_cgroup(cg, usage, sizeof usage);
    fmt_cut(status, sizeof status, "%.760s%s", line, usage);
    put_file(dfd, "status", status);
    _exit(0);
}

/* Blocks SIGCHLD at its default action before a fork, so that the child's
 * end waits to be collected by sigtimedwait or waitpid here: the set holding
 * SIGCHLD alone. */
static sigset_t block_sigchld(void)
{
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    signal(SIGCHLD, SIG_DFL);
    return chld;
}

static void outer_container(int dfd, int logfd, int lockfd, const shim_spec *sp,
                            cg_worker *cg) __attribute__((noreturn));

/* The detached shim: namespaces, mounts, init, and the final status. */
static void __attribute__((noreturn)) outer(int dfd, int logfd, int lockfd, const shim_spec *sp)
{
    char err[300], line[320];
    static cg_worker w; /* the worker's cgroups: the shim's for its life */
    cg_worker *cg = NULL;
    setsid();
    fmt_cut(line, sizeof line, "%d\n", (int)getpid());
    put_file(dfd, "shim", line);
    if (cg_used(&sp->cgroup)) {
        /* A container opens only the standard devices and its GPUs; a host
         * worker (a trusted node) keeps the host's /dev. */
        const cg_limits lim = {sp->cpu_milli, sp->memory_mb, sp->pids_max, sp->devices,
                               sp->crun != NULL};
        if (cg_worker_make(&sp->cgroup, sp->id, &lim, &w, err, sizeof err) != 0)
            give_up(dfd, "%s", err);
        cg = &w;
    }
    if (sp->crun)
        outer_container(dfd, logfd, lockfd, sp, cg);
    if (unshare(CLONE_NEWNS | CLONE_NEWPID) != 0)
        give_up(dfd, "cannot create namespaces: %s", strerror(errno));
    if (setup_mounts(sp, err, sizeof err) != 0)
        give_up(dfd, "%s", err);
    int rp[2];
    if (pipe2(rp, O_CLOEXEC) != 0)
        give_up(dfd, "pipe: %s", strerror(errno));
    /* SIGCHLD stays blocked here so wait_init can wait for it; the
     * namespace's init restores its own mask. */
    sigset_t chld = block_sigchld();
    pid_t init = fork();
    if (init < 0)
        give_up(dfd, "fork: %s", strerror(errno));
    if (init == 0) {
        close(rp[0]);
        if (lockfd >= 0)
            close(lockfd);
        /* Into the worker's cgroups before anything of the worker runs. */
        int e = cg ? cg_join(cg) : 0;
        if (e != 0) {
            fmt_cut(line, sizeof line, "error cannot join the worker's cgroup: %s\n",
                     strerror(-e));
            ssize_t wr = write(rp[1], line, strlen(line));
            (void)wr;
            _exit(1);
        }
        if (cg)
            cg_worker_close(cg);
        sigprocmask(SIG_UNBLOCK, &chld, NULL);
        ns_init(sp, logfd, rp[1]);
    }
    close(rp[1]);
    if (cg)
        cg_worker_close(cg);
    fmt_cut(line, sizeof line, "%d\n", (int)init);
    put_file(dfd, "pid", line);
    int st = wait_init(init, lockfd, sp);
    ssize_t n;
    while ((n = read(rp[0], line, sizeof line - 1)) < 0 && errno == EINTR)
        ;
    if (n > 0) {
        line[n] = '\0';
    } else if (WIFSIGNALED(st)) {
        /* init itself was killed (SIGKILL after the grace period) */
        fmt_cut(line, sizeof line, "signal %d\n", WTERMSIG(st));
    } else {
        fmt_cut(line, sizeof line, "error the worker's init ended without a word (%d)\n",
                 WEXITSTATUS(st));
    }
    finish(dfd, cg, line);
}

/* ---- containers ---- */

static char state_dir[4096]; /* the worker's directory (shim_start's dir) */

static void on_progress(void *arg, const char *text)
{
    char line[600];
    fmt_cut(line, sizeof line, "%.590s\n", text);
    put_file(*(const int *)arg, "phase", line);
}

/* A small file whole, NUL-terminated (at most max bytes), or NULL. */
static char *read_text(const char *path, size_t max)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* 1 when env (n entries) sets the variable of kv ("NAME=..."). */
static int env_sets(char **env, int n, const char *kv)
{
    size_t k = strcspn(kv, "=");
    for (int i = 0; i < n; i++)
        if (!strncmp(env[i], kv, k) && env[i][k] == '=')
            return 1;
    return 0;
}

/*
 * The container's environment: the platform's variables and the job's
 * (sp->env up to sp->nenv_own), then the image's Env, then the defaults
 * (the rest of sp->env), each name once.  Pointers into sp and image; the
 * array is the caller's to free.
 */
static char **container_env(const shim_spec *sp, const cJSON *image_env)
{
    int total = 0, n = 0;
    while (sp->env[total])
        total++;
    /* two more for driver_env */
    char **env = calloc((size_t)total + (size_t)cJSON_GetArraySize(image_env) + 3, sizeof *env);
    if (!env)
        return NULL;
    for (int i = 0; i < sp->nenv_own; i++)
        env[n++] = sp->env[i];
    const cJSON *e;
    cJSON_ArrayForEach(e, image_env)
    {
        if (cJSON_IsString(e) && strchr(e->valuestring, '=') && !env_sets(env, n, e->valuestring))
            env[n++] = e->valuestring;
    }
    for (int i = sp->nenv_own; i < total; i++)
        if (!env_sets(env, n, sp->env[i]))
            env[n++] = sp->env[i];
    env[n] = NULL;
    return env;
}

/* The command: for native images the program itself, otherwise the image's
 * Entrypoint (python3 when it has none) with the program after it. */
static char **container_argv(const shim_spec *sp, const cJSON *entrypoint, char *prog)
{
    int nargs = 0;
    while (sp->args[nargs])
        nargs++;
    char **argv = calloc((size_t)nargs + (size_t)cJSON_GetArraySize(entrypoint) + 3, sizeof *argv);
    int n = 0;
    if (!argv)
        return NULL;
    if (strcmp(sp->framework ? sp->framework : "native", "native")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, entrypoint)
        {
            if (cJSON_IsString(e))
                argv[n++] = e->valuestring;
        }
        if (n == 0)
            argv[n++] = "python3";
    }
    argv[n++] = prog;
    for (int i = 0; i < nargs; i++)
        argv[n++] = sp->args[i];
    argv[n] = NULL;
    return argv;
}

/* Writes text to path, whole: 0 or -1. */
static int write_whole(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    int ok = write(fd, text, n) == (ssize_t)n;
    return close(fd) == 0 && ok ? 0 : -1;
}

/* Runs crun with args after its global options; waits.  Its exit status. */
static int crun_once(const shim_spec *sp, const char *a1, const char *a2, const char *a3)
{
    pid_t p = fork();
    if (p == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        execl(sp->crun, sp->crun, "--root", sp->crun_root, a1, a2, a3, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    while (p > 0 && waitpid(p, &st, 0) < 0 && errno == EINTR)
        ;
    return st;
}

/* crun delete -f for a container whose state crun still keeps (it keeps
 * none once `crun run` has ended normally: no process to start then). */
static void crun_leftover(const shim_spec *sp, const char *id)
{
    char state[4400];
    struct stat sb;
    fmt_cut(state, sizeof state, "%s/%s", sp->crun_root, id);
    if (stat(state, &sb) == 0)
        crun_once(sp, "delete", "-f", id);
}

/* Where one run of crun puts its files, and what it runs in. */
struct launch {
    const char *bundle, *pidfile, *crun_log, *id;
    cg_worker *cg; /* the worker's cgroups, NULL for none */
    int dfd, logfd, lockfd;
};

/* The pipes of one crun run: its result (crun hands the write end to
 * cohort-init as descriptor 3), its standard input (the write end closed
 * at once) and its output, which the shim copies into the log.  crun
 * gives the container's root the ownership of its standard streams, so
 * they are pipes of the shim's, never a host file. */
struct crun_pipes {
    int result[2], in[2], out[2];
};

/* The forked child that becomes crun: into the worker's cgroups, the
 * result pipe at descriptor 3, the stdio pipes at 0, 1 and 2. */
static void __attribute__((noreturn)) exec_crun(const shim_spec *sp, const struct launch *ln,
                                                const struct crun_pipes *p)
{
    char line[320], logopt[4400];
    int result_w = p->result[1];
    int e = ln->cg ? cg_join(ln->cg) : 0;
    if (e != 0) {
        fmt_cut(line, sizeof line, "error cannot join the worker's cgroup: %s\n", strerror(-e));
        ssize_t w = write(result_w, line, strlen(line));
        (void)w;
        _exit(1);
    }
    /* Above 9 first: none of them may be overwritten by another's dup2. */
    int rw = fcntl(result_w, F_DUPFD, 10), in = fcntl(p->in[0], F_DUPFD, 10);
    int out = fcntl(p->out[1], F_DUPFD, 10);
    if (rw < 0 || in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0 ||
        dup2(rw, 3) != 3)
        _exit(126);
    close_range(4, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setpgid(0, 0); /* so that crun_kill reaches all crun starts */
    if (fmt_whole(logopt, sizeof logopt, "--log=file:%s", ln->crun_log) != 0)
        _exit(126); /* never: the bundle lies under the agent's data dir */
    /* crun copies itself into a sealed memfd and runs that copy, so that a
     * container's root cannot overwrite the runtime through /proc/self/exe
     * (CVE-2019-5736).  Here the container's root is an unprivileged host
     * uid that cannot open crun for writing anyway, and the copy and second
     * exec cost every container a few ms: the variable says it is done. */
    setenv("_LIBCONTAINER_CLONED_BINARY", "1", 1);
    execl(sp->crun, sp->crun, "--root", sp->crun_root, logopt, "--cgroup-manager=disabled",
          "run", "--bundle", ln->bundle, "--pid-file", ln->pidfile, "--preserve-fds", "1", ln->id,
          (char *)NULL);
    fmt_cut(line, sizeof line, "error cannot run %.200s: %s\n", sp->crun, strerror(errno));
    ssize_t w = write(3, line, strlen(line));
    (void)w;
    _exit(127);
}

/* The last line crun logged, for a reason. */
static void crun_reason(const char *crun_log, char *out, size_t n)
{
    char *text = read_text(crun_log, 65536);
    char *end = text ? text + strlen(text) : NULL;
    out[0] = '\0';
    if (!text)
        return;
    while (end > text && (end[-1] == '\n' || end[-1] == ' '))
        end--;
    *end = '\0';
    char *start = strrchr(text, '\n');
    fmt_cut(out, n, "%s", start ? start + 1 : text);
    free(text);
}

/* The binds of a container: owned copies of their paths. */
struct binds {
    oci_bind *v;
    int n, cap, failed;
};

static void bind_add(struct binds *b, const char *src, const char *dst, int ro)
{
    if (b->n == b->cap) {
        int nc = b->cap ? b->cap * 2 : 16;
        oci_bind *nv = realloc(b->v, (size_t)nc * sizeof *nv);
        if (!nv) {
            b->failed = 1;
            return;
        }
        b->v = nv;
        b->cap = nc;
    }
    char *s = strdup(src), *d = strdup(dst);
    if (!s || !d) {
        free(s);
        free(d);
        b->failed = 1;
        return;
    }
    b->v[b->n++] = (oci_bind){s, d, ro};
}

static void binds_free(struct binds *b)
{
    for (int i = 0; i < b->n; i++) {
        free((char *)b->v[i].src);
        free((char *)b->v[i].dst);
    }
    free(b->v);
}

/* mountinfo's octal escapes (\040 for a space) undone in place. */
static void unescape(char *p)
{
    char *o = p;
    for (; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
            p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

/*
 * A volume: src at dst, then every mount below src on the host at the same
 * place below dst.  crun's idmapped binds are not recursive, and storage
 * is often mounted inside a dataset's directory; listing the submounts
 * keeps them visible (and read-only with a read-only volume).
 */
static void add_volume(struct binds *b, const char *src, const char *dst, int ro)
{
    char line[8192], path[4200];
    bind_add(b, src, dst, ro);
    FILE *f = fopen("/proc/self/mountinfo", "re");
    size_t n = strlen(src);
    while (f && fgets(line, sizeof line, f)) {
        /* id parent major:minor root MOUNT-POINT ... */
        char *save = NULL, *mp = NULL, *tok = strtok_r(line, " ", &save);
        for (int i = 0; tok && i < 4; i++)
            mp = tok = strtok_r(NULL, " ", &save);
        if (!mp)
            continue;
        unescape(mp);
        if (strncmp(mp, src, n) || mp[n] != '/')
            continue;
        if (fmt_whole(path, sizeof path, "%s%s", dst, mp + n) != 0) {
            b->failed = 1; /* a mount the container would miss: refused */
            continue;
        }
        bind_add(b, mp, path, ro);
    }
    if (f)
        fclose(f);
}

struct proc_entry {
    pid_t pid, ppid;
    char state;
    char comm[24];
};

/* Every process's pid, parent, state and name from /proc: an array the
 * caller frees, its length in *n; NULL when /proc cannot be read. */
static struct proc_entry *proc_table(size_t *n)
{
    DIR *d = opendir("/proc");
    struct proc_entry *v = NULL;
    size_t cap = 0;
    *n = 0;
    if (!d)
        return NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        char path[64], buf[512];
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        fmt_cut(path, sizeof path, "/proc/%.20s/stat", de->d_name);
        char *open_paren = fu_read(path, buf, sizeof buf) == 0 ? strchr(buf, '(') : NULL;
        char *close_paren = open_paren ? strrchr(buf, ')') : NULL;
        struct proc_entry e = {0};
        if (!close_paren || sscanf(close_paren + 1, " %c %d", &e.state, &e.ppid) != 2)
            continue;
        e.pid = (pid_t)atoi(buf);
        fmt_cut(e.comm, sizeof e.comm, "%.*s",
                 (int)(close_paren - open_paren - 1 < 23 ? close_paren - open_paren - 1 : 23),
                 open_paren + 1);
        if (*n == cap) {
            size_t ncap = cap ? cap * 2 : 256;
            struct proc_entry *nv = realloc(v, ncap * sizeof *nv);
            if (!nv)
                break; /* a shorter description, no failure: it is for people */
            v = nv;
            cap = ncap;
        }
        v[(*n)++] = e;
    }
    closedir(d);
    return v;
}

/* crun (root) and every process below it as "pid name state wait-channel"
 * into out, for the reason; their kernel stacks to stderr, the agent's log. */
static void describe_tree(pid_t root, char *out, size_t outn)
{
    size_t n = 0, len = 0;
    struct proc_entry *v = proc_table(&n);
    char *in = v ? calloc(n ? n : 1, 1) : NULL;
    out[0] = '\0';
    if (!in) {
        fmt_cut(out, outn, "crun pid %d", (int)root);
        goto out;
    }
    /* Mark the tree: a parent found marked marks its child, until no change. */
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < n; i++) {
            if (in[i])
                continue;
            int mark = v[i].pid == root;
            for (size_t j = 0; !mark && j < n; j++)
                mark = in[j] && v[j].pid == v[i].ppid;
            if (mark)
                in[i] = 1, changed = 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!in[i])
            continue;
        char path[64], wchan[64] = "?", stack[2048];
        fmt_cut(path, sizeof path, "/proc/%d/wchan", (int)v[i].pid);
        if (fu_read(path, wchan, sizeof wchan) != 0)
            fmt_cut(wchan, sizeof wchan, "?");
        if (len < outn) { /* a description: cut to fit */
            fmt_cut(out + len, outn - len, "%s%d %s %c %s", len ? "; " : "", (int)v[i].pid,
                    v[i].comm, v[i].state, wchan[0] && strcmp(wchan, "0") ? wchan : "-");
            len += strlen(out + len);
        }
        fmt_cut(path, sizeof path, "/proc/%d/stack", (int)v[i].pid);
        if (fu_read(path, stack, sizeof stack) == 0 && stack[0]) {
            fprintf(stderr, "cohort-shim: kernel stack of %d (%s):\n%s", (int)v[i].pid,
                    v[i].comm, stack);
        }
    }
out:
    free(in);
    free(v);
}

/* Decodes how crun ended into line: what cohort-init or crun reported on
 * the result pipe, else the signal that ended init, else crun's last words. */
static void crun_result(int st, int result_fd, const char *crun_log, char *line, size_t n)
{
    char reason[512];
    ssize_t got;
    while ((got = read(result_fd, line, n - 1)) < 0 && errno == EINTR)
        ;
    if (got > 0) {
        line[got] = '\0';
        size_t end = strcspn(line, "\n");
        if (end > n - 2)
            end = n - 2;
        line[end] = '\n';
        line[end + 1] = '\0';
    } else if (WIFEXITED(st) && WEXITSTATUS(st) > 128 && WEXITSTATUS(st) < 128 + 65) {
        /* init itself was killed (SIGKILL after the grace period) */
        fmt_cut(line, n, "signal %d\n", WEXITSTATUS(st) - 128);
    } else if (WIFSIGNALED(st)) {
        fmt_cut(line, n, "signal %d\n", WTERMSIG(st));
    } else {
        crun_reason(crun_log, reason, sizeof reason);
        fmt_cut(line, n, "error the container did not start: %.500s\n",
                 reason[0] ? reason : "crun failed without a word");
    }
}

enum { START_ENDED = 0, START_STALLED = 1, START_UNKILLABLE = 2 };

/*
 * Kills crun, all it started and whatever is in the worker's cgroup, and
 * reaps crun: START_STALLED, or START_UNKILLABLE when crun is still there
 * after 5 s (blocked in the kernel: no second try then).
 */
static int crun_kill(const shim_spec *sp, const struct launch *ln, pid_t crun)
{
    kill(-crun, SIGKILL); /* exec_crun made crun a process group leader */
    kill(crun, SIGKILL);
    if (ln->cg)
        cg_kill(ln->cg);
    int st;
    for (int waited = 0; waitpid(crun, &st, WNOHANG) == 0; waited += 10) {
        if (waited >= 5000)
            return START_UNKILLABLE;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    crun_leftover(sp, ln->id);
    unlink(ln->pidfile);
    return START_STALLED;
}

/* Copies what is in the output pipe to the log: 1 while the pipe is open,
 * 0 at its end.  Bytes the log cannot take (a full disk) are dropped, so
 * that the container never blocks on its own output. */
static int pump(int from, int logfd)
{
    char buf[65536];
    ssize_t got = read(from, buf, sizeof buf);
    if (got < 0)
        return errno == EINTR || errno == EAGAIN ? 1 : 0;
    for (ssize_t off = 0, w; off < got; off += w)
        if ((w = write(logfd, buf + off, (size_t)(got - off))) <= 0)
            break;
    return got > 0;
}

/* What is left in the output pipe once crun has ended: until its last
 * writer, dying with the container's PID namespace, closes it (2 s at most). */
static void drain(int from, int logfd)
{
    struct pollfd pf = {from, POLLIN, 0};
    for (int waited = 0; waited < 2000; waited += 100) {
        int n = poll(&pf, 1, 100);
        if (n > 0 && !pump(from, logfd))
            return;
    }
}

static int crun_pipes_open(struct crun_pipes *p)
{
    *p = (struct crun_pipes){{-1, -1}, {-1, -1}, {-1, -1}};
    return pipe2(p->result, O_CLOEXEC) == 0 && pipe2(p->in, O_CLOEXEC) == 0 &&
                   pipe2(p->out, O_CLOEXEC) == 0
               ? 0
               : -1;
}

static void crun_pipes_close(struct crun_pipes *p)
{
    int *fd[] = {&p->result[0], &p->result[1], &p->in[0], &p->in[1], &p->out[0], &p->out[1]};
    for (size_t i = 0; i < sizeof fd / sizeof *fd; i++) {
        if (*fd[i] >= 0)
            close(*fd[i]);
        *fd[i] = -1;
    }
}

/* The parent's ends after the fork: the result's and the output's read
 * ends stay; the container's standard input is at its end already. */
static void crun_pipes_parent(struct crun_pipes *p)
{
    int *fd[] = {&p->result[1], &p->in[0], &p->in[1], &p->out[1]};
    for (size_t i = 0; i < sizeof fd / sizeof *fd; i++) {
        close(*fd[i]);
        *fd[i] = -1;
    }
}

/*
 * One `crun run` of the worker's container, watched until it ends: the
 * container's init becomes the worker's pid, its output is copied to the
 * log, and the lease applies.  START_ENDED with the status line in line
 * when crun ended.  When crun has written no pid file within sp->start_ms
 * (a run that starts at all does so in milliseconds), where it and its
 * children are blocked goes to why, and crun_kill ends them.
 */
static int crun_run(const shim_spec *sp, const struct launch *ln, char *line, size_t n, char *why,
                    size_t whyn)
{
    struct crun_pipes p;
    if (crun_pipes_open(&p) != 0)
        give_up(ln->dfd, "pipe: %s", strerror(errno));
    sigset_t chld = block_sigchld();
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0)
        give_up(ln->dfd, "signalfd: %s", strerror(errno));
    pid_t crun = fork();
    if (crun < 0)
        give_up(ln->dfd, "fork: %s", strerror(errno));
    if (crun == 0)
        exec_crun(sp, ln, &p);
    crun_pipes_parent(&p);
    int st = 0, rc = START_ENDED;
    pid_t init = 0;
    struct lease l = {0, 0};
    int64_t started = util_mono_ms();
    for (;;) {
        pid_t r = waitpid(crun, &st, WNOHANG);
        if (r == crun || (r < 0 && errno != EINTR))
            break;
        if (init <= 0) {
            char *t = read_text(ln->pidfile, 32);
            init = t ? (pid_t)atoi(t) : 0;
            free(t);
            if (init > 0) {
                fmt_cut(line, n, "%d\n", (int)init);
                put_file(ln->dfd, "pid", line);
            } else if (sp->start_ms > 0 && util_mono_ms() - started > sp->start_ms) {
                describe_tree(crun, why, whyn);
                rc = crun_kill(sp, ln, crun);
                break;
            }
        }
        lease_step(&l, ln->lockfd, sp, init > 0 ? init : crun);
        /* Woken by output, by SIGCHLD, or after 100 ms for the lease. */
        struct pollfd pf[2] = {{p.out[0], POLLIN, 0}, {sfd, POLLIN, 0}};
        if (poll(pf, p.out[0] >= 0 ? 2 : 1, 100) > 0) {
            struct signalfd_siginfo si;
            if (pf[0].revents && p.out[0] >= 0 && !pump(p.out[0], ln->logfd)) {
                close(p.out[0]);
                p.out[0] = -1;
            }
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
                ;
        }
    }
    if (p.out[0] >= 0)
        drain(p.out[0], ln->logfd);
    if (rc == START_ENDED)
        crun_result(st, p.result[0], ln->crun_log, line, n);
    crun_pipes_close(&p);
    close(sfd);
    return rc;
}

/* The host GPU driver's files (nvdriver.h) for a GPU worker: each library
 * under lib_dir and each program under bin_dir, into b. */
static void driver_binds(struct binds *b, const cJSON *driver, const char *lib_dir,
                         const char *bin_dir)
{
    static const char *const kinds[] = {"libs", "bins"};
    for (int k = 0; k < 2; k++) {
        const cJSON *f;
        cJSON_ArrayForEach(f, cJSON_GetObjectItem(driver, kinds[k]))
        {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(f, "name"));
            const char *path = cJSON_GetStringValue(cJSON_GetObjectItem(f, "path"));
            char dst[4400];
            if (!name || !path || strchr(name, '/') || name[0] == '.' ||
                path_join(dst, sizeof dst, k ? bin_dir : lib_dir, name) != 0)
                continue; /* the agent wrote these: nothing else comes here */
            bind_add(b, path, dst, 1);
        }
    }
}

/* "NAME=" + a + sep + b, or the part that is there when the other is NULL:
 * a string the caller frees, or NULL. */
static char *env_join(const char *name, const char *a, const char *b)
{
    size_t n = strlen(name) + 2 + (a ? strlen(a) : 0) + (b ? strlen(b) : 0) + 1;
    char *v = malloc(n);
    if (v)
        fmt_cut(v, n, "%s=%s%s%s", name, a ? a : "", a && b ? ":" : "", b ? b : "");
    return v;
}

/* The value of name in env, or NULL; its index to *at (the end when absent). */
static const char *env_get(char **env, const char *name, int *at)
{
    size_t k = strlen(name);
    int i = 0;
    for (; env[i]; i++)
        if (!strncmp(env[i], name, k) && env[i][k] == '=')
            break;
    *at = i;
    return env[i] ? env[i] + k + 1 : NULL;
}

/*
 * A GPU worker's environment: lib_dir first on LD_LIBRARY_PATH (before the
 * image's own, so that the host's libcuda is the one loaded) and bin_dir
 * last on PATH.  env has room for two more entries; the new strings go to
 * own[0] and own[1] for the caller to free.  0, or -1 out of memory.
 */
static int driver_env(char **env, const char *lib_dir, const char *bin_dir, char *own[2])
{
    int at;
    const char *old = env_get(env, "LD_LIBRARY_PATH", &at);
    if (!(own[0] = env_join("LD_LIBRARY_PATH", lib_dir, old)))
        return -1;
    if (!env[at])
        env[at + 1] = NULL;
    env[at] = own[0];
    old = env_get(env, "PATH", &at);
    if (!(own[1] = env_join("PATH", old ? old : "/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                                "/usr/bin:/sbin:/bin", bin_dir)))
        return -1;
    if (!env[at])
        env[at + 1] = NULL;
    env[at] = own[1];
    return 0;
}

/*
 * The image's root as the container will see it: in a mount namespace of
 * the shim's (which crun's inherits), bound onto itself read-only, nodev
 * and nosuid.  A device file an image carries is then no device in the
 * container (unpacking drops them too), and the user namespace locks the
 * flags: the tenant's root cannot lift them.  0, or -1 with err set.
 */
static int seal_rootfs(const char *rootfs, char *err, size_t errlen)
{
    const char *step = "unshare";
    if (unshare(CLONE_NEWNS) != 0)
        goto fail;
    step = "private";
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        goto fail;
    step = "bind";
    if (mount(rootfs, rootfs, NULL, MS_BIND, NULL) != 0)
        goto fail;
    step = "remount";
    if (mount(NULL, rootfs, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NODEV | MS_NOSUID,
              NULL) != 0)
        goto fail;
    return 0;
fail:
    fmt_cut(err, errlen, "cannot seal the image's root (%s): %s", step, strerror(errno));
    return -1;
}

/*
 * The container flavour of the shim: the image, the bundle, crun run in the
 * worker's cgroups (cg, NULL for none), the lease, and the status.
 */
/* The container's volumes (its workspace, its datasets read-only) into b,
 * and the GPU driver's files into drv with the variables env needs to find
 * them (drv_env, the caller frees). */
static void container_binds(const shim_spec *sp, const char *ws, char **env, struct binds *b,
                            struct binds *drv, char *drv_env[2])
{
    char ds_dst[4200];
    add_volume(b, sp->workspace, ws, 0);
    for (int i = 0; i < sp->ndatasets; i++) {
        fmt_cut(ds_dst, sizeof ds_dst, "%s/datasets/%s", sp->mount_root, sp->ds_name[i]);
        add_volume(b, sp->ds_path[i], ds_dst, 1);
    }
    if (sp->devices && sp->devices[0] && sp->gpu_driver) {
        char lib_dir[4200], bin_dir[4200];
        fmt_cut(lib_dir, sizeof lib_dir, "%s/.nvidia/lib", sp->mount_root);
        fmt_cut(bin_dir, sizeof bin_dir, "%s/.nvidia/bin", sp->mount_root);
        driver_binds(drv, sp->gpu_driver, lib_dir, bin_dir);
        if (drv->n > 0 && env && driver_env(env, lib_dir, bin_dir, drv_env) != 0)
            drv->failed = 1;
    }
}

/* config.json of the worker's container over the image at use (its
 * conventions: Env, Entrypoint), in the job's network: a string the
 * caller frees.  Gives up, saying why, when it cannot be made. */
static char *container_config(int dfd, const shim_spec *sp, const img_use *use)
{
    char err[600], config_path[4300], prog[4200], ws[4200], host[256] = "localhost";
    char rootfs[4300], init_at[4200], netns[300], sys[300];
    fmt_cut(config_path, sizeof config_path, "%s/image.json", use->bundle);
    char *img_text = read_text(config_path, 4 << 20);
    cJSON *img = img_text ? cJSON_Parse(img_text) : NULL;
    free(img_text);
    const cJSON *icfg = cJSON_GetObjectItemCaseSensitive(img, "config");
    path_join(ws, sizeof ws, sp->mount_root, "workspace");
    path_join(prog, sizeof prog, ws, sp->program);
    char **env = container_env(sp, cJSON_GetObjectItemCaseSensitive(icfg, "Env"));
    char **argv = container_argv(sp, cJSON_GetObjectItemCaseSensitive(icfg, "Entrypoint"), prog);
    struct binds b = {0}, drv = {0};
    char *drv_env[2] = {NULL, NULL};
    container_binds(sp, ws, env, &b, &drv, drv_env);
    if (b.failed || drv.failed)
        give_up(dfd, "out of memory listing the container's mounts");
    fmt_cut(rootfs, sizeof rootfs, "%s/rootfs", use->bundle);
    /* before seal_rootfs: /run/netns must be made in the node's mounts */
    if (sp->netns && (netns_ensure(sp->ip, sp->bridge, sp->netns, sp->overlay, sp->egress,
                                   netns, sizeof netns, err, sizeof err) != 0 ||
                      netns_sys_path(sp->netns, sys, sizeof sys) != 0))
        give_up(dfd, "%s", err);
    if (seal_rootfs(rootfs, err, sizeof err) != 0)
        give_up(dfd, "%s", err);
    path_join(init_at, sizeof init_at, sp->mount_root, ".init");
    gethostname(host, sizeof host - 1);
    oci_spec os = {.rootfs = rootfs, .init = sp->init, .init_at = init_at,
                   .mount_root = sp->mount_root, .argv = argv, .env = env, .cwd = ws,
                   .hostname = host, .uid_base = sp->uid_base, .binds = b.v, .nbinds = b.n,
                   .files = drv.v, .nfiles = drv.n, .devices = sp->devices,
                   .shm_mb = sp->shm_mb, .tmp_mb = sp->tmp_mb,
                   .netns = sp->netns ? netns : NULL, .sys = sp->netns ? sys : NULL,
                   .seccomp = sp->seccomp};
    char *config = env && argv ? oci_config(&os, err, sizeof err) : NULL;
    cJSON_Delete(img);
    free(env);
    free(argv);
    free(drv_env[0]);
    free(drv_env[1]);
    binds_free(&b);
    binds_free(&drv);
    if (!config)
        give_up(dfd, "%s", env && argv ? err : "out of memory");
    return config;
}

static void __attribute__((noreturn)) outer_container(int dfd, int logfd, int lockfd,
                                                      const shim_spec *sp, cg_worker *cg)
{
    char err[600], line[700], bundle[4200], config_path[4300], pidfile[4300], crun_log[4300],
        id[64];
    img_use use;
    int progress_fd = dfd;
    if (img_acquire(&sp->cache, &sp->image, on_progress, &progress_fd, &use, err, sizeof err) != 0)
        give_up(dfd, "%s", err);
    fmt_cut(line, sizeof line, "%s\n", use.digest);
    put_file(dfd, "digest", line);
    fmt_cut(line, sizeof line, "starting the container\n");
    put_file(dfd, "phase", line);

    char *config = container_config(dfd, sp, &use);
    path_join(bundle, sizeof bundle, state_dir, "bundle");
    path_join(config_path, sizeof config_path, bundle, "config.json");
    path_join(pidfile, sizeof pidfile, bundle, "init.pid");
    path_join(crun_log, sizeof crun_log, bundle, "crun.log");
    fmt_cut(id, sizeof id, "w%lld", (long long)sp->id);
    if ((mkdir(bundle, 0700) != 0 && errno != EEXIST) || write_whole(config_path, config) != 0)
        give_up(dfd, "cannot write the container's configuration: %s", strerror(errno));
    free(config);
    unlink(pidfile);
    crun_leftover(sp, id); /* state left by a shim that died */

    struct launch ln = {bundle, pidfile, crun_log, id, cg, dfd, logfd, lockfd};
    char why[400] = "";
    int r = crun_run(sp, &ln, line, sizeof line, why, sizeof why);
    if (r == START_STALLED) {
        fprintf(stderr, "cohort-shim: worker %lld: crun wrote no pid file within %lld ms and was "
                        "killed (%s); trying once more\n",
                (long long)sp->id, (long long)sp->start_ms, why);
        fmt_cut(line, sizeof line, "starting the container again (the first try did not start "
                                    "within %lld s)\n", (long long)(sp->start_ms / 1000));
        put_file(dfd, "phase", line);
        r = crun_run(sp, &ln, line, sizeof line, why, sizeof why);
    }
    if (cg)
        cg_worker_close(cg);
    if (r == START_STALLED)
        fmt_cut(line, sizeof line, "error the container did not start within %lld s, twice "
                                    "(crun was blocked: %.400s)\n",
                 (long long)(sp->start_ms / 1000), why);
    else if (r == START_UNKILLABLE)
        fmt_cut(line, sizeof line, "error the container did not start and crun could not be "
                                    "stopped (%.400s)\n", why);
    crun_leftover(sp, id); /* crun run removes its state itself, but for a crash */
    unlink(config_path);
    unlink(pidfile);
    unlink(crun_log);
    rmdir(bundle);
    img_release(&use);
    finish(dfd, cg, line);
}

/* Keeps only the descriptors the shim needs, at 3, 4 and 5: nothing of the
 * agent's (its lock above all) stays open in a process that outlives it. */
static void keep_fds(int *dfd, int *logfd, int *lockfd)
{
    int a = fcntl(*dfd, F_DUPFD_CLOEXEC, 100);
    int b = fcntl(*logfd, F_DUPFD_CLOEXEC, 100);
    int c = *lockfd >= 0 ? fcntl(*lockfd, F_DUPFD_CLOEXEC, 100) : -1;
    dup3(a, 3, O_CLOEXEC);
    dup3(b, 4, O_CLOEXEC);
    if (c >= 0)
        dup3(c, 5, O_CLOEXEC);
    close_range(c >= 0 ? 6 : 5, ~0U, 0);
    *dfd = 3;
    *logfd = 4;
    *lockfd = c >= 0 ? 5 : -1;
}

int shim_start(const char *dir, const shim_spec *sp, const char *note)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    fmt_cut(state_dir, sizeof state_dir, "%s", dir);
    if (note)
        put_file(dfd, "spec.json", note);
    int logfd = openat(dfd, "output.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd < 0)
        give_up(dfd, "cannot create output.log: %s", strerror(errno));
    /* A description of its own: the agent's lock is never shared with it. */
    int lockfd = sp->agent_lock ? open(sp->agent_lock, O_RDONLY | O_CLOEXEC) : -1;
    /* Fork so the shim is nobody's child: it outlives the agent, which reaps
     * this first process without waiting. */
    pid_t q = fork();
    if (q < 0)
        give_up(dfd, "cannot fork the shim: %s", strerror(errno));
    if (q != 0)
        return 0;
    keep_fds(&dfd, &logfd, &lockfd);
    outer(dfd, logfd, lockfd, sp);
}
