-- waypost schema, version 12: number held for a change made on another line of work;
-- replaced by that change's migration when the two meet.
SELECT 1;
