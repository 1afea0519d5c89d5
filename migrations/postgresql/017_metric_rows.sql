-- 017: how many metric rows a job has stored.
--
-- Metric lines come from a job's own output: a million of them became as
-- many rows.  The count is kept on the job, raised in the write that
-- stores them, so that a bound (API_METRIC_ROWS_MAX) is checked without
-- counting the rows each time.
ALTER TABLE jobs ADD COLUMN metric_rows INTEGER NOT NULL DEFAULT 0;
