package search

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/embed"
)

// rrfK is the reciprocal-rank constant (Cormack et al., 2009).
const rrfK = 60

// tuning holds the retrieval choices that were measured with
// TestSweepFusion and agentq eval retrieval.
type tuning struct {
	// lexForm: "and" (websearch_to_tsquery: every word), "or" (any word of
	// the query), "tiered" (the matches of both, those with every word
	// ranked first).
	lexForm string
	// rankFn is ts_rank_cd or ts_rank; rankNorm its normalisation flags.
	rankFn   string
	rankNorm int
	// vecWeight and lexWeight weigh the arms in the fusion.
	vecWeight, lexWeight float64
	// minMatch is the share of the query's lexemes a full-text match
	// must hold (Elasticsearch's minimum_should_match); orderByCov ranks
	// the matches by that share first; scaleByCov scales a match's
	// share of the fusion by it.
	minMatch               float64
	orderByCov, scaleByCov bool
	// covPower raises the coverage when scaling (0 means 1).
	covPower float64
}

// defaultTuning was chosen on internal/embed/testdata with the lexical and
// sentence embedders (TestSweepFusion): OR matching finds what AND misses
// (paraphrases); ordering matches by the share of the query's words they
// hold, and scaling their share of the fusion by its cube, keeps one-word
// matches from pushing better vector candidates down (tools with the
// sentence encoder: recall@5 0.775 → 0.875, MRR 0.533 → 0.625, now at or
// above the vector arm on every measure; prompts stay at 1.0); ts_rank_cd
// against ts_rank, length normalisation and arm weights 1.5 made no
// difference beyond noise. A square instead of the cube was as good on
// prompts-intent (nDCG 0.845 against 0.836) and worse on tools (MRR 0.585).
var defaultTuning = tuning{lexForm: "tiered", rankFn: "ts_rank_cd", vecWeight: 1, lexWeight: 1,
	orderByCov: true, scaleByCov: true, covPower: 3}

// kind describes one searchable table.
type kind struct {
	table string   // prompts or tools
	keys  []string // its primary key columns
}

var (
	promptKind = kind{"prompts", []string{"tenant_id", "id", "version"}}
	toolKind   = kind{"tools", []string{"tenant_id", "name"}}
)

func (k kind) cols(alias string) string {
	out := make([]string, len(k.keys))
	for i, c := range k.keys {
		out[i] = alias + "." + c
	}
	return strings.Join(out, ", ")
}

// retrievalSQL builds the candidate CTEs of one search, ending in fused
// (keys, dist, lrank, rrf), best first, at most {k} rows. filter is the
// arms' WHERE condition over alias a. model and dim name the vectors (mode
// Hybrid or Vector).
func (t tuning) retrievalSQL(k kind, mode Mode, filter, model string, dim int) (string, error) {
	var ctes []string
	keysA, keysC := k.cols("a"), k.cols("c")
	keys := strings.Join(k.keys, ", ")
	if mode != Lexical {
		lit, err := literal(model)
		if err != nil {
			return "", err
		}
		dist := fmt.Sprintf("a.embedding::vector(%d) <=> {vec}::vector(%d)", dim, dim)
		ctes = append(ctes, fmt.Sprintf(`vec AS (
  SELECT c.*, row_number() OVER (ORDER BY c.dist, %[1]s) AS r FROM (
    SELECT %[2]s, %[3]s AS dist FROM %[4]s a
    WHERE a.embedding_model = %[5]s AND %[6]s
    ORDER BY %[3]s LIMIT {k}) c)`, keysC, keysA, dist, k.table, lit, filter))
	}
	if mode != Vector {
		rank := fmt.Sprintf("%s(a.search_text, lexq.orq, %d)", t.rankFn, t.rankNorm)
		var match string
		switch t.lexForm {
		case "and":
			match = fmt.Sprintf(`SELECT %s FROM %s a, lexq WHERE a.search_text @@ lexq.andq AND %s LIMIT {lexn}`, keysA, k.table, filter)
			rank = fmt.Sprintf("%s(a.search_text, lexq.andq, %d)", t.rankFn, t.rankNorm)
		case "or":
			match = fmt.Sprintf(`SELECT %s FROM %s a, lexq WHERE a.search_text @@ lexq.orq AND %s LIMIT {lexn}`, keysA, k.table, filter)
		default: // tiered
			match = fmt.Sprintf(`(SELECT %[1]s FROM %[2]s a, lexq WHERE a.search_text @@ lexq.andq AND %[3]s LIMIT {lexn})
  UNION
  (SELECT %[1]s FROM %[2]s a, lexq WHERE a.search_text @@ lexq.orq AND %[3]s LIMIT {lexn})`, keysA, k.table, filter)
			rank += " + (a.search_text @@ lexq.andq)::int"
		}
		// The OR form joins the query's lexemes with |: plainto_tsquery
		// writes them quoted and joined by " & ". lx lists the lexemes,
		// so each match's coverage (share of them it holds) can gate and
		// order the matches.
		// length counts a tsvector's lexemes; ts_delete drops the query's.
		cov := `(length(a.search_text) - length(ts_delete(a.search_text, lexq.lx)))::float8 / greatest(cardinality(lexq.lx), 1)`
		// The gate keeps weak matches from crowding out the vector arm's
		// candidates; alone, full text takes every match.
		gate := ""
		if mode == Hybrid && t.minMatch > 0 {
			gate = fmt.Sprintf("WHERE c.cov >= %g", t.minMatch)
		}
		order := "c.lrank DESC"
		if t.orderByCov {
			order = "c.cov DESC, c.lrank DESC"
		}
		ctes = append(ctes, `lexq AS (SELECT websearch_to_tsquery('english', {query}) AS andq,
  replace(plainto_tsquery('english', {query})::text, ' & ', ' | ')::tsquery AS orq,
  tsvector_to_array(to_tsvector('english', {query})) AS lx)`,
			fmt.Sprintf(`lexm AS (%s)`, match),
			fmt.Sprintf(`lex AS (
  SELECT * FROM (
    SELECT c.*, row_number() OVER (ORDER BY %[6]s, %[1]s) AS r FROM (
      SELECT %[2]s, %[3]s AS lrank, %[7]s AS cov
      FROM lexm m JOIN %[4]s a USING (%[5]s) CROSS JOIN lexq) c
    %[8]s) d
  WHERE d.r <= {k})`, keysC, keysA, rank, k.table, keys, order, cov, gate))
	}
	var fused string
	switch mode {
	case Lexical:
		fused = fmt.Sprintf(`SELECT %s, NULL::float8 AS dist, l.lrank::float8 AS lrank, %g::float8 * %s / (%d + l.r) AS rrf FROM lex l`,
			k.cols("l"), t.lexWeight, t.covFactor(), rrfK)
	case Vector:
		fused = fmt.Sprintf(`SELECT %s, v.dist::float8 AS dist, NULL::float8 AS lrank, %g::float8 / (%d + v.r) AS rrf FROM vec v`,
			k.cols("v"), t.vecWeight, rrfK)
	default:
		fused = fmt.Sprintf(`SELECT %[1]s, v.dist::float8 AS dist, l.lrank::float8 AS lrank,
    coalesce(%[2]g::float8 / (%[4]d + v.r), 0) + coalesce(%[3]g::float8 * %[5]s / (%[4]d + l.r), 0) AS rrf
  FROM vec v FULL JOIN lex l USING (%[1]s)`, keys, t.vecWeight, t.lexWeight, rrfK, t.covFactor())
	}
	ctes = append(ctes, fmt.Sprintf("fused AS (%s\n  ORDER BY rrf DESC, %s LIMIT {k})", fused, keys))
	return "WITH " + strings.Join(ctes, ",\n"), nil
}

func (t tuning) covFactor() string {
	if t.scaleByCov {
		if t.covPower > 1 {
			return fmt.Sprintf("power(l.cov, %g)", t.covPower)
		}
		return "l.cov"
	}
	return "1"
}

// maxRRF is the fused score of a candidate ranked first by every arm of
// mode: similarity is rrf / maxRRF, in 0..1.
func (t tuning) maxRRF(mode Mode) float64 {
	switch mode {
	case Lexical:
		return t.lexWeight / (rrfK + 1)
	case Vector:
		return t.vecWeight / (rrfK + 1)
	}
	return (t.vecWeight + t.lexWeight) / (rrfK + 1)
}

var placeholder = regexp.MustCompile(`\{[a-z]+\}`)

// bind turns {name} placeholders into $n, each name once, and returns the
// SQL and its arguments. A placeholder without a value is a bug.
func bind(sql string, named map[string]any) (string, []any) {
	pos := map[string]int{}
	var args []any
	out := placeholder.ReplaceAllStringFunc(sql, func(m string) string {
		name := m[1 : len(m)-1]
		n, ok := pos[name]
		if !ok {
			v, has := named[name]
			if !has {
				panic("search: no value for " + m)
			}
			args = append(args, v)
			n = len(args)
			pos[name] = n
		}
		return "$" + strconv.Itoa(n)
	})
	return out, args
}

// plan is how one search retrieves: the mode, and the query vector when
// the vector arm runs.
type plan struct {
	mode     Mode
	degraded bool
	reason   string
	model    string
	vec      []float32
}

func (p plan) retrieval() Retrieval {
	return Retrieval{Mode: p.mode, Degraded: p.degraded, Reason: p.reason}
}

// plan embeds the query with e, unless the search is lexical; an embedding
// that fails or takes longer than EmbedTimeout turns the search lexical,
// flagged degraded.
func (s *Searcher) plan(ctx context.Context, e embed.Embedder, query string) plan {
	want := s.force
	if want == "" {
		want = Hybrid
	}
	if want == Lexical {
		return plan{mode: Lexical}
	}
	if e == nil {
		if s.force != "" {
			return plan{mode: Lexical, degraded: true, reason: "no embedder is configured for this kind"}
		}
		return plan{mode: Lexical}
	}
	model := e.Model()
	key := cacheKey(model, query)
	if v, ok := s.cache.get(key); ok {
		return plan{mode: want, model: model, vec: v}
	}
	ectx, cancel := context.WithTimeout(ctx, s.opts.EmbedTimeout)
	defer cancel()
	vecs, err := e.Embed(ectx, []string{query})
	if err == nil && (len(vecs) != 1 || len(vecs[0]) == 0) {
		err = fmt.Errorf("%d vectors for 1 text", len(vecs))
	}
	if err != nil {
		reason := "embedding provider unavailable"
		switch {
		case errors.Is(err, embed.ErrEmptyText):
			reason = "the query has no words to embed"
		case errors.Is(ectx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
			reason = fmt.Sprintf("embedding provider did not answer within %s", s.opts.EmbedTimeout)
		}
		s.log.Warn().Err(err).Str("model", model).Msg("query not embedded; searching by full text alone")
		return plan{mode: Lexical, degraded: true, reason: reason + " (" + model + "); results are from full-text search alone"}
	}
	s.cache.put(key, vecs[0])
	return plan{mode: want, model: model, vec: vecs[0]}
}

// query runs a search statement: in a read-only transaction with the HNSW
// settings when the vector arm runs, else alone. scan reads each row.
func (s *Searcher) query(ctx context.Context, p plan, k int, sql string, args []any, scan func(pgx.Rows) error) error {
	run := func(q interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	}) error {
		// Exec mode: an unnamed statement planned with this request's
		// values. A prepared statement turns to a generic plan after five
		// runs, which cannot see the query vector and sorts the whole
		// table by distance instead of walking the HNSW graph (measured:
		// 3 ms → 65 ms on 10,000 prompts).
		rows, err := q.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	if p.mode == Lexical {
		return database.Classify(run(s.pool))
	}
	iterative, err := s.pgv.iterativeScan(ctx, s.pool)
	if err != nil {
		return database.Classify(err)
	}
	ef := strconv.Itoa(max(s.opts.EFSearch, k))
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		set := `SELECT set_config('hnsw.ef_search', $1, true)`
		if iterative {
			// Filtered kNN: keep scanning the graph until K rows pass
			// the filters (pgvector 0.8+).
			set += `, set_config('hnsw.iterative_scan', 'relaxed_order', true)`
		}
		if _, err := tx.Exec(ctx, set, ef); err != nil {
			return err
		}
		return run(tx)
	})
	return database.Classify(err)
}

// vector returns p's query vector as a statement argument.
func (p plan) vector() pgvector.Vector { return pgvector.NewVector(p.vec) }

// recency is 0.5^(age/halfLife), 1 for a time in the future.
func recency(at, now time.Time, halfLife time.Duration) float64 {
	age := now.Sub(at)
	if age <= 0 || halfLife <= 0 {
		return 1
	}
	return pow2(-float64(age) / float64(halfLife))
}
