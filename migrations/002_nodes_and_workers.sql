-- 002: nodes and their join tokens, the workers (ranks) of every job
-- attempt, reserved ports, and per-tenant quotas.

CREATE TABLE node_join_tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    hash       BLOB NOT NULL UNIQUE,       -- SHA-256; the token is never stored
    created_at INTEGER NOT NULL,
    expires_at INTEGER,                    -- NULL: never
    revoked_at INTEGER
);

-- A node is one agent.  Capacity is what the agent reported; what is
-- allocated is derived from its live workers.
CREATE TABLE nodes (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT NOT NULL UNIQUE,
    address        TEXT NOT NULL,          -- where other nodes reach its workers
    cpus           INTEGER NOT NULL CHECK (cpus > 0),
    memory_mb      INTEGER NOT NULL CHECK (memory_mb > 0),
    gpus           INTEGER NOT NULL DEFAULT 0 CHECK (gpus >= 0),
    gpu_type       TEXT,
    port_lo        INTEGER NOT NULL,
    port_hi        INTEGER NOT NULL CHECK (port_hi >= port_lo),
    token_hash     BLOB NOT NULL UNIQUE,
    state          TEXT NOT NULL DEFAULT 'up' CHECK (state IN ('up', 'down')),
    drained        INTEGER NOT NULL DEFAULT 0 CHECK (drained IN (0, 1)),
    registered_at  INTEGER NOT NULL,
    last_heartbeat INTEGER NOT NULL
);

-- One row per rank per attempt.  desired is what cohortd wants ('run' or
-- 'stop'); state is what the agent reported.
CREATE TABLE workers (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    rank        INTEGER NOT NULL,
    node_rank   INTEGER NOT NULL,
    local_rank  INTEGER NOT NULL,
    node_id     INTEGER NOT NULL REFERENCES nodes(id),
    desired     TEXT NOT NULL DEFAULT 'run' CHECK (desired IN ('run', 'stop')),
    state       TEXT NOT NULL DEFAULT 'assigned'
                CHECK (state IN ('assigned', 'running', 'exited', 'failed', 'lost')),
    exit_code   INTEGER,
    signal      INTEGER,
    message     TEXT,
    created_at  INTEGER NOT NULL,
    started_at  INTEGER,
    finished_at INTEGER,
    UNIQUE (job_id, attempt, rank)
);
CREATE INDEX workers_node ON workers(node_id, state);
CREATE INDEX workers_job ON workers(job_id, attempt);

-- The rendezvous port of an attempt, on the node of its rank 0.  Held until
-- every worker of that attempt has ended, not merely until the job moved on.
CREATE TABLE job_ports (
    node_id INTEGER NOT NULL REFERENCES nodes(id),
    port    INTEGER NOT NULL,
    job_id  INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    PRIMARY KEY (node_id, port),
    UNIQUE (job_id, attempt)
);

-- Limits per tenant; NULL means no limit.
CREATE TABLE tenant_quotas (
    tenant_id        INTEGER PRIMARY KEY REFERENCES tenants(id),
    max_running_jobs INTEGER,
    max_workers      INTEGER,
    max_cpus         INTEGER,
    max_gpus         INTEGER
);

-- Where the scheduler placed the current attempt: the node of rank 0 and
-- the shape it chose.  Kept on the job so the API can show it.
ALTER TABLE jobs ADD COLUMN master_node_id INTEGER REFERENCES nodes(id);
ALTER TABLE jobs ADD COLUMN master_port INTEGER;
ALTER TABLE jobs ADD COLUMN placed_per_node INTEGER;
