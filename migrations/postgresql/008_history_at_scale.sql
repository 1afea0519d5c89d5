-- PostgreSQL's side of ../008_history_at_scale.sql (why: see there).
CREATE INDEX workers_state ON workers(state);
CREATE INDEX workers_finished ON workers(finished_at);

ALTER TABLE accounts ADD COLUMN charged BIGINT NOT NULL DEFAULT 0;
UPDATE accounts SET charged = (SELECT coalesce(sum(amount), 0) FROM ledger l
                               WHERE l.tenant_id = accounts.tenant_id AND l.kind = 'charge');
CREATE OR REPLACE FUNCTION ledger_balance() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO accounts(tenant_id, currency, balance, charged)
        VALUES (NEW.tenant_id, NEW.currency,
                CASE NEW.kind WHEN 'credit' THEN NEW.amount ELSE -NEW.amount END,
                CASE NEW.kind WHEN 'charge' THEN NEW.amount ELSE 0 END)
    ON CONFLICT(tenant_id) DO UPDATE SET
        balance = accounts.balance +
            CASE NEW.kind WHEN 'credit' THEN NEW.amount ELSE -NEW.amount END,
        charged = accounts.charged + CASE NEW.kind WHEN 'charge' THEN NEW.amount ELSE 0 END;
    RETURN NULL;
END $$;
