package rating_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/rating"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// flakySender makes the batch's transaction fail with a deadlock the first
// fail times, and records what it is asked to publish.
type flakySender struct {
	mu   sync.Mutex
	fail int
	sent []event.Event
}

func (s *flakySender) Queue(b *pgx.Batch, _ ...event.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail > 0 {
		s.fail--
		b.Queue(`DO $$ BEGIN RAISE EXCEPTION 'injected deadlock' USING ERRCODE = '40P01'; END $$`)
	}
	return nil
}

func (s *flakySender) Send(_ context.Context, evs []event.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, evs...)
	return nil
}

func (s *flakySender) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sent)
}

// A batch whose transaction fails is retried without new model calls; a
// redelivery after commit, to this copy or another, costs no call and
// publishes nothing.
func TestRetryAndRedeliveryPayOnce(t *testing.T) {
	srv := providertest.New(t)
	srv.SetResponder(providertest.Fixed(`{"relevance": 1, "correctness": 0.5, "reason": "ok"}`))
	llm, err := provider.NewChat(provider.Options{BaseURL: srv.URL, Model: model, Timeout: 2 * time.Second})
	require.NoError(t, err)
	pool := testenv.Pool(t)
	settings := testenv.Config(t, "nats://127.0.0.1:1").Rater
	sender := &flakySender{fail: 1}
	opts := rating.Options{Consumer: "rater-handler-test", Rater: settings, LLM: llm, Model: model}
	r, err := rating.New(pool, sender, opts, zerolog.Nop())
	require.NoError(t, err)
	tenant := testenv.Tenant(t)
	var ds []*bus.Delivery
	for i, out := range []string{"Paris: 21°C", "Lyon: 19°C", "Nice: 24°C"} {
		ev, err := bus.NewEvent(rating.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "weather", "success": true, "output": out})
		require.NoError(t, err)
		ds = append(ds, &bus.Delivery{Event: ev, Tenant: tenant, Subject: "tool.executed." + tenant, StreamSeq: uint64(i + 1), Time: time.Now()})
	}
	ctx := context.Background()

	errs := r.Handle(ctx, ds)
	for _, err := range errs {
		require.Error(t, err)
		require.False(t, bus.IsPermanent(err), "a deadlock is retried")
		require.False(t, bus.IsUnavailable(err))
	}
	require.Equal(t, 3, srv.ChatRequests())
	require.Zero(t, sender.count())

	require.Equal(t, []error{nil, nil, nil}, r.Handle(ctx, ds))
	require.Equal(t, 3, srv.ChatRequests(), "the retry reuses the ratings")
	require.Equal(t, 3, sender.count())
	rows, err := rating.List(ctx, pool, tenant)
	require.NoError(t, err)
	require.Len(t, rows, 3)

	require.Equal(t, []error{nil, nil, nil}, r.Handle(ctx, ds))
	other, err := rating.New(pool, sender, opts, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil, nil}, other.Handle(ctx, ds))
	require.Equal(t, 3, srv.ChatRequests(), "redeliveries cost no call")
	require.Equal(t, 3, sender.count(), "and publish nothing")
}

// The scorer's rating average moves when tool.rated arrives, and
// replaying the scorer re-reads the ratings without calling the model.
func TestScorerFoldsRatingsAndReplaysWithoutTheModel(t *testing.T) {
	r := newRig(t, true)
	r.srv.SetResponder(providertest.Fixed(`{"relevance": 1, "correctness": 0.8, "reason": "ok"}`))
	in := r.start(t, quality.Consumer, rating.Consumer)
	key := quality.Key{Tenant: r.tenant, Target: quality.TargetTool, ID: "web_search"}
	ev := r.toolEvent(t, map[string]any{"output": "Paris: 21°C", "latency_ms": 100})
	r.publish(t, ev)
	var m *quality.Metrics
	testenv.Eventually(t, 60*time.Second, func() bool {
		var err error
		m, err = quality.Get(context.Background(), in.Deps.Pool, key)
		return err == nil && m != nil && m.RatingCount == 1 && m.TotalCalls == 1
	}, "the scorer counted the call and its rating")
	require.Equal(t, int64(900_000), m.RatingSumMicro, "the rating, 0.9, in micro-units")
	require.Equal(t, 1, r.srv.ChatRequests())
	before := *m

	reg, err := schemas.Load()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := replay.Rebuild(ctx, r.nats.JS, in.Deps.Pool, reg, quality.RebuildTarget(in.Deps.Pool, quality.Options{}, zerolog.Nop()),
		replay.Options{Tenant: r.tenant, Log: zerolog.Nop()})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Events, "tool.executed and tool.rated")
	after, err := quality.Get(context.Background(), in.Deps.Pool, key)
	require.NoError(t, err)
	require.Equal(t, before.RatingSumMicro, after.RatingSumMicro)
	require.Equal(t, before.RatingCount, after.RatingCount)
	require.Equal(t, before.TotalCalls, after.TotalCalls)
	require.Equal(t, 1, r.srv.ChatRequests(), "replaying the scorer calls no model")
}

// A rebuild re-rates the history with the rules only (zero settings take
// the defaults), publishes nothing and calls no model.
func TestRebuildRatesWithTheRules(t *testing.T) {
	r := newRig(t, true) // an LLM is configured, and must not be called
	pool := testenv.Pool(t)
	evs := []event.Event{
		r.toolEvent(t, map[string]any{"output": "Paris: 21°C"}),
		r.toolEvent(t, map[string]any{"success": false}),
		r.promptEvent(t, map[string]any{"prompt_hash": "h1", "success": true, "output": "Error: nope"}),
		r.toolEvent(t, map[string]any{}), // no output: not rated
	}
	r.publish(t, evs...)
	reg, err := schemas.Load()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := replay.Rebuild(ctx, r.nats.JS, pool, reg, rating.RebuildTarget(pool, rating.Options{}, zerolog.Nop()),
		replay.Options{Tenant: r.tenant, Log: zerolog.Nop()})
	require.NoError(t, err)
	require.Equal(t, len(evs), rep.Events)
	got, err := rating.List(ctx, pool, r.tenant)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for i, want := range []float64{0.8, 0, 0.15} {
		require.Equal(t, want, got[i].Rating)
		require.Equal(t, "rules:v1", got[i].Rater)
	}
	require.Zero(t, r.srv.ChatRequests())
	require.Zero(t, r.results.count(), "a rebuild publishes nothing")
}
