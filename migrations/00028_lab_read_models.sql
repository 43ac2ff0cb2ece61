-- The lab (internal/lab):
--  * lab_prompt_uses.used_at: the prompt.used event's time, by which rows
--    past AGENTQ_LAB_FEEDBACK_RETENTION are pruned. Rows stored before have
--    no time of their own: they count from this migration.
--  * lab_prompt_results: every result of the indexer the lab applied
--    (prompt.indexed, and indexer.rejected of a prompt event), at its
--    stream sequence. The indexer may revise a result; the newest of a
--    cause is what its event did.
--  * lab_prompt_versions now follows the newest result of each cause (a
--    create revised to another version moves, one revised to a rejection
--    goes), says whether the create made the version (created) or was
--    answered unchanged, and carries the version's content hash, which
--    replaces lab_prompt_hashes. Rows from before keep what they said; a
--    rebuild (agentq replay --consumer lab) applies the revisions the lab
--    ignored until now.
-- Requests refused before 00027 are not added to lab_commands here: the
-- database keeps no trace that tells them apart (lab.rejected left the
-- outbox once published; their inbox rows do not say what the event was,
-- and look like those of prompt.indexed events without labels). A rebuild
-- finds their answers on the stream instead and records them then.
-- +goose Up
ALTER TABLE lab_prompt_uses ADD COLUMN IF NOT EXISTS used_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX IF NOT EXISTS lab_prompt_uses_used_at ON lab_prompt_uses (used_at);

CREATE TABLE IF NOT EXISTS lab_prompt_results (
    tenant_id    text    NOT NULL,
    event_id     text    NOT NULL, -- the result
    cause_id     text    NOT NULL, -- its causationid: a prompt.created or prompt.activated
    prompt_id    text,             -- NULL for a rejection
    version      integer,          -- NULL for a rejection
    created      boolean NOT NULL DEFAULT false, -- outcome created (not unchanged)
    content_hash text,
    stream_seq   bigint  NOT NULL,
    PRIMARY KEY (tenant_id, event_id)
);
CREATE INDEX IF NOT EXISTS lab_prompt_results_cause ON lab_prompt_results (tenant_id, cause_id, stream_seq);

ALTER TABLE lab_prompt_versions ADD COLUMN IF NOT EXISTS created boolean NOT NULL DEFAULT true;
ALTER TABLE lab_prompt_versions ADD COLUMN IF NOT EXISTS content_hash text;
CREATE INDEX IF NOT EXISTS lab_prompt_versions_hash ON lab_prompt_versions (tenant_id, content_hash) WHERE content_hash IS NOT NULL;
CREATE INDEX IF NOT EXISTS lab_prompt_versions_source ON lab_prompt_versions (tenant_id, source_event_id);
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('lab_prompt_hashes') IS NOT NULL THEN
        UPDATE lab_prompt_versions v SET content_hash = h.content_hash
        FROM (SELECT DISTINCT ON (tenant_id, prompt_id, version) tenant_id, prompt_id, version, content_hash
              FROM lab_prompt_hashes ORDER BY tenant_id, prompt_id, version, content_hash) h
        WHERE v.content_hash IS NULL AND h.tenant_id = v.tenant_id AND h.prompt_id = v.prompt_id AND h.version = v.version;
    END IF;
END $$;
-- +goose StatementEnd
DROP TABLE IF EXISTS lab_prompt_hashes;

-- +goose Down
CREATE TABLE IF NOT EXISTS lab_prompt_hashes (
    tenant_id    text    NOT NULL,
    content_hash text    NOT NULL,
    prompt_id    text    NOT NULL,
    version      integer NOT NULL,
    PRIMARY KEY (tenant_id, content_hash, prompt_id, version)
);
INSERT INTO lab_prompt_hashes (tenant_id, content_hash, prompt_id, version)
SELECT DISTINCT tenant_id, content_hash, prompt_id, version FROM lab_prompt_versions WHERE content_hash IS NOT NULL
ON CONFLICT DO NOTHING;
DROP INDEX IF EXISTS lab_prompt_versions_source;
DROP INDEX IF EXISTS lab_prompt_versions_hash;
ALTER TABLE lab_prompt_versions DROP COLUMN IF EXISTS content_hash;
ALTER TABLE lab_prompt_versions DROP COLUMN IF EXISTS created;
DROP TABLE IF EXISTS lab_prompt_results;
DROP INDEX IF EXISTS lab_prompt_uses_used_at;
ALTER TABLE lab_prompt_uses DROP COLUMN IF EXISTS used_at;
