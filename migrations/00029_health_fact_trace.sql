-- The degrader's facts keep the W3C trace context of the event they came
-- from (the CloudEvents distributed-tracing extension), so an alert carries
-- the trace of the agent's call that caused it, whether the fold reads the
-- fact live or again after a rebuild. '' when the event had none.
-- +goose Up
ALTER TABLE health_facts ADD COLUMN IF NOT EXISTS trace_parent text NOT NULL DEFAULT '';
ALTER TABLE health_facts ADD COLUMN IF NOT EXISTS trace_state text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE health_facts DROP COLUMN IF EXISTS trace_state;
ALTER TABLE health_facts DROP COLUMN IF EXISTS trace_parent;
