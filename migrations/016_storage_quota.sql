-- 016: quotas on what a tenant keeps, not only on what it runs.
--
-- max_storage_bytes bounds the bytes of the tenant's workspaces and
-- datasets (uploads and what its jobs write there together); max_pending_jobs
-- the jobs it has waiting.  NULL: the platform's default (cohortd's
-- --default-storage-quota and --default-max-pending), so that a fresh
-- install is bounded without a quota set for each tenant.
ALTER TABLE tenant_quotas ADD COLUMN max_storage_bytes INTEGER;
ALTER TABLE tenant_quotas ADD COLUMN max_pending_jobs INTEGER;
