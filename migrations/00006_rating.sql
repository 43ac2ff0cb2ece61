-- The rater's state (internal/rating).
--
-- ratings holds every rating the rater gave, one row per rated event,
-- written in the same transaction as the event's inbox claim and the
-- tool.rated / prompt.rated outbox row: the audit of what was published,
-- and what the conformance suite compares. Events the rater skipped (not
-- sampled, over budget, already rated by the agent, no output) have an
-- inbox row and no rating.
--
-- rater_budget counts the LLM tokens each tenant spent on ratings per UTC
-- day of the events' stream time, so AGENTQ_RATER_DAILY_TOKENS can be
-- enforced by every copy of the rater; it is spend, not derived state, and
-- a rebuild leaves it alone.
-- +goose Up
CREATE TABLE IF NOT EXISTS ratings (
    tenant_id           text             NOT NULL,
    event_id            text             NOT NULL,  -- the rated tool.executed / prompt.used event
    stream_seq          bigint           NOT NULL,  -- its sequence in stream AGENTQ
    target              text             NOT NULL CHECK (target IN ('tool', 'prompt')),
    target_key          text             NOT NULL,  -- tool name, prompt hash, or <prompt_id>@<version>
    tool_name           text,
    prompt_hash         text,
    prompt_id           text,
    prompt_version      integer,
    rating              double precision NOT NULL CHECK (rating >= 0 AND rating <= 1),
    relevance           double precision NOT NULL CHECK (relevance >= 0 AND relevance <= 1),
    correctness         double precision NOT NULL CHECK (correctness >= 0 AND correctness <= 1),
    rater_kind          text             NOT NULL CHECK (rater_kind IN ('llm', 'rules')),
    rater               text             NOT NULL,  -- llm:<model> or rules:v1
    tokens              integer          NOT NULL DEFAULT 0,
    latency_ms          integer          NOT NULL DEFAULT 0,
    injection_suspected boolean          NOT NULL DEFAULT false,
    reason              text             NOT NULL DEFAULT '',
    rated_at            timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, event_id)
);
CREATE INDEX IF NOT EXISTS ratings_target ON ratings (tenant_id, target, target_key, stream_seq);

CREATE TABLE IF NOT EXISTS rater_budget (
    tenant_id  text        NOT NULL,
    day        date        NOT NULL,  -- UTC day of the rated events' stream time
    tokens     bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, day)
);

-- +goose Down
DROP TABLE IF EXISTS rater_budget;
DROP TABLE IF EXISTS ratings;
