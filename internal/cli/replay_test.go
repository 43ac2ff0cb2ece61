package cli_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// A stream deleted and created again holds none of the events the
// scorer's state came from: agentq replay refuses, exits non-zero, says
// why and what to do, and touches nothing; told --allow-truncated, it
// rebuilds from what the stream holds.
func TestReplayRefusesARecreatedStream(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(n.JS, reg)
	tenant := testenv.Tenant(t)
	publish := func(count int) {
		for i := range count {
			ev, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "web_search", "success": i%2 == 0})
			require.NoError(t, err)
			_, err = pub.Publish(ctx, ev)
			require.NoError(t, err)
		}
	}
	live := testenv.StartProcess(t, testenv.Config(t, n.URL), "scorer", quality.Consumer)
	pool := testenv.Pool(t)
	publish(10)
	testenv.Eventually(t, 60*time.Second, func() bool {
		ms, err := quality.List(ctx, pool, tenant, "", "")
		return err == nil && len(ms) == 1 && ms[0].TotalCalls == 10
	}, "the scorer applied 10 calls")
	before, err := quality.List(ctx, pool, tenant, "", "")
	require.NoError(t, err)
	live.Stop()
	require.NoError(t, n.JS.DeleteStream(ctx, bus.StreamName))
	require.NoError(t, bus.EnsureStreams(ctx, n.JS, bus.StreamOptions{}))
	publish(3)

	env := map[string]string{"AGENTQ_NATS_URL": n.URL, "AGENTQ_DATABASE_URL": testenv.DatabaseURL(t)}
	code, _, errOut := run(ctx, env, "", "replay", "--consumer", "scorer", "--tenant", tenant, "--yes")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "AGENTQ was created at")
	require.Contains(t, errOut, "--allow-truncated")
	after, err := quality.List(ctx, pool, tenant, "", "")
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused rebuild touches nothing")

	code, out, errOut := run(ctx, env, "", "replay", "--consumer", "scorer", "--tenant", tenant, "--yes", "--allow-truncated")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "scorer rebuilt for tenant "+tenant+": 3 events")
	after, err = quality.List(ctx, pool, tenant, "", "")
	require.NoError(t, err)
	require.Len(t, after, 1)
	require.Equal(t, int64(3), after[0].TotalCalls)
}
