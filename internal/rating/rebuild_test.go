package rating_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/rating"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// Every rating reaches the stream exactly once, whoever makes it and
// whenever, while a rebuild of the tenant runs and publishes nothing:
//
//   - e1 was rated and published before the rebuild; a redelivery to a live
//     copy after the reset rates it again (its inbox row is gone), and the
//     rebuild applies it too: neither publishes it a second time;
//   - e2 (up to the horizon, not yet handled live) and e4 (after the
//     horizon) are rated by a live copy during the rebuild: their results
//     wait for it and are published after;
//   - e3 (up to the horizon) is applied by the rebuild first; the live
//     copy that gets it later sees a duplicate: its result is published
//     after the rebuild all the same.
func TestRatingsDuringARebuildArePublishedOnce(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A short duplicate window, so a result published twice shows in the
	// stream instead of being dropped by JetStream.
	require.NoError(t, bus.EnsureStreams(ctx, n.JS, bus.StreamOptions{Duplicates: 100 * time.Millisecond}))
	pool := ownPool(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	tenant := testenv.Tenant(t)
	consumer := "rater-" + tenant
	settings := testenv.Config(t, "nats://127.0.0.1:1").Rater
	pub := bus.NewPublisher(n.JS, reg)
	out := outbox.New(pool, pub, testenv.Logger(t))
	live, err := rating.New(pool, out, rating.Options{Consumer: consumer, Rater: settings}, testenv.Logger(t))
	require.NoError(t, err)

	var arrived atomic.Int32
	sub, err := n.NC.Subscribe("*.rated."+tenant, func(*nats.Msg) { arrived.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	publish := func(output string) *bus.Delivery {
		ev, err := bus.NewEvent(rating.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "weather", "success": true, "output": output})
		require.NoError(t, err)
		ack, err := pub.Publish(ctx, ev)
		require.NoError(t, err)
		return &bus.Delivery{Event: ev, Tenant: tenant, Subject: "tool.executed." + tenant, StreamSeq: ack.Sequence, Time: time.Now()}
	}
	handle := func(ds ...*bus.Delivery) {
		t.Helper()
		require.Equal(t, make([]error, len(ds)), live.Handle(ctx, ds))
	}
	e1 := publish("Paris: 21°C, sunny")
	handle(e1)
	testenv.Eventually(t, 10*time.Second, func() bool { return arrived.Load() == 1 }, "e1's result published")
	e2, e3 := publish("Error: quota exceeded"), publish("weather in Paris")

	target := rating.RebuildTarget(pool, rating.Options{Consumer: consumer, Rater: settings}, testenv.Logger(t))
	handler := target.Handler
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	target.Handler = func(ctx context.Context, batch []*bus.Delivery) []error {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
		return handler(ctx, batch)
	}
	type result struct {
		rep replay.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := replay.Rebuild(ctx, n.JS, pool, reg, target, replay.Options{Tenant: tenant, Log: testenv.Logger(t)})
		done <- result{rep, err}
	}()
	<-entered // reset, horizon after e3
	handle(e1, e2)
	e4 := publish("42")
	handle(e4)
	sent, err := out.Flush(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, sent, "the relay leaves results alone while their tenant is rebuilt")
	close(release)
	res := <-done
	require.NoError(t, res.err)
	require.Empty(t, res.rep.Skipped)
	require.Equal(t, 3, res.rep.Events)
	require.Equal(t, 3, res.rep.Owed, "e2, e3 and e4 wait for the relay; e1's second rating is dropped")
	handle(e3)
	require.Equal(t, int32(1), arrived.Load(), "nothing published during the rebuild")

	// After the rebuild the relay publishes what waited for it, once.
	sent, err = out.Flush(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 3, sent, "e2, e3 and e4")
	sent, err = out.Flush(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, sent)

	stored, err := rating.List(ctx, pool, tenant)
	require.NoError(t, err)
	require.Len(t, stored, 4)
	got := streamResults(t, n.JS, tenant)
	require.Len(t, got, 4, "one result per rated event in the stream")
	for _, s := range stored {
		evs := got[s.EventID]
		require.Len(t, evs, 1, "the result of %s, exactly once", s.EventID)
		var data struct {
			Rating   float64 `json:"rating"`
			Rater    string  `json:"rater"`
			ToolName string  `json:"tool_name"`
		}
		require.NoError(t, json.Unmarshal(evs[0].Data(), &data))
		require.Equal(t, s.Rating, data.Rating)
		require.Equal(t, s.Rater, data.Rater)
		require.Equal(t, "weather", data.ToolName)
	}
	for _, d := range []*bus.Delivery{e1, e2, e3, e4} {
		require.Contains(t, got, d.Event.ID())
	}
}

// streamResults reads tenant's tool.rated and prompt.rated events from the
// stream, by the id of the event that caused them.
func streamResults(t *testing.T, js jetstream.JetStream, tenant string) map[string][]event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"tool.rated." + tenant, "prompt.rated." + tenant},
	})
	require.NoError(t, err)
	out := map[string][]event.Event{}
	for {
		mb, err := cons.Fetch(100, jetstream.FetchMaxWait(500*time.Millisecond))
		require.NoError(t, err)
		got := 0
		for m := range mb.Messages() {
			got++
			ev, err := bus.Decode(m.Headers(), m.Data())
			require.NoError(t, err)
			out[bus.Causation(ev)] = append(out[bus.Causation(ev)], ev)
		}
		if err := mb.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			require.NoError(t, err)
		}
		if got == 0 {
			return out
		}
	}
}

// ownPool opens a database no other package's tests use: the test's relay
// (outbox.Flush) publishes every row of the outbox, and on a server at
// AGENTQ_DATABASE_URL shared with tests running at the same time it would
// publish and delete theirs. The PGlite dev database is this binary's own.
func ownPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	if os.Getenv("AGENTQ_DATABASE_URL") == "" {
		return testenv.Pool(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := testenv.FreshDatabase(t)
	require.NoError(t, database.Migrate(ctx, dbURL, zerolog.Nop()))
	pool, err := database.Open(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // runs before the DROP
	return pool
}
