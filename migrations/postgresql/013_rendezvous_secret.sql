-- 013: a secret of each attempt's rendezvous.
--
-- Jobs share a node's network, so another tenant's job could reach rank
-- 0's rendezvous store on MASTER_PORT and read or forge its records.
-- Placement draws a random secret for the attempt; every rank of it gets
-- it as COHORT_RDZV_SECRET, and cohort-worker's store admits only clients
-- that present it.  A new attempt draws a new one.
ALTER TABLE jobs ADD COLUMN rdzv_secret TEXT;
