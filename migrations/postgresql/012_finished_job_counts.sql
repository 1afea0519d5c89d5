-- 012: /metrics reads how many jobs ended in each state from a running count
-- (as migrations/012_finished_job_counts.sql, which says why).

CREATE TABLE job_end_counts (
    tenant_id BIGINT NOT NULL,
    state     TEXT NOT NULL,
    jobs      BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, state)
);

INSERT INTO job_end_counts
    SELECT tenant_id, state, count(*) FROM jobs
    WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') GROUP BY 1, 2;

CREATE FUNCTION jobs_end_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE')
       AND OLD.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN
        UPDATE job_end_counts SET jobs = jobs - 1
            WHERE tenant_id = OLD.tenant_id AND state = OLD.state;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE')
       AND NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN
        INSERT INTO job_end_counts VALUES (NEW.tenant_id, NEW.state, 1)
        ON CONFLICT(tenant_id, state) DO UPDATE SET jobs = job_end_counts.jobs + 1;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_end_insert AFTER INSERT ON jobs
    FOR EACH ROW WHEN (NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED'))
    EXECUTE FUNCTION jobs_end_count();
CREATE TRIGGER jobs_end_update AFTER UPDATE OF state ON jobs
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state
                       AND (NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                            OR OLD.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')))
    EXECUTE FUNCTION jobs_end_count();
CREATE TRIGGER jobs_end_delete AFTER DELETE ON jobs
    FOR EACH ROW WHEN (OLD.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED'))
    EXECUTE FUNCTION jobs_end_count();
