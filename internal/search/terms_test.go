package search

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/testenv"
)

// TestTermFrequencyPaths: the full-text arm's fast term frequencies (the
// tsvector cut to the query's lexemes in C) rank every query of the
// evaluation sets exactly as unnesting the whole tsvector does: the same
// results, in the same order, with the same BM25 scores.
func TestTermFrequencyPaths(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	lex := embed.Lexical{}
	require.NoError(t, EnsureIndexes(ctx, pool, Embedders{Prompts: lex, Tools: lex}, IndexOptions{}))

	fast, err := promptTuning.retrievalSQL(promptKind, Lexical, "true", "", 0)
	require.NoError(t, err)
	require.Contains(t, fast, "ts_filter(", "the default tuning takes the fast path")
	slow := promptTuning
	slow.unnestTerms = true
	sql, err := slow.retrievalSQL(promptKind, Lexical, "true", "", 0)
	require.NoError(t, err)
	require.NotContains(t, sql, "ts_filter(")

	for _, set := range []struct {
		file string
		kind EvalKind
	}{{"prompts.json", EvalPrompts}, {"tools.json", EvalTools}} {
		t.Run(set.file, func(t *testing.T) {
			s, err := LoadEvalSet("../embed/testdata/"+set.file, "")
			require.NoError(t, err)
			tenant := testenv.Tenant(t)
			require.NoError(t, LoadCorpus(ctx, pool, tenant, set.kind, s, lex))
			k, filter := toolKind, `a.tenant_id IN ({tenant}, '_global')`
			if set.kind == EvalPrompts {
				k, filter = promptKind, filter+` AND a.current`
			}
			ranked := 0
			for _, q := range s.Queries {
				got, want := lexArm(t, promptTuning, k, filter, tenant, q.Text), lexArm(t, slow, k, filter, tenant, q.Text)
				require.Equal(t, len(want), len(got), "query %q", q.Text)
				for i := range want {
					require.Equal(t, want[i].key, got[i].key, "query %q, rank %d", q.Text, i+1)
					require.InEpsilon(t, want[i].lrank, got[i].lrank, 1e-9, "query %q, %s", q.Text, want[i].key)
					require.InEpsilon(t, want[i].cov, got[i].cov, 1e-9, "query %q, %s", q.Text, want[i].key)
				}
				ranked += len(got)
			}
			require.Greater(t, ranked, 20, "the queries find rows")
		})
	}
}

type armRow struct {
	key        string
	lrank, cov float64
}

// lexArm runs the full-text arm of tune alone and returns its rows, best
// first: the row's key, BM25 score and coverage.
func lexArm(t *testing.T, tune tuning, k kind, filter, tenant, query string) []armRow {
	t.Helper()
	ctes, err := tune.retrievalSQL(k, Lexical, filter, "", 0)
	require.NoError(t, err)
	sql, args := bind(ctes+"\nSELECT concat_ws('/', "+k.cols("l")+"), l.lrank::float8, l.cov::float8 FROM lex l ORDER BY l.r",
		map[string]any{"tenant": tenant, "query": query, "k": 50, "lexn": DefaultLexicalCandidates})
	rows, err := testenv.Pool(t).Query(context.Background(), sql, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []armRow
	for rows.Next() {
		var r armRow
		require.NoError(t, rows.Scan(&r.key, &r.lrank, &r.cov))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}
