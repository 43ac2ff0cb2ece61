package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// --- the anchor: bare INSERT of the same rows ---

const (
	anchorPrompts = "agentq_bench_prompts"
	anchorTools   = "agentq_bench_tools"
	anchorHistory = "agentq_bench_tool_history"
)

// anchors reads back the rows the indexer stored and inserts them into
// copies of the tables, with the indexes of the originals, timing only the
// inserts.
func (b *indexerBench) anchors(ctx context.Context) error {
	drop := func() error {
		_, err := b.d.Pool.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS `+anchorPrompts+`, `+anchorTools+`, `+anchorHistory)
		return err
	}
	defer drop()
	ix := &b.res.Indexing
	for _, vectors := range []bool{false, true} {
		if err := drop(); err != nil {
			return err
		}
		for _, t := range [][2]string{{anchorPrompts, "prompts"}, {anchorTools, "tools"}, {anchorHistory, "tool_history"}} {
			if _, err := b.d.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING ALL)`, t[0], t[1])); err != nil {
				return err
			}
		}
		p, err := b.anchorPrompts(ctx, vectors)
		if err != nil {
			return err
		}
		t, err := b.anchorTools(ctx, vectors)
		if err != nil {
			return err
		}
		if vectors {
			ix.PromptsInsertVectors, ix.ToolsInsertVectors = p, t
		} else {
			ix.PromptsInsert, ix.ToolsInsert = p, t
		}
	}
	b.say("bare INSERT: prompts %.0f/s, with vectors %.0f/s; tools %.0f/s, with vectors %.0f/s",
		ix.PromptsInsert, ix.PromptsInsertVectors, ix.ToolsInsert, ix.ToolsInsertVectors)
	return nil
}

const promptInsertSQL = `INSERT INTO ` + anchorPrompts + ` (tenant_id, id, version, hash, type, name, description, content, parameters,
  tags, author, metadata, created_at, event_id, stream_seq, embedding, embedding_model, embedding_dim, current)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11, $12::jsonb, $13, $14, $15, $16, $17, $18, true)`

// (current: every new version is served when it is inserted, so each row
// enters the partial HNSW index once, as with the indexer.)

// anchorPrompts inserts the tenant's prompts again and returns rows per
// second of insert time.
func (b *indexerBench) anchorPrompts(ctx context.Context, vectors bool) (float64, error) {
	read, err := b.d.Pool.Query(ctx, `SELECT tenant_id, id, version, hash, type, name, description, content, parameters::text,
  tags, author, metadata::text, created_at, event_id, stream_seq, embedding, embedding_model, embedding_dim
FROM prompts a WHERE tenant_id = $1 AND stream_seq <= coalesce(
  (SELECT stream_seq FROM prompts WHERE tenant_id = $1 ORDER BY stream_seq OFFSET $2::bigint - 1 LIMIT 1), 'Infinity'::float8)`, b.tenant, b.anchorLimit())
	if err != nil {
		return 0, err
	}
	defer read.Close()
	var rows [][]any
	var n int
	var spent time.Duration
	for read.Next() {
		vals, err := read.Values()
		if err != nil {
			return 0, err
		}
		row := []any{vals[0], vals[1], vals[2], vals[3], vals[4], vals[5], vals[6], vals[7], vals[8], vals[9], vals[10], vals[11],
			vals[12], vals[13], vals[14], vals[15], vals[16], vals[17]}
		row[9] = strs(row[9]) // text[]: typed, for the exec protocol
		if !vectors {
			row[15], row[16], row[17] = nil, "", 0
		}
		if rows = append(rows, row); len(rows) == b.res.BatchSize {
			dt, err := b.insertBatch(ctx, func(bt *pgx.Batch) {
				for _, r := range rows {
					bt.Queue(promptInsertSQL, r...)
				}
			})
			if err != nil {
				return 0, err
			}
			spent, n, rows = spent+dt, n+len(rows), rows[:0]
		}
	}
	if err := read.Err(); err != nil {
		return 0, err
	}
	if len(rows) > 0 {
		dt, err := b.insertBatch(ctx, func(bt *pgx.Batch) {
			for _, r := range rows {
				bt.Queue(promptInsertSQL, r...)
			}
		})
		if err != nil {
			return 0, err
		}
		spent, n = spent+dt, n+len(rows)
	}
	if n == 0 || spent == 0 {
		return 0, errors.New("no prompts to insert")
	}
	b.res.Indexing.AnchorPrompts = n
	return float64(n) / spent.Seconds(), nil
}

// anchorTools inserts the tenant's tools again, each into the registry's
// two tables as registry.Put does, and returns tools per second.
func (b *indexerBench) anchorTools(ctx context.Context, vectors bool) (float64, error) {
	read, err := b.d.Pool.Query(ctx, `SELECT tenant_id, name, version, hash, description, input_schema::text, server, tags,
  registered_at, event_id, stream_seq, embedding, embedding_model, embedding_dim
FROM tools a WHERE tenant_id = $1 AND stream_seq <= coalesce(
  (SELECT stream_seq FROM tools WHERE tenant_id = $1 ORDER BY stream_seq OFFSET $2::bigint - 1 LIMIT 1), 'Infinity'::float8)`, b.tenant, b.anchorLimit())
	if err != nil {
		return 0, err
	}
	defer read.Close()
	const (
		hist = `INSERT INTO ` + anchorHistory + ` (tenant_id, name, version, hash, description, input_schema, server, tags, registered_at, event_id, stream_seq)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11)`
		cur = `INSERT INTO ` + anchorTools + ` (tenant_id, name, version, hash, description, input_schema, server, tags, registered_at, event_id, stream_seq,
  embedding, embedding_model, embedding_dim) VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14)`
	)
	var rows [][]any
	var n int
	var spent time.Duration
	flush := func() error {
		dt, err := b.insertBatch(ctx, func(bt *pgx.Batch) {
			for _, r := range rows {
				bt.Queue(hist, r[:11]...)
				bt.Queue(cur, r...)
			}
		})
		spent, n, rows = spent+dt, n+len(rows), rows[:0]
		return err
	}
	for read.Next() {
		vals, err := read.Values()
		if err != nil {
			return 0, err
		}
		row := slices.Clone(vals)
		row[7] = strs(row[7])
		if !vectors {
			row[11], row[12], row[13] = nil, "", 0
		}
		if rows = append(rows, row); len(rows) == b.res.BatchSize {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := read.Err(); err != nil {
		return 0, err
	}
	if len(rows) > 0 {
		if err := flush(); err != nil {
			return 0, err
		}
	}
	if n == 0 || spent == 0 {
		return 0, errors.New("no tools to insert")
	}
	b.res.Indexing.AnchorTools = n
	return float64(n) / spent.Seconds(), nil
}

// strs turns a text[] read by Values into []string.
func strs(v any) []string {
	xs, _ := v.([]any)
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func (b *indexerBench) anchorLimit() int64 {
	if b.o.AnchorRows > 0 {
		return int64(b.o.AnchorRows)
	}
	return 1 << 40
}

// insertBatch sends BEGIN, the queued inserts and COMMIT as one pipelined
// round trip on a connection of its own, and returns how long it took.
func (b *indexerBench) insertBatch(ctx context.Context, queue func(*pgx.Batch)) (time.Duration, error) {
	conn, err := b.d.Pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	bt := &pgx.Batch{}
	bt.Queue(`BEGIN`)
	queue(bt)
	bt.Queue(`COMMIT`)
	start := time.Now()
	err = conn.SendBatch(ctx, bt).Close()
	return time.Since(start), err
}
