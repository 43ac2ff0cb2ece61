package quality_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// publishCopy stores ev again without Nats-Msg-Id, as a publisher that
// does not set the header (or an outbox republish after the duplicate
// window) does: JetStream keeps a second copy at a later sequence.
func publishCopy(t *testing.T, js jetstream.JetStream, ev event.Event) {
	t.Helper()
	m, err := bus.Encode(ev)
	require.NoError(t, err)
	m.Header.Del("Nats-Msg-Id")
	_, err = js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
}

// everyCopy reads every message of tenant's scorer subjects back from the
// stream, copies included, as deliveries in stream order.
func everyCopy(t *testing.T, js jetstream.JetStream, tenant string) []*bus.Delivery {
	t.Helper()
	reg, err := schemas.Load()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	filter := make([]string, len(quality.Subjects))
	for i, s := range quality.Subjects {
		filter[i] = strings.TrimSuffix(s, "*") + tenant
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: filter})
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	var out []*bus.Delivery
	for pending := info.NumPending; pending > 0; {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		meta, err := m.Metadata()
		require.NoError(t, err)
		pending = meta.NumPending
		d, err := bus.Read(m, reg, 1<<20)
		require.NoError(t, err)
		out = append(out, d)
	}
	return out
}

// recorder keeps the results the scorer stores and publishes.
type recorder struct {
	mu   sync.Mutex
	sent []event.Event
}

func (r *recorder) Queue(*pgx.Batch, ...event.Event) error { return nil }
func (r *recorder) Post(evs []event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, evs...)
	return nil
}

// A copy of an event stored again later in the stream (no Nats-Msg-Id, a
// redrive, an outbox republish after the duplicate window) may be applied
// before the original: the state must still be the stream applied in
// order, where the first occurrence of an id counts, at its sequence.
// The scorer's handler is driven with the stream's real deliveries in
// chosen orders, copies first, and the whole state is compared field by
// field with the stream-order reference after each order.
func TestScorerFilesACopyAtItsOriginalsSequence(t *testing.T) {
	n := testenv.StartNATS(t)
	pool := testenv.Pool(t)
	tenant := testenv.Tenant(t)
	pub := newPublisher(t, n.JS)

	// A hand-made history first, where the order visibly matters: a
	// success, two failures and a rating, then copies of the success and
	// of the rating (the tool's newest event).
	call := func(ok bool) event.Event {
		ev, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "test-agent", map[string]any{"tool_name": "web_search", "success": ok, "latency_ms": 10})
		require.NoError(t, err)
		return ev
	}
	rated, err := bus.NewEvent(quality.TypeToolRated, tenant, "test-agent", map[string]any{"tool_name": "web_search", "rating": 0.25, "rater_kind": "rules", "rater": "rules:v1"})
	require.NoError(t, err)
	first := []event.Event{call(true), call(false), call(false), rated}
	publishAll(t, pub, first)
	publishCopy(t, n.JS, first[0])
	publishCopy(t, n.JS, first[3])

	// Then a workload over several tools and prompts, with a quarter of
	// its events stored again, some twice.
	w := newWorkload(t, tenant, 80, 11)
	publishAll(t, pub, w.events)
	rng := rand.New(rand.NewPCG(12, 12))
	for _, ev := range w.events {
		if rng.IntN(4) == 0 {
			publishCopy(t, n.JS, ev)
			if rng.IntN(3) == 0 {
				publishCopy(t, n.JS, ev)
			}
		}
	}

	all := everyCopy(t, n.JS, tenant)
	want := quality.Compute(conformance.History(t, n.JS, quality.Subjects, tenant))
	require.Greater(t, len(all), len(first)+len(w.events), "the copies are in the stream")

	reversed := make([]*bus.Delivery, len(all))
	for i, d := range all {
		reversed[len(all)-1-i] = d
	}
	orders := []struct {
		name    string
		batches [][]*bus.Delivery
	}{
		{"the hand-made history's copies first", [][]*bus.Delivery{all[4:6], all[1:3], all[:1], all[3:4], all[6:]}},
		{"one by one, newest first", split(reversed, 1)},
		{"in batches of 7, newest first", split(reversed, 7)},
	}
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 99))
		shuffled := append([]*bus.Delivery(nil), all...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		orders = append(orders, struct {
			name    string
			batches [][]*bus.Delivery
		}{fmt.Sprintf("shuffled %d, batches of 1..9", seed), splitRandom(r, shuffled, 9)})
	}

	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			reset(t, pool, tenant)
			rec := &recorder{}
			s := quality.NewScorer(pool, rec, quality.Options{}, testenv.Logger(t))
			for _, b := range o.batches {
				for i, err := range s.Handle(ctx, b) {
					require.NoError(t, err, "event %s at %d", b[i].Event.ID(), b[i].StreamSeq)
				}
			}
			got, err := quality.List(ctx, pool, tenant, "", "")
			require.NoError(t, err)
			require.Equal(t, want, got, "state equals the stream applied in order, every field")

			// Every state version is published once, under the id derived
			// from it.
			ids := map[string]bool{}
			for _, ev := range rec.sent {
				require.False(t, ids[ev.ID()], "result %s published twice", ev.ID())
				ids[ev.ID()] = true
			}
		})
	}
}

func reset(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, tenant string) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, quality.Reset(ctx, tx, "scorer", tenant))
	require.NoError(t, tx.Commit(ctx))
}

func split(ds []*bus.Delivery, n int) [][]*bus.Delivery {
	var out [][]*bus.Delivery
	for i := 0; i < len(ds); i += n {
		out = append(out, ds[i:min(i+n, len(ds))])
	}
	return out
}

func splitRandom(r *rand.Rand, ds []*bus.Delivery, most int) [][]*bus.Delivery {
	var out [][]*bus.Delivery
	for i := 0; i < len(ds); {
		n := 1 + r.IntN(most)
		out = append(out, ds[i:min(i+n, len(ds))])
		i += n
	}
	return out
}

// The same through the runner, as it happens in production: the
// original's first deliveries fail (a transient error, say a database
// hiccup) while its copy, later in the stream, is applied; when the
// original is applied at last the state is still the stream's, in order.
func TestScorerRefilesWhenTheCopyCommitsFirst(t *testing.T) {
	n := testenv.StartNATS(t)
	pool := testenv.Pool(t)
	tenant := testenv.Tenant(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(n.JS, reg)

	w := newWorkload(t, tenant, 120, 13)
	publishAll(t, pub, w.events)
	copySeq := map[string]uint64{} // event id → its copy's sequence
	for i, ev := range w.events {
		if i%3 != 0 {
			continue
		}
		m, err := bus.Encode(ev)
		require.NoError(t, err)
		m.Header.Del("Nats-Msg-Id")
		ack, err := n.JS.PublishMsg(context.Background(), m)
		require.NoError(t, err)
		copySeq[ev.ID()] = ack.Sequence
	}

	var mu sync.Mutex
	copied := map[string]bool{}   // the copy was applied
	original := map[string]bool{} // the original was applied after it
	s := quality.NewScorer(pool, nopSender{}, quality.Options{}, testenv.Logger(t))
	h := func(ctx context.Context, batch []*bus.Delivery) []error {
		errs := make([]error, len(batch))
		var pass []*bus.Delivery
		var at []int
		mu.Lock()
		for i, d := range batch {
			if c, ok := copySeq[d.Event.ID()]; ok && d.StreamSeq != c && !copied[d.Event.ID()] {
				errs[i] = fmt.Errorf("original of %s held until its copy is applied", d.Event.ID())
				continue
			}
			pass, at = append(pass, d), append(at, i)
		}
		mu.Unlock()
		out := s.Handle(ctx, pass)
		mu.Lock()
		defer mu.Unlock()
		for j, d := range pass {
			errs[at[j]] = out[j]
			if out[j] != nil {
				continue
			}
			if c, ok := copySeq[d.Event.ID()]; ok {
				if d.StreamSeq == c {
					copied[d.Event.ID()] = true
				} else {
					original[d.Event.ID()] = true
				}
			}
		}
		return errs
	}
	r, err := bus.NewRunner(n.JS, reg, h, bus.RunnerOptions{Consumer: "scorer", Subjects: quality.Subjects, BatchSize: 10,
		MaxDeliver: 1000, Backoff: []time.Duration{20 * time.Millisecond}}, testenv.Logger(t), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()

	testenv.Eventually(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(original) == len(copySeq)
	}, "every original applied after its copy")
	requireStreamReference(t, n, pool, tenant)
	require.Empty(t, testenv.DeadLetters(t, n.JS))
}

// A copy applied after its original is a duplicate, whatever its data
// says: a copy naming another target (a buggy republisher) changes
// nothing, and leaves no row for the target it names (the handler locks
// every target of a batch before it knows which events are new, creating
// missing rows), whether it comes alone or in the original's batch.
func TestScorerCopyNamingAnotherTargetLeavesNoRow(t *testing.T) {
	n := testenv.StartNATS(t)
	pool := testenv.Pool(t)
	pub := newPublisher(t, n.JS)
	orders := []struct {
		name    string
		batches func(orig, copy *bus.Delivery) [][]*bus.Delivery
	}{
		{"copy alone, after", func(o, c *bus.Delivery) [][]*bus.Delivery { return [][]*bus.Delivery{{o}, {c}} }},
		{"one batch", func(o, c *bus.Delivery) [][]*bus.Delivery { return [][]*bus.Delivery{{o, c}} }},
	}
	for _, tc := range orders {
		t.Run(tc.name, func(t *testing.T) {
			tenant := testenv.Tenant(t)
			orig, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "test-agent", map[string]any{"tool_name": "web_search", "success": true, "latency_ms": 10})
			require.NoError(t, err)
			publishAll(t, pub, []event.Event{orig})
			other := orig.Clone()
			require.NoError(t, other.SetData(event.ApplicationJSON, map[string]any{"tool_name": "elsewhere", "success": false}))
			publishCopy(t, n.JS, other)
			all := everyCopy(t, n.JS, tenant)
			require.Len(t, all, 2)

			s := quality.NewScorer(pool, &recorder{}, quality.Options{}, testenv.Logger(t))
			for _, b := range tc.batches(all[0], all[1]) {
				for i, err := range s.Handle(context.Background(), b) {
					require.NoError(t, err, "event %d of a batch of %d", i, len(b))
				}
			}
			got, err := quality.List(context.Background(), pool, tenant, "", "")
			require.NoError(t, err)
			want := quality.Compute(conformance.History(t, n.JS, quality.Subjects, tenant))
			require.Len(t, want, 1, "the reference has one target: the original's")
			require.Equal(t, quality.Key{Tenant: tenant, Target: quality.TargetTool, ID: "web_search"}, want[0].Key)
			require.Equal(t, int64(1), want[0].Successes)
			require.Equal(t, want, got, "state equals the stream applied in order, every field")
		})
	}
}
