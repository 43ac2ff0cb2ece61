package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
)

// A version is its content and its parameter declaration: the same
// content with another declaration (a default, a type, a required flag, a
// description, a parameter added or removed) is not "unchanged". With an
// explicit version it is a version_conflict naming the first difference;
// without one it is the next version. The same declaration written
// otherwise (key order, spaces, parameter order, zero values written out,
// a number in another notation) is the same.

const answerContent = "Answer in a {{.Tone}} tone about {{.Topic}}."

// answerParams is the declaration the first version of "answer" has.
const answerParams = `[{"name":"Tone","type":"string","default":"formal","description":"How to sound"},` +
	`{"name":"Topic","type":"string","required":true},` +
	`{"name":"Limits","type":"object","default":{"words":120,"lists":false}}]`

// answerData is a prompt.created of "answer" declaring params (raw JSON,
// kept byte for byte); version 0 leaves the version out.
func answerData(version int, params string) []byte {
	v := ""
	if version > 0 {
		v = fmt.Sprintf(`"version": %d, `, version)
	}
	content, _ := json.Marshal(answerContent)
	return []byte(fmt.Sprintf(`{"id": "answer", %s"type": "task", "name": "Answer", "content": %s, "parameters": %s}`, v, content, params))
}

// withRawData gives ev the data raw exactly as written (the SDK would
// re-encode it: no spaces, no newlines).
func withRawData(t *testing.T, ev event.Event, raw []byte) event.Event {
	t.Helper()
	require.True(t, json.Valid(raw), "%s", raw)
	ev.DataEncoded, ev.DataBase64 = raw, false
	return ev
}

// rawDelivery is r.delivery with data raw.
func (r *rig) rawDelivery(t *testing.T, raw []byte) *bus.Delivery {
	t.Helper()
	d := r.delivery(t, indexer.TypePromptCreated, json.RawMessage(raw))
	d.Event = withRawData(t, d.Event, raw)
	return d
}

func declaration(t *testing.T, raw string) []library.Param {
	t.Helper()
	var ps []library.Param
	require.NoError(t, json.Unmarshal([]byte(raw), &ps))
	return ps
}

// indexed is prompt.indexed's data for "answer" at version.
func indexed(outcome string, version int, embedded, revised bool) result {
	d := map[string]any{"prompt_id": "answer", "version": float64(version), "outcome": outcome,
		"content_hash": library.Hash("answer", version, answerContent, "task"), "type": "task", "name": "Answer"}
	if embedded {
		d["embedding_model"], d["embedding_dim"] = embed.Lexical{}.Model(), float64(embed.Lexical{}.Dimension())
	}
	if revised {
		d["revised"] = true
	}
	return result{Type: indexer.TypePromptIndexed, Data: d}
}

// paramConflict is indexer.rejected's data for an explicit version 1 of
// "answer" whose declaration differs from the stored one's in field of
// param, as difference says it.
func paramConflict(eventID, param, field, difference string, revised bool) result {
	h := library.Hash("answer", 1, answerContent, "task")
	d := map[string]any{
		"reason_code": indexer.ReasonVersionConflict,
		"reason": "prompt answer version 1 already exists with the same content and type but different parameters: " +
			difference + "; versions are immutable: create a new version",
		"event_type": indexer.TypePromptCreated, "event_id": eventID,
		"details": map[string]any{"prompt_id": "answer", "version": float64(1), "existing_hash": h, "hash": h,
			"parameter": param, "field": field},
	}
	if revised {
		d["revised"] = true
	}
	return result{Type: indexer.TypeRejected, Data: d}
}

// After version 1 of "answer" (answerParams), an explicit version 1 and
// then a create without a version, both with the case's declaration.
func TestChangedParametersAreAConflictOrANewVersion(t *testing.T) {
	for _, c := range []struct {
		name   string
		params string
		// param and field name the first difference, difference says it;
		// param "": the same declaration.
		param, field, difference string
	}{
		{name: "default changed",
			params: `[{"name":"Tone","type":"string","default":"casual","description":"How to sound"},{"name":"Topic","type":"string","required":true},{"name":"Limits","type":"object","default":{"words":120,"lists":false}}]`,
			param:  "Tone", field: "default", difference: `parameter "Tone" differs in default: "formal" stored, "casual" given`},
		{name: "default removed",
			params: `[{"name":"Tone","type":"string","description":"How to sound"},{"name":"Topic","type":"string","required":true},{"name":"Limits","type":"object","default":{"words":120,"lists":false}}]`,
			param:  "Tone", field: "default", difference: `parameter "Tone" differs in default: "formal" stored, none given`},
		{name: "type changed",
			params: `[{"name":"Tone","default":"formal","description":"How to sound"},{"name":"Topic","type":"string","required":true},{"name":"Limits","type":"object","default":{"words":120,"lists":false}}]`,
			param:  "Tone", field: "type", difference: `parameter "Tone" differs in type: "string" stored, none given`},
		{name: "required flag changed",
			params: `[{"name":"Tone","type":"string","default":"formal","description":"How to sound"},{"name":"Topic","type":"string"},{"name":"Limits","type":"object","default":{"words":120,"lists":false}}]`,
			param:  "Topic", field: "required", difference: `parameter "Topic" differs in required: true stored, false given`},
		{name: "description changed",
			params: `[{"name":"Tone","type":"string","default":"formal","description":"How to sound to the reader"},{"name":"Topic","type":"string","required":true},{"name":"Limits","type":"object","default":{"words":120,"lists":false}}]`,
			param:  "Tone", field: "description", difference: `parameter "Tone" differs in description: "How to sound" stored, "How to sound to the reader" given`},
		{name: "object default changed",
			params: `[{"name":"Tone","type":"string","default":"formal","description":"How to sound"},{"name":"Topic","type":"string","required":true},{"name":"Limits","type":"object","default":{"words":200,"lists":false}}]`,
			param:  "Limits", field: "default", difference: `parameter "Limits" differs in default: {"lists":false,"words":120} stored, {"lists":false,"words":200} given`},
		{name: "parameter added",
			params: `[{"name":"Tone","type":"string","default":"formal","description":"How to sound"},{"name":"Topic","type":"string","required":true},{"name":"Limits","type":"object","default":{"words":120,"lists":false}},{"name":"Audience","type":"string"}]`,
			param:  "Audience", field: "declared", difference: `parameter "Audience" is declared here, not in the stored version`},
		{name: "parameter removed",
			params: `[{"name":"Tone","type":"string","default":"formal","description":"How to sound"},{"name":"Topic","type":"string","required":true}]`,
			param:  "Limits", field: "declared", difference: `parameter "Limits" is declared in the stored version, not here`},
		{name: "the first of two differences, in the order given",
			params: `[{"name":"Limits","type":"object","default":{"words":99}},{"name":"Tone","type":"string","default":"formal","description":"Register"},{"name":"Topic","type":"string","required":true}]`,
			param:  "Limits", field: "default", difference: `parameter "Limits" differs in default: {"lists":false,"words":120} stored, {"words":99} given`},

		{name: "same, keys in another order and spaces",
			params: "[\n  {\"description\": \"How to sound\", \"default\": \"formal\",\t\"type\": \"string\", \"name\": \"Tone\"},\n" +
				"  {\"required\": true, \"name\": \"Topic\", \"type\": \"string\"},\n" +
				"  {\"default\": { \"lists\": false, \"words\": 120 }, \"type\": \"object\", \"name\": \"Limits\"}\n]"},
		{name: "same, parameters in another order",
			params: `[{"name":"Limits","type":"object","default":{"words":120,"lists":false}},{"name":"Topic","type":"string","required":true},{"name":"Tone","type":"string","default":"formal","description":"How to sound"}]`},
		{name: "same, zero values and a null default written out",
			params: `[{"name":"Tone","type":"string","required":false,"default":"formal","description":"How to sound"},{"name":"Topic","type":"string","required":true,"default":null,"description":""},{"name":"Limits","type":"object","default":{"words":120,"lists":false}}]`},
		{name: "same, a number in another notation",
			params: `[{"name":"Tone","type":"string","default":"formal","description":"How to sound"},{"name":"Topic","type":"string","required":true},{"name":"Limits","type":"object","default":{"words":1.2e2,"lists":false}}]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			base := r.rawDelivery(t, answerData(0, answerParams))
			explicit := r.rawDelivery(t, answerData(1, c.params))
			omitted := r.rawDelivery(t, answerData(0, c.params))
			for _, d := range []*bus.Delivery{base, explicit, omitted} {
				r.handle(t, d)
			}
			got := r.out.byCause(t)
			require.Equal(t, indexed("created", 1, true, false), got[base.Event.ID()])
			ctx := context.Background()
			want := map[int][]library.Param{1: declaration(t, answerParams)}
			if c.param == "" {
				require.Equal(t, indexed("unchanged", 1, false, false), got[explicit.Event.ID()])
				require.Equal(t, indexed("unchanged", 1, false, false), got[omitted.Event.ID()])
			} else {
				require.Equal(t, paramConflict(explicit.Event.ID(), c.param, c.field, c.difference, false), got[explicit.Event.ID()])
				require.Equal(t, indexed("created", 2, true, false), got[omitted.Event.ID()])
				want[2] = declaration(t, c.params)
			}
			live, err := indexer.ReadState(ctx, r.pool, r.tenant)
			require.NoError(t, err)
			require.Equal(t, streamOrder(base, explicit, omitted), live)
			require.Len(t, live.Prompts, len(want))
			for v, params := range want {
				p, err := library.Get(ctx, r.pool, r.tenant, "answer", v)
				require.NoError(t, err)
				require.Equal(t, params, p.Parameters, "version %d", v)
			}
		})
	}
}

// Two copies apply creates of one content with different declarations
// out of stream order; the state is what stream order gives, and each
// create's newest result says what it did in stream order.
func TestChangedParametersInStreamOrderWhicheverCopyAppliesFirst(t *testing.T) {
	casual := `[{"name":"Tone","type":"string","default":"casual","description":"How to sound"},{"name":"Topic","type":"string","required":true},{"name":"Limits","type":"object","default":{"words":120,"lists":false}}]`
	rewritten := "[ {\"name\": \"Topic\", \"required\": true, \"type\": \"string\"},\n {\"default\": {\"lists\": false, \"words\": 120}, \"name\": \"Limits\", \"type\": \"object\"},\n" +
		" {\"description\": \"How to sound\", \"name\": \"Tone\", \"default\": \"formal\", \"type\": \"string\"} ]"
	type want struct {
		outcome            string // "": a conflict over version, as diff says
		version            int
		embedded, revised  bool
		param, field, diff string
	}
	for _, c := range []struct {
		name   string
		stream []string // the creates' data, in stream order
		order  [][]int  // batches in the order applied, by copy a and b in turn
		want   []want   // each create's newest result
	}{{
		name:   "a changed declaration applied before the create it follows",
		stream: []string{string(answerData(0, answerParams)), string(answerData(0, casual))},
		order:  [][]int{{1}, {0}},
		want:   []want{{outcome: "created", version: 1, embedded: true}, {outcome: "created", version: 2, embedded: true, revised: true}},
	}, {
		name:   "an explicit version applied first becomes a conflict",
		stream: []string{string(answerData(0, answerParams)), string(answerData(1, casual))},
		order:  [][]int{{1}, {0}},
		want: []want{{outcome: "created", version: 1, embedded: true},
			{version: 1, revised: true, param: "Tone", field: "default", diff: `parameter "Tone" differs in default: "formal" stored, "casual" given`}},
	}, {
		name:   "the same declaration written otherwise stays one version",
		stream: []string{string(answerData(0, answerParams)), string(answerData(0, rewritten)), string(answerData(1, rewritten))},
		order:  [][]int{{2}, {1}, {0}},
		want: []want{{outcome: "created", version: 1, embedded: true},
			{outcome: "unchanged", version: 1, revised: true}, {outcome: "unchanged", version: 1, revised: true}},
	}, {
		name:   "back to an older declaration is a new version",
		stream: []string{string(answerData(0, answerParams)), string(answerData(0, casual)), string(answerData(0, answerParams))},
		order:  [][]int{{2}, {0}, {1}},
		want: []want{{outcome: "created", version: 1, embedded: true}, {outcome: "created", version: 2, embedded: true},
			{outcome: "created", version: 3, revised: true}},
	}, {
		name:   "in one batch",
		stream: []string{string(answerData(0, answerParams)), string(answerData(0, casual)), string(answerData(2, rewritten)), string(answerData(0, casual))},
		order:  [][]int{{0, 1, 2, 3}},
		want: []want{{outcome: "created", version: 1, embedded: true}, {outcome: "created", version: 2, embedded: true},
			{version: 2, param: "Tone", field: "default", diff: `parameter "Tone" differs in default: "casual" stored, "formal" given`},
			{outcome: "unchanged", version: 2}},
	}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			b := indexer.New(r.pool, r.out, indexer.Embedders{Prompts: embed.Lexical{}, Tools: embed.Lexical{}}, indexer.Options{Consumer: "indexer-test"}, testenv.Logger(t))
			ds := make([]*bus.Delivery, len(c.stream))
			for i, raw := range c.stream {
				ds[i] = r.rawDelivery(t, []byte(raw))
			}
			for n, batch := range c.order {
				ix := r.ix
				if n%2 == 1 {
					ix = b
				}
				var in []*bus.Delivery
				for _, i := range batch {
					in = append(in, ds[i])
				}
				handleWith(t, ix, in...)
			}
			last := map[string]result{}
			for _, ev := range r.out.sent {
				var d map[string]any
				require.NoError(t, json.Unmarshal(ev.Data(), &d))
				last[bus.Causation(ev)] = result{Type: ev.Type(), Data: d}
			}
			for i, w := range c.want {
				id := ds[i].Event.ID()
				if w.outcome == "" {
					conflict := paramConflict(id, w.param, w.field, w.diff, w.revised)
					if w.version != 1 {
						h := library.Hash("answer", w.version, answerContent, "task")
						conflict.Data["reason"] = fmt.Sprintf("prompt answer version %d already exists with the same content and type but different parameters: %s; versions are immutable: create a new version", w.version, w.diff)
						conflict.Data["details"] = map[string]any{"prompt_id": "answer", "version": float64(w.version), "existing_hash": h, "hash": h, "parameter": w.param, "field": w.field}
					}
					require.Equal(t, conflict, last[id], "create %d", i)
					continue
				}
				require.Equal(t, indexed(w.outcome, w.version, w.embedded, w.revised), last[id], "create %d", i)
			}
			live, err := indexer.ReadState(context.Background(), r.pool, r.tenant)
			require.NoError(t, err)
			require.Equal(t, streamOrder(ds...), live)
		})
	}
}

// Through the real consumer: a copy applies a changed declaration before
// the create it follows, the indexer process applies the rest; prompts.get
// and search serve the newest version with its defaults, version 1 keeps
// its own, and a rebuild from the stream reaches the same state.
func TestChangedParametersAreServedAndRebuilt(t *testing.T) {
	n := testenv.StartNATS(t)
	tenant := testenv.Tenant(t)
	a := &agent{n: n, pool: testenv.Pool(t)}
	a.reg, a.pub = mustRegistry(t, n)
	results := followResults(t, n.NC, tenant)
	publish := func(raw []byte) event.Event {
		ev, err := bus.NewEvent(indexer.TypePromptCreated, tenant, "test", json.RawMessage(raw))
		require.NoError(t, err)
		ev = withRawData(t, ev, raw)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = a.pub.Publish(ctx, ev)
		require.NoError(t, err)
		return ev
	}
	casual := `[{"name":"Tone","type":"string","default":"casual","description":"How to sound"},{"name":"Topic","type":"string","required":true},{"name":"Limits","type":"object","default":{"words":120,"lists":false}}]`
	casualReordered := `[ {"name": "Limits", "type": "object", "default": {"lists": false, "words": 120}}, {"name": "Topic", "required": true, "type": "string"}, {"description": "How to sound", "name": "Tone", "default": "casual", "type": "string"} ]`
	brisk := `[{"name":"Tone","type":"string","default":"brisk"},{"name":"Topic","type":"string","required":true},{"name":"Limits","type":"object","default":{"words":120,"lists":false}}]`
	evs := []event.Event{
		publish(answerData(0, answerParams)),
		publish(answerData(0, casual)),
		publish(answerData(1, brisk)),
		publish(answerData(2, casualReordered)),
	}
	hist := conformance.History(t, n.JS, indexer.Subjects, tenant)
	require.Len(t, hist, len(evs))

	// Another copy applies the changed declaration first; the process
	// then applies the create before it, late, and the rest.
	b, _ := handlerCopy(t, "indexer")
	handleWith(t, b, hist[1])
	proc := testenv.StartProcess(t, testenv.Config(t, n.URL), "indexer-a", indexer.Consumer)
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, ev := range []event.Event{evs[0], evs[2], evs[3]} {
			if _, ok := results.last(ev.ID()); !ok {
				return false
			}
		}
		_, ok := results.last(evs[1].ID())
		return ok
	}, "results for every create")
	a.applied(t, evs...)

	want := []result{
		indexed("created", 1, true, false),
		indexed("created", 2, true, true), // took version 1 first, then 2 in stream order
		// The first difference in the given order: Tone's default, before
		// its description.
		paramConflict(evs[2].ID(), "Tone", "default", `parameter "Tone" differs in default: "formal" stored, "brisk" given`, false),
		indexed("unchanged", 2, false, false),
	}
	for i, ev := range evs {
		got, _ := results.last(ev.ID())
		require.Equal(t, want[i], got, "create %d", i)
	}

	ctx := context.Background()
	live, err := indexer.ReadState(ctx, a.pool, tenant)
	require.NoError(t, err)
	require.Equal(t, streamOrder(hist...), live)

	// What an agent gets: the newest version and its defaults.
	stored := func(v int, params string, ev *bus.Delivery) library.Prompt {
		return library.Prompt{Tenant: tenant, ID: "answer", Version: v, Hash: library.Hash("answer", v, answerContent, "task"),
			Type: "task", Name: "Answer", Content: answerContent, Parameters: declaration(t, params),
			CreatedAt: ev.Event.Time().UTC().Truncate(time.Microsecond)}
	}
	topic := map[string]any{"Topic": "refunds"}
	for _, c := range []struct {
		req  search.GetRequest
		want search.GetResponse
	}{
		{search.GetRequest{ID: "answer", Params: topic}, search.GetResponse{Prompt: stored(2, casual, hist[1]), Rendered: ptr("Answer in a casual tone about refunds.")}},
		{search.GetRequest{ID: "answer", Label: "latest", Params: topic}, search.GetResponse{Prompt: stored(2, casual, hist[1]), Rendered: ptr("Answer in a casual tone about refunds.")}},
		{search.GetRequest{ID: "answer", Version: 1, Params: topic}, search.GetResponse{Prompt: stored(1, answerParams, hist[0]), Rendered: ptr("Answer in a formal tone about refunds.")}},
		{search.GetRequest{ID: "answer", Version: 2}, search.GetResponse{Prompt: stored(2, casual, hist[1])}},
	} {
		var got search.GetResponse
		require.NoError(t, a.call(search.GetSubject, tenant, c.req, &got))
		require.Equal(t, c.want, got, "%+v", c.req)
	}
	var found search.PromptsResponse
	require.NoError(t, a.call(search.PromptsSubject, tenant, search.PromptsRequest{Query: "answer tone topic", Params: topic}, &found))
	var mine []search.PromptResult
	for _, r := range found.Results {
		if r.Prompt.Tenant == tenant {
			mine = append(mine, r)
		}
	}
	require.Len(t, mine, 1, "search returns one version per prompt id")
	require.Equal(t, stored(2, casual, hist[1]), mine[0].Prompt)
	require.Equal(t, ptr("Answer in a casual tone about refunds."), mine[0].Rendered)

	// A rebuild from the stream gives the same state.
	proc.Stop()
	lex := embed.Lexical{}
	rep, err := replay.Rebuild(ctx, n.JS, a.pool, a.reg, indexer.RebuildTarget(a.pool, indexer.Embedders{Prompts: lex, Tools: lex}, indexer.Options{}, testenv.Logger(t)),
		replay.Options{Tenant: tenant, Log: testenv.Logger(t)})
	require.NoError(t, err)
	require.Equal(t, len(evs), rep.Events)
	rebuilt, err := indexer.ReadState(ctx, a.pool, tenant)
	require.NoError(t, err)
	require.Equal(t, live, rebuilt)
}

func ptr[T any](v T) *T { return &v }
