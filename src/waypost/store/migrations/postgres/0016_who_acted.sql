-- waypost schema, version 16 (PostgreSQL): who acted. A schedule records who paused or
-- resumed it last (its runs are started on behalf of its creator).

ALTER TABLE schedules ADD COLUMN changed_at double precision;
ALTER TABLE schedules ADD COLUMN changed_by text;
