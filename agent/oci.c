/*
 * oci: writes a worker container's config.json and converts seccomp
 * profiles.  Pure functions over their inputs: no process, no mount.
 */
#include "agent/oci.h"
#include "lib/fmt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "agent/jget.h"

/* The capabilities container engines give by default (Docker, Podman),
 * effective only inside the container's own user namespace, less
 * CAP_SETFCAP: a file capability written through the idmapped workspace
 * (where the container's root is the host's uid 0) would hold on the
 * host. */
static const char *const caps[] = {
    "CAP_CHOWN",  "CAP_DAC_OVERRIDE", "CAP_FOWNER",  "CAP_FSETID",           "CAP_KILL",
    "CAP_SETGID", "CAP_SETUID",       "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
    NULL};

static const char *const masked[] = {
    "/proc/acpi",          "/proc/asound",      "/proc/kcore",      "/proc/keys",
    "/proc/latency_stats", "/proc/timer_list",  "/proc/timer_stats", "/proc/sched_debug",
    "/proc/scsi",          "/sys/firmware",     "/sys/devices/virtual/powercap",
    "/sys/kernel/debug",   "/sys/fs/cgroup",    NULL};

static const char *const readonly[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                       "/proc/sysrq-trigger", NULL};

static cJSON *strings(const char *const *v)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; v && v[i]; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
    return a;
}

static void add_mount(cJSON *mounts, const char *dst, const char *type, const char *src,
                      const char *const *opts)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "destination", dst);
    cJSON_AddStringToObject(m, "type", type);
    cJSON_AddStringToObject(m, "source", src);
    cJSON_AddItemToObject(m, "options", strings(opts));
    cJSON_AddItemToArray(mounts, m);
}

static cJSON *mapping(uint32_t base)
{
    cJSON *a = cJSON_CreateArray(), *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "containerID", 0);
    cJSON_AddNumberToObject(m, "hostID", (double)base);
    cJSON_AddNumberToObject(m, "size", OCI_UID_RANGE);
    cJSON_AddItemToArray(a, m);
    return a;
}

static void add_mounts(const oci_spec *s, cJSON *mounts)
{
    static const char *const proc[] = {"nosuid", "noexec", "nodev", NULL};
    static const char *const dev[] = {"nosuid", "strictatime", "mode=755", "size=65536k", NULL};
    static const char *const sys[] = {"rbind", "nosuid", "noexec", "nodev", "ro", NULL};
    static const char *const root[] = {"nosuid", "nodev", "mode=755", "size=64k", NULL};
    static const char *const ro_file[] = {"bind", "ro", "nosuid", "nodev", "noexec", NULL};
    static const char *const init[] = {"bind", "ro", "nosuid", "nodev", NULL};
    static const char *const bind_rw[] = {"rbind", "rw", "nosuid", "nodev", "idmap", NULL};
    static const char *const bind_ro[] = {"rbind", "ro", "nosuid", "nodev", "idmap", NULL};
    static const char *const gpu[] = {"bind", "rw", "nosuid", "noexec", NULL};
    static const char *const host_file[] = {"bind", "ro", "nosuid", "nodev", NULL};
    char shm[64], tmp_size[64];
    /* Both are tmpfs: their pages are charged to the memory cgroup of the
     * worker that writes them, so neither holds more than the spec's memory. */
    fmt_cut(shm, sizeof shm, "size=%lldm", (long long)(s->shm_mb > 0 ? s->shm_mb : 64));
    fmt_cut(tmp_size, sizeof tmp_size, "size=%lldm", (long long)s->tmp_mb);
    const char *const shm_opts[] = {"nosuid", "noexec", "nodev", "mode=1777", shm, NULL};
    const char *const tmp[] = {"nosuid", "nodev", "mode=1777", s->tmp_mb > 0 ? tmp_size : NULL,
                               NULL};
    add_mount(mounts, "/proc", "proc", "proc", proc);
    add_mount(mounts, "/dev", "tmpfs", "tmpfs", dev);
    add_mount(mounts, "/dev/shm", "tmpfs", "shm", shm_opts);
    add_mount(mounts, "/tmp", "tmpfs", "tmpfs", tmp);
    /* A container cannot mount a sysfs itself (netns.h): the job's
     * namespace's own, or else the node's. */
    add_mount(mounts, "/sys", "bind", s->sys ? s->sys : "/sys", sys);
    add_mount(mounts, "/etc/hosts", "bind", "/etc/hosts", ro_file);
    add_mount(mounts, "/etc/resolv.conf", "bind", "/etc/resolv.conf", ro_file);
    add_mount(mounts, s->mount_root, "tmpfs", "tmpfs", root);
    add_mount(mounts, s->init_at, "bind", s->init, init);
    for (int i = 0; i < s->nbinds; i++)
        add_mount(mounts, s->binds[i].dst, "bind", s->binds[i].src,
                  s->binds[i].ro ? bind_ro : bind_rw);
    for (int i = 0; i < s->nfiles; i++)
        add_mount(mounts, s->files[i].dst, "bind", s->files[i].src, host_file);
    for (int i = 0; s->devices && s->devices[i]; i++)
        add_mount(mounts, s->devices[i], "bind", s->devices[i], gpu);
}

char *oci_config(const oci_spec *s, char *err, size_t errlen)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "ociVersion", "1.0.2");
    cJSON *p = cJSON_AddObjectToObject(c, "process");
    cJSON_AddBoolToObject(p, "terminal", 0);
    cJSON *user = cJSON_AddObjectToObject(p, "user");
    cJSON_AddNumberToObject(user, "uid", 0);
    cJSON_AddNumberToObject(user, "gid", 0);
    cJSON *argv = cJSON_AddArrayToObject(p, "args");
    cJSON_AddItemToArray(argv, cJSON_CreateString(s->init_at));
    for (int i = 0; s->argv[i]; i++)
        cJSON_AddItemToArray(argv, cJSON_CreateString(s->argv[i]));
    cJSON_AddItemToObject(p, "env", strings((const char *const *)s->env));
    cJSON_AddStringToObject(p, "cwd", s->cwd);
    cJSON *cp = cJSON_AddObjectToObject(p, "capabilities");
    cJSON_AddItemToObject(cp, "bounding", strings(caps));
    cJSON_AddItemToObject(cp, "effective", strings(caps));
    cJSON_AddItemToObject(cp, "permitted", strings(caps));
    cJSON_AddBoolToObject(p, "noNewPrivileges", 1);
    /* No rlimits: the worker keeps the node's (a user namespace cannot
     * raise a hard limit anyway). */

    cJSON *root = cJSON_AddObjectToObject(c, "root");
    cJSON_AddStringToObject(root, "path", s->rootfs);
    cJSON_AddBoolToObject(root, "readonly", 1);
    cJSON_AddStringToObject(c, "hostname", s->hostname);
    add_mounts(s, cJSON_AddArrayToObject(c, "mounts"));

    cJSON *l = cJSON_AddObjectToObject(c, "linux");
    cJSON_AddItemToObject(l, "uidMappings", mapping(s->uid_base));
    cJSON_AddItemToObject(l, "gidMappings", mapping(s->uid_base));
    cJSON *ns = cJSON_AddArrayToObject(l, "namespaces");
    static const char *const kinds[] = {"pid", "ipc", "uts", "mount", "user", "cgroup", NULL};
    for (int i = 0; kinds[i]; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", kinds[i]);
        cJSON_AddItemToArray(ns, o);
    }
    if (s->netns) { /* the job's own network on this node (netns.h) */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "network");
        cJSON_AddStringToObject(o, "path", s->netns);
        cJSON_AddItemToArray(ns, o);
    }
    cJSON_AddItemToObject(l, "maskedPaths", strings(masked));
    cJSON_AddItemToObject(l, "readonlyPaths", strings(readonly));
    /* GPU device nodes: allowed (crun's device cgroup is off with the cgroup
     * manager, so the bind mounts above are what grants them). */
    if (s->seccomp)
        cJSON_AddItemToObject(l, "seccomp", cJSON_Duplicate(s->seccomp, 1));
    char *text = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    if (!text)
        fmt_cut(err, errlen, "out of memory writing the container's configuration");
    return text;
}

/* ---- seccomp ---- */

#if defined(__x86_64__)
#define ARCH_GO "amd64"
#define ARCH_SCMP "SCMP_ARCH_X86_64"
#elif defined(__aarch64__)
#define ARCH_GO "arm64"
#define ARCH_SCMP "SCMP_ARCH_AARCH64"
#else
#error "seccomp: unknown architecture"
#endif

static int has_cap(const char *cap)
{
    for (int i = 0; caps[i]; i++)
        if (!strcmp(caps[i], cap))
            return 1;
    return 0;
}

/* 1 when a rule's includes all hold and none of its excludes does. */
static int rule_applies(const cJSON *rule)
{
    const cJSON *inc = cJSON_GetObjectItemCaseSensitive(rule, "includes");
    const cJSON *exc = cJSON_GetObjectItemCaseSensitive(rule, "excludes");
    const cJSON *e, *a;
    a = cJSON_GetObjectItemCaseSensitive(inc, "arches");
    if (cJSON_GetArraySize(a) > 0 && !jget_has_string(a, ARCH_GO))
        return 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(inc, "caps"))
    {
        if (!cJSON_IsString(e) || !has_cap(e->valuestring))
            return 0;
    }
    a = cJSON_GetObjectItemCaseSensitive(exc, "arches");
    if (jget_has_string(a, ARCH_GO))
        return 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(exc, "caps"))
    {
        if (cJSON_IsString(e) && has_cap(e->valuestring))
            return 0;
    }
    return 1;
}

/* The system calls Cohort rules itself (no_new_userns, no_set_id_modes),
 * and where their mode argument lies (-1: refused whole, ENOSYS). */
static const struct {
    const char *name;
    int mode_arg;
} ours[] = {{"clone", -2},  {"clone3", -2},  {"unshare", -2}, {"chmod", 1},
            {"fchmod", 1},  {"fchmodat", 2}, {"creat", 1},    {"open", 2},
            {"openat", 3},  {"mknod", 1},    {"mknodat", 2},  {"openat2", -1},
            {"fchmodat2", -1}};

/* names without the system calls Cohort rules itself. */
static cJSON *names_but_ours(const cJSON *names)
{
    cJSON *out = cJSON_CreateArray();
    const cJSON *n;
    cJSON_ArrayForEach(n, names)
    {
        int mine = 0;
        for (size_t i = 0; cJSON_IsString(n) && i < sizeof ours / sizeof *ours; i++)
            mine |= !strcmp(n->valuestring, ours[i].name);
        if (cJSON_IsString(n) && !mine)
            cJSON_AddItemToArray(out, cJSON_CreateString(n->valuestring));
    }
    return out;
}

/* A rule on one syscall whose argument index, masked with mask, equals
 * value: action, with errno_ret when not 0. */
static void add_masked_rule(cJSON *rules, const char *name, int index, unsigned mask,
                            unsigned value, const char *action, int errno_ret)
{
    cJSON *r = cJSON_CreateObject(), *names = cJSON_AddArrayToObject(r, "names");
    cJSON_AddItemToArray(names, cJSON_CreateString(name));
    cJSON_AddStringToObject(r, "action", action);
    if (errno_ret)
        cJSON_AddNumberToObject(r, "errnoRet", errno_ret);
    cJSON *args = cJSON_AddArrayToObject(r, "args"), *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "index", index);
    /* MASKED_EQ: (arg & value) == valueTwo */
    cJSON_AddNumberToObject(a, "value", mask);
    cJSON_AddNumberToObject(a, "valueTwo", value);
    cJSON_AddStringToObject(a, "op", "SCMP_CMP_MASKED_EQ");
    cJSON_AddItemToArray(args, a);
    cJSON_AddItemToArray(rules, r);
}

/* A rule refusing a whole syscall with errno_ret. */
static void add_refusal(cJSON *rules, const char *name, int errno_ret)
{
    cJSON *r = cJSON_CreateObject(), *names = cJSON_AddArrayToObject(r, "names");
    cJSON_AddItemToArray(names, cJSON_CreateString(name));
    cJSON_AddStringToObject(r, "action", "SCMP_ACT_ERRNO");
    cJSON_AddNumberToObject(r, "errnoRet", errno_ret);
    cJSON_AddItemToArray(rules, r);
}

/*
 * No set-user-ID or set-group-ID file made in a container: through the
 * idmapped workspace the container's root is the host's uid 0, so such a
 * file would be set-ID root on the node's disk.  chmod, fchmod, fchmodat,
 * creat, open, openat, mknod and mknodat (a regular file) are allowed with
 * a mode that has neither bit and
 * refused (EPERM) with either; openat2 and fchmodat2, whose modes seccomp
 * cannot read or which the profile does not know, answer ENOSYS, and libc
 * falls back to openat and fchmodat.
 */
static void no_set_id_modes(cJSON *rules)
{
    for (size_t i = 0; i < sizeof ours / sizeof *ours; i++) {
        if (ours[i].mode_arg == -1) {
            add_refusal(rules, ours[i].name, 38); /* ENOSYS */
        } else if (ours[i].mode_arg >= 0) {
            add_masked_rule(rules, ours[i].name, ours[i].mode_arg, 06000, 0, "SCMP_ACT_ALLOW", 0);
            add_masked_rule(rules, ours[i].name, ours[i].mode_arg, 04000, 04000,
                            "SCMP_ACT_ERRNO", 1);
            add_masked_rule(rules, ours[i].name, ours[i].mode_arg, 02000, 02000,
                            "SCMP_ACT_ERRNO", 1);
        }
    }
}

/*
 * Cohort's own rules on top of the profile: no user namespace inside a
 * container (a nested one would give the tenant capabilities over new
 * namespaces of its own: mounts, netfilter, all the kernel surface behind
 * them), as Docker's profile does.  clone and unshare are allowed without
 * CLONE_NEWUSER and refused (EPERM) with it; clone3, whose flags seccomp
 * cannot read, answers ENOSYS so that libc falls back to clone.
 */
static void no_new_userns(cJSON *rules)
{
    const unsigned newuser = 0x10000000; /* CLONE_NEWUSER */
    add_masked_rule(rules, "clone", 0, newuser, 0, "SCMP_ACT_ALLOW", 0);
    add_masked_rule(rules, "clone", 0, newuser, newuser, "SCMP_ACT_ERRNO", 1);
    add_masked_rule(rules, "unshare", 0, newuser, 0, "SCMP_ACT_ALLOW", 0);
    add_masked_rule(rules, "unshare", 0, newuser, newuser, "SCMP_ACT_ERRNO", 1);
    add_refusal(rules, "clone3", 38); /* ENOSYS */
}

cJSON *oci_seccomp_convert(const cJSON *profile, char *err, size_t errlen)
{
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(profile, "defaultAction");
    const cJSON *rules = cJSON_GetObjectItemCaseSensitive(profile, "syscalls");
    if (!cJSON_IsString(def) || !cJSON_IsArray(rules)) {
        fmt_cut(err, errlen, "not a seccomp profile (no defaultAction or syscalls)");
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "defaultAction", def->valuestring);
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(profile, "defaultErrnoRet");
    if (cJSON_IsNumber(dr))
        cJSON_AddNumberToObject(o, "defaultErrnoRet", dr->valuedouble);
    /* The native architecture only, not the profile's sub-architectures
     * (x86, x32): a 32-bit system call from a container kills it.  Workers
     * are 64-bit programs, and the filter compiles in half the time (crun
     * compiles it for every container: 17 against 33 ms here). */
    cJSON *arches = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arches, cJSON_CreateString(ARCH_SCMP));
    cJSON *out = cJSON_AddArrayToObject(o, "syscalls");
    const cJSON *r;
    cJSON_ArrayForEach(r, rules)
    {
        const cJSON *names = cJSON_GetObjectItemCaseSensitive(r, "names");
        const cJSON *action = cJSON_GetObjectItemCaseSensitive(r, "action");
        if (!cJSON_IsArray(names) || !cJSON_IsString(action) || !rule_applies(r))
            continue;
        cJSON *only = names_but_ours(names);
        if (cJSON_GetArraySize(only) == 0) {
            cJSON_Delete(only);
            continue;
        }
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToObject(e, "names", only);
        cJSON_AddStringToObject(e, "action", action->valuestring);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(r, "args");
        if (cJSON_IsArray(args) && cJSON_GetArraySize(args) > 0)
            cJSON_AddItemToObject(e, "args", cJSON_Duplicate(args, 1));
        const cJSON *er = cJSON_GetObjectItemCaseSensitive(r, "errnoRet");
        if (cJSON_IsNumber(er))
            cJSON_AddNumberToObject(e, "errnoRet", er->valuedouble);
        cJSON_AddItemToArray(out, e);
    }
    no_new_userns(out);
    no_set_id_modes(out);
    return o;
}

cJSON *oci_seccomp_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    char *text = NULL;
    cJSON *in = NULL, *out = NULL;
    if (!f) {
        fmt_cut(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        fmt_cut(err, errlen, "%s: cannot seek", path);
        goto done;
    }
    long n = ftell(f);
    rewind(f);
    if (n <= 0 || n > (8 << 20) || !(text = malloc((size_t)n + 1)) ||
        fread(text, 1, (size_t)n, f) != (size_t)n) {
        fmt_cut(err, errlen, "%s: cannot read it (or over 8 MiB)", path);
        goto done;
    }
    text[n] = '\0';
    if (!(in = cJSON_Parse(text))) {
        fmt_cut(err, errlen, "%s: not JSON", path);
        goto done;
    }
    out = oci_seccomp_convert(in, err, errlen);
done:
    fclose(f);
    free(text);
    cJSON_Delete(in);
    return out;
}
