-- Copies of one event at several stream sequences (a publisher without
-- Nats-Msg-Id, a redrive, an outbox republish after the duplicate window):
-- the first copy in the stream counts, at its sequence, whichever copy
-- commits first. The inbox records the sequence an event was applied at,
-- so a claim by an earlier copy is recognised and the consumer re-files
-- the effect there (database.Claimed.Moved). NULL: applied by a claim that
-- named no sequence (before this migration, or a consumer whose state
-- does not depend on order); such a row is a plain duplicate, as before.
--
-- The scorer keeps the newest stream sequences of each target's events
-- (all kinds, not only calls), so as_of_seq is known again when the newest
-- event is re-filed at an earlier sequence. Empty: rebuilt from as_of_seq
-- on the next write.
-- +goose Up
ALTER TABLE inbox ADD COLUMN IF NOT EXISTS seq bigint;
ALTER TABLE quality_metrics ADD COLUMN IF NOT EXISTS newest_seqs bigint[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE quality_metrics DROP COLUMN IF EXISTS newest_seqs;
ALTER TABLE inbox DROP COLUMN IF EXISTS seq;
