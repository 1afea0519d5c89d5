-- A port per rank where the framework needs one (TensorFlow's TF_CONFIG lists
-- every worker at host:port); rank 0's row is the job's MASTER_PORT.  Ports
-- are still unique per node and held until the attempt's last worker ends.
CREATE TABLE job_ports_new (
    node_id INTEGER NOT NULL REFERENCES nodes(id),
    port    INTEGER NOT NULL,
    job_id  INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    rank    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (node_id, port),
    UNIQUE (job_id, attempt, rank)
);
INSERT INTO job_ports_new(node_id, port, job_id, attempt, rank)
    SELECT node_id, port, job_id, attempt, 0 FROM job_ports;
DROP TABLE job_ports;
ALTER TABLE job_ports_new RENAME TO job_ports;
