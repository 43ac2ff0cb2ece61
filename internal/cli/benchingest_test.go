package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bench"
)

// bench ingest measures every phase and reports each rate and ratio.
func TestBenchIngestSmoke(t *testing.T) {
	code, out, errOut := run(context.Background(), map[string]string{}, "", "bench", "ingest", "--events", "400", "--batch", "50", "--rounds", "2", "--concurrency", "2", "--json")
	require.Equal(t, 0, code, errOut)
	var res bench.IngestResult
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Equal(t, bench.IngestOptions{Events: 400, Batch: 50, Rounds: 2, Concurrency: 2}, res.IngestOptions)
	for name, rate := range map[string]float64{"raw": res.Raw, "publish": res.Publish, "async": res.PublishAsync, "ingest": res.Ingest} {
		require.Positive(t, rate, name)
	}
	require.Len(t, res.RoundRatios, 2)
	require.Positive(t, res.IngestP99)

	code, out, errOut = run(context.Background(), map[string]string{}, "", "bench", "ingest", "--events", "100", "--batch", "100", "--rounds", "1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "agentq ingest: HTTP POST of a CloudEvents batch, answered")
	require.Contains(t, out, "ingest / raw")
}
