package replay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A stream whose oldest events are gone (max age, max bytes, a purge) would
// rebuild a state that silently misses them: the rebuild refuses, and says
// so, unless told to rebuild from what is left.
func TestRebuildRefusesATruncatedHistory(t *testing.T) {
	n := testenv.StartNATS(t)
	pool := testenv.Pool(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	ctx := context.Background()
	tenant := testenv.Tenant(t)
	pub := bus.NewPublisher(n.JS, reg)
	for i := range 10 {
		ev, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "web_search", "success": i%3 != 0})
		require.NoError(t, err)
		_, err = pub.Publish(ctx, ev)
		require.NoError(t, err)
	}
	s, err := n.JS.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx, jetstream.WithPurgeSequence(4))) // events 1..3 are gone
	target := quality.RebuildTarget(pool, quality.Options{}, testenv.Logger(t))

	_, err = replay.Rebuild(ctx, n.JS, pool, reg, target, replay.Options{Tenant: tenant})
	require.True(t, errors.Is(err, replay.ErrTruncated), "got %v", err)
	require.Contains(t, err.Error(), "starts at sequence 4")
	require.Contains(t, err.Error(), "--allow-truncated")
	ms, err := quality.List(ctx, pool, tenant, "", "")
	require.NoError(t, err)
	require.Empty(t, ms, "a refused rebuild touches nothing")

	rep, err := replay.Rebuild(ctx, n.JS, pool, reg, target, replay.Options{Tenant: tenant, AllowTruncated: true})
	require.NoError(t, err)
	require.Equal(t, 7, rep.Events)
	require.Equal(t, uint64(4), rep.FirstSeq)
	ms, err = quality.List(ctx, pool, tenant, "", "")
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, int64(7), ms[0].TotalCalls, "rebuilt from what is left")
	var rebuilding int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM rebuilds WHERE consumer = 'scorer' AND tenant_id = $1`, tenant).Scan(&rebuilding))
	require.Zero(t, rebuilding, "a finished rebuild leaves no record that would withhold results")
}
