package search

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/testenv"
)

// benchTenant holds the synthetic corpus of the benchmarks; it is loaded
// once per database and kept (AGENTQ_SEARCH_BENCH_N rows of each kind,
// default 10000).
const benchTenant = "bench-search"

func benchCorpus(tb testing.TB) (*pgxpool.Pool, int) {
	pool := testenv.Pool(tb)
	n := 10000
	if v := os.Getenv("AGENTQ_SEARCH_BENCH_N"); v != "" {
		_, _ = fmt.Sscan(v, &n)
	}
	ctx := context.Background()
	emb := Embedders{Prompts: embed.Lexical{}, Tools: embed.Lexical{}}
	require.NoError(tb, EnsureIndexes(ctx, pool, emb, IndexOptions{}))
	var have int
	require.NoError(tb, pool.QueryRow(ctx, `SELECT count(*) FROM prompts WHERE tenant_id = $1`, benchTenant).Scan(&have))
	if have >= n {
		return pool, n
	}
	words := vocabulary(tb)
	r := rand.New(rand.NewPCG(1, 2))
	text := func(k int) string {
		w := make([]string, k)
		for i := range w {
			w[i] = words[r.IntN(len(words))]
		}
		return strings.Join(w, " ")
	}
	docs := make([]EvalDoc, 0, n)
	tools := make([]EvalDoc, 0, n)
	for i := range n {
		docs = append(docs, EvalDoc{ID: fmt.Sprintf("p%06d", i), Text: text(120)})
		tools = append(tools, EvalDoc{ID: fmt.Sprintf("tool_%06d", i), Text: text(15)})
	}
	start := time.Now()
	require.NoError(tb, LoadCorpus(ctx, pool, benchTenant, EvalPrompts, EvalSet{Docs: docs[have:]}, embed.Lexical{}))
	require.NoError(tb, LoadCorpus(ctx, pool, benchTenant, EvalTools, EvalSet{Docs: tools}, embed.Lexical{}))
	_, err := pool.Exec(ctx, `ANALYZE prompts; ANALYZE tools`)
	require.NoError(tb, err)
	_, err = MaintainIndexes(ctx, pool, emb, IndexOptions{}) // lists for the rows loaded
	require.NoError(tb, err)
	tb.Logf("loaded %d prompts and tools in %s", n, time.Since(start))
	return pool, n
}

func vocabulary(tb testing.TB) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range []string{"tools.json", "prompts.json", "prompts-intent.json"} {
		b, err := os.ReadFile("../embed/testdata/" + f)
		require.NoError(tb, err)
		for _, w := range regexp.MustCompile(`[a-z]{3,}`).FindAllString(strings.ToLower(string(b)), -1) {
			if !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	return out
}

var benchQueries = []string{
	"review a pull request for data races", "summarise a long support ticket politely",
	"translate text between languages", "explain a slow sql query plan", "send an email to my manager",
	"what is the weather forecast in berlin", "write unit tests for a parser", "classify customer intent",
}

// TestExplainHybrid prints the plan of the hybrid statements over the
// benchmark corpus and checks that the vector arm uses the partial vector
// index (AGENTQ_SEARCH_EXPLAIN=1; measure on native Postgres).
func TestExplainHybrid(t *testing.T) {
	if os.Getenv("AGENTQ_SEARCH_EXPLAIN") == "" {
		t.Skip("set AGENTQ_SEARCH_EXPLAIN=1")
	}
	pool, _ := benchCorpus(t)
	ctx := context.Background()
	lex := embed.Lexical{}
	v, err := lex.Embed(ctx, []string{benchQueries[0]})
	require.NoError(t, err)
	for _, k := range []kind{promptKind, toolKind} {
		// The filters search runs with: prompts' index covers the served
		// versions only (a.current), so a statement without it cannot use it.
		filter := promptFilter
		if k.table == "tools" {
			filter = toolFilter
		}
		ctes, err := promptTuning.retrievalSQL(k, Hybrid, filter, lex.Model(), lex.Dimension())
		require.NoError(t, err)
		sql, args := bind(`EXPLAIN (ANALYZE, BUFFERS) `+ctes+` SELECT * FROM fused`, map[string]any{
			"tenant": benchTenant, "query": benchQueries[0], "k": 30, "lexn": DefaultLexicalCandidates, "vec": plan{vec: v[0]}.vector()})
		var lines []string
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			set := vectorSettings(IndexOptions{}.method(k.table), 30, DefaultEFSearch, DefaultProbes, true)
			if _, err := tx.Exec(ctx, settingsSQL[len(set)/2], set...); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				return err
			}
			lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		}))
		plan := strings.Join(lines, "\n")
		t.Log("\n" + plan)
		if k.table == "prompts" {
			require.Contains(t, plan, ivfPrefix(k.table, lex.Model(), lex.Dimension()))
		} else {
			require.Contains(t, plan, IndexName(k.table, lex.Model(), lex.Dimension()))
		}
	}
}

func benchSearcher(b *testing.B) *Searcher {
	pool, _ := benchCorpus(b)
	s, err := New(pool, Embedders{Prompts: embed.Lexical{}, Tools: embed.Lexical{}}, Options{}, zerolog.Nop())
	require.NoError(b, err)
	return s
}

func BenchmarkPrompts(b *testing.B) {
	s := benchSearcher(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		_, err := s.Prompts(ctx, benchTenant, PromptsRequest{Query: benchQueries[i%len(benchQueries)]})
		require.NoError(b, err)
		i++
	}
}

func BenchmarkTools(b *testing.B) {
	s := benchSearcher(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		_, err := s.Tools(ctx, benchTenant, ToolsRequest{Query: benchQueries[i%len(benchQueries)]})
		require.NoError(b, err)
		i++
	}
}

func BenchmarkPromptsLexical(b *testing.B) {
	s := benchSearcher(b).WithMode(Lexical)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		_, err := s.Prompts(ctx, benchTenant, PromptsRequest{Query: benchQueries[i%len(benchQueries)]})
		require.NoError(b, err)
		i++
	}
}

func BenchmarkGet(b *testing.B) {
	s := benchSearcher(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		_, err := s.Get(ctx, benchTenant, GetRequest{ID: fmt.Sprintf("p%06d", i%1000)})
		require.NoError(b, err)
		i++
	}
}
