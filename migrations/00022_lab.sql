-- The lab (internal/lab): its read model of prompt versions, kept from the
-- stream (prompt.created gives the content, prompt.indexed the version it
-- became and its labels, joined by the created event's id), and one row
-- per accepted experiment. The trials themselves are the steps of the
-- experiment's job (job_steps), recorded as each one finishes.
-- +goose Up
CREATE TABLE IF NOT EXISTS lab_prompt_sources (
    tenant_id       text  NOT NULL,
    event_id        text  NOT NULL, -- the prompt.created event
    prompt_id       text  NOT NULL,
    content         text  NOT NULL,
    parameters      jsonb NOT NULL DEFAULT '[]',
    response_schema jsonb,          -- metadata.response_schema, for the structural tier
    PRIMARY KEY (tenant_id, event_id)
);

-- A version may be named by several creates (the same content again is
-- "unchanged"); any of them gives its content.
CREATE TABLE IF NOT EXISTS lab_prompt_versions (
    tenant_id       text    NOT NULL,
    prompt_id       text    NOT NULL,
    version         integer NOT NULL,
    source_event_id text    NOT NULL, -- prompt.indexed's causationid
    PRIMARY KEY (tenant_id, prompt_id, version, source_event_id)
);

-- Where each label is, by the latest prompt.indexed (stream order) that
-- reported it.
CREATE TABLE IF NOT EXISTS lab_prompt_labels (
    tenant_id  text    NOT NULL,
    prompt_id  text    NOT NULL,
    label      text    NOT NULL,
    version    integer NOT NULL,
    stream_seq bigint  NOT NULL,
    PRIMARY KEY (tenant_id, prompt_id, label)
);

CREATE TABLE IF NOT EXISTS lab_experiments (
    tenant_id        text        NOT NULL,
    experiment_id    text        NOT NULL,
    request_event_id text        NOT NULL,
    prompt_id        text        NOT NULL,
    name             text,
    status           text        NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    baseline_version integer     NOT NULL,
    candidate_versions integer[] NOT NULL,
    total_trials     integer     NOT NULL,
    model            text        NOT NULL,
    judge_model      text        NOT NULL,
    -- experiment.completed's or experiment.failed's data, report included.
    result           jsonb,
    reason_code      text,
    reason           text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    PRIMARY KEY (tenant_id, experiment_id)
);

-- +goose Down
DROP TABLE IF EXISTS lab_experiments;
DROP TABLE IF EXISTS lab_prompt_labels;
DROP TABLE IF EXISTS lab_prompt_versions;
DROP TABLE IF EXISTS lab_prompt_sources;
