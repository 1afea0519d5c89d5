-- Reads that walked tables which only grow.  With a million finished jobs
-- (1.25 million workers, as many charges) each scheduler pass took 380 ms
-- and a /metrics scrape 1.3 s.
--
-- The workers that hold capacity (assigned, running) and those whose use
-- still counts for fair share (running, or finished within the window):
CREATE INDEX workers_state ON workers(state);
CREATE INDEX workers_finished ON workers(finished_at);

-- Each tenant's charges so far, kept beside its balance by the same trigger
-- (one currency per account, as the balance already assumes).
ALTER TABLE accounts ADD COLUMN charged INTEGER NOT NULL DEFAULT 0;
UPDATE accounts SET charged = (SELECT coalesce(sum(amount), 0) FROM ledger l
                               WHERE l.tenant_id = accounts.tenant_id AND l.kind = 'charge');
DROP TRIGGER ledger_balance;
CREATE TRIGGER ledger_balance AFTER INSERT ON ledger
BEGIN
    INSERT INTO accounts(tenant_id, currency, balance, charged)
        VALUES (NEW.tenant_id, NEW.currency,
                CASE NEW.kind WHEN 'credit' THEN NEW.amount ELSE -NEW.amount END,
                CASE NEW.kind WHEN 'charge' THEN NEW.amount ELSE 0 END)
    ON CONFLICT(tenant_id) DO UPDATE SET
        balance = balance + CASE NEW.kind WHEN 'credit' THEN NEW.amount ELSE -NEW.amount END,
        charged = charged + CASE NEW.kind WHEN 'charge' THEN NEW.amount ELSE 0 END;
END;
