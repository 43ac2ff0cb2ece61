package bus_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/testenv"
)

// One tenant's events must wait (its state is being rebuilt) while another
// tenant's events flow: a batch of only deferred events is not an outage
// and does not pause fetching. The deferral lasts 1.5 s; an outage's pause
// (the 3 s backoff here) would hold tenant B past it.
func TestRunnerDeferredTenantDoesNotStallOthers(t *testing.T) {
	n := testenv.StartNATS(t)
	var (
		once         sync.Once
		deferralEnds time.Time
		deferred     = make(chan struct{})
		mu           sync.Mutex
		appliedAt    = map[string]time.Time{}
	)
	got := newHandled()
	h := bus.Each(func(_ context.Context, d *bus.Delivery) error {
		if d.Tenant == "rebuilt" {
			once.Do(func() { deferralEnds = time.Now().Add(1500 * time.Millisecond); close(deferred) })
			if time.Now().Before(deferralEnds) {
				return bus.Deferred(errors.New("tenant rebuilt is being rebuilt"))
			}
		}
		mu.Lock()
		appliedAt[d.Event.ID()] = time.Now()
		mu.Unlock()
		got.add(d)
		return nil
	})
	launch(t, n, h, bus.RunnerOptions{Consumer: "tenants", MaxDeliver: 2, Backoff: []time.Duration{3 * time.Second}})
	var rebuilt []string
	for range 3 {
		m := toolMsg(t, "rebuilt", "waits")
		rebuilt = append(rebuilt, m.Header.Get("ce-id"))
		publish(t, n.JS, m)
	}
	<-deferred
	other := toolMsg(t, "other", "flows")
	publish(t, n.JS, other)
	testenv.Eventually(t, 20*time.Second, func() bool { return got.ids() == 4 }, "every event applied; have %d of 4", got.ids())

	mu.Lock()
	defer mu.Unlock()
	require.True(t, appliedAt[other.Header.Get("ce-id")].Before(deferralEnds),
		"tenant other applied %s after the deferral of tenant rebuilt ended", appliedAt[other.Header.Get("ce-id")].Sub(deferralEnds))
	for _, id := range rebuilt {
		ds := got.of(id)
		require.Len(t, ds, 1)
		require.Zero(t, ds[0].Failures, "a deferral is not a failure")
		require.Greater(t, ds[0].NumDelivered, uint64(1))
	}
	require.Empty(t, testenv.DeadLetters(t, n.JS))
}

// A handler call that runs out of its HandlerTimeout because of one slow
// event is that event's failure, not an outage, however the handler
// classified the expired context (database.Classify calls it Unavailable:
// DeadlineExceeded is a net.Error): the batch is split, the slow event
// isolated and dead-lettered after MaxDeliver, the others applied once.
func TestRunnerIsolatesASlowEvent(t *testing.T) {
	n := testenv.StartNATS(t)
	got := newHandled()
	h := func(ctx context.Context, batch []*bus.Delivery) []error {
		errs := make([]error, len(batch))
		for _, d := range batch {
			if toolName(d) == "slow" {
				<-ctx.Done() // one transaction for the batch: all of it waits
				for i := range errs {
					errs[i] = database.Classify(ctx.Err())
				}
				return errs
			}
		}
		for _, d := range batch {
			got.add(d)
		}
		return errs
	}
	var ok []string
	for i := range 7 {
		name := "fast"
		if i == 3 {
			name = "slow"
		}
		m := toolMsg(t, "acme", name)
		if name == "fast" {
			ok = append(ok, m.Header.Get("ce-id"))
		}
		publish(t, n.JS, m)
	}
	launch(t, n, h, bus.RunnerOptions{Consumer: "slow", BatchSize: 50, MaxDeliver: 2, HandlerTimeout: 300 * time.Millisecond,
		Backoff: []time.Duration{10 * time.Millisecond}})
	dls := waitDeadLetters(t, n.JS, 1)
	require.Len(t, dls, 1)
	require.Equal(t, bus.ReasonMaxDeliver, dls[0].ReasonCode)
	require.Contains(t, dls[0].Reason, "failed 2 times")
	require.Contains(t, dls[0].Reason, "timed out")
	require.Contains(t, string(dls[0].Data), `"slow"`)
	testenv.Eventually(t, 10*time.Second, func() bool { return got.ids() == len(ok) }, "the fast events applied")
	for _, id := range ok {
		require.Len(t, got.of(id), 1, "event %s applied once", id)
	}
}

// A dependency that hangs (a database cut away without a reset: every call
// waits out its timeout) is an outage, not a failure of the events in hand:
// nothing is dead-lettered, however long it lasts.
func TestRunnerHungDependencyIsAnOutage(t *testing.T) {
	for _, events := range []int{1, 3} {
		t.Run(map[int]string{1: "one event", 3: "a batch"}[events], func(t *testing.T) {
			n := testenv.StartNATS(t)
			var calls atomic.Int32
			got := newHandled()
			h := func(ctx context.Context, batch []*bus.Delivery) []error {
				errs := make([]error, len(batch))
				if calls.Add(1) <= 8 {
					<-ctx.Done()
					for i := range errs {
						errs[i] = database.Classify(ctx.Err())
					}
					return errs
				}
				for _, d := range batch {
					got.add(d)
				}
				return errs
			}
			for range events {
				publish(t, n.JS, toolMsg(t, "acme", "patient"))
			}
			launch(t, n, h, bus.RunnerOptions{Consumer: "hung", BatchSize: 50, MaxDeliver: 2, HandlerTimeout: 200 * time.Millisecond,
				Backoff: []time.Duration{10 * time.Millisecond}})
			testenv.Eventually(t, 30*time.Second, func() bool {
				return got.ids() == events || len(testenv.DeadLetters(t, n.JS)) > 0
			}, "the events are applied once the dependency answers")
			require.Empty(t, testenv.DeadLetters(t, n.JS))
			require.Equal(t, events, got.ids())
		})
	}
}
