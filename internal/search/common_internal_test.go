package search

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/testenv"
)

// TestCommonLexemesAreScanned: the full-text arm reads the candidates of
// a query whose rarest lexeme is in more than commonShare of the rows by
// a scan that stops at the bound, and those of any other query through
// the GIN index; the other form is never executed (EXPLAIN ANALYZE of
// the arm's statement, generic plan, as search runs it). Both find rows.
func TestCommonLexemesAreScanned(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	lex := embed.Lexical{}
	require.NoError(t, EnsureIndexes(ctx, pool, Embedders{Prompts: lex, Tools: lex}, IndexOptions{}))
	tenant := testenv.Tenant(t)
	common, rare := "zqc"+tenant[1:], "zqr"+tenant[1:]
	// _global's rows come first in the scan's order: more of them than
	// the scan's bound (commonScan × lexn = 100 here) would leave a
	// single scan of both none of the tenant's. Made of a word of their
	// own, so no other test's query matches them, and deleted after.
	filler := "zqg" + tenant[1:]
	var globals []EvalDoc
	for i := range 120 {
		globals = append(globals, EvalDoc{ID: fmt.Sprintf("%s-%03d", filler, i), Text: filler})
	}
	require.NoError(t, LoadCorpus(ctx, pool, "_global", EvalPrompts, EvalSet{Docs: globals}, lex))
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), `DELETE FROM prompts WHERE tenant_id = '_global' AND id LIKE $1`, filler+"-%")
		require.NoError(t, err)
		_, err = FoldStats(context.Background(), pool)
		require.NoError(t, err)
	})
	// The statistics count _global's prompts too (other tests leave some
	// in a shared database): half of 40 + 2 × theirs keeps the common
	// word in more than a third of the rows counted.
	_, err := FoldStats(ctx, pool)
	require.NoError(t, err)
	var global int
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(docs), 0) FROM search_corpus WHERE tenant_id = '_global' AND kind = 'prompt'`).Scan(&global))
	require.Less(t, global, 5000, "too many _global prompts for this test's corpus")
	var docs []EvalDoc
	for i := range 40 + 2*global {
		text := fmt.Sprintf("Plain prompt number %d about nothing much.", i)
		if i%2 == 0 {
			text = fmt.Sprintf("Prompt %d about %s things.", i, common)
		}
		if i == 7 {
			text += " " + rare
		}
		docs = append(docs, EvalDoc{ID: fmt.Sprintf("p%02d", i), Text: text})
	}
	require.NoError(t, LoadCorpus(ctx, pool, tenant, EvalPrompts, EvalSet{Docs: docs}, lex))
	_, err = FoldStats(ctx, pool)
	require.NoError(t, err)

	ctes, err := promptTuning.retrievalSQL(promptKind, Lexical, promptFilter, "", 0)
	require.NoError(t, err)
	lit, err := literal(tenant)
	require.NoError(t, err)
	for _, c := range []struct {
		query  string
		common bool
		rows   int
	}{
		{common, true, 5},               // in half the rows: scanned, the bound's 5
		{rare, false, 1},                // in 1 row: through the index
		{common + " " + rare, false, 1}, // the rarest decides
	} {
		sql, args := bind(ctes+"\nSELECT * FROM fused", map[string]any{"tenant": sqlLiteral(lit), "query": c.query, "k": 20, "lexn": 5})
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
		require.NoError(t, err)
		var plan []struct{ Plan planNode }
		var raw string
		require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&raw), c.query)
		_, err = conn.Exec(ctx, `RESET plan_cache_mode`)
		require.NoError(t, err)
		conn.Release()
		require.NoError(t, json.Unmarshal([]byte(raw), &plan))
		require.Len(t, plan, 1)
		// The candidates are an Append of three queries: through the
		// index, by a scan, all words (see lexCTEs); count the reads of
		// prompts each one executed.
		top := plan[0].Plan
		rows := top.Rows
		branches := top.find(func(n planNode) bool { return n.Type == "Append" && len(n.Plans) == 3 })
		require.NotNil(t, branches, c.query)
		reads := func(n planNode) float64 {
			var total float64
			for _, m := range n.all() {
				if m.Relation == "prompts" {
					total += m.Loops
				}
			}
			return total
		}
		branch := branches.Plans
		indexed, scanned := reads(branch[0]), reads(branch[1])
		if c.common {
			require.Zero(t, indexed, "%s: a common lexeme's candidates came through the index", c.query)
			require.Positive(t, scanned, "%s: not scanned", c.query)
		} else {
			require.Positive(t, indexed, "%s: not through the index", c.query)
			require.Zero(t, scanned, "%s: scanned", c.query)
		}
		require.Equal(t, float64(c.rows), rows, c.query)
	}
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Loops    float64    `json:"Actual Loops"`
	Rows     float64    `json:"Actual Rows"`
	Plans    []planNode `json:"Plans"`
}

// all returns n and every node below it.
func (n planNode) all() []planNode {
	out := []planNode{n}
	for _, p := range n.Plans {
		out = append(out, p.all()...)
	}
	return out
}

// find returns the last node in n.all() that match accepts, or nil.
func (n planNode) find(match func(planNode) bool) *planNode {
	var found *planNode
	for _, m := range n.all() {
		if match(m) {
			found = &m
		}
	}
	return found
}
