-- The lab's read model of negative feedback (internal/lab), kept from the
-- stream for its candidates-from-feedback runs: feedback.submitted on a
-- prompt (thumbs down or rating below 0.5), prompt.used (the query and the
-- response of a run, for feedback that names only its run), and the
-- content hashes prompt.indexed reports (for events that name a version by
-- its hash). Each row is one event, so applying an event again changes
-- nothing; the joins are made when the feedback is read, so the events may
-- arrive in any order. What prompt.created says about a version beyond its
-- content (type, name, description, tags) is kept too: a candidate is
-- created with its baseline's; and its author: a run from feedback does
-- not take an earlier run's candidate, never activated, for its baseline.
-- +goose Up
CREATE TABLE IF NOT EXISTS lab_feedback (
    tenant_id    text        NOT NULL,
    event_id     text        NOT NULL, -- the feedback.submitted event
    prompt_id    text,                 -- as the feedback names it: prompt_id and version,
    version      integer,
    prompt_hash  text,                 -- or the version's content hash
    run_id       text,
    thumbs       text,
    rating       double precision,
    comment      text,
    query        text,
    response     text,
    submitted_at timestamptz NOT NULL, -- the event's time
    -- The incremental run (a scheduled one) that looked at it; the next
    -- incremental run of the prompt looks only at feedback no run did.
    analysed_by  text,
    PRIMARY KEY (tenant_id, event_id)
);
CREATE INDEX IF NOT EXISTS lab_feedback_prompt ON lab_feedback (tenant_id, prompt_id);
CREATE INDEX IF NOT EXISTS lab_feedback_hash ON lab_feedback (tenant_id, prompt_hash) WHERE prompt_hash IS NOT NULL;

-- prompt.used events that carry a run id: what feedback naming that run
-- was about.
CREATE TABLE IF NOT EXISTS lab_prompt_uses (
    tenant_id   text    NOT NULL,
    event_id    text    NOT NULL,
    run_id      text    NOT NULL,
    prompt_id   text,
    version     integer,
    prompt_hash text,
    step_idx    integer,
    stream_seq  bigint  NOT NULL,
    input       text,
    output      text,
    PRIMARY KEY (tenant_id, event_id)
);
CREATE INDEX IF NOT EXISTS lab_prompt_uses_run ON lab_prompt_uses (tenant_id, run_id);

CREATE TABLE IF NOT EXISTS lab_prompt_hashes (
    tenant_id    text    NOT NULL,
    content_hash text    NOT NULL,
    prompt_id    text    NOT NULL,
    version      integer NOT NULL,
    PRIMARY KEY (tenant_id, content_hash, prompt_id, version)
);

ALTER TABLE lab_prompt_sources ADD COLUMN IF NOT EXISTS type text;
ALTER TABLE lab_prompt_sources ADD COLUMN IF NOT EXISTS name text;
ALTER TABLE lab_prompt_sources ADD COLUMN IF NOT EXISTS description text;
ALTER TABLE lab_prompt_sources ADD COLUMN IF NOT EXISTS tags jsonb;
ALTER TABLE lab_prompt_sources ADD COLUMN IF NOT EXISTS author text;

-- +goose Down
ALTER TABLE lab_prompt_sources DROP COLUMN IF EXISTS author;
ALTER TABLE lab_prompt_sources DROP COLUMN IF EXISTS tags;
ALTER TABLE lab_prompt_sources DROP COLUMN IF EXISTS description;
ALTER TABLE lab_prompt_sources DROP COLUMN IF EXISTS name;
ALTER TABLE lab_prompt_sources DROP COLUMN IF EXISTS type;
DROP TABLE IF EXISTS lab_prompt_hashes;
DROP TABLE IF EXISTS lab_prompt_uses;
DROP TABLE IF EXISTS lab_feedback;
