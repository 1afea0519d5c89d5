-- 003: metrics that workers print as "COHORT_METRIC {json}" lines.  The log
-- bytes themselves are files under <data dir>/logs/<job>/<attempt>/<rank>.log.

CREATE TABLE job_metrics (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id  INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    rank    INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    data    TEXT NOT NULL   -- one JSON object, as printed
);
CREATE INDEX job_metrics_job ON job_metrics(job_id, id);
