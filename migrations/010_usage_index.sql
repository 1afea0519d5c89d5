-- Usage and invoices sum a tenant's charges over a window, and invoices
-- list its credits of that window.  Through ledger_tenant_at each charge
-- cost a read of its table row (a tenant's rows lie scattered among every
-- other tenant's), and the credits' kind was known only from that row too:
-- with a million finished jobs a month of one tenant (16,000 charges) took
-- about 100 ms on PostgreSQL.  Every reader of a tenant's window names the
-- kind, so this index leads with it and then holds every column the sums
-- read: a window is one contiguous run of it.
DROP INDEX ledger_tenant_at;
CREATE INDEX ledger_usage ON ledger(tenant_id, kind, at, seconds, gpus, amount, currency,
                                    job_id, user_id, worker_spec, job_name);
