-- 018: a node's token can be rotated.
--
-- A rotation is asked for (token_rotate, by a platform admin) or due (the
-- token is older than cohortd's --node-token-rotate, counted from
-- token_issued_at; NULL: from registered_at).  At the node's next
-- heartbeat cohortd makes a new token, keeps its hash in next_token_hash
-- and hands it to the agent in the answer.  The old token works until the
-- new one is first used; that use makes it the node's token (token_hash),
-- and the old one is refused from then on.  An agent that lost the answer
-- goes on with the old token and is handed another new one.
--
-- Every token a node gave up is kept in node_token_history: one a
-- rotation replaced (replaced 1), and one handed out but then forgotten
-- for a newer one before its first use (replaced 0).  Presented again
-- (the replaced one past a few seconds, for the agent's own requests still
-- on their way), it says that two parties hold the node's token, and the
-- node is revoked, with why in revoke_reason.
ALTER TABLE nodes ADD COLUMN next_token_hash BYTEA;
ALTER TABLE nodes ADD COLUMN token_issued_at BIGINT;
ALTER TABLE nodes ADD COLUMN token_rotate INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN revoke_reason TEXT;
CREATE UNIQUE INDEX nodes_next_token ON nodes(next_token_hash)
    WHERE next_token_hash IS NOT NULL;
CREATE TABLE node_token_history (
    hash       BYTEA PRIMARY KEY,
    node_id    BIGINT NOT NULL REFERENCES nodes(id),
    retired_at BIGINT NOT NULL,
    replaced   INTEGER NOT NULL
);
CREATE INDEX node_token_history_node ON node_token_history(node_id, retired_at);
