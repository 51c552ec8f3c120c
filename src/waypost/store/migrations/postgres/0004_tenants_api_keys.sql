-- waypost schema, version 4 (PostgreSQL): tenants and their API keys. A key is looked up
-- by its public key_id; only the SHA-256 of its secret is kept. Quotas are JSON.

CREATE TABLE tenants (
    tenant     text PRIMARY KEY,
    created_at double precision NOT NULL,
    created_by text NOT NULL,
    quotas     text NOT NULL DEFAULT '{}'
);

CREATE TABLE api_keys (
    key_id       text PRIMARY KEY,
    tenant       text NOT NULL,
    principal    text NOT NULL,
    roles        text NOT NULL,
    secret_hash  text NOT NULL,
    created_at   double precision NOT NULL,
    created_by   text NOT NULL,
    expires_at   double precision,
    revoked_at   double precision,
    revoked_by   text,
    last_used_at double precision
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at);
