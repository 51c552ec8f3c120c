-- waypost schema, version 17 (SQLite): the rows beside a history carry a check under the
-- chain key (decision 0030). A run's `input_mac` covers its workflow and input, its
-- `state_mac` its status, result and error; an approval's `mac` its data, policy and
-- what it asks. Rows written before have none (NULL): read only where the chain
-- accepts legacy rows, until `waypost runs seal-legacy` gives them one.

ALTER TABLE runs ADD COLUMN input_mac TEXT;
ALTER TABLE runs ADD COLUMN state_mac TEXT;
ALTER TABLE approvals ADD COLUMN mac TEXT;
