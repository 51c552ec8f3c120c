-- waypost schema, version 7 (PostgreSQL): signal waits findable by correlation, and the
-- webhook sources that deliver to them.
--
-- correlations: one row per open `wait_signal(..., correlate=(key, value))`, written by
-- the commit that records CorrelationRegistered and deleted by the one that records
-- CorrelationWithdrawn (or ends the run). Several runs may wait with one (key, value).
CREATE TABLE correlations (
    tenant     text             NOT NULL,
    run_id     text             NOT NULL,
    step       text             NOT NULL,
    signal     text             NOT NULL,
    corr_key   text             NOT NULL,
    corr_value text             NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (tenant, run_id, step)
);

CREATE INDEX correlations_by_value ON correlations (tenant, corr_key, corr_value, signal, created_at);

-- webhook_sources: ids are unique across tenants (the URL names no tenant: the source
-- finds it). The secret is kept as given out, because checking an HMAC needs it.
CREATE TABLE webhook_sources (
    source     text             PRIMARY KEY,
    tenant     text             NOT NULL,
    signal     text             NOT NULL,
    corr_key   text             NOT NULL,
    corr_path  text             NOT NULL,
    tolerance  integer          NOT NULL,
    secret     text             NOT NULL,
    created_at double precision NOT NULL,
    created_by text             NOT NULL
);

CREATE INDEX webhook_sources_by_tenant ON webhook_sources (tenant, source);

-- webhook_deliveries: the delivery ids a source has delivered, with what the first
-- delivery answered, kept for twice the source's tolerance (a replay older than that
-- is refused by its timestamp).
CREATE TABLE webhook_deliveries (
    source      text             NOT NULL,
    delivery_id text             NOT NULL,
    tenant      text             NOT NULL,
    received_at double precision NOT NULL,
    outcome     text,
    PRIMARY KEY (source, delivery_id)
);

CREATE INDEX webhook_deliveries_by_age ON webhook_deliveries (source, received_at);
