package indexer_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
)

func prompt(id string, version int, content string, params ...map[string]any) map[string]any {
	p := map[string]any{"id": id, "type": "task", "name": "Prompt " + id, "content": content}
	if version > 0 {
		p["version"] = version
	}
	if len(params) > 0 {
		p["parameters"] = params
	}
	return p
}

// Versions are immutable and content-hashed: the table runs in order
// against one prompt id and says what each create must give.
func TestPromptVersionsAreImmutable(t *testing.T) {
	r := newRig(t)
	const id = "support-answer"
	steps := []struct {
		name    string
		data    map[string]any
		typ     string // expected result type
		outcome string
		version int
		reason  string
	}{
		{"first create", prompt(id, 1, "Answer politely."), indexer.TypePromptIndexed, "created", 1, ""},
		{"same content again", prompt(id, 1, "Answer politely."), indexer.TypePromptIndexed, "unchanged", 1, ""},
		{"different content, same version", prompt(id, 1, "Answer rudely."), indexer.TypeRejected, "", 0, indexer.ReasonVersionConflict},
		{"different type, same version", map[string]any{"id": id, "version": 1, "type": "system", "name": "x", "content": "Answer politely."}, indexer.TypeRejected, "", 0, indexer.ReasonVersionConflict},
		{"omitted version, new content", prompt(id, 0, "Answer politely and briefly."), indexer.TypePromptIndexed, "created", 2, ""},
		{"omitted version, content of the newest", prompt(id, 0, "Answer politely and briefly."), indexer.TypePromptIndexed, "unchanged", 2, ""},
		{"omitted version, content of an older one", prompt(id, 0, "Answer politely."), indexer.TypePromptIndexed, "created", 3, ""},
		{"explicit gap", prompt(id, 7, "Seven."), indexer.TypePromptIndexed, "created", 7, ""},
		{"omitted after a gap", prompt(id, 0, "Eight."), indexer.TypePromptIndexed, "created", 8, ""},
	}
	for _, s := range steps {
		d, res := r.apply(t, indexer.TypePromptCreated, s.data)
		require.Equal(t, s.typ, res.Type, s.name)
		if s.typ == indexer.TypeRejected {
			require.Equal(t, s.reason, res.Data["reason_code"], s.name)
			require.Equal(t, d.Event.ID(), res.Data["event_id"], s.name)
			require.Equal(t, indexer.TypePromptCreated, res.Data["event_type"], s.name)
			require.Contains(t, res.Data["reason"], "already exists", s.name)
			continue
		}
		want := map[string]any{
			"prompt_id": id, "version": float64(s.version), "outcome": s.outcome,
			"content_hash": library.Hash(id, s.version, s.data["content"].(string), s.data["type"].(string)),
			"type":         s.data["type"], "name": s.data["name"],
		}
		if s.outcome == "created" {
			want["embedding_model"], want["embedding_dim"] = embed.Lexical{}.Model(), float64(embed.Lexical{}.Dimension())
		}
		require.Equal(t, want, res.Data, s.name)
	}
	// What is stored: versions 1, 2, 3, 7, 8 with their contents, never
	// overwritten by the conflicting creates.
	ctx := context.Background()
	want := map[int]string{1: "Answer politely.", 2: "Answer politely and briefly.", 3: "Answer politely.", 7: "Seven.", 8: "Eight."}
	rows, err := r.pool.Query(ctx, `SELECT version, content, hash, type, embedding_model, embedding_dim FROM prompts WHERE tenant_id = $1 AND id = $2 ORDER BY version`, r.tenant, id)
	require.NoError(t, err)
	got := map[int]string{}
	for rows.Next() {
		var v, dim int
		var content, hash, typ, model string
		require.NoError(t, rows.Scan(&v, &content, &hash, &typ, &model, &dim))
		got[v] = content
		require.Equal(t, library.Hash(id, v, content, "task"), hash)
		require.Equal(t, "task", typ)
		require.Equal(t, embed.Lexical{}.Model(), model)
		require.Equal(t, embed.Lexical{}.Dimension(), dim)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got)
}

// A stored version keeps every field of its prompt.created.
func TestStoredPromptKeepsEveryField(t *testing.T) {
	r := newRig(t)
	data := map[string]any{
		"id": "sql-repair", "version": 2, "type": "repair", "name": "SQL repair",
		"content":     "Fix this {{.Dialect}} query: {{.Query}}{{if .Hint}} Hint: {{.Hint}}{{end}}",
		"description": "Repairs a failing SQL query",
		"parameters": []map[string]any{
			{"name": "Dialect", "type": "string", "required": false, "default": "postgres", "description": "SQL dialect"},
			{"name": "Query", "type": "string", "required": true},
			{"name": "Hint", "type": "string"},
		},
		"tags": []string{"sql", "repair"}, "author": "ops", "metadata": map[string]any{"team": "data", "n": 1},
	}
	d, res := r.apply(t, indexer.TypePromptCreated, data)
	require.Equal(t, indexer.TypePromptIndexed, res.Type)
	p, err := library.Get(context.Background(), r.pool, r.tenant, "sql-repair", 2)
	require.NoError(t, err)
	require.Equal(t, library.Prompt{
		Tenant: r.tenant, ID: "sql-repair", Version: 2, Hash: library.Hash("sql-repair", 2, data["content"].(string), "repair"),
		Type: "repair", Name: "SQL repair", Description: "Repairs a failing SQL query", Content: data["content"].(string),
		Parameters: []library.Param{
			{Name: "Dialect", Type: "string", Default: "postgres", Description: "SQL dialect"},
			{Name: "Query", Type: "string", Required: true},
			{Name: "Hint", Type: "string"},
		},
		Tags: []string{"sql", "repair"}, Labels: []string{}, Author: "ops",
		Metadata: json.RawMessage(`{"n": 1, "team": "data"}`), CreatedAt: d.Event.Time().UTC(),
	}, p)
}

func TestInvalidTemplatesAreRejected(t *testing.T) {
	req := func(name string) map[string]any { return map[string]any{"name": name, "required": true} }
	cases := []struct {
		name    string
		content string
		params  []map[string]any
		reason  string
	}{
		{"does not parse", "Hello {{.Name", []map[string]any{req("Name")}, "unclosed action"},
		{"undeclared parameter", "Hello {{.Name}} from {{.City}}", []map[string]any{req("Name")}, "undeclared parameter(s) City"},
		{"required but unused", "Hello", []map[string]any{req("Name")}, "required parameter(s) Name declared but not used"},
		{"declared twice", "{{.A}}", []map[string]any{req("A"), req("A")}, `parameter "A" declared twice`},
		{"unknown function", "{{shout .A}}", []map[string]any{req("A")}, `function "shout" not defined`},
		{"bad default type", "{{.N}}", []map[string]any{{"name": "N", "type": "integer", "default": "x"}}, `parameter "N" must be an integer, got a string`},
		{"$ reference undeclared", "{{range .Items}}{{$.Lang}}{{end}}", []map[string]any{req("Items")}, "undeclared parameter(s) Lang"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			d, res := r.apply(t, indexer.TypePromptCreated, prompt("p", 1, c.content, c.params...))
			require.Equal(t, indexer.TypeRejected, res.Type)
			require.Equal(t, indexer.ReasonInvalidTemplate, res.Data["reason_code"])
			require.Equal(t, d.Event.ID(), res.Data["event_id"])
			require.Contains(t, res.Data["reason"], c.reason)
			var n int
			require.NoError(t, r.pool.QueryRow(context.Background(), `SELECT count(*) FROM prompts WHERE tenant_id = $1`, r.tenant).Scan(&n))
			require.Zero(t, n, "a rejected prompt is not stored")
		})
	}
	// Field references inside range and with bodies are the element's,
	// not parameters: valid.
	r := newRig(t)
	_, res := r.apply(t, indexer.TypePromptCreated, prompt("ok", 1, "{{range .Items}}- {{.Title}}\n{{end}}{{with .User}}{{.Name}}{{end}}",
		map[string]any{"name": "Items", "type": "array", "required": true}, map[string]any{"name": "User", "type": "object"}))
	require.Equal(t, indexer.TypePromptIndexed, res.Type, "%v", res.Data)
}

func TestLabelsMoveAndUnknownVersionsAreRejected(t *testing.T) {
	r := newRig(t)
	for v := 1; v <= 2; v++ {
		r.apply(t, indexer.TypePromptCreated, prompt("triage", v, "Triage v"+string(rune('0'+v))))
	}
	activate := func(version int, label string) result {
		_, res := r.apply(t, indexer.TypePromptActivated, map[string]any{"prompt_id": "triage", "version": version, "label": label})
		return res
	}
	res := activate(1, "production")
	require.Equal(t, indexer.TypePromptIndexed, res.Type)
	require.Equal(t, map[string]any{"prompt_id": "triage", "version": float64(1), "outcome": "unchanged",
		"content_hash": library.Hash("triage", 1, "Triage v1", "task"), "labels": []any{"production"}}, res.Data)
	activate(2, "staging")
	res = activate(2, "production") // promote
	require.Equal(t, []any{"production", "staging"}, res.Data["labels"])
	res = activate(1, "production") // roll back
	require.Equal(t, []any{"production"}, res.Data["labels"])

	res = activate(9, "production")
	require.Equal(t, indexer.TypeRejected, res.Type)
	require.Equal(t, indexer.ReasonUnknownVersion, res.Data["reason_code"])
	res = activate(1, "latest")
	require.Equal(t, indexer.TypeRejected, res.Type)
	require.Equal(t, "reserved_label", res.Data["reason_code"])

	ctx := context.Background()
	for v, want := range map[int][]string{1: {"production"}, 2: {"staging"}} {
		got, err := library.LabelsOf(ctx, r.pool, r.tenant, "triage", v)
		require.NoError(t, err)
		require.Equal(t, want, got, "version %d", v)
	}
}

// A label follows the newest prompt.activated by stream sequence, whatever
// the order they are applied in.
func TestLabelFollowsStreamOrder(t *testing.T) {
	r := newRig(t)
	r.apply(t, indexer.TypePromptCreated, prompt("x", 1, "one"))
	r.apply(t, indexer.TypePromptCreated, prompt("x", 2, "two"))
	early := r.delivery(t, indexer.TypePromptActivated, map[string]any{"prompt_id": "x", "version": 2, "label": "production"})
	late := r.delivery(t, indexer.TypePromptActivated, map[string]any{"prompt_id": "x", "version": 1, "label": "production"})
	r.handle(t, late)
	r.handle(t, early) // a copy that held it longer
	got, err := library.LabelsOf(context.Background(), r.pool, r.tenant, "x", 1)
	require.NoError(t, err)
	require.Equal(t, []string{"production"}, got)
}

// An activation names a version that an event later in the stream
// creates, and another copy applied that event first: the activation is
// unknown_version all the same, as in stream order, so the state is the
// stream-order reference whichever copy got there first (found by the
// conformance suite's two copies).
func TestActivationBeforeTheVersionsCreationIsUnknown(t *testing.T) {
	r := newRig(t)
	first, _ := r.apply(t, indexer.TypePromptCreated, prompt("x", 1, "one"))
	activate := r.delivery(t, indexer.TypePromptActivated, map[string]any{"prompt_id": "x", "version": 2, "label": "staging"})
	create := r.delivery(t, indexer.TypePromptCreated, map[string]any{"id": "x", "type": "task", "name": "x", "content": "two"})
	r.handle(t, create) // the later event, applied first
	r.handle(t, activate)

	res := r.out.byCause(t)
	require.Equal(t, indexer.TypePromptIndexed, res[create.Event.ID()].Type)
	require.Equal(t, float64(2), res[create.Event.ID()].Data["version"])
	require.Equal(t, indexer.TypeRejected, res[activate.Event.ID()].Type)
	require.Equal(t, indexer.ReasonUnknownVersion, res[activate.Event.ID()].Data["reason_code"])

	live, err := indexer.ReadState(context.Background(), r.pool, r.tenant)
	require.NoError(t, err)
	require.Empty(t, live.Labels)
	ds := []*bus.Delivery{first, activate, create}
	for _, ev := range r.out.sent {
		ds = append(ds, &bus.Delivery{Event: ev, Tenant: r.tenant})
	}
	require.Equal(t, indexer.Compute("indexer-test", ds), live)

	// In stream order the activation finds the version.
	r.handle(t, r.delivery(t, indexer.TypePromptActivated, map[string]any{"prompt_id": "x", "version": 2, "label": "staging"}))
	got, err := library.LabelsOf(context.Background(), r.pool, r.tenant, "x", 2)
	require.NoError(t, err)
	require.Equal(t, []string{"staging"}, got)
}

func TestToolRegistryKeepsHistory(t *testing.T) {
	r := newRig(t)
	def := func(desc string, tags ...string) map[string]any {
		return map[string]any{"name": "get_weather", "description": desc, "server": "weather-mcp", "tags": tags,
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}
	}
	steps := []struct {
		data    map[string]any
		outcome string
		version int
	}{
		{def("Current weather for a city", "weather"), "created", 1},
		{def("Current weather for a city", "weather"), "unchanged", 1},
		{def("Current weather and forecast for a city", "weather"), "created", 2},
		{def("Current weather and forecast for a city", "weather"), "unchanged", 2},
		{def("Current weather for a city", "weather"), "created", 3}, // back to the first text: a new version
	}
	var hashes, vectors []string
	vector := func() string {
		var v string
		require.NoError(t, r.pool.QueryRow(context.Background(), `SELECT embedding::text FROM tools WHERE tenant_id = $1 AND name = 'get_weather'`, r.tenant).Scan(&v))
		return v
	}
	for i, s := range steps {
		_, res := r.apply(t, indexer.TypeToolRegistered, s.data)
		vectors = append(vectors, vector())
		require.Equal(t, indexer.TypeToolIndexed, res.Type, "step %d", i)
		h, err := registry.Hash("get_weather", s.data["description"].(string), mustJSON(t, s.data["input_schema"]), "weather-mcp", []string{"weather"})
		require.NoError(t, err)
		want := map[string]any{"tool_name": "get_weather", "version": float64(s.version), "content_hash": h,
			"outcome": s.outcome, "server": "weather-mcp", "tags": []any{"weather"}}
		if s.outcome == "created" {
			want["embedding_model"], want["embedding_dim"] = embed.Lexical{}.Model(), float64(embed.Lexical{}.Dimension())
			hashes = append(hashes, h)
		}
		require.Equal(t, want, res.Data, "step %d", i)
	}
	// Re-embedded with each new definition, untouched when unchanged; the
	// first text again gives the first vector again.
	require.Equal(t, vectors[0], vectors[1])
	require.NotEqual(t, vectors[1], vectors[2])
	require.Equal(t, vectors[2], vectors[3])
	require.Equal(t, vectors[0], vectors[4])
	ctx := context.Background()
	cur, err := registry.Get(ctx, r.pool, r.tenant, "get_weather")
	require.NoError(t, err)
	require.Equal(t, 3, cur.Version)
	require.Equal(t, "Current weather for a city", cur.Description)
	hist, err := registry.History(ctx, r.pool, r.tenant, "get_weather")
	require.NoError(t, err)
	require.Len(t, hist, 3)
	for i, h := range hist {
		require.Equal(t, i+1, h.Version)
		require.Equal(t, hashes[i], h.Hash)
		require.JSONEq(t, `{"type":"object","properties":{"city":{"type":"string"}}}`, string(h.InputSchema))
	}
	require.Equal(t, "Current weather and forecast for a city", hist[1].Description)
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// quality.changed is applied with compare-and-set on state_version, in any
// order; a prompt reported by hash and by id@version keeps both rows.
func TestQualityReadModelIsOrderIndependent(t *testing.T) {
	q := func(v, calls, successes int, score float64) map[string]any {
		return map[string]any{"target": "tool", "tool_name": "search_docs", "state_version": v, "quality_score": score,
			"success_rate": float64(successes) / float64(calls), "total_calls": calls, "successes": successes}
	}
	inOrder := newRig(t)
	shuffled := newRig(t)
	shuffled.tenant = inOrder.tenant + "b"
	var ds, ds2 []*bus.Delivery
	for _, data := range []map[string]any{q(1, 1, 1, 0.9), q(2, 2, 1, 0.6), q(3, 3, 2, 0.7), q(4, 4, 2, 0.5)} {
		ds = append(ds, inOrder.delivery(t, indexer.TypeQualityChanged, data))
	}
	for _, d := range ds {
		inOrder.handle(t, d)
	}
	// The same events (same sequences and times) in another order, with a
	// repeat.
	for _, i := range []int{3, 0, 2, 1, 3} {
		d := *ds[i]
		ev := d.Event.Clone()
		ev.SetExtension("tenantid", shuffled.tenant)
		d.Event, d.Tenant = ev, shuffled.tenant
		ds2 = append(ds2, &d)
	}
	for _, d := range ds2 {
		shuffled.handle(t, d)
	}
	ctx := context.Background()
	a, err := indexer.ReadState(ctx, inOrder.pool, inOrder.tenant)
	require.NoError(t, err)
	b, err := indexer.ReadState(ctx, shuffled.pool, shuffled.tenant)
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Equal(t, indexer.Compute("indexer-test", ds), a)
	lastSuccess := ds[2].Event.Time().UTC() // successes reached 2 at state 3
	require.Equal(t, []indexer.QualityRow{{Target: "tool", Ref: "search_docs", StateVersion: 4, Score: 0.5, SuccessRate: 0.5,
		TotalCalls: 4, Successes: 2, LastSuccess: &lastSuccess, UpdatedAt: ds[3].Event.Time().UTC()}}, a.Quality)
}

// A batch decides each prompt event as if it came alone: the versions it
// creates count for the events after them in the same batch (whose inserts
// travel together at the end, see promptWrites), and a label move sees
// them. The same events are applied one per batch and all in one batch;
// results and state must agree with each other and with Compute.
func TestOneBatchDecidesAsEventByEvent(t *testing.T) {
	const id = "batched"
	activate := func(version int, label string) map[string]any {
		return map[string]any{"prompt_id": id, "version": version, "label": label}
	}
	steps := []struct {
		typ     string
		data    map[string]any
		want    string // result type
		outcome string // prompt.indexed's outcome, or the rejection's reason code
		version int
		labels  []any
	}{
		{indexer.TypePromptCreated, prompt(id, 0, "One."), indexer.TypePromptIndexed, "created", 1, nil},
		{indexer.TypePromptCreated, prompt(id, 0, "One."), indexer.TypePromptIndexed, "unchanged", 1, nil},
		{indexer.TypePromptCreated, prompt(id, 0, "Two."), indexer.TypePromptIndexed, "created", 2, nil},
		{indexer.TypePromptCreated, prompt(id, 2, "Two, changed."), indexer.TypeRejected, indexer.ReasonVersionConflict, 0, nil},
		{indexer.TypePromptActivated, activate(2, "production"), indexer.TypePromptIndexed, "unchanged", 2, []any{"production"}},
		{indexer.TypePromptCreated, prompt(id, 2, "Two."), indexer.TypePromptIndexed, "unchanged", 2, []any{"production"}},
		{indexer.TypePromptCreated, prompt(id, 5, "Five."), indexer.TypePromptIndexed, "created", 5, nil},
		{indexer.TypePromptCreated, prompt(id, 0, "Six."), indexer.TypePromptIndexed, "created", 6, nil},
		{indexer.TypePromptCreated, prompt(id, 4, "Four."), indexer.TypePromptIndexed, "created", 4, nil},
		{indexer.TypePromptCreated, prompt(id, 0, "Six."), indexer.TypePromptIndexed, "unchanged", 6, nil},
		{indexer.TypePromptActivated, activate(7, "staging"), indexer.TypeRejected, indexer.ReasonUnknownVersion, 0, nil},
		{indexer.TypePromptCreated, prompt(id, 0, "Seven."), indexer.TypePromptIndexed, "created", 7, nil},
		{indexer.TypePromptActivated, activate(7, "staging"), indexer.TypePromptIndexed, "unchanged", 7, []any{"staging"}},
		{indexer.TypePromptCreated, prompt(id, 4, "Four, changed."), indexer.TypeRejected, indexer.ReasonVersionConflict, 0, nil},
		{indexer.TypePromptCreated, prompt("other", 0, "Other."), indexer.TypePromptIndexed, "created", 1, nil},
	}
	run := func(t *testing.T, oneBatch bool) ([]map[string]any, indexer.State) {
		r := newRig(t)
		ds := make([]*bus.Delivery, len(steps))
		for i, s := range steps {
			ds[i] = r.delivery(t, s.typ, s.data)
		}
		if oneBatch {
			r.handle(t, ds...)
		} else {
			for _, d := range ds {
				r.handle(t, d)
			}
		}
		got := r.out.byCause(t)
		out := make([]map[string]any, len(steps))
		for i, s := range steps {
			res, ok := got[ds[i].Event.ID()]
			require.True(t, ok, "step %d: no result", i)
			require.Equal(t, s.want, res.Type, "step %d", i)
			if s.want == indexer.TypeRejected {
				require.Equal(t, s.outcome, res.Data["reason_code"], "step %d", i)
				require.Equal(t, ds[i].Event.ID(), res.Data["event_id"], "step %d", i)
				// Event ids and the tenant differ between the runs.
				delete(res.Data, "event_id")
				res.Data["reason"] = strings.ReplaceAll(res.Data["reason"].(string), r.tenant, "<tenant>")
			} else {
				require.Equal(t, s.outcome, res.Data["outcome"], "step %d", i)
				require.Equal(t, float64(s.version), res.Data["version"], "step %d", i)
				labels, _ := res.Data["labels"].([]any)
				require.Equal(t, s.labels, labels, "step %d", i)
			}
			out[i] = res.Data
		}
		state, err := indexer.ReadState(context.Background(), r.pool, r.tenant)
		require.NoError(t, err)
		require.Equal(t, indexer.Compute("indexer-test", ds), state)
		// The production label pins version 2: it stays served.
		var current []int
		for _, p := range state.Prompts {
			if p.ID == id && p.Current {
				current = append(current, p.Version)
			}
		}
		require.Equal(t, []int{2}, current)
		return out, state
	}
	alone, aloneState := run(t, false)
	batched, batchedState := run(t, true)
	require.Equal(t, alone, batched)
	// The states differ only in event ids (each run has its own tenant's events).
	for _, s := range []*indexer.State{&aloneState, &batchedState} {
		for i := range s.Prompts {
			s.Prompts[i].EventID = ""
		}
	}
	require.Equal(t, aloneState, batchedState)
}
