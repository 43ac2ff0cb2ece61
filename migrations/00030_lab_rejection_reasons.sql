-- The lab (internal/lab):
--  * lab_prompt_results.reason_code and .reason: what an indexer.rejected
--    said, so a run from feedback whose candidate the indexer rejected fails
--    at once naming the rejection, instead of waiting for a version until
--    its timeout. Rejections stored before have none; a rebuild
--    (agentq replay --consumer lab) brings them.
--  * lab_feedback_submitted_at: the feedback rows past
--    AGENTQ_LAB_FEEDBACK_RETENTION are pruned by their time, as the
--    prompt.used rows are by theirs.
-- +goose Up
ALTER TABLE lab_prompt_results ADD COLUMN IF NOT EXISTS reason_code text;
ALTER TABLE lab_prompt_results ADD COLUMN IF NOT EXISTS reason text;
CREATE INDEX IF NOT EXISTS lab_feedback_submitted_at ON lab_feedback (submitted_at);

-- +goose Down
DROP INDEX IF EXISTS lab_feedback_submitted_at;
ALTER TABLE lab_prompt_results DROP COLUMN IF EXISTS reason;
ALTER TABLE lab_prompt_results DROP COLUMN IF EXISTS reason_code;
