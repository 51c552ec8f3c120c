-- waypost schema, version 18 (SQLite): bounds per run and per tenant, webhook sources
-- per tenant.
--
-- A run's snapshot counts the bytes of JSON of its history (`history_bytes`, for the
-- tenant's `max_run_bytes` and `max_live_run_bytes`), the signals its code received and
-- has not taken in (`unread_signals`, buffered by the code) and the signal names it takes
-- in now (`signal_names`: JSON, the names it waits for or handles), so that a flood of
-- signals it never reads is refused while the signal it waits for still gets in.
ALTER TABLE runs ADD COLUMN history_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN unread_signals INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN signal_names TEXT;
UPDATE runs SET history_bytes = coalesce(
    (SELECT sum(length(CAST(e.data AS BLOB))) FROM events e
     WHERE e.tenant = runs.tenant AND e.run_id = runs.run_id), 0);

-- Webhook sources are the tenant's (its own ids: another tenant's are neither seen nor
-- taken), and a delivery finds its source by an unguessable `url_id` instead. Sources
-- made before keep their id as their URL id, so their senders' URLs still work.
ALTER TABLE webhook_sources RENAME TO webhook_sources_global;
CREATE TABLE webhook_sources (
    tenant     TEXT             NOT NULL,
    source     TEXT             NOT NULL,
    url_id     TEXT             NOT NULL,
    signal     TEXT             NOT NULL,
    corr_key   TEXT             NOT NULL,
    corr_path  TEXT             NOT NULL,
    tolerance  INTEGER          NOT NULL,
    secret     TEXT             NOT NULL,
    created_at REAL             NOT NULL,
    created_by TEXT             NOT NULL,
    PRIMARY KEY (tenant, source)
) WITHOUT ROWID;
INSERT INTO webhook_sources (tenant, source, url_id, signal, corr_key, corr_path, tolerance,
                             secret, created_at, created_by)
SELECT tenant, source, source, signal, corr_key, corr_path, tolerance, secret, created_at,
       created_by
FROM webhook_sources_global;
DROP TABLE webhook_sources_global;
CREATE UNIQUE INDEX webhook_sources_by_url_id ON webhook_sources (url_id);

ALTER TABLE webhook_deliveries RENAME TO webhook_deliveries_global;
CREATE TABLE webhook_deliveries (
    tenant      TEXT             NOT NULL,
    source      TEXT             NOT NULL,
    delivery_id TEXT             NOT NULL,
    received_at REAL             NOT NULL,
    outcome     TEXT,
    PRIMARY KEY (tenant, source, delivery_id)
) WITHOUT ROWID;
INSERT INTO webhook_deliveries (tenant, source, delivery_id, received_at, outcome)
SELECT tenant, source, delivery_id, received_at, outcome FROM webhook_deliveries_global;
DROP TABLE webhook_deliveries_global;
CREATE INDEX webhook_deliveries_by_age ON webhook_deliveries (tenant, source, received_at);
