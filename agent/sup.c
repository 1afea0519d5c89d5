/*
 * sup: worker table, reconciliation and stop escalation.
 */
#include "agent/sup.h"
#include "lib/fmt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/fileutil.h"
#include "agent/jget.h"
#include "agent/netns.h"
#include "lib/launch_spec.h"
#include "lib/util.h"

#define MAX_WORKERS LAUNCH_MAX_NODE_WORKERS
#define LOG_CHUNK (256 * 1024)
/* The newest output of a worker that its node keeps once shipped. */
#define LOG_KEEP (1024 * 1024)

enum wstate { W_STARTING, W_RUNNING, W_EXITED, W_FAILED };

struct worker {
    int64_t id;
    enum wstate state;
    int64_t exit_code, signal;
    char message[256];
    pid_t pid;
    int64_t stop_at;    /* when SIGTERM was sent, 0: not stopping */
    int killed;         /* SIGKILL sent */
    int desired;        /* listed in the last desired state */
    int final_sent;     /* its final state went out in a heartbeat */
    int64_t seen_at;    /* first seen without pid, status or process */
    int64_t log_off;    /* bytes of output.log the server has */
    int log_done;       /* finished and every byte shipped */
    int log_fd;         /* output.log, kept open while shipping: 0 = not open yet */
    int64_t log_punched; /* output.log's blocks below this are freed (INT64_MAX: cannot) */
    int64_t cpu_us, memory_peak; /* what its cgroup counted: -1 when not known */
    uint64_t gpus;      /* GPUs it holds (bit i: GPU i) while it lives */
    int64_t job_id, attempt, local_rank;
    char phase[200];    /* while starting: what its shim is doing */
    char digest[80];    /* the image digest it runs, once known */
    dev_t ws_dev;       /* the file system of its workspace; 0: not known */
};

struct sup {
    sup_config cfg;
    struct worker w[MAX_WORKERS];
    int n;
    int64_t netns_tidied; /* when netns_tidy last ran */
};

static struct worker *find(sup *s, int64_t id)
{
    for (int i = 0; i < s->n; i++)
        if (s->w[i].id == id)
            return &s->w[i];
    return NULL;
}

/* The LOCAL_RANK of a launch spec's environment (cohortd writes it as the
 * decimal text the worker reads): 0 .. LAUNCH_MAX_PER_NODE - 1, or -1 for
 * anything else, which launch_spec_check refuses (as the worker would). */
static int64_t spec_local_rank(const cJSON *spec)
{
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(spec, LAUNCH_KEY(env)), LAUNCH_NAME(LOCAL_RANK));
    long long v;
    return launch_int_text(cJSON_GetStringValue(lr), 0, LAUNCH_MAX_PER_NODE - 1, &v) == 0 ? v
                                                                                        : -1;
}

/* dir/id/name's first line into out: 0, or -1. */
/* Paths under the agent's workers dir fit their buffers: its data dir is
 * at most AGENT_DIR_MAX (fileutil.h), so fmt_cut never cuts them. */

static int read_small(const char *dir, int64_t id, const char *name, char *out, size_t n)
{
    char sub[4200];
    fmt_cut(sub, sizeof sub, "%s/%lld", dir, (long long)id);
    if (fu_read_in(sub, name, out, n) != 0)
        return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

/* Writes dir/id/name atomically (rename); durable (fsync) when sync is set.
 * 0, or -1 after saying on stderr what failed (a full disk, say); the old
 * file, if any, is left as it was and no temporary file stays behind. */
static int write_file(const char *dir, int64_t id, const char *name, const char *text, int sync)
{
    char path[4200], tmp[4300];
    int ok = 0, e;
    fmt_cut(path, sizeof path, "%s/%lld/%s", dir, (long long)id, name);
    fmt_cut(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f) {
        ok = fputs(text, f) >= 0 && fflush(f) == 0 && (!sync || fsync(fileno(f)) == 0);
        ok = fclose(f) == 0 && ok;
        ok = ok && rename(tmp, path) == 0;
    }
    e = errno;
    if (f && !ok)
        unlink(tmp);
    if (!ok)
        fprintf(stderr, "cohort-agent: worker %lld: cannot write its %s: %s\n", (long long)id,
                name, strerror(e));
    return ok ? 0 : -1;
}

/* Worker state files need no fsync, for the reason in shim.c. */
static int write_small(const char *dir, int64_t id, const char *name, const char *text)
{
    return write_file(dir, id, name, text, 0);
}

/* The usage lines of an ended worker's status file (shim.h): what its
 * cgroup counted, and, for a worker killed by a signal after the cgroup saw
 * OOM kills, a message that it ran out of memory; for one that failed after
 * forks were refused at its bound on processes, a message saying so. */
static void read_usage(sup *s, struct worker *w)
{
    char path[4200], buf[256];
    fmt_cut(path, sizeof path, "%s/%lld/status", s->cfg.dir, (long long)w->id);
    FILE *f = fopen(path, "re");
    long long kills = 0, max = -1, cpu = -1, peak = -1, pids = -1, refused = 0;
    while (f && fgets(buf, sizeof buf, f)) {
        sscanf(buf, "cpu_us %lld", &cpu);
        sscanf(buf, "memory_peak %lld", &peak);
        sscanf(buf, "oom_kills %lld", &kills);
        sscanf(buf, "memory_max %lld", &max);
        sscanf(buf, "pids_max %lld", &pids);
        sscanf(buf, "forks_refused %lld", &refused);
    }
    if (f)
        fclose(f);
    w->cpu_us = cpu;
    w->memory_peak = peak;
    if (refused > 0 && (w->signal || w->exit_code != 0) && kills <= 0)
        fmt_cut(w->message, sizeof w->message,
                 "reached its limit of %lld processes and threads (%lld forks refused)", pids,
                 refused);
    if (kills <= 0 || !w->signal)
        return;
    if (max > 0)
        fmt_cut(w->message, sizeof w->message, "out of memory: over its limit of %lld MiB",
                 max / (1024 * 1024));
    else
        fmt_cut(w->message, sizeof w->message, "out of memory");
}

/* When the file system of dir is (nearly) full: a reason saying so, in out,
 * and 1.  A shim that cannot write its files dies without a word. */
static int disk_full_note(const char *dir, char *out, size_t n)
{
    struct statvfs vs;
    if (statvfs(dir, &vs) != 0)
        return 0;
    unsigned long long avail = (unsigned long long)vs.f_bavail * vs.f_frsize;
    if (avail >= (1ull << 20) && (vs.f_files == 0 || vs.f_favail > 16))
        return 0;
    fmt_cut(out, n,
             "the node's disk is full (%llu KB left under %.80s): the worker could not be "
             "started",
             avail >> 10, dir);
    return 1;
}


/* A worker whose shim was killed while crun was creating its container
 * (stop_starting) may leave crun's state behind: crun delete -f it, as the
 * shim would have.  Nothing when the node runs host processes. */
static void crun_leftover(sup *s, const struct worker *w)
{
    const char *crun = jget_str(s->cfg.container, "crun"), *root = jget_str(s->cfg.container, "crun_root");
    char id[32], state[4400];
    struct stat sb;
    if (!crun || !root)
        return;
    fmt_cut(id, sizeof id, "w%lld", (long long)w->id);
    fmt_cut(state, sizeof state, "%s/%s", root, id);
    if (stat(state, &sb) != 0)
        return;
    pid_t p = fork();
    if (p == 0) {
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execl(crun, crun, "--root", root, "delete", "-f", id, (char *)NULL);
        _exit(127);
    }
    while (p > 0 && waitpid(p, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* Reads one worker's directory into w; 1 when its state changed. */
static int refresh(sup *s, struct worker *w)
{
    char buf[300];
    enum wstate before = w->state;
    if (w->state == W_EXITED || w->state == W_FAILED)
        return 0;
    /* While its init lives a worker has no status yet: no file to read. */
    if (w->state == W_RUNNING && w->pid > 0 && kill(w->pid, 0) == 0)
        return 0;
    if (!w->digest[0])
        read_small(s->cfg.dir, w->id, "digest", w->digest, sizeof w->digest);
    if (read_small(s->cfg.dir, w->id, "status", buf, sizeof buf) == 0) {
        long v;
        if (sscanf(buf, "exit %ld", &v) == 1) {
            w->state = W_EXITED;
            w->exit_code = v;
            read_usage(s, w);
        } else if (sscanf(buf, "signal %ld", &v) == 1) {
            w->state = W_EXITED;
            w->signal = v;
            read_usage(s, w);
        } else {
            w->state = W_FAILED;
            fmt_cut(w->message, sizeof w->message, "%.250s", strncmp(buf, "error ", 6) ? buf : buf + 6);
        }
        return 1;
    }
    if (read_small(s->cfg.dir, w->id, "pid", buf, sizeof buf) == 0) {
        w->pid = (pid_t)atoi(buf);
        if (w->pid > 0 && (kill(w->pid, 0) == 0 || errno == EPERM)) {
            w->state = W_RUNNING;
            w->seen_at = 0;
            return before != W_RUNNING;
        }
    }
    /* No status, and no live init: the shim is starting (pulling its
     * image, perhaps for minutes), or it died. */
    pid_t shim = read_small(s->cfg.dir, w->id, "shim", buf, sizeof buf) == 0 ? atoi(buf) : 0;
    if (shim > 0 && kill(shim, 0) == 0) {
        char ph[sizeof w->phase];
        w->seen_at = 0;
        if (read_small(s->cfg.dir, w->id, "phase", ph, sizeof ph) == 0 && strcmp(ph, w->phase)) {
            fmt_cut(w->phase, sizeof w->phase, "%s", ph);
            return 1;
        }
        return 0;
    }
    if (shim > 0 && w->stop_at) { /* stopped while it pulled or started */
        w->state = W_EXITED;
        w->signal = SIGTERM;
        fmt_cut(w->message, sizeof w->message, "stopped before it started");
        crun_leftover(s, w);
        write_small(s->cfg.dir, w->id, "status", "signal 15\n");
        return 1;
    }
    if (!w->seen_at)
        w->seen_at = util_mono_ms();
    if (util_mono_ms() - w->seen_at > 10000) {
        w->state = W_FAILED;
        if (!disk_full_note(s->cfg.dir, w->message, sizeof w->message))
            fmt_cut(w->message, sizeof w->message, "the worker's shim vanished");
        write_small(s->cfg.dir, w->id, "status", "error the worker's shim vanished\n");
        return 1;
    }
    return 0;
}

static struct worker *add(sup *s, int64_t id)
{
    if (s->n == MAX_WORKERS)
        return NULL;
    struct worker *w = &s->w[s->n++];
    memset(w, 0, sizeof *w);
    w->id = id;
    w->exit_code = -1;
    w->cpu_us = w->memory_peak = -1;
    return w;
}


/* A worker a previous run of the agent started, from its spec.json: the
 * file system of its workspace, so that its deleted open files count as a
 * worker's launched now do (hidden_bytes); and for a GPU worker its job,
 * attempt and local rank, so that workers of its attempt started later see
 * the same CUDA_VISIBLE_DEVICES (assign_gpus). */
static void adopt_worker(const char *dir, struct worker *w, int gpu)
{
    char path[4200];
    struct stat ws;
    fmt_cut(path, sizeof path, "%s/%lld/spec.json", dir, (long long)w->id);
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *spec = cJSON_Parse(text);
    const char *workspace = jget_str(spec, LAUNCH_KEY(workspace));
    w->ws_dev = workspace && stat(workspace, &ws) == 0 ? ws.st_dev : 0;
    if (gpu) {
        w->job_id = jget_int(spec, LAUNCH_KEY(job_id), -1);
        w->attempt = jget_int(spec, LAUNCH_KEY(attempt), -1);
        int64_t lr = spec_local_rank(spec);
        w->local_rank = lr >= 0 ? lr : 0; /* adopted: it runs already, whatever it says */
    }
    cJSON_Delete(spec);
}

sup *sup_open(const sup_config *cfg, char *err, size_t errlen)
{
    sup *s = calloc(1, sizeof *s);
    if (!s) {
        fmt_cut(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    if (mkdir(cfg->dir, 0700) != 0 && errno != EEXIST) {
        fmt_cut(err, errlen, "%s: %s", cfg->dir, strerror(errno));
        free(s);
        return NULL;
    }
    /* Pick up the workers a previous run of the agent left. */
    DIR *d = opendir(cfg->dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char *end;
        long long id = strtoll(e->d_name, &end, 10);
        char buf[8];
        if (*end || id <= 0 || read_small(cfg->dir, id, "acked", buf, sizeof buf) == 0)
            continue;
        struct worker *w = add(s, id);
        if (w) {
            char g[32];
            int gpu = read_small(cfg->dir, id, "gpus", g, sizeof g) == 0;
            if (gpu)
                w->gpus = strtoull(g, NULL, 16);
            adopt_worker(cfg->dir, w, gpu);
            refresh(s, w);
        }
    }
    if (d)
        closedir(d);
    return s;
}

void sup_set_lease(sup *s, int64_t lease_ms)
{
    s->cfg.lease_ms = lease_ms;
}

static void netns_tidy(sup *s, int64_t now);

void sup_close(sup *s)
{
    if (s) {
        s->netns_tidied = 0; /* now: the workers' networks go with them */
        netns_tidy(s, INT64_MAX);
    }
    free(s);
}

int sup_scan(sup *s)
{
    int changed = 0;
    for (int i = 0; i < s->n; i++)
        changed |= refresh(s, &s->w[i]);
    return changed;
}

static const char *launcher_for(sup *s, const char *image, const char *framework)
{
    for (int i = 0; i < s->cfg.nlaunchers; i++)
        if (!strcmp(s->cfg.launcher_image[i], image))
            return s->cfg.launcher_path[i][0] ? s->cfg.launcher_path[i] : NULL;
    for (int i = 0; i < s->cfg.nlaunchers; i++)
        if (!strcmp(s->cfg.launcher_image[i], framework))
            return s->cfg.launcher_path[i][0] ? s->cfg.launcher_path[i] : NULL;
    return NULL;
}

/* A worker that could not be launched: failed, with why, in its status. */
static void fail_launch(sup *s, struct worker *w, const char *why)
{
    char dir[4200], line[320];
    fprintf(stderr, "cohort-agent: worker %lld: %s\n", (long long)w->id, why);
    fmt_cut(dir, sizeof dir, "%s/%lld", s->cfg.dir, (long long)w->id);
    fmt_cut(line, sizeof line, "error %.300s\n", why);
    if (mkdir(dir, 0700) == 0 || errno == EEXIST)
        write_small(s->cfg.dir, w->id, "status", line);
    w->state = W_FAILED;
    w->gpus = 0;
    fmt_cut(w->message, sizeof w->message, "%.250s", why);
}

/* Hands a launch spec to a new cohort-shim: one posix_spawn and one write,
 * so a batch of workers starts without the agent touching their files. */
/* ---- what a worker hides from the storage walk ---- */

#define HIDDEN_FDS_MAX (1 << 20) /* descriptors and mappings looked at per worker */
#define HIDDEN_SEEN_MAX 4096     /* deleted files told apart; past them, each counts */

/* The deleted files found so far, each (inode) counted once while there is
 * room to remember it; past that every sighting counts (never less than
 * the truth: a job that opens one file many times only charges itself). */
struct hidden_walk {
    dev_t dev;
    ino_t seen[HIDDEN_SEEN_MAX];
    int n, looked;
    int64_t bytes;
};

static void hidden_add(struct hidden_walk *h, const struct stat *sb)
{
    if (!S_ISREG(sb->st_mode) || sb->st_nlink != 0 || sb->st_dev != h->dev)
        return;
    for (int i = 0; i < h->n; i++)
        if (h->seen[i] == sb->st_ino)
            return;
    if (h->n < HIDDEN_SEEN_MAX)
        h->seen[h->n++] = sb->st_ino;
    h->bytes += (int64_t)sb->st_blocks * 512;
}

/* The entries of one of a process's /proc directories (fd: its open
 * descriptors; map_files: its file mappings, which outlive a closed
 * descriptor), each stat'd through its link. */
static void hidden_in(struct hidden_walk *h, const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && h->looked < HIDDEN_FDS_MAX) {
        struct stat sb;
        if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &sb, 0) != 0)
            continue;
        h->looked++;
        hidden_add(h, &sb);
    }
    if (d)
        closedir(d);
}

/*
 * The bytes a worker holds on its workspace's file system in files it has
 * deleted and keeps open or mapped: no walk of the volumes sees them, and
 * a job could fill the node's disk that way past its tenant's quota.  Its
 * processes are those of its cgroup (none known: 0).  A descriptor held
 * only in flight in a Unix socket's queue is seen by nothing here: off
 * btrfs (whose qgroups count such files) that remains a way around.
 */
static int64_t hidden_bytes(const sup *s, const struct worker *w)
{
    const cg_root *cg = s->cfg.cgroup;
    char procs[CG_PATH_MAX + 64], path[64];
    static struct hidden_walk h; /* the agent's one thread: no lock */
    if (!w->ws_dev || !cg || !cg_used(cg))
        return 0;
    const char *base = cg->path[0] ? cg->path : cg->v1[CG_V1_PIDS];
    if (!base[0])
        return 0;
    h.dev = w->ws_dev;
    h.n = h.looked = 0;
    h.bytes = 0;
    fmt_cut(procs, sizeof procs, "%s/w%lld/cgroup.procs", base, (long long)w->id);
    FILE *f = fopen(procs, "re");
    long long pid;
    while (f && fscanf(f, "%lld", &pid) == 1 && h.looked < HIDDEN_FDS_MAX) {
        fmt_cut(path, sizeof path, "/proc/%lld/fd", pid);
        hidden_in(&h, path);
        fmt_cut(path, sizeof path, "/proc/%lld/map_files", pid);
        hidden_in(&h, path);
    }
    if (f)
        fclose(f);
    return h.bytes;
}

static void launch(sup *s, struct worker *w, const cJSON *spec)
{
    char dir[4200], err[300] = "";
    int pfd[2] = {-1, -1};
    struct stat ws;
    const char *workspace = jget_str(spec, LAUNCH_KEY(workspace));
    w->ws_dev = workspace && stat(workspace, &ws) == 0 ? ws.st_dev : 0;
    fmt_cut(dir, sizeof dir, "%s/%lld", s->cfg.dir, (long long)w->id);
    const char *image = jget_str(spec, LAUNCH_KEY(image)), *fw = jget_str(spec, LAUNCH_KEY(framework));
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "dir", dir);
    cJSON_AddItemReferenceToObject(req, "spec", (cJSON *)spec);
    const char *launcher = image && fw ? launcher_for(s, image, fw) : NULL;
    if (launcher)
        cJSON_AddStringToObject(req, "launcher", launcher);
    cJSON_AddStringToObject(req, "agent_dir", s->cfg.agent_dir);
    if (s->cfg.container)
        cJSON_AddItemReferenceToObject(req, "container", (cJSON *)s->cfg.container);
    if (s->cfg.agent_lock)
        cJSON_AddStringToObject(req, "agent_lock", s->cfg.agent_lock);
    cJSON_AddNumberToObject(req, "lease_ms", (double)s->cfg.lease_ms);
    cJSON_AddNumberToObject(req, "grace_ms", (double)s->cfg.grace_ms);
    const cg_root *cg = s->cfg.cgroup;
    if (cg && cg_used(cg)) {
        cJSON *c = cJSON_AddObjectToObject(req, "cgroup");
        cJSON_AddStringToObject(c, "path", cg->path);
        cJSON *v1 = cJSON_AddArrayToObject(c, "v1");
        for (int i = 0; i < CG_V1_N; i++)
            cJSON_AddItemToArray(v1, cJSON_CreateString(cg->v1[i]));
        cJSON_AddNumberToObject(c, "cpu", cg->cpu);
        cJSON_AddNumberToObject(c, "memory", cg->memory);
        cJSON_AddNumberToObject(c, "pids", cg->pids);
        cJSON_AddNumberToObject(c, "devices", cg->devices);
        cJSON_AddNumberToObject(c, "pids_max", (double)s->cfg.pids_max);
    }
    char *text = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    pid_t pid;
    int rc = -1;
    if (!text || pipe2(pfd, O_CLOEXEC) != 0) {
        fmt_cut(err, sizeof err, "cannot prepare the launch: %s", strerror(errno));
        goto out;
    }
    posix_spawn_file_actions_adddup2(&fa, pfd[0], 0);
    char *const argv[] = {(char *)s->cfg.shim, NULL};
    char *const envp[] = {NULL};
    int e = posix_spawn(&pid, s->cfg.shim, &fa, NULL, argv, envp);
    if (e != 0) {
        fmt_cut(err, sizeof err, "cannot run %.200s: %s", s->cfg.shim, strerror(e));
        goto out;
    }
    close(pfd[0]);
    pfd[0] = -1;
    size_t n = strlen(text), done = 0;
    while (done < n) {
        ssize_t wr = write(pfd[1], text + done, n - done);
        if (wr < 0 && errno == EINTR)
            continue;
        if (wr < 0) {
            fmt_cut(err, sizeof err, "cannot hand the spec to the shim: %s", strerror(errno));
            goto out;
        }
        done += (size_t)wr;
    }
    rc = 0;
out:
    posix_spawn_file_actions_destroy(&fa);
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    free(text);
    if (rc == 0) {
        w->state = W_STARTING;
        return;
    }
    fail_launch(s, w, err);
}

static void stop(struct worker *w)
{
    if (w->stop_at || (w->state != W_RUNNING && w->state != W_STARTING))
        return;
    w->stop_at = util_mono_ms();
    if (w->pid > 0)
        kill(w->pid, SIGTERM);
}

/* A worker stopped before its container started: its shim (and the pull
 * it runs, in the shim's session) ends; refresh then records the stop. */
static void stop_starting(sup *s, struct worker *w)
{
    char buf[32];
    if (w->pid > 0 || read_small(s->cfg.dir, w->id, "pid", buf, sizeof buf) == 0 ||
        read_small(s->cfg.dir, w->id, "shim", buf, sizeof buf) != 0)
        return;
    pid_t shim = (pid_t)atoi(buf);
    if (shim > 0)
        kill(-shim, SIGKILL);
}

/* GPUs held by workers that have not ended. */
static uint64_t gpus_held(sup *s)
{
    uint64_t m = 0;
    for (int i = 0; i < s->n; i++)
        if (s->w[i].state == W_STARTING || s->w[i].state == W_RUNNING)
            m |= s->w[i].gpus;
    return m;
}

/* The lowest GPU of mask at or after position skip (in ascending order), or -1. */
static int nth_gpu(uint64_t mask, int skip)
{
    for (int g = 0; g < 64; g++)
        if (mask >> g & 1 && skip-- == 0)
            return g;
    return -1;
}

/*
 * CUDA_VISIBLE_DEVICES for the workers of one attempt of a job on this node
 * (members, by local rank): each one's first GPU at the position of its
 * local rank, so a program that picks device LOCAL_RANK gets a GPU of its
 * own; then the others they hold.  Every member sees the same list, so the
 * ranks of a job on one node can still reach each other's GPUs.
 */
static void visible_list(struct worker **members, int n, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            for (int k = pass; k < (pass ? 64 : 1); k++) {
                int g = nth_gpu(members[i]->gpus, k);
                if (g < 0)
                    break;
                if (used < len) { /* a label: cut to fit */
                    fmt_cut(out + used, len - used, "%s%d", used ? "," : "", g);
                    used += strlen(out + used);
                }
            }
}

/*
 * Gives each new worker whose spec asks for GPUs its own (none another live
 * worker holds), recorded in its directory before it starts; a CPU-only
 * worker on a node with GPUs sees none.  Sets CUDA_VISIBLE_DEVICES in the
 * env of each new spec copy.  A worker the node has too few GPUs for gets
 * a NULL spec and its message in why[i].
 */
static void assign_gpus(sup *s, struct worker **fresh, cJSON **specs, int nf,
                        char (*why)[128])
{
    uint64_t held = gpus_held(s);
    for (int i = 0; i < nf; i++) {
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(specs[i], "resources");
        int64_t want = specs[i] ? jget_int(res, "gpus", -1) : 0;
        uint64_t got = 0;
        for (int g = 0; g < s->cfg.ngpus && g < 64 && want > 0; g++)
            if (!(held >> g & 1)) {
                got |= 1ULL << g;
                want--;
            }
        if (want > 0) {
            fmt_cut(why[i], sizeof why[i], "no free GPU on this node (it has %d, %d held)",
                     s->cfg.ngpus, __builtin_popcountll(held));
            cJSON_Delete(specs[i]);
            specs[i] = NULL;
            continue;
        }
        fresh[i]->gpus = got;
        held |= got;
    }
    for (int i = 0; i < nf; i++) {
        cJSON *env = specs[i] ? cJSON_GetObjectItemCaseSensitive(specs[i], "env") : NULL;
        char list[512];
        if (!cJSON_IsObject(env) || s->cfg.ngpus <= 0)
            continue;
        /* The members of this worker's attempt on this node, by local rank. */
        struct worker *members[256];
        int n = 0;
        for (int r = 0; r < s->n && n < 256; r++)
            if (s->w[r].job_id == fresh[i]->job_id && s->w[r].attempt == fresh[i]->attempt &&
                s->w[r].gpus)
                members[n++] = &s->w[r];
        for (int a = 1; a < n; a++)
            for (int b = a; b > 0 && members[b - 1]->local_rank > members[b]->local_rank; b--) {
                struct worker *t = members[b];
                members[b] = members[b - 1];
                members[b - 1] = t;
            }
        visible_list(members, fresh[i]->gpus ? n : 0, list, sizeof list);
        cJSON_DeleteItemFromObjectCaseSensitive(env, "CUDA_VISIBLE_DEVICES");
        cJSON_AddStringToObject(env, "CUDA_VISIBLE_DEVICES", list);
        if (fresh[i]->gpus) {
            char dir[4200], hex[32];
            fmt_cut(dir, sizeof dir, "%s/%lld", s->cfg.dir, (long long)fresh[i]->id);
            fmt_cut(hex, sizeof hex, "%llx\n", (unsigned long long)fresh[i]->gpus);
            if (mkdir(dir, 0700) == 0 || errno == EEXIST)
                write_small(s->cfg.dir, fresh[i]->id, "gpus", hex);
        }
    }
}

#define RECONCILE_BATCH 1024

void sup_reconcile(sup *s, const cJSON *workers)
{
    struct worker *fresh[RECONCILE_BATCH];
    cJSON *specs[RECONCILE_BATCH];
    int nf = 0;
    for (int i = 0; i < s->n; i++)
        s->w[i].desired = 0;
    const cJSON *spec;
    cJSON_ArrayForEach(spec, workers)
    {
        int64_t id = jget_int(spec, LAUNCH_KEY(id), -1);
        if (id < 1)
            continue;
        struct worker *w = find(s, id);
        if (!w && nf < RECONCILE_BATCH && (w = add(s, id)) != NULL) {
            w->job_id = jget_int(spec, LAUNCH_KEY(job_id), -1);
            w->attempt = jget_int(spec, LAUNCH_KEY(attempt), -1);
            char bad[200], msg[256];
            w->local_rank = spec_local_rank(spec);
            if (launch_spec_check(spec, bad, sizeof bad) != 0) { /* refused, never guessed at */
                fmt_cut(msg, sizeof msg, "cohortd's launch spec is refused: %s", bad);
                fail_launch(s, w, msg);
            } else {
                w->state = W_STARTING; /* holds its GPUs from now on */
                fresh[nf] = w;
                specs[nf++] = cJSON_Duplicate(spec, 1);
            }
        }
        if (w)
            w->desired = 1;
    }
    static char why[RECONCILE_BATCH][128];
    for (int i = 0; i < nf; i++)
        fmt_cut(why[i], sizeof why[i], "out of memory for its launch spec");
    assign_gpus(s, fresh, specs, nf, why);
    for (int i = 0; i < nf; i++) {
        if (specs[i])
            launch(s, fresh[i], specs[i]);
        else
            fail_launch(s, fresh[i], why[i]);
        cJSON_Delete(specs[i]);
    }
    for (int i = 0; i < s->n; i++)
        if (!s->w[i].desired)
            stop(&s->w[i]);
}

/* 1 while a worker of the job's attempt is here and not ended. */
static int attempt_live(void *arg, int64_t job, int64_t attempt)
{
    const sup *s = arg;
    for (int i = 0; i < s->n; i++)
        if (s->w[i].job_id == job && s->w[i].attempt == attempt &&
            (s->w[i].state == W_STARTING || s->w[i].state == W_RUNNING))
            return 1;
    return 0;
}

/* The network namespaces of attempts with no worker left (netns.h): up
 * to 8 a second, and all of them when the agent stops (now INT64_MAX). */
static void netns_tidy(sup *s, int64_t now)
{
    const char *prefix = jget_str(s->cfg.container, "netns_prefix");
    const char *ip = jget_str(s->cfg.container, "ip");
    if (!prefix || !ip || now - s->netns_tidied < 1000)
        return;
    s->netns_tidied = now;
    /* a few a second, so that ending many jobs never holds the agent up;
     * all of them when it stops */
    const char *leases = jget_str(cJSON_GetObjectItemCaseSensitive(s->cfg.container, "egress"),
                                  "leases");
    netns_gc(ip, prefix, leases, attempt_live, s, now == INT64_MAX ? INT32_MAX : 8);
}

void sup_tick(sup *s)
{
    int64_t now = util_mono_ms();
    netns_tidy(s, now);
    for (int i = 0; i < s->n; i++) {
        struct worker *w = &s->w[i];
        if (w->stop_at && !w->killed && w->pid > 0 && w->state == W_RUNNING &&
            now - w->stop_at > s->cfg.grace_ms) {
            kill(w->pid, SIGKILL);
            w->killed = 1;
        } else if (w->stop_at && w->pid <= 0 && w->state == W_STARTING) {
            /* Stopped before its pid was known: signal once it is. */
            char buf[32];
            stop_starting(s, w);
            if (read_small(s->cfg.dir, w->id, "pid", buf, sizeof buf) == 0) {
                w->pid = (pid_t)atoi(buf);
                if (w->pid > 0)
                    kill(w->pid, SIGTERM);
            }
        }
    }
}

void sup_stop_all(sup *s)
{
    for (int i = 0; i < s->n; i++)
        stop(&s->w[i]);
}

/* Opens a worker's output.log to ship it, or returns -1.  Read and write:
 * what is shipped is punched out of it (punch_shipped).  A file whose start
 * is already a hole was shipped that far by an earlier run of the agent:
 * shipping resumes where its data begins. */
static int open_log(sup *s, struct worker *w)
{
    char path[4200];
    fmt_cut(path, sizeof path, "%s/%lld/output.log", s->cfg.dir, (long long)w->id);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) {
        fd = open(path, O_RDONLY | O_CLOEXEC);
        w->log_punched = INT64_MAX;
    }
    if (fd >= 0 && w->log_off == 0 && w->log_punched == 0) {
        off_t data = lseek(fd, 0, SEEK_DATA);
        if (data > 0)
            w->log_off = w->log_punched = data;
    }
    return fd;
}

/*
 * Frees the disk blocks of the output the server already has, all but the
 * newest LOG_KEEP bytes.  The file keeps its size and offsets (a hole reads
 * as zeros), so a worker that prints without end costs its node no more
 * disk than what is not shipped yet: cohortd's --log-limit bounds the rest.
 * A file system without holes (EOPNOTSUPP) keeps everything.
 */
static void punch_shipped(struct worker *w, int fd)
{
    struct stat sb;
    if (w->log_punched == INT64_MAX || fstat(fd, &sb) != 0)
        return;
    int64_t shipped = w->log_off < sb.st_size ? w->log_off : sb.st_size;
    int64_t to = (shipped - LOG_KEEP) & ~(int64_t)4095;
    if (to <= w->log_punched)
        return;
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, w->log_punched,
                  to - w->log_punched) == 0)
        w->log_punched = to;
    else
        w->log_punched = INT64_MAX;
}

int sup_ship_logs(sup *s, sup_ship_fn ship, void *arg)
{
    static char buf[LOG_CHUNK];
    int finished = 0;
    for (int i = 0; i < s->n; i++) {
        struct worker *w = &s->w[i];
        if (w->log_done || w->state == W_STARTING)
            continue;
        int done = w->state == W_EXITED || w->state == W_FAILED;
        if (w->log_fd <= 0)
            w->log_fd = open_log(s, w);
        int fd = w->log_fd;
        if (fd < 0) {
            w->log_fd = 0;
            w->log_done = done; /* nothing was ever printed */
            finished |= done;
            continue;
        }
        for (int rounds = 0; rounds < 16; rounds++) {
            struct stat sb;
            if (fstat(fd, &sb) != 0)
                break;
            int64_t left = sb.st_size - w->log_off;
            if (left <= 0) {
                w->log_done = done;
                finished |= done;
                break;
            }
            ssize_t n = pread(fd, buf, left < LOG_CHUNK ? (size_t)left : LOG_CHUNK, w->log_off);
            if (n <= 0)
                break;
            size_t send = (size_t)n;
            if (!done) {
                /* Whole lines only, unless one line fills the chunk. */
                while (send > 0 && buf[send - 1] != '\n')
                    send--;
                if (send == 0 && n < LOG_CHUNK)
                    break;
                if (send == 0)
                    send = (size_t)n;
            }
            int64_t size = ship(arg, w->id, w->log_off, buf, send);
            if (size < 0)
                break;
            w->log_off = size;
        }
        punch_shipped(w, fd);
        if (w->log_done) {
            close(fd);
            w->log_fd = 0;
        }
    }
    return finished;
}

cJSON *sup_report(sup *s)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < s->n; i++) {
        struct worker *w = &s->w[i];
        if (w->state == W_STARTING && !w->phase[0])
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", (double)w->id);
        if (w->digest[0])
            cJSON_AddStringToObject(o, "image_digest", w->digest);
        if (w->state == W_STARTING) {
            cJSON_AddStringToObject(o, "state", "starting");
            cJSON_AddStringToObject(o, "message", w->phase);
            cJSON_AddItemToArray(a, o);
            continue;
        }
        if (w->state == W_RUNNING || !w->log_done) {
            cJSON_AddStringToObject(o, "state", "running");
            int64_t hidden = w->state == W_RUNNING ? hidden_bytes(s, w) : 0;
            if (hidden > 0)
                cJSON_AddNumberToObject(o, "hidden_bytes", (double)hidden);
        } else if (w->state == W_EXITED) {
            cJSON_AddStringToObject(o, "state", "exited");
            if (w->signal)
                cJSON_AddNumberToObject(o, "signal", (double)w->signal);
            else
                cJSON_AddNumberToObject(o, "exit_code", (double)w->exit_code);
            if (w->message[0])
                cJSON_AddStringToObject(o, "message", w->message);
            if (w->cpu_us >= 0)
                cJSON_AddNumberToObject(o, "cpu_us", (double)w->cpu_us);
            if (w->memory_peak >= 0)
                cJSON_AddNumberToObject(o, "memory_peak", (double)w->memory_peak);
        } else {
            cJSON_AddStringToObject(o, "state", "failed");
            cJSON_AddStringToObject(o, "message", w->message);
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

void sup_reported(sup *s)
{
    int j = 0;
    for (int i = 0; i < s->n; i++) {
        struct worker *w = &s->w[i];
        int done = (w->state == W_EXITED || w->state == W_FAILED) && w->log_done;
        if (done && w->final_sent && !w->desired) {
            write_small(s->cfg.dir, w->id, "acked", "1\n");
            /* Left only when its shim died before cleaning up. */
            cg_worker_forget(s->cfg.cgroup, w->id);
            if (w->log_fd > 0)
                close(w->log_fd);
            continue; /* forgotten */
        }
        if (done)
            w->final_sent = 1;
        s->w[j++] = *w;
    }
    s->n = j;
}

int sup_running(sup *s)
{
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += s->w[i].state == W_RUNNING || s->w[i].state == W_STARTING;
    return n;
}

/* Removes one worker's directory: its files, then itself. */
static int remove_worker_dir(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlinkat(fd, e->d_name, 0);
    closedir(d);
    return unlinkat(dfd, name, AT_REMOVEDIR);
}

int sup_sweep(sup *s, int64_t keep_ms)
{
    DIR *d = opendir(s->cfg.dir);
    if (!d)
        return 0;
    int n = 0;
    time_t cutoff = time(NULL) - (time_t)(keep_ms / 1000);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end, path[4200];
        long long id = strtoll(e->d_name, &end, 10);
        struct stat sb;
        if (*end || id <= 0 || find(s, id))
            continue;
        /* "acked" is written when the worker is forgotten (sup_reported). */
        fmt_cut(path, sizeof path, "%s/%s/acked", s->cfg.dir, e->d_name);
        if (stat(path, &sb) != 0 || sb.st_mtime > cutoff)
            continue;
        n += remove_worker_dir(dirfd(d), e->d_name) == 0;
    }
    closedir(d);
    return n;
}
