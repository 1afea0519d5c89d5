-- 015: trust in nodes can be withdrawn.
--
-- A join token registers at most max_uses nodes (NULL: any number, as
-- every token made before this migration) and counts them in uses; it
-- expires, and it can be revoked.  A node can be revoked: its token is
-- refused from then on, its workers are handled as a lost node's, and its
-- row stays for history (revoked_at).  join_token_id says which token
-- registered it.
ALTER TABLE node_join_tokens ADD COLUMN max_uses INTEGER;
ALTER TABLE node_join_tokens ADD COLUMN uses INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN revoked_at BIGINT;
ALTER TABLE nodes ADD COLUMN join_token_id BIGINT;
