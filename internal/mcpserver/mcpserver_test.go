package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/answer"
	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/mcpserver"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// stack is a running agentq: an embedded NATS server, the test database,
// and the indexer and the degrader as agentq runs them.
type stack struct {
	n   *testenv.NATS
	reg *schemas.Registry
}

// newStack starts the stack; the tests of this package share one, each
// with tenants of its own.
func newStack(t testing.TB) *stack {
	t.Helper()
	n := testenv.StartNATS(t)
	cfg := testenv.Config(t, n.URL)
	cfg.Degrade.Poll = 50 * time.Millisecond
	testenv.StartProcess(t, cfg, "indexer", indexer.Consumer)
	testenv.StartProcess(t, cfg, "degrader", health.Consumer)
	reg, err := schemas.Load()
	require.NoError(t, err)
	return &stack{n: n, reg: reg}
}

// server returns an MCP server over the stack and a client session on it
// through the SDK's in-memory transport.
func (st *stack) client(t testing.TB, opts mcpserver.Options) *mcp.ClientSession {
	t.Helper()
	opts.NC, opts.Registry = st.n.NC, st.reg
	s, err := mcpserver.New(opts)
	require.NoError(t, err)
	ct, st2 := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ss, err := s.MCP().Connect(ctx, st2, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// callTool calls a tool and returns its result's structured content as
// JSON-decoded values, or the text of its error.
func callTool(t testing.TB, cs *mcp.ClientSession, name string, args any) (out any, toolErr string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, "%s: a protocol error", name)
	if res.IsError {
		require.Len(t, res.Content, 1)
		return nil, res.Content[0].(*mcp.TextContent).Text
	}
	return normal(t, res.StructuredContent), ""
}

// normal is v after a JSON round trip, to compare values from anywhere.
func normal(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// natsReply is the bare NATS request/reply answer to req, decoded.
func (st *stack) natsReply(t *testing.T, subject string, req any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var raw json.RawMessage
	require.NoError(t, service.Call(ctx, st.n.NC, subject, req, &raw))
	return normal(t, raw)
}

func TestMCP(t *testing.T) {
	st := newStack(t)
	t.Run("Tools", func(t *testing.T) { testTools(t, st) })
	t.Run("ToolReportAndHealth", func(t *testing.T) { testToolReportAndHealth(t, st) })
	t.Run("FeedbackSubmit", func(t *testing.T) { testFeedback(t, st) })
	t.Run("PromptsPrimitive", func(t *testing.T) { testPromptsPrimitive(t, st) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, st) })
	t.Run("ReadOnly", func(t *testing.T) { testReadOnly(t, st) })
	t.Run("HTTP", func(t *testing.T) { testHTTP(t, st) })
	t.Run("Unreachable", func(t *testing.T) { testUnreachable(t, st) })
}

// With its NATS connection down the server answers at once that agentq
// cannot be reached, rather than wait out a timeout.
func testUnreachable(t *testing.T, st *stack) {
	nc, err := nats.Connect(st.n.URL)
	require.NoError(t, err)
	s, err := mcpserver.New(mcpserver.Options{NC: nc, Registry: st.reg, Tenant: testenv.Tenant(t)})
	require.NoError(t, err)
	nc.Close()
	ct, sst := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.MCP().Connect(ctx, sst, nil)
	require.NoError(t, err)
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	defer cs.Close()
	// (A call that waited would say it timed out.)
	_, errText := callTool(t, cs, "prompt_search", map[string]any{"query": "x"})
	require.Equal(t, "agentq is not reachable: the MCP server is not connected to agentq's NATS server. Make sure agentq is running (make dev runs it), then retry.", errText)
	_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "x"})
	require.ErrorContains(t, err, "agentq is not reachable")
	rec := httptest.NewRecorder()
	s.Healthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "nats disconnected\n", rec.Body.String())
}

// The read tools answer exactly what the NATS calls they stand for
// answer; prompt_create stores a version and says what the indexer made
// of it.
func testTools(t *testing.T, st *stack) {
	tenant := testenv.Tenant(t)
	cs := st.client(t, mcpserver.Options{Tenant: tenant})
	w := "zq" + tenant[1:] // a word no other test's _global rows contain

	created := map[string]any{"id": "greet-" + w, "type": "task", "name": "Greeting " + w, "content": "Greet {{.Who}} warmly about " + w,
		"description": "says hello " + w, "tags": []any{w, "social"}, "author": "mcp-test",
		"parameters": []any{map[string]any{"name": "Who", "type": "string", "required": true, "description": "whom to greet"}}}
	out, errText := callTool(t, cs, "prompt_create", created)
	require.Empty(t, errText)
	got := out.(map[string]any)
	require.NotEmpty(t, got["event_id"])
	hash := library.Hash("greet-"+w, 1, created["content"].(string), "task")
	require.Equal(t, map[string]any{"event_id": got["event_id"], "prompt_id": "greet-" + w, "version": float64(1),
		"content_hash": hash, "outcome": "created"}, got)

	// The same content again: unchanged, the same version.
	out, errText = callTool(t, cs, "prompt_create", created)
	require.Empty(t, errText)
	again := out.(map[string]any)
	require.NotEqual(t, got["event_id"], again["event_id"])
	require.Equal(t, map[string]any{"event_id": again["event_id"], "prompt_id": "greet-" + w, "version": float64(1),
		"content_hash": hash, "outcome": "unchanged"}, again)

	// Other content for version 1: refused, with what to do.
	conflict := map[string]any{"id": "greet-" + w, "type": "task", "name": "x", "content": "Other", "version": 1}
	_, errText = callTool(t, cs, "prompt_create", conflict)
	require.Contains(t, errText, "the indexer refused the prompt (version_conflict)")
	require.Contains(t, errText, "Omit version to create the next one")

	// Version 2 without a version: the next free one.
	v2 := map[string]any{"id": "greet-" + w, "type": "task", "name": "Greeting " + w, "content": "Hi {{.Who}}! " + w, "tags": []any{w},
		"parameters": []any{map[string]any{"name": "Who", "default": "friend"}}}
	out, errText = callTool(t, cs, "prompt_create", v2)
	require.Empty(t, errText)
	require.Equal(t, float64(2), out.(map[string]any)["version"])

	for _, tc := range []struct {
		tool, subject string
		args          map[string]any
	}{
		{"prompt_get", "prompts.get", map[string]any{"id": "greet-" + w, "params": map[string]any{"Who": "Ada"}}},
		{"prompt_get", "prompts.get", map[string]any{"id": "greet-" + w, "version": 1}},
		{"prompt_get", "prompts.get", map[string]any{"id": "greet-" + w, "label": "latest"}},
		{"prompt_search", "search.prompts", map[string]any{"query": "greet someone warmly " + w, "params": map[string]any{}}},
		{"prompt_search", "search.prompts", map[string]any{"query": "greeting " + w, "tags": []any{w}, "limit": 3}},
		{"prompt_list", "prompts.list", map[string]any{"tags": []any{w}}},
	} {
		out, errText := callTool(t, cs, tc.tool, tc.args)
		require.Empty(t, errText, "%s %v", tc.tool, tc.args)
		want := st.natsReply(t, tc.subject+"."+tenant, tc.args)
		requireSame(t, want, out, tc.tool)
	}
	// What the comparisons above hold, checked once by hand.
	out, _ = callTool(t, cs, "prompt_get", map[string]any{"id": "greet-" + w, "params": map[string]any{"Who": "Ada"}})
	g := out.(map[string]any)
	require.Equal(t, "Hi Ada! "+w, g["rendered"])
	require.Equal(t, float64(2), g["prompt"].(map[string]any)["version"])
	out, _ = callTool(t, cs, "prompt_list", map[string]any{"tags": []any{w}})
	require.Len(t, out.(map[string]any)["prompts"], 1)

	// A tool, registered as an agent would, found by tool_search.
	registerTools(t, st, tenant, "weather_"+w)
	args := map[string]any{"query": "weather forecast " + w, "limit": 5}
	out, errText = callTool(t, cs, "tool_search", args)
	require.Empty(t, errText)
	requireSame(t, st.natsReply(t, "search.tools."+tenant, args), out, "tool_search")
	results := out.(map[string]any)["results"].([]any)
	require.Equal(t, "weather_"+w, results[0].(map[string]any)["tool"].(map[string]any)["name"])
}

// requireSame compares two decoded JSON values member by member, numbers
// within 1e-6: a score's recency moves with the clock between two calls.
func requireSame(t *testing.T, want, got any, at string) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		require.True(t, ok, "%s: got %v, want an object", at, got)
		require.ElementsMatch(t, slices.Collect(maps.Keys(w)), slices.Collect(maps.Keys(g)), "%s: members", at)
		for k := range w {
			requireSame(t, w[k], g[k], at+"/"+k)
		}
	case []any:
		g, ok := got.([]any)
		require.True(t, ok, "%s: got %v, want an array", at, got)
		require.Len(t, g, len(w), at)
		for i := range w {
			requireSame(t, w[i], g[i], fmt.Sprintf("%s/%d", at, i))
		}
	case float64:
		require.InDelta(t, w, got, 1e-6, at)
	default:
		require.Equal(t, want, got, at)
	}
}

// registerTools publishes tool.registered for names and waits until the
// indexer has them.
func registerTools(t *testing.T, st *stack, tenant string, names ...string) {
	t.Helper()
	for _, name := range names {
		ev, err := bus.NewEvent(indexer.TypeToolRegistered, tenant, "test", map[string]any{"name": name, "description": "tell the weather forecast for a city " + name})
		require.NoError(t, err)
		a, err := answer.Await(context.Background(), st.n.JS, st.reg, ev, indexer.TypeToolIndexed, indexer.TypeRejected, 30*time.Second)
		require.NoError(t, err)
		require.NotNil(t, a, "the indexer answers tool.registered")
		require.Equal(t, indexer.TypeToolIndexed, a.Type)
	}
}

// tool_report publishes tool.executed (once per event_id); the degrader
// degrades, then quarantines a tool that starts failing; tool_health
// shows it with the figures of the degrader's own announcement.
func testToolReportAndHealth(t *testing.T, st *stack) {
	tenant := testenv.Tenant(t)
	cs := st.client(t, mcpserver.Options{Tenant: tenant})
	ctx := context.Background()
	for _, name := range []string{"geo", "maps", "news"} { // so one tool may be quarantined (at most half)
		ev, err := bus.NewEvent(health.TypeToolRegistered, tenant, "test", map[string]any{"name": name, "description": name})
		require.NoError(t, err)
		_, err = bus.NewPublisher(st.n.JS, st.reg).Publish(ctx, ev)
		require.NoError(t, err)
	}

	out, errText := callTool(t, cs, "tool_health", map[string]any{})
	require.Empty(t, errText)
	require.Equal(t, map[string]any{"tools": []any{}}, out)

	report := func(ok bool, i int) map[string]any {
		args := map[string]any{"tool_name": "geo", "success": ok, "latency_ms": 80 + i, "event_id": fmt.Sprintf("run-%s-%d", tenant, i)}
		if !ok {
			args["error_class"] = "timeout"
		}
		out, errText := callTool(t, cs, "tool_report", args)
		require.Empty(t, errText)
		return out.(map[string]any)
	}
	first := report(true, 0)
	require.Equal(t, map[string]any{"event_id": "run-" + tenant + "-0", "type": "agentq.tool.executed.v1", "subject": "tool.executed." + tenant,
		"duplicate": false, "stream_sequence": first["stream_sequence"]}, first)
	require.Positive(t, first["stream_sequence"])
	// A retry with the same event_id: the same event, stored once.
	require.Equal(t, map[string]any{"event_id": "run-" + tenant + "-0", "type": "agentq.tool.executed.v1", "subject": "tool.executed." + tenant,
		"duplicate": true, "stream_sequence": first["stream_sequence"]}, report(true, 0))

	// What reached the stream: the data as given, less event_id, under
	// the tenant-scoped Nats-Msg-Id.
	msg, err := st.n.JS.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	raw, err := msg.GetMsg(ctx, uint64(first["stream_sequence"].(float64)))
	require.NoError(t, err)
	require.Equal(t, tenant+":run-"+tenant+"-0", raw.Header.Get("Nats-Msg-Id"))
	ev, err := bus.Decode(raw.Header, raw.Data)
	require.NoError(t, err)
	require.Equal(t, tenant, bus.Tenant(ev))
	require.Equal(t, "agentq-mcp", ev.Source())
	require.JSONEq(t, `{"tool_name":"geo","success":true,"latency_ms":80}`, string(ev.Data()))

	for i := 1; i < 30; i++ {
		report(true, i)
	}
	for i := 30; i < 42; i++ {
		report(false, i)
	}
	var tools []any
	testenv.Eventually(t, 30*time.Second, func() bool {
		out, errText := callTool(t, cs, "tool_health", map[string]any{})
		require.Empty(t, errText)
		tools = out.(map[string]any)["tools"].([]any)
		return len(tools) == 1 && tools[0].(map[string]any)["state"] == "quarantined"
	}, "geo quarantined; tool_health says %v", tools)

	// Field by field, against the degrader's announcement itself.
	quarantined := lastEvent(t, st, "tool.quarantined."+tenant)
	var d map[string]any
	require.NoError(t, json.Unmarshal(quarantined.Data(), &d))
	q := d["quarantine"].(map[string]any)
	want := map[string]any{"tool_name": "geo", "state": "quarantined", "previous_state": "degraded", "since": d["at"],
		"quality_score": d["quality_score"], "threshold": d["threshold"], "evidence": d["evidence"], "reason": d["reason"],
		"degraded_since": d["degraded_since"], "quarantine_ends_at": q["expires_at"], "offence": float64(1), "event_id": quarantined.ID()}
	require.Equal(t, normalTimes(t, want), normalTimes(t, tools[0].(map[string]any)))

	// One tool by name, healthy ones included; a tool never flagged is
	// not listed.
	out, _ = callTool(t, cs, "tool_health", map[string]any{"tool_name": "geo"})
	require.Len(t, out.(map[string]any)["tools"], 1)
	out, _ = callTool(t, cs, "tool_health", map[string]any{"tool_name": "maps"})
	require.Equal(t, map[string]any{"tools": []any{}}, out)

	// A released tool is on probation: tool_health reads only what the
	// stream gained since its last call.
	rel, err := bus.NewEvent(health.TypeToolReleased, tenant, "test", map[string]any{"tool_name": "geo", "reason": "fixed"})
	require.NoError(t, err)
	a, err := answer.Await(ctx, st.n.JS, st.reg, rel, health.TypeToolRecovered, health.TypeRejected, 30*time.Second)
	require.NoError(t, err)
	require.NotNil(t, a)
	out, _ = callTool(t, cs, "tool_health", map[string]any{})
	tools = out.(map[string]any)["tools"].([]any)
	require.Len(t, tools, 1)
	require.Equal(t, "probation", tools[0].(map[string]any)["state"])
	require.Equal(t, "quarantined", tools[0].(map[string]any)["previous_state"])
	require.Equal(t, a.ID, tools[0].(map[string]any)["event_id"])
}

// normalTimes reads the RFC 3339 strings among m's values as instants, so
// two spellings of one time compare equal.
func normalTimes(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	out := map[string]any{}
	for k, v := range m {
		if s, ok := v.(string); ok {
			if ts, err := time.Parse(time.RFC3339Nano, s); err == nil {
				v = ts.UTC().Format(time.RFC3339Nano)
			}
		}
		out[k] = v
	}
	return out
}

// lastEvent is the last event on subject in the stream.
func lastEvent(t *testing.T, st *stack, subject string) event.Event {
	t.Helper()
	s, err := st.n.JS.Stream(context.Background(), bus.StreamName)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(context.Background(), subject)
	require.NoError(t, err)
	ev, err := bus.Decode(m.Header, m.Data)
	require.NoError(t, err)
	return ev
}

// feedback_submit publishes feedback.submitted as given.
func testFeedback(t *testing.T, st *stack) {
	tenant := testenv.Tenant(t)
	cs := st.client(t, mcpserver.Options{Tenant: tenant})
	args := map[string]any{"target": "prompt", "prompt_id": "greet", "version": 2, "thumbs": "down", "comment": "too curt", "user_id": "u1"}
	out, errText := callTool(t, cs, "feedback_submit", args)
	require.Empty(t, errText)
	got := out.(map[string]any)
	require.Equal(t, map[string]any{"event_id": got["event_id"], "type": "agentq.feedback.submitted.v1", "subject": "feedback.submitted." + tenant,
		"duplicate": false, "stream_sequence": got["stream_sequence"]}, got)
	ev := lastEvent(t, st, "feedback.submitted."+tenant)
	require.Equal(t, got["event_id"], ev.ID())
	want, err := json.Marshal(args)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(ev.Data()))
}

// prompts/list and prompts/get show the tenant's library as MCP prompts.
func testPromptsPrimitive(t *testing.T, st *stack) {
	tenant := testenv.Tenant(t)
	cs := st.client(t, mcpserver.Options{Tenant: tenant})
	ctx := context.Background()
	w := "zq" + tenant[1:]
	for _, p := range []map[string]any{
		{"id": "ask-" + w, "type": "user", "name": "Ask " + w, "content": "Ask {{.Who}} about {{.Count}} invoices", "description": "asks about invoices",
			"parameters": []any{map[string]any{"name": "Who", "required": true, "description": "whom"}, map[string]any{"name": "Count", "type": "integer", "default": 1}}},
		{"id": "plain-" + w, "type": "system", "name": "Plain " + w, "content": "You are terse."},
	} {
		_, errText := callTool(t, cs, "prompt_create", p)
		require.Empty(t, errText)
	}
	// A second version of plain, so @1 names the first.
	_, errText := callTool(t, cs, "prompt_create", map[string]any{"id": "plain-" + w, "type": "system", "name": "Plain " + w, "content": "You are very terse."})
	require.Empty(t, errText)

	var mine []*mcp.Prompt
	for p, err := range cs.Prompts(ctx, nil) {
		require.NoError(t, err)
		if strings.HasSuffix(p.Name, w) {
			mine = append(mine, p)
		}
	}
	require.Len(t, mine, 2)
	ask, plain := mine[0], mine[1]
	require.Equal(t, "ask-"+w, ask.Name)
	require.Equal(t, "Ask "+w, ask.Title)
	require.Equal(t, "asks about invoices", ask.Description)
	require.Equal(t, []*mcp.PromptArgument{{Name: "Who", Description: "whom", Required: true}, {Name: "Count", Description: "(integer, as JSON; default 1)"}}, ask.Arguments)
	require.Equal(t, float64(1), ask.Meta["agentq/version"])
	require.Equal(t, "plain-"+w, plain.Name)
	require.Empty(t, plain.Arguments)
	require.Equal(t, float64(2), plain.Meta["agentq/version"])

	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "ask-" + w, Arguments: map[string]string{"Who": "Bob", "Count": "3"}})
	require.NoError(t, err)
	require.Equal(t, "asks about invoices", res.Description)
	require.Len(t, res.Messages, 1)
	require.Equal(t, mcp.Role("user"), res.Messages[0].Role)
	require.Equal(t, "Ask Bob about 3 invoices", res.Messages[0].Content.(*mcp.TextContent).Text)

	res, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "plain-" + w + "@1"})
	require.NoError(t, err)
	require.Equal(t, "You are terse.", res.Messages[0].Content.(*mcp.TextContent).Text)
	res, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "plain-" + w})
	require.NoError(t, err)
	require.Equal(t, "You are very terse.", res.Messages[0].Content.(*mcp.TextContent).Text)

	for _, tc := range []struct {
		params mcp.GetPromptParams
		want   string
	}{
		{mcp.GetPromptParams{Name: "ask-" + w}, `missing required parameter(s) Who. Pass every required argument`},
		{mcp.GetPromptParams{Name: "ask-" + w, Arguments: map[string]string{"Who": "Bob", "Cnt": "2"}}, `has no argument "Cnt" (it takes Who, Count)`},
		{mcp.GetPromptParams{Name: "nope-" + w}, "not found"},
	} {
		_, err := cs.GetPrompt(ctx, &tc.params)
		require.ErrorContains(t, err, tc.want, tc.params.Name)
	}
}

// Bad input is a tool error that says what is wrong and what to do,
// whether the SDK's schema check or the contract's finds it; nothing is
// published.
func testBadInput(t *testing.T, st *stack) {
	tenant := testenv.Tenant(t)
	cs := st.client(t, mcpserver.Options{Tenant: tenant})
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"prompt_search", map[string]any{"query": 5}, "invalid arguments: /query: got number, want string. "},
		{"prompt_search", map[string]any{}, "invalid arguments: /query: missing. "},
		{"prompt_get", map[string]any{"id": "x", "version": 0}, "invalid arguments: /version: got 0, want >= 1. "},
		{"prompt_get", map[string]any{"id": "x", "version": 2, "label": "production"}, "invalid arguments: /label: not allowed here. "},
		{"prompt_get", map[string]any{"id": "nope"}, `prompt "nope" not found for tenant ` + tenant + " or _global. Check the id"},
		{"feedback_submit", map[string]any{"target": "tool", "tool_name": "geo"}, "invalid arguments: /rating or /thumbs: missing. "},
		{"tool_report", map[string]any{"tool_name": "geo"}, "invalid arguments: /success: missing. "},
		{"tool_report", map[string]any{"tool_name": "geo", "success": true, "event_id": ""}, "invalid arguments: /event_id: minLength"},
		{"prompt_create", map[string]any{"id": "x", "type": "poem", "name": "x", "content": "x"}, `invalid arguments: /type: got "poem", want one of "system"`},
	} {
		_, errText := callTool(t, cs, tc.tool, tc.args)
		require.Contains(t, errText, tc.want, "%s %v", tc.tool, tc.args)
		require.Regexp(t, `\. [A-Z][^.]+(\.|\?)$`, errText, "says what to do")
	}
	// Nothing reached the stream for this tenant.
	s, err := st.n.JS.Stream(context.Background(), bus.StreamName)
	require.NoError(t, err)
	_, err = s.GetLastMsgForSubject(context.Background(), "*.*."+tenant)
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
}

// Read-only: the write tools are not offered, nor callable.
func testReadOnly(t *testing.T, st *stack) {
	cs := st.client(t, mcpserver.Options{Tenant: testenv.Tenant(t), ReadOnly: true})
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		require.NoError(t, err)
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	require.Equal(t, []string{"prompt_get", "prompt_list", "prompt_search", "tool_health", "tool_search"}, names)
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "tool_report", Arguments: map[string]any{"tool_name": "x", "success": true}})
	require.ErrorContains(t, err, "unknown tool")

	cs = st.client(t, mcpserver.Options{Tenant: testenv.Tenant(t)})
	names = nil
	for tool, err := range cs.Tools(context.Background(), nil) {
		require.NoError(t, err)
		names = append(names, tool.Name)
		require.NotNil(t, tool.InputSchema, tool.Name)
		require.NotNil(t, tool.OutputSchema, tool.Name)
	}
	slices.Sort(names)
	require.Equal(t, []string{"feedback_submit", "prompt_create", "prompt_get", "prompt_list", "prompt_search", "tool_health", "tool_report", "tool_search"}, names)
}

// Over streamable HTTP every request needs a bearer token naming a
// tenant; the request acts for that tenant, whatever it asks; tokens are
// neither echoed nor logged.
func testHTTP(t *testing.T, st *stack) {
	a, b := testenv.Tenant(t), testenv.Tenant(t)
	tokA, lineA, err := auth.New(a)
	require.NoError(t, err)
	tokB, lineB, err := auth.New(b)
	require.NoError(t, err)
	tokens, err := auth.Parse(strings.NewReader(lineA + "\n" + lineB + "\n"))
	require.NoError(t, err)

	var logs bytes.Buffer
	s, err := mcpserver.New(mcpserver.Options{NC: st.n.NC, Registry: st.reg, Log: zerolog.New(&logs).Level(zerolog.DebugLevel)})
	require.NoError(t, err)
	h, err := s.HTTPHandler(tokens)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	connect := func(token string) (*mcp.ClientSession, error) {
		hc := &http.Client{Transport: bearer{token}}
		return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).
			Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc}, nil)
	}
	for _, token := range []string{"", "aq_not-a-token-anyone-has", tokA + "x"} {
		_, err := connect(token)
		require.Error(t, err, "token %q", token)
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body := new(bytes.Buffer)
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		if token != "" {
			require.NotContains(t, body.String(), token)
		}
	}

	csA, err := connect(tokA)
	require.NoError(t, err)
	t.Cleanup(func() { _ = csA.Close() })
	csB, err := connect(tokB)
	require.NoError(t, err)
	t.Cleanup(func() { _ = csB.Close() })
	w := "zq" + a[1:]
	_, errText := callTool(t, csA, "prompt_create", map[string]any{"id": "mine-" + w, "type": "task", "name": "Mine", "content": "A's own " + w})
	require.Empty(t, errText)
	out, errText := callTool(t, csA, "prompt_get", map[string]any{"id": "mine-" + w})
	require.Empty(t, errText)
	require.Equal(t, a, out.(map[string]any)["prompt"].(map[string]any)["tenant"])
	_, errText = callTool(t, csB, "prompt_get", map[string]any{"id": "mine-" + w})
	require.Contains(t, errText, "not found for tenant "+b)

	for _, tok := range []string{tokA, tokB} {
		require.NotContains(t, logs.String(), tok)
	}
	rec := httptest.NewRecorder()
	s.Healthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "ok\n", rec.Body.String())
}

// bearer sets the Authorization header of every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}
