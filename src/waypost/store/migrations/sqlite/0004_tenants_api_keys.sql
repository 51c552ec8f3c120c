-- waypost schema, version 4 (SQLite): tenants and their API keys. A key is looked up by
-- its public key_id; only the SHA-256 of its secret is kept. Quotas are JSON.

CREATE TABLE tenants (
    tenant     TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    quotas     TEXT NOT NULL DEFAULT '{}'
) WITHOUT ROWID;

CREATE TABLE api_keys (
    key_id       TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    principal    TEXT NOT NULL,
    roles        TEXT NOT NULL,
    secret_hash  TEXT NOT NULL,
    created_at   REAL NOT NULL,
    created_by   TEXT NOT NULL,
    expires_at   REAL,
    revoked_at   REAL,
    revoked_by   TEXT,
    last_used_at REAL
) WITHOUT ROWID;

CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at);
