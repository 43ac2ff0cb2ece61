package search

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RowsPerList is how many rows an IVFFlat list holds when its index is
// built: lists = rows / RowsPerList. With the default 10 probes a search
// then scans ~4,000 rows whatever the table's size (~3 ms for 1024-d
// halfvecs on native Postgres), and an insertion compares its vector with
// rows/400 centroids. Measured on 20,000 served prompts of the bench
// (lexical vectors, 200 queries, recall@20 against an exact scan): 50
// lists at 10 probes 0.40 at p50 3.0 ms, 150 lists at 20 probes 0.36 at
// 2.8 ms; HNSW at ef_search 64 0.33 at 2.9 ms.
const RowsPerList = 400

// maxLists bounds lists far below pgvector's 32,768: 4 million served rows.
const maxLists = 10000

// maxProbeRows bounds the rows an iterative scan reads (ivfflat.max_probes
// = maxProbeRows / RowsPerList lists, or the probes if more), like
// hnsw.max_scan_tuples' default for HNSW: a tenant with few rows in a
// large table gets its nearest rows among these, not a scan of the table.
const maxProbeRows = 20000

// ListsFor is the lists of an IVFFlat index built over rows rows.
func ListsFor(rows int) int {
	return min(max(1, rows/RowsPerList), maxLists)
}

// rebuild reports whether an index built with lists lists should be
// rebuilt for want: when the rows have grown by half (or shrunk by half)
// since, so its lists hold half as many rows again as intended (or half
// as many). Rebuilding at every 1.5× costs each row ~3 builds over the
// table's life.
func rebuild(lists, want int) bool {
	return 2*want >= 3*lists || 2*want <= lists
}

// bloated reports whether an IVFFlat index of size bytes, built over
// built.rows rows at built.bytes, now covering rows rows, holds half again
// as many pages as those rows need. Each new version of a prompt adds an
// entry and leaves its predecessor's behind; vacuum removes dead entries
// but pgvector appends new ones to each list's last page, so the pages a
// search reads grow with every version ever served, not with the rows
// served (at 100,000 prompts over 20,000 ids: 177 MB where a build over
// the 20,000 takes 59 MB, and the vector arm read 5,000 pages a query).
// Until vacuum, the dead entries nearest a query are read and skipped too.
// A rebuild of 20,000 rows takes ~2 s of a core, once per 10,000 new
// versions at the most. Indexes under a megabyte are left alone.
func bloated(size int64, built buildStats, rows int) bool {
	if built.bytes <= 0 || size < 1<<20 {
		return false
	}
	need := float64(built.bytes) * float64(max(rows, 1)) / float64(max(built.rows, 1))
	return 2*float64(size) > 3*need
}

// buildStats are an IVFFlat index's rows and bytes when it was built, kept
// as its comment (statsComment).
type buildStats struct {
	rows  int
	bytes int64
}

const statsFormat = "agentq: built over %d rows in %d bytes"

func parseStats(comment string) buildStats {
	var b buildStats
	if _, err := fmt.Sscanf(comment, statsFormat, &b.rows, &b.bytes); err != nil {
		return buildStats{}
	}
	return b
}

// vectorIndex is the index of one table's vectors of one model.
type vectorIndex struct {
	table, model string
	dim          int
	method       Method
	where        string // the partial index's predicate
}

func newVectorIndex(table, model string, dim int, m Method) (vectorIndex, error) {
	if dim < 1 || dim > maxDim {
		return vectorIndex{}, fmt.Errorf("search: %s has dimension %d; a vector index takes 1..%d", model, dim, maxDim)
	}
	lit, err := literal(model)
	if err != nil {
		return vectorIndex{}, err
	}
	// Prompts: only the served versions (prompts.current, migration 00009).
	// The dimension too: rows of the model at another one (the model
	// behind a provider's name changed, and a reindex is under way) are
	// outside the index, not cast to this dimension, which would fail.
	where := fmt.Sprintf("embedding_model = %s AND embedding_dim = %d", lit, dim)
	if table == "prompts" {
		where += " AND current"
	}
	return vectorIndex{table: table, model: model, dim: dim, method: m, where: where}, nil
}

func (v vectorIndex) name(lists int) string {
	if v.method == IVFFlat {
		return IVFFlatName(v.table, v.model, v.dim, lists)
	}
	return IndexName(v.table, v.model, v.dim)
}

// rebuiltSuffix marks the second name of an IVFFlat index of the same lists,
// so a rebuild for bloat can build beside the one it replaces.
const rebuiltSuffix = "r"

// record keeps name's rows and size as its comment, for bloated.
func (v vectorIndex) record(ctx context.Context, db querier, name string, rows int) error {
	var size int64
	if err := db.QueryRow(ctx, `SELECT pg_relation_size($1::regclass)`, name).Scan(&size); err != nil {
		return err
	}
	_, err := db.Exec(ctx, fmt.Sprintf(`COMMENT ON INDEX %s IS '%s'`, name, fmt.Sprintf(statsFormat, rows, size)))
	return err
}

// create is the index's CREATE INDEX. halfvec: inserting into an HNSW
// index costs ~1.5 ms per 1024-d row against ~4.3 ms with vector
// (measured on native PG 15, 2 cores), and half precision does not change
// cosine rankings at these dimensions.
func (v vectorIndex) create(name string, lists int, concurrently bool) string {
	using, with, how := "hnsw", "", ""
	if v.method == IVFFlat {
		using, with = "ivfflat", fmt.Sprintf(" WITH (lists = %d)", lists)
	}
	if concurrently {
		how = "CONCURRENTLY "
	}
	return fmt.Sprintf(`CREATE INDEX %sIF NOT EXISTS %s ON %s USING %s ((embedding::halfvec(%d)) halfvec_cosine_ops)%s WHERE %s`,
		how, name, v.table, using, v.dim, with, v.where)
}

// existingIndex is an index of v's table, model and dimension, of either
// method.
type existingIndex struct {
	name   string
	method Method
	lists  int  // IVFFlat's, read from its name
	valid  bool // false: a concurrent build that failed or is under way
	size   int64
	built  buildStats
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (v vectorIndex) existing(ctx context.Context, db querier) ([]existingIndex, error) {
	hnsw := IndexName(v.table, v.model, v.dim)
	ivf := ivfPrefix(v.table, v.model, v.dim)
	rows, err := db.Query(ctx, `
SELECT c.relname, i.indisvalid, pg_relation_size(c.oid), coalesce(obj_description(c.oid, 'pg_class'), '')
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::regclass AND (c.relname = $2 OR left(c.relname, length($3)) = $3)
ORDER BY c.relname`, v.table, hnsw, ivf)
	if err != nil {
		return nil, err
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (existingIndex, error) {
		var e existingIndex
		var comment string
		err := r.Scan(&e.name, &e.valid, &e.size, &comment)
		e.built = parseStats(comment)
		return e, err
	})
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, e := range all {
		if e.name == hnsw {
			e.method = HNSW
		} else if n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(e.name, ivf), rebuiltSuffix)); err == nil && n > 0 {
			e.method, e.lists = IVFFlat, n
		} else {
			continue // another model's whose name merely starts alike
		}
		out = append(out, e)
	}
	return out, nil
}

// rows counts the rows the index covers.
func (v vectorIndex) rows(ctx context.Context, db querier) (int, error) {
	var n int
	err := db.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, v.table, v.where)).Scan(&n)
	return n, err
}

// ensure creates the index in tx unless a valid one of its method exists,
// and drops the other method's index and invalid ones.
func (v vectorIndex) ensure(ctx context.Context, tx pgx.Tx) error {
	ex, err := v.existing(ctx, tx)
	if err != nil {
		return err
	}
	have := false
	for _, e := range ex {
		if e.method == v.method && e.valid {
			have = true
			continue
		}
		if _, err := tx.Exec(ctx, `DROP INDEX IF EXISTS `+e.name); err != nil {
			return err
		}
	}
	if have {
		return nil
	}
	if v.method != IVFFlat {
		_, err = tx.Exec(ctx, v.create(v.name(0), 0, false))
		return err
	}
	n, err := v.rows(ctx, tx)
	if err != nil {
		return err
	}
	name := v.name(ListsFor(n))
	if _, err := tx.Exec(ctx, v.create(name, ListsFor(n), false)); err != nil {
		return err
	}
	return v.record(ctx, tx, name, n)
}

// Maintenance is what MaintainIndexes did.
type Maintenance struct {
	Index      string        // the index in force afterwards
	Rows       int           // rows it covers
	Lists      int           // its lists
	Rebuilt    bool          // Index was built now, replacing one of Before lists
	Before     int           //
	Bloated    bool          // rebuilt because the one before held half again the pages its rows need
	Took       time.Duration // building it
	Dropped    []string      // indexes dropped (replaced, left invalid by a failed build)
	OtherCopy  bool          // another copy holds the lock: nothing was looked at
	NoIndexYet bool          // no valid index to maintain (EnsureIndexes creates it)
}

// MaintainIndexes rebuilds prompts' IVFFlat index when the rows it covers
// no longer fit its lists (see rebuild), or it holds half again the pages they
// need (see bloated): CREATE INDEX CONCURRENTLY with the lists for today's
// rows, then DROP INDEX CONCURRENTLY of the old one.
// Neither blocks writes or searches; while both exist the planner uses
// either. IVFFlat learns its centroids when it is built, so an index built
// over few rows (one list on an empty table: an exact scan) must be
// rebuilt as they grow. One copy at a time does it (the lock EnsureIndexes
// takes, held for the session); the others find it busy and move on.
// Indexes left invalid by a build that failed are dropped first. HNSW
// indexes need none of this.
func MaintainIndexes(ctx context.Context, pool *pgxpool.Pool, emb Embedders, o IndexOptions) (Maintenance, error) {
	if err := o.Validate(); err != nil || emb.Prompts == nil || o.prompts() != IVFFlat {
		return Maintenance{}, err
	}
	dim, err := Dimension(ctx, emb.Prompts)
	if err != nil {
		return Maintenance{}, err
	}
	v, err := newVectorIndex("prompts", emb.Prompts.Model(), dim, IVFFlat)
	if err != nil {
		return Maintenance{}, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return Maintenance{}, err
	}
	defer conn.Release()
	locked, unlock, err := lockIndexes(ctx, conn, false)
	if err != nil {
		return Maintenance{}, err
	}
	if !locked {
		return Maintenance{OtherCopy: true}, nil
	}
	defer unlock()
	m, err := v.maintain(ctx, conn)
	if err != nil {
		return m, fmt.Errorf("search: maintain the index of prompts for %s: %w", v.model, err)
	}
	return m, nil
}

func (v vectorIndex) maintain(ctx context.Context, conn *pgxpool.Conn) (Maintenance, error) {
	var m Maintenance
	drop := func(name string) error {
		if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+name); err != nil {
			return err
		}
		m.Dropped = append(m.Dropped, name)
		return nil
	}
	ex, err := v.existing(ctx, conn)
	if err != nil {
		return m, err
	}
	var current *existingIndex
	for i, e := range ex {
		if e.method != IVFFlat {
			continue
		}
		if !e.valid {
			if err := drop(e.name); err != nil {
				return m, err
			}
			continue
		}
		// A crash between build and drop leaves two: keep the one of more
		// lists, of the same lists the smaller; the rules below then
		// correct either choice.
		if current == nil || e.lists > current.lists || e.lists == current.lists && e.size < current.size {
			current = &ex[i]
		}
	}
	if current == nil {
		m.NoIndexYet = true
		return m, nil
	}
	n, err := v.rows(ctx, conn)
	if err != nil {
		return m, err
	}
	want, name := ListsFor(n), ""
	switch {
	case rebuild(current.lists, want):
		name = v.name(want)
	case bloated(current.size, current.built, n):
		want, name, m.Bloated = current.lists, v.name(current.lists), true
		if current.name == name {
			name += rebuiltSuffix
		}
	default:
		want, name = current.lists, current.name
	}
	if name != current.name {
		begin := time.Now()
		if _, err := conn.Exec(ctx, v.create(name, want, true)); err != nil {
			return m, err
		}
		if err := v.record(ctx, conn, name, n); err != nil {
			return m, err
		}
		m.Rebuilt, m.Before, m.Took = true, current.lists, time.Since(begin)
	}
	m.Index, m.Rows, m.Lists = name, n, want
	for _, e := range ex {
		if e.method == IVFFlat && e.valid && e.name != name {
			if err := drop(e.name); err != nil {
				return m, err
			}
		}
	}
	return m, nil
}

// DropOtherDimensions drops table's vector indexes of model at any other
// dimension than dim and returns their names. After the model behind a
// provider's name changed its dimension, such an index refuses every
// re-embedded row (its expression casts the vector to the old dimension),
// and no search could use it: agentq reindex drops them first and builds
// the new dimension's index at the end.
func DropOtherDimensions(ctx context.Context, pool *pgxpool.Pool, table, model string, dim int) ([]string, error) {
	// The lock EnsureIndexes and MaintainIndexes take: no copy rebuilds
	// an index while it is dropped. CONCURRENTLY: searches and writes go
	// on meanwhile.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	_, unlock, err := lockIndexes(ctx, conn, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rows, err := conn.Query(ctx, `
SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::regclass ORDER BY c.relname`, table)
	if err != nil {
		return nil, fmt.Errorf("search: list the indexes of %s: %w", table, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("search: list the indexes of %s: %w", table, err)
	}
	var dropped []string
	for _, n := range names {
		if d, ok := indexDimension(n, table, model); ok && d != dim {
			if _, err := conn.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+pgx.Identifier{n}.Sanitize()); err != nil {
				return dropped, fmt.Errorf("search: drop %s: %w", n, err)
			}
			dropped = append(dropped, n)
		}
	}
	return dropped, nil
}

// indexDimension returns the dimension in the name of a vector index of
// table for model (IndexName, IVFFlatName), and whether name is one.
func indexDimension(name, table, model string) (int, bool) {
	for _, method := range []string{"hnswh", "ivfh"} {
		// indexPrefix's parts around the dimension: the slug before it,
		// the model's hash after it.
		// The last "_0_": the slug may hold one too, the hash cannot.
		p := indexPrefix(table, method, model, 0)
		i := strings.LastIndex(p, "_0_")
		before, after := p[:i], p[i+3:]
		rest, ok := strings.CutPrefix(name, before+"_")
		if !ok {
			continue
		}
		digits, tail, ok := strings.Cut(rest, "_")
		d, err := strconv.Atoi(digits)
		if !ok || err != nil || d <= 0 || !strings.HasPrefix(tail, after) {
			continue
		}
		switch suffix := strings.TrimPrefix(tail, after); {
		case method == "hnswh" && suffix == "":
			return d, true
		case method == "ivfh" && strings.HasPrefix(suffix, "_l"):
			if n, err := strconv.Atoi(strings.TrimSuffix(suffix[2:], rebuiltSuffix)); err == nil && n > 0 {
				return d, true
			}
		}
	}
	return 0, false
}

// lockIndexes takes indexLock for conn's session, waiting for it when wait
// is set, else only if it is free (locked false: another copy holds it).
// unlock releases it; if that fails the connection is closed, which ends
// the session and its lock with it.
func lockIndexes(ctx context.Context, conn *pgxpool.Conn, wait bool) (locked bool, unlock func(), err error) {
	if wait {
		_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, indexLock)
		locked = err == nil
	} else {
		err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, indexLock).Scan(&locked)
	}
	if err != nil || !locked {
		return false, func() {}, err
	}
	return true, func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, indexLock); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}, nil
}
