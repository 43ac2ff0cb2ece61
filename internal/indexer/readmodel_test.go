package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// These tests drive a real indexer process (embedded NATS, the test
// database) with nothing but events, and look at what it serves the way an
// agent does: NATS request/reply on search.*.<tenant>. The indexer learns
// health and quality from the stream alone (DESIGN §10), so no table is
// written by the test.

// agent publishes events and searches, on a connection of its own, against
// one indexer process.
type agent struct {
	n    *testenv.NATS
	reg  *schemas.Registry
	pub  *bus.Publisher
	raw  *bus.Publisher // no schema check: for events agentq itself would refuse to publish
	pool *pgxpool.Pool
}

func startIndexer(t *testing.T) *agent {
	t.Helper()
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	testenv.StartProcess(t, testenv.Config(t, n.URL), "indexer", indexer.Consumer)
	return &agent{n: n, reg: reg, pub: bus.NewPublisher(n.JS, reg), raw: bus.NewPublisher(n.JS, nil), pool: testenv.Pool(t)}
}

// publish sends one schema-valid event of tenant and returns it.
func (a *agent) publish(t *testing.T, tenant, typ string, data any) event.Event {
	t.Helper()
	ev, err := bus.NewEvent(typ, tenant, "test", data)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = a.pub.Publish(ctx, ev)
	require.NoError(t, err)
	return ev
}

// call sends a request as an agent does and checks a success reply against
// its response schema.
func (a *agent) call(subject, tenant string, req, resp any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var raw json.RawMessage
	if err := service.Call(ctx, a.n.NC, subject+"."+tenant, req, &raw); err != nil {
		return err
	}
	if err := a.reg.Validate("agentq."+subject+".response.v1", raw); err != nil {
		return fmt.Errorf("reply breaks its schema: %w: %s", err, raw)
	}
	return json.Unmarshal(raw, resp)
}

// applied waits until the indexer has applied every event of evs (its
// inbox has them), so that events whose effect is "nothing changes" have
// been seen before the test looks.
func (a *agent) applied(t *testing.T, evs ...event.Event) {
	t.Helper()
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID()
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		var k int
		require.NoError(t, a.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM inbox WHERE consumer = 'indexer' AND event_id = ANY($1)`, ids).Scan(&k))
		return k == len(ids)
	}, "the indexer applied %d events", len(ids))
}

// word is a token no other test uses: _global is shared by every test on
// the database, so results are narrowed to names holding it.
func testWord(t *testing.T) string { return "zq" + testenv.Tenant(t)[1:] }

// round keeps figures comparable after a trip through SQL and JSON.
func round9(x float64) float64 { return math.Round(x*1e9) / 1e9 }

// toolSeen is what an agent learns of one tool from search.tools.
type toolSeen struct {
	Tenant, Name, Hash, State string
	Version                   int
	QualityScore              float64 // the response's quality_score; -1 when it has none
	Quality                   float64 // the quality component of the score
}

type toolDef struct {
	tenant, name, description string
	quality                   float64 // what its quality.changed reports
}

func (d toolDef) data() map[string]any {
	return map[string]any{"name": d.name, "description": d.description, "server": "billing", "tags": []string{"billing"},
		"input_schema": map[string]any{"type": "object", "properties": map[string]any{"number": map[string]any{"type": "string"}}}}
}

// seen is how search.tools must report d with state.
func (d toolDef) seen(t *testing.T, state string) toolSeen {
	t.Helper()
	data := d.data()
	schema, err := json.Marshal(data["input_schema"])
	require.NoError(t, err)
	h, err := registry.Hash(d.name, d.description, schema, "billing", []string{"billing"})
	require.NoError(t, err)
	return toolSeen{Tenant: d.tenant, Name: d.name, Hash: h, State: state, Version: 1, QualityScore: d.quality, Quality: d.quality}
}

// searchTools returns the tools of this test (named with w) that
// search.tools gives tenant, in the order given, after checking that the
// whole reply is sorted by score and each score adds up its components. It
// asks for the most results: _global tools of other tests on a shared
// database may rank among this test's.
func (a *agent) searchTools(tenant, query, w string) ([]toolSeen, error) {
	var resp search.ToolsResponse
	if err := a.call(search.ToolsSubject, tenant, search.ToolsRequest{Query: query, Limit: search.MaxToolLimit}, &resp); err != nil {
		return nil, err
	}
	if resp.Retrieval.Degraded {
		return nil, fmt.Errorf("retrieval degraded: %+v", resp.Retrieval)
	}
	out := []toolSeen{}
	for i, r := range resp.Results {
		if i > 0 && r.Score > resp.Results[i-1].Score {
			return nil, fmt.Errorf("result %d scores %v, above the one before it (%v)", i, r.Score, resp.Results[i-1].Score)
		}
		if !strings.Contains(r.Tool.Name, w) {
			continue
		}
		qs := -1.0
		if r.Tool.QualityScore != nil {
			qs = round9(*r.Tool.QualityScore)
		}
		out = append(out, toolSeen{Tenant: r.Tool.Tenant, Name: r.Tool.Name, Hash: r.Tool.Hash, State: r.Tool.State,
			Version: r.Tool.Version, QualityScore: qs, Quality: round9(r.Components.Quality)})
	}
	return out, nil
}

// Quarantined tools are never returned and come back after tool.recovered,
// learnt from events only; a health row counts for the tenant that
// published it (the caller) and, for its own tools, the tool's tenant: a
// quarantine in tenant A hides neither tenant B's tool of the same name nor
// a _global tool from B, while a quarantine published in _global hides the
// _global tool from everyone until _global recovers it.
func TestQuarantineAndRecoveryThroughEvents(t *testing.T) {
	ag := startIndexer(t)
	a, b, w := testenv.Tenant(t), testenv.Tenant(t), testWord(t)
	const global = bus.GlobalTenant
	// Qualities far apart so that the order is theirs: every tool matches
	// both query words, so similarities differ by a few hundredths at most
	// (0.5 weight) while qualities differ by 0.35 or more (0.35 weight).
	lookupA := toolDef{a, "lookup_invoice_" + w, "Look up an invoice by its number " + w, 0.95}
	sharedA := toolDef{a, "shared_invoice_" + w, "Send an invoice to the customer " + w, 0.55}
	sharedB := toolDef{b, "shared_invoice_" + w, "Send an invoice to the customer " + w, 0.75}
	globalT := toolDef{global, "global_invoice_" + w, "Archive an invoice for the auditors " + w, 0.15}
	for _, d := range []toolDef{lookupA, sharedA, sharedB, globalT} {
		ag.publish(t, d.tenant, indexer.TypeToolRegistered, d.data())
		ag.publish(t, d.tenant, indexer.TypeQualityChanged, map[string]any{"target": "tool", "tool_name": d.name,
			"state_version": 1, "quality_score": d.quality, "success_rate": d.quality, "total_calls": 20, "successes": int(math.Round(d.quality * 20))})
	}
	health := func(tenant, typ string, d toolDef, state string, expires time.Time) event.Event {
		data := map[string]any{"tool_name": d.name, "state": state, "quality_score": 0.1, "threshold": 0.4}
		if !expires.IsZero() {
			data["quarantine"] = map[string]any{"expires_at": expires.UTC().Format(time.RFC3339), "offence": 1, "reason": "quality below threshold"}
		}
		return ag.publish(t, tenant, typ, data)
	}
	query := "invoice " + w
	look := func(tenant string) ([]toolSeen, error) { return ag.searchTools(tenant, query, w) }
	// expect polls tenant's search until it gives want (an event's effect
	// is seen when the indexer has applied it), failing with the last
	// difference.
	expect := func(what, tenant string, want ...toolSeen) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got, err := look(tenant)
			if assert.NoError(c, err) {
				assert.Equal(c, want, got)
			}
		}, 30*time.Second, 50*time.Millisecond, what)
	}
	// now asserts tenant's search once: for a view that must not change
	// while events of other tenants are applied.
	now := func(what, tenant string, want ...toolSeen) {
		t.Helper()
		got, err := look(tenant)
		require.NoError(t, err)
		require.Equal(t, want, got, what)
	}
	future := time.Now().Add(time.Hour)

	expect("A: its tools and _global's, by quality, no health yet", a, lookupA.seen(t, ""), sharedA.seen(t, ""), globalT.seen(t, ""))
	expect("B: its tool and _global's", b, sharedB.seen(t, ""), globalT.seen(t, ""))

	// A quarantines its shared tool and the _global one (for itself); a
	// third quarantine that has already expired reads as probation.
	health(a, indexer.TypeToolQuarantined, sharedA, "quarantined", future)
	health(a, indexer.TypeToolQuarantined, globalT, "quarantined", future)
	health(a, indexer.TypeToolQuarantined, lookupA, "quarantined", time.Now().Add(-time.Minute))
	expect("A: quarantined tools gone, the expired quarantine on probation", a, lookupA.seen(t, "probation"))
	now("B: A's quarantines hide neither B's tool of the same name nor _global's", b, sharedB.seen(t, ""), globalT.seen(t, ""))

	// A recovers its shared tool, not the _global one.
	health(a, indexer.TypeToolRecovered, sharedA, "healthy", time.Time{})
	health(a, indexer.TypeToolRecovered, lookupA, "healthy", time.Time{})
	expect("A: its shared tool back, healthy", a, lookupA.seen(t, "healthy"), sharedA.seen(t, "healthy"))
	now("B: unchanged", b, sharedB.seen(t, ""), globalT.seen(t, ""))

	// _global quarantines its tool: hidden from every tenant, and A's own
	// recovery of it does not lift _global's quarantine.
	health(global, indexer.TypeToolQuarantined, globalT, "quarantined", future)
	expect("B: _global's quarantine hides _global's tool", b, sharedB.seen(t, ""))
	recoveredByA := health(a, indexer.TypeToolRecovered, globalT, "probation", time.Time{})
	ag.applied(t, recoveredByA)
	now("A: still hidden by _global's quarantine", a, lookupA.seen(t, "healthy"), sharedA.seen(t, "healthy"))

	// _global recovers it: back for everyone, each tenant seeing the state
	// its own row says (the caller's row first, else the tool tenant's).
	health(global, indexer.TypeToolRecovered, globalT, "healthy", time.Time{})
	expect("B: _global's tool back, healthy by _global's row", b, sharedB.seen(t, ""), globalT.seen(t, "healthy"))
	now("A: _global's tool back, on probation by A's own row", a, lookupA.seen(t, "healthy"), sharedA.seen(t, "healthy"), globalT.seen(t, "probation"))
}

// figures are what one quality.changed reports of a prompt version.
type figures struct {
	score float64
	calls int64
}

// callsWeighted is the quality a prompt version must have from its rows:
// the mean of their scores weighted by calls.
func callsWeighted(rows ...figures) float64 {
	var sum float64
	var calls int64
	for _, r := range rows {
		sum += r.score * float64(r.calls)
		calls += r.calls
	}
	return sum / float64(calls)
}

// A prompt version's quality is one figure whether agents (through the
// scorer) report it by content hash or by id@version: quality.changed by
// prompt_hash, by prompt_id + version, and by both (the hash names it) are
// folded by search.prompts into the calls-weighted mean of the rows of the
// caller's and the prompt's tenant. Rows of another version, of another
// tenant, and a stale state_version do not count.
func TestPromptQualityByHashAndIDVersionIsOneFigure(t *testing.T) {
	ag := startIndexer(t)
	a, b, w := testenv.Tenant(t), testenv.Tenant(t), testWord(t)
	const global = bus.GlobalTenant
	type promptDef struct{ tenant, id, content string }
	refund := promptDef{a, "refund-" + w, "Refund the customer's order politely " + w + "."}
	credit := promptDef{a, "credit-" + w, "Offer a store credit instead of a refund " + w + "."}
	exchange1 := promptDef{a, "exchange-" + w, "Offer an exchange before a refund " + w + "."}
	exchange2 := promptDef{a, "exchange-" + w, "Offer an exchange or a refund " + w + "."}
	apology := promptDef{global, "apology-" + w, "Apologise for a late refund " + w + "."}
	var evs []event.Event
	for _, p := range []promptDef{refund, credit, exchange1, exchange2, apology} {
		// No version: the next free one (exchange gets 1, then 2).
		evs = append(evs, ag.publish(t, p.tenant, indexer.TypePromptCreated, map[string]any{"id": p.id, "type": "task", "name": p.id, "content": p.content}))
	}
	hash := func(p promptDef, version int) string { return library.Hash(p.id, version, p.content, "task") }

	// What the scorer would publish: by hash, by id + version, or both.
	byHash := func(p promptDef, version int) map[string]any { return map[string]any{"prompt_hash": hash(p, version)} }
	byID := func(p promptDef, version int) map[string]any {
		return map[string]any{"prompt_id": p.id, "version": version}
	}
	both := func(p promptDef, version int) map[string]any {
		return map[string]any{"prompt_hash": hash(p, version), "prompt_id": p.id, "version": version}
	}
	var (
		refundHash     = figures{0.9, 30}
		refundStale    = figures{0.05, 500} // an older state_version of the same ref, arriving late
		refundID       = figures{0.3, 10}
		refundOfB      = figures{0.0, 1000} // tenant B's figures for the same hash
		creditBoth     = figures{0.8, 5}
		creditID       = figures{0.4, 15} // a later state_version: had both been keyed id@version, it alone would count
		exchangeOld    = figures{0.1, 100}
		exchangeHash   = figures{0.7, 10}
		apologyOfA     = figures{0.2, 10}
		apologyOfOwner = figures{0.8, 30}
	)
	for _, q := range []struct {
		tenant       string
		ref          map[string]any
		stateVersion int
		f            figures
	}{
		{a, byHash(refund, 1), 3, refundHash},
		{a, byHash(refund, 1), 2, refundStale},
		{a, byID(refund, 1), 1, refundID},
		{b, byHash(refund, 1), 9, refundOfB},
		{a, both(credit, 1), 1, creditBoth},
		{a, byID(credit, 1), 2, creditID},
		{a, byID(exchange1, 1), 1, exchangeOld}, // version 1: not the one served
		{a, byHash(exchange2, 2), 1, exchangeHash},
		{a, byID(apology, 1), 1, apologyOfA},
		{global, byHash(apology, 1), 1, apologyOfOwner},
	} {
		data := map[string]any{"target": "prompt", "state_version": q.stateVersion, "quality_score": q.f.score,
			"success_rate": q.f.score, "total_calls": q.f.calls}
		for k, v := range q.ref {
			data[k] = v
		}
		evs = append(evs, ag.publish(t, q.tenant, indexer.TypeQualityChanged, data))
	}
	ag.applied(t, evs...)

	type promptSeen struct {
		ID, Hash string
		Version  int
		Quality  float64
	}
	look := func(tenant string) map[string]promptSeen {
		t.Helper()
		var resp search.PromptsResponse
		// The most results: other tests' _global prompts on a shared
		// database may rank among this test's.
		require.NoError(t, ag.call(search.PromptsSubject, tenant, search.PromptsRequest{Query: "refund " + w, Limit: search.MaxPromptLimit}, &resp))
		out := map[string]promptSeen{}
		for _, r := range resp.Results {
			if !strings.Contains(r.Prompt.ID, w) {
				continue
			}
			_, dup := out[r.Prompt.ID]
			require.False(t, dup, "%s returned twice: one figure per prompt", r.Prompt.ID)
			out[r.Prompt.ID] = promptSeen{ID: r.Prompt.ID, Hash: r.Prompt.Hash, Version: r.Prompt.Version, Quality: round9(r.Components.Quality)}
		}
		return out
	}
	seen := func(p promptDef, version int, quality float64) promptSeen {
		return promptSeen{ID: p.id, Hash: hash(p, version), Version: version, Quality: round9(quality)}
	}
	require.Equal(t, map[string]promptSeen{
		refund.id:    seen(refund, 1, callsWeighted(refundHash, refundID)),
		credit.id:    seen(credit, 1, callsWeighted(creditBoth, creditID)),
		exchange2.id: seen(exchange2, 2, callsWeighted(exchangeHash)),
		apology.id:   seen(apology, 1, callsWeighted(apologyOfA, apologyOfOwner)),
	}, look(a), "tenant A")
	require.Equal(t, map[string]promptSeen{
		apology.id: seen(apology, 1, callsWeighted(apologyOfOwner)),
	}, look(b), "tenant B sees _global's figures, not A's")
}

// quality.changed names a prompt version by prompt_hash, or by prompt_id
// and version, which the indexer keys <id>@<version> as the scorer does.
// A prompt_hash cannot hold "@" (schemas/quality.changed.v1.json), so
// ops.go's branch for a hash already in <id>@<version> form is not
// reachable from a valid event: such an event, like every other
// combination the schema refuses, is dead-lettered (reason schema) and
// stores nothing. A version the schema admits but the indexer cannot hold
// (beyond int32) is dead-lettered by the indexer (reason permanent). Valid
// neighbours in the same stream are applied.
func TestPromptQualityRefsAreDecodedOrDeadLettered(t *testing.T) {
	ag := startIndexer(t)
	a := testenv.Tenant(t)
	quality := func(ref map[string]any) map[string]any {
		data := map[string]any{"target": "prompt", "state_version": 1, "quality_score": 0.5, "success_rate": 0.5, "total_calls": 4}
		for k, v := range ref {
			data[k] = v
		}
		return data
	}
	cases := []struct {
		name string
		data map[string]any
		ref  string // stored ref; "" when dead-lettered
		code string // dead letter reason code
	}{
		{"hash", quality(map[string]any{"prompt_hash": "9f86d081884c"}), "9f86d081884c", ""},
		{"hash with id and version: the hash", quality(map[string]any{"prompt_hash": "sha256:abcdef", "prompt_id": "x", "version": 3}), "sha256:abcdef", ""},
		{"id and version", quality(map[string]any{"prompt_id": "team/support.answer", "version": 2}), "team/support.answer@2", ""},
		{"id and the largest version", quality(map[string]any{"prompt_id": "big", "version": math.MaxInt32}), fmt.Sprintf("big@%d", math.MaxInt32), ""},
		{"hash in id@version form", quality(map[string]any{"prompt_hash": "support@1"}), "", bus.ReasonSchema},
		{"hash in id@version form beside id and version", quality(map[string]any{"prompt_hash": "support@1", "prompt_id": "support", "version": 1}), "", bus.ReasonSchema},
		{"id without version", quality(map[string]any{"prompt_id": "support"}), "", bus.ReasonSchema},
		{"version without id", quality(map[string]any{"version": 1}), "", bus.ReasonSchema},
		{"version 0", quality(map[string]any{"prompt_id": "support", "version": 0}), "", bus.ReasonSchema},
		{"fractional version", quality(map[string]any{"prompt_id": "support", "version": 1.5}), "", bus.ReasonSchema},
		{"version beyond int32", quality(map[string]any{"prompt_id": "support", "version": int64(math.MaxInt32) + 1}), "", bus.ReasonPermanent},
		{"prompt target naming a tool", quality(map[string]any{"tool_name": "web_search"}), "", bus.ReasonSchema},
		{"tool target naming a prompt", map[string]any{"target": "tool", "prompt_hash": "9f86d081884c", "quality_score": 0.5, "success_rate": 0.5, "total_calls": 4}, "", bus.ReasonSchema},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var applied []event.Event
	wantDead := map[string]string{} // event id → reason code
	wantRefs := map[string]indexer.QualityRow{}
	for _, c := range cases {
		ev, err := bus.NewEvent(indexer.TypeQualityChanged, a, "test", c.data)
		require.NoError(t, err)
		_, err = ag.raw.Publish(ctx, ev) // unchecked: the indexer must check
		require.NoError(t, err, c.name)
		if c.code != "" {
			wantDead[ev.ID()] = c.code
			continue
		}
		applied = append(applied, ev)
		// successes is left out: the indexer derives it from the rate.
		wantRefs[c.ref] = indexer.QualityRow{Target: "prompt", Ref: c.ref, StateVersion: 1, Score: 0.5, SuccessRate: 0.5, TotalCalls: 4, Successes: 2}
	}
	ag.applied(t, applied...)
	var dead map[string]bus.DeadLetter
	testenv.Eventually(t, 30*time.Second, func() bool {
		dead = map[string]bus.DeadLetter{}
		for _, dl := range testenv.DeadLetters(t, ag.n.JS) {
			if _, ok := wantDead[dl.EventID]; ok {
				dead[dl.EventID] = dl
			}
		}
		return len(dead) == len(wantDead)
	}, "every unreadable quality.changed dead-lettered")
	gotDead := map[string]string{}
	for id, dl := range dead {
		gotDead[id] = dl.ReasonCode
		require.Equal(t, "indexer", dl.Consumer)
		require.Equal(t, indexer.TypeQualityChanged, dl.EventType)
		if dl.ReasonCode == bus.ReasonPermanent {
			require.Contains(t, dl.Reason, "is not a positive integer")
		}
	}
	require.Equal(t, wantDead, gotDead)

	s, err := indexer.ReadState(ctx, ag.pool, a)
	require.NoError(t, err)
	gotRefs := map[string]indexer.QualityRow{}
	for _, q := range s.Quality {
		q.LastSuccess, q.UpdatedAt = nil, time.Time{} // the event's time: not what is tested here
		gotRefs[q.Ref] = q
	}
	require.Equal(t, wantRefs, gotRefs, "only the readable events are stored, under these refs")
}
