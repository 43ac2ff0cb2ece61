package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// launch starts a runner and returns its cancel and a wait for Run to
// return, for tests that act between the two (a stop under traffic).
func launch(t *testing.T, n *testenv.NATS, h bus.BatchHandler, opts bus.RunnerOptions) (cancel func(), wait func()) {
	t.Helper()
	reg, err := schemas.Load()
	require.NoError(t, err)
	if opts.Consumer == "" {
		opts.Consumer = "test"
	}
	if len(opts.Subjects) == 0 {
		opts.Subjects = []string{"tool.executed.*"}
	}
	r, err := bus.NewRunner(n.JS, reg, h, opts, testenv.Logger(t), nil)
	require.NoError(t, err)
	ctx, cancelCtx := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	wait = func() {
		once.Do(func() {
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("runner did not stop within 30s")
			}
		})
	}
	t.Cleanup(func() { cancelCtx(); wait() })
	return cancelCtx, wait
}

// handled records, per event id, the deliveries that handled it with
// success, as the handler saw them.
type handled struct {
	mu  sync.Mutex
	got map[string][]bus.Delivery
}

func newHandled() *handled { return &handled{got: map[string][]bus.Delivery{}} }

func (h *handled) add(d *bus.Delivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got[d.Event.ID()] = append(h.got[d.Event.ID()], *d)
}

func (h *handled) ids() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

func (h *handled) of(id string) []bus.Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]bus.Delivery(nil), h.got[id]...)
}

// A rolling restart: events published while a copy stops reach the open
// pull of the stopping copy. It hands them back so the next copy handles
// each one once, on its first or second delivery, with nothing spent and
// nothing dead-lettered. (Before: each was nakked at once into the same
// pull, ~20 times, and looked unsettled to the next copy.)
func TestRunnerStopUnderTrafficLosesAndSpendsNothing(t *testing.T) {
	n := testenv.StartNATS(t)
	got := newHandled()
	h := bus.Each(func(_ context.Context, d *bus.Delivery) error { got.add(d); return nil })
	opts := bus.RunnerOptions{Consumer: "rolling"} // default FetchWait, batch and backoff

	cancel, wait := launch(t, n, h, opts)
	first := toolMsg(t, "acme", "before-stop")
	publish(t, n.JS, first)
	testenv.Eventually(t, 10*time.Second, func() bool { return got.ids() == 1 }, "the first copy handles an event")

	cancel()
	var during []string
	for range 5 {
		m := toolMsg(t, "acme", "during-stop")
		during = append(during, m.Header.Get("ce-id"))
		publish(t, n.JS, m)
	}
	wait()

	launch(t, n, h, opts)
	testenv.Eventually(t, 20*time.Second, func() bool { return got.ids() == 6 }, "every event is handled; have %d of 6", got.ids())
	require.Empty(t, testenv.DeadLetters(t, n.JS), "nothing is dead-lettered")
	for _, id := range during {
		ds := got.of(id)
		require.Len(t, ds, 1, "event %s handled once", id)
		require.LessOrEqual(t, ds[0].NumDelivered, uint64(2), "event %s: handed back once at most", id)
		require.Zero(t, ds[0].Failures, "event %s: no failure spent", id)
	}
}

// A shutdown that interrupts the handler (the grace ran out, the handler
// returned ctx.Err() as asked) is not the event's failure: an event in hand
// across more restarts than MaxDeliver is still handled, not dead-lettered.
func TestRunnerShutdownSpendsNoFailures(t *testing.T) {
	n := testenv.StartNATS(t)
	opts := bus.RunnerOptions{Consumer: "restarts", MaxDeliver: 2, Grace: 200 * time.Millisecond}
	m := toolMsg(t, "acme", "in-hand")
	publish(t, n.JS, m)
	for i := range 3 {
		started := make(chan struct{}, 1)
		cancel, wait := launch(t, n, func(ctx context.Context, batch []*bus.Delivery) []error {
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done() // busy until the grace runs out
			errs := make([]error, len(batch))
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		}, opts)
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatalf("restart %d: the event never reached the handler", i)
		}
		cancel()
		wait()
	}
	got := newHandled()
	launch(t, n, bus.Each(func(_ context.Context, d *bus.Delivery) error { got.add(d); return nil }), opts)
	testenv.Eventually(t, 20*time.Second, func() bool { return got.ids() == 1 }, "the event is handled after the restarts")
	require.Empty(t, testenv.DeadLetters(t, n.JS))
	ds := got.of(m.Header.Get("ce-id"))
	require.Len(t, ds, 1)
	require.Zero(t, ds[0].Failures, "shutdowns are not failures")
	require.Equal(t, uint64(4), ds[0].NumDelivered, "three interrupted deliveries, then this one")
}
