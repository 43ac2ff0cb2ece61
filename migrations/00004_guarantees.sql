-- Guarantees that do not depend on order, batching or copies.
--
-- Rebuilds (agentq replay): a consumer's batches read its fence row FOR SHARE
-- before claiming their inbox; a rebuild takes the row FOR UPDATE while it
-- resets state and records its horizon, so no batch straddles a reset. While
-- a rebuilds row exists for a tenant ('*': every tenant), live copies keep
-- applying that tenant's events but withhold their results: the state is
-- incomplete until the rebuild reaches its horizon.
-- +goose Up
CREATE TABLE IF NOT EXISTS consumer_fences (
    consumer text PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS rebuilds (
    consumer    text        NOT NULL,
    tenant_id   text        NOT NULL,
    horizon     bigint      NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, tenant_id)
);

-- Inbox pruning scans by age.
CREATE INDEX IF NOT EXISTS inbox_processed_at ON inbox (processed_at);

-- The scorer's state, v2: a function of the set of events and their stream
-- sequences. Sums are integers (micro-units) so any order adds up to the
-- same value; the recent window and the failure streak come from the
-- calls' stream sequences, so a late event lands in its place. v1 state
-- cannot be converted (it kept neither): it is dropped, with the scorer's
-- inbox, and rebuilt by `agentq replay --consumer scorer --yes`.
DROP TABLE IF EXISTS quality_metrics;
DELETE FROM inbox WHERE consumer = 'scorer';
CREATE TABLE IF NOT EXISTS quality_metrics (
    tenant_id           text             NOT NULL,
    target              text             NOT NULL CHECK (target IN ('tool', 'prompt')),
    target_key          text             NOT NULL,
    tool_name           text,
    prompt_hash         text,
    prompt_id           text,
    prompt_version      integer,
    state_version       bigint           NOT NULL DEFAULT 0,  -- events folded in
    as_of_seq           bigint           NOT NULL DEFAULT 0,  -- highest stream sequence folded in
    total_calls         bigint           NOT NULL DEFAULT 0,
    successes           bigint           NOT NULL DEFAULT 0,
    failures            bigint           NOT NULL DEFAULT 0,
    latency_sum_us      bigint           NOT NULL DEFAULT 0,
    latency_count       bigint           NOT NULL DEFAULT 0,
    rating_sum_micro    bigint           NOT NULL DEFAULT 0,
    rating_count        bigint           NOT NULL DEFAULT 0,
    feedback_sum_micro  bigint           NOT NULL DEFAULT 0,
    feedback_count      bigint           NOT NULL DEFAULT 0,
    last_success_seq    bigint           NOT NULL DEFAULT 0,
    consecutive_failures integer         NOT NULL DEFAULT 0,
    history             bigint[]         NOT NULL DEFAULT '{}', -- newest calls by stream sequence: +seq success, -seq failure
    success_rate        double precision NOT NULL DEFAULT 0,
    quality_score       double precision NOT NULL DEFAULT 0,
    updated_at          timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, target, target_key)
);
CREATE INDEX IF NOT EXISTS quality_metrics_score ON quality_metrics (tenant_id, target, quality_score);

-- +goose Down
DROP TABLE IF EXISTS rebuilds;
DROP TABLE IF EXISTS consumer_fences;
DROP INDEX IF EXISTS inbox_processed_at;
