-- waypost schema, version 9 (SQLite): retention. A finished run purged after its
-- tenant's retention leaves a summary here (its chain's last hash and length among it);
-- everything else of it is deleted. runs_by_finished finds the runs old enough.

CREATE INDEX runs_by_finished ON runs (tenant, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE purged_runs (
    tenant      TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    workflow    TEXT    NOT NULL,
    version     TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    created_at  REAL    NOT NULL,
    finished_at REAL,
    last_seq    INTEGER NOT NULL,
    last_hash   TEXT    NOT NULL,
    purged_at   REAL    NOT NULL,
    purged_by   TEXT    NOT NULL,
    reason      TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, run_id)
) WITHOUT ROWID;

CREATE INDEX purged_runs_by_time ON purged_runs (tenant, purged_at, run_id);
