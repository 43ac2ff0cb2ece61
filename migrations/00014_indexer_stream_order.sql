-- The indexer's inputs by stream sequence, so that its state is what
-- applying its events one by one in stream order gives, whatever order
-- copies commit them in (internal/indexer, order.go).
--
-- Which version a create takes, whether it conflicts, whether an activation
-- finds its version and which definition of a tool is served depend on the
-- events before it in the stream. A copy can commit a later event before
-- an earlier one (two copies, a redelivery after a failure); the earlier
-- event then finds its id's or name's log holding later entries, and the
-- indexer decides every entry again in stream order. And a republished
-- event (the same id stored again later in the stream) that was applied
-- first is moved back to the sequence of its first occurrence.
--
-- A create's input is NULL while its version row holds it (prompts,
-- tool_history, by event id); the indexer writes it here when a
-- decision taken again leaves the event without a row.
-- +goose Up
CREATE TABLE IF NOT EXISTS prompt_log (
    tenant_id  text        NOT NULL,
    prompt_id  text        NOT NULL,
    stream_seq bigint      NOT NULL,
    event_id   text        NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('create', 'activate')),
    version    integer,    -- create: the version asked for (NULL: the next free one); activate: the version labelled
    label      text,       -- activate
    input      jsonb,      -- create: the prompt as given (library.Prompt)
    at         timestamptz NOT NULL, -- the event's time
    PRIMARY KEY (tenant_id, prompt_id, stream_seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS prompt_log_event ON prompt_log (tenant_id, event_id);

CREATE TABLE IF NOT EXISTS tool_log (
    tenant_id     text        NOT NULL,
    name          text        NOT NULL,
    stream_seq    bigint      NOT NULL,
    event_id      text        NOT NULL,
    hash          text        NOT NULL,
    definition    jsonb,      -- the definition as given (registry.Tool)
    registered_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, name, stream_seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS tool_log_event ON tool_log (tenant_id, event_id);

-- Every tool.degraded / quarantined / recovered: index_tool_health holds
-- the newest by sequence, and a republished one moved back to its first
-- occurrence gives the place back to the one it had displaced.
CREATE TABLE IF NOT EXISTS index_tool_health_log (
    tenant_id   text        NOT NULL,
    tool_name   text        NOT NULL,
    stream_seq  bigint      NOT NULL,
    event_id    text        NOT NULL,
    state       text        NOT NULL,
    quarantined boolean     NOT NULL,
    expires_at  timestamptz,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, tool_name, stream_seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS index_tool_health_log_event ON index_tool_health_log (tenant_id, event_id);

-- What was applied before this migration: every stored version as a create
-- of that version, every label as its activation, every definition as its
-- registration, every tool's health as the event that set it (its id is
-- unknown: 'seq:<n>', which no event id lookup finds). Creates answered
-- unchanged or rejected, and activations a later one displaced, were not
-- kept: `agentq replay --consumer indexer` rebuilds the whole log.
INSERT INTO prompt_log (tenant_id, prompt_id, stream_seq, event_id, kind, version, at)
SELECT tenant_id, id, stream_seq, event_id, 'create', version, created_at FROM prompts
ON CONFLICT DO NOTHING;
INSERT INTO prompt_log (tenant_id, prompt_id, stream_seq, event_id, kind, version, label, at)
SELECT tenant_id, prompt_id, stream_seq, event_id, 'activate', version, label, updated_at FROM prompt_labels
ON CONFLICT DO NOTHING;
INSERT INTO tool_log (tenant_id, name, stream_seq, event_id, hash, registered_at)
SELECT tenant_id, name, stream_seq, event_id, hash, registered_at FROM tool_history
ON CONFLICT DO NOTHING;
INSERT INTO index_tool_health_log (tenant_id, tool_name, stream_seq, event_id, state, quarantined, expires_at, updated_at)
SELECT tenant_id, tool_name, stream_seq, 'seq:' || stream_seq, state, quarantined, expires_at, updated_at FROM index_tool_health
ON CONFLICT DO NOTHING;

-- +goose Down
DROP TABLE IF EXISTS index_tool_health_log;
DROP TABLE IF EXISTS tool_log;
DROP TABLE IF EXISTS prompt_log;
