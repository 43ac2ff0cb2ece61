package search_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
)

// AGENTQ_SEARCH_PROMPT_WEIGHTS and AGENTQ_SEARCH_TOOL_WEIGHTS reach the
// score: through config.Load and the indexer's SearchOptions, each result's
// Score is the weighted sum of its Components under the configured weights,
// and the order follows. The corpus has, per kind, an exact match of poor
// quality and a loose match (only the test's word in common with the query)
// of high quality, alike in recency and usage.
func TestConfiguredWeightsReachTheScore(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	now := time.Now()
	created := now.Add(-time.Hour)
	exactText, looseText := "Convert currency amounts between euros and dollars "+w, "Format a calendar date for a locale "+w
	query := "convert currency amounts euros dollars " + w

	exactP := f.prompt(promptSpec{tenant: ten, id: "exact-" + w, content: exactText, createdAt: created})
	looseP := f.prompt(promptSpec{tenant: ten, id: "loose-" + w, content: looseText, createdAt: created})
	f.quality(ten, "prompt", exactP.Hash, 0.3, 20, now, nil)
	f.quality(ten, "prompt", looseP.Hash, 0.95, 20, now, nil)
	f.tool(ten, "exact_"+w, exactText, created)
	f.tool(ten, "loose_"+w, looseText, created)
	f.quality(ten, "tool", "exact_"+w, 0.3, 20, now, nil)
	f.quality(ten, "tool", "loose_"+w, 0.95, 20, now, nil)

	exactFirstP, looseFirstP := []string{ten + "/exact-" + w, ten + "/loose-" + w}, []string{ten + "/loose-" + w, ten + "/exact-" + w}
	exactFirstT, looseFirstT := []string{ten + "/exact_" + w, ten + "/loose_" + w}, []string{ten + "/loose_" + w, ten + "/exact_" + w}
	tests := []struct {
		name                   string
		prompt, tool           string // the variables; "" leaves them unset
		wantPromptW, wantToolW search.Weights
		wantPrompts, wantTools []string
	}{
		{
			name:        "default",
			wantPromptW: search.Weights{Similarity: 0.4, Quality: 0.3, Recency: 0.2, Usage: 0.1},
			wantToolW:   search.Weights{Similarity: 0.5, Quality: 0.35, Recency: 0.15},
			// The exact match's similarity (all of the query's words, a
			// close vector) is far enough ahead of the loose one's to
			// outweigh 0.65 of quality.
			wantPrompts: exactFirstP, wantTools: exactFirstT,
		},
		{
			name: "similarity only", prompt: "1,0,0,0", tool: "1,0,0,0",
			wantPromptW: search.Weights{Similarity: 1}, wantToolW: search.Weights{Similarity: 1},
			wantPrompts: exactFirstP, wantTools: exactFirstT,
		},
		{
			name: "quality heavy", prompt: "0.1,0.8,0.1,0", tool: "0.05,0.95,0,0",
			wantPromptW: search.Weights{Similarity: 0.1, Quality: 0.8, Recency: 0.1},
			wantToolW:   search.Weights{Similarity: 0.05, Quality: 0.95},
			wantPrompts: looseFirstP, wantTools: looseFirstT,
		},
		{
			name: "each kind its own", prompt: "1,0,0,0", tool: "0,1,0,0",
			wantPromptW: search.Weights{Similarity: 1}, wantToolW: search.Weights{Quality: 1},
			wantPrompts: exactFirstP, wantTools: looseFirstT,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Load(func(k string) string {
				return map[string]string{"AGENTQ_SEARCH_PROMPT_WEIGHTS": tt.prompt, "AGENTQ_SEARCH_TOOL_WEIGHTS": tt.tool}[k]
			})
			require.NoError(t, err)
			opts := indexer.SearchOptions(cfg.Search)
			require.Equal(t, tt.wantPromptW, opts.PromptWeights)
			require.Equal(t, tt.wantToolW, opts.ToolWeights)
			s, err := search.New(f.pool, search.Embedders{Prompts: lexical, Tools: lexical}, opts, testenv.Logger(t))
			require.NoError(t, err)

			// The most results: on a shared database other tests' _global
			// rows (some of high quality) rank among this test's.
			pr, err := s.Prompts(ctx, ten, search.PromptsRequest{Query: query, Limit: search.MaxPromptLimit})
			require.NoError(t, err)
			require.Equal(t, tt.wantPrompts, promptIDs(pr, w))
			for i, x := range pr.Results {
				requireWeighted(t, tt.wantPromptW, x.Components, x.Score, pr.Results[max(i-1, 0)].Score, x.Prompt.ID)
			}

			tr, err := s.Tools(ctx, ten, search.ToolsRequest{Query: query, Limit: search.MaxToolLimit})
			require.NoError(t, err)
			require.Equal(t, tt.wantTools, toolNames(tr, w))
			for i, x := range tr.Results {
				requireWeighted(t, tt.wantToolW, x.Components, x.Score, tr.Results[max(i-1, 0)].Score, x.Tool.Name)
			}
		})
	}
}

// requireWeighted checks that a result's score is the weighted sum of its
// components, and no higher than the score before it (prev: its own for
// the first result).
func requireWeighted(t *testing.T, w search.Weights, c search.Components, score, prev float64, name string) {
	t.Helper()
	require.Equal(t, w.Similarity*c.Similarity+w.Quality*c.Quality+w.Recency*c.Recency+w.Usage*c.Usage, score, "%s: %+v", name, c)
	require.LessOrEqual(t, score, prev, "%s: sorted by score", name)
}
