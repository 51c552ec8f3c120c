-- waypost schema, version 7 (PostgreSQL): tenant quotas and fair claiming.
-- A run's priority, copied to its tasks; claims go tenant by tenant (tasks_ready), then
-- by priority, then oldest first; workflow tasks whose lease lapsed are found through
-- tasks_due, so tasks_claimable goes. tenant_admission holds a tenant's start-rate bucket
-- and is the row that admissions of the tenant lock (SELECT ... FOR UPDATE). Counts of
-- what a tenant holds (activities in flight, pending timers) read their own indexes.

ALTER TABLE runs ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN priority integer NOT NULL DEFAULT 0;

DROP INDEX tasks_claimable;
CREATE INDEX tasks_ready ON tasks (kind, tenant, priority DESC, visible_at) WHERE state = 'ready';
CREATE INDEX tasks_leased ON tasks (tenant, kind) WHERE state = 'leased';
CREATE INDEX timers_by_tenant ON timers (tenant, status);

CREATE TABLE tenant_admission (
    tenant      text PRIMARY KEY,
    tokens      double precision NOT NULL,
    refilled_at double precision NOT NULL
);
