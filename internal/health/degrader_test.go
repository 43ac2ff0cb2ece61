package health_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/rating"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// world is one test's NATS, database and publisher.
type world struct {
	nats   *testenv.NATS
	pub    *bus.Publisher
	tenant string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	reg, err := schemas.Load()
	require.NoError(t, err)
	n := testenv.StartNATS(t)
	return &world{nats: n, pub: bus.NewPublisher(n.JS, reg), tenant: testenv.Tenant(t)}
}

// fastConfig shortens the quarantine, the probation and the timers so a
// whole episode fits in a test.
func (w *world) config(t *testing.T) config.Config {
	cfg := testenv.Config(t, w.nats.URL)
	cfg.BatchSize = 20
	cfg.AckWait = 5 * time.Second
	cfg.ShutdownGrace = 5 * time.Second
	cfg.Degrade.QuarantineBase = 2 * time.Second
	cfg.Degrade.QuarantineMax = 10 * time.Second
	cfg.Degrade.Probation = 2 * time.Second
	cfg.Degrade.TimerEvery = 100 * time.Millisecond
	cfg.Degrade.Poll = 50 * time.Millisecond
	cfg.RelayInterval = 200 * time.Millisecond
	cfg.RelayMinAge = time.Second
	return cfg
}

func (w *world) start(t *testing.T, cfg config.Config) *testenv.Process {
	return testenv.StartProcess(t, cfg, "degrader", health.Consumer)
}

func (w *world) event(t *testing.T, typ string, data map[string]any) event.Event {
	t.Helper()
	ev, err := bus.NewEvent(typ, w.tenant, "test-agent", data)
	require.NoError(t, err)
	return ev
}

func (w *world) publish(t *testing.T, evs ...event.Event) {
	t.Helper()
	for _, ev := range evs {
		_, err := w.pub.PublishAsync(ev)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, w.pub.Flush(ctx))
}

func (w *world) calls(t *testing.T, tool string, ok bool, n int) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = w.event(t, health.TypeToolExecuted, map[string]any{"tool_name": tool, "success": ok})
	}
	return evs
}

type result struct {
	Type   string
	ID     string
	Cause  string
	Data   map[string]any
	Seq    uint64
	Tenant string
}

// results reads the degrader's results of the tenant back from the stream.
func (w *world) results(t *testing.T) []result {
	t.Helper()
	var out []result
	for _, d := range conformance.History(t, w.nats.JS, health.ResultSubjects, w.tenant) {
		var data map[string]any
		require.NoError(t, json.Unmarshal(d.Event.Data(), &data))
		out = append(out, result{Type: d.Event.Type(), ID: d.Event.ID(), Cause: bus.Causation(d.Event), Data: data, Seq: d.StreamSeq, Tenant: d.Tenant})
	}
	return out
}

// allResults counts every result message of the tenant in the stream,
// duplicates included (History leaves repeated ids out).
func (w *world) countMessages(t *testing.T, subjects ...string) int {
	t.Helper()
	ctx := context.Background()
	s, err := w.nats.JS.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	n := 0
	for _, subj := range subjects {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj[:len(subj)-1]+w.tenant))
		require.NoError(t, err)
		for _, c := range info.State.Subjects {
			n += int(c)
		}
	}
	return n
}

func states(rs []result, tool string) []string {
	var out []string
	for _, r := range rs {
		if r.Type == health.TypeRejected || r.Data["tool_name"] != tool {
			continue
		}
		out = append(out, fmt.Sprintf("%s>%s", r.Data["previous_state"], r.Data["state"]))
	}
	return out
}

func indexOf(evs []event.Event, id string) int {
	for i, ev := range evs {
		if ev.ID() == id {
			return i
		}
	}
	return -1
}

// A tool that breaks is degraded within three calls and quarantined within
// ten; with no traffic at all its quarantine expires into probation and the
// probation into health, each announced once although two copies run.
func TestHardDropQuarantineExpiryProbation(t *testing.T) {
	w := newWorld(t)
	cfg := w.config(t)
	a := w.start(t, cfg)
	b := w.start(t, cfg)
	defer a.Stop()
	defer b.Stop()
	var evs []event.Event
	for _, name := range []string{"good-1", "good-2", "good-3"} {
		evs = append(evs, w.event(t, health.TypeToolRegistered, map[string]any{"name": name, "description": "a tool"}))
	}
	evs = append(evs, w.calls(t, "flaky", true, 40)...)
	drop := len(evs)
	evs = append(evs, w.calls(t, "flaky", false, 12)...)
	w.publish(t, evs...)

	// The first failure puts it in warning (logged, not published).
	want := []string{"warning>degraded", "degraded>quarantined", "quarantined>probation", "probation>healthy"}
	var rs []result
	testenv.Eventually(t, time.Minute, func() bool { rs = w.results(t); return len(states(rs, "flaky")) >= len(want) },
		"flaky went through %v; got %v", want, states(rs, "flaky"))
	require.Equal(t, want, states(rs, "flaky"))
	require.Equal(t, health.TypeToolDegraded, rs[0].Type)
	require.LessOrEqual(t, indexOf(evs, rs[0].Cause)-drop+1, 3, "degraded within 3 calls of the drop")
	require.Equal(t, health.TypeToolQuarantined, rs[1].Type)
	require.LessOrEqual(t, indexOf(evs, rs[1].Cause)-drop+1, 10, "quarantined within 10 calls of the drop")
	q := rs[1].Data["quarantine"].(map[string]any)
	require.EqualValues(t, 1, q["offence"])
	require.NotEmpty(t, q["expires_at"])
	require.Equal(t, health.TypeToolRecovered, rs[2].Type)
	require.Equal(t, health.TypeToolRecovered, rs[3].Type)
	for i := 1; i < len(rs); i++ {
		require.Greater(t, rs[i].Data["version"], rs[i-1].Data["version"], "per-tool versions grow with each transition")
	}
	// Exactly one message per transition although both copies ran timers.
	require.Equal(t, len(rs), w.countMessages(t, health.ResultSubjects...))
}

// toolStates reads every tool's state, version, offences and held-back flag
// of the tenant from the degrader's table.
func toolStates(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, tenant string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT tool_name, state, version, offences, held_back, detail::text FROM health_tools WHERE tenant_id = $1`, tenant)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, state, detail string
		var version int64
		var offences int
		var held bool
		require.NoError(t, rows.Scan(&name, &state, &version, &offences, &held, &detail))
		out[name] = fmt.Sprintf("%s v%d offences=%d held=%v %s", state, version, offences, held, detail)
	}
	require.NoError(t, rows.Err())
	return out
}

// The share cap holds exactly for small toolboxes: with every tool failing,
// at most floor(0.5 × n) are quarantined; the rest stay degraded with an
// alert that says the cap held them back.
func TestShareCapIsExact(t *testing.T) {
	for _, n := range []int{1, 2, 3, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			w := newWorld(t)
			p := w.start(t, w.config(t))
			defer p.Stop()
			var evs []event.Event
			for i := 0; i < n; i++ {
				tool := fmt.Sprintf("tool-%03d", i)
				evs = append(evs, w.calls(t, tool, true, 20)...)
			}
			for round := 0; round < 12; round++ {
				for i := 0; i < n; i++ {
					evs = append(evs, w.calls(t, fmt.Sprintf("tool-%03d", i), false, 1)...)
				}
			}
			w.publish(t, evs...)
			quarantined, held := 0, 0
			testenv.Eventually(t, 2*time.Minute, func() bool {
				quarantined, held = 0, 0
				for _, r := range w.results(t) {
					if r.Type == health.TypeToolQuarantined {
						quarantined++
					}
					if r.Type == health.TypeToolDegraded && r.Data["held_back"] == true {
						held++
					}
				}
				return quarantined+held == n
			}, "every tool quarantined or held back: %d quarantined, %d held of %d", quarantined, held, n)
			require.Equal(t, n/2, quarantined, "floor(0.5 × %d) quarantined", n)
			require.Equal(t, n-n/2, held)
			for _, r := range w.results(t) {
				if r.Data["held_back"] == true {
					require.Contains(t, r.Data["reason"], "share cap")
				}
			}
		})
	}
}

// An operator's release lifts a quarantine at once into probation and says
// who and why; releasing a tool that is not quarantined is refused.
func TestOperatorRelease(t *testing.T) {
	w := newWorld(t)
	cfg := w.config(t)
	cfg.Degrade.QuarantineBase = time.Hour // only the release can end it
	cfg.Degrade.QuarantineMax = time.Hour
	p := w.start(t, cfg)
	defer p.Stop()
	var evs []event.Event
	for _, name := range []string{"a", "b", "c"} {
		evs = append(evs, w.event(t, health.TypeToolRegistered, map[string]any{"name": name, "description": "a tool"}))
	}
	evs = append(evs, w.calls(t, "flaky", true, 30)...)
	evs = append(evs, w.calls(t, "flaky", false, 12)...)
	w.publish(t, evs...)
	testenv.Eventually(t, time.Minute, func() bool { return len(states(w.results(t), "flaky")) >= 2 }, "quarantined")
	rel := w.event(t, health.TypeToolReleased, map[string]any{"tool_name": "flaky", "reason": "backend fixed", "released_by": "ops-alice"})
	bad := w.event(t, health.TypeToolReleased, map[string]any{"tool_name": "a", "released_by": "ops-alice"})
	start := time.Now()
	w.publish(t, rel, bad)
	var rs []result
	testenv.Eventually(t, 10*time.Second, func() bool { rs = w.results(t); return len(rs) >= 4 }, "release answered")
	took := time.Since(start)
	require.Equal(t, []string{"warning>degraded", "degraded>quarantined", "quarantined>probation"}, states(rs, "flaky"))
	var release, rejected *result
	for i := range rs {
		switch {
		case rs[i].Type == health.TypeToolRecovered:
			release = &rs[i]
		case rs[i].Type == health.TypeRejected:
			rejected = &rs[i]
		}
	}
	require.NotNil(t, release)
	require.Equal(t, rel.ID(), release.Cause)
	require.Equal(t, "released by ops-alice: backend fixed", release.Data["reason"])
	require.NotNil(t, rejected)
	require.Equal(t, bad.ID(), rejected.Cause)
	require.Contains(t, rejected.Data["reason"], "not quarantined")
	t.Logf("release answered in %s", took)
}

// A rebuild into empty tables reaches the live states, tool by tool, and
// publishes nothing: no transition, no timer.
func TestReplayEqualsLiveAndPublishesNothing(t *testing.T) {
	w := newWorld(t)
	cfg := w.config(t)
	p := w.start(t, cfg)
	var evs []event.Event
	for i, tool := range []string{"steady", "broken", "sliding", "rated"} {
		evs = append(evs, w.calls(t, tool, true, 30+i)...)
	}
	evs = append(evs, w.calls(t, "broken", false, 15)...)
	for i := 0; i < 60; i++ {
		evs = append(evs, w.calls(t, "sliding", i%3 != 0, 1)...)
		evs = append(evs, w.event(t, health.TypeToolRated, map[string]any{"tool_name": "rated", "rating": 0.1, "rater_kind": "rules", "rater": "rules:v1"}))
	}
	w.publish(t, evs...)
	// Let the whole episode run out: quarantine, probation, recovery.
	testenv.Eventually(t, time.Minute, func() bool {
		s := states(w.results(t), "broken")
		return len(s) > 0 && s[len(s)-1] == "probation>healthy"
	}, "broken recovered: %v", states(w.results(t), "broken"))
	// Read once the live copy has stopped: until then its timer ticks and
	// results may still change the states and add messages, which would be
	// charged to the rebuild.
	p.Stop()
	pool := testenv.Pool(t)
	live := toolStates(t, pool, w.tenant)
	before := w.countMessages(t, append(append([]string{}, health.ResultSubjects...), "degrader.timer.*")...)

	reg, err := schemas.Load()
	require.NoError(t, err)
	rep, err := replay.Rebuild(context.Background(), w.nats.JS, pool, reg,
		health.RebuildTarget(pool, outbox.New(pool, w.pub, testenv.Logger(t)), health.Options{Params: health.ParamsFrom(cfg.Degrade)}, testenv.Logger(t)),
		replay.Options{Tenant: w.tenant, BatchSize: 7, Log: testenv.Logger(t)})
	require.NoError(t, err)
	require.Greater(t, rep.Events, len(evs))
	require.Equal(t, live, toolStates(t, pool, w.tenant))
	var outboxRows int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE tenant_id = $1`, w.tenant).Scan(&outboxRows))
	require.Zero(t, outboxRows, "nothing left to publish")
	require.Equal(t, before, w.countMessages(t, append(append([]string{}, health.ResultSubjects...), "degrader.timer.*")...))
}

// A tool whose calls succeed but whose output is garbage degrades through
// the real rater: its rules rate error-like output low, and the degrader
// reads the ratings.
func TestGarbageOutputDegradesThroughTheRater(t *testing.T) {
	w := newWorld(t)
	cfg := w.config(t)
	p := testenv.StartProcess(t, cfg, "rater+degrader", rating.Consumer, health.Consumer)
	defer p.Stop()
	var evs []event.Event
	for i := 0; i < 30; i++ {
		evs = append(evs, w.event(t, health.TypeToolExecuted, map[string]any{"tool_name": "scraper", "success": true,
			"input": map[string]any{"url": fmt.Sprintf("https://example.com/%d", i)}, "output": fmt.Sprintf("Title: page %d. The page lists prices and opening hours.", i)}))
	}
	drop := len(evs)
	for i := 0; i < 10; i++ {
		evs = append(evs, w.event(t, health.TypeToolExecuted, map[string]any{"tool_name": "scraper", "success": true,
			"input": map[string]any{"url": fmt.Sprintf("https://example.com/x%d", i)}, "output": "Error: upstream returned 502 Bad Gateway"}))
	}
	w.publish(t, evs...)
	var rs []result
	testenv.Eventually(t, time.Minute, func() bool { rs = w.results(t); return len(rs) > 0 }, "scraper degraded")
	require.Equal(t, health.TypeToolDegraded, rs[0].Type)
	require.Contains(t, rs[0].Data["reason"], "ratings")
	// The cause is the rater's tool.rated; it rated one of the garbage calls.
	rated := conformance.History(t, w.nats.JS, []string{"tool.rated.*"}, w.tenant)
	var causeCall string
	for _, d := range rated {
		if d.Event.ID() == rs[0].Cause {
			causeCall = bus.Causation(d.Event)
		}
	}
	require.NotEmpty(t, causeCall, "degraded by a rating")
	idx := indexOf(evs, causeCall)
	require.GreaterOrEqual(t, idx, drop)
	require.LessOrEqual(t, idx-drop+1, 10, "within 10 rated calls of the drop")
}
