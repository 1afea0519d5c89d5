/*
 * sched_life: job state changes driven by its workers.
 */
#include "scheduler/sched_life.h"
#include "lib/fmt.h"

#include <stdio.h>
#include <string.h>

#include "storage/store_job.h"
#include "storage/store_node.h"

struct tally {
    int64_t total, running, ok;
    int failed;
    store_worker first; /* the first failed rank */
};

static void count(void *arg, const store_worker *w)
{
    struct tally *t = arg;
    t->total++;
    int bad = !strcmp(w->state, "failed") || !strcmp(w->state, "lost") ||
              (!strcmp(w->state, "exited") && (w->exit_code != 0 || w->signal != 0));
    if (bad && !t->failed) {
        t->failed = 1;
        t->first = *w;
    } else if (!strcmp(w->state, "exited") && !bad) {
        t->ok++;
    } else if (!strcmp(w->state, "running")) {
        t->running++;
    }
}

/* "rank 1 on node n2 exited with status 3" and the like. */
static void describe(store_tx *tx, const store_worker *w, char *out, size_t n)
{
    store_node nd;
    const char *node = store_node_get_tx(tx, w->node_id, &nd) == STORE_OK ? nd.name : "?";
    if (!strcmp(w->state, "lost"))
        fmt_cut(out, n, "rank %lld on node %s was lost (%.150s)", (long long)w->rank, node,
                 w->message[0] ? w->message : "node down");
    else if (!strcmp(w->state, "failed"))
        fmt_cut(out, n, "rank %lld on node %s failed to start: %.150s", (long long)w->rank, node,
                 w->message);
    else if (w->signal)
        fmt_cut(out, n, "rank %lld on node %s was killed by signal %lld%s%.150s%s",
                 (long long)w->rank, node, (long long)w->signal, w->message[0] ? " (" : "",
                 w->message, w->message[0] ? ")" : "");
    else
        fmt_cut(out, n, "rank %lld on node %s exited with status %lld%s%.150s%s",
                 (long long)w->rank, node, (long long)w->exit_code, w->message[0] ? " (" : "",
                 w->message, w->message[0] ? ")" : "");
}

/* Its port stays reserved until its last worker has ended (store_port_release_idle). */
static int stop_attempt(store_tx *tx, const store_job *j)
{
    return store_worker_stop_attempt(tx, j->id, j->attempt);
}

store_rc sched_job_eval(store_tx *tx, int64_t job_id)
{
    store_job j;
    int rc = store_job_get_tx(tx, 0, job_id, &j);
    if (rc != STORE_OK)
        return rc;
    if (j.state != JOB_STARTING && j.state != JOB_RUNNING)
        goto out;
    struct tally t = {0};
    rc = store_worker_list_tx(tx, j.id, j.attempt, count, &t);
    if (rc != STORE_OK || t.total == 0)
        goto out;
    char why[STORE_REASON_MAX + 1];
    if (t.failed) {
        char what[300];
        describe(tx, &t.first, what, sizeof what);
        rc = stop_attempt(tx, &j);
        if (rc != STORE_OK)
            goto out;
        if (j.attempt <= j.max_retries) {
            fmt_cut(why, sizeof why, "attempt %lld failed: %s; retrying (%lld of %lld)",
                     (long long)j.attempt, what, (long long)j.attempt, (long long)j.max_retries);
            rc = store_job_transition(tx, j.id, j.state, JOB_PENDING, why);
            if (rc == STORE_OK)
                rc = store_job_next_attempt(tx, j.id);
        } else {
            rc = store_job_transition(tx, j.id, j.state, JOB_FAILED, what);
        }
    } else {
        /* A rank that exited has started: RUNNING comes first even then. */
        if (j.state == JOB_STARTING && t.running + t.ok == t.total) {
            fmt_cut(why, sizeof why, "all %lld ranks started", (long long)t.total);
            rc = store_job_transition(tx, j.id, JOB_STARTING, JOB_RUNNING, why);
            j.state = JOB_RUNNING;
        }
        if (rc == STORE_OK && t.ok == t.total)
            rc = store_job_transition(tx, j.id, JOB_RUNNING, JOB_SUCCEEDED, "every rank exited 0");
    }
out:
    store_job_clear(&j);
    return rc;
}

store_rc sched_job_end(store_tx *tx, int64_t tenant_id, int64_t job_id, job_state to,
                       const char *reason)
{
    store_job j;
    int rc = store_job_get_tx(tx, tenant_id, job_id, &j);
    if (rc != STORE_OK)
        return rc;
    if (store_job_state_final(j.state))
        rc = STORE_JOB_FINAL;
    else
        rc = stop_attempt(tx, &j);
    if (rc == STORE_OK)
        rc = store_job_transition(tx, j.id, j.state, to, reason);
    store_job_clear(&j);
    return rc;
}
