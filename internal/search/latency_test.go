package search

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
)

// TestLatencyPercentiles times prompt searches over the benchmark corpus
// (benchCorpus; AGENTQ_SEARCH_BENCH_N rows) per mode: the bench queries and
// the queries of prompts-large.json, each run once after a warm-up round,
// reported as p50, p90, p99 and max. A measurement, not a check:
// AGENTQ_SEARCH_LATENCY=1 runs it; measure on native Postgres.
func TestLatencyPercentiles(t *testing.T) {
	if os.Getenv("AGENTQ_SEARCH_LATENCY") == "" {
		t.Skip("set AGENTQ_SEARCH_LATENCY=1 to measure")
	}
	pool, n := benchCorpus(t)
	s, err := New(pool, Embedders{Prompts: embed.Lexical{}, Tools: embed.Lexical{}}, Options{}, zerolog.Nop())
	require.NoError(t, err)
	set, err := LoadEvalSet("../embed/testdata/prompts-large.json", "")
	require.NoError(t, err)
	queries := slices.Clone(benchQueries)
	for _, q := range set.Queries {
		queries = append(queries, q.Text)
	}
	ctx := context.Background()
	for _, m := range []Mode{Lexical, Hybrid} {
		sm := s.WithMode(m)
		for _, q := range queries[:10] { // warm-up
			_, err := sm.Prompts(ctx, benchTenant, PromptsRequest{Query: q})
			require.NoError(t, err)
		}
		var ds []time.Duration
		for round := 0; round < 2; round++ {
			for _, q := range queries {
				start := time.Now()
				_, err := sm.Prompts(ctx, benchTenant, PromptsRequest{Query: q})
				require.NoError(t, err)
				ds = append(ds, time.Since(start))
			}
		}
		slices.Sort(ds)
		pct := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))].Round(10 * time.Microsecond) }
		t.Logf("%d prompts, %s, %d searches: p50 %s p90 %s p99 %s max %s", n, m, len(ds), pct(0.5), pct(0.9), pct(0.99), ds[len(ds)-1].Round(10*time.Microsecond))
	}
}
