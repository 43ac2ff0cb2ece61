package search

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/embed/eval"
	"github.com/agentq/agentq/internal/testenv"
)

// TestSweepFusion measures retrieval choices (tuning) on the evaluation
// sets of internal/embed/testdata, with the lexical embedder and, when
// installed, the sentence encoder. It is a measurement, not a check:
// AGENTQ_SEARCH_SWEEP=1 runs it (go test -run Sweep -v);
// AGENTQ_SEARCH_SWEEP_SETS narrows the sets (comma-separated file names).
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
	}{
		{"tools.json", EvalTools}, {"tools-large.json", EvalTools},
		{"prompts.json", EvalPrompts}, {"prompts-intent.json", EvalPrompts}, {"prompts-large.json", EvalPrompts},
	}
	only := os.Getenv("AGENTQ_SEARCH_SWEEP_SETS")
	for _, e := range embs {
		require.NoError(t, EnsureIndexes(ctx, pool, Embedders{Prompts: e, Tools: e}, IndexOptions{}))
		for _, set := range sets {
			if only != "" && !strings.Contains(","+only+",", ","+set.file+",") {
				continue
			}
			s, err := LoadEvalSet("../embed/testdata/"+set.file, "")
			require.NoError(t, err)
			tenant := testenv.Tenant(t)
			require.NoError(t, LoadCorpus(ctx, pool, tenant, set.kind, s, e))
			base, err := New(pool, Embedders{Prompts: e, Tools: e}, Options{}, zerolog.Nop())
			require.NoError(t, err)
			def := base.toolTune
			if set.kind == EvalPrompts {
				def = base.promptTune
			}
			for _, v := range sweepVariants(def) {
				base.promptTune, base.toolTune = v, v
				line := fmt.Sprintf("%-10s %-20s k%-3g wv%.1f wl%.1f k1 %.1f b%.2f A%g B%g p%g |", e.Model()[:10], set.file,
					v.rrfK, v.vecWeight, v.lexWeight, v.k1, v.b, v.nameWeight, v.descWeight, v.covPower)
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

// sweepVariants are the default and one change at a time around it.
func sweepVariants(def tuning) []tuning {
	out := []tuning{def}
	change := func(f func(*tuning)) {
		v := def
		f(&v)
		out = append(out, v)
	}
	if os.Getenv("AGENTQ_SEARCH_SWEEP_ALL") == "" {
		return out
	}
	for _, k := range []float64{10, 30, 100} {
		change(func(t *tuning) { t.rrfK = k })
	}
	for _, w := range []float64{0.5, 0.75, 1.25, 1.5} {
		change(func(t *tuning) { t.lexWeight = w })
	}
	for _, p := range []float64{0, 1, 1.5, 2, 3} {
		change(func(t *tuning) { t.covPower = p })
	}
	for _, b := range []float64{0.3, 1} {
		change(func(t *tuning) { t.b = b })
	}
	change(func(t *tuning) { t.k1 = 2 })
	change(func(t *tuning) { t.nameWeight, t.descWeight = 2, 1 })
	change(func(t *tuning) { t.nameWeight, t.descWeight = 3, 2 })
	return out
}
