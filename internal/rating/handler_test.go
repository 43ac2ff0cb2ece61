package rating_test

import (
	"context"
	"strings"
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

// splitLLM sends summaries to one server and ratings (JSON mode) to
// another, so a test can take the rating model down alone.
type splitLLM struct{ summaries, ratings rating.Completer }

func (s splitLLM) Complete(ctx context.Context, req provider.ChatRequest) (provider.ChatResponse, error) {
	if req.JSON {
		return s.ratings.Complete(ctx, req)
	}
	return s.summaries.Complete(ctx, req)
}

// Every token spent is charged against the tenant's budget, on every
// path: a summary paid for and then followed by an outage of the rating
// call is charged at once, the summary is reused by the next delivery
// instead of paid for again, and the budget ends the spending however
// many times the event comes back.
func TestEveryTokenSpentIsCharged(t *testing.T) {
	sumSrv, rateSrv := providertest.New(t), providertest.New(t)
	sumSrv.SetResponder(providertest.Fixed("300 readings of 21°C at station north; no errors."))
	sumSrv.SetUsage(2400, 100) // 2500 a summary
	rateSrv.SetResponder(providertest.Fixed(`{"relevance": 1, "correctness": 1, "reason": "ok"}`))
	rateSrv.SetUsage(900, 100) // 1000 a rating
	rateSrv.Down()
	chat := func(srv *providertest.Server) *provider.Chat {
		c, err := provider.NewChat(provider.Options{BaseURL: srv.URL, Model: model, Timeout: 2 * time.Second, MaxRetries: 1})
		require.NoError(t, err)
		return c
	}
	pool := testenv.Pool(t)
	settings := testenv.Config(t, "nats://127.0.0.1:1").Rater
	settings.Summarize, settings.MaxInputTokens, settings.DailyTokens = true, 64, 6000
	sender := &flakySender{}
	r, err := rating.New(pool, sender, rating.Options{Consumer: "rater-budget-test", Rater: settings,
		LLM: splitLLM{summaries: chat(sumSrv), ratings: chat(rateSrv)}, Model: model}, zerolog.Nop())
	require.NoError(t, err)
	tenant := testenv.Tenant(t)
	ctx := context.Background()
	long := strings.Repeat("reading 21°C at station north; ", 300)
	delivery := func(seq uint64) *bus.Delivery {
		ev, err := bus.NewEvent(rating.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "weather", "success": true, "output": long})
		require.NoError(t, err)
		return &bus.Delivery{Event: ev, Tenant: tenant, Subject: "tool.executed." + tenant, StreamSeq: seq, Time: time.Now()}
	}
	spent := func() int64 {
		n, err := rating.Spent(ctx, pool, tenant, rating.Day(time.Now()))
		require.NoError(t, err)
		return n
	}

	// The summary is paid for, the rating meets the outage: the event
	// waits, and the 2500 tokens are charged now.
	d := delivery(1)
	for range 3 {
		errs := r.Handle(ctx, []*bus.Delivery{d})
		require.True(t, bus.IsUnavailable(errs[0]), "%v", errs[0])
		require.Equal(t, 1, sumSrv.ChatRequests(), "the summary is paid for once, and reused")
		require.Equal(t, int64(2500), spent())
	}

	// The model is back: rated from the summary kept, the rating's 1000
	// tokens charged, and tokens_used says what the rating cost in all.
	require.NoError(t, rateSrv.Up())
	require.Equal(t, []error{nil}, r.Handle(ctx, []*bus.Delivery{d}))
	require.Equal(t, int64(3500), spent())
	require.Equal(t, 1, sender.count())
	rows, err := rating.List(ctx, pool, tenant)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, 3500, rows[0].Tokens)
	require.Equal(t, "llm", rows[0].RaterKind)

	// Other events, each paying for a summary that meets an outage, then
	// coming back: what they spend is charged, so the budget (6000)
	// stops them; nothing is paid for beyond what is charged.
	rateSrv.Down()
	for i := range 4 {
		d := delivery(uint64(10 + i))
		for range 3 {
			_ = r.Handle(ctx, []*bus.Delivery{d})
		}
	}
	require.Equal(t, int64(2500*sumSrv.ChatRequests()+1000), spent(), "every token the servers billed is charged")
	require.LessOrEqual(t, spent(), int64(6000+2500), "the budget stops the spending within one call")
}

// A republished copy rated before its original is filed at the original's
// sequence once that arrives, as applying the stream in order would file
// it: the first occurrence counts, at its place.
func TestCopyRatedFirstIsFiledAtTheOriginal(t *testing.T) {
	pool := testenv.Pool(t)
	settings := testenv.Config(t, "nats://127.0.0.1:1").Rater
	r, err := rating.New(pool, &flakySender{}, rating.Options{Consumer: "rater-copy-test", Rater: settings}, zerolog.Nop())
	require.NoError(t, err)
	tenant := testenv.Tenant(t)
	ev, err := bus.NewEvent(rating.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "weather", "success": true, "output": "Paris: 21°C"})
	require.NoError(t, err)
	original := &bus.Delivery{Event: ev, Tenant: tenant, Subject: "tool.executed." + tenant, StreamSeq: 10, Time: time.Now()}
	cp := &bus.Delivery{Event: ev, Tenant: tenant, Subject: "tool.executed." + tenant, StreamSeq: 40, Time: time.Now()}
	ctx := context.Background()
	require.Equal(t, []error{nil}, r.Handle(ctx, []*bus.Delivery{cp}))
	require.Equal(t, []error{nil}, r.Handle(ctx, []*bus.Delivery{original}))
	rows, err := rating.List(ctx, pool, tenant)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, rating.Compute([]*bus.Delivery{original, cp}, settings), rows)
}
