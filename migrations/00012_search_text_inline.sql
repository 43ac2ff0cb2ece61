-- Keep a row's search text in the row. A prompt row is ~6 kB: its 4 kB
-- embedding goes to TOAST, and at the default toast_tuple_target (~2 kB)
-- the ~0.9 kB tsvector went out of line too, so full-text search read
-- it back from the TOAST table, twice per candidate (length and the
-- query's positions): ~3,100 buffer reads for 400 candidates instead of
-- ~440. Measured on 100,000 prompts (native PostgreSQL 15, pgvector 0.8,
-- same 600 queries alternating between a copy with and without this
-- setting): the full-text arm 4.7 -> 3.2 ms p50, 10.6 -> 7.4 ms p99.
-- The embedding still goes out of line (it alone is above the target).
--
-- Only rows inserted from now on, or whose search text changes, are laid
-- out this way; VACUUM FULL prompts, tools rewrites existing ones (an
-- ACCESS EXCLUSIVE lock while it rebuilds every index: see README,
-- "Production").
-- +goose Up
ALTER TABLE prompts SET (toast_tuple_target = 4080);
ALTER TABLE tools SET (toast_tuple_target = 4080);

-- +goose Down
ALTER TABLE prompts RESET (toast_tuple_target);
ALTER TABLE tools RESET (toast_tuple_target);
