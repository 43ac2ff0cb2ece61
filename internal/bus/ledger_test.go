package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
)

// ledgerStream is the stream behind the delivery ledger bucket.
const ledgerStream = "KV_" + bus.LedgerBucket

// A dependency outage far longer than MaxUnsettled deliveries, while the
// delivery ledger itself fails in the ways a real one can: the bucket gone
// for a while, its records lost, its writes refused while reads still work.
// The ledger failing is not evidence that the event killed anyone: the event
// is applied once the outage ends, never dead-lettered, no failure spent.
func TestRunnerLongOutageSurvivesLedgerFaults(t *testing.T) {
	ctx := context.Background()
	const outage = 30 // deliveries; MaxUnsettled is 8
	tests := []struct {
		name   string
		faults map[int32]func(t *testing.T, js jetstream.JetStream) // by attempt
	}{
		{"bucket gone for a while", map[int32]func(*testing.T, jetstream.JetStream){
			5: func(t *testing.T, js jetstream.JetStream) {
				require.NoError(t, js.DeleteKeyValue(ctx, bus.LedgerBucket))
			},
			20: func(t *testing.T, js jetstream.JetStream) {
				require.NoError(t, bus.EnsureStreams(ctx, js, bus.StreamOptions{}))
			},
		}},
		{"records expired", map[int32]func(*testing.T, jetstream.JetStream){
			// The record of delivery 12 expires during its 2.5 s backoff.
			12: func(t *testing.T, js jetstream.JetStream) { ledgerMaxAge(t, js, time.Second) },
			13: func(t *testing.T, js jetstream.JetStream) { ledgerMaxAge(t, js, 7*24*time.Hour) },
		}},
		{"writes refused, reads served", map[int32]func(*testing.T, jetstream.JetStream){
			3:  func(t *testing.T, js jetstream.JetStream) { ledgerSubjects(t, js, "elsewhere.>") },
			25: func(t *testing.T, js jetstream.JetStream) { ledgerSubjects(t, js, "$KV."+bus.LedgerBucket+".>") },
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := testenv.StartNATS(t)
			var attempts atomic.Int32
			got := newHandled()
			h := bus.Each(func(_ context.Context, d *bus.Delivery) error {
				k := attempts.Add(1)
				if f := tc.faults[k]; f != nil {
					f(t, n.JS)
				}
				if k <= outage {
					return bus.Unavailable(errors.New("connection refused"))
				}
				got.add(d)
				return nil
			})
			backoff := make([]time.Duration, 12, 13)
			for i := range backoff {
				backoff[i] = 5 * time.Millisecond
			}
			backoff[11] = 2500 * time.Millisecond // after the 12th outage delivery
			backoff = append(backoff, 5*time.Millisecond)
			launch(t, n, h, bus.RunnerOptions{Consumer: "ledger", MaxDeliver: 2, Backoff: backoff})
			m := toolMsg(t, "acme", "outage")
			publish(t, n.JS, m)
			testenv.Eventually(t, 60*time.Second, func() bool {
				return got.ids() == 1 || len(testenv.DeadLetters(t, n.JS)) > 0
			}, "the event is applied after %d outage deliveries (attempts so far %d)", outage, attempts.Load())
			require.Empty(t, testenv.DeadLetters(t, n.JS), "an outage never dead-letters")
			ds := got.of(m.Header.Get("ce-id"))
			require.Len(t, ds, 1)
			require.Zero(t, ds[0].Failures)
			require.Equal(t, uint64(outage+1), ds[0].NumDelivered)
		})
	}
}

// ledgerSubjects points the ledger's stream at other subjects: writes to
// the bucket find no stream while reads of what it holds still work, as
// when a bucket's leader is lost and its replicas still serve reads.
func ledgerSubjects(t *testing.T, js jetstream.JetStream, subject string) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, ledgerStream)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.Subjects = []string{subject}
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
}

// ledgerMaxAge sets how long the ledger keeps a record.
func ledgerMaxAge(t *testing.T, js jetstream.JetStream, age time.Duration) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, ledgerStream)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxAge, cfg.Duplicates = age, min(age, 2*time.Minute)
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
}

// The ledger's records belong to one stream: a record left by an event of
// a stream that was deleted and created again (same name, sequences
// starting over) is never read as the record of the new stream's event at
// the same sequence.
func TestRunnerLedgerDoesNotOutliveARecreatedStream(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx := context.Background()
	// The old stream's seq 1 fails twice and is stopped with a record of two
	// failures (the next retry an hour away).
	var failed atomic.Int32
	cancel, wait := launch(t, n, bus.Each(func(context.Context, *bus.Delivery) error {
		failed.Add(1)
		return errors.New("still failing")
	}), bus.RunnerOptions{Consumer: "recreated", MaxDeliver: 3, Backoff: []time.Duration{10 * time.Millisecond, time.Hour}})
	old := toolMsg(t, "acme", "old")
	publish(t, n.JS, old)
	testenv.Eventually(t, 10*time.Second, func() bool { return failed.Load() == 2 }, "two failures")
	cancel() // the batch in hand is settled, and its record written, before Run returns
	wait()

	require.NoError(t, n.JS.DeleteStream(ctx, bus.StreamName))
	require.NoError(t, bus.EnsureStreams(ctx, n.JS, bus.StreamOptions{}))
	fresh := toolMsg(t, "acme", "new")
	ack, err := n.JS.PublishMsg(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, uint64(1), ack.Sequence, "the new stream starts over")

	// The new event's first delivery ends with no decision (a copy killed
	// while holding it), so the second delivery reads the ledger.
	cons, err := n.JS.CreateOrUpdateConsumer(ctx, bus.StreamName, jetstream.ConsumerConfig{
		Durable: "recreated", FilterSubjects: []string{"tool.executed.*"}, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 300 * time.Millisecond, MaxDeliver: -1,
	})
	require.NoError(t, err)
	mb, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	for range mb.Messages() {
	}
	require.NoError(t, mb.Error())

	got := newHandled()
	launch(t, n, bus.Each(func(_ context.Context, d *bus.Delivery) error { got.add(d); return nil }),
		bus.RunnerOptions{Consumer: "recreated", MaxDeliver: 3, AckWait: 300 * time.Millisecond})
	testenv.Eventually(t, 10*time.Second, func() bool { return got.ids() == 1 }, "the new event is handled")
	ds := got.of(fresh.Header.Get("ce-id"))
	require.Len(t, ds, 1)
	require.Equal(t, uint64(2), ds[0].NumDelivered)
	require.Zero(t, ds[0].Failures, "the old stream's record of seq 1 is not this event's")
	require.Empty(t, testenv.DeadLetters(t, n.JS))
}

// A message whose deliveries keep ending with no decision (the process
// holding it is killed each time: its connection cut mid-handling) is
// dead-lettered before the handler sees it again.
func TestRunnerDeadLettersAMessageThatKeepsKillingTheProcess(t *testing.T) {
	n := testenv.StartNATS(t)
	m := toolMsg(t, "acme", "killer")
	publish(t, n.JS, m)
	opts := bus.RunnerOptions{Consumer: "killed", MaxUnsettled: 2, AckWait: 300 * time.Millisecond, Grace: 100 * time.Millisecond}
	for i := range 3 {
		nc, err := nats.Connect(n.URL)
		require.NoError(t, err)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		started := make(chan struct{}, 1)
		cancel, wait := launch(t, &testenv.NATS{Server: n.Server, URL: n.URL, NC: nc, JS: js},
			func(ctx context.Context, batch []*bus.Delivery) []error {
				select {
				case started <- struct{}{}:
				default:
				}
				<-ctx.Done()
				errs := make([]error, len(batch))
				for i := range errs {
					errs[i] = ctx.Err()
				}
				return errs
			}, opts)
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatalf("kill %d: the event never reached the handler", i)
		}
		nc.Close() // the kill: nothing this copy does reaches the server any more
		cancel()
		wait()
	}
	var handled atomic.Int32
	launch(t, n, bus.Each(func(context.Context, *bus.Delivery) error { handled.Add(1); return nil }), opts)
	dls := waitDeadLetters(t, n.JS, 1)
	require.Equal(t, bus.ReasonUnsettled, dls[0].ReasonCode)
	require.Contains(t, dls[0].Reason, "delivered 4 times")
	require.Equal(t, m.Header.Get("ce-id"), dls[0].EventID)
	require.Zero(t, handled.Load(), "the handler never saw it again")
}
