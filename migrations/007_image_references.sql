-- 007: images are OCI images in a registry, named by reference; a tenant
-- admin may register private images of the tenant (with registry
-- credentials that the API never returns); every worker and job records
-- the digest its image reference resolved to.
CREATE TABLE images_new (
    id         INTEGER PRIMARY KEY,
    tenant_id  INTEGER REFERENCES tenants(id),   -- NULL: a platform image, public
    name       TEXT NOT NULL,
    reference  TEXT,                             -- HOST[:PORT]/REPO[:TAG|@sha256:HEX]; without a
                                                 -- host, the node's default registry
    framework  TEXT NOT NULL CHECK (framework IN ('pytorch', 'tensorflow', 'native')),
    username   TEXT,                             -- registry credentials, write-only
    password   TEXT,
    created_at INTEGER NOT NULL
);
INSERT INTO images_new(id, tenant_id, name, reference, framework, created_at)
    SELECT id, NULL, name,
           CASE name WHEN 'pytorch' THEN 'cohort/pytorch:bookworm'
                     WHEN 'tensorflow' THEN 'cohort/tensorflow:latest'
                     WHEN 'native' THEN 'cohort/cohort:bookworm' END,
           framework, created_at FROM images;
DROP TABLE images;
ALTER TABLE images_new RENAME TO images;
-- One name per owner: a tenant's private image may shadow a public one.
CREATE UNIQUE INDEX images_owner_name ON images(coalesce(tenant_id, 0), name);
INSERT OR IGNORE INTO images(tenant_id, name, reference, framework, created_at)
    VALUES (NULL, 'cohort', 'cohort/cohort:bookworm', 'native', 0);

ALTER TABLE workers ADD COLUMN image_digest TEXT;
ALTER TABLE jobs ADD COLUMN image_digest TEXT;  -- of the current attempt
