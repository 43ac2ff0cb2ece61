package search_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
)

// TestArmsApartFindWhatOneStatementFinds: a hybrid search whose arms run
// apart, at once on two connections (arms.go), and one whose arms run in
// one statement return the same results, in the same order, with the
// same figures, for every query of the evaluation sets (tools.json and
// prompts.json of internal/embed/testdata, with quality figures on some
// of them so re-ranking has something to move). K is cut to 5 below the
// limit so the fused list is cut where the arms' candidates differ.
func TestArmsApartFindWhatOneStatementFinds(t *testing.T) {
	f := newFixture(t, lexical, search.Options{PromptK: 5, ToolK: 5})
	ctx := context.Background()
	one, err := search.New(f.pool, search.Embedders{Prompts: lexical, Tools: lexical}, search.Options{ArmsApart: -1, PromptK: 5, ToolK: 5}, testenv.Logger(t))
	require.NoError(t, err)
	tenant := testenv.Tenant(t)
	sets := []struct {
		file string
		kind search.EvalKind
	}{{"tools.json", search.EvalTools}, {"prompts.json", search.EvalPrompts}}
	queries := 0
	for _, set := range sets {
		s, err := search.LoadEvalSet("../embed/testdata/"+set.file, "")
		require.NoError(t, err)
		require.NoError(t, search.LoadCorpus(ctx, f.pool, tenant, set.kind, s, lexical))
		for i, d := range s.Docs {
			if i%3 == 0 {
				target, ref := "tool", d.ID
				if set.kind == search.EvalPrompts {
					target, ref = "prompt", d.ID+"@1"
				}
				f.quality(tenant, target, ref, float64(i%10)/10, int64(i), time.Now(), nil)
			}
		}
		for _, q := range s.Queries {
			queries++
			start := time.Now()
			if set.kind == search.EvalTools {
				want, err := one.Tools(ctx, tenant, search.ToolsRequest{Query: q.Text, Limit: 5})
				require.NoError(t, err)
				got, err := f.s.Tools(ctx, tenant, search.ToolsRequest{Query: q.Text, Limit: 5})
				require.NoError(t, err)
				require.Equal(t, want.Retrieval, got.Retrieval, q.Text)
				sameResults(t, q.Text, clockDrift(time.Since(start)), want.Results, got.Results, func(r *search.ToolResult) (*float64, *float64) {
					return &r.Score, &r.Components.Recency
				})
				continue
			}
			want, err := one.Prompts(ctx, tenant, search.PromptsRequest{Query: q.Text, Limit: 5})
			require.NoError(t, err)
			got, err := f.s.Prompts(ctx, tenant, search.PromptsRequest{Query: q.Text, Limit: 5})
			require.NoError(t, err)
			require.Equal(t, want.Retrieval, got.Retrieval, q.Text)
			sameResults(t, q.Text, clockDrift(time.Since(start)), want.Results, got.Results, func(r *search.PromptResult) (*float64, *float64) {
				return &r.Score, &r.Components.Recency
			})
		}
	}
	// Every search of f.s ran apart (one at a time, so a slot was free),
	// and none of one's did.
	require.EqualValues(t, queries, f.s.RunsApart())
	require.Zero(t, one.RunsApart())

	// With every slot taken, a search runs one statement rather than wait.
	release := f.s.HoldApart()
	r, err := f.s.Prompts(ctx, tenant, search.PromptsRequest{Query: "summarize a document", Limit: 5})
	require.NoError(t, err)
	require.NotEmpty(t, r.Results)
	require.EqualValues(t, queries, f.s.RunsApart())
	release()
	_, err = f.s.Prompts(ctx, tenant, search.PromptsRequest{Query: "summarize a document", Limit: 5})
	require.NoError(t, err)
	require.EqualValues(t, queries+1, f.s.RunsApart())
}

// sameResults checks that two searches returned the same results in the
// same order: equal in everything but score and recency, which are
// computed from each search's clock and must agree within drift (see
// clockDrift). clock points at a result's score and recency.
func sameResults[R any](t *testing.T, q string, drift float64, want, got []R, clock func(*R) (score, recency *float64)) {
	t.Helper()
	require.NotEmpty(t, got, q)
	require.Len(t, got, len(want), q)
	for j := range want {
		ws, wr := clock(&want[j])
		gs, gr := clock(&got[j])
		require.InDelta(t, *ws, *gs, drift, "%s: result %d: score", q, j)
		require.InDelta(t, *wr, *gr, drift, "%s: result %d: recency", q, j)
		*ws, *wr, *gs, *gr = 0, 0, 0, 0
		require.Equal(t, want[j], got[j], "%s: result %d", q, j)
	}
}

// clockDrift is how far apart two searches' recency figures may be when
// each read its clock within d of the other: recency, 2^(-age/half-life),
// moves by at most ln 2/half-life per second (1.1e-6 at the default
// half-life, so a fixed bound fails when a loaded machine puts a second
// between them), and a score, recency weighing at most 1 in it, by no
// more; 1e-9 more for rounding.
func clockDrift(d time.Duration) float64 {
	return math.Ln2*d.Seconds()/search.DefaultHalfLife.Seconds() + 1e-9
}
