-- wrk script: durable job creates (POST /v1/jobs).  Every 201 is a committed row.
wrk.method = "POST"
wrk.path = "/v1/jobs"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("COHORT_TOKEN")
wrk.body = os.getenv("COHORT_BODY")

done = function(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT op=create requests=%d seconds=%.2f per_s=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f " ..
    "non2xx=%d socket_errors=%d\n",
    summary.requests, secs, summary.requests / secs,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
