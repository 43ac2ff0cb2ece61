package quality_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// instance is one scorer process embedded in the test.
type instance = testenv.Process

func startScorer(t *testing.T, natsURL, dbURL string, batch int) *instance {
	t.Helper()
	cfg := testenv.Config(t, natsURL)
	cfg.DatabaseURL = dbURL
	cfg.BatchSize = batch
	cfg.AckWait = 5 * time.Second
	cfg.ShutdownGrace = 5 * time.Second
	return testenv.StartProcess(t, cfg, "scorer", quality.Consumer)
}

func acked(in *instance) float64 { return in.Counter("agentq_events_acked_total", nil) }

// totals is what the published events add up to, computed independently of
// the scorer.
type totals struct {
	calls, successes, failures int64
	latencySum                 float64
	latencyN                   int64
	ratingSum                  float64
	ratingN                    int64
	feedbackSum                float64
	feedbackN                  int64
}

type workload struct {
	tenant string
	events []event.Event
	want   map[quality.Key]*totals
}

// newWorkload builds n events over a few tools and prompt versions: calls,
// automated ratings and user feedback, deterministically from seed.
func newWorkload(t *testing.T, tenant string, n int, seed uint64) *workload {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	w := &workload{tenant: tenant, want: map[quality.Key]*totals{}}
	tools := []string{"web_search", "calculator", "sql_query"}
	prompts := []struct {
		hash, id string
		version  int
	}{{"h-answer-v1", "", 0}, {"", "router", 2}}
	get := func(k quality.Key) *totals {
		if w.want[k] == nil {
			w.want[k] = &totals{}
		}
		return w.want[k]
	}
	for range n {
		var typ string
		var data map[string]any
		var tot *totals
		switch r := rng.IntN(10); {
		case r < 5: // tool call
			tool := tools[rng.IntN(len(tools))]
			ok := rng.IntN(4) != 0
			lat := rng.IntN(500)
			typ, data = quality.TypeToolExecuted, map[string]any{"tool_name": tool, "success": ok, "latency_ms": lat, "run_id": "r1", "step_idx": 0}
			tot = get(quality.Key{Tenant: tenant, Target: quality.TargetTool, ID: tool})
			tot.calls++
			tot.latencySum += float64(lat)
			tot.latencyN++
			if ok {
				tot.successes++
			} else {
				tot.failures++
			}
		case r < 7: // prompt use
			p := prompts[rng.IntN(len(prompts))]
			ok := rng.IntN(3) != 0
			data = map[string]any{"success": ok}
			id := p.hash
			if p.hash != "" {
				data["prompt_hash"] = p.hash
			} else {
				data["prompt_id"], data["version"] = p.id, p.version
				id = fmt.Sprintf("%s@%d", p.id, p.version)
			}
			typ = quality.TypePromptUsed
			tot = get(quality.Key{Tenant: tenant, Target: quality.TargetPrompt, ID: id})
			tot.calls++
			if ok {
				tot.successes++
			} else {
				tot.failures++
			}
		case r < 9: // automated rating
			tool := tools[rng.IntN(len(tools))]
			rating := float64(rng.IntN(101)) / 100
			typ, data = quality.TypeToolRated, map[string]any{"tool_name": tool, "rating": rating, "rater_kind": "rules", "rater": "rules:v1"}
			tot = get(quality.Key{Tenant: tenant, Target: quality.TargetTool, ID: tool})
			tot.ratingSum += rating
			tot.ratingN++
		default: // user feedback, thumbs
			tool := tools[rng.IntN(len(tools))]
			up := rng.IntN(2) == 0
			thumbs, v := "down", 0.0
			if up {
				thumbs, v = "up", 1.0
			}
			typ, data = quality.TypeFeedbackSubmitted, map[string]any{"target": "tool", "tool_name": tool, "thumbs": thumbs, "user_id": "u1"}
			tot = get(quality.Key{Tenant: tenant, Target: quality.TargetTool, ID: tool})
			tot.feedbackSum += v
			tot.feedbackN++
		}
		ev, err := bus.NewEvent(typ, tenant, "test-agent", data)
		require.NoError(t, err)
		w.events = append(w.events, ev)
	}
	return w
}

func newPublisher(t *testing.T, js jetstream.JetStream) *bus.Publisher {
	t.Helper()
	reg, err := schemas.Load()
	require.NoError(t, err)
	return bus.NewPublisher(js, reg)
}

func publishAll(t *testing.T, pub *bus.Publisher, evs []event.Event) {
	t.Helper()
	for _, ev := range evs {
		_, err := pub.PublishAsync(ev)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, pub.Flush(ctx))
}

// requireTotals waits until the scorer's metrics for the workload's tenant
// equal the independently computed totals.
func requireTotals(t *testing.T, in *instance, w *workload, timeout time.Duration) []*quality.Metrics {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := quality.List(context.Background(), in.Deps.Pool, w.tenant, "", "")
		diff := compare(got, w.want)
		if err != nil {
			diff = err.Error()
		}
		if diff == "" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the metrics do not match the published totals: %s", timeout, diff)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func compare(got []*quality.Metrics, want map[quality.Key]*totals) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d targets, want %d", len(got), len(want))
	}
	for _, m := range got {
		w := want[m.Key]
		if w == nil {
			return fmt.Sprintf("unexpected target %v", m.Key)
		}
		near := func(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }
		if m.TotalCalls != w.calls || m.Successes != w.successes || m.Failures != w.failures ||
			m.LatencyCount != w.latencyN || !near(float64(m.LatencySumUs)/1000, w.latencySum) ||
			m.RatingCount != w.ratingN || !near(float64(m.RatingSumMicro)/1e6, w.ratingSum) ||
			m.FeedbackCount != w.feedbackN || !near(float64(m.FeedbackSumMicro)/1e6, w.feedbackSum) {
			return fmt.Sprintf("%v: got calls=%d ok=%d fail=%d ratings=%d feedback=%d, want calls=%d ok=%d fail=%d ratings=%d feedback=%d",
				m.Key, m.TotalCalls, m.Successes, m.Failures, m.RatingCount, m.FeedbackCount,
				w.calls, w.successes, w.failures, w.ratingN, w.feedbackN)
		}
	}
	return ""
}

func TestScorerEndToEnd(t *testing.T) {
	n := testenv.StartNATS(t)
	in := startScorer(t, n.URL, testenv.DatabaseURL(t), 100)
	tenant := testenv.Tenant(t)

	sub, err := n.NC.SubscribeSync("quality.changed." + tenant)
	require.NoError(t, err)

	w := newWorkload(t, tenant, 300, 1)
	pub := newPublisher(t, n.JS)
	publishAll(t, pub, w.events)
	// A bad event in the middle of good ones: dead-lettered, the rest go on.
	bad := nats.NewMsg("tool.executed." + tenant)
	bad.Header.Set("ce-specversion", "1.0")
	bad.Header.Set("ce-id", "bad-1")
	bad.Header.Set("ce-source", "test")
	bad.Header.Set("ce-type", quality.TypeToolExecuted)
	bad.Header.Set("ce-tenantid", tenant)
	bad.Data = []byte(`{"tool_name":"web_search"}`) // no success
	_, err = n.JS.PublishMsg(context.Background(), bad)
	require.NoError(t, err)
	more := newWorkload(t, tenant, 50, 2)
	publishAll(t, pub, more.events)
	for k, v := range more.want {
		if w.want[k] == nil {
			w.want[k] = &totals{}
		}
		a := w.want[k]
		a.calls += v.calls
		a.successes += v.successes
		a.failures += v.failures
		a.latencySum += v.latencySum
		a.latencyN += v.latencyN
		a.ratingSum += v.ratingSum
		a.ratingN += v.ratingN
		a.feedbackSum += v.feedbackSum
		a.feedbackN += v.feedbackN
	}
	got := requireTotals(t, in, w, 60*time.Second)

	// Quality is consistent with the counts it was computed from.
	for _, m := range got {
		require.InDelta(t, m.Quality(), float64(m.Successes+1)/float64(m.TotalCalls+2)*
			(float64(m.RatingSumMicro)/1e6+2*float64(m.FeedbackSumMicro)/1e6+1)/(float64(m.RatingCount)+2*float64(m.FeedbackCount)+2), 1e-9)
	}

	// A subscriber sees quality.changed events it can reason with in calls;
	// the last one for each tool carries the final totals.
	last := map[string]quality.Changed{}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		msg, err := sub.NextMsg(time.Second)
		if err != nil {
			if done := len(last) == len(got) && matchesFinal(last, got); done {
				break
			}
			continue
		}
		ev, err := bus.Decode(msg.Header, msg.Data)
		require.NoError(t, err)
		require.Equal(t, quality.TypeQualityChanged, ev.Type())
		require.Equal(t, tenant, bus.Tenant(ev))
		require.NotEmpty(t, bus.Causation(ev), "result carries its cause")
		var ch quality.Changed
		require.NoError(t, json.Unmarshal(ev.Data(), &ch))
		key := ch.Target + "/" + ch.ToolName + ch.PromptHash + ch.PromptID
		id := ch.ToolName + ch.PromptHash
		if ch.PromptID != "" {
			id = fmt.Sprintf("%s@%d", ch.PromptID, ch.Version)
		}
		require.Equal(t, bus.DeriveID("scorer", tenant, quality.TypeQualityChanged, fmt.Sprintf("state:%s/%s@%d", ch.Target, id, ch.StateVersion)), ev.ID(),
			"id derives from tenant, target and state version")
		require.Positive(t, ch.StateVersion)
		require.Positive(t, ch.AsOfSeq)
		if prev, ok := last[key]; !ok || ch.StateVersion >= prev.StateVersion {
			last[key] = ch
		}
		if matchesFinal(last, got) {
			break
		}
	}
	require.True(t, matchesFinal(last, got), "the last quality.changed per target carries the final totals: %+v", last)

	dls := testenv.DeadLetters(t, n.JS)
	require.Len(t, dls, 1)
	require.Equal(t, bus.ReasonSchema, dls[0].ReasonCode)
	require.Contains(t, dls[0].Reason, "/success")
}

func matchesFinal(last map[string]quality.Changed, got []*quality.Metrics) bool {
	if len(last) != len(got) {
		return false
	}
	for _, m := range got {
		ch, ok := last[m.Target+"/"+m.ToolName+m.PromptHash+m.PromptID]
		if !ok || ch.TotalCalls != m.TotalCalls || ch.ConsecutiveFailures != m.ConsecutiveFailures ||
			ch.RatingCount != m.RatingCount || ch.FeedbackCount != m.FeedbackCount {
			return false
		}
	}
	return true
}

func TestScorerCountsDuplicatesOnce(t *testing.T) {
	n := testenv.StartNATS(t)
	pool := testenv.Pool(t)
	tenant := testenv.Tenant(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(n.JS, reg)

	// The first handling of every batch commits and then "loses" its ack,
	// as a crash between commit and ack would: the batch is redelivered.
	var mu sync.Mutex
	seen := map[string]int{}
	s := quality.NewScorer(pool, nopSender{}, quality.Options{}, testenv.Logger(t))
	h := func(ctx context.Context, batch []*bus.Delivery) []error {
		errs := s.Handle(ctx, batch)
		mu.Lock()
		defer mu.Unlock()
		for i, d := range batch {
			seen[d.Event.ID()]++
			if errs[i] == nil && seen[d.Event.ID()] == 1 {
				errs[i] = fmt.Errorf("simulated crash after commit")
			}
		}
		return errs
	}
	r, err := bus.NewRunner(n.JS, reg, h, bus.RunnerOptions{Consumer: "scorer", Subjects: quality.Subjects, Backoff: []time.Duration{10 * time.Millisecond}}, testenv.Logger(t), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()

	w := newWorkload(t, tenant, 40, 3)
	publishAll(t, pub, w.events)
	// The same event ids again, without Nats-Msg-Id, so JetStream stores
	// them a second time and only the inbox can tell.
	for _, ev := range w.events[:10] {
		m, err := bus.Encode(ev)
		require.NoError(t, err)
		m.Header.Del("Nats-Msg-Id")
		_, err = n.JS.PublishMsg(context.Background(), m)
		require.NoError(t, err)
	}
	// And a duplicate publish with the header: JetStream drops it.
	ack, err := pub.Publish(context.Background(), w.events[0])
	require.NoError(t, err)
	require.True(t, ack.Duplicate)

	// Every event comes back once after its "crash"; the first ten also
	// arrive a third time as their republished copies.
	testenv.Eventually(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i, ev := range w.events {
			want := 2
			if i < 10 {
				want = 3
			}
			if seen[ev.ID()] < want {
				return false
			}
		}
		return true
	}, "every redelivery and republished copy handled")
	got, err := quality.List(context.Background(), pool, tenant, "", "")
	require.NoError(t, err)
	require.Empty(t, compare(got, w.want), "redelivered and republished events counted once")
}

// nopSender stores nothing and publishes nothing: the test is about the
// metrics.
type nopSender struct{}

func (nopSender) Queue(*pgx.Batch, ...event.Event) error { return nil }
func (nopSender) Post([]event.Event) error               { return nil }

func TestScorerKillAndRestart(t *testing.T) {
	n := testenv.StartNATS(t)
	dbURL := testenv.DatabaseURL(t)
	tenant := testenv.Tenant(t)
	w := newWorkload(t, tenant, 2000, 4)
	pub := newPublisher(t, n.JS)

	published := make(chan struct{})
	go func() {
		defer close(published)
		// ~15 s of steady traffic, so restarts land in the middle of it.
		for i := 0; i < len(w.events); i += 20 {
			publishAll(t, pub, w.events[i:min(i+20, len(w.events))])
			time.Sleep(150 * time.Millisecond)
		}
	}()
	rng := rand.New(rand.NewPCG(9, 9))
	kills, killsWhileFlowing := 0, 0
	for {
		in := startScorer(t, n.URL, dbURL, 50)
		time.Sleep(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		flowing := true
		select {
		case <-published:
			flowing = false
		default:
		}
		if flowing || kills < 5 {
			in.Kill()
			kills++
			if flowing {
				killsWhileFlowing++
			}
			continue
		}
		requireTotals(t, in, w, 120*time.Second)
		requireStreamReference(t, n, in.Deps.Pool, tenant)
		break
	}
	t.Logf("scorer killed %d times, %d of them while events were being published", kills, killsWhileFlowing)
	require.GreaterOrEqual(t, killsWhileFlowing, 3, "the kills must hit a live flow")
	require.Empty(t, testenv.DeadLetters(t, n.JS))
}

func TestScorerReplayRebuildsState(t *testing.T) {
	n := testenv.StartNATS(t)
	dbURL := testenv.DatabaseURL(t)
	tenant := testenv.Tenant(t)
	w := newWorkload(t, tenant, 400, 5)
	in := startScorer(t, n.URL, dbURL, 100)
	sub, err := n.NC.SubscribeSync("quality.changed." + tenant)
	require.NoError(t, err)
	publishAll(t, newPublisher(t, n.JS), w.events)
	live := requireTotals(t, in, w, 60*time.Second)
	requireStreamReference(t, n, in.Deps.Pool, tenant)
	in.Stop()
	require.NoError(t, n.NC.Flush())
	for { // drain what live processing published
		if _, err := sub.NextMsg(500 * time.Millisecond); err != nil {
			break
		}
	}

	// Rebuild from the stream into emptied tables, in other batches than live.
	reg, err := schemas.Load()
	require.NoError(t, err)
	pool := testenv.Pool(t)
	rep, err := replay.Rebuild(context.Background(), n.JS, pool, reg, quality.RebuildTarget(pool, quality.Options{}, testenv.Logger(t)),
		replay.Options{Tenant: tenant, BatchSize: 37})
	require.NoError(t, err)
	require.Equal(t, len(w.events), rep.Events)
	replayed, err := quality.List(context.Background(), pool, tenant, "", "")
	require.NoError(t, err)
	require.Equal(t, live, replayed, "replay rebuilds exactly the live state, every field")
	_, err = sub.NextMsg(time.Second)
	require.ErrorIs(t, err, nats.ErrTimeout, "a rebuild publishes nothing")
}

// requireStreamReference compares the scorer's whole state of tenant, field
// by field, with the events read back from the stream applied in stream
// order.
func requireStreamReference(t *testing.T, n *testenv.NATS, pool *pgxpool.Pool, tenant string) {
	t.Helper()
	got, err := quality.List(context.Background(), pool, tenant, "", "")
	require.NoError(t, err)
	want := quality.Compute(conformance.History(t, n.JS, quality.Subjects, tenant))
	require.Equal(t, want, got, "state equals the stream applied in order, every field")
}

func TestScorerSurvivesDatabaseOutage(t *testing.T) {
	n := testenv.StartNATS(t)
	dbURL := testenv.DatabaseURL(t)
	proxy := testenv.StartProxy(t, hostPort(t, dbURL))
	tenant := testenv.Tenant(t)
	in := startScorer(t, n.URL, proxy.RewriteURL(t, dbURL), 50)
	pub := newPublisher(t, n.JS)

	first := newWorkload(t, tenant, 100, 6)
	publishAll(t, pub, first.events)
	requireTotals(t, in, first, 60*time.Second)

	proxy.Down()
	w := newWorkload(t, tenant, 300, 6) // same seed: a superset of first
	publishAll(t, pub, w.events[100:])
	testenv.Eventually(t, 60*time.Second, func() bool { return in.Counter("agentq_events_nakked_total", nil) > 0 },
		"the scorer did not meet the outage (no event nakked)")
	select {
	case err := <-in.Done:
		t.Fatalf("scorer stopped during the outage: %v", err)
	default:
	}
	proxy.Up(t)
	requireTotals(t, in, w, 120*time.Second)
	requireStreamReference(t, n, in.Deps.Pool, tenant)
	require.Empty(t, testenv.DeadLetters(t, n.JS), "an outage dead-letters nothing")
}

func hostPort(t *testing.T, dbURL string) string {
	t.Helper()
	cfg, err := pgconnConfig(dbURL)
	require.NoError(t, err)
	return cfg
}

func TestTwoScorersSplitTheWork(t *testing.T) {
	n := testenv.StartNATS(t)
	dbURL := testenv.DatabaseURL(t)
	tenant := testenv.Tenant(t)
	a := startScorer(t, n.URL, dbURL, 20)
	b := startScorer(t, n.URL, dbURL, 20)
	w := newWorkload(t, tenant, 1500, 7)
	publishAll(t, newPublisher(t, n.JS), w.events)
	requireTotals(t, a, w, 120*time.Second)
	// The last batch commits before it is acked.
	testenv.Eventually(t, 30*time.Second, func() bool { return acked(a)+acked(b) >= float64(len(w.events)) },
		"every event acked")
	t.Logf("acked: a=%v b=%v", acked(a), acked(b))
	require.Positive(t, acked(a), "first scorer took a share")
	require.Positive(t, acked(b), "second scorer took a share")
	require.Equal(t, float64(len(w.events)), acked(a)+acked(b), "every event acked exactly once")
	requireStreamReference(t, n, a.Deps.Pool, tenant)
}

// The scorer counts what the schema checked: a property that differs from
// a checked one only in letter case is not read in its place, and data
// naming a property twice is dead-lettered with the reason.
func TestScorerReadsOnlyTheNamesItsSchemaChecked(t *testing.T) {
	n := testenv.StartNATS(t)
	in := startScorer(t, n.URL, testenv.DatabaseURL(t), 50)
	tenant := testenv.Tenant(t)
	send := func(raw string) event.Event {
		ev, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "agent://test", map[string]any{})
		require.NoError(t, err)
		ev.DataEncoded = []byte(raw)
		m, err := bus.Encode(ev)
		require.NoError(t, err)
		_, err = n.JS.PublishMsg(context.Background(), m)
		require.NoError(t, err)
		return ev
	}
	send(`{"tool_name":"search","TOOL_NAME":"evil","success":true,"LATENCY_MS":-5,"Latency_Ms":7}`)
	dup := send(`{"tool_name":"search","success":true,"success":false}`)
	send(`{"tool_name":"search","success":false,"latency_ms":20}`)

	testenv.Eventually(t, 30*time.Second, func() bool { return acked(in) == 2 }, "the two readable events applied")
	got, err := quality.List(context.Background(), in.Deps.Pool, tenant, "", "")
	require.NoError(t, err)
	require.Len(t, got, 1, "one target: search, not evil")
	m := got[0]
	require.Equal(t, quality.Key{Tenant: tenant, Target: quality.TargetTool, ID: "search"}, m.Key)
	require.Equal(t, [4]int64{2, 1, 1, 1}, [4]int64{m.TotalCalls, m.Successes, m.Failures, m.LatencyCount},
		"calls, successes, failures, latencies: the case variants of latency_ms were not read")
	require.Equal(t, int64(20000), m.LatencySumUs)

	var dl []bus.DeadLetter
	testenv.Eventually(t, 10*time.Second, func() bool {
		dl = testenv.DeadLetters(t, n.JS)
		return len(dl) == 1
	}, "the event naming success twice dead-lettered")
	require.Equal(t, dup.ID(), dl[0].EventID)
	require.Equal(t, "schema", dl[0].ReasonCode)
	require.Contains(t, dl[0].Reason, `/: member "success" given twice`)
}
