package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
)

const echoSchema = "agentq.test.echo.request.v1"

// schemaValidator is a test-only Validator over schemas compiled inline,
// shaped like schemas.Registry (Validate and Has).
type schemaValidator map[string]*jsonschema.Schema

func newSchemaValidator(t testing.TB, name, doc string) schemaValidator {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	url := "https://agentq.test/" + name + ".json"
	require.NoError(t, c.AddResource(url, v))
	sch, err := c.Compile(url)
	require.NoError(t, err)
	return schemaValidator{name: sch}
}

func (sv schemaValidator) Has(name string) bool { _, ok := sv[name]; return ok }

func (sv schemaValidator) Validate(name string, data []byte) error {
	sch, ok := sv[name]
	if !ok {
		return fmt.Errorf("no schema %q", name)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(v)
}

const echoSchemaDoc = `{
  "type": "object",
  "required": ["query"],
  "properties": {"query": {"type": "string", "minLength": 1}, "mode": {"type": "string"}}
}`

// syncBuffer collects log output written from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

type echoRequest struct {
	Query string `json:"query"`
	Mode  string `json:"mode,omitempty"`
}

type echoReply struct {
	Tenant string `json:"tenant"`
	Query  string `json:"query"`
}

// errorBody is the body of an error reply.
type errorBody struct {
	Error *service.Error `json:"error"`
}

func startService(t *testing.T, nc *nats.Conn, opts service.Options) *service.Service {
	t.Helper()
	s, err := service.New(nc, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Stop()) })
	return s
}

// echoHandler behaves as the request's mode says; calls counts its calls.
func echoHandler(calls *atomic.Int64, release <-chan struct{}) service.Handler {
	return func(ctx context.Context, r service.Request) (any, error) {
		calls.Add(1)
		var req echoRequest
		if err := json.Unmarshal(r.Data, &req); err != nil {
			return nil, err
		}
		switch req.Mode {
		case "not_found":
			return nil, fmt.Errorf("lookup: %w", service.NotFound("prompt %s not found", req.Query))
		case "rendering":
			return nil, service.Errorf(service.CodeRendering, "parameter %s missing", req.Query)
		case "plain":
			return nil, errors.New("pq: password authentication failed for user secret-admin")
		case "unavailable":
			return nil, bus.Unavailable(errors.New("dial tcp 10.0.0.7:5432: connection refused"))
		case "panic":
			panic("index out of range in secret code")
		case "slow_ignores_ctx":
			<-release
			return echoReply{Tenant: r.Tenant, Query: "too late"}, nil
		case "slow_honours_ctx":
			<-ctx.Done()
			return nil, fmt.Errorf("query: %w", ctx.Err())
		}
		return echoReply{Tenant: r.Tenant, Query: req.Query}, nil
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestEndpoint(t *testing.T) {
	env := testenv.StartNATS(t)
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	validator := newSchemaValidator(t, echoSchema, echoSchemaDoc)
	const timeout = 300 * time.Millisecond

	var calls atomic.Int64
	release := make(chan struct{})
	s := startService(t, env.NC, service.Options{
		Name: "echo", Timeout: timeout, Validator: validator,
		Log: zerolog.New(logs).Level(zerolog.DebugLevel), Registry: reg,
	})
	t.Cleanup(func() { close(release) }) // runs before Stop: lets the stuck handler return
	require.NoError(t, s.AddEndpoint("echo", "test.echo", echoSchema, echoHandler(&calls, release)))

	client, err := nats.Connect(env.URL)
	require.NoError(t, err)
	t.Cleanup(client.Close)

	// The message the validator gives, flattened to one line independently.
	missingQuery := validator.Validate(echoSchema, []byte(`{"mode":"x"}`))
	require.Error(t, missingQuery)
	require.Contains(t, missingQuery.Error(), "\n", "the test validator's message should span lines")
	wantSchemaMsg := strings.Join(strings.Fields(missingQuery.Error()), " ")

	internalMsg := regexp.MustCompile(`^internal error \(ref [0-9a-f]{12}\)$`)

	tests := []struct {
		name       string
		subject    string
		body       []byte
		wantCalled bool
		wantReply  *echoReply // success
		wantCode   string     // error reply
		wantStatus string     // Nats-Service-Error-Code
		checkMsg   func(t *testing.T, msg string)
		slow       bool
	}{
		{name: "ok first tenant", subject: "test.echo.acme", body: mustJSON(t, echoRequest{Query: "q1"}),
			wantCalled: true, wantReply: &echoReply{Tenant: "acme", Query: "q1"}},
		{name: "ok second tenant", subject: "test.echo.globex", body: mustJSON(t, echoRequest{Query: "q2"}),
			wantCalled: true, wantReply: &echoReply{Tenant: "globex", Query: "q2"}},
		{name: "bad tenant token", subject: "test.echo.BAD!", body: mustJSON(t, echoRequest{Query: "q"}),
			wantCode: service.CodeBadRequest, wantStatus: "400",
			checkMsg: func(t *testing.T, msg string) { require.Contains(t, msg, `tenant "BAD!"`) }},
		{name: "schema violation", subject: "test.echo.acme", body: []byte(`{"mode":"x"}`),
			wantCode: service.CodeBadRequest, wantStatus: "400",
			checkMsg: func(t *testing.T, msg string) { require.Equal(t, wantSchemaMsg, msg) }},
		{name: "not JSON", subject: "test.echo.acme", body: []byte(`{"query":`),
			wantCode: service.CodeBadRequest, wantStatus: "400",
			checkMsg: func(t *testing.T, msg string) { require.Contains(t, msg, "not JSON") }},
		{name: "not found", subject: "test.echo.acme", body: mustJSON(t, echoRequest{Query: "p1", Mode: "not_found"}),
			wantCalled: true, wantCode: service.CodeNotFound, wantStatus: "404",
			checkMsg: func(t *testing.T, msg string) { require.Equal(t, "prompt p1 not found", msg) }},
		{name: "rendering", subject: "test.echo.acme", body: mustJSON(t, echoRequest{Query: "name", Mode: "rendering"}),
			wantCalled: true, wantCode: service.CodeRendering, wantStatus: "422",
			checkMsg: func(t *testing.T, msg string) { require.Equal(t, "parameter name missing", msg) }},
		{name: "plain error hides its text", subject: "test.echo.acme", body: mustJSON(t, echoRequest{Query: "q", Mode: "plain"}),
			wantCalled: true, wantCode: service.CodeInternal, wantStatus: "500",
			checkMsg: func(t *testing.T, msg string) {
				require.Regexp(t, internalMsg, msg)
				require.NotContains(t, msg, "secret")
			}},
		{name: "outage", subject: "test.echo.acme", body: mustJSON(t, echoRequest{Query: "q", Mode: "unavailable"}),
			wantCalled: true, wantCode: service.CodeUnavailable, wantStatus: "503",
			checkMsg: func(t *testing.T, msg string) { require.NotContains(t, msg, "10.0.0.7") }},
		{name: "panic", subject: "test.echo.acme", body: mustJSON(t, echoRequest{Query: "q", Mode: "panic"}),
			wantCalled: true, wantCode: service.CodeInternal, wantStatus: "500",
			checkMsg: func(t *testing.T, msg string) {
				require.Regexp(t, internalMsg, msg)
				require.NotContains(t, msg, "secret")
			}},
		{name: "serves after a panic", subject: "test.echo.acme", body: mustJSON(t, echoRequest{Query: "q3"}),
			wantCalled: true, wantReply: &echoReply{Tenant: "acme", Query: "q3"}},
		{name: "slow handler ignoring ctx", subject: "test.echo.acme", body: mustJSON(t, echoRequest{Query: "q", Mode: "slow_ignores_ctx"}),
			wantCalled: true, wantCode: service.CodeTimeout, wantStatus: "504", slow: true,
			checkMsg: func(t *testing.T, msg string) { require.Equal(t, "no answer within 300ms", msg) }},
		{name: "slow handler honouring ctx", subject: "test.echo.acme", body: mustJSON(t, echoRequest{Query: "q", Mode: "slow_honours_ctx"}),
			wantCalled: true, wantCode: service.CodeTimeout, wantStatus: "504", slow: true,
			checkMsg: func(t *testing.T, msg string) { require.Equal(t, "no answer within 300ms", msg) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := calls.Load()
			// The client waits far longer than the service's timeout: a
			// timeout must arrive as a reply.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			msg, err := client.RequestWithContext(ctx, tc.subject, tc.body)
			require.NoError(t, err)
			took := time.Since(start)

			if tc.wantCalled {
				require.Equal(t, before+1, calls.Load(), "handler calls")
			} else {
				require.Equal(t, before, calls.Load(), "handler must not be called")
			}
			if tc.slow {
				require.GreaterOrEqual(t, took, timeout)
				require.Less(t, took, timeout+2*time.Second)
			}
			if tc.wantReply != nil {
				require.Empty(t, msg.Header.Get(micro.ErrorCodeHeader))
				require.JSONEq(t, string(mustJSON(t, tc.wantReply)), string(msg.Data))
				return
			}
			var body errorBody
			require.NoError(t, json.Unmarshal(msg.Data, &body), string(msg.Data))
			require.NotNil(t, body.Error, string(msg.Data))
			require.Equal(t, tc.wantCode, body.Error.Code)
			tc.checkMsg(t, body.Error.Message)
			require.Equal(t, tc.wantStatus, msg.Header.Get(micro.ErrorCodeHeader))
			require.Equal(t, body.Error.Code+": "+body.Error.Message, msg.Header.Get(micro.ErrorHeader))
			var keys map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(msg.Data, &keys))
			require.Len(t, keys, 1, "an error reply holds only the error")
		})
	}

	t.Run("metrics by code", func(t *testing.T) {
		want := map[string]float64{}
		for _, tc := range tests {
			code := tc.wantCode
			if code == "" {
				code = "ok"
			}
			want[code]++
		}
		got, histCount := gatherRequests(t, reg, "echo", "echo")
		require.Equal(t, want, got)
		require.Equal(t, uint64(len(tests)), histCount)
	})

	t.Run("every request log line names service, endpoint, tenant", func(t *testing.T) {
		lines := logs.lines(t)
		require.NotEmpty(t, lines)
		var sawSecret, sawPanicStack bool
		for _, l := range lines {
			require.Equal(t, "echo", l["service"], l)
			require.Equal(t, "echo", l["endpoint"], l)
			require.NotEmpty(t, l["tenant"], l)
			if strings.Contains(fmt.Sprint(l["error"]), "secret-admin") {
				sawSecret = true
				require.Regexp(t, `^[0-9a-f]{12}$`, l["ref"])
			}
			if l["panic"] != nil {
				sawPanicStack = strings.Contains(fmt.Sprint(l["stack"]), "service_test.go")
			}
		}
		require.True(t, sawSecret, "the real error of an internal reply is logged")
		require.True(t, sawPanicStack, "a panic is logged with its stack")
	})
}

// gatherRequests reads agentq_requests_total by code and the count of
// agentq_request_seconds for one endpoint from reg.
func gatherRequests(t *testing.T, reg *prometheus.Registry, svc, endpoint string) (map[string]float64, uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	byCode := map[string]float64{}
	var hist uint64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["service"] != svc || labels["endpoint"] != endpoint {
				continue
			}
			switch mf.GetName() {
			case "agentq_requests_total":
				if v := m.GetCounter().GetValue(); v > 0 {
					byCode[labels["code"]] = v
				}
			case "agentq_request_seconds":
				hist = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return byCode, hist
}

// lengthyValidator fails every request with a long message over many lines.
type lengthyValidator struct{}

func (lengthyValidator) Validate(string, []byte) error {
	return errors.New(strings.Repeat("/field:\tgot ünïcode, want\nsomething else;\n", 100))
}

func TestValidationMessageIsOneBoundedLine(t *testing.T) {
	env := testenv.StartNATS(t)
	s := startService(t, env.NC, service.Options{Name: "long", Validator: lengthyValidator{}})
	require.NoError(t, s.AddEndpoint("long", "test.long", "any", func(context.Context, service.Request) (any, error) {
		t.Error("handler called for an invalid request")
		return nil, nil
	}))
	err := service.Call(context.Background(), env.NC, "test.long.acme", echoRequest{Query: "q"}, nil)
	var se *service.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, service.CodeBadRequest, se.Code)
	require.LessOrEqual(t, len(se.Message), 512)
	require.Greater(t, len(se.Message), 400)
	require.True(t, utf8.ValidString(se.Message))
	require.NotContains(t, se.Message, "\n")
	require.NotContains(t, se.Message, "\t")
	require.True(t, strings.HasPrefix(se.Message, "/field: got ünïcode, want something else; /field:"), se.Message)
	require.True(t, strings.HasSuffix(se.Message, "…"), se.Message)
}

func TestAddEndpointChecks(t *testing.T) {
	env := testenv.StartNATS(t)
	noop := func(context.Context, service.Request) (any, error) { return struct{}{}, nil }
	s := startService(t, env.NC, service.Options{Name: "checks", Validator: newSchemaValidator(t, echoSchema, echoSchemaDoc)})

	tests := []struct {
		name, endpoint, prefix, schema string
		h                              service.Handler
		wantErr                        string
	}{
		{"unknown schema", "a", "test.a", "agentq.nope.request.v1", noop, `no schema "agentq.nope.request.v1"`},
		{"wildcard prefix", "b", "test.*", echoSchema, noop, "must be literal tokens"},
		{"empty prefix", "c", "", echoSchema, noop, "must be literal tokens"},
		{"trailing dot", "d", "test.d.", echoSchema, noop, "must be literal tokens"},
		{"nil handler", "e", "test.e", echoSchema, nil, "nil handler"},
		{"bad endpoint name", "e.f", "test.e", echoSchema, noop, "invalid endpoint name"},
		{"ok", "g", "test.g", echoSchema, noop, ""},
		{"same name twice", "g", "test.g2", echoSchema, noop, "added twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.AddEndpoint(tc.endpoint, tc.prefix, tc.schema, tc.h)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestNewOptions(t *testing.T) {
	env := testenv.StartNATS(t)
	tests := []struct {
		name    string
		opts    service.Options
		wantErr string
	}{
		{"no name", service.Options{}, "Name is required"},
		{"negative timeout", service.Options{Name: "x", Timeout: -time.Second}, "Timeout -1s is negative"},
		{"negative concurrency", service.Options{Name: "x", Concurrency: -1}, "Concurrency -1 is negative"},
		{"bad name", service.Options{Name: "a.b"}, "service name"},
		{"bad version", service.Options{Name: "x", Version: "one"}, "version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := service.New(env.NC, tc.opts)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestQueueGroupSpreadsAndAnswersOnce(t *testing.T) {
	env := testenv.StartNATS(t)
	reg := prometheus.NewRegistry() // shared: both instances count into the same series

	var mu sync.Mutex
	served := map[string]map[string]int{} // instance -> request id -> calls
	for _, inst := range []string{"a", "b"} {
		nc, err := nats.Connect(env.URL)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		served[inst] = map[string]int{}
		s := startService(t, nc, service.Options{Name: "spread", Registry: reg})
		require.NoError(t, s.AddEndpoint("get", "test.get", "", func(_ context.Context, r service.Request) (any, error) {
			var req echoRequest
			if err := json.Unmarshal(r.Data, &req); err != nil {
				return nil, err
			}
			mu.Lock()
			served[inst][req.Query]++
			mu.Unlock()
			return map[string]string{"id": req.Query, "instance": inst}, nil
		}))
	}

	const n = 50
	replies := map[string]string{} // request id -> instance that answered
	for i := range n {
		id := fmt.Sprintf("r%02d", i)
		var resp map[string]string
		require.NoError(t, service.Call(context.Background(), env.NC, "test.get.acme", echoRequest{Query: id}, &resp))
		require.Equal(t, id, resp["id"])
		replies[id] = resp["instance"]
	}
	require.Len(t, replies, n)

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for inst, ids := range served {
		require.NotEmpty(t, ids, "instance %s served nothing", inst)
		for id, c := range ids {
			require.Equal(t, 1, c, "request %s handled %d times by %s", id, c, inst)
			require.Equal(t, inst, replies[id], "request %s answered by %s but handled by %s", id, replies[id], inst)
			total++
		}
	}
	require.Equal(t, n, total, "every request handled exactly once in all")

	got, hist := gatherRequests(t, reg, "spread", "get")
	require.Equal(t, map[string]float64{"ok": n}, got)
	require.Equal(t, uint64(n), hist)
}

func TestCall(t *testing.T) {
	env := testenv.StartNATS(t)
	var calls atomic.Int64
	s := startService(t, env.NC, service.Options{Name: "call", Validator: newSchemaValidator(t, echoSchema, echoSchemaDoc)})
	require.NoError(t, s.AddEndpoint("echo", "test.call", echoSchema, echoHandler(&calls, nil)))
	ctx := context.Background()

	t.Run("success decodes", func(t *testing.T) {
		var got echoReply
		require.NoError(t, service.Call(ctx, env.NC, "test.call.acme", echoRequest{Query: "hello"}, &got))
		require.Equal(t, echoReply{Tenant: "acme", Query: "hello"}, got)
	})
	t.Run("raw bytes are sent as they are", func(t *testing.T) {
		var got echoReply
		require.NoError(t, service.Call(ctx, env.NC, "test.call.acme", []byte(`{"query":"raw"}`), &got))
		require.Equal(t, echoReply{Tenant: "acme", Query: "raw"}, got)
	})
	t.Run("error reply is a *service.Error", func(t *testing.T) {
		var got echoReply
		err := service.Call(ctx, env.NC, "test.call.acme", echoRequest{Query: "p9", Mode: "not_found"}, &got)
		var se *service.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, service.Error{Code: service.CodeNotFound, Message: "prompt p9 not found"}, *se)
		require.Equal(t, echoReply{}, got, "resp untouched on error")
	})
	t.Run("no responders", func(t *testing.T) {
		err := service.Call(ctx, env.NC, "test.nobody.acme", echoRequest{Query: "q"}, nil)
		require.ErrorIs(t, err, nats.ErrNoResponders)
		require.True(t, bus.IsUnavailable(err))
		var se *service.Error
		require.False(t, errors.As(err, &se))
	})
	t.Run("foreign micro error keeps micro's parts", func(t *testing.T) {
		sub, err := env.NC.Subscribe("test.foreign", func(m *nats.Msg) {
			_ = m.RespondMsg(&nats.Msg{Header: nats.Header{micro.ErrorHeader: {"boom"}, micro.ErrorCodeHeader: {"500"}}})
		})
		require.NoError(t, err)
		defer sub.Unsubscribe()
		err = service.Call(ctx, env.NC, "test.foreign", struct{}{}, nil)
		var se *service.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, service.Error{Code: "500", Message: "boom"}, *se)
	})
}

func TestMicroVerbs(t *testing.T) {
	env := testenv.StartNATS(t)
	var calls atomic.Int64
	s := startService(t, env.NC, service.Options{Name: "verbs", Version: "1.2.3", Description: "test service"})
	require.NoError(t, s.AddEndpoint("echo", "test.verbs", "", echoHandler(&calls, nil)))
	ctx := context.Background()

	require.NoError(t, service.Call(ctx, env.NC, "test.verbs.acme", echoRequest{Query: "q"}, nil))
	err := service.Call(ctx, env.NC, "test.verbs.acme", echoRequest{Query: "q", Mode: "not_found"}, nil)
	require.Error(t, err)

	var info micro.Info
	require.NoError(t, service.Call(ctx, env.NC, "$SRV.INFO.verbs", nil, &info))
	require.Equal(t, "verbs", info.Name)
	require.Equal(t, "1.2.3", info.Version)
	require.Equal(t, "test service", info.Description)
	require.Len(t, info.Endpoints, 1)
	require.Equal(t, "echo", info.Endpoints[0].Name)
	require.Equal(t, "test.verbs.*", info.Endpoints[0].Subject)
	require.Equal(t, "verbs", info.Endpoints[0].QueueGroup)

	var stats micro.Stats
	require.NoError(t, service.Call(ctx, env.NC, "$SRV.STATS.verbs", nil, &stats))
	require.Len(t, stats.Endpoints, 1)
	require.Equal(t, 2, stats.Endpoints[0].NumRequests)
	require.JSONEq(t, `{"replies":{"ok":1,"not_found":1}}`, string(stats.Endpoints[0].Data))

	var ping micro.Ping
	require.NoError(t, service.Call(ctx, env.NC, "$SRV.PING.verbs", nil, &ping))
	require.Equal(t, "verbs", ping.Name)
}

func TestStopFinishesRequestsInHand(t *testing.T) {
	env := testenv.StartNATS(t)
	s, err := service.New(env.NC, service.Options{Name: "stop", Timeout: 5 * time.Second})
	require.NoError(t, err)
	started := make(chan struct{})
	release := make(chan struct{})
	require.NoError(t, s.AddEndpoint("slow", "test.stop", "", func(_ context.Context, r service.Request) (any, error) {
		close(started)
		<-release
		return echoReply{Tenant: r.Tenant, Query: "done"}, nil
	}))

	client, err := nats.Connect(env.URL)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	type result struct {
		reply echoReply
		err   error
	}
	res := make(chan result, 1)
	go func() {
		var r echoReply
		err := service.Call(context.Background(), client, "test.stop.acme", echoRequest{Query: "q"}, &r)
		res <- result{r, err}
	}()
	select {
	case <-started:
	case r := <-res:
		t.Fatalf("reply before the handler started: %+v", r)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop() }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a handler was still running")
	case <-time.After(100 * time.Millisecond): // Stop is waiting, as it should
	}
	close(release)
	require.NoError(t, <-stopped)
	r := <-res
	require.NoError(t, r.err)
	require.Equal(t, echoReply{Tenant: "acme", Query: "done"}, r.reply)

	err = service.Call(context.Background(), client, "test.stop.acme", echoRequest{Query: "q"}, nil)
	require.ErrorIs(t, err, nats.ErrNoResponders, "a stopped service no longer listens")
	require.NoError(t, s.Stop(), "Stop twice is a no-op")
}

func TestConcurrencyBound(t *testing.T) {
	env := testenv.StartNATS(t)
	const limit, n = 2, 4
	var running, peak atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	s := startService(t, env.NC, service.Options{Name: "conc", Concurrency: limit, Timeout: 10 * time.Second})
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before Stop, also when the test fails early
	require.NoError(t, s.AddEndpoint("hold", "test.hold", "", func(_ context.Context, r service.Request) (any, error) {
		now := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		<-release
		return echoReply{Tenant: r.Tenant, Query: "held"}, nil
	}))

	client, err := nats.Connect(env.URL)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	errs := make(chan error, n)
	for range n {
		go func() {
			var r echoReply
			err := service.Call(context.Background(), client, "test.hold.acme", echoRequest{Query: "q"}, &r)
			if err == nil && r.Query != "held" {
				err = fmt.Errorf("reply %+v", r)
			}
			errs <- err
		}()
	}
	// Handlers run side by side, up to the limit...
	testenv.Eventually(t, 5*time.Second, func() bool { return running.Load() >= limit }, "%d handlers running, want %d", running.Load(), limit)
	// ...and no further: a window in which an unbounded service would
	// have started the other requests.
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, int64(limit), running.Load())
	once.Do(func() { close(release) })
	for range n {
		require.NoError(t, <-errs)
	}
	require.Equal(t, int64(limit), peak.Load())
}

// micro calls the stats handler with its own lock held; adding endpoints
// while STATS requests arrive must not deadlock.
func TestStatsWhileAddingEndpoints(t *testing.T) {
	env := testenv.StartNATS(t)
	s := startService(t, env.NC, service.Options{Name: "busy"})
	client, err := nats.Connect(env.URL)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	// The service's subscriptions reach the server over its own
	// connection: wait until this client's STATS requests find them.
	testenv.Eventually(t, 5*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return service.Call(ctx, client, "$SRV.STATS.busy", nil, nil) == nil
	}, "the service answers STATS")

	stop := make(chan struct{})
	statsDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				statsDone <- nil
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := service.Call(ctx, client, "$SRV.STATS.busy", nil, nil)
			cancel()
			if err != nil {
				statsDone <- err
				return
			}
		}
	}()
	added := make(chan error, 1)
	go func() {
		noop := func(context.Context, service.Request) (any, error) { return struct{}{}, nil }
		for i := range 100 {
			if err := s.AddEndpoint(fmt.Sprintf("e%d", i), fmt.Sprintf("test.busy%d", i), "", noop); err != nil {
				added <- err
				return
			}
		}
		added <- nil
	}()
	select {
	case err := <-added:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("AddEndpoint blocked: deadlock with the STATS handler")
	}
	close(stop)
	require.NoError(t, <-statsDone)
}
