package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// The indexer's state is what applying its events one by one in stream
// order gives, whatever order two copies commit them in. These tests force
// the order: a later event is applied first, by a copy of the handler
// (same consumer, same inbox) before the other copy — the real indexer
// process, or another handler — sees the earlier one.

// resultLog keeps the indexer's results published on the stream's result
// subjects of one tenant, by cause, in arrival order.
type resultLog struct {
	mu      sync.Mutex
	byCause map[string][]result
}

func followResults(t *testing.T, nc *nats.Conn, tenant string) *resultLog {
	t.Helper()
	l := &resultLog{byCause: map[string][]result{}}
	for _, s := range indexer.ResultSubjects {
		sub, err := nc.Subscribe(s[:len(s)-1]+tenant, func(m *nats.Msg) {
			ev, err := bus.Decode(m.Header, m.Data)
			if err != nil {
				return
			}
			var d map[string]any
			if json.Unmarshal(ev.Data(), &d) != nil {
				return
			}
			cause, _ := ev.Extensions()[bus.ExtCausation].(string)
			l.mu.Lock()
			l.byCause[cause] = append(l.byCause[cause], result{Type: ev.Type(), Data: d})
			l.mu.Unlock()
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, nc.Flush())
	return l
}

// last is the newest result for cause; ok is false when there is none.
func (l *resultLog) last(cause string) (result, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.byCause[cause]
	if len(rs) == 0 {
		return result{}, false
	}
	return rs[len(rs)-1], true
}

// handlerCopy is one more copy of the indexer's handler on the test
// database: consumer name given, results recorded.
func handlerCopy(t *testing.T, consumer string) (*indexer.Indexer, *recorder) {
	t.Helper()
	out := &recorder{}
	lex := embed.Lexical{}
	return indexer.New(testenv.Pool(t), out, indexer.Embedders{Prompts: lex, Tools: lex}, indexer.Options{Consumer: consumer}, testenv.Logger(t)), out
}

func handleWith(t *testing.T, ix *indexer.Indexer, ds ...*bus.Delivery) {
	t.Helper()
	for i, err := range ix.Handle(context.Background(), ds) {
		require.NoError(t, err, "event %d (%s %s)", i, ds[i].Event.Type(), ds[i].Event.ID())
	}
}

// servedPrompt is what an agent gets for a prompt id: prompts.get's
// default (production, else the latest), and the version search ranks.
type servedPrompt struct {
	GetVersion, SearchVersion int
	Content                   string
}

func served(t *testing.T, tenant, id, query string) servedPrompt {
	t.Helper()
	lex := embed.Lexical{}
	s, err := search.New(testenv.Pool(t), search.Embedders{Prompts: lex, Tools: lex}, search.Options{GetCacheSize: -1, CacheSize: -1}, testenv.Logger(t))
	require.NoError(t, err)
	ctx := context.Background()
	got, err := s.Get(ctx, tenant, search.GetRequest{ID: id})
	require.NoError(t, err)
	out := servedPrompt{GetVersion: got.Prompt.Version, Content: got.Prompt.Content}
	res, err := s.Prompts(ctx, tenant, search.PromptsRequest{Query: query, Limit: 20})
	require.NoError(t, err)
	for _, r := range res.Results {
		if r.Prompt.Tenant == tenant && r.Prompt.ID == id {
			out.SearchVersion = r.Prompt.Version
		}
	}
	return out
}

// streamOrder is Compute over the deliveries sorted by stream sequence.
func streamOrder(ds ...*bus.Delivery) indexer.State {
	sorted := append([]*bus.Delivery{}, ds...)
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0 && sorted[j].StreamSeq < sorted[j-1].StreamSeq; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	s := indexer.Compute("indexer", sorted)
	// Postgres keeps microseconds.
	for i := range s.Prompts {
		s.Prompts[i].CreatedAt = s.Prompts[i].CreatedAt.Truncate(time.Microsecond)
	}
	for _, ts := range [][]indexer.ToolRow{s.Tools, s.History} {
		for i := range ts {
			ts[i].RegisteredAt = ts[i].RegisteredAt.Truncate(time.Microsecond)
		}
	}
	return s
}

// An explicit version 1 earlier in the stream and a create without a
// version later: in stream order the first is version 1 and the second
// version 2. A copy applies the later one first (it takes version 1); the
// real indexer process then applies the earlier one. Before, the earlier
// create was rejected as version_conflict and version 1 held the later
// content.
func TestExplicitVersionEarlierInTheStreamWinsWhicheverCopyCommitsFirst(t *testing.T) {
	n := testenv.StartNATS(t)
	tenant := testenv.Tenant(t)
	a := &agent{n: n, pool: testenv.Pool(t)}
	a.reg, a.pub = mustRegistry(t, n)
	results := followResults(t, n.NC, tenant)
	first := a.publish(t, tenant, indexer.TypePromptCreated, map[string]any{"id": "greet", "version": 1, "type": "task", "name": "Greeting", "content": "Say hello to the caller."})
	second := a.publish(t, tenant, indexer.TypePromptCreated, map[string]any{"id": "greet", "type": "task", "name": "Greeting", "content": "Say hi to the caller."})
	hist := conformance.History(t, n.JS, indexer.Subjects, tenant)
	require.Len(t, hist, 2)

	// Copy b applies the later create first.
	b, _ := handlerCopy(t, "indexer")
	handleWith(t, b, hist[1])
	// Copy a, the real consumer, applies the earlier one (the later one
	// is a duplicate to it).
	testenv.StartProcess(t, testenv.Config(t, n.URL), "indexer-a", indexer.Consumer)
	testenv.Eventually(t, 30*time.Second, func() bool { _, ok := results.last(first.ID()); return ok }, "a result for the earlier create")
	a.applied(t, first, second)

	res, _ := results.last(first.ID())
	require.Equal(t, indexer.TypePromptIndexed, res.Type, "earlier create: %v", res.Data)
	require.Equal(t, "created", res.Data["outcome"])
	require.Equal(t, float64(1), res.Data["version"])
	// The later create's decision changed: the copy that changed it says so.
	res, ok := results.last(second.ID())
	require.True(t, ok, "no revised result for the later create")
	require.Equal(t, indexer.TypePromptIndexed, res.Type)
	require.Equal(t, float64(2), res.Data["version"])
	require.Equal(t, library.Hash("greet", 2, "Say hi to the caller.", "task"), res.Data["content_hash"])

	ctx := context.Background()
	live, err := indexer.ReadState(ctx, a.pool, tenant)
	require.NoError(t, err)
	require.Equal(t, streamOrder(hist...), live)
	require.Len(t, live.Prompts, 2)
	for i, want := range []struct {
		content string
		ev      *bus.Delivery
		current bool
	}{{"Say hello to the caller.", hist[0], false}, {"Say hi to the caller.", hist[1], true}} {
		p := live.Prompts[i]
		require.Equal(t, i+1, p.Version)
		require.Equal(t, want.content, p.Content)
		require.Equal(t, library.Hash("greet", i+1, want.content, "task"), p.Hash)
		require.Equal(t, want.ev.Event.ID(), p.EventID)
		require.Equal(t, int64(want.ev.StreamSeq), p.StreamSeq)
		require.Equal(t, want.current, p.Current)
	}
	require.Equal(t, servedPrompt{GetVersion: 2, SearchVersion: 2, Content: "Say hi to the caller."}, served(t, tenant, "greet", "caller"))
}

// Three registrations of one tool, applied last first: the served
// definition is the last one in stream order, and the versions count in
// stream order. Before, the first registration (applied last) was served
// as version 3.
func TestServedToolIsTheLastRegisteredInStreamOrder(t *testing.T) {
	n := testenv.StartNATS(t)
	tenant := testenv.Tenant(t)
	a := &agent{n: n, pool: testenv.Pool(t)}
	a.reg, a.pub = mustRegistry(t, n)
	results := followResults(t, n.NC, tenant)
	descs := []string{"Current weather for a city", "Weather and forecast for a city", "Weather, forecast and alerts for a city"}
	var evs []event.Event
	for _, d := range descs {
		evs = append(evs, a.publish(t, tenant, indexer.TypeToolRegistered, map[string]any{"name": "get_weather", "description": d, "server": "wx"}))
	}
	hist := conformance.History(t, n.JS, indexer.Subjects, tenant)
	require.Len(t, hist, 3)
	b, _ := handlerCopy(t, "indexer")
	handleWith(t, b, hist[2])
	handleWith(t, b, hist[1])
	testenv.StartProcess(t, testenv.Config(t, n.URL), "indexer-a", indexer.Consumer)
	testenv.Eventually(t, 30*time.Second, func() bool { _, ok := results.last(evs[0].ID()); return ok }, "a result for the first registration")
	a.applied(t, evs...)

	live, err := indexer.ReadState(context.Background(), a.pool, tenant)
	require.NoError(t, err)
	require.Equal(t, streamOrder(hist...), live)
	require.Len(t, live.History, 3)
	for i, h := range live.History {
		require.Equal(t, i+1, h.Version)
		require.Equal(t, descs[i], h.Description)
		require.Equal(t, hist[i].Event.ID(), h.EventID)
		require.Equal(t, int64(hist[i].StreamSeq), h.StreamSeq)
	}
	require.Len(t, live.Tools, 1)
	require.Equal(t, live.History[2], live.Tools[0])
	for i, ev := range evs {
		res, ok := results.last(ev.ID())
		if i == 0 || ok { // copy b's own results went to its recorder
			require.Equal(t, float64(i+1), res.Data["version"], "registration %d", i)
		}
	}
	var resp search.ToolsResponse
	require.NoError(t, a.call(search.ToolsSubject, tenant, search.ToolsRequest{Query: "weather forecast alerts", Limit: 5}, &resp))
	require.NotEmpty(t, resp.Results)
	require.Equal(t, "get_weather", resp.Results[0].Tool.Name)
	require.Equal(t, descs[2], resp.Results[0].Tool.Description)
	require.Equal(t, 3, resp.Results[0].Tool.Version)
}

// A create and a production activation of one prompt id applied at the
// same moment by two copies: the activation (later in the stream) is held
// just before its commit while the create (earlier) is applied by the
// other copy. prompts.get and search must serve the same version, the
// labelled one. Before, the activation took no lock and the create's
// insert, which could not see the uncommitted label, marked the new
// version current: search served version 2, prompts.get version 1.
func TestActivationAndCreateAtOnceServeOneVersion(t *testing.T) {
	if os.Getenv("AGENTQ_DATABASE_URL") == "" {
		t.Skip("needs transactions that run at once: native Postgres (AGENTQ_DATABASE_URL); PGlite runs one at a time")
	}
	r := newRig(t)
	ctx := context.Background()
	const gate = int64(0x61677471) // "agtq"
	g := &gated{key: gate}
	lex := embed.Lexical{}
	b := indexer.New(r.pool, g, indexer.Embedders{Prompts: lex, Tools: lex}, indexer.Options{Consumer: "indexer-test"}, testenv.Logger(t))

	r.apply(t, indexer.TypePromptCreated, prompt("x", 1, "One about parcels."))
	create := r.delivery(t, indexer.TypePromptCreated, prompt("x", 0, "Two about parcels."))
	activate := r.delivery(t, indexer.TypePromptActivated, map[string]any{"prompt_id": "x", "version": 1, "label": "production"})

	hold, err := r.pool.Acquire(ctx)
	require.NoError(t, err)
	defer hold.Release()
	_, err = hold.Exec(ctx, `SELECT pg_advisory_lock($1)`, gate)
	require.NoError(t, err)
	waiting := func() int {
		var k int
		require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&k))
		return k
	}
	errs := make(chan []error, 2)
	go func() { errs <- b.Handle(ctx, []*bus.Delivery{activate}) }()
	testenv.Eventually(t, 10*time.Second, func() bool { return waiting() >= 1 }, "the activation held before its commit")
	done := make(chan []error, 1)
	go func() { done <- r.ix.Handle(ctx, []*bus.Delivery{create}) }()
	// The create either commits at once (no lock shared with the
	// activation) or waits for the activation's lock.
	testenv.Eventually(t, 10*time.Second, func() bool {
		select {
		case e := <-done:
			done <- e
			return true
		default:
			return waiting() >= 2
		}
	}, "the create committed or waiting")
	_, err = hold.Exec(ctx, `SELECT pg_advisory_unlock($1)`, gate)
	require.NoError(t, err)
	for _, ch := range []chan []error{errs, done} {
		for _, err := range <-ch {
			require.NoError(t, err)
		}
	}
	live, err := indexer.ReadState(ctx, r.pool, r.tenant)
	require.NoError(t, err)
	var current []int
	for _, p := range live.Prompts {
		if p.Current {
			current = append(current, p.Version)
		}
	}
	require.Equal(t, []int{1}, current, "the version labelled production is the one served")
	require.Equal(t, servedPrompt{GetVersion: 1, SearchVersion: 1, Content: "One about parcels."}, served(t, r.tenant, "x", "parcels"))
}

// gated is a Sender that holds its transaction just before the commit
// until the test releases the advisory lock key.
type gated struct {
	recorder
	key int64
}

func (g *gated) Queue(b *pgx.Batch, _ ...event.Event) error {
	b.Queue(`SELECT pg_advisory_xact_lock_shared($1)`, g.key)
	return nil
}

// The same event id stored again later in the stream (a republish after
// the duplicate window, a redrive) and applied before the original: the
// first occurrence counts, at its sequence, for every kind of state. Each
// case is a stream (deliveries in stream order, a republished one reusing
// an earlier event) and the order a copy applies it in.
func TestRepublishedCopyAppliedFirstCountsAtTheOriginalsSequence(t *testing.T) {
	type step struct {
		typ  string
		data map[string]any
		of   int // >= 0: a copy of step `of`
	}
	ev := func(typ string, data map[string]any) step { return step{typ: typ, data: data, of: -1} }
	again := func(i int) step { return step{of: i} }
	reg := func(desc string) map[string]any {
		return map[string]any{"name": "lookup", "description": desc, "server": "s"}
	}
	for _, c := range []struct {
		name   string
		stream []step
		order  []int // indexes into stream, the order applied
		check  func(t *testing.T, s indexer.State, ds []*bus.Delivery)
	}{{
		name: "label",
		stream: []step{
			ev(indexer.TypePromptCreated, prompt("p", 1, "One.")),
			ev(indexer.TypePromptCreated, prompt("p", 2, "Two.")),
			ev(indexer.TypePromptActivated, map[string]any{"prompt_id": "p", "version": 1, "label": "production"}),
			ev(indexer.TypePromptActivated, map[string]any{"prompt_id": "p", "version": 2, "label": "production"}),
			again(2),
		},
		order: []int{0, 1, 4, 3, 2},
		check: func(t *testing.T, s indexer.State, ds []*bus.Delivery) {
			require.Equal(t, []indexer.LabelRow{{PromptID: "p", Label: "production", Version: 2, StreamSeq: int64(ds[3].StreamSeq)}}, s.Labels)
		},
	}, {
		name: "next free version",
		stream: []step{
			ev(indexer.TypePromptCreated, prompt("p", 0, "One.")),
			ev(indexer.TypePromptCreated, prompt("p", 0, "Two.")),
			again(0),
		},
		order: []int{2, 1, 0},
		check: func(t *testing.T, s indexer.State, ds []*bus.Delivery) {
			require.Len(t, s.Prompts, 2)
			require.Equal(t, []any{"One.", ds[0].Event.ID(), int64(ds[0].StreamSeq)}, []any{s.Prompts[0].Content, s.Prompts[0].EventID, s.Prompts[0].StreamSeq})
			require.Equal(t, []any{"Two.", ds[1].Event.ID(), int64(ds[1].StreamSeq)}, []any{s.Prompts[1].Content, s.Prompts[1].EventID, s.Prompts[1].StreamSeq})
		},
	}, {
		name: "tool definition",
		stream: []step{
			ev(indexer.TypeToolRegistered, reg("Find a customer")),
			ev(indexer.TypeToolRegistered, reg("Find a customer by email")),
			again(0),
		},
		order: []int{2, 1, 0},
		check: func(t *testing.T, s indexer.State, ds []*bus.Delivery) {
			require.Len(t, s.Tools, 1)
			require.Equal(t, []any{"Find a customer by email", 2, ds[1].Event.ID(), int64(ds[1].StreamSeq)},
				[]any{s.Tools[0].Description, s.Tools[0].Version, s.Tools[0].EventID, s.Tools[0].StreamSeq})
			require.Len(t, s.History, 2)
			require.Equal(t, int64(ds[0].StreamSeq), s.History[0].StreamSeq)
		},
	}, {
		name: "tool health",
		stream: []step{
			ev(indexer.TypeToolDegraded, map[string]any{"tool_name": "lookup", "state": "degraded", "quality_score": 0.2, "threshold": 0.5}),
			ev(indexer.TypeToolRecovered, map[string]any{"tool_name": "lookup", "state": "healthy", "quality_score": 0.8, "threshold": 0.5}),
			again(0),
		},
		order: []int{2, 1, 0},
		check: func(t *testing.T, s indexer.State, ds []*bus.Delivery) {
			require.Len(t, s.Health, 1)
			require.Equal(t, []any{"healthy", false, int64(ds[1].StreamSeq)}, []any{s.Health[0].State, s.Health[0].Quarantined, s.Health[0].StreamSeq})
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			ds := make([]*bus.Delivery, len(c.stream))
			for i, s := range c.stream {
				if s.of < 0 {
					ds[i] = r.delivery(t, s.typ, s.data)
					continue
				}
				r.seq++
				orig := ds[s.of]
				ds[i] = &bus.Delivery{Event: orig.Event, Tenant: orig.Tenant, Subject: orig.Subject, StreamSeq: r.seq, Time: r.start.Add(time.Duration(r.seq) * time.Second)}
			}
			for _, i := range c.order {
				r.handle(t, ds[i])
			}
			live, err := indexer.ReadState(context.Background(), r.pool, r.tenant)
			require.NoError(t, err)
			c.check(t, live, ds)
			require.Equal(t, streamOrder(ds...), live)
		})
	}
}

// A lone event whose text the embedder refuses is indexed for full text,
// as it is in a batch with another event. Before, it failed (retried, then
// dead-lettered) while the same event beside another was indexed.
func TestLoneEventTheEmbedderRefusesIsIndexedForFullText(t *testing.T) {
	r := newRig(t)
	d := r.delivery(t, indexer.TypePromptCreated, map[string]any{"id": "bangs", "type": "task", "name": "!!", "content": "???"})
	errs := r.ix.Handle(context.Background(), []*bus.Delivery{d})
	for _, err := range errs {
		require.NoError(t, err)
	}
	res := r.out.byCause(t)[d.Event.ID()]
	require.Equal(t, indexer.TypePromptIndexed, res.Type)
	require.Equal(t, map[string]any{"prompt_id": "bangs", "version": float64(1), "outcome": "created", "type": "task", "name": "!!",
		"content_hash": library.Hash("bangs", 1, "???", "task")}, res.Data, "no embedding_model: stored without a vector")
	var model string
	var dim int
	var hasVector bool
	require.NoError(t, r.pool.QueryRow(context.Background(), `SELECT embedding_model, embedding_dim, embedding IS NOT NULL FROM prompts WHERE tenant_id = $1 AND id = 'bangs'`,
		r.tenant).Scan(&model, &dim, &hasVector))
	require.Equal(t, []any{"", 0, false}, []any{model, dim, hasVector})

	tool := r.delivery(t, indexer.TypeToolRegistered, map[string]any{"name": "x", "description": "?!"})
	r.handle(t, tool)
	require.Equal(t, indexer.TypeToolIndexed, r.out.byCause(t)[tool.Event.ID()].Type)
}

// A prompt at the largest version there is leaves no next free version: a
// create without a version is rejected with a reason, and the batch it is
// in applies. Before, the next version overflowed the column and failed the
// whole batch, again and again.
func TestNoVersionAfterTheLargestIsRejected(t *testing.T) {
	r := newRig(t)
	r.apply(t, indexer.TypePromptCreated, prompt("big", math.MaxInt32, "The last one."))
	next := r.delivery(t, indexer.TypePromptCreated, prompt("big", 0, "One more."))
	other := r.delivery(t, indexer.TypePromptCreated, prompt("other", 0, "Elsewhere."))
	r.handle(t, next, other)
	res := r.out.byCause(t)
	require.Equal(t, indexer.TypeRejected, res[next.Event.ID()].Type)
	require.Equal(t, "version_exhausted", res[next.Event.ID()].Data["reason_code"])
	require.Contains(t, res[next.Event.ID()].Data["reason"], "2147483647")
	require.Equal(t, indexer.TypePromptIndexed, res[other.Event.ID()].Type)
	// The same content as the largest is still unchanged.
	_, same := r.apply(t, indexer.TypePromptCreated, prompt("big", 0, "The last one."))
	require.Equal(t, "unchanged", same.Data["outcome"])

	live, err := indexer.ReadState(context.Background(), r.pool, r.tenant)
	require.NoError(t, err)
	require.Len(t, live.Prompts, 2)
}

func mustRegistry(t *testing.T, n *testenv.NATS) (*schemas.Registry, *bus.Publisher) {
	t.Helper()
	reg, err := schemas.Load()
	require.NoError(t, err)
	return reg, bus.NewPublisher(n.JS, reg)
}

// A create arriving late changes the decisions after it: an explicit
// version 1 that was created becomes a conflict, and a create answered
// unchanged becomes version 2. Each gets a revised result, and the new
// version, whose text no copy had embedded, gets its vector.
func TestLateCreateRevisesLaterDecisions(t *testing.T) {
	r := newRig(t)
	late := r.delivery(t, indexer.TypePromptCreated, prompt("p", 0, "Alpha text about invoices."))
	explicit := r.delivery(t, indexer.TypePromptCreated, prompt("p", 1, "Beta text about invoices."))
	same := r.delivery(t, indexer.TypePromptCreated, prompt("p", 0, "Beta text about invoices."))
	r.handle(t, explicit)
	r.handle(t, same)
	require.Equal(t, "unchanged", r.out.byCause(t)[same.Event.ID()].Data["outcome"])
	r.handle(t, late)

	last := map[string]result{}
	ids := map[string]bool{}
	for _, ev := range r.out.sent {
		require.False(t, ids[ev.ID()], "result id %s twice", ev.ID())
		ids[ev.ID()] = true
		var d map[string]any
		require.NoError(t, json.Unmarshal(ev.Data(), &d))
		last[bus.Causation(ev)] = result{Type: ev.Type(), Data: d}
	}
	require.Len(t, r.out.sent, 5, "3 results and 2 revisions")
	require.Equal(t, result{Type: indexer.TypePromptIndexed, Data: map[string]any{"prompt_id": "p", "version": float64(1), "outcome": "created",
		"content_hash": library.Hash("p", 1, "Alpha text about invoices.", "task"), "type": "task", "name": "Prompt p",
		"embedding_model": embed.Lexical{}.Model(), "embedding_dim": float64(embed.Lexical{}.Dimension())}}, last[late.Event.ID()])
	res := last[explicit.Event.ID()]
	require.Equal(t, indexer.TypeRejected, res.Type)
	require.Equal(t, indexer.ReasonVersionConflict, res.Data["reason_code"])
	require.Equal(t, explicit.Event.ID(), res.Data["event_id"])
	require.Equal(t, true, res.Data["revised"])
	require.Equal(t, result{Type: indexer.TypePromptIndexed, Data: map[string]any{"prompt_id": "p", "version": float64(2), "outcome": "created",
		"content_hash": library.Hash("p", 2, "Beta text about invoices.", "task"), "type": "task", "name": "Prompt p", "revised": true}},
		last[same.Event.ID()])

	live, err := indexer.ReadState(context.Background(), r.pool, r.tenant)
	require.NoError(t, err)
	require.Equal(t, streamOrder(late, explicit, same), live)
	var model string
	var dim int
	require.NoError(t, r.pool.QueryRow(context.Background(), `SELECT embedding_model, embedding_dim FROM prompts WHERE tenant_id = $1 AND id = 'p' AND version = 2 AND embedding IS NOT NULL`,
		r.tenant).Scan(&model, &dim))
	require.Equal(t, []any{embed.Lexical{}.Model(), embed.Lexical{}.Dimension()}, []any{model, dim})

	// Applied again (a redelivery), nothing changes and nothing more is said.
	r.handle(t, late, explicit, same)
	require.Len(t, r.out.sent, 5)
}

// Whatever order two copies apply a history in, in batches of any size,
// with republished copies of some events among them, the state is the
// reference's, and each input's newest result says what its event did in
// stream order: the version its row holds, or no row.
func TestAnyApplyOrderGivesStreamOrderState(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	if os.Getenv("AGENTQ_ORDER_SEEDS") != "" { // a longer search: AGENTQ_ORDER_SEEDS=200
		n, err := strconv.Atoi(os.Getenv("AGENTQ_ORDER_SEEDS"))
		require.NoError(t, err)
		seeds = seeds[:0]
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := newRig(t)
			rng := rand.New(rand.NewPCG(seed, 7))
			evs := workload(t, r.tenant, 160, seed)
			var ds []*bus.Delivery
			for _, ev := range evs {
				r.seq++
				ds = append(ds, &bus.Delivery{Event: ev, Tenant: r.tenant, Subject: "x." + r.tenant, StreamSeq: r.seq, Time: ev.Time()})
			}
			// Republished copies later in the stream.
			for range 16 {
				orig := ds[rng.IntN(len(evs))]
				r.seq++
				ds = append(ds, &bus.Delivery{Event: orig.Event, Tenant: r.tenant, Subject: orig.Subject, StreamSeq: r.seq, Time: orig.Time})
			}
			order := rng.Perm(len(ds))
			if seed%4 != 0 {
				// Near stream order, as copies apply it: out of place
				// within windows of a few batches.
				sort.SliceStable(order, func(a, b int) bool { return order[a]/24 < order[b]/24 })
			}
			b := indexer.New(r.pool, r.out, indexer.Embedders{Prompts: embed.Lexical{}, Tools: embed.Lexical{}}, indexer.Options{Consumer: "indexer-test"}, testenv.Logger(t))
			for copyA := true; len(order) > 0; copyA = !copyA {
				k := min(len(order), 1+rng.IntN(6))
				batch := make([]*bus.Delivery, k)
				for j, i := range order[:k] {
					batch[j] = ds[i]
				}
				sort.Slice(batch, func(x, y int) bool { return batch[x].StreamSeq < batch[y].StreamSeq })
				ix := r.ix
				if !copyA {
					ix = b
				}
				handleWith(t, ix, batch...)
				order = order[k:]
			}
			live, err := indexer.ReadState(context.Background(), r.pool, r.tenant)
			require.NoError(t, err)
			require.Equal(t, streamOrder(ds...), live)

			// The newest result of each input.
			last := map[string]result{}
			for _, ev := range r.out.sent {
				var d map[string]any
				require.NoError(t, json.Unmarshal(ev.Data(), &d))
				last[bus.Causation(ev)] = result{Type: ev.Type(), Data: d}
			}
			prompts := map[string]indexer.PromptRow{}
			for _, p := range live.Prompts {
				prompts[p.EventID] = p
			}
			tools := map[string]indexer.ToolRow{}
			for _, h := range live.History {
				tools[h.EventID] = h
			}
			for _, ev := range evs {
				res, ok := last[ev.ID()]
				switch ev.Type() {
				case indexer.TypeQualityChanged, indexer.TypeToolDegraded, indexer.TypeToolQuarantined, indexer.TypeToolRecovered:
					require.False(t, ok)
					continue
				}
				require.True(t, ok, "no result for %s", ev.ID())
				switch ev.Type() {
				case indexer.TypePromptCreated:
					if p, stored := prompts[ev.ID()]; stored {
						require.Equal(t, []any{"created", float64(p.Version), p.Hash}, []any{res.Data["outcome"], res.Data["version"], res.Data["content_hash"]}, "create %s", ev.ID())
					} else {
						require.NotEqual(t, "created", res.Data["outcome"], "create %s stored nothing", ev.ID())
					}
				case indexer.TypeToolRegistered:
					if h, stored := tools[ev.ID()]; stored {
						require.Equal(t, []any{"created", float64(h.Version)}, []any{res.Data["outcome"], res.Data["version"]}, "registration %s", ev.ID())
					} else {
						require.Equal(t, "unchanged", res.Data["outcome"], "registration %s", ev.ID())
					}
				}
			}
		})
	}
}
