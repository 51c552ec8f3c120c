-- waypost schema, version 11 (SQLite): console users and sessions. A user keeps its
-- argon2id password hash, never the password; failed sign-ins in a row are counted and
-- hold the user back until `locked_until`. A session keeps the SHA-256 of its token, never
-- the token, and what it was opened with (a user's name or an API key's id), so that a
-- disabled user or a revoked key ends it.

CREATE TABLE users (
    tenant              TEXT NOT NULL,
    name                TEXT NOT NULL,
    roles               TEXT NOT NULL,
    password_hash       TEXT NOT NULL,
    created_at          REAL NOT NULL,
    created_by          TEXT NOT NULL,
    disabled_at         REAL,
    disabled_by         TEXT,
    password_changed_at REAL,
    failed_sign_ins     INTEGER NOT NULL DEFAULT 0,
    locked_until        REAL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

CREATE TABLE console_sessions (
    token_hash  TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    subject     TEXT NOT NULL,
    kind        TEXT NOT NULL,
    credential  TEXT NOT NULL,
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL,
    ended_at    REAL
) WITHOUT ROWID;

CREATE INDEX console_sessions_by_credential ON console_sessions (tenant, kind, credential);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
