-- What the kernel counted for a worker in its cgroup, reported by the agent
-- with the worker's end: CPU time in microseconds and peak memory in bytes
-- (NULL where the node could not count it).
ALTER TABLE workers ADD COLUMN cpu_us INTEGER;
ALTER TABLE workers ADD COLUMN memory_peak INTEGER;
