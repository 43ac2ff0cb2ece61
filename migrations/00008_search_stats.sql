-- Corpus statistics for the full-text arm's BM25 (internal/search): per
-- tenant and kind, how many documents there are and their total length
-- (search_corpus), and how many documents hold each lexeme
-- (search_lexemes, the document frequency behind IDF).
--
-- Triggers on prompts and tools keep them in the same transaction as the
-- row change, whoever writes the row (the indexer, a rebuild, a tenant
-- reset, agentq eval retrieval), so they cannot drift from the rows. An
-- update that leaves search_text as it was (a re-embedding) costs
-- nothing. Every prompt version counts as a document, as every version is
-- a row with its own search_text.
--
-- Length is the number of distinct lexemes (length(tsvector)), what a
-- search can read cheaply from each candidate.
--
-- Locking: upserts take the lexeme rows in lexeme order, so two
-- single-document transactions cannot deadlock; a transaction writing
-- several documents of one tenant can, and Postgres aborts one of them
-- (SQLSTATE 40P01), which the caller retries like any transient error.
-- +goose Up
CREATE TABLE IF NOT EXISTS search_corpus (
    tenant_id text   NOT NULL,
    kind      text   NOT NULL CHECK (kind IN ('prompt', 'tool')),
    docs      bigint NOT NULL,
    lexemes   bigint NOT NULL,  -- sum of length(search_text)
    PRIMARY KEY (tenant_id, kind)
);

CREATE TABLE IF NOT EXISTS search_lexemes (
    tenant_id text   NOT NULL,
    kind      text   NOT NULL CHECK (kind IN ('prompt', 'tool')),
    lexeme    text   NOT NULL,
    df        bigint NOT NULL,
    PRIMARY KEY (tenant_id, kind, lexeme)
);

-- agentq_search_count adds sign (1 or -1) times one document to the
-- statistics of (tenant, kind).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentq_search_count(p_tenant text, p_kind text, p_doc tsvector, p_sign integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_corpus AS c (tenant_id, kind, docs, lexemes)
    VALUES (p_tenant, p_kind, p_sign, p_sign * length(p_doc))
    ON CONFLICT (tenant_id, kind) DO UPDATE
        SET docs = c.docs + EXCLUDED.docs, lexemes = c.lexemes + EXCLUDED.lexemes;
    IF p_sign > 0 THEN
        INSERT INTO search_lexemes AS s (tenant_id, kind, lexeme, df)
        SELECT p_tenant, p_kind, x, 1 FROM unnest(tsvector_to_array(p_doc)) x ORDER BY x
        ON CONFLICT (tenant_id, kind, lexeme) DO UPDATE SET df = s.df + 1;
    ELSE
        -- Lock in lexeme order too (UPDATE alone takes rows in scan order).
        PERFORM 1 FROM search_lexemes
        WHERE tenant_id = p_tenant AND kind = p_kind AND lexeme = ANY (tsvector_to_array(p_doc))
        ORDER BY lexeme FOR UPDATE;
        UPDATE search_lexemes SET df = df - 1
        WHERE tenant_id = p_tenant AND kind = p_kind AND lexeme = ANY (tsvector_to_array(p_doc));
        DELETE FROM search_lexemes
        WHERE tenant_id = p_tenant AND kind = p_kind AND lexeme = ANY (tsvector_to_array(p_doc)) AND df <= 0;
    END IF;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentq_search_stats() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    k text := CASE TG_TABLE_NAME WHEN 'prompts' THEN 'prompt' ELSE 'tool' END;
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM agentq_search_count(OLD.tenant_id, k, OLD.search_text, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM agentq_search_count(NEW.tenant_id, k, NEW.search_text, 1);
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- The triggers come before the backfill: creating them locks the tables
-- against writes until this migration commits, so no row is missed or
-- counted twice.
CREATE OR REPLACE TRIGGER prompts_search_stats AFTER INSERT OR DELETE ON prompts
    FOR EACH ROW EXECUTE FUNCTION agentq_search_stats();
CREATE OR REPLACE TRIGGER prompts_search_stats_update AFTER UPDATE ON prompts
    FOR EACH ROW WHEN (OLD.search_text IS DISTINCT FROM NEW.search_text OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id)
    EXECUTE FUNCTION agentq_search_stats();
CREATE OR REPLACE TRIGGER tools_search_stats AFTER INSERT OR DELETE ON tools
    FOR EACH ROW EXECUTE FUNCTION agentq_search_stats();
CREATE OR REPLACE TRIGGER tools_search_stats_update AFTER UPDATE ON tools
    FOR EACH ROW WHEN (OLD.search_text IS DISTINCT FROM NEW.search_text OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id)
    EXECUTE FUNCTION agentq_search_stats();

-- Backfill the rows written before this migration, once (a database that
-- applies this file twice already has statistics).
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM search_corpus) THEN
        INSERT INTO search_corpus (tenant_id, kind, docs, lexemes)
        SELECT tenant_id, 'prompt', count(*), coalesce(sum(length(search_text)), 0) FROM prompts GROUP BY tenant_id
        UNION ALL
        SELECT tenant_id, 'tool', count(*), coalesce(sum(length(search_text)), 0) FROM tools GROUP BY tenant_id;
        INSERT INTO search_lexemes (tenant_id, kind, lexeme, df)
        SELECT p.tenant_id, 'prompt', x, count(*) FROM prompts p, unnest(tsvector_to_array(p.search_text)) x GROUP BY 1, 3
        UNION ALL
        SELECT t.tenant_id, 'tool', x, count(*) FROM tools t, unnest(tsvector_to_array(t.search_text)) x GROUP BY 1, 3;
    END IF;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER IF EXISTS tools_search_stats_update ON tools;
DROP TRIGGER IF EXISTS tools_search_stats ON tools;
DROP TRIGGER IF EXISTS prompts_search_stats_update ON prompts;
DROP TRIGGER IF EXISTS prompts_search_stats ON prompts;
DROP FUNCTION IF EXISTS agentq_search_stats();
DROP FUNCTION IF EXISTS agentq_search_count(text, text, tsvector, integer);
DROP TABLE IF EXISTS search_lexemes;
DROP TABLE IF EXISTS search_corpus;
