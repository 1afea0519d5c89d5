-- 014: the network an agent gives its jobs.
--
-- An agent started with --network job puts each job's workers on the node
-- into a network namespace of that job; for a job over several nodes those
-- namespaces are joined by an overlay (VXLAN) that carries only that job's
-- traffic.  Placement gives a job the overlay only where every node it runs
-- on said "job" when it registered; "host" (every agent before this one)
-- keeps the node's own network.
ALTER TABLE nodes ADD COLUMN network TEXT NOT NULL DEFAULT 'host'
    CHECK (network IN ('host', 'job'));
