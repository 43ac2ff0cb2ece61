package search_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
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
			if set.kind == search.EvalTools {
				want, err := one.Tools(ctx, tenant, search.ToolsRequest{Query: q.Text, Limit: 5})
				require.NoError(t, err)
				got, err := f.s.Tools(ctx, tenant, search.ToolsRequest{Query: q.Text, Limit: 5})
				require.NoError(t, err)
				require.Equal(t, want.Retrieval, got.Retrieval, q.Text)
				sameResults(t, q.Text, want.Results, got.Results, func(r *search.ToolResult) (*float64, *float64) {
					return &r.Score, &r.Components.Recency
				})
				continue
			}
			want, err := one.Prompts(ctx, tenant, search.PromptsRequest{Query: q.Text, Limit: 5})
			require.NoError(t, err)
			got, err := f.s.Prompts(ctx, tenant, search.PromptsRequest{Query: q.Text, Limit: 5})
			require.NoError(t, err)
			require.Equal(t, want.Retrieval, got.Retrieval, q.Text)
			sameResults(t, q.Text, want.Results, got.Results, func(r *search.PromptResult) (*float64, *float64) {
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
// computed from each search's clock, a few milliseconds apart, and must
// agree within 1e-6 (~6 s at the default half-life). clock points at a
// result's score and recency.
func sameResults[R any](t *testing.T, q string, want, got []R, clock func(*R) (score, recency *float64)) {
	t.Helper()
	require.NotEmpty(t, got, q)
	require.Len(t, got, len(want), q)
	for j := range want {
		ws, wr := clock(&want[j])
		gs, gr := clock(&got[j])
		require.InDelta(t, *ws, *gs, 1e-6, "%s: result %d: score", q, j)
		require.InDelta(t, *wr, *gr, 1e-6, "%s: result %d: recency", q, j)
		*ws, *wr, *gs, *gr = 0, 0, 0, 0
		require.Equal(t, want[j], got[j], "%s: result %d", q, j)
	}
}

// statementFirst embeds with lexical only once the pool has lent out a
// connection since *since was read, just before the search: once a
// statement of the search has started. A search that embedded before
// starting any statement waits for the embedding's deadline and answers
// degraded.
type statementFirst struct {
	embed.Lexical
	pool  *pgxpool.Pool
	since *atomic.Int64
}

func (e statementFirst) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	for e.pool.Stat().AcquireCount() == e.since.Load() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return e.Lexical.Embed(ctx, texts)
}

// TestFullTextArmRunsWhileTheQueryIsEmbedded: a hybrid search whose query
// is not in the cache starts its full-text arm before the embedding has
// returned (its vector arm follows as soon as it has), and finds what a
// search finds whose query vector was at hand.
func TestFullTextArmRunsWhileTheQueryIsEmbedded(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	since := &atomic.Int64{}
	e := statementFirst{pool: f.pool, since: since}
	slow, err := search.New(f.pool, search.Embedders{Prompts: e, Tools: e}, search.Options{EmbedTimeout: 5 * time.Second, CacheSize: -1}, testenv.Logger(t))
	require.NoError(t, err)
	ten, w := testenv.Tenant(t), word(t)
	f.prompt(promptSpec{tenant: ten, id: "plan-" + w, content: "Explain a slow SQL query plan " + w})
	f.prompt(promptSpec{tenant: ten, id: "index-" + w, content: "Suggest an index for a slow query " + w})
	f.tool(ten, "explain_"+w, "Explain a slow SQL query plan "+w, time.Time{})
	f.tool(ten, "index_"+w, "Suggest an index for a slow query "+w, time.Time{})

	q := "slow query plan " + w
	since.Store(f.pool.Stat().AcquireCount())
	pr, err := slow.Prompts(ctx, ten, search.PromptsRequest{Query: q})
	require.NoError(t, err)
	require.Equal(t, search.Retrieval{Mode: search.Hybrid}, pr.Retrieval)
	want, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: q})
	require.NoError(t, err)
	require.Equal(t, promptIDs(want, w), promptIDs(pr, w))
	for i := range want.Results {
		require.Equal(t, want.Results[i].Components.Similarity, pr.Results[i].Components.Similarity)
	}

	since.Store(f.pool.Stat().AcquireCount())
	tr, err := slow.Tools(ctx, ten, search.ToolsRequest{Query: q})
	require.NoError(t, err)
	require.Equal(t, search.Retrieval{Mode: search.Hybrid}, tr.Retrieval)
	wantT, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: q})
	require.NoError(t, err)
	require.Equal(t, toolNames(wantT, w), toolNames(tr, w))
	for i := range wantT.Results {
		require.Equal(t, wantT.Results[i].Components.Similarity, tr.Results[i].Components.Similarity)
	}
	require.Equal(t, int64(2), slow.RunsApart())
}
