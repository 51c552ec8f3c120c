-- waypost schema, version 9 (PostgreSQL): retention. A finished run purged after its
-- tenant's retention leaves a summary here (its chain's last hash and length among it);
-- everything else of it is deleted. runs_by_finished finds the runs old enough.

CREATE INDEX runs_by_finished ON runs (tenant, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE purged_runs (
    tenant      text             NOT NULL,
    run_id      text             NOT NULL,
    workflow    text             NOT NULL,
    version     text             NOT NULL,
    status      text             NOT NULL,
    created_at  double precision NOT NULL,
    finished_at double precision,
    last_seq    bigint           NOT NULL,
    last_hash   text             NOT NULL,
    purged_at   double precision NOT NULL,
    purged_by   text             NOT NULL,
    reason      text             NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, run_id)
);

CREATE INDEX purged_runs_by_time ON purged_runs (tenant, purged_at, run_id);
