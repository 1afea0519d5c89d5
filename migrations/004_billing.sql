-- 004: money.  An append-only ledger of credits and per-rank charges, each
-- tenant's account (its balance kept by a trigger with every ledger row,
-- and its budget settings), and the holds the scheduler takes when it
-- admits an attempt.  Amounts are integer minor units, never negative.

CREATE TABLE ledger (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id      INTEGER NOT NULL REFERENCES tenants(id),
    at             INTEGER NOT NULL,          -- when it was written (server clock, ms)
    kind           TEXT NOT NULL CHECK (kind IN ('credit', 'charge')),
    amount         INTEGER NOT NULL CHECK (amount >= 0),
    currency       TEXT NOT NULL,
    -- charges: one row per job, attempt and rank, written once when the
    -- rank ends.  No foreign key: a deleted job keeps its charges.
    job_id         INTEGER,
    attempt        INTEGER,
    rank           INTEGER,
    job_name       TEXT,
    user_id        INTEGER,
    worker_spec    TEXT,
    gpus           INTEGER,
    started_at     INTEGER,
    finished_at    INTEGER,
    seconds        INTEGER,                   -- billed seconds of the rank
    price_per_hour INTEGER,                   -- per worker, as admitted
    -- credits: who added it and why
    note           TEXT,
    CHECK ((kind = 'charge') = (job_id IS NOT NULL AND attempt IS NOT NULL AND rank IS NOT NULL)),
    UNIQUE (job_id, attempt, rank)
);
CREATE INDEX ledger_tenant_at ON ledger(tenant_id, at);
CREATE INDEX ledger_job ON ledger(job_id, attempt, rank);

CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
BEGIN
    SELECT RAISE(ABORT, 'the ledger is append-only');
END;
CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
BEGIN
    SELECT RAISE(ABORT, 'the ledger is append-only');
END;

-- One row per tenant that has money or budget settings.  balance is the
-- sum of its ledger (credits minus charges), kept by the trigger below in
-- the same transaction as every ledger row.  enforce: jobs are admitted
-- only against the balance (prepaid); without it the balance may go
-- negative and only monthly_cap (NULL: none) limits spending.
CREATE TABLE accounts (
    tenant_id   INTEGER PRIMARY KEY REFERENCES tenants(id),
    currency    TEXT NOT NULL DEFAULT 'USD',
    balance     INTEGER NOT NULL DEFAULT 0,
    enforce     INTEGER NOT NULL DEFAULT 0 CHECK (enforce IN (0, 1)),
    monthly_cap INTEGER CHECK (monthly_cap IS NULL OR monthly_cap >= 0)
);

CREATE TRIGGER ledger_balance AFTER INSERT ON ledger
BEGIN
    INSERT INTO accounts(tenant_id, currency, balance)
        VALUES (NEW.tenant_id, NEW.currency,
                CASE NEW.kind WHEN 'credit' THEN NEW.amount ELSE -NEW.amount END)
    ON CONFLICT(tenant_id) DO UPDATE SET balance = balance +
        CASE NEW.kind WHEN 'credit' THEN NEW.amount ELSE -NEW.amount END;
END;

-- What the scheduler set aside when it admitted an attempt: the estimated
-- maximum (or a minimum hold for a job without max_runtime_seconds).  Kept
-- until no worker of the attempt is alive and the job has moved on.
CREATE TABLE job_holds (
    job_id     INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt    INTEGER NOT NULL,
    tenant_id  INTEGER NOT NULL REFERENCES tenants(id),
    amount     INTEGER NOT NULL CHECK (amount >= 0),
    bounded    INTEGER NOT NULL CHECK (bounded IN (0, 1)),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
CREATE INDEX job_holds_tenant ON job_holds(tenant_id);

-- The price is taken from the worker spec when the job is first admitted
-- (it was only quoted at submit); retries keep it.
ALTER TABLE jobs ADD COLUMN admitted_at INTEGER;
