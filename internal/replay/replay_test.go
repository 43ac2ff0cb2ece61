package replay_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/outbox"
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

// publishCalls publishes n tool calls of tenant and returns them.
func publishCalls(t *testing.T, js jetstream.JetStream, reg *schemas.Registry, tenant string, n int) []event.Event {
	t.Helper()
	pub := bus.NewPublisher(js, reg)
	evs := make([]event.Event, n)
	for i := range n {
		ev, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "test", map[string]any{
			"tool_name": []string{"web_search", "calculator", "sql_query"}[i%3], "success": i%4 != 0, "latency_ms": 10 * i,
		})
		require.NoError(t, err)
		_, err = pub.PublishAsync(ev)
		require.NoError(t, err)
		evs[i] = ev
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, pub.Flush(ctx))
	return evs
}

// waitApplied waits until consumer's inbox holds n events of tenant.
func waitApplied(t *testing.T, pool *pgxpool.Pool, consumer, tenant string, n int) {
	t.Helper()
	count := func() int {
		var got int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM inbox WHERE consumer = $1 AND tenant_id = $2`, consumer, tenant).Scan(&got))
		return got
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return count() >= n }, "%s applied %d of %d events", consumer, count(), n)
	require.Equal(t, n, count())
}

func rebuilding(t *testing.T, pool *pgxpool.Pool, consumer, tenant string) bool {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM rebuilds WHERE consumer = $1 AND tenant_id = $2`, consumer, tenant).Scan(&n))
	return n > 0
}

// A database outage in the middle of a rebuild, longer than any retry
// budget, is waited out: the rebuild completes with every event applied
// and the state live processing gave, and reports nothing skipped.
func TestRebuildWaitsOutADatabaseOutage(t *testing.T) {
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	tenant := testenv.Tenant(t)
	live := testenv.StartProcess(t, testenv.Config(t, n.URL), "scorer", quality.Consumer)
	pool := live.Deps.Pool
	evs := publishCalls(t, n.JS, reg, tenant, 300)
	waitApplied(t, pool, "scorer", tenant, len(evs))
	want, err := quality.List(context.Background(), pool, tenant, "", "")
	require.NoError(t, err)
	require.Len(t, want, 3)

	// The rebuild reaches the database through a proxy that goes down
	// during its second batch, for longer than the retries of the old
	// budget (10 attempts) take at this RetryWait.
	dbURL := testenv.DatabaseURL(t)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	proxy := testenv.StartProxy(t, u.Host)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cut, err := database.Open(ctx, proxy.RewriteURL(t, dbURL))
	require.NoError(t, err)
	defer cut.Close()
	target := quality.RebuildTarget(cut, quality.Options{}, testenv.Logger(t))
	handler := target.Handler
	down := make(chan struct{})
	var calls atomic.Int32
	target.Handler = func(ctx context.Context, batch []*bus.Delivery) []error {
		if calls.Add(1) == 2 {
			proxy.Down()
			close(down)
		}
		return handler(ctx, batch)
	}
	type result struct {
		rep replay.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := replay.Rebuild(ctx, n.JS, cut, reg, target, replay.Options{
			Tenant: tenant, BatchSize: 50, RetryWait: 50 * time.Millisecond, Log: testenv.Logger(t),
		})
		done <- result{rep, err}
	}()
	<-down
	const outage = 5 * time.Second // the old budget: 45 x RetryWait = 2.25 s of waits
	time.Sleep(outage)             // the outage itself
	proxy.Up(t)
	res := <-done
	require.NoError(t, res.err)
	require.Empty(t, res.rep.Skipped, "an outage skips nothing")
	require.Equal(t, len(evs), res.rep.Events)
	got, err := quality.List(context.Background(), pool, tenant, "", "")
	require.NoError(t, err)
	require.Equal(t, want, got, "the rebuilt state is the live state")
	require.False(t, rebuilding(t, pool, "scorer", tenant))
}

// failing wraps h so that the events named in ids fail, every time, with
// a transient error of their own (not an outage).
func failing(h bus.BatchHandler, ids ...string) bus.BatchHandler {
	return func(ctx context.Context, batch []*bus.Delivery) []error {
		errs := make([]error, len(batch))
		var rest []*bus.Delivery
		var at []int
		for i, d := range batch {
			if slices.Contains(ids, d.Event.ID()) {
				errs[i] = fmt.Errorf("event %s: injected failure", d.Event.ID())
				continue
			}
			rest, at = append(rest, d), append(at, i)
		}
		if len(rest) > 0 {
			for j, err := range h(ctx, rest) {
				errs[at[j]] = err
			}
		}
		return errs
	}
}

// An event that keeps failing in a rebuild for its own reasons is skipped
// only when the live consumer dead-lettered it too (the rebuild looks in
// AGENTQ_DLQ); otherwise the rebuild fails, says which event, and keeps
// its record, so results stay withheld until a re-run completes it.
func TestRebuildSkipsOnlyWhatTheLiveConsumerDeadLettered(t *testing.T) {
	n := testenv.StartNATS(t)
	pool := testenv.Pool(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	tenant := testenv.Tenant(t)
	consumer := "scorer-" + tenant
	evs := publishCalls(t, n.JS, reg, tenant, 30)
	poison, healthy := evs[7].ID(), evs[19].ID()

	// Live: the poison event fails every time and is dead-lettered.
	live := quality.NewScorer(pool, outbox.Discard, quality.Options{Consumer: consumer}, testenv.Logger(t))
	runner, err := bus.NewRunner(n.JS, reg, failing(live.Handle, poison), bus.RunnerOptions{
		Consumer: consumer, Subjects: quality.Subjects, MaxDeliver: 2, Backoff: []time.Duration{10 * time.Millisecond},
	}, testenv.Logger(t), nil)
	require.NoError(t, err)
	rctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- runner.Run(rctx) }()
	waitApplied(t, pool, consumer, tenant, len(evs)-1)
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, dl := range testenv.DeadLetters(t, n.JS) {
			if dl.EventID == poison && dl.Consumer == consumer {
				return true
			}
		}
		return false
	}, "the live consumer dead-lettered the poison event")
	stop()
	require.NoError(t, <-stopped)
	want, err := quality.List(context.Background(), pool, tenant, "", "")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rebuild := func(fail ...string) (replay.Report, error) {
		target := quality.RebuildTarget(pool, quality.Options{Consumer: consumer}, testenv.Logger(t))
		target.Handler = failing(target.Handler, fail...)
		return replay.Rebuild(ctx, n.JS, pool, reg, target, replay.Options{
			Tenant: tenant, BatchSize: 10, RetryWait: 10 * time.Millisecond, Log: testenv.Logger(t),
		})
	}

	rep, err := rebuild(poison)
	require.NoError(t, err)
	require.Equal(t, map[string]int{bus.ReasonMaxDeliver: 1}, rep.Skipped, "dead-lettered live too")
	got, err := quality.List(context.Background(), pool, tenant, "", "")
	require.NoError(t, err)
	require.Equal(t, want, got)

	_, err = rebuild(poison, healthy)
	require.Error(t, err, "an event the live consumer applied cannot be skipped")
	require.Contains(t, err.Error(), healthy)
	require.Contains(t, err.Error(), "not dead-lettered")
	require.Contains(t, err.Error(), "run it again")
	require.True(t, rebuilding(t, pool, consumer, tenant), "the record stays: results stay withheld")

	rep, err = rebuild(poison)
	require.NoError(t, err, "a re-run repairs it")
	require.Equal(t, map[string]int{bus.ReasonMaxDeliver: 1}, rep.Skipped)
	got, err = quality.List(context.Background(), pool, tenant, "", "")
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.False(t, rebuilding(t, pool, consumer, tenant))
}

// A stream deleted and created again starts at sequence 1 and holds only
// new events, while the consumer's state came from the old one: the
// rebuild refuses, and says so, unless told to rebuild from what is
// left. A tenant whose state all came from the new stream rebuilds.
func TestRebuildRefusesARecreatedStream(t *testing.T) {
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	cfg := testenv.Config(t, n.URL)
	old, fresh := testenv.Tenant(t), testenv.Tenant(t)
	live := testenv.StartProcess(t, cfg, "scorer", quality.Consumer)
	pool := testenv.Pool(t)
	publishCalls(t, n.JS, reg, old, 30)
	waitApplied(t, pool, "scorer", old, 30)
	live.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, n.JS.DeleteStream(ctx, bus.StreamName))
	require.NoError(t, bus.EnsureStreams(ctx, n.JS, bus.StreamOptions{}))
	live = testenv.StartProcess(t, cfg, "scorer", quality.Consumer)
	defer live.Stop()
	publishCalls(t, n.JS, reg, old, 5)
	publishCalls(t, n.JS, reg, fresh, 5)
	waitApplied(t, pool, "scorer", old, 35)
	waitApplied(t, pool, "scorer", fresh, 5)
	before, err := quality.List(ctx, pool, old, "", "")
	require.NoError(t, err)
	target := quality.RebuildTarget(pool, quality.Options{}, testenv.Logger(t))

	rep, err := replay.Rebuild(ctx, n.JS, pool, reg, target, replay.Options{Tenant: fresh})
	require.NoError(t, err, "the fresh tenant's state all came from this stream")
	require.Equal(t, 5, rep.Events)

	_, err = replay.Rebuild(ctx, n.JS, pool, reg, target, replay.Options{Tenant: old})
	require.True(t, errors.Is(err, replay.ErrRecreated), "got %v", err)
	require.Contains(t, err.Error(), "was created at")
	require.Contains(t, err.Error(), "--allow-truncated")
	after, err := quality.List(ctx, pool, old, "", "")
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused rebuild touches nothing")
	require.False(t, rebuilding(t, pool, "scorer", old))

	rep, err = replay.Rebuild(ctx, n.JS, pool, reg, target, replay.Options{Tenant: old, AllowTruncated: true})
	require.NoError(t, err)
	require.Equal(t, 5, rep.Events)
	after, err = quality.List(ctx, pool, old, "", "")
	require.NoError(t, err)
	var calls int64
	for _, m := range after {
		calls += m.TotalCalls
	}
	require.Equal(t, int64(5), calls, "rebuilt from what the stream holds")
}
