package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bench"
	"github.com/agentq/agentq/internal/testenv"
)

// agentq bench client at a small size on the test database: every figure
// is there, each sample counted (not a timing assertion).
func TestBenchClientReportsEveryFigure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an indexer and clients")
	}
	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn"}
	code, out, errOut := run(context.Background(), env, "", "bench", "client", "--requests", "30", "--cold", "5", "--clients", "3", "--moves", "2", "--json")
	require.Equal(t, 0, code, errOut)
	var res bench.ClientResult
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Equal(t, 3, res.Clients)
	require.Equal(t, 2, res.Moves)
	for name, d := range map[string]any{"hit": res.HitP99, "render": res.RenderP99, "miss": res.MissP99, "request": res.RequestP99,
		"cold": res.ColdP99, "move": res.MoveP99, "publish": res.PublishP99, "fan-out": res.FanoutP99} {
		require.NotZero(t, d, name)
	}
	require.GreaterOrEqual(t, res.MoveMax, res.MoveP99)

	code, out, errOut = run(context.Background(), env, "", "bench", "client", "--clients", "0")
	require.Equal(t, 2, code, out)
	require.Contains(t, errOut, "must be positive")
}
