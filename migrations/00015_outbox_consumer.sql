-- Outbox rows name the consumer whose result they hold (the result's
-- source, agentq/<consumer>), so results can wait for a rebuild: while a
-- rebuilds row exists for a consumer and tenant ('*': every tenant), the
-- relay leaves that consumer's rows of the tenant alone. A rebuild stores
-- the per-event results live processing never published, live copies store
-- the results they withhold, and the relay publishes them once the rebuild
-- is complete (see internal/replay). Rows written before this column
-- existed have none and are never held.
-- +goose Up
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS consumer text;

-- +goose Down
ALTER TABLE outbox DROP COLUMN IF EXISTS consumer;
