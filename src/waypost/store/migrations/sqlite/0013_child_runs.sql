-- waypost schema, version 14: child runs. A run started by another run's workflow code
-- (`ctx.child`, a definition's `call` step) records its parent: the parent's run id, the
-- step that started it, what becomes of it if the parent ends first (`parent_close`:
-- cancel, terminate or abandon), and whether the parent has been told of its end
-- (`parent_told`: once, even if a repair makes the child end again). The store tells the
-- parent, and applies the policy to a parent's open children, in the commit that ends a run.

ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
ALTER TABLE runs ADD COLUMN parent_step TEXT;
ALTER TABLE runs ADD COLUMN parent_close TEXT;
ALTER TABLE runs ADD COLUMN parent_told INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_by_parent ON runs (tenant, parent_run_id);
