-- waypost schema, version 16 (SQLite): who acted, and through which credential. A vote
-- records how its caller signed in (`auth`) and the credential that authenticated it
-- (`authenticated_by`: an API key's id, a console user's account, an approval link's
-- credential); a refused decision too. A schedule records who paused or resumed it last.

ALTER TABLE approval_votes ADD COLUMN auth TEXT NOT NULL DEFAULT '';
ALTER TABLE approval_votes ADD COLUMN authenticated_by TEXT NOT NULL DEFAULT '';
ALTER TABLE approval_refusals ADD COLUMN authenticated_by TEXT NOT NULL DEFAULT '';
ALTER TABLE schedules ADD COLUMN changed_at REAL;
ALTER TABLE schedules ADD COLUMN changed_by TEXT;
