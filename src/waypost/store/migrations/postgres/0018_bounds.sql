-- waypost schema, version 18 (PostgreSQL): bounds per run and per tenant, webhook sources
-- per tenant.
--
-- A run's snapshot counts the bytes of JSON of its history (`history_bytes`, for the
-- tenant's `max_run_bytes` and `max_live_run_bytes`), the signals its code received and
-- has not taken in (`unread_signals`, buffered by the code) and the signal names it takes
-- in now (`signal_names`: JSON, the names it waits for or handles), so that a flood of
-- signals it never reads is refused while the signal it waits for still gets in.
ALTER TABLE runs ADD COLUMN history_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN unread_signals integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN signal_names text;
UPDATE runs SET history_bytes = e.bytes
FROM (SELECT tenant, run_id, sum(octet_length(data)) AS bytes FROM events
      GROUP BY tenant, run_id) e
WHERE e.tenant = runs.tenant AND e.run_id = runs.run_id;

-- Webhook sources are the tenant's (its own ids: another tenant's are neither seen nor
-- taken), and a delivery finds its source by an unguessable `url_id` instead. Sources
-- made before keep their id as their URL id, so their senders' URLs still work.
ALTER TABLE webhook_sources ADD COLUMN url_id text;
UPDATE webhook_sources SET url_id = source;
ALTER TABLE webhook_sources ALTER COLUMN url_id SET NOT NULL;
ALTER TABLE webhook_sources DROP CONSTRAINT webhook_sources_pkey;
ALTER TABLE webhook_sources ADD PRIMARY KEY (tenant, source);
DROP INDEX webhook_sources_by_tenant;
CREATE UNIQUE INDEX webhook_sources_by_url_id ON webhook_sources (url_id);

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_pkey;
ALTER TABLE webhook_deliveries ADD PRIMARY KEY (tenant, source, delivery_id);
DROP INDEX webhook_deliveries_by_age;
CREATE INDEX webhook_deliveries_by_age ON webhook_deliveries (tenant, source, received_at);
