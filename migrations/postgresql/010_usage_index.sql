-- PostgreSQL's side of ../010_usage_index.sql (why: see there).  The
-- columns past the window's key ride in the index (INCLUDE) for
-- index-only scans.
DROP INDEX ledger_tenant_at;
CREATE INDEX ledger_usage ON ledger(tenant_id, kind, at)
    INCLUDE (seconds, gpus, amount, currency, job_id, user_id, worker_spec, job_name);
