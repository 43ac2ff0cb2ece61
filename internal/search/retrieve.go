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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgvector/pgvector-go"

	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/embed"
)

// tuning holds the retrieval choices, measured with TestSweepFusion and
// agentq eval retrieval on internal/embed/testdata.
type tuning struct {
	// rrfK is the reciprocal-rank constant (60 in Cormack et al., 2009).
	rrfK float64
	// vecWeight and lexWeight weigh the arms in the fusion.
	vecWeight, lexWeight float64
	// k1 and b are BM25's term-frequency saturation and length
	// normalisation.
	k1, b float64
	// nameWeight and descWeight count an occurrence in the name (tsvector
	// weight A) or the description and tags (B) as this many occurrences
	// in the content (BM25F's field boosts); 0 means 1.
	nameWeight, descWeight float64
	// covPower scales a full-text match's share of the fusion by its
	// coverage (the share of the query's IDF it holds) to this power; 0
	// leaves it unscaled. It keeps one-word matches of long queries from
	// pushing better vector candidates down.
	covPower float64
	// unnestTerms reads term frequencies by unnesting whole tsvectors even
	// when every field weighs 1 (a test compares it with the fast path).
	unnestTerms bool
	// cosShare is the cosine's share of a hybrid candidate's similarity,
	// the full-text coverage's the rest (see similarity).
	cosShare float64
}

// Tunings per kind, chosen on the evaluation sets of internal/embed/testdata
// (see TestSweepFusion).
var (
	promptTuning = tuning{rrfK: 60, vecWeight: 1, lexWeight: 1, k1: 1.2, b: 0.75, nameWeight: 1, descWeight: 1, cosShare: 0.5}
	toolTuning   = tuning{rrfK: 60, vecWeight: 1, lexWeight: 1, k1: 1.2, b: 0.75, nameWeight: 1, descWeight: 1, covPower: 1, cosShare: 0.5}
)

// kind describes one searchable table.
type kind struct {
	table string   // prompts or tools
	stats string   // its kind in search_corpus and search_lexemes
	keys  []string // its primary key columns
}

var (
	promptKind = kind{"prompts", "prompt", []string{"tenant_id", "id", "version"}}
	toolKind   = kind{"tools", "tool", []string{"tenant_id", "name"}}
)

// order is its keys as fused orders ties: text by bytes (COLLATE "C", as
// Go compares strings, so arms.go cuts where one statement cuts), whatever
// the database's collation.
func (k kind) order() string {
	out := make([]string, len(k.keys))
	for i, c := range k.keys {
		out[i] = c
		if c != "version" {
			out[i] += ` COLLATE "C"`
		}
	}
	return strings.Join(out, ", ")
}

func (k kind) cols(alias string) string {
	out := make([]string, len(k.keys))
	for i, c := range k.keys {
		out[i] = alias + "." + c
	}
	return strings.Join(out, ", ")
}

// retrievalSQL builds the candidate CTEs of one search, ending in fused
// (keys, dist, lrank, rrf), best first, at most {k} rows; the caller adds
// the SELECT over fused. filter is the arms' WHERE condition over alias
// a. model and dim name the vectors (mode Hybrid or Vector).
// Placeholders: {k}, {vec}, {query}, {tenant}, {lexn}.
func (t tuning) retrievalSQL(k kind, mode Mode, filter, model string, dim int) (string, error) {
	var ctes []string
	if mode.vectorArm() {
		v, err := vecCTE(k, filter, model, dim)
		if err != nil {
			return "", err
		}
		ctes = append(ctes, v)
	}
	if mode.lexicalArm() {
		ctes = append(ctes, t.lexCTEs(k, filter)...)
	}
	ctes = append(ctes, t.fusedCTE(k, mode))
	return "WITH " + strings.Join(ctes, ",\n"), nil
}

// vecCTE is the vector arm: vec (keys, dist, r), the {k} nearest rows of
// model and dim passing filter, r their rank. Rows of the model at another
// dimension (a reindex after the model behind a provider's name changed)
// are left out rather than cast, which would fail the search.
func vecCTE(k kind, filter, model string, dim int) (string, error) {
	lit, err := literal(model)
	if err != nil {
		return "", err
	}
	// halfvec: the index stores half-precision vectors (see indexSQL).
	dist := fmt.Sprintf("a.embedding::halfvec(%d) <=> {vec}::halfvec(%d)", dim, dim)
	return fmt.Sprintf(`vec AS (
  SELECT c.*, row_number() OVER (ORDER BY c.dist, %[1]s) AS r FROM (
    SELECT %[2]s, %[3]s AS dist FROM %[4]s a
    WHERE a.embedding_model = %[5]s AND a.embedding_dim = %[7]d AND %[6]s
    ORDER BY %[3]s LIMIT {k}) c)`, k.cols("c"), k.cols("a"), dist, k.table, lit, filter, dim), nil
}

// A lexeme in most rows makes GIN build a bitmap of every one of them
// before the candidates' LIMIT applies (13,407 rows and ~4 ms for a word
// in most of 20,000 prompts). When even the query's rarest lexeme is in
// more than commonShare of the rows, the candidates are read by a scan
// instead, which stops at the bound: ~4 rows read per candidate, at most
// commonScan (rows clustered away from the scan's order). The generic
// plan cannot choose by the query's statistics, so both forms are in the
// statement, each behind a one-time filter on lexp. The scan reads the
// tenant's rows, then _global's, each up to the bound: one scan of both
// read _global's first (they sort first in the index), so a shared
// library of a few thousand prompts left a tenant's common-word query
// none of its own candidates.
const (
	commonShare = 0.25
	commonScan  = 20
)

// lexCTEs are the full-text arm, ending in lex (keys, lrank, cov, r), the
// {k} best BM25 matches passing filter, r their rank.
//
// BM25 (Lucene's IDF, k1, b) over a bounded candidate set. IDF comes from
// search_lexemes and search_corpus (migrations/00008, kept by triggers)
// and the changes not folded into them yet (search_stats_log, 00011) for
// the tenant and _global. Candidates are the rows holding the query's
// rarer lexemes, taken rarest first while their summed document
// frequencies stay within {lexn} (the rarest one always), at most {lexn}
// rows, plus at most {lexn} rows holding every word: a common word never
// floods the candidates, and ranking costs a bounded number of row reads
// whatever the corpus size. A lexeme's term frequency is read from the
// row's tsvector positions, weighted by field; a row's length is
// length(search_text).
func (t tuning) lexCTEs(k kind, filter string) []string {
	keysA, keysC := k.cols("a"), k.cols("c")
	keys := strings.Join(k.keys, ", ")
	weight := func(w float64) float64 {
		if w <= 0 {
			return 1
		}
		return w
	}
	// BM25's term frequency of each query lexeme in a candidate. With
	// every field weighing 1 it is the lexeme's position count, read
	// from the candidate's tsvector cut down in C to the query's
	// lexemes (setweight marks them, ts_filter keeps them): unnesting
	// the whole tsvector (~65 lexemes for a 130-word prompt) and
	// joining it cost 6 ms of a 23 ms search at 20,000 prompts.
	// Field weights other than 1 need each position's weight, so they
	// unnest the whole vector.
	hits := `ts_filter(setweight(setweight(a.search_text, 'D'), 'A', lexq.lx), ARRAY['a']::"char"[])`
	terms := `SELECT u.lexeme, cardinality(u.positions)::float8 AS tf FROM unnest(m.hits) u`
	if t.unnestTerms || weight(t.nameWeight) != 1 || weight(t.descWeight) != 1 {
		hits = `a.search_text`
		terms = fmt.Sprintf(`SELECT u.lexeme, (SELECT sum(CASE w WHEN 'A' THEN %g WHEN 'B' THEN %g ELSE 1 END) FROM unnest(u.weights) w) AS tf
        FROM unnest(m.hits) u`, weight(t.nameWeight), weight(t.descWeight))
	}
	return []string{
		// one: the query is one lexeme (repeated or among stop words)
		// and no operator, so the rows holding every word are the rows
		// holding the rarest: the second candidate query would read
		// the same posting list again for nothing (4 ms of a 6 ms arm
		// for a lexeme in most of 20,000 prompts).
		`lexq AS (SELECT q.andq, q.lx, cardinality(q.lx) = 1 AND q.andq::text !~ '[!|<]' AS one
  FROM (SELECT websearch_to_tsquery('english', {query}) AS andq,
               tsvector_to_array(to_tsvector('english', {query})) AS lx) q)`,
		// Corpus statistics: search_corpus plus the changes not folded
		// into it yet (migration 00011).
		fmt.Sprintf(`lexs AS (
  SELECT v.n, greatest(v.len / greatest(v.n, 1), 1) AS avgdl FROM (
    SELECT coalesce(sum(u.docs), 0)::float8 AS n, coalesce(sum(u.len), 0)::float8 AS len FROM (
      SELECT s.docs, s.lexemes AS len FROM search_corpus s WHERE s.tenant_id IN ({tenant}, '_global') AND s.kind = '%[1]s'
      UNION ALL
      SELECT g.sign, g.sign * g.length FROM search_stats_log g WHERE g.tenant_id IN ({tenant}, '_global') AND g.kind = '%[1]s') u) v)`, k.stats),
		// upto: the summed document frequencies of this lexeme and
		// the rarer ones; rn: its place, rarest first. OFFSET 0 keeps
		// the subquery whole, so each df is looked up once, not once
		// per window and sort key that uses it.
		fmt.Sprintf(`lext AS (
  SELECT t.lexeme, t.df, ln(1 + (greatest(s.n - t.df, 0) + 0.5) / (t.df + 0.5)) AS idf,
    sum(t.df) OVER (ORDER BY t.df, t.lexeme ROWS UNBOUNDED PRECEDING) AS upto,
    row_number() OVER (ORDER BY t.df, t.lexeme) AS rn
  FROM (SELECT x.lexeme,
          (coalesce((SELECT sum(d.df) FROM search_lexemes d
                     WHERE d.tenant_id IN ({tenant}, '_global') AND d.kind = '%[1]s' AND d.lexeme = x.lexeme), 0)
         + coalesce((SELECT sum(g.sign) FROM search_stats_log g
                     WHERE g.tenant_id IN ({tenant}, '_global') AND g.kind = '%[1]s' AND x.lexeme = ANY (g.lexemes)), 0))::float8 AS df
        FROM lexq CROSS JOIN LATERAL unnest(lexq.lx) x(lexeme) OFFSET 0) t, lexs s)`, k.stats),
		// Lexemes quoted for tsquery's input: ' doubled, \ escaped.
		// common: even the rarest lexeme is in more than commonShare of
		// the rows.
		fmt.Sprintf(`lexp AS (SELECT string_agg('''' || replace(replace(lexeme, '\', '\\'), '''', '''''') || '''', ' | ')::tsquery AS q,
  min(df) > %g * (SELECT s.n FROM lexs s) AS common
  FROM lext WHERE upto <= {lexn} OR rn = 1)`, commonShare),
		// The candidates carry what ranking needs from their row (its
		// length and the query lexemes' positions), so ranking neither
		// reads the rows again (3 ms of 23 at 20,000 prompts) nor
		// sorts and copies whole tsvectors (~900 bytes per prompt).
		fmt.Sprintf(`lexm AS (
  SELECT DISTINCT ON (%[1]s) * FROM (
    (SELECT %[2]s FROM %[3]s a, lexp, lexq
     WHERE NOT (SELECT common FROM lexp) AND a.search_text @@ lexp.q AND %[4]s LIMIT {lexn})
    UNION ALL
    (SELECT %[2]s
     FROM ((SELECT a.* FROM %[3]s a WHERE (SELECT common FROM lexp) AND a.tenant_id = {tenant} AND %[4]s LIMIT %[5]d * {lexn})
           UNION ALL
           (SELECT a.* FROM %[3]s a WHERE (SELECT common FROM lexp) AND a.tenant_id = '_global' AND %[4]s LIMIT %[5]d * {lexn})) a, lexp, lexq
     WHERE ts_match_vq(a.search_text, lexp.q) LIMIT {lexn})
    UNION ALL
    (SELECT %[2]s FROM %[3]s a, lexq WHERE NOT lexq.one AND a.search_text @@ lexq.andq AND %[4]s LIMIT {lexn})) x
  ORDER BY %[1]s)`, keys, keysA+", length(a.search_text) AS dl, "+hits+" AS hits", k.table, filter, commonScan),
		fmt.Sprintf(`lex AS (
  SELECT * FROM (
    SELECT c.*, row_number() OVER (ORDER BY c.lrank DESC, %[1]s) AS r FROM (
      SELECT %[2]s,
        sum(w.idf * u.tf * %[4]g / (u.tf + %[5]g * (1 - %[6]g + %[6]g * m.dl / s.avgdl))) AS lrank,
        sum(w.idf) / (SELECT greatest(sum(idf), 1e-9) FROM lext) AS cov
      FROM lexm m CROSS JOIN lexs s
      CROSS JOIN LATERAL (%[3]s) u
      JOIN lext w ON w.lexeme = u.lexeme
      GROUP BY %[2]s, s.avgdl) c) d
  WHERE d.r <= {k})`, keysC, k.cols("m"), terms, t.k1+1, t.k1, t.b)}
}

// fusedCTE fuses the arms of mode (vec, lex or both) by reciprocal rank:
// fused (keys, dist, lrank, rrf, cov), best first, at most {k} rows; cov
// is the full-text match's coverage, NULL for rows the arm did not find. For
// vecShare and lexShare, fused is that arm's rows with its share of the
// hybrid score (arms.go adds the shares up).
func (t tuning) fusedCTE(k kind, mode Mode) string {
	keys := strings.Join(k.keys, ", ")
	var fused string
	switch mode {
	case Lexical:
		// Alone, full text ranks by BM25: coverage only weighs it
		// against the vector arm.
		fused = fmt.Sprintf(`SELECT %s, NULL::float8 AS dist, l.lrank::float8 AS lrank, %g::float8 / (%g + l.r) AS rrf, l.cov::float8 AS cov FROM lex l`,
			k.cols("l"), t.lexWeight, t.rrfK)
	case lexShare:
		// The hybrid's full-text term, as in the default case.
		fused = fmt.Sprintf(`SELECT %s, NULL::float8 AS dist, l.lrank::float8 AS lrank, %g::float8 * %s / (%g + l.r) AS rrf, l.cov::float8 AS cov FROM lex l`,
			k.cols("l"), t.lexWeight, t.covFactor(), t.rrfK)
	case Vector, vecShare:
		fused = fmt.Sprintf(`SELECT %s, v.dist::float8 AS dist, NULL::float8 AS lrank, %g::float8 / (%g + v.r) AS rrf, NULL::float8 AS cov FROM vec v`,
			k.cols("v"), t.vecWeight, t.rrfK)
	default:
		fused = fmt.Sprintf(`SELECT %[1]s, v.dist::float8 AS dist, l.lrank::float8 AS lrank,
    coalesce(%[2]g::float8 / (%[4]g + v.r), 0) + coalesce(%[3]g::float8 * %[5]s / (%[4]g + l.r), 0) AS rrf,
    l.cov::float8 AS cov
  FROM vec v FULL JOIN lex l USING (%[1]s)`, keys, t.vecWeight, t.lexWeight, t.rrfK, t.covFactor())
	}
	return fmt.Sprintf("fused AS (%s\n  ORDER BY rrf DESC, %s LIMIT {k})", fused, k.order())
}

func (t tuning) covFactor() string {
	if t.covPower > 0 {
		return fmt.Sprintf("power(l.cov, %g)", t.covPower)
	}
	return "1"
}

// similarity is a candidate's match to the query, 0..1, for re-ranking:
// in a hybrid search the mean of the cosine similarity of its vector to
// the query's (cos; nil without a vector of the query's model) and the
// share of the query's IDF its full-text match holds (f.cov; nil when the
// full-text arm did not find it); by one arm, that arm's measure, the
// coverage scaled by BM25 relative to the best candidate's (bestL) so
// that rows holding the same words are told apart. The fused reciprocal
// rank chooses the K candidates, but it says where a candidate stands
// among them, not how well it matches: as the similarity, it gave the
// 2nd of six prompts 0.98 and the 20th of 20 candidates 0.76, so a little
// more quality or recency outranked the best match. Measured on the
// evaluation sets (hybrid recall@5, cosShare 0.4 / 0.5 / 0.6 / 0.7):
// tools-large 0.777 / 0.799 / 0.799 / 0.766, tools 0.800 / 0.825 / 0.850 /
// 0.850, prompts-intent 0.850 at each, prompts and prompts-large 1.000;
// with the reciprocal rank 0.759, 0.825, 0.850, 1.000.
func (t tuning) similarity(mode Mode, cos *float64, f fused, bestL float64) float64 {
	c, l := 0.0, 0.0
	if cos != nil {
		c = clamp01(*cos)
	}
	if f.cov != nil {
		l = clamp01(*f.cov)
		if mode == Lexical && f.lrank != nil && bestL > 0 {
			l *= clamp01(*f.lrank / bestL)
		}
	}
	switch mode {
	case Lexical:
		return l
	case Vector:
		return c
	}
	return t.cosShare*c + (1-t.cosShare)*l
}

// cosineSQL is the cosine similarity of alias's vector to the query's, or
// NULL when the row has no vector of the query's model and dimension (or
// the search has no query vector), for a row of fused f: the vector arm's
// distance when it found the row (the same expression), else computed.
func cosineSQL(alias string, p plan) (string, error) {
	if !p.mode.vectorArm() {
		return "NULL::float8", nil
	}
	lit, err := literal(p.model)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`coalesce(1 - f.dist, CASE WHEN %[1]s.embedding_model = %[2]s AND %[1]s.embedding_dim = %[3]d
    THEN 1 - (%[1]s.embedding::halfvec(%[3]d) <=> {vec}::halfvec(%[3]d)) END)`, alias, lit, len(p.vec)), nil
}

var placeholder = regexp.MustCompile(`\{[a-z]+\}`)

// bind turns {name} placeholders into $n, each name once, and returns the
// SQL and its arguments, except for values the planner should see (see
// statements.go): an int is written as a number and an sqlLiteral as it
// is. A placeholder without a value is a bug.
func bind(sql string, named map[string]any) (string, []any) {
	pos := map[string]int{}
	var args []any
	out := placeholder.ReplaceAllStringFunc(sql, func(m string) string {
		name := m[1 : len(m)-1]
		v, has := named[name]
		if !has {
			panic("search: no value for " + m)
		}
		switch v := v.(type) {
		case int:
			return strconv.Itoa(v)
		case sqlLiteral:
			return string(v)
		}
		n, ok := pos[name]
		if !ok {
			args = append(args, v)
			n = len(args)
			pos[name] = n
		}
		return "$" + strconv.Itoa(n)
	})
	return out, args
}

// sqlLiteral is a value quoted as an SQL literal, which bind inlines.
type sqlLiteral string

// named returns the placeholders' values every retrieval uses (see
// retrievalSQL): the tenant as an SQL literal (see statements.go), the
// query as the full-text arm reads it (fullTextQuery), K and the
// full-text bound.
func (s *Searcher) named(tenant, query string, k int) (map[string]any, error) {
	lit, err := literal(tenant)
	if err != nil {
		return nil, err
	}
	return map[string]any{"tenant": sqlLiteral(lit), "query": fullTextForm(query), "k": k, "lexn": s.opts.LexicalCandidates}, nil
}

// fullTextForm is fullTextQuery; a test replaces it to reach the fallback
// of a query Postgres refuses (retrieveRows).
var fullTextForm = fullTextQuery

// negations is a run of two or more "-" with only what
// websearch_to_tsquery's parser may skip between them (white space, the
// operator characters !&|()< it ignores, and a quote it finds no match
// for): each "-" is a NOT, and more than 31 in a row overflow the
// parser's operator stack ("tsquery stack too small", the whole statement
// failing). A pasted heading rule ("# ------ # GUIDE") or a "--flag"
// holds such a run; none means a negation, so it is read as a word break.
var negations = regexp.MustCompile(`-[\s\x0B\x{85}\p{Z}"!&|()<-]*-`)

// fullTextQuery is query as the full-text arm gives it to
// websearch_to_tsquery: runs of "-" are word breaks (see negations).
// A single "-" before a word still excludes it.
func fullTextQuery(query string) string {
	if strings.Count(query, "-") < 2 {
		return query
	}
	return negations.ReplaceAllString(query, " ")
}

// queryRefused reports whether err is Postgres refusing the full-text
// form of the query rather than failing: a parser limit (tsquery's
// errors are XX000), a program limit (54xxx) or a data exception (22xxx)
// from text the request carried. Outages and other failures are not.
func queryRefused(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	switch pe.Code[:2] {
	case "22", "54":
		return true
	case "XX":
		return strings.Contains(pe.Message, "tsquery")
	}
	return false
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
		reason, why := "embedding provider unavailable", skipEmbedderUnavailable
		switch {
		case errors.Is(err, embed.ErrEmptyText):
			reason, why = "the query has no words to embed", skipNoWords
		case errors.Is(ectx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
			reason, why = fmt.Sprintf("embedding provider did not answer within %s", s.opts.EmbedTimeout), skipEmbedderTimeout
		}
		s.skipped("vector", why, model, err)
		return plan{mode: Lexical, degraded: true, reason: reason + " (" + model + "); results are from full-text search alone"}
	}
	s.cache.put(key, vecs[0])
	return plan{mode: want, model: model, vec: vecs[0]}
}

// query runs a search statement, as a prepared statement of the
// connection with a generic plan (see statements.go), in one round trip
// with the settings it runs under: the plan cache mode and, when the
// vector arm runs, those of the index method m (vectorSettings). A batch
// runs in one implicit transaction, so the settings are the statement's
// alone and the pool's other users never see them. scan reads each row.
func (s *Searcher) query(ctx context.Context, p plan, k int, m Method, sql string, args []any, scan func(pgx.Rows) error) error {
	settings := []any{}
	if p.mode.vectorArm() {
		iterative, err := s.pgv.iterativeScan(ctx, s.pool)
		if err != nil {
			return database.Classify(err)
		}
		settings = vectorSettings(m, k, s.opts.EFSearch, s.opts.Probes, iterative)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return database.Classify(err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	if s.simple {
		// The mode pgx prescribes behind a transaction-pooling PgBouncer,
		// where a statement prepared on one server connection is not
		// there for the next transaction: plan every search instead. The
		// batch is one simple query, so one implicit transaction still.
		if len(settings) > 0 {
			b.Queue(settingsSQL[len(settings)/2], settings...)
		}
		b.Queue(sql, args...)
		return database.Classify(runBatch(conn.SendBatch(ctx, b), len(settings) > 0, scan))
	}
	settings = append(settings, "plan_cache_mode", "force_generic_plan")
	st, err := connStatements(conn.Conn(), s.opts.Prepared)
	if err != nil {
		return err
	}
	name, err := st.prepare(ctx, conn.Conn(), sql)
	if err != nil {
		return database.Classify(err)
	}
	b.Queue(settingsSQL[len(settings)/2], settings...)
	b.Queue(name, args...)
	err = runBatch(conn.SendBatch(ctx, b), true, scan)
	if err != nil {
		if ferr := st.forget(ctx, conn.Conn(), sql, err); ferr != nil {
			s.log.Warn().Err(ferr).Str("statement", name).Msg("cannot deallocate a failed search statement")
		}
	}
	return database.Classify(err)
}

// runBatch reads a batch of the settings, when it has them, and one
// statement, scanning the statement's rows, and closes it.
func runBatch(br pgx.BatchResults, settings bool, scan func(pgx.Rows) error) error {
	run := func() error {
		if settings {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
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
	err := run()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// vectorSettings are the settings of a kNN query of k rows through an
// index of method m, as name, value pairs. HNSW: hnsw.ef_search, raised to
// k (an index scan returns at most ef_search rows). IVFFlat:
// ivfflat.probes. With iterative (pgvector 0.8+), a filtered kNN keeps
// scanning the graph or further lists until k rows pass the filters, for
// IVFFlat up to maxProbeRows rows.
func vectorSettings(m Method, k, efSearch, probes int, iterative bool) []any {
	if m == IVFFlat {
		out := []any{"ivfflat.probes", strconv.Itoa(probes)}
		if iterative {
			out = append(out, "ivfflat.iterative_scan", "relaxed_order",
				"ivfflat.max_probes", strconv.Itoa(max(probes, maxProbeRows/RowsPerList)))
		}
		return out
	}
	out := []any{"hnsw.ef_search", strconv.Itoa(max(efSearch, k))}
	if iterative {
		out = append(out, "hnsw.iterative_scan", "relaxed_order")
	}
	return out
}

// vector returns p's query vector as a statement argument: a half vector,
// the type the arm casts it to, so pgx sends it in binary through the
// codec database.Open registers (a vector would go as ~2 KB of text,
// formatted here and parsed by the server: ~0.1 ms of every search).
// float16 rounds to nearest even, as pgvector does, so the values are
// the ones the cast of the text would give.
func (p plan) vector() pgvector.HalfVector { return pgvector.NewHalfVector(p.vec) }

// recency is 0.5^(age/halfLife), age being how far at is from now either
// way. The times are the events' (ce-time, which the publisher sets): a
// time in the future is a wrong clock or a lie, and counting it as now
// would pin the candidate's recency at 1 until then, for every tenant
// when the publisher is _global's. Measured from now either way, a
// candidate dated ahead is as recent as one created at its date will be
// then: it can move its peak, not hold it. A clock a few seconds fast
// costs nothing.
func recency(at, now time.Time, halfLife time.Duration) float64 {
	age := now.Sub(at)
	if age < 0 {
		age = -age
	}
	if age == 0 || halfLife <= 0 {
		return 1
	}
	return pow2(-float64(age) / float64(halfLife))
}

// FullTextArm runs the full-text arm of a search of kind for query alone,
// as Prompts and Tools run it for a request with no filter but the
// tenant's (tenant and _global; served prompt versions; tools not
// quarantined), and returns how many rows it gave: at most the candidates
// search retrieves. agentq bench indexer measures it as the arm's anchor;
// it runs the SQL search runs, the way search runs it, not a copy.
func (s *Searcher) FullTextArm(ctx context.Context, kind EvalKind, tenant, query string) (int, error) {
	k, tune, kd, filter := s.opts.PromptK, s.promptTune, promptKind, promptFilter
	if kind == EvalTools {
		k, tune, kd, filter = s.opts.ToolK, s.toolTune, toolKind, toolFilter
	}
	named, err := s.named(tenant, query, k)
	if err != nil {
		return 0, err
	}
	n := 0
	err = s.retrieve(ctx, plan{mode: Lexical}, k, kd, tune, filter, named, "\nSELECT * FROM fused", func(pgx.Rows) error { n++; return nil })
	return n, err
}

// retrieve runs the retrieval of one search in one statement ending in
// tail (the SELECT over fused that fetches the candidates' rows), and
// scans its rows. topK is the candidates retrieved ({k}); named holds the
// placeholders' values (see bind). retrieveRows (arms.go) runs a hybrid
// search's arms apart when it can.
func (s *Searcher) retrieve(ctx context.Context, p plan, topK int, kd kind, tune tuning, filter string, named map[string]any, tail string, scan func(pgx.Rows) error) error {
	ctes, err := tune.retrievalSQL(kd, p.mode, filter, p.model, len(p.vec))
	if err != nil {
		return err
	}
	sql, args := bind(ctes+tail, named)
	return s.query(ctx, p, topK, s.opts.Indexes().method(kd.table), sql, args, scan)
}

// KNNSettings are the settings search runs a kNN query of k rows of kind
// under, with options o, as name, value pairs for set_config: agentq bench
// indexer runs its bare kNN statement under them.
func KNNSettings(kind EvalKind, k int, o Options, iterative bool) []any {
	_ = o.defaults() // the settings of the values given; validity is New's
	table := promptKind.table
	if kind == EvalTools {
		table = toolKind.table
	}
	return vectorSettings(o.Indexes().method(table), k, o.EFSearch, o.Probes, iterative)
}

// SettingsSQL is the statement that sets the name, value pairs of settings
// (at most 4) for the transaction alone, as search sets them.
func SettingsSQL(settings []any) string {
	return settingsSQL[len(settings)/2]
}
