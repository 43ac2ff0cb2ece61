-- Rolling quality per tenant, per tool and per prompt version (scorer).
-- +goose Up
CREATE TABLE IF NOT EXISTS quality_metrics (
    tenant_id            text             NOT NULL,
    target               text             NOT NULL CHECK (target IN ('tool', 'prompt')),
    target_key           text             NOT NULL,
    tool_name            text,
    prompt_hash          text,
    prompt_id            text,
    prompt_version       integer,
    total_calls          bigint           NOT NULL DEFAULT 0,
    successes            bigint           NOT NULL DEFAULT 0,
    failures             bigint           NOT NULL DEFAULT 0,
    consecutive_failures integer          NOT NULL DEFAULT 0,
    latency_sum_ms       double precision NOT NULL DEFAULT 0,
    latency_count        bigint           NOT NULL DEFAULT 0,
    rating_sum           double precision NOT NULL DEFAULT 0,
    rating_count         bigint           NOT NULL DEFAULT 0,
    feedback_sum         double precision NOT NULL DEFAULT 0,
    feedback_count       bigint           NOT NULL DEFAULT 0,
    recent_bits          bigint           NOT NULL DEFAULT 0,
    recent_count         integer          NOT NULL DEFAULT 0,
    success_rate         double precision NOT NULL DEFAULT 0,
    quality_score        double precision NOT NULL DEFAULT 0,
    last_event_id        text,
    updated_at           timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, target, target_key)
);
CREATE INDEX IF NOT EXISTS quality_metrics_score ON quality_metrics (tenant_id, target, quality_score);

-- +goose Down
DROP TABLE IF EXISTS quality_metrics;
