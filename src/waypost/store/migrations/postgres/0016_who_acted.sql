-- waypost schema, version 16 (PostgreSQL): who acted, and through which credential. A
-- vote records how its caller signed in (`auth`) and the credential that authenticated it
-- (`authenticated_by`: an API key's id, a console user's account, an approval link's
-- credential); a refused decision too. A schedule records who paused or resumed it last.

ALTER TABLE approval_votes ADD COLUMN auth text NOT NULL DEFAULT '';
ALTER TABLE approval_votes ADD COLUMN authenticated_by text NOT NULL DEFAULT '';
ALTER TABLE approval_refusals ADD COLUMN authenticated_by text NOT NULL DEFAULT '';
ALTER TABLE schedules ADD COLUMN changed_at double precision;
ALTER TABLE schedules ADD COLUMN changed_by text;
