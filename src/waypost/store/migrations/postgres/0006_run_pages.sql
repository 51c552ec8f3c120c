-- waypost schema, version 4 (PostgreSQL): runs listed page by page, newest first, with a
-- keyset on (created_at, run_id) per tenant: for the tenant alone, by status, by workflow.
-- Each page reads only its rows through one of these indexes, however many runs there are.

DROP INDEX runs_by_status;
CREATE INDEX runs_by_created ON runs (tenant, created_at, run_id);
CREATE INDEX runs_by_status ON runs (tenant, status, created_at, run_id);
CREATE INDEX runs_by_workflow ON runs (tenant, workflow, created_at, run_id);
