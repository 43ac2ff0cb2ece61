package search

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/embed/eval"
	"github.com/agentq/agentq/internal/testenv"
)

// TestSweepFusion measures the retrieval choices of tuning on the
// evaluation sets of internal/embed/testdata, with the lexical embedder
// and, when installed, the sentence encoder. It is a measurement, not a
// check: AGENTQ_SEARCH_SWEEP=1 runs it (go test -run Sweep -v).
func TestSweepFusion(t *testing.T) {
	if os.Getenv("AGENTQ_SEARCH_SWEEP") == "" {
		t.Skip("set AGENTQ_SEARCH_SWEEP=1 to measure")
	}
	ctx := context.Background()
	pool := testenv.Pool(t)
	embs := []embed.Embedder{embed.Lexical{}}
	if embed.SentenceAvailable("") {
		se, err := embed.NewSentence(ctx, embed.SentenceOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = se.Close() })
		embs = append(embs, se)
	}
	sets := []struct {
		file string
		kind EvalKind
	}{{"tools.json", EvalTools}, {"prompts.json", EvalPrompts}, {"prompts-intent.json", EvalPrompts}}
	variants := []tuning{
		defaultTuning,
		{lexForm: "tiered", rankFn: "ts_rank_cd", vecWeight: 1, lexWeight: 1, minMatch: 0.5, orderByCov: true, scaleByCov: true},
		{lexForm: "tiered", rankFn: "ts_rank_cd", vecWeight: 1, lexWeight: 1},
		{lexForm: "tiered", rankFn: "ts_rank", vecWeight: 1, lexWeight: 1, orderByCov: true, scaleByCov: true, covPower: 2},
		{lexForm: "tiered", rankFn: "ts_rank_cd", vecWeight: 1, lexWeight: 1, orderByCov: true, scaleByCov: true, covPower: 2},
		{lexForm: "tiered", rankFn: "ts_rank_cd", vecWeight: 1, lexWeight: 1, minMatch: 0.4, orderByCov: true, scaleByCov: true, covPower: 2},
	}
	for _, e := range embs {
		require.NoError(t, EnsureIndexes(ctx, pool, Embedders{Prompts: e, Tools: e}))
		for _, set := range sets {
			s, err := LoadEvalSet("../embed/testdata/"+set.file, "")
			require.NoError(t, err)
			tenant := testenv.Tenant(t)
			require.NoError(t, LoadCorpus(ctx, pool, tenant, set.kind, s, e))
			base, err := New(pool, Embedders{Prompts: e, Tools: e}, Options{}, zerolog.Nop())
			require.NoError(t, err)
			for _, v := range variants {
				base.tune = v
				line := fmt.Sprintf("%-10s %-20s m%.2f o%v s%v p%.0f |", e.Model()[:10], set.file, v.minMatch, v.orderByCov, v.scaleByCov, v.covPower)
				for _, m := range []Mode{Lexical, Vector, Hybrid} {
					rep, err := eval.Evaluate(ctx, s.Set(), base.WithMode(m).Rank(tenant, set.kind, 50))
					require.NoError(t, err)
					line += fmt.Sprintf(" %s r1 %.3f r5 %.3f r10 %.3f ndcg %.3f mrr %.3f |", m[:3], rep.Recall1, rep.Recall5, rep.Recall10, rep.NDCG10, rep.MRR)
				}
				t.Log(line)
			}
		}
	}
}
