/*
 * sup: the workers of this node, as their state directories tell.  Launches
 * what the desired state lists and is not here, stops (SIGTERM, SIGKILL
 * after the grace period) what runs and is no longer listed, and reports
 * every worker's state for the heartbeat.  Workers whose spec asks for GPUs
 * get GPUs of this node that no other live worker holds (the file "gpus" in
 * the worker's directory), shown to them through CUDA_VISIBLE_DEVICES.  Level-triggered: everything is
 * recomputed from the directories, so a restarted agent picks up its
 * workers where they are.
 */
#ifndef COHORT_AGENT_SUP_H
#define COHORT_AGENT_SUP_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/cgroup.h"

#define SUP_MAX_LAUNCHERS 16

typedef struct sup_config {
    const char *dir;        /* one sub-directory per worker */
    const char *shim;       /* the cohort-shim program */
    const char *agent_dir;  /* hidden from workers */
    int64_t grace_ms;       /* SIGTERM, then SIGKILL after this */
    const char *agent_lock; /* shims watch it: no agent for lease_ms stops a worker */
    int64_t lease_ms;
    const cg_root *cgroup;  /* the workers' cgroup subtree, or NULL */
    int64_t pids_max;       /* pids.max of every worker's cgroup */
    int ngpus;              /* GPUs of this node, numbered 0 .. ngpus-1 */
    /* Containers: the launch request's "container" object (shim_main.c), or
     * NULL when workers run as host processes (a trusted node). */
    const cJSON *container;
    int nlaunchers;
    const char *launcher_image[SUP_MAX_LAUNCHERS];
    const char *launcher_path[SUP_MAX_LAUNCHERS];
} sup_config;

typedef struct sup sup;

sup *sup_open(const sup_config *cfg, char *err, size_t errlen);
void sup_close(sup *s);
/* The lease cohortd announced: given to workers started from now on. */
void sup_set_lease(sup *s, int64_t lease_ms);
/* Re-reads every worker's directory; 1 when some state changed. */
int sup_scan(sup *s);
/* Brings the node to the desired list (the "workers" array of a desired state). */
void sup_reconcile(sup *s, const cJSON *workers);
/* Sends SIGKILL to workers past their grace period. */
void sup_tick(sup *s);
/* Stops every worker (lease lost, or the agent stops). */
void sup_stop_all(sup *s);
/* Ships what each worker printed since the last call.  ship() sends n
 * bytes at offset and returns the offset the server took the output to, or
 * -1, or SUP_LOG_CUT when the server stores no more of this worker's output
 * (its job's log limit): nothing more of it is sent.  Chunks end at a line
 * end while the worker runs, so no line is split. */
#define SUP_LOG_CUT INT64_MAX
typedef int64_t (*sup_ship_fn)(void *arg, int64_t id, int64_t offset, const char *buf, size_t n);
/* Returns 1 when some finished worker's output is now wholly shipped. */
int sup_ship_logs(sup *s, sup_ship_fn ship, void *arg);

/* The heartbeat's "workers" array (caller deletes).  A finished worker is
 * reported finished only once its whole output has been shipped. */
cJSON *sup_report(sup *s);
/* After a heartbeat with that report was accepted: finished workers that
 * are no longer desired are forgotten. */
void sup_reported(sup *s);
/* Workers still running. */
int sup_running(sup *s);
/* Removes the directories of workers forgotten (cohortd has their end and
 * their whole log) more than keep_ms ago; returns how many went. */
int sup_sweep(sup *s, int64_t keep_ms);

#endif
