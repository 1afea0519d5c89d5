/*
 * stuse: what each tenant keeps in its volumes, and its storage quota.
 *
 * A thread of cohortd walks DATA_DIR/volumes/<tenant> every few seconds
 * (regular files' allocated blocks; no link followed, no other file system
 * entered) and keeps each tenant's bytes in memory; uploads add theirs as
 * they land, so a tenant is not let past its quota between two walks.
 * Its jobs' logs (DATA_DIR/logs/<job>) count in a tenant's bytes too, and
 * go when it deletes the job (api_jobs.c).
 * The walk counts each tenant's entries too (files, directories, links),
 * bounded by the platform's max_files.  After each walk, a tenant over its
 * quota (tenant_quotas.max_storage_bytes, or the platform's default) or
 * over max_files has its running jobs ended FAILED
 * "storage_quota_exceeded": on any file system, a job that writes past the
 * quota is stopped within a walk.  Uploads and new jobs of a tenant over
 * its quota are refused (api_files.c, api_jobs.c).
 */
#ifndef COHORT_API_STUSE_H
#define COHORT_API_STUSE_H

#include <stdint.h>

struct api_ctx;
typedef struct stuse stuse;

/* Starts measuring every interval_ms; NULL when the thread cannot start.
 * default_quota is the bytes a tenant without a quota of its own keeps;
 * max_files (-1: none) the entries (files, directories, links) any tenant
 * keeps, so that one tenant cannot use up the file system's inodes. */
stuse *stuse_start(struct api_ctx *ctx, int64_t interval_ms, int64_t default_quota,
                   int64_t max_files);
void stuse_stop(stuse *u);

/* The tenant's bytes as of the last walk plus uploads since; 0 before. */
int64_t stuse_used(stuse *u, int64_t tenant);
/* An upload of delta bytes (negative: a file removed) has landed. */
void stuse_add(stuse *u, int64_t tenant, int64_t delta);
/* Takes n bytes for tenant when its use and n fit quota (-1: none), at
 * once for all callers: 0, or -1 (nothing taken). */
int stuse_take(stuse *u, int64_t tenant, int64_t n, int64_t quota);
/* The tenant's quota in bytes: its own, else the platform's default; -1:
 * none.  Reads the store (a read snapshot of the caller's). */
int64_t stuse_quota(stuse *u, int64_t tenant);

/* A running worker of tenant holds bytes on the volumes' file system in
 * files it deleted and keeps open, which no walk sees (its agent measures
 * them, agent/sup.c): they count in the tenant's use, for quotas and the
 * walk's stops alike, until a heartbeat says otherwise (bytes 0: the
 * tenant is not read) or none comes for three heartbeats. */
void stuse_hidden(stuse *u, int64_t worker, int64_t tenant, int64_t bytes, int64_t now_ms);

/* The tenant's entries as of the last walk plus uploads since, and the
 * bound on them (-1: none). */
int64_t stuse_files(stuse *u, int64_t tenant);
int64_t stuse_max_files(const stuse *u);
/* Takes one entry for a new file of tenant when it fits the bound: 0, or
 * -1 (nothing taken).  stuse_add_files gives back (delta < 0) or adds. */
int stuse_take_file(stuse *u, int64_t tenant);
void stuse_add_files(stuse *u, int64_t tenant, int64_t delta);

#endif
