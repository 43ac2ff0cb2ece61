-- The lab (internal/lab):
--  * lab_prompt_sources.tools: a version's metadata.tools, the OpenAI tool
--    definitions its trials offer the model (tool calls are counted per
--    version in the report);
--  * lab_prompt_label_sets replaces lab_prompt_labels: one row per
--    prompt.indexed and label it reports, at the event's stream sequence, so
--    a republished copy applied before its original can be moved back to the
--    original's place (the label belongs to the latest by sequence);
--  * lab_commands: the experiment.requested and experiment.cancelled events
--    the lab decided. A rebuild (agentq replay --consumer lab) resets the
--    read model and the inbox rows of prompt events, but keeps these
--    commands' rows: a decision (a job started, a refusal published) is a
--    fact of its own, never taken again.
-- +goose Up
ALTER TABLE lab_prompt_sources ADD COLUMN IF NOT EXISTS tools jsonb;

CREATE TABLE IF NOT EXISTS lab_prompt_label_sets (
    tenant_id  text    NOT NULL,
    event_id   text    NOT NULL, -- the prompt.indexed; '' for labels carried over from lab_prompt_labels
    prompt_id  text    NOT NULL,
    label      text    NOT NULL,
    version    integer NOT NULL,
    stream_seq bigint  NOT NULL,
    PRIMARY KEY (tenant_id, prompt_id, label, event_id)
);
CREATE INDEX IF NOT EXISTS lab_prompt_label_sets_event ON lab_prompt_label_sets (tenant_id, event_id);

-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('lab_prompt_labels') IS NOT NULL THEN
        INSERT INTO lab_prompt_label_sets (tenant_id, event_id, prompt_id, label, version, stream_seq)
        SELECT tenant_id, '', prompt_id, label, version, stream_seq FROM lab_prompt_labels
        ON CONFLICT DO NOTHING;
    END IF;
END $$;
-- +goose StatementEnd
DROP TABLE IF EXISTS lab_prompt_labels;

CREATE TABLE IF NOT EXISTS lab_commands (
    tenant_id  text        NOT NULL,
    event_id   text        NOT NULL,
    decided_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, event_id)
);
-- The requests accepted before: their decisions are their jobs.
INSERT INTO lab_commands (tenant_id, event_id)
SELECT tenant_id, request_event_id FROM lab_experiments
ON CONFLICT DO NOTHING;

-- +goose Down
DROP TABLE IF EXISTS lab_commands;
CREATE TABLE IF NOT EXISTS lab_prompt_labels (
    tenant_id  text    NOT NULL,
    prompt_id  text    NOT NULL,
    label      text    NOT NULL,
    version    integer NOT NULL,
    stream_seq bigint  NOT NULL,
    PRIMARY KEY (tenant_id, prompt_id, label)
);
INSERT INTO lab_prompt_labels (tenant_id, prompt_id, label, version, stream_seq)
SELECT DISTINCT ON (tenant_id, prompt_id, label) tenant_id, prompt_id, label, version, stream_seq
FROM lab_prompt_label_sets ORDER BY tenant_id, prompt_id, label, stream_seq DESC
ON CONFLICT DO NOTHING;
DROP TABLE IF EXISTS lab_prompt_label_sets;
ALTER TABLE lab_prompt_sources DROP COLUMN IF EXISTS tools;
