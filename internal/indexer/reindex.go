package indexer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
	"github.com/agentq/agentq/internal/search"
)

// ReindexOptions tune Reindex.
type ReindexOptions struct {
	Tenant    string // "" = every tenant
	All       bool   // re-embed every row, not only those of another model
	BatchSize int    // rows per embedding call and update; default 64
	// Indexes are the vector indexes to create for the models in force.
	Indexes search.IndexOptions
	// Progress, when set, is called after each batch with the kind
	// (KindPrompts or KindTools), rows done and rows to do.
	Progress func(kind string, done, total int)
}

// ReindexReport says what Reindex did.
type ReindexReport struct {
	Prompts, Tools               int // rows re-embedded
	PromptModel, ToolModel       string
	SkippedPrompts, SkippedTools int // rows the model refused (left without a vector)
	// DroppedIndexes are vector indexes of the models in force at another
	// dimension (a provider's model changed behind its name): dropped
	// before re-embedding, since each refuses the new vectors.
	DroppedIndexes []string
	Took           time.Duration
}

// Reindex re-embeds, in place, the prompts and tools whose vector is of
// another model than the one in force (or missing; every row with All),
// then creates the models' vector indexes. Vectors are a function of a
// row's text and the model, so this is what a rebuild would store, without
// resetting anything: live copies keep running. Search meanwhile finds
// rows not yet re-embedded by full text only.
func Reindex(ctx context.Context, pool *pgxpool.Pool, emb Embedders, o ReindexOptions) (ReindexReport, error) {
	begin := time.Now()
	if o.BatchSize <= 0 {
		o.BatchSize = 64
	}
	rep := ReindexReport{PromptModel: emb.Prompts.Model(), ToolModel: emb.Tools.Model()}
	var err error
	if rep.Prompts, rep.SkippedPrompts, err = reindexKind(ctx, pool, emb.Prompts, KindPrompts, o, &rep); err != nil {
		return rep, err
	}
	if rep.Tools, rep.SkippedTools, err = reindexKind(ctx, pool, emb.Tools, KindTools, o, &rep); err != nil {
		return rep, err
	}
	if err := search.EnsureIndexes(ctx, pool, search.Embedders{Prompts: emb.Prompts, Tools: emb.Tools}, o.Indexes); err != nil {
		return rep, fmt.Errorf("vector indexes: %w", err)
	}
	rep.Took = time.Since(begin)
	return rep, nil
}

// reindexRow is one row to re-embed: its key and text.
type reindexRow struct {
	tenant, id string
	version    int
	text       string
}

// reindexKind re-embeds the out-of-date rows of kind with e, first
// dropping e's model's vector indexes of another dimension (added to
// rep.DroppedIndexes).
func reindexKind(ctx context.Context, pool *pgxpool.Pool, e embed.Embedder, kind string, o ReindexOptions, rep *ReindexReport) (done, skipped int, err error) {
	table, key := "prompts", "id || chr(1) || version::text"
	if kind == KindTools {
		table, key = "tools", "name"
	}
	dim, err := search.Dimension(ctx, e)
	if err != nil {
		return 0, 0, err
	}
	dropped, err := search.DropOtherDimensions(ctx, pool, table, e.Model(), dim)
	rep.DroppedIndexes = append(rep.DroppedIndexes, dropped...)
	if err != nil {
		return 0, 0, err
	}
	// Out of date: no vector, another model's, or the model's at another
	// dimension than it has now (it changed behind a provider's name).
	where := `($1 = '' OR tenant_id = $1) AND ($2 OR embedding IS NULL OR embedding_model <> $3 OR embedding_dim <> $4)`
	var total int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE `+where, o.Tenant, o.All, e.Model(), dim).Scan(&total); err != nil {
		return 0, 0, fmt.Errorf("count %s: %w", table, err)
	}
	if o.Progress != nil {
		o.Progress(kind, 0, total)
	}
	// Keyset pagination: rows the model refuses keep their old vector
	// state and must not be read again.
	lastTenant, lastKey := "", ""
	for done+skipped < total {
		rows, err := readReindexBatch(ctx, pool, kind, table, key, where, lastTenant, lastKey, o, e.Model(), dim)
		if err != nil {
			return done, skipped, err
		}
		if len(rows) == 0 {
			break
		}
		last := rows[len(rows)-1]
		lastTenant, lastKey = last.tenant, last.id
		if kind == KindPrompts {
			lastKey = fmt.Sprintf("%s\x01%d", last.id, last.version)
		}
		n, s, err := embedAndStore(ctx, pool, e, kind, rows)
		if err != nil {
			return done, skipped, err
		}
		done, skipped = done+n, skipped+s
		if o.Progress != nil {
			o.Progress(kind, done+skipped, total)
		}
	}
	return done, skipped, nil
}

func readReindexBatch(ctx context.Context, pool *pgxpool.Pool, kind, table, key, where, lastTenant, lastKey string, o ReindexOptions, model string, dim int) ([]reindexRow, error) {
	sel := `SELECT tenant_id, id, version, name, description, tags, content FROM prompts`
	if kind == KindTools {
		sel = `SELECT tenant_id, name, 0, name, description, tags, '' FROM tools`
	}
	q := sel + ` WHERE ` + where + ` AND (tenant_id, ` + key + `) > ($5, $6) ORDER BY tenant_id, ` + key + ` LIMIT $7`
	rs, err := pool.Query(ctx, q, o.Tenant, o.All, model, dim, lastTenant, lastKey, o.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rs.Close()
	var out []reindexRow
	for rs.Next() {
		var r reindexRow
		var name, desc, content string
		var tags []string
		if err := rs.Scan(&r.tenant, &r.id, &r.version, &name, &desc, &tags, &content); err != nil {
			return nil, err
		}
		if kind == KindTools {
			r.text = toolText(registry.Tool{Name: name, Description: desc, Tags: tags})
		} else {
			r.text = promptText(library.Prompt{Name: name, Description: desc, Tags: tags, Content: content})
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

func embedAndStore(ctx context.Context, pool *pgxpool.Pool, e embed.Embedder, kind string, rows []reindexRow) (done, skipped int, err error) {
	texts := make([]string, len(rows))
	for i, r := range rows {
		texts[i] = r.text
	}
	vecs, err := e.Embed(ctx, texts)
	if err != nil {
		if errors.Is(err, ctx.Err()) || len(rows) == 1 {
			if len(rows) == 1 && !errors.Is(err, ctx.Err()) && !isOutage(err) {
				return 0, 1, nil // refused by the model: left as it is
			}
			return 0, 0, err
		}
		if isOutage(err) {
			return 0, 0, err
		}
		// One text refused: the others one by one.
		for _, r := range rows {
			n, s, err := embedAndStore(ctx, pool, e, kind, []reindexRow{r})
			if err != nil {
				return done, skipped, err
			}
			done, skipped = done+n, skipped+s
		}
		return done, skipped, nil
	}
	b := &pgx.Batch{}
	for i, r := range rows {
		if kind == KindTools {
			b.Queue(`UPDATE tools SET embedding = $3, embedding_model = $4, embedding_dim = $5 WHERE tenant_id = $1 AND name = $2`,
				r.tenant, r.id, pgvector.NewVector(vecs[i]), e.Model(), len(vecs[i]))
		} else {
			b.Queue(`UPDATE prompts SET embedding = $4, embedding_model = $5, embedding_dim = $6 WHERE tenant_id = $1 AND id = $2 AND version = $3`,
				r.tenant, r.id, r.version, pgvector.NewVector(vecs[i]), e.Model(), len(vecs[i]))
		}
	}
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		return 0, 0, fmt.Errorf("store vectors: %w", err)
	}
	return len(rows), 0, nil
}

func isOutage(err error) bool { return bus.IsUnavailable(err) }
