-- The indexer's state: the prompt library, the tool registry, and the read
-- model search ranks by (internal/library, internal/registry,
-- internal/indexer, internal/search).
--
-- Vectors: one `embedding vector` column without a fixed dimension, with
-- the model and dimension recorded beside it. The indexer creates one HNSW
-- expression index per model in force at start, e.g.
--   CREATE INDEX ... ON prompts USING hnsw ((embedding::vector(1024)) vector_cosine_ops)
--   WHERE embedding_model = 'agentq-lexical-v1'
-- (pgvector's README, "mixed dimensions"), so a model change is a new
-- partial index and a reindex, not a migration.
--
-- Full text: a generated tsvector over what a person searches by (name,
-- description, tags, content; a tool's snake_case name split into words),
-- GIN-indexed; 'english' stems, so "summarize" matches "summarizes".
--
-- Every time below comes from the events (their time attribute, else the
-- stream timestamp), never now(), so a rebuild gives the same rows.
-- +goose Up
-- array_to_string is only STABLE (it could call a type's output function);
-- on text[] it is immutable, which a generated column needs.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentq_words(text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT array_to_string($1, ' ') $$;
-- +goose StatementEnd
CREATE TABLE IF NOT EXISTS prompts (
    tenant_id       text        NOT NULL,
    id              text        NOT NULL,
    version         integer     NOT NULL CHECK (version >= 1),
    hash            text        NOT NULL,  -- sha256 of {id, version, content, type}
    type            text        NOT NULL,
    name            text        NOT NULL,
    description     text        NOT NULL DEFAULT '',
    content         text        NOT NULL,
    parameters      jsonb       NOT NULL DEFAULT '[]',
    tags            text[]      NOT NULL DEFAULT '{}',
    author          text        NOT NULL DEFAULT '',
    metadata        jsonb,
    created_at      timestamptz NOT NULL,
    event_id        text        NOT NULL,  -- the prompt.created that stored it
    stream_seq      bigint      NOT NULL,
    embedding       vector,
    embedding_model text        NOT NULL DEFAULT '',
    embedding_dim   integer     NOT NULL DEFAULT 0,
    search_text     tsvector    GENERATED ALWAYS AS (
        setweight(to_tsvector('english', name), 'A') ||
        setweight(to_tsvector('english', description || ' ' || agentq_words(tags)), 'B') ||
        setweight(to_tsvector('english', content), 'C')) STORED,
    PRIMARY KEY (tenant_id, id, version)
);
CREATE INDEX IF NOT EXISTS prompts_hash ON prompts (tenant_id, hash);
CREATE INDEX IF NOT EXISTS prompts_search_text ON prompts USING gin (search_text);

-- Labels are the only mutation a prompt has. The newest prompt.activated by
-- stream sequence holds the label, whatever order copies applied them in.
CREATE TABLE IF NOT EXISTS prompt_labels (
    tenant_id  text        NOT NULL,
    prompt_id  text        NOT NULL,
    label      text        NOT NULL,
    version    integer     NOT NULL,
    stream_seq bigint      NOT NULL,
    event_id   text        NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, prompt_id, label)
);

-- The current definition of each tool; tool_history keeps every definition
-- it ever had (the current one included), by version.
CREATE TABLE IF NOT EXISTS tools (
    tenant_id       text        NOT NULL,
    name            text        NOT NULL,
    version         integer     NOT NULL CHECK (version >= 1),
    hash            text        NOT NULL,
    description     text        NOT NULL,
    input_schema    jsonb,
    server          text        NOT NULL DEFAULT '',
    tags            text[]      NOT NULL DEFAULT '{}',
    registered_at   timestamptz NOT NULL,
    event_id        text        NOT NULL,
    stream_seq      bigint      NOT NULL,
    embedding       vector,
    embedding_model text        NOT NULL DEFAULT '',
    embedding_dim   integer     NOT NULL DEFAULT 0,
    search_text     tsvector    GENERATED ALWAYS AS (
        setweight(to_tsvector('english', replace(replace(name, '_', ' '), '.', ' ')), 'A') ||
        setweight(to_tsvector('english', description || ' ' || agentq_words(tags) || ' ' || server), 'B')) STORED,
    PRIMARY KEY (tenant_id, name)
);
CREATE INDEX IF NOT EXISTS tools_search_text ON tools USING gin (search_text);

CREATE TABLE IF NOT EXISTS tool_history (
    tenant_id     text        NOT NULL,
    name          text        NOT NULL,
    version       integer     NOT NULL,
    hash          text        NOT NULL,
    description   text        NOT NULL,
    input_schema  jsonb,
    server        text        NOT NULL DEFAULT '',
    tags          text[]      NOT NULL DEFAULT '{}',
    registered_at timestamptz NOT NULL,
    event_id      text        NOT NULL,
    stream_seq    bigint      NOT NULL,
    PRIMARY KEY (tenant_id, name, version)
);

-- Read model from other consumers' results (DESIGN §10): quality.changed,
-- applied with compare-and-set on state_version. ref is the tool name, the
-- prompt hash, or <prompt_id>@<version> when agents reported use by id:
-- search adds the two prompt figures up (internal/search).
CREATE TABLE IF NOT EXISTS index_quality (
    tenant_id     text             NOT NULL,
    target        text             NOT NULL CHECK (target IN ('tool', 'prompt')),
    ref           text             NOT NULL,
    state_version bigint           NOT NULL,
    quality_score double precision NOT NULL,
    success_rate  double precision NOT NULL,
    total_calls   bigint           NOT NULL,
    successes     bigint           NOT NULL DEFAULT 0,
    last_success  timestamptz,     -- time of the newest quality.changed whose successes grew
    updated_at    timestamptz      NOT NULL, -- time of the applied quality.changed
    PRIMARY KEY (tenant_id, target, ref)
);

-- Tool health from tool.degraded / tool.quarantined / tool.recovered, the
-- newest by stream sequence.
CREATE TABLE IF NOT EXISTS index_tool_health (
    tenant_id   text        NOT NULL,
    tool_name   text        NOT NULL,
    state       text        NOT NULL,
    quarantined boolean     NOT NULL,
    expires_at  timestamptz,
    stream_seq  bigint      NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, tool_name)
);

-- +goose Down
DROP TABLE IF EXISTS index_tool_health;
DROP TABLE IF EXISTS index_quality;
DROP TABLE IF EXISTS tool_history;
DROP TABLE IF EXISTS tools;
DROP TABLE IF EXISTS prompt_labels;
DROP TABLE IF EXISTS prompts;
DROP FUNCTION IF EXISTS agentq_words(text[]);
