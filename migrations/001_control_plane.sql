-- 001: tenants, users, tokens, the catalog (worker specs, images),
-- datasets, workspaces, jobs and their events.
-- Ids of rows that can be deleted are AUTOINCREMENT: never reused, so a
-- deleted job, token or volume (whose directory is named by id) never comes back.
-- Times are integer milliseconds since the epoch (UTC); money is integer
-- minor units of the row's currency.

CREATE TABLE tenants (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE,
    is_platform INTEGER NOT NULL DEFAULT 0 CHECK (is_platform IN (0, 1)),
    created_at  INTEGER NOT NULL
);

CREATE TABLE users (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id  INTEGER NOT NULL REFERENCES tenants(id),
    name       TEXT NOT NULL,
    role       TEXT NOT NULL
               CHECK (role IN ('platform_admin', 'tenant_admin', 'member', 'viewer')),
    created_at INTEGER NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE api_tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id    INTEGER NOT NULL REFERENCES users(id),
    name       TEXT NOT NULL,
    hash       BLOB NOT NULL UNIQUE,      -- SHA-256 of the token; the token is never stored
    created_at INTEGER NOT NULL,
    expires_at INTEGER,                    -- NULL: never
    revoked_at INTEGER                     -- NULL: live
);
CREATE INDEX api_tokens_user ON api_tokens(user_id);

CREATE TABLE worker_specs (
    id             INTEGER PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    cpus           INTEGER NOT NULL CHECK (cpus > 0),
    memory_mb      INTEGER NOT NULL CHECK (memory_mb > 0),
    gpus           INTEGER NOT NULL DEFAULT 0 CHECK (gpus >= 0),
    gpu_type       TEXT,
    price_per_hour INTEGER NOT NULL CHECK (price_per_hour >= 0),
    currency       TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

CREATE TABLE images (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    framework  TEXT NOT NULL CHECK (framework IN ('pytorch', 'tensorflow', 'native')),
    created_at INTEGER NOT NULL
);

-- Datasets of the platform tenant are public: readable by every tenant.
CREATE TABLE datasets (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id  INTEGER NOT NULL REFERENCES tenants(id),
    name       TEXT NOT NULL,
    sealed     INTEGER NOT NULL DEFAULT 0 CHECK (sealed IN (0, 1)),
    created_at INTEGER NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE workspaces (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id  INTEGER NOT NULL REFERENCES tenants(id),
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (tenant_id, name)
);

-- One row per job.  The submitted request is kept whole (spec_json) so later
-- parts (scheduler, agents, billing, console) add columns or tables keyed by
-- job id without rewriting this one.  The price is a snapshot taken at submit.
CREATE TABLE jobs (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id           INTEGER NOT NULL REFERENCES tenants(id),
    user_id             INTEGER NOT NULL REFERENCES users(id),
    name                TEXT NOT NULL,
    image               TEXT NOT NULL,
    framework           TEXT NOT NULL,
    workspace           TEXT NOT NULL,
    code_path           TEXT NOT NULL,
    datasets_json       TEXT NOT NULL DEFAULT '[]',
    args_json           TEXT NOT NULL DEFAULT '[]',
    env_json            TEXT NOT NULL DEFAULT '{}',
    epochs              INTEGER NOT NULL,
    lr                  REAL NOT NULL,
    batch_size          INTEGER NOT NULL,
    worker_spec         TEXT NOT NULL,
    cpus                INTEGER NOT NULL,
    memory_mb           INTEGER NOT NULL,
    gpus                INTEGER NOT NULL,
    worker_count        INTEGER NOT NULL CHECK (worker_count > 0),
    workers_per_node    INTEGER,               -- NULL: fill nodes
    priority            INTEGER NOT NULL DEFAULT 0,
    max_runtime_seconds INTEGER,
    max_retries         INTEGER NOT NULL DEFAULT 0,
    currency            TEXT NOT NULL,
    price_per_hour      INTEGER NOT NULL,      -- per worker, snapshot at submit
    estimated_max       INTEGER,               -- NULL without max_runtime_seconds
    state               TEXT NOT NULL DEFAULT 'PENDING'
                        CHECK (state IN ('PENDING', 'STARTING', 'RUNNING', 'SUCCEEDED',
                                         'FAILED', 'CANCELLED')),
    reason              TEXT,
    attempt             INTEGER NOT NULL DEFAULT 1,
    idempotency_key     TEXT,
    request_hash        BLOB,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    started_at          INTEGER,
    finished_at         INTEGER,
    UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX jobs_tenant_id ON jobs(tenant_id, id);
CREATE INDEX jobs_tenant_state ON jobs(tenant_id, state, id);
CREATE INDEX jobs_state ON jobs(state, priority, id);

CREATE TABLE job_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id     INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    at         INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    from_state TEXT,                           -- NULL for the submit event
    to_state   TEXT NOT NULL,
    reason     TEXT
);
CREATE INDEX job_events_job ON job_events(job_id, id);

-- The platform tenant owns the platform admin and the public datasets.
INSERT INTO tenants(name, is_platform, created_at) VALUES ('platform', 1, 0);

INSERT INTO worker_specs(name, cpus, memory_mb, gpus, gpu_type, price_per_hour, currency,
                         created_at, updated_at) VALUES
    ('cpu-small',  1,   2048, 0, NULL,   5, 'USD', 0, 0),
    ('cpu-medium', 4,   8192, 0, NULL,  20, 'USD', 0, 0),
    ('cpu-large', 16,  65536, 0, NULL,  80, 'USD', 0, 0),
    ('gpu-1x',     8,  65536, 1, 'nvidia', 250, 'USD', 0, 0),
    ('gpu-8x',    64, 524288, 8, 'nvidia', 2000, 'USD', 0, 0);

INSERT INTO images(name, framework, created_at) VALUES
    ('pytorch', 'pytorch', 0),
    ('tensorflow', 'tensorflow', 0),
    ('native', 'native', 0);
