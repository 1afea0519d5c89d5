-- wrk script for bench/api/run.  COHORT_OP=create: durable job creates
-- (POST /v1/jobs, COHORT_BODY; every 201 is a committed row).  COHORT_OP=get:
-- single-job reads (GET /v1/jobs/COHORT_JOB).  Both authenticated with
-- COHORT_TOKEN; done() prints one RESULT line.
local op = os.getenv("COHORT_OP") or "get"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("COHORT_TOKEN")
if op == "create" then
  wrk.method = "POST"
  wrk.path = "/v1/jobs"
  wrk.headers["Content-Type"] = "application/json"
  wrk.body = os.getenv("COHORT_BODY")
else
  wrk.method = "GET"
  wrk.path = "/v1/jobs/" .. os.getenv("COHORT_JOB")
end

done = function(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT op=%s requests=%d seconds=%.2f per_s=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f " ..
    "non2xx=%d socket_errors=%d\n",
    op, summary.requests, secs, summary.requests / secs,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
