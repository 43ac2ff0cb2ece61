package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/testenv"
)

// startScorer runs the real scorer, as its binary does (app.Start and
// app.Run at the default settings), and returns its stop: cancel, which
// starts the graceful stop, and wait, which waits for it to end and closes
// the dependencies.
func startScorer(t *testing.T, natsURL string) (cancel func(), wait func()) {
	t.Helper()
	cfg := testenv.Config(t, natsURL)
	ctx, cancelCtx := context.WithCancel(context.Background())
	d, err := app.Start(ctx, cfg, "scorer", testenv.Logger(t))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, d, quality.Consumer) }()
	stopped := false
	wait = func() {
		if stopped {
			return
		}
		stopped = true
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Fatal("the scorer did not stop within 60s")
		}
		cctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		require.NoError(t, d.Close(cctx))
	}
	t.Cleanup(func() { cancelCtx(); wait() })
	return cancelCtx, wait
}

// A rolling restart of the scorer while events flow: events published
// during the old copy's graceful stop are all applied by the new copy, none
// is dead-lettered. (Before: 1 of 6 applied, 5 dead-lettered as unsettled.)
func TestScorerRollingRestartLosesNothing(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx := context.Background()
	tenant := testenv.Tenant(t)
	pub := bus.NewPublisher(n.JS, nil)
	send := func() {
		ev, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "rolling", "success": true})
		require.NoError(t, err)
		_, err = pub.Publish(ctx, ev)
		require.NoError(t, err)
	}
	pool := testenv.Pool(t)
	calls := func() int64 {
		m, err := quality.Get(ctx, pool, quality.Key{Tenant: tenant, Target: quality.TargetTool, ID: "rolling"})
		if err != nil || m == nil {
			return 0
		}
		return m.TotalCalls
	}

	cancel, wait := startScorer(t, n.URL)
	send()
	testenv.Eventually(t, 60*time.Second, func() bool { return calls() == 1 }, "the first copy applies an event")
	cancel()
	for range 5 {
		send()
	}
	wait()

	startScorer(t, n.URL)
	testenv.Eventually(t, 60*time.Second, func() bool { return calls() == 6 || len(testenv.DeadLetters(t, n.JS)) > 0 },
		"the second copy applies the events published during the stop")
	require.Empty(t, testenv.DeadLetters(t, n.JS))
	require.Equal(t, int64(6), calls())
}
