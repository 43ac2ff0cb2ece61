package search

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentq/agentq/internal/embed"
)

// EnsureIndexes creates, unless it exists, one HNSW index per table and
// model in force: on (embedding::vector(D)) with vector_cosine_ops, for the
// rows WHERE embedding_model = '<model>' (pgvector's README, vectors of
// mixed dimensions). Searches cast the same way and name the model as a
// literal, so the planner can use the partial index. An embedder whose
// dimension is not known yet (a provider not asked) is asked once with a
// probe text. It is plain CREATE INDEX, which blocks writes to the table
// while it builds: run it at start, before consuming.
func EnsureIndexes(ctx context.Context, pool *pgxpool.Pool, emb Embedders) error {
	for _, k := range []struct {
		table string
		e     embed.Embedder
	}{{"prompts", emb.Prompts}, {"tools", emb.Tools}} {
		if k.e == nil {
			continue
		}
		dim, err := dimension(ctx, k.e)
		if err != nil {
			return err
		}
		sql, err := indexSQL(k.table, k.e.Model(), dim)
		if err != nil {
			return err
		}
		// Copies starting together on a fresh database would build the
		// same index at once, and CREATE INDEX IF NOT EXISTS is not safe
		// against a concurrent create (one fails on pg_class's unique
		// index). The lock makes the others wait and then find it.
		err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, indexLock); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sql)
			return err
		})
		if err != nil {
			return fmt.Errorf("search: index %s for %s: %w", k.table, k.e.Model(), err)
		}
	}
	return nil
}

// indexLock is the advisory lock EnsureIndexes takes ("agqindex").
const indexLock int64 = 0x616771696e646578

// dimension returns e's dimension, asking it with a probe when unknown.
func dimension(ctx context.Context, e embed.Embedder) (int, error) {
	if d := e.Dimension(); d > 0 {
		return d, nil
	}
	v, err := e.Embed(ctx, []string{"dimension probe"})
	if err != nil {
		return 0, fmt.Errorf("search: learn the dimension of %s: %w", e.Model(), err)
	}
	return len(v[0]), nil
}

// maxDim is pgvector's limit for an HNSW index on halfvec.
const maxDim = 4000

// IndexName is the name of the HNSW index of table for model and dim:
// readable, unique per model (a hash of the exact name) and within
// Postgres's 63 bytes.
func IndexName(table, model string, dim int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(model) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	slug := b.String()
	if len(slug) > 24 {
		slug = slug[:24]
	}
	h := sha256.Sum256([]byte(model))
	return fmt.Sprintf("%s_hnswh_%s_%d_%s", table, slug, dim, hex.EncodeToString(h[:4]))
}

func indexSQL(table, model string, dim int) (string, error) {
	if dim < 1 || dim > maxDim {
		return "", fmt.Errorf("search: %s has dimension %d; an HNSW index takes 1..%d", model, dim, maxDim)
	}
	lit, err := literal(model)
	if err != nil {
		return "", err
	}
	// halfvec: inserting into the index costs ~1.5 ms per 1024-d row
	// against ~4.3 ms with vector (measured on native PG 15, 2 cores), and
	// half precision does not change cosine rankings at these dimensions.
	// Prompts: only the served versions (prompts.current, migration 00009).
	where := "embedding_model = " + lit
	if table == "prompts" {
		where += " AND current"
	}
	return fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING hnsw ((embedding::halfvec(%d)) halfvec_cosine_ops) WHERE %s`,
		IndexName(table, model, dim), table, dim, where), nil
}

// literal quotes s as an SQL string literal (standard_conforming_strings,
// on since Postgres 9.1). Model names come from configuration, not from
// requests; they are inlined so the planner sees the partial index's
// predicate under any plan cache mode.
func literal(s string) (string, error) {
	if s == "" || strings.ContainsRune(s, 0) {
		return "", fmt.Errorf("search: model name %q cannot be used", s)
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'", nil
}

// pgvectorInfo learns once whether the database's pgvector has
// hnsw.iterative_scan (0.8 and later).
type pgvectorInfo struct {
	mu        sync.Mutex
	known     bool
	iterative bool
	version   string
}

func (p *pgvectorInfo) iterativeScan(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.known {
		return p.iterative, nil
	}
	var v string
	if err := pool.QueryRow(ctx, `SELECT extversion FROM pg_extension WHERE extname = 'vector'`).Scan(&v); err != nil {
		return false, fmt.Errorf("search: pgvector version: %w", err)
	}
	it, err := atLeast(v, 0, 8)
	if err != nil {
		return false, err
	}
	p.known, p.iterative, p.version = true, it, v
	return it, nil
}

// atLeast reports whether version "X.Y[.Z]" is at least major.minor.
func atLeast(version string, major, minor int) (bool, error) {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false, errors.New("search: cannot read pgvector version " + strconv.Quote(version))
	}
	x, err1 := strconv.Atoi(parts[0])
	y, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false, errors.New("search: cannot read pgvector version " + strconv.Quote(version))
	}
	return x > major || x == major && y >= minor, nil
}
