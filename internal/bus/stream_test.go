package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

func streamInfo(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, name)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return info
}

func TestStreamsLayout(t *testing.T) {
	n := testenv.StartNATS(t) // it ran EnsureStreams with the defaults
	tests := []struct {
		stream   string
		subjects []string
	}{
		{bus.StreamName, bus.FactSubjects},
		{bus.DLQName, []string{"dlq.>"}},
	}
	for _, tc := range tests {
		t.Run(tc.stream, func(t *testing.T) {
			cfg := streamInfo(t, n.JS, tc.stream).Config
			require.ElementsMatch(t, tc.subjects, cfg.Subjects)
			require.Equal(t, jetstream.FileStorage, cfg.Storage)
			require.Equal(t, jetstream.LimitsPolicy, cfg.Retention)
			require.Equal(t, 2*time.Minute, cfg.Duplicates)
			require.Zero(t, cfg.MaxAge, "kept forever: replay needs history")
			require.Equal(t, int64(-1), cfg.MaxBytes)
			require.Equal(t, 1, cfg.Replicas)
		})
	}
}

func TestEnsureStreamsIsIdempotent(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx := context.Background()
	ev := newToolEvent(t, testenv.Tenant(t), map[string]any{"tool_name": "x", "success": true})
	_, err := bus.NewPublisher(n.JS, nil).Publish(ctx, ev)
	require.NoError(t, err)
	before := streamInfo(t, n.JS, bus.StreamName)

	// What every binary does at start-up, again and again.
	for range 2 {
		require.NoError(t, bus.EnsureStreams(ctx, n.JS, bus.StreamOptions{}))
	}
	after := streamInfo(t, n.JS, bus.StreamName)
	require.Equal(t, before.Created, after.Created, "the stream was not recreated")
	require.Equal(t, before.Config, after.Config)
	require.Equal(t, before.State.Msgs, after.State.Msgs, "no event was lost")
	require.Equal(t, uint64(1), after.State.Msgs)
}

func TestEnsureStreamsUpdatesLimits(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx := context.Background()
	tests := []struct {
		name string
		opts bus.StreamOptions
	}{
		{"limits set", bus.StreamOptions{MaxAge: 48 * time.Hour, MaxBytes: 1 << 30, Duplicates: 30 * time.Second}},
		{"limits changed", bus.StreamOptions{MaxAge: time.Hour, MaxBytes: 1 << 20, Duplicates: 5 * time.Minute}},
		{"back to defaults", bus.StreamOptions{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, bus.EnsureStreams(ctx, n.JS, tc.opts))
			wantBytes, wantDup := tc.opts.MaxBytes, tc.opts.Duplicates
			if wantBytes == 0 {
				wantBytes = -1
			}
			if wantDup == 0 {
				wantDup = 2 * time.Minute
			}
			for _, name := range []string{bus.StreamName, bus.DLQName} {
				cfg := streamInfo(t, n.JS, name).Config
				require.Equal(t, tc.opts.MaxAge, cfg.MaxAge, name)
				require.Equal(t, wantBytes, cfg.MaxBytes, name)
				require.Equal(t, wantDup, cfg.Duplicates, name)
			}
		})
	}
}

// TestSearchIsNotStored: search is request/reply on core NATS, so no stream
// takes it and a JetStream publish gets no ack.
func TestSearchIsNotStored(t *testing.T) {
	n := testenv.StartNATS(t)
	_, err := n.JS.PublishMsg(context.Background(), &nats.Msg{Subject: "search.prompts.acme", Data: []byte(`{}`)})
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
	require.Zero(t, streamInfo(t, n.JS, bus.StreamName).State.Msgs)
	require.Zero(t, streamInfo(t, n.JS, bus.DLQName).State.Msgs)
}

func TestDuplicateWindowDropsRepublish(t *testing.T) {
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(n.JS, reg)
	ctx := context.Background()
	ev := newToolEvent(t, testenv.Tenant(t), map[string]any{"tool_name": "x", "success": true})

	first, err := pub.Publish(ctx, ev)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	second, err := pub.Publish(ctx, ev) // a retried publish, same Nats-Msg-Id
	require.NoError(t, err)
	require.True(t, second.Duplicate)
	require.Equal(t, first.Sequence, second.Sequence, "acked with the original's sequence")
	require.Equal(t, uint64(1), streamInfo(t, n.JS, bus.StreamName).State.Msgs)
}
