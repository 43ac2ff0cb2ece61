-- The lab (internal/lab):
--  * lab_prompt_uses.used_at: the prompt.used event's time, by which rows
--    past AGENTQ_LAB_FEEDBACK_RETENTION are pruned. Rows stored before have
--    no time of their own: they count from this migration.
-- +goose Up
ALTER TABLE lab_prompt_uses ADD COLUMN IF NOT EXISTS used_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX IF NOT EXISTS lab_prompt_uses_used_at ON lab_prompt_uses (used_at);

-- +goose Down
DROP INDEX IF EXISTS lab_prompt_uses_used_at;
ALTER TABLE lab_prompt_uses DROP COLUMN IF EXISTS used_at;
