-- A job's first event (submitted, PENDING) is written with its row by the
-- database, as the ledger's balance is: a create is then one statement, on
-- PostgreSQL one round trip of the writer's batch instead of two.
CREATE TRIGGER jobs_submitted AFTER INSERT ON jobs
BEGIN
    INSERT INTO job_events(job_id, at, attempt, from_state, to_state, reason)
        VALUES (NEW.id, NEW.created_at, NEW.attempt, NULL, NEW.state,
                coalesce(NEW.reason, 'submitted'));
END;
