package bus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// seen records the event ids a handler was given.
type seen struct {
	mu  sync.Mutex
	ids map[string]int
}

func (s *seen) handle(_ context.Context, d *bus.Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[d.Event.ID()]++
	return nil
}

func (s *seen) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// A dead letter redriven for one consumer (Agentq-Redrive-For) reaches that
// consumer only: every other consumer acks the copy without handling it,
// and a rebuild reading the stream for another consumer skips it too.
func TestRedriveReachesOnlyItsConsumer(t *testing.T) {
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handlers := map[string]*seen{}
	var wg sync.WaitGroup
	for _, name := range []string{"scorer", "rater"} {
		h := &seen{ids: map[string]int{}}
		handlers[name] = h
		r, err := bus.NewRunner(n.JS, reg, bus.Each(h.handle), bus.RunnerOptions{
			Consumer: name, Subjects: []string{"tool.executed.*"}, FetchWait: 100 * time.Millisecond,
		}, testenv.Logger(t), nil)
		require.NoError(t, err)
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(ctx) }()
	}
	defer wg.Wait()
	defer cancel()

	tenant := testenv.Tenant(t)
	publish := func(tool, redriveFor string) string {
		ev, err := bus.NewEvent("agentq.tool.executed.v1", tenant, "test", map[string]any{"tool_name": tool, "success": true})
		require.NoError(t, err)
		m, err := bus.Encode(ev)
		require.NoError(t, err)
		if redriveFor != "" {
			m.Header.Del("Nats-Msg-Id") // as agentq dlq --redrive publishes it
			m.Header.Set(bus.HeaderRedriveFor, redriveFor)
		}
		_, err = n.JS.PublishMsg(ctx, m)
		require.NoError(t, err)
		return ev.ID()
	}
	redriven := publish("redriven", "scorer")
	after := publish("after", "")

	testenv.Eventually(t, 30*time.Second, func() bool {
		return handlers["scorer"].count(redriven) == 1 && handlers["scorer"].count(after) == 1 && handlers["rater"].count(after) == 1
	}, "both consumers reach the event after the redrive")
	require.Zero(t, handlers["rater"].count(redriven), "the rater never handles the scorer's redrive")
	testenv.Eventually(t, 10*time.Second, func() bool {
		c, err := n.JS.Consumer(ctx, bus.StreamName, "rater")
		require.NoError(t, err)
		info, err := c.Info(ctx)
		require.NoError(t, err)
		return info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream == 2
	}, "the rater acked the redrive without effect")
	dlq, err := n.JS.Stream(ctx, bus.DLQName)
	require.NoError(t, err)
	info, err := dlq.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "nothing dead-lettered")

	// A rebuild reads the stream as a runner does: the rater's rebuild
	// skips the scorer's redrive, the scorer's reads it.
	read := func(consumer string) (ids []string, skipped int) {
		cons, err := n.JS.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{})
		require.NoError(t, err)
		for range 2 {
			m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			require.NoError(t, err)
			d, err := bus.ReadAs(consumer, m, reg, 0)
			if errors.Is(err, bus.ErrNotForConsumer) {
				skipped++
				continue
			}
			require.NoError(t, err)
			ids = append(ids, d.Event.ID())
		}
		return ids, skipped
	}
	ids, skipped := read("rater")
	require.Equal(t, []string{after}, ids)
	require.Equal(t, 1, skipped)
	ids, skipped = read("scorer")
	require.Equal(t, []string{redriven, after}, ids)
	require.Zero(t, skipped)
}
