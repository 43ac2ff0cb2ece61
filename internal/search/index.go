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

// Method is a vector index method of pgvector.
type Method string

const (
	// IVFFlat partitions the served rows into lists around centroids
	// learnt from them when the index is built, and scans the lists
	// nearest the query. Inserting a row costs one comparison per list.
	IVFFlat Method = "ivfflat"
	// HNSW links rows into a graph that a search walks. Inserting a row
	// walks it too and re-links its neighbours.
	HNSW Method = "hnsw"
)

// IndexOptions choose the vector index of each table.
type IndexOptions struct {
	// Prompts is the method of prompts' index; "" is IVFFlat. Every
	// prompt version is an insertion, and on native Postgres 15 with 2
	// cores an HNSW insertion of a 1024-dimensional lexical vector into
	// an index of 90,000 cost ~7 ms (144 rows/s) against ~0.1 ms for
	// IVFFlat (7,500-11,000 rows/s), while on 20,000 served prompts IVFFlat
	// found more of the true 20 nearest at the same latency (recall 0.40
	// against 0.33 at ~3 ms; README, "Search"). Tools keep HNSW: they are
	// registered rarely, and their short texts' vectors give HNSW a graph
	// it navigates well (recall@30 0.91).
	Prompts Method
}

func (o IndexOptions) prompts() Method {
	if o.Prompts == "" {
		return IVFFlat
	}
	return o.Prompts
}

// method is the method of table's index.
func (o IndexOptions) method(table string) Method {
	if table == "prompts" {
		return o.prompts()
	}
	return HNSW
}

// Validate reports a method pgvector does not have.
func (o IndexOptions) Validate() error {
	if m := o.prompts(); m != IVFFlat && m != HNSW {
		return fmt.Errorf("search: prompt index %q: want ivfflat or hnsw", o.Prompts)
	}
	return nil
}

// EnsureIndexes creates, unless it exists, one vector index per table and
// model in force: on (embedding::halfvec(D)) with halfvec_cosine_ops, for
// the rows WHERE embedding_model = '<model>' (pgvector's README, vectors
// of mixed dimensions), and for prompts only the served versions. Searches
// cast the same way and name the model as a literal, so the planner can
// use the partial index. Prompts' index is built with the method o names
// and the index of the other method for the same model is dropped, so a
// change of method takes effect at the next start; an IVFFlat index is
// built with lists for the rows it covers (MaintainIndexes rebuilds it as
// they grow). An embedder whose dimension is not known yet (a provider not
// asked) is asked once with a probe text. It is plain CREATE INDEX, which
// blocks writes to the table while it builds: run it at start, before
// consuming.
func EnsureIndexes(ctx context.Context, pool *pgxpool.Pool, emb Embedders, o IndexOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	for _, k := range []struct {
		table  string
		e      embed.Embedder
		method Method
	}{{"prompts", emb.Prompts, o.prompts()}, {"tools", emb.Tools, HNSW}} {
		if k.e == nil {
			continue
		}
		dim, err := Dimension(ctx, k.e)
		if err != nil {
			return err
		}
		v, err := newVectorIndex(k.table, k.e.Model(), dim, k.method)
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
			return v.ensure(ctx, tx)
		})
		if err != nil {
			return fmt.Errorf("search: index %s for %s: %w", k.table, k.e.Model(), err)
		}
	}
	return nil
}

// indexLock is the advisory lock EnsureIndexes takes ("agqindex").
const indexLock int64 = 0x616771696e646578

// Dimension returns e's dimension, asking it with a probe when unknown.
func Dimension(ctx context.Context, e embed.Embedder) (int, error) {
	if d := e.Dimension(); d > 0 {
		return d, nil
	}
	v, err := e.Embed(ctx, []string{"dimension probe"})
	if err != nil {
		return 0, fmt.Errorf("search: learn the dimension of %s: %w", e.Model(), err)
	}
	return len(v[0]), nil
}

// maxDim is pgvector's limit for an index on halfvec.
const maxDim = 4000

// IndexName is the name of the HNSW index of table for model and dim:
// readable, unique per model (a hash of the exact name) and within
// Postgres's 63 bytes.
func IndexName(table, model string, dim int) string {
	return indexPrefix(table, "hnswh", model, dim)
}

// IVFFlatName is the name of the IVFFlat index of table for model and dim
// built with lists lists (the rebuild with other lists has another name).
func IVFFlatName(table, model string, dim, lists int) string {
	return fmt.Sprintf("%s%d", ivfPrefix(table, model, dim), lists)
}

// ivfPrefix starts the names of table's IVFFlat indexes for model and dim,
// whatever their lists.
func ivfPrefix(table, model string, dim int) string {
	return indexPrefix(table, "ivfh", model, dim) + "_l"
}

func indexPrefix(table, method, model string, dim int) string {
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
	return fmt.Sprintf("%s_%s_%s_%d_%s", table, method, slug, dim, hex.EncodeToString(h[:4]))
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
