-- PostgreSQL's side of ../009_submit_event.sql (why: see there).
CREATE FUNCTION job_submitted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events(job_id, at, attempt, from_state, to_state, reason)
        VALUES (NEW.id, NEW.created_at, NEW.attempt, NULL, NEW.state,
                coalesce(NEW.reason, 'submitted'));
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_submitted AFTER INSERT ON jobs
    FOR EACH ROW EXECUTE FUNCTION job_submitted();
