-- BM25's statistics (migration 00008) without hot rows in the writers'
-- transactions. The row triggers used to upsert search_corpus's one row per
-- tenant and kind and ~65 search_lexemes rows per prompt inside the writer's
-- transaction, holding their locks until it committed: two indexer copies
-- writing one tenant took turns for whole batches (measured: 2 copies
-- indexed 69 prompts/s where 1 copy indexed 111/s).
--
-- Now a trigger appends one row per document change to search_stats_log,
-- which no one else locks, and agentq_search_fold moves logged changes into
-- search_corpus and search_lexemes in a short transaction of its own
-- (SKIP LOCKED: folders running at once take disjoint rows; upserts in key
-- order: they cannot deadlock). Readers add what is not folded yet, so the
-- statistics are exact at any time; folding only keeps the log short. The
-- indexer folds after every batch; search folds when it finds a log.
-- +goose Up
CREATE TABLE IF NOT EXISTS search_stats_log (
    id        bigserial PRIMARY KEY,
    tenant_id text    NOT NULL,
    kind      text    NOT NULL CHECK (kind IN ('prompt', 'tool')),
    sign      integer NOT NULL CHECK (sign IN (-1, 1)),
    length    integer NOT NULL,
    lexemes   text[]  NOT NULL
);
CREATE INDEX IF NOT EXISTS search_stats_log_tenant ON search_stats_log (tenant_id, kind);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentq_search_count(p_tenant text, p_kind text, p_doc tsvector, p_sign integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_stats_log (tenant_id, kind, sign, length, lexemes)
    VALUES (p_tenant, p_kind, p_sign, length(p_doc), tsvector_to_array(p_doc));
END $$;
-- +goose StatementEnd

-- agentq_search_fold folds at most p_limit logged changes, oldest first, and
-- returns how many it folded. A lexeme whose count reaches 0 is deleted. A
-- count may be negative for a while: a document's removal folded by one
-- folder before another folder's transaction holding its insertion commits;
-- that row stays, and the insertion brings it back to 0.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentq_search_fold(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
    t text[];
    k text[];
    l text[];
BEGIN
    WITH d AS (
        DELETE FROM search_stats_log WHERE id IN (
            SELECT id FROM search_stats_log ORDER BY id LIMIT p_limit FOR UPDATE SKIP LOCKED)
        RETURNING tenant_id, kind, sign, length, lexemes),
    c AS (
        INSERT INTO search_corpus AS s (tenant_id, kind, docs, lexemes)
        SELECT tenant_id, kind, sum(sign), sum(sign * length) FROM d GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (tenant_id, kind) DO UPDATE SET docs = s.docs + excluded.docs, lexemes = s.lexemes + excluded.lexemes
        RETURNING 1),
    x AS (
        SELECT d.tenant_id, d.kind, u.lexeme, sum(d.sign) AS delta
        FROM d, unnest(d.lexemes) u(lexeme) GROUP BY 1, 2, 3),
    up AS (
        INSERT INTO search_lexemes AS s (tenant_id, kind, lexeme, df)
        SELECT tenant_id, kind, lexeme, delta FROM x WHERE delta <> 0 ORDER BY 1, 2, 3
        ON CONFLICT (tenant_id, kind, lexeme) DO UPDATE SET df = s.df + excluded.df
        RETURNING s.tenant_id, s.kind, s.lexeme, s.df)
    SELECT (SELECT count(*) FROM d),
           array_agg(tenant_id) FILTER (WHERE df = 0), array_agg(kind) FILTER (WHERE df = 0), array_agg(lexeme) FILTER (WHERE df = 0)
    INTO n, t, k, l FROM up;
    IF t IS NOT NULL THEN
        DELETE FROM search_lexemes s USING unnest(t, k, l) AS z(tenant_id, kind, lexeme)
        WHERE s.tenant_id = z.tenant_id AND s.kind = z.kind AND s.lexeme = z.lexeme AND s.df = 0;
    END IF;
    RETURN n;
END $$;
-- +goose StatementEnd

-- +goose Down
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
SELECT agentq_search_fold(2147483647);
DROP FUNCTION IF EXISTS agentq_search_fold(integer);
DROP TABLE IF EXISTS search_stats_log;
