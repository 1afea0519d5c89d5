/*
 * metrics: counters for /metrics.  Owns fixed arrays of atomics.
 */
#include "server/metrics.h"

#include <string.h>

#include "storage/store_bill.h"
#include "storage/store_job.h"

static const int statuses[] = {200, 201, 204, 400, 401, 403, 404, 405, 409,
                               413, 414, 415, 422, 500, 503, 507, 0 /* other */};
#define NSTATUS ((int)(sizeof statuses / sizeof statuses[0]))

static const int64_t buckets_us[] = {100,    250,    500,    1000,    2500,    5000,   10000,
                                     25000,  50000,  100000, 250000,  500000,  1000000, 5000000};
#define NBUCKET ((int)(sizeof buckets_us / sizeof buckets_us[0]))

static const char *const *route_label;
static int nroutes;
static uint64_t counts[METRICS_ROUTES][NSTATUS];
static uint64_t hist[NBUCKET + 1];
static uint64_t hist_sum_us, hist_count;

int metrics_init(const char *const *labels, int n)
{
    if (n > METRICS_ROUTES)
        return -1;
    route_label = labels;
    nroutes = n;
    return 0;
}

void metrics_observe(int route, int status, int64_t us)
{
    if (route < 0 || route >= nroutes)
        return;
    int s = NSTATUS - 1;
    for (int i = 0; i < NSTATUS - 1; i++)
        if (statuses[i] == status)
            s = i;
    __atomic_add_fetch(&counts[route][s], 1, __ATOMIC_RELAXED);
    int b = 0;
    while (b < NBUCKET && us > buckets_us[b])
        b++;
    __atomic_add_fetch(&hist[b], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&hist_sum_us, (uint64_t)us, __ATOMIC_RELAXED);
    __atomic_add_fetch(&hist_count, 1, __ATOMIC_RELAXED);
}

static void count_state(void *arg, const char *state, int64_t n)
{
    int64_t *counts = arg;
    int s = store_job_state_of(state);
    if (s >= 0)
        counts[s] = n;
}

static void tenant_running(void *arg, const char *tenant, int64_t workers)
{
    util_buf_printf(arg, "cohort_tenant_running_workers{tenant=\"%s\"} %lld\n", tenant,
                    (long long)workers);
}

static void tenant_spent(void *arg, const char *tenant, const char *currency, int64_t amount)
{
    util_buf_printf(arg, "cohort_tenant_spend_total{tenant=\"%s\",currency=\"%s\"} %lld\n",
                    tenant, currency, (long long)amount);
}

/* The HTTP requests' counts by route and status, and their latencies. */
static void render_http(util_buf *b)
{
    util_buf_printf(b, "# HELP cohort_http_requests_total HTTP requests by route and status.\n"
                       "# TYPE cohort_http_requests_total counter\n");
    for (int r = 0; r < nroutes; r++) {
        for (int s = 0; s < NSTATUS; s++) {
            uint64_t v = __atomic_load_n(&counts[r][s], __ATOMIC_RELAXED);
            if (!v)
                continue;
            if (statuses[s])
                util_buf_printf(b, "cohort_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                                route_label[r], statuses[s], (unsigned long long)v);
            else
                util_buf_printf(b,
                                "cohort_http_requests_total{route=\"%s\",status=\"other\"} %llu\n",
                                route_label[r], (unsigned long long)v);
        }
    }
    util_buf_printf(b, "# HELP cohort_http_request_duration_seconds Time from the first byte"
                       " of a request to its response.\n"
                       "# TYPE cohort_http_request_duration_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i <= NBUCKET; i++) {
        cum += __atomic_load_n(&hist[i], __ATOMIC_RELAXED);
        if (i < NBUCKET)
            util_buf_printf(b, "cohort_http_request_duration_seconds_bucket{le=\"%g\"} %llu\n",
                            (double)buckets_us[i] / 1e6, (unsigned long long)cum);
        else
            util_buf_printf(b, "cohort_http_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
                            (unsigned long long)cum);
    }
    util_buf_printf(b, "cohort_http_request_duration_seconds_sum %.6f\n",
                    (double)__atomic_load_n(&hist_sum_us, __ATOMIC_RELAXED) / 1e6);
    util_buf_printf(b, "cohort_http_request_duration_seconds_count %llu\n",
                    (unsigned long long)__atomic_load_n(&hist_count, __ATOMIC_RELAXED));
}

/* The jobs by state, the store's writer and leadership. */
static void render_store(util_buf *b, store *st)
{
    util_buf_printf(b, "# HELP cohort_jobs Jobs by state.\n# TYPE cohort_jobs gauge\n");
    int64_t counts[JOB_NSTATES] = {0};
    store_job_state_counts(st, count_state, counts);
    for (int i = 0; i < JOB_NSTATES; i++)
        util_buf_printf(b, "cohort_jobs{state=\"%s\"} %lld\n", store_job_state_name(i),
                        (long long)counts[i]);
    uint64_t batches, writes;
    store_writer_stats(st, &batches, &writes);
    util_buf_printf(b, "# HELP cohort_store_commits_total Write transactions committed.\n"
                       "# TYPE cohort_store_commits_total counter\n"
                       "cohort_store_commits_total %llu\n"
                       "# HELP cohort_store_writes_total Writes in those transactions.\n"
                       "# TYPE cohort_store_writes_total counter\n"
                       "cohort_store_writes_total %llu\n",
                    (unsigned long long)batches, (unsigned long long)writes);
    util_buf_printf(b, "# HELP cohort_scheduler_leader 1 where this cohortd runs the scheduler "
                       "(of several on one PostgreSQL database, one does).\n"
                       "# TYPE cohort_scheduler_leader gauge\n"
                       "cohort_scheduler_leader %d\n",
                    store_leads(st));
}

/* The scheduler's passes. */
static void render_sched(util_buf *b, sched_service *sched)
{
    sched_stats ss;
    sched_stats_get(sched, &ss);
    util_buf_printf(b,
                    "# HELP cohort_scheduler_pass_seconds Scheduler passes that planned "
                    "(snapshot read to placements committed).\n"
                    "# TYPE cohort_scheduler_pass_seconds summary\n"
                    "cohort_scheduler_pass_seconds_sum %.6f\n"
                    "cohort_scheduler_pass_seconds_count %llu\n"
                    "# HELP cohort_scheduler_last_pass_seconds The last pass's time.\n"
                    "# TYPE cohort_scheduler_last_pass_seconds gauge\n"
                    "cohort_scheduler_last_pass_seconds %.6f\n"
                    "# HELP cohort_scheduler_max_pass_seconds The longest pass since start.\n"
                    "# TYPE cohort_scheduler_max_pass_seconds gauge\n"
                    "cohort_scheduler_max_pass_seconds %.6f\n"
                    "# HELP cohort_scheduler_last_pass_pending Pending jobs the last pass "
                    "planned over.\n"
                    "# TYPE cohort_scheduler_last_pass_pending gauge\n"
                    "cohort_scheduler_last_pass_pending %lld\n",
                    (double)ss.sum_us / 1e6, (unsigned long long)ss.passes,
                    (double)ss.last_us / 1e6, (double)ss.max_us / 1e6,
                    (long long)ss.last_pending);
}

void metrics_render(util_buf *b, store *st, sched_service *sched)
{
    render_http(b);
    render_store(b, st);
    if (sched)
        render_sched(b, sched);
    /* Tenant names are [a-z0-9._-]: nothing in them needs escaping in a label. */
    util_buf_printf(b, "# HELP cohort_tenant_running_workers Workers running now, by tenant.\n"
                       "# TYPE cohort_tenant_running_workers gauge\n"
                       "# HELP cohort_tenant_spend_total Charges written to the ledger, by "
                       "tenant, in minor units of the currency.\n"
                       "# TYPE cohort_tenant_spend_total counter\n");
    store_money_metrics(st, tenant_running, tenant_spent, b);
}
