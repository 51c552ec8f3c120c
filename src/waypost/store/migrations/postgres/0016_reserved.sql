-- waypost schema, version 16: no change in this file.
SELECT 1;
