/*
 * oci: the OCI runtime configuration (config.json for crun) of one worker's
 * container, and the seccomp profile it carries.
 *
 * What a container gets (DESIGN.md, "The worker contract"):
 *   - the image's root file system, read-only and shared;
 *   - a user namespace mapping container uids 0..65535 to the tenant's own
 *     host range (uid_base ..), never host uid 0;
 *   - its own PID, IPC, UTS, mount and cgroup namespaces; the host network;
 *   - the workspace read-write and each dataset read-only under mount_root,
 *     as idmapped bind mounts (files stay owned by uid 0 on the host and
 *     appear as the container's root inside), a tmpfs /tmp, a /dev/shm of
 *     the spec's size, /etc/hosts and /etc/resolv.conf of the host read-only;
 *   - no new privileges, the default capability set of container engines
 *     (only inside its namespace), masked and read-only /proc paths, and
 *     the seccomp profile;
 *   - cohort-init as PID 1 (init.c), which starts argv.
 */
#ifndef COHORT_AGENT_OCI_H
#define COHORT_AGENT_OCI_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define OCI_UID_RANGE 65536

typedef struct oci_bind {
    const char *src; /* host path */
    const char *dst; /* path in the container */
    int ro;
} oci_bind;

typedef struct oci_spec {
    const char *rootfs;     /* host path of the shared root file system */
    const char *init;       /* host path of cohort-init */
    const char *init_at;    /* where it appears in the container */
    const char *mount_root; /* a tmpfs holding the binds below (e.g. /cohort) */
    char *const *argv;      /* the worker's command, in the container */
    char *const *env;       /* NAME=value, NULL-terminated */
    const char *cwd;
    const char *hostname;
    uint32_t uid_base;      /* first host uid of the tenant's range */
    const oci_bind *binds;  /* under mount_root, idmapped */
    int nbinds;
    const oci_bind *files;  /* host files bound read-only as they are, not idmapped
                             * (the GPU driver's libraries and programs) */
    int nfiles;
    const char *const *devices; /* host device nodes given to it (GPUs), NULL-terminated */
    int64_t shm_mb;         /* size of /dev/shm */
    int64_t tmp_mb;         /* size of /tmp (0: the kernel's default, half the RAM) */
    const char *netns;      /* path of the network namespace to join; NULL: the node's */
    const char *sys;        /* the sysfs given as /sys (the namespace's own, netns.h);
                             * NULL: the node's /sys */
    const cJSON *seccomp;   /* an OCI seccomp object, or NULL for none */
} oci_spec;

/* config.json for s: a string the caller frees, or NULL (out of memory, or
 * a device that cannot be read, with err set). */
char *oci_config(const oci_spec *s, char *err, size_t errlen);

/*
 * Turns a seccomp profile in the containers-common format (Debian's
 * /usr/share/containers/seccomp.json: rules with includes and excludes by
 * capability and architecture) into the OCI form for this machine's
 * architecture and the capabilities oci_config gives, with Cohort's own
 * rules on top: no user namespace may be made inside a container (clone and
 * unshare with CLONE_NEWUSER fail with EPERM, clone3 with ENOSYS so that
 * libc falls back to clone).  NULL with err set
 * when the profile is not of that form.  The caller deletes the result.
 */
cJSON *oci_seccomp_convert(const cJSON *profile, char *err, size_t errlen);

/* Reads and converts the profile at path. */
cJSON *oci_seccomp_load(const char *path, char *err, size_t errlen);

#endif
