package search

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
)

func TestTraceLatency(t *testing.T) {
	if os.Getenv("AGENTQ_SEARCH_EXPLAIN") == "" {
		t.Skip()
	}
	pool, _ := benchCorpus(t)
	s, err := New(pool, Embedders{Prompts: embed.Lexical{}, Tools: embed.Lexical{}}, Options{}, zerolog.Nop())
	require.NoError(t, err)
	ctx := context.Background()
	for _, m := range []Mode{Vector, Lexical, Hybrid} {
		var ds []time.Duration
		for i := range 12 {
			start := time.Now()
			_, err := s.WithMode(m).Prompts(ctx, benchTenant, PromptsRequest{Query: benchQueries[i%len(benchQueries)]})
			require.NoError(t, err)
			ds = append(ds, time.Since(start).Round(100*time.Microsecond))
		}
		t.Log(m, ds)
	}
}
