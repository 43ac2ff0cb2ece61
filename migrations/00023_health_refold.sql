-- The degrader's late facts (internal/health): a fact stored at a sequence
-- the fold has already passed (a redriven dead letter counts at its
-- original's place) makes the fold start the tenant again from its first
-- fact; refold_from is the lowest such sequence, NULL when none waits.
-- +goose Up
ALTER TABLE health_tenants ADD COLUMN IF NOT EXISTS refold_from bigint;

-- +goose Down
ALTER TABLE health_tenants DROP COLUMN IF EXISTS refold_from;
