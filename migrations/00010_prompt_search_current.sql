-- The prompts' full-text index covers the served versions only (current,
-- migration 00009), like their HNSW index: search ranks nothing else. On
-- 100,000 prompts over 20,000 ids the index over every version made the
-- full-text arm read five times the posting lists and AND them with a
-- 20,000-row bitmap of prompts_current (15 ms of a 42 ms search for a
-- query of common words), and every new version cost one more GIN
-- insertion, for the old version's row that Refresh rewrites. Statistics
-- for BM25 (search_lexemes, migration 00008) still count every version.
-- +goose Up
CREATE INDEX IF NOT EXISTS prompts_search_text_current ON prompts USING gin (search_text) WHERE current;
DROP INDEX IF EXISTS prompts_search_text;

-- +goose Down
CREATE INDEX IF NOT EXISTS prompts_search_text ON prompts USING gin (search_text);
DROP INDEX IF EXISTS prompts_search_text_current;
