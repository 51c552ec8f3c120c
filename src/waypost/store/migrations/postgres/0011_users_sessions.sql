-- waypost schema, version 11 (PostgreSQL): console users and sessions. A user keeps its
-- argon2id password hash, never the password; failed sign-ins in a row are counted and
-- hold the user back until `locked_until`. A session keeps the SHA-256 of its token, never
-- the token, and what it was opened with (a user's name or an API key's id), so that a
-- disabled user or a revoked key ends it.

CREATE TABLE users (
    tenant              text NOT NULL,
    name                text NOT NULL,
    roles               text NOT NULL,
    password_hash       text NOT NULL,
    created_at          double precision NOT NULL,
    created_by          text NOT NULL,
    disabled_at         double precision,
    disabled_by         text,
    password_changed_at double precision,
    failed_sign_ins     integer NOT NULL DEFAULT 0,
    locked_until        double precision,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE console_sessions (
    token_hash  text PRIMARY KEY,
    tenant      text NOT NULL,
    subject     text NOT NULL,
    kind        text NOT NULL,
    credential  text NOT NULL,
    created_at  double precision NOT NULL,
    expires_at  double precision NOT NULL,
    ended_at    double precision
);

CREATE INDEX console_sessions_by_credential ON console_sessions (tenant, kind, credential);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
