/*
 * api_jobref: what the job routes and the billing routes share, below both:
 * finding a job the caller may see, and refusing a shape a create would
 * refuse (its price past what the platform bills, or no node ever holding
 * it).  It calls into neither api_jobs.c nor api_billing.c.
 */
#include <stdio.h>

#include "api/api_int.h"
#include "scheduler/sched_service.h"
#include "storage/store_bill.h"
#include "storage/store_job.h"

int api_job_find(api_ctx *ctx, const api_req *rq, store_job *j, api_resp *rs)
{
    int64_t id = api_id(rq->param[0]);
    int64_t tenant = api_is_platform_admin(rq->who) ? 0 : api_tenant_of(rq->who);
    int rc = id > 0 ? store_job_get(ctx->st, tenant, id, j) : STORE_NOTFOUND;
    return rc == STORE_OK ? 0 : api_store_error(rs, rc, "job");
}

int api_job_estimate(int64_t price_per_hour, int64_t workers, int64_t max_runtime_s,
                     int64_t *out, api_resp *rs)
{
    *out = -1;
    if (max_runtime_s <= 0)
        return 0;
    *out = store_bill_estimate(price_per_hour, workers, max_runtime_s);
    if (*out < 0) {
        api_error(rs, 422, "invalid_value", "max_runtime_seconds",
                  "the estimated price passes the largest amount the platform bills (%lld)",
                  STORE_MONEY_MAX);
        return -1;
    }
    return 0;
}

int api_job_could_fit(api_ctx *ctx, const struct store_job *j, api_resp *rs)
{
    sched_job probe = {0, j->tenant_id, j->priority, 0, 0, j->worker_count,
                       j->workers_per_node, j->cpus, j->memory_mb, j->gpus, 0};
    char why[300];
    if (sched_could_fit(ctx->sched, &probe, why, sizeof why))
        return 0;
    api_error(rs, 422, "never_fits", "worker_count", "%s", why);
    return -1;
}
