-- waypost schema, version 12 (SQLite): schedules. A schedule starts runs of one workflow
-- on a cron expression in a time zone or every `every` seconds; `next_fire_at` is the
-- next fire time not yet handled, advanced by a conditional update once its runs are
-- started (decision 0017). `last_run_id` is the run of the latest fire that started one,
-- `buffered_fire_at` a fire kept for when that run ends (overlap `buffer_one`).

CREATE TABLE schedules (
    tenant           TEXT NOT NULL,
    schedule_id      TEXT NOT NULL,
    workflow         TEXT NOT NULL,
    version          TEXT,
    cron             TEXT,
    tz               TEXT NOT NULL,
    every            REAL,
    input            TEXT NOT NULL,
    overlap          TEXT NOT NULL,
    catchup          TEXT NOT NULL,
    catchup_window   REAL NOT NULL,
    paused           INTEGER NOT NULL DEFAULT 0,
    next_fire_at     REAL,
    last_fire_at     REAL,
    last_run_id      TEXT,
    buffered_fire_at REAL,
    created_at       REAL NOT NULL,
    created_by       TEXT NOT NULL,
    PRIMARY KEY (tenant, schedule_id)
) WITHOUT ROWID;

CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE paused = 0;
