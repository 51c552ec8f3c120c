-- waypost schema, version 3 (PostgreSQL): refused decisions on approvals. Each distinct
-- (principal, reason) of an approval is one row with a count, up to a limit per approval;
-- refusals beyond it are counted in the approval's overflow row (principal and reason '').

CREATE TABLE approval_refusals (
    tenant        text NOT NULL,
    approval_id   text NOT NULL,
    principal     text NOT NULL,
    reason        text NOT NULL,
    decision      text NOT NULL,
    credential_id text,
    auth          text NOT NULL,
    attempts      bigint NOT NULL,
    first_at      double precision NOT NULL,
    last_at       double precision NOT NULL,
    PRIMARY KEY (tenant, approval_id, principal, reason)
);
