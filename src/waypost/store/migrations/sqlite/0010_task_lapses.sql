-- waypost schema, version 10 (SQLite): poison runs. `lapses` counts how often a task's
-- lease lapsed (its engine died holding it) without the work getting through: the
-- claim of a lapsed workflow task backs off by it, and the engine suspends a run whose
-- count reaches its limit.

ALTER TABLE tasks ADD COLUMN lapses INTEGER NOT NULL DEFAULT 0;
