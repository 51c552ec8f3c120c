-- waypost schema, version 12 (PostgreSQL): schedules. A schedule starts runs of one workflow
-- on a cron expression in a time zone or every `every` seconds; `next_fire_at` is the
-- next fire time not yet handled, advanced by a conditional update once its runs are
-- started (decision 0017). `last_run_id` is the run of the latest fire that started one,
-- `buffered_fire_at` a fire kept for when that run ends (overlap `buffer_one`).

CREATE TABLE schedules (
    tenant           text NOT NULL,
    schedule_id      text NOT NULL,
    workflow         text NOT NULL,
    version          text,
    cron             text,
    tz               text NOT NULL,
    every            double precision,
    input            text NOT NULL,
    overlap          text NOT NULL,
    catchup          text NOT NULL,
    catchup_window   double precision NOT NULL,
    paused           integer NOT NULL DEFAULT 0,
    next_fire_at     double precision,
    last_fire_at     double precision,
    last_run_id      text,
    buffered_fire_at double precision,
    created_at       double precision NOT NULL,
    created_by       text NOT NULL,
    PRIMARY KEY (tenant, schedule_id)
);

CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE paused = 0;
