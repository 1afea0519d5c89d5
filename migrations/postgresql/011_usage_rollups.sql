-- PostgreSQL's side of ../011_usage_rollups.sql (why: see there).

-- The first ms (UTC) of the month of at (ms since the epoch).
CREATE FUNCTION usage_month(at BIGINT) RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$
    SELECT (extract(epoch FROM date_trunc('month', to_timestamp(at / 1000) AT TIME ZONE 'UTC'))
            * 1000)::BIGINT
$$;

CREATE TABLE usage_days (
    tenant_id      BIGINT NOT NULL,
    day            BIGINT NOT NULL,
    user_id        BIGINT NOT NULL,
    worker_spec    TEXT NOT NULL,
    entries        BIGINT NOT NULL,
    worker_seconds BIGINT NOT NULL,
    gpu_seconds    BIGINT NOT NULL,
    amount         BIGINT NOT NULL,
    currency       TEXT NOT NULL,
    PRIMARY KEY (tenant_id, day, user_id, worker_spec)
);

CREATE TABLE usage_job_months (
    tenant_id      BIGINT NOT NULL,
    month          BIGINT NOT NULL,
    job_id         BIGINT NOT NULL,
    job_name       TEXT NOT NULL,
    entries        BIGINT NOT NULL,
    worker_seconds BIGINT NOT NULL,
    gpu_seconds    BIGINT NOT NULL,
    amount         BIGINT NOT NULL,
    currency       TEXT NOT NULL,
    PRIMARY KEY (tenant_id, month, job_id)
);

INSERT INTO usage_days
    SELECT tenant_id, at / 86400000, coalesce(user_id, 0), coalesce(worker_spec, ''), count(*),
           coalesce(sum(seconds), 0), coalesce(sum(seconds * gpus), 0), sum(amount),
           max(currency)
    FROM ledger WHERE kind = 'charge' GROUP BY 1, 2, 3, 4;

INSERT INTO usage_job_months
    SELECT tenant_id, usage_month(at), job_id, coalesce(max(job_name), ''), count(*),
           coalesce(sum(seconds), 0), coalesce(sum(seconds * gpus), 0), sum(amount),
           max(currency)
    FROM ledger WHERE kind = 'charge' GROUP BY 1, 2, 3;

CREATE FUNCTION ledger_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_days
        VALUES (NEW.tenant_id, NEW.at / 86400000, coalesce(NEW.user_id, 0),
                coalesce(NEW.worker_spec, ''), 1, coalesce(NEW.seconds, 0),
                coalesce(NEW.seconds * NEW.gpus, 0), NEW.amount, NEW.currency)
    ON CONFLICT(tenant_id, day, user_id, worker_spec) DO UPDATE SET
        entries = usage_days.entries + 1,
        worker_seconds = usage_days.worker_seconds + excluded.worker_seconds,
        gpu_seconds = usage_days.gpu_seconds + excluded.gpu_seconds,
        amount = usage_days.amount + excluded.amount,
        currency = greatest(usage_days.currency, excluded.currency);
    INSERT INTO usage_job_months
        VALUES (NEW.tenant_id, usage_month(NEW.at), NEW.job_id, coalesce(NEW.job_name, ''), 1,
                coalesce(NEW.seconds, 0), coalesce(NEW.seconds * NEW.gpus, 0), NEW.amount,
                NEW.currency)
    ON CONFLICT(tenant_id, month, job_id) DO UPDATE SET
        job_name = greatest(usage_job_months.job_name, excluded.job_name),
        entries = usage_job_months.entries + 1,
        worker_seconds = usage_job_months.worker_seconds + excluded.worker_seconds,
        gpu_seconds = usage_job_months.gpu_seconds + excluded.gpu_seconds,
        amount = usage_job_months.amount + excluded.amount,
        currency = greatest(usage_job_months.currency, excluded.currency);
    RETURN NULL;
END $$;
CREATE TRIGGER ledger_usage AFTER INSERT ON ledger
    FOR EACH ROW WHEN (NEW.kind = 'charge') EXECUTE FUNCTION ledger_usage();
