-- waypost schema, version 19 (SQLite): sign-in attempts counted in the database, and
-- tenants that can be disabled.
--
-- sign_in_attempts: an attempt is counted here before its password is checked, so that
-- every server process sees it. One row per address (tenant and user_name ''), per user
-- at an address, and per user from everywhere (address ''): failures in the current
-- window (`window_start`), and how long the row holds further attempts back.
CREATE TABLE sign_in_attempts (
    tenant       TEXT    NOT NULL,
    user_name    TEXT    NOT NULL,
    address      TEXT    NOT NULL,
    failures     INTEGER NOT NULL DEFAULT 0,
    window_start REAL    NOT NULL,
    held_until   REAL,
    updated_at   REAL    NOT NULL,
    PRIMARY KEY (tenant, user_name, address)
) WITHOUT ROWID;

CREATE INDEX sign_in_attempts_by_age ON sign_in_attempts (updated_at);

-- A disabled tenant: its keys and sessions are refused, its runs' work is not claimed.
ALTER TABLE tenants ADD COLUMN disabled_at REAL;
ALTER TABLE tenants ADD COLUMN disabled_by TEXT;
