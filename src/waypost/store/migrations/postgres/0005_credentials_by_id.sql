-- waypost schema, version 4 (PostgreSQL): credentials found by their id alone, whatever
-- the tenant (an approval link carries only the token; its secret is what authorises).
-- Credential ids are 96 random bits: unique across tenants, which the index enforces.

CREATE UNIQUE INDEX approval_credentials_by_id ON approval_credentials (credential_id);
