-- Placeholder: keeps migrations numbered 1..n on this branch, whose own migration is 0019.
-- Another change's migration takes this number when the branches are merged.
SELECT 1;
