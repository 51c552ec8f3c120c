-- waypost schema, version 7 (SQLite): signal waits findable by correlation, and the
-- webhook sources that deliver to them.
--
-- correlations: one row per open `wait_signal(..., correlate=(key, value))`, written by
-- the commit that records CorrelationRegistered and deleted by the one that records
-- CorrelationWithdrawn (or ends the run). Several runs may wait with one (key, value).
CREATE TABLE correlations (
    tenant     TEXT             NOT NULL,
    run_id     TEXT             NOT NULL,
    step       TEXT             NOT NULL,
    signal     TEXT             NOT NULL,
    corr_key   TEXT             NOT NULL,
    corr_value TEXT             NOT NULL,
    created_at REAL             NOT NULL,
    PRIMARY KEY (tenant, run_id, step)
) WITHOUT ROWID;

CREATE INDEX correlations_by_value ON correlations (tenant, corr_key, corr_value, signal, created_at);

-- webhook_sources: ids are unique across tenants (the URL names no tenant: the source
-- finds it). The secret is kept as given out, because checking an HMAC needs it.
CREATE TABLE webhook_sources (
    source     TEXT             PRIMARY KEY,
    tenant     TEXT             NOT NULL,
    signal     TEXT             NOT NULL,
    corr_key   TEXT             NOT NULL,
    corr_path  TEXT             NOT NULL,
    tolerance  INTEGER          NOT NULL,
    secret     TEXT             NOT NULL,
    created_at REAL             NOT NULL,
    created_by TEXT             NOT NULL
) WITHOUT ROWID;

CREATE INDEX webhook_sources_by_tenant ON webhook_sources (tenant, source);

-- webhook_deliveries: the delivery ids a source has delivered, with what the first
-- delivery answered, kept for twice the source's tolerance (a replay older than that
-- is refused by its timestamp).
CREATE TABLE webhook_deliveries (
    source      TEXT             NOT NULL,
    delivery_id TEXT             NOT NULL,
    tenant      TEXT             NOT NULL,
    received_at REAL             NOT NULL,
    outcome     TEXT,
    PRIMARY KEY (source, delivery_id)
) WITHOUT ROWID;

CREATE INDEX webhook_deliveries_by_age ON webhook_deliveries (source, received_at);
