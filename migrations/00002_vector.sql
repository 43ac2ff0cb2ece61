-- pgvector, for the prompt library and tool registry embeddings. It must exist
-- before a pool registers the vector types (pgvector-go RegisterTypes).
-- +goose Up
CREATE EXTENSION IF NOT EXISTS vector;

-- +goose Down
SELECT 1;
