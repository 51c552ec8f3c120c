-- waypost schema, version 14: child runs. A run started by another run's workflow code
-- (`ctx.child`, a definition's `call` step) records its parent: the parent's run id, the
-- step that started it, and what happens to it if the parent ends first (`parent_close`:
-- cancel, terminate or abandon). The store tells the parent of the child's end, and applies
-- the policy to the open children of a parent that ends, in the commit that ends the run.

ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
ALTER TABLE runs ADD COLUMN parent_step TEXT;
ALTER TABLE runs ADD COLUMN parent_close TEXT;
CREATE INDEX runs_by_parent ON runs (tenant, parent_run_id);
