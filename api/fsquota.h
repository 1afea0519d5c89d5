/*
 * fsquota: the file system's own stop at a tenant's storage quota, where
 * cohortd's volumes lie on btrfs.
 *
 * Each dataset and workspace is then a subvolume, assigned to a qgroup of
 * its tenant (1/<tenant id>) whose limit is the tenant's quota: a job that
 * writes past it gets EDQUOT in its own write, at once, as the kubelet's
 * project quotas give on xfs.  cohortd runs btrfs-progs' `btrfs` (it must
 * be root, as the agent is).  Anywhere else (ext4 and xfs without project
 * quotas, as on kernels built without CONFIG_QUOTA) the measuring walk of
 * stuse.h is what stops a job, within a walk.
 */
#ifndef COHORT_API_FSQUOTA_H
#define COHORT_API_FSQUOTA_H

#include <stddef.h>
#include <stdint.h>

typedef struct fsquota fsquota;

/* The volumes under dir, when they lie on btrfs and `btrfs` can enable
 * quotas there; NULL otherwise, with why in err (not an error: the walk
 * enforces alone). */
fsquota *fsquota_open(const char *dir, char *err, size_t errlen);
void fsquota_close(fsquota *q);

/* Makes path (its parent exists) a subvolume of tenant's, within limit
 * bytes (-1: none).  0, or -1 with err set (nothing left behind). */
int fsquota_make(fsquota *q, const char *path, int64_t tenant, int64_t limit, char *err,
                 size_t errlen);
/* The tenant's limit becomes limit (-1: none).  0, or -1. */
int fsquota_limit(fsquota *q, int64_t tenant, int64_t limit);

#endif
