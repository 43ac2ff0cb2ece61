package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
)

func toolName(d *bus.Delivery) string {
	var data struct {
		ToolName string `json:"tool_name"`
	}
	_ = json.Unmarshal(d.Event.Data(), &data)
	return data.ToolName
}

// Five outage deliveries and then one ordinary failure must not
// dead-letter an event whose budget is two failures: outages are not the
// event's failures.
func TestRunnerCountsFailuresNotDeliveries(t *testing.T) {
	n := testenv.StartNATS(t)
	var attempts atomic.Int32
	var applied atomic.Int32
	h := bus.Each(func(_ context.Context, d *bus.Delivery) error {
		switch k := attempts.Add(1); {
		case k <= 5:
			return bus.Unavailable(errors.New("connection refused"))
		case k == 6:
			return errors.New("deadlock detected (40P01)")
		}
		applied.Add(1)
		return nil
	})
	startRunner(t, n, h, bus.RunnerOptions{MaxDeliver: 2, Backoff: []time.Duration{10 * time.Millisecond}})
	publish(t, n.JS, toolMsg(t, "acme", "outage-then-deadlock"))
	testenv.Eventually(t, 20*time.Second, func() bool { return applied.Load() == 1 }, "event applied after the outage and one failure")
	require.Equal(t, int32(7), attempts.Load(), "5 outages + 1 failure + 1 success")
	require.Empty(t, testenv.DeadLetters(t, n.JS))
}

// A handler slower than AckWait must not see its buffered messages
// redelivered: everything the runner holds is kept alive with InProgress.
// Two batches of two: the first is in hand for 1.5 AckWaits while the
// second waits, held, and is then in hand as long. The runner tells the
// server three times per AckWait; AckWait is long enough (3s) that a
// loaded machine stalling the runner for a second does not miss all of
// them.
func TestRunnerKeepsHeldMessagesAlive(t *testing.T) {
	n := testenv.StartNATS(t)
	const ackWait = 3 * time.Second
	var mu sync.Mutex
	calls := map[string]int{}
	var maxDelivered uint64
	h := func(ctx context.Context, batch []*bus.Delivery) []error {
		// Slow work, as an LLM call is: 1.5 AckWaits per batch.
		select {
		case <-time.After(ackWait * 3 / 2):
		case <-ctx.Done():
		}
		mu.Lock()
		defer mu.Unlock()
		for _, d := range batch {
			calls[d.Event.ID()]++
			maxDelivered = max(maxDelivered, d.NumDelivered)
		}
		return nil
	}
	for range 4 {
		publish(t, n.JS, toolMsg(t, "acme", "slow"))
	}
	startRunner(t, n, h, bus.RunnerOptions{Consumer: "slow", BatchSize: 2, AckWait: ackWait, HandlerTimeout: 4 * ackWait})
	testenv.Eventually(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 4
	}, "all four events handled")
	cons, err := n.JS.Consumer(context.Background(), bus.StreamName, "slow")
	require.NoError(t, err)
	testenv.Eventually(t, 5*time.Second, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0
	}, "everything acked")
	info, err := cons.Info(context.Background())
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	for id, c := range calls {
		require.Equal(t, 1, c, "event %s handled once", id)
	}
	require.Equal(t, uint64(1), maxDelivered, "no event was redelivered while held")
	require.Zero(t, info.NumRedelivered, "the server redelivered nothing")
}

// A transactional handler fails the whole batch because of one event (a NUL
// byte in Postgres, a 3.8 KB id over an index limit): the runner splits the
// batch and only the culprit is dead-lettered. Valid events are applied once.
func TestRunnerIsolatesTheCulpritOfAFailedBatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fail   func() error
		reason string
	}{
		{"permanent batch error", func() error { return bus.Permanentf("invalid byte sequence for encoding UTF8: 0x00 (22021)") }, bus.ReasonPermanent},
		{"transient batch error", func() error { return errors.New("index row size exceeds maximum (54000)") }, bus.ReasonMaxDeliver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testenv.StartNATS(t)
			var mu sync.Mutex
			applied := map[string]int{}
			calls := 0
			h := func(_ context.Context, batch []*bus.Delivery) []error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				errs := make([]error, len(batch))
				for _, d := range batch {
					if toolName(d) == "poison" {
						err := tc.fail() // the whole transaction fails
						for i := range errs {
							errs[i] = err
						}
						return errs
					}
				}
				for _, d := range batch {
					applied[d.Event.ID()]++
				}
				return errs
			}
			var valid []string
			for i := range 11 {
				name := "ok"
				if i == 4 {
					name = "poison"
				}
				m := toolMsg(t, "acme", name)
				if name == "ok" {
					valid = append(valid, m.Header.Get("ce-id"))
				}
				publish(t, n.JS, m)
			}
			startRunner(t, n, h, bus.RunnerOptions{BatchSize: 50, MaxDeliver: 3, Backoff: []time.Duration{10 * time.Millisecond}})
			dls := waitDeadLetters(t, n.JS, 1)
			require.Len(t, dls, 1)
			require.Equal(t, tc.reason, dls[0].ReasonCode)
			require.Contains(t, string(dls[0].Data), "poison")
			testenv.Eventually(t, 10*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(applied) == len(valid)
			}, "every valid event applied")
			mu.Lock()
			defer mu.Unlock()
			for _, id := range valid {
				require.Equal(t, 1, applied[id], "valid event %s applied once", id)
			}
		})
	}
}

// An invalid event that fits NATS's max payload but whose dead letter (the
// original plus the Agentq-Dlq-* headers) would not is dead-lettered by
// reference to its place in AGENTQ, not nakked forever.
func TestRunnerDeadLettersAnOversizedMessageByReference(t *testing.T) {
	n := testenv.StartNATS(t)
	limit := int(n.NC.MaxPayload())
	m := nats.NewMsg("tool.executed.acme")
	m.Header.Set("ce-specversion", "1.0")
	m.Header.Set("ce-id", "huge-1")
	m.Header.Set("ce-source", "js-agent")
	m.Header.Set("ce-type", "agentq.tool.executed.v1")
	m.Header.Set("ce-tenantid", "acme")
	m.Header.Set("content-type", "application/json")
	m.Data = []byte(`{"tool_name":"x","success":true,"output":"` + strings.Repeat("a", limit-300) + `"}`)
	ack, err := n.JS.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	startRunner(t, n, bus.Each(func(context.Context, *bus.Delivery) error { return nil }), bus.RunnerOptions{})
	dls := waitDeadLetters(t, n.JS, 1)
	dl := dls[0]
	require.Equal(t, bus.ReasonOversize, dl.ReasonCode)
	require.True(t, dl.ByReference)
	require.Empty(t, dl.Data)
	require.Equal(t, ack.Sequence, dl.StreamSeq)
	require.Equal(t, "huge-1", dl.EventID)
	s, err := n.JS.Stream(context.Background(), bus.StreamName)
	require.NoError(t, err)
	orig, err := s.GetMsg(context.Background(), dl.StreamSeq)
	require.NoError(t, err)
	require.Equal(t, m.Data, orig.Data, "the reference leads to the original")
}

// Stopping hands back every message fetched but not handled at once, so
// another copy takes them without waiting for AckWait (a minute here).
func TestRunnerStopNaksWhatItHolds(t *testing.T) {
	n := testenv.StartNATS(t)
	for range 40 {
		publish(t, n.JS, toolMsg(t, "acme", "held"))
	}
	started := make(chan struct{}, 1)
	opts := bus.RunnerOptions{Consumer: "holder", BatchSize: 10, AckWait: time.Minute, Grace: 300 * time.Millisecond,
		Backoff: []time.Duration{10 * time.Millisecond}}
	// The first copy takes a batch and holds it until its grace runs out;
	// meanwhile it has fetched the next batch.
	stop := startRunner(t, n, func(ctx context.Context, batch []*bus.Delivery) []error {
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
	<-started
	stop()
	var mu sync.Mutex
	handled := map[string]int{}
	startRunner(t, n, bus.Each(func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		handled[d.Event.ID()]++
		return nil
	}), opts)
	testenv.Eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 40
	}, "the second copy handles all 40 events well before the first copy's AckWait")
}

func TestForEachBoundsConcurrencyIsolatesPanicsAndTimesOut(t *testing.T) {
	batch := make([]*bus.Delivery, 12)
	for i := range batch {
		batch[i] = &bus.Delivery{Event: newToolEvent(t, "acme", map[string]any{"tool_name": fmt.Sprint(i), "success": true})}
	}
	var running, peak atomic.Int32
	out, errs := bus.ForEach(context.Background(), batch, 3, 200*time.Millisecond, func(ctx context.Context, d *bus.Delivery) (string, error) {
		now := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if now <= p || peak.CompareAndSwap(p, now) {
				break
			}
		}
		switch toolName(d) {
		case "5":
			panic("model client exploded")
		case "7":
			<-ctx.Done()
			return "", ctx.Err()
		}
		time.Sleep(20 * time.Millisecond) // work, so calls overlap
		return "rated " + toolName(d), nil
	})
	require.Equal(t, int32(3), peak.Load(), "at most 3 at once, and 3 did run at once")
	for i := range batch {
		switch i {
		case 5:
			require.True(t, bus.IsPermanent(errs[i]))
			require.Contains(t, errs[i].Error(), "model client exploded")
		case 7:
			require.ErrorIs(t, errs[i], context.DeadlineExceeded)
		default:
			require.NoError(t, errs[i])
			require.Equal(t, fmt.Sprintf("rated %d", i), out[i])
		}
	}
}

// Delivery.Time is the stream's timestamp: the same in every delivery and
// every replay.
func TestDeliveryCarriesStreamTime(t *testing.T) {
	n := testenv.StartNATS(t)
	got := make(chan *bus.Delivery, 1)
	startRunner(t, n, bus.Each(func(_ context.Context, d *bus.Delivery) error { got <- d; return nil }), bus.RunnerOptions{})
	ack, err := n.JS.PublishMsg(context.Background(), toolMsg(t, "acme", "timed"))
	require.NoError(t, err)
	d := <-got
	s, err := n.JS.Stream(context.Background(), bus.StreamName)
	require.NoError(t, err)
	raw, err := s.GetMsg(context.Background(), ack.Sequence)
	require.NoError(t, err)
	require.Equal(t, ack.Sequence, d.StreamSeq)
	require.True(t, raw.Time.Equal(d.Time), "delivery time %s, stream time %s", d.Time, raw.Time)
}
