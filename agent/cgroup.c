/*
 * cgroup: finding where the machine keeps each controller (cgroup v2, or a
 * cgroup v1 hierarchy), the agent's subtrees, and each worker's
 * directories, limits and usage.
 */
#include "agent/cgroup.h"
#include "lib/fmt.h"

#include "agent/fileutil.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define CGROUP2_MAGIC 0x63677270
#define CGROUP1_MAGIC 0x27e0eb

static const char *const ctl_names[] = {"cpu", "memory", "pids"};
static const char *const v1_names[CG_V1_N] = {"cpu", "cpuacct", "memory", "pids", "devices"};

/* The devices every container gets (as Docker and Podman give them). */
static const char *const std_devices[] = {
    "c 1:3 rwm",  /* null */    "c 1:5 rwm", /* zero */   "c 1:7 rwm", /* full */
    "c 1:8 rwm",  /* random */  "c 1:9 rwm", /* urandom */ "c 5:0 rwm", /* tty */
    "c 5:2 rwm",  /* ptmx */    "c 136:* rwm", /* pts */  NULL};

/* Writes text to dir/name: 0 or -errno. */
static int write_file(const char *dir, const char *name, const char *text)
{
    char path[CG_PATH_MAX + 96];
    if (fmt_whole(path, sizeof path, "%s/%s", dir, name) != 0)
        return -ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = strlen(text);
    int rc = write(fd, text, len) == (ssize_t)len ? 0 : -errno;
    close(fd);
    return rc;
}

/* 1 when word appears as a whole word in the list (separated by spaces,
 * commas or a newline). */
static int has_word(const char *list, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += wl)
        if ((p == list || p[-1] == ' ' || p[-1] == ',') &&
            (p[wl] == '\0' || p[wl] == ' ' || p[wl] == ',' || p[wl] == '\n'))
            return 1;
    return 0;
}

/* The value after "key " on its own line of text, or dflt. */
static int64_t keyed(const char *text, const char *key, int64_t dflt)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, key, kl) && p[kl] == ' ')
            return strtoll(p + kl + 1, NULL, 10);
    return dflt;
}

/* Turns on, for dir's children, each controller dir itself has. */
static void enable_controllers(const char *dir)
{
    char have[512];
    if (fu_read_in(dir, "cgroup.controllers", have, sizeof have) != 0)
        return;
    for (size_t i = 0; i < sizeof ctl_names / sizeof *ctl_names; i++) {
        char op[16];
        fmt_cut(op, sizeof op, "+%s", ctl_names[i]);
        if (has_word(have, ctl_names[i]))
            write_file(dir, "cgroup.subtree_control", op); /* busy or refused: left off */
    }
}

/* The mount point of the first file system of type (cgroup2), or of type
 * cgroup whose options name controller (a v1 hierarchy), into out: 0 or -1. */
static int find_mount(const char *type, const char *controller, char *out, size_t n)
{
    FILE *f = fopen("/proc/self/mounts", "re");
    char line[4096];
    int rc = -1;
    while (f && rc != 0 && fgets(line, sizeof line, f)) {
        char dev[256], dir[2048], t[64], opts[1024] = "";
        if (sscanf(line, "%255s %2047s %63s %1023s", dev, dir, t, opts) >= 3 && !strcmp(t, type) &&
            (!controller || has_word(opts, controller)) && strlen(dir) < n) {
            memcpy(out, dir, strlen(dir) + 1); /* fits: checked just above */
            rc = 0;
        }
    }
    if (f)
        fclose(f);
    return rc;
}

/* The calling process's cgroup in the v1 hierarchy holding controller
 * ("/a/b", "/" at the top), from /proc/self/cgroup, into out: 0 or -1. */
static int own_v1_cgroup(const char *controller, char *out, size_t n)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[4096];
    int rc = -1;
    while (f && rc != 0 && fgets(line, sizeof line, f)) {
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *b = '\0';
        b[1 + strcspn(b + 1, "\n")] = '\0';
        if (has_word(a + 1, controller) && fmt_whole(out, n, "%s", b + 1) == 0)
            rc = 0;
    }
    if (f)
        fclose(f);
    return rc;
}

static int make_dir(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* mkdir -p of path below base (which exists): 0 or -1 with errno. */
static int make_below(const char *base, const char *path)
{
    char p[CG_PATH_MAX];
    size_t bl = strlen(base);
    if (fmt_whole(p, sizeof p, "%s", path) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = p + bl + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        int rc = make_dir(p);
        *s = '/';
        if (rc != 0)
            return -1;
    }
    return make_dir(p);
}

/* The v2 subtree: <hierarchy>/cohort/<tag>, or under want. */
static int open_v2(const char *want, const char *tag, cg_root *out, char *err, size_t errlen)
{
    char base[CG_PATH_MAX], mid[CG_PATH_MAX + 16];
    struct statfs sf;
    if (!want) {
        if (find_mount("cgroup2", NULL, base, sizeof base) != 0)
            return 0; /* cgroup v1 only, or none */
        fmt_cut(mid, sizeof mid, "%s/cohort", base); /* sized for base and it */
    } else if (fmt_whole(base, sizeof base, "%s", want) != 0 ||
               fmt_whole(mid, sizeof mid, "%s", want) != 0) {
        fmt_cut(err, errlen, "the cgroup path %.100s... is too long", want);
        return -1;
    }
    if (statfs(base, &sf) != 0 || sf.f_type != CGROUP2_MAGIC) {
        fmt_cut(err, errlen, "%s is not a cgroup v2 directory", base);
        return -1;
    }
    if (fmt_whole(out->path, sizeof out->path, "%s/%s", mid, tag) != 0) {
        fmt_cut(err, errlen, "the cgroup path under %s is too long", mid);
        out->path[0] = '\0';
        return -1;
    }
    if (make_dir(mid) != 0 || make_dir(out->path) != 0) {
        int e = errno;
        int optional = !want && (e == EACCES || e == EROFS || e == EPERM);
        fmt_cut(err, errlen, "cannot create the cgroup %s: %s", out->path, strerror(e));
        out->path[0] = '\0';
        return optional ? 0 : -1;
    }
    enable_controllers(base);
    if (strcmp(mid, base))
        enable_controllers(mid);
    enable_controllers(out->path);
    char on[512] = "";
    fu_read_in(out->path, "cgroup.subtree_control", on, sizeof on);
    out->cpu = has_word(on, "cpu");
    out->memory = has_word(on, "memory");
    out->pids = has_word(on, "pids");
    return 0;
}

/* The subtree of controller c in its v1 hierarchy, if the machine keeps it
 * there: out->v1[c] set, or left "" (with a word in err when it failed). */
static void open_v1(int c, const char *tag, cg_root *out, char *err, size_t errlen)
{
    char mnt[CG_PATH_MAX], own[CG_PATH_MAX];
    struct statfs sf;
    if (find_mount("cgroup", v1_names[c], mnt, sizeof mnt) != 0 || statfs(mnt, &sf) != 0 ||
        sf.f_type != CGROUP1_MAGIC || own_v1_cgroup(v1_names[c], own, sizeof own) != 0)
        return;
    const char *rel = strcmp(own, "/") ? own : "";
    if (fmt_whole(out->v1[c], sizeof out->v1[c], "%s%s/cohort/%s", mnt, rel, tag) != 0 ||
        make_below(mnt, out->v1[c]) != 0) {
        fmt_cut(err, errlen, "cannot create the cgroup %.200s: %s", out->v1[c],
                 errno ? strerror(errno) : "path too long");
        out->v1[c][0] = '\0';
    }
}

int cg_open(const char *want, const char *tag, cg_root *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (want && !strcmp(want, "off"))
        return 0;
    if (open_v2(want, tag, out, err, errlen) != 0)
        return -1;
    /* Devices: an eBPF device program on each worker's v2 directory, and
     * the v1 devices controller beside it where the host has one. */
    out->devices = out->path[0] != 0;
    if (want)
        return 0;
    /* What v2 does not hold, v1 may: a hybrid host, or v1 alone. */
    int *on[CG_V1_N] = {&out->cpu, NULL, &out->memory, &out->pids, &out->devices};
    int v2_cpu = out->cpu;
    for (int c = 0; c < CG_V1_N; c++) {
        if (c == CG_V1_CPUACCT ? v2_cpu : c != CG_V1_DEVICES && *on[c])
            continue; /* v2 has it (its cpu.stat counts what cpuacct would) */
        open_v1(c, tag, out, err, errlen);
        if (on[c] && out->v1[c][0])
            *on[c] = 1;
    }
    return 0;
}

int cg_used(const cg_root *r)
{
    if (r->path[0])
        return 1;
    for (int c = 0; c < CG_V1_N; c++)
        if (r->v1[c][0])
            return 1;
    return 0;
}

const char *cg_controllers(const cg_root *r, char *buf, size_t n)
{
    static const char *const name[] = {"cpu", "memory", "pids", "devices"};
    const int on[] = {r->cpu, r->memory, r->pids, r->devices};
    const int v1[] = {r->v1[CG_V1_CPU][0] != 0, r->v1[CG_V1_MEMORY][0] != 0,
                      r->v1[CG_V1_PIDS][0] != 0, r->v1[CG_V1_DEVICES][0] != 0};
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < 4 && len < n; i++)
        if (on[i]) { /* a label: cut to fit */
            fmt_cut(buf + len, n - len, "%s%s%s", len ? " " : "", name[i], v1[i] ? "(v1)" : "");
            len += strlen(buf + len);
        }
    if (!buf[0])
        fmt_cut(buf, n, "none");
    return buf;
}

/* The allow-list of lim in the v1 devices cgroup dir: all denied, then the
 * standard devices and lim's own allowed.  0 or -errno. */
static int allow_devices(const char *dir, const cg_limits *lim, const char **what)
{
    char rule[64];
    int rc = write_file(dir, "devices.deny", "a");
    for (int i = 0; rc == 0 && std_devices[i]; i++)
        rc = write_file(dir, "devices.allow", std_devices[i]);
    for (int i = 0; rc == 0 && lim->devices && lim->devices[i]; i++) {
        struct stat sb;
        if (stat(lim->devices[i], &sb) != 0)
            return -errno;
        if (!S_ISCHR(sb.st_mode) && !S_ISBLK(sb.st_mode))
            return -ENODEV;
        fmt_cut(rule, sizeof rule, "%c %u:%u rwm", S_ISCHR(sb.st_mode) ? 'c' : 'b',
                 major(sb.st_rdev), minor(sb.st_rdev));
        rc = write_file(dir, "devices.allow", rule);
    }
    *what = "the device allow-list";
    return rc;
}

/* ---- the device allow-list on cgroup v2: an eBPF program ---- */

#define DEV_ANY (-1)
#define MAX_DEV_RULES 64

struct dev_rule {
    int type; /* BPF_DEVCG_DEV_CHAR or BPF_DEVCG_DEV_BLOCK */
    long long major, minor; /* DEV_ANY: every one */
};

static struct bpf_insn insn(unsigned char code, int dst, int src, short off, int imm)
{
    struct bpf_insn i;
    memset(&i, 0, sizeof i);
    i.code = code;
    i.dst_reg = dst & 0xf;
    i.src_reg = src & 0xf;
    i.off = off;
    i.imm = imm;
    return i;
}

/* The standard devices and lim's own as rules, into r: how many, or -errno. */
static int dev_rules(const cg_limits *lim, struct dev_rule *r)
{
    static const struct dev_rule std[] = {
        {BPF_DEVCG_DEV_CHAR, 1, 3},   {BPF_DEVCG_DEV_CHAR, 1, 5}, {BPF_DEVCG_DEV_CHAR, 1, 7},
        {BPF_DEVCG_DEV_CHAR, 1, 8},   {BPF_DEVCG_DEV_CHAR, 1, 9}, {BPF_DEVCG_DEV_CHAR, 5, 0},
        {BPF_DEVCG_DEV_CHAR, 5, 2},   {BPF_DEVCG_DEV_CHAR, 136, DEV_ANY}};
    int n = (int)(sizeof std / sizeof *std);
    memcpy(r, std, sizeof std);
    for (int i = 0; lim->devices && lim->devices[i]; i++) {
        struct stat sb;
        if (n == MAX_DEV_RULES)
            return -E2BIG;
        if (stat(lim->devices[i], &sb) != 0)
            return -errno;
        if (!S_ISCHR(sb.st_mode) && !S_ISBLK(sb.st_mode))
            return -ENODEV;
        r[n++] = (struct dev_rule){S_ISCHR(sb.st_mode) ? BPF_DEVCG_DEV_CHAR : BPF_DEVCG_DEV_BLOCK,
                                   major(sb.st_rdev), minor(sb.st_rdev)};
    }
    return n;
}

/*
 * The program: r2 the device's type, r4 its major, r5 its minor (from
 * struct bpf_cgroup_dev_ctx); each rule a run of "if it differs, skip to
 * the next rule", then allow (r0 = 1); past the last rule, deny.  Any
 * access (read, write, mknod) of an allowed device is allowed.
 */
static int dev_program(const struct dev_rule *r, int n, struct bpf_insn *p)
{
    int k = 0;
    p[k++] = insn(BPF_LDX | BPF_MEM | BPF_W, 2, 1, 0, 0); /* access_type */
    p[k++] = insn(BPF_ALU64 | BPF_AND | BPF_K, 2, 0, 0, 0xffff);
    p[k++] = insn(BPF_LDX | BPF_MEM | BPF_W, 4, 1, 4, 0); /* major */
    p[k++] = insn(BPF_LDX | BPF_MEM | BPF_W, 5, 1, 8, 0); /* minor */
    for (int i = 0; i < n; i++) {
        int checks = 1 + (r[i].major != DEV_ANY) + (r[i].minor != DEV_ANY);
        int left = checks + 2; /* this rule's instructions from its first check */
        p[k++] = insn(BPF_JMP | BPF_JNE | BPF_K, 2, 0, (short)(--left), r[i].type);
        if (r[i].major != DEV_ANY)
            p[k++] = insn(BPF_JMP | BPF_JNE | BPF_K, 4, 0, (short)(--left), (int)r[i].major);
        if (r[i].minor != DEV_ANY)
            p[k++] = insn(BPF_JMP | BPF_JNE | BPF_K, 5, 0, (short)(--left), (int)r[i].minor);
        p[k++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1);
        p[k++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    }
    p[k++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0);
    p[k++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    return k;
}

/* lim's allow-list as a device program attached to the v2 directory dir
 * (as crun and the kubelet do on cgroup v2).  0 or -errno. */
static int attach_device_program(const char *dir, const cg_limits *lim)
{
    struct dev_rule r[MAX_DEV_RULES];
    struct bpf_insn p[6 + 5 * MAX_DEV_RULES];
    int n = dev_rules(lim, r);
    if (n < 0)
        return n;
    int k = dev_program(r, n, p), rc = 0;
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    a.insns = (uint64_t)(uintptr_t)p;
    a.insn_cnt = (uint32_t)k;
    a.license = (uint64_t)(uintptr_t) "Apache-2.0";
    int prog = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof a);
    int cg = prog >= 0 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (prog < 0 || cg < 0) {
        rc = -errno;
        goto out;
    }
    memset(&a, 0, sizeof a);
    a.target_fd = (uint32_t)cg;
    a.attach_bpf_fd = (uint32_t)prog;
    a.attach_type = BPF_CGROUP_DEVICE;
    if (syscall(SYS_bpf, BPF_PROG_ATTACH, &a, sizeof a) != 0)
        rc = -errno;
out:
    /* attached, the cgroup holds the program; it goes with the cgroup */
    if (cg >= 0)
        close(cg);
    if (prog >= 0)
        close(prog);
    return rc;
}

/* lim's limits in w's v2 directory: 0 or -errno, *what the file. */
static int limit_v2(const cg_root *root, const cg_worker *w, const cg_limits *lim,
                    const char **what)
{
    char v[64];
    int rc = 0;
    if (root->cpu && !root->v1[CG_V1_CPU][0] && lim->cpu_milli > 0) {
        /* quota per 100 ms period: 1000 milli-CPUs is 100 ms of every 100 ms */
        fmt_cut(v, sizeof v, "%lld 100000", (long long)(lim->cpu_milli * 100));
        *what = "cpu.max";
        rc = write_file(w->path, "cpu.max", v);
    }
    if (rc == 0 && root->memory && !root->v1[CG_V1_MEMORY][0] && lim->memory_mb > 0) {
        fmt_cut(v, sizeof v, "%lld", (long long)lim->memory_mb * 1024 * 1024);
        *what = "memory.max";
        rc = write_file(w->path, "memory.max", v);
        /* The limit is the memory the spec sold: no swapping past it. */
        if (rc == 0)
            write_file(w->path, "memory.swap.max", "0");
    }
    if (rc == 0 && root->pids && !root->v1[CG_V1_PIDS][0] && lim->pids_max > 0) {
        fmt_cut(v, sizeof v, "%lld", (long long)lim->pids_max);
        *what = "pids.max";
        rc = write_file(w->path, "pids.max", v);
    }
    if (rc == 0 && lim->restrict_devices) {
        *what = "the device allow-list (an eBPF device program)";
        rc = attach_device_program(w->path, lim);
        /* where v1 holds the devices controller, its list stands alone */
        if (rc != 0 && root->v1[CG_V1_DEVICES][0])
            rc = 0;
    }
    return rc;
}

/* lim's limits in w's v1 directories: 0 or -errno, *what the file. */
static int limit_v1(const cg_worker *w, const cg_limits *lim, const char **what)
{
    char v[64];
    int rc = 0;
    if (w->v1[CG_V1_CPU][0] && lim->cpu_milli > 0) {
        fmt_cut(v, sizeof v, "%lld", (long long)(lim->cpu_milli * 100));
        *what = "cpu.cfs_quota_us";
        rc = write_file(w->v1[CG_V1_CPU], "cpu.cfs_period_us", "100000");
        if (rc == 0)
            rc = write_file(w->v1[CG_V1_CPU], "cpu.cfs_quota_us", v);
    }
    if (rc == 0 && w->v1[CG_V1_MEMORY][0] && lim->memory_mb > 0) {
        fmt_cut(v, sizeof v, "%lld", (long long)lim->memory_mb * 1024 * 1024);
        *what = "memory.limit_in_bytes";
        rc = write_file(w->v1[CG_V1_MEMORY], "memory.limit_in_bytes", v);
        /* memory and swap together held to the same: no swapping past it
         * (absent where the kernel keeps no swap accounting). */
        int s = rc == 0 ? write_file(w->v1[CG_V1_MEMORY], "memory.memsw.limit_in_bytes", v) : 0;
        if (s != 0 && s != -ENOENT) {
            *what = "memory.memsw.limit_in_bytes";
            rc = s;
        }
    }
    if (rc == 0 && w->v1[CG_V1_PIDS][0] && lim->pids_max > 0) {
        fmt_cut(v, sizeof v, "%lld", (long long)lim->pids_max);
        *what = "pids.max";
        rc = write_file(w->v1[CG_V1_PIDS], "pids.max", v);
    }
    if (rc == 0 && w->v1[CG_V1_DEVICES][0] && lim->restrict_devices)
        rc = allow_devices(w->v1[CG_V1_DEVICES], lim, what);
    return rc;
}

/* Every directory of w, v2 first: NULL past the last. */
static const char *dir_at(const cg_worker *w, int i)
{
    if (i == 0)
        return w->path;
    return i <= CG_V1_N ? w->v1[i - 1] : NULL;
}

/* Removes w's directories (best effort) and closes its descriptors. */
static void worker_undo(cg_worker *w)
{
    cg_worker_close(w);
    for (int i = 0; dir_at(w, i); i++)
        if (dir_at(w, i)[0])
            rmdir(dir_at(w, i));
}

/* w's directory names under root (v2 and each v1 in use), made. */
static int worker_dirs(const cg_root *root, int64_t id, cg_worker *w, char *err, size_t errlen)
{
    const char *src[1 + CG_V1_N];
    char *dst[1 + CG_V1_N];
    src[0] = root->path;
    dst[0] = w->path;
    for (int c = 0; c < CG_V1_N; c++) {
        src[c + 1] = root->v1[c];
        dst[c + 1] = w->v1[c];
    }
    for (int i = 0; i < 1 + CG_V1_N; i++) {
        if (!src[i][0])
            continue;
        /* sizes: CG_PATH_MAX + 32 holds "/w" and any int64 */
        fmt_cut(dst[i], CG_PATH_MAX + 32, "%s/w%lld", src[i], (long long)id);
        if (make_dir(dst[i]) != 0) {
            fmt_cut(err, errlen, "cannot create the cgroup %s: %s", dst[i], strerror(errno));
            return -1;
        }
        char procs[CG_PATH_MAX + 64];
        if (fmt_path(procs, sizeof procs, dst[i], "cgroup.procs") != 0 ||
            (w->fd[i] = open(procs, O_WRONLY | O_CLOEXEC)) < 0) {
            fmt_cut(err, errlen, "cannot open %s: %s", procs, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int cg_worker_make(const cg_root *root, int64_t id, const cg_limits *lim, cg_worker *w,
                   char *err, size_t errlen)
{
    const char *what = "";
    memset(w, 0, sizeof *w);
    for (int i = 0; i < 1 + CG_V1_N; i++)
        w->fd[i] = -1;
    if (worker_dirs(root, id, w, err, errlen) != 0)
        goto fail;
    int rc = w->path[0] ? limit_v2(root, w, lim, &what) : 0;
    if (rc == 0)
        rc = limit_v1(w, lim, &what);
    if (rc != 0) {
        fmt_cut(err, errlen, "cannot set %s of worker %lld's cgroup: %s", what, (long long)id,
                 strerror(-rc));
        goto fail;
    }
    return 0;
fail:
    worker_undo(w);
    memset(w, 0, sizeof *w);
    for (int i = 0; i < 1 + CG_V1_N; i++)
        w->fd[i] = -1;
    return -1;
}

int cg_join(const cg_worker *w)
{
    for (int i = 0; i < 1 + CG_V1_N; i++)
        if (w->fd[i] >= 0 && write(w->fd[i], "0", 1) != 1)
            return -errno;
    return 0;
}

void cg_worker_close(cg_worker *w)
{
    for (int i = 0; i < 1 + CG_V1_N; i++) {
        if (w->fd[i] >= 0)
            close(w->fd[i]);
        w->fd[i] = -1;
    }
}

/* SIGKILL to each process cgroup.procs of dir lists: how many were listed
 * (0 when none, or the file cannot be read). */
static int kill_listed(const char *dir)
{
    char buf[16384];
    int n = 0;
    if (fu_read_in(dir, "cgroup.procs", buf, sizeof buf) != 0)
        return 0;
    for (char *p = buf, *end; *p; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 1) {
            kill((pid_t)pid, SIGKILL);
            n++;
        }
    }
    return n;
}

static void nap_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

int cg_kill(const cg_worker *w)
{
    if (w->path[0] && write_file(w->path, "cgroup.kill", "1") == 0)
        return 0;
    /* v1, or a kernel before 5.14: one signal per process, again while a
     * fork outruns the kills (pids.max bounds how many there can be). */
    const char *dir = w->path;
    for (int i = 0; !dir[0] && i < CG_V1_N; i++)
        dir = w->v1[i];
    if (!dir[0])
        return -ENOENT;
    for (int round = 0; round < 200 && kill_listed(dir) > 0; round++)
        nap_ms(5);
    return 0;
}

/* 1 while a process is left in any of w's cgroups. */
static int populated(const cg_worker *w)
{
    char buf[2048];
    if (w->path[0] && fu_read_in(w->path, "cgroup.events", buf, sizeof buf) == 0)
        return keyed(buf, "populated", 1) != 0;
    for (int c = 0; c < CG_V1_N; c++)
        if (w->v1[c][0] && fu_read_in(w->v1[c], "cgroup.procs", buf, sizeof buf) == 0 && buf[0])
            return 1;
    return 0;
}

/* What v2 counted, into u. */
static void usage_v2(const char *path, cg_usage *u)
{
    char buf[2048];
    if (fu_read_in(path, "cpu.stat", buf, sizeof buf) == 0)
        u->cpu_us = keyed(buf, "usage_usec", 0);
    if (fu_read_in(path, "memory.peak", buf, sizeof buf) == 0)
        u->memory_peak = strtoll(buf, NULL, 10);
    if (fu_read_in(path, "memory.max", buf, sizeof buf) == 0 && buf[0] != 'm')
        u->memory_max = strtoll(buf, NULL, 10);
    if (fu_read_in(path, "memory.events", buf, sizeof buf) == 0)
        u->oom_kills = keyed(buf, "oom_kill", 0);
}

/* What v1 counted, into u (over what v2 said, for the controllers v1 has). */
static void usage_v1(const cg_worker *w, cg_usage *u)
{
    char buf[2048];
    const char *acct = w->v1[CG_V1_CPUACCT], *mem = w->v1[CG_V1_MEMORY];
    if (acct[0] && fu_read_in(acct, "cpuacct.usage", buf, sizeof buf) == 0)
        u->cpu_us = strtoll(buf, NULL, 10) / 1000;
    if (!mem[0])
        return;
    if (fu_read_in(mem, "memory.max_usage_in_bytes", buf, sizeof buf) == 0)
        u->memory_peak = strtoll(buf, NULL, 10);
    if (fu_read_in(mem, "memory.limit_in_bytes", buf, sizeof buf) == 0) {
        long long v = strtoll(buf, NULL, 10);
        u->memory_max = v >= (1LL << 62) ? -1 : v; /* unlimited: the page-rounded maximum */
    }
    if (fu_read_in(mem, "memory.oom_control", buf, sizeof buf) == 0)
        u->oom_kills = keyed(buf, "oom_kill", 0);
}

/* The bound on processes of dir and how often it refused a fork, into u. */
static void usage_pids(const char *dir, cg_usage *u)
{
    char buf[256];
    if (!dir[0])
        return;
    if (fu_read_in(dir, "pids.max", buf, sizeof buf) == 0 && buf[0] != 'm')
        u->pids_max = strtoll(buf, NULL, 10);
    if (fu_read_in(dir, "pids.events", buf, sizeof buf) == 0)
        u->forks_refused = keyed(buf, "max", 0);
}

int cg_worker_end(cg_worker *w, cg_usage *u, int wait_ms)
{
    *u = (cg_usage){0, -1, -1, 0, -1, 0};
    cg_worker_close(w);
    /* The namespace's last processes are being killed: let them leave. */
    for (int waited = 0; waited < wait_ms && populated(w); waited += 5)
        nap_ms(5);
    if (w->path[0])
        usage_v2(w->path, u);
    usage_v1(w, u);
    usage_pids(w->v1[CG_V1_PIDS][0] ? w->v1[CG_V1_PIDS] : w->path, u);
    int rc = 0;
    for (int i = 0; dir_at(w, i); i++) {
        const char *d = dir_at(w, i);
        for (int waited = 0; d[0] && rmdir(d) != 0 && errno != ENOENT; waited += 5) {
            if (errno != EBUSY || waited >= wait_ms) {
                rc = -1;
                break;
            }
            nap_ms(5);
        }
    }
    return rc;
}

void cg_worker_forget(const cg_root *root, int64_t id)
{
    char path[CG_PATH_MAX + 32];
    if (!root)
        return;
    for (int i = -1; i < CG_V1_N; i++) {
        const char *base = i < 0 ? root->path : root->v1[i];
        if (base[0]) {
            fmt_cut(path, sizeof path, "%s/w%lld", base, (long long)id); /* as made */
            rmdir(path);
        }
    }
}

void cg_close(const cg_root *r)
{
    /* EBUSY while workers that outlive the agent are in them */
    if (r->path[0])
        rmdir(r->path);
    for (int c = 0; c < CG_V1_N; c++)
        if (r->v1[c][0])
            rmdir(r->v1[c]);
}
