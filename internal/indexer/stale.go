package indexer

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/embed"
)

// StaleModel is a count of rows whose vector is of another model than the
// one in force for their kind.
type StaleModel struct {
	Kind  string // KindPrompts or KindTools
	Model string // the model of their vectors
	Rows  int
}

// Stale counts, per kind and model, the rows of tenant ("" for all) whose
// vector is of another model than emb's for their kind: search's vector
// arm does not see them (it compares only vectors of the model in force)
// until Reindex re-embeds them. It reads each table once, whole.
func Stale(ctx context.Context, pool *pgxpool.Pool, emb Embedders, tenant string) ([]StaleModel, error) {
	var out []StaleModel
	for _, k := range []struct {
		kind, table string
		model       string
	}{{KindPrompts, "prompts", modelOf(emb.Prompts)}, {KindTools, "tools", modelOf(emb.Tools)}} {
		if k.model == "" {
			continue
		}
		rows, err := pool.Query(ctx, `SELECT embedding_model, count(*) FROM `+k.table+`
WHERE ($1 = '' OR tenant_id = $1) AND embedding IS NOT NULL AND embedding_model <> $2
GROUP BY embedding_model ORDER BY embedding_model`, tenant, k.model)
		if err != nil {
			return nil, fmt.Errorf("count %s of other models: %w", k.table, err)
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StaleModel, error) {
			s := StaleModel{Kind: k.kind}
			return s, r.Scan(&s.Model, &s.Rows)
		})
		if err != nil {
			return nil, fmt.Errorf("count %s of other models: %w", k.table, err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// warnStale logs, once at start, the rows Stale finds, so an operator who
// changed a model learns to run agentq reindex.
func warnStale(ctx context.Context, pool *pgxpool.Pool, emb Embedders, log zerolog.Logger) {
	stale, err := Stale(ctx, pool, emb, "")
	if err != nil {
		if ctx.Err() == nil {
			log.Warn().Err(err).Msg("could not count the rows embedded by another model")
		}
		return
	}
	inForce := map[string]string{KindPrompts: modelOf(emb.Prompts), KindTools: modelOf(emb.Tools)}
	for _, s := range stale {
		log.Warn().Str("kind", s.Kind).Str("model", s.Model).Int("rows", s.Rows).Str("in_force", inForce[s.Kind]).
			Msg("rows embedded by another model than the one in force: search finds them by their words only until `agentq reindex` re-embeds them")
	}
}

func modelOf(e embed.Embedder) string {
	if e == nil {
		return ""
	}
	return e.Model()
}
