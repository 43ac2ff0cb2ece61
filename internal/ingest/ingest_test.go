package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/ingest"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

const executed = "agentq.tool.executed.v1"

// stack is an endpoint on a real embedded NATS server, with one token for
// its own tenant.
type stack struct {
	nats   *testenv.NATS
	nc     *nats.Conn // the endpoint's
	url    string
	tenant string
	token  string
	log    *lockedBuffer
}

// lockedBuffer is a log the endpoint's goroutines may write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func start(t testing.TB, opts ...func(*ingest.Options)) *stack {
	t.Helper()
	n := testenv.StartNATS(t)
	return startOn(t, n, opts...)
}

func startOn(t testing.TB, n *testenv.NATS, opts ...func(*ingest.Options)) *stack {
	t.Helper()
	s := &stack{nats: n, tenant: testenv.Tenant(t), log: &lockedBuffer{}}
	token, line, err := auth.New(s.tenant)
	require.NoError(t, err)
	s.token = token
	other, otherLine, err := auth.New("someone-else")
	require.NoError(t, err)
	_ = other
	tokens, err := auth.Parse(strings.NewReader(line + "\n" + otherLine))
	require.NoError(t, err)
	reg, err := schemas.Load()
	require.NoError(t, err)
	log := zerolog.New(s.log).Level(zerolog.DebugLevel)
	s.nc, err = ingest.Connect(n.URL, "test-ingest", log)
	require.NoError(t, err)
	t.Cleanup(s.nc.Close)
	o := ingest.Options{MaxPayload: 1 << 20, MaxBody: 16 << 20, MaxBatch: 1000, AckTimeout: 5 * time.Second, Log: log}
	for _, f := range opts {
		f(&o)
	}
	h, err := ingest.New(s.nc, reg, tokens, o)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s.url = srv.URL + ingest.Path
	t.Cleanup(func() { require.NotContains(t, s.log.String(), s.token, "a token in the log") })
	return s
}

// newEvent is a valid tool.executed of the stack's tenant; tenant "" leaves
// tenantid unset (the token's tenant is then used).
func newEvent(t *testing.T, tenant string, data any) event.Event {
	t.Helper()
	ev := event.New()
	ev.SetID(uuid.NewString())
	ev.SetSource("test-agent")
	ev.SetType(executed)
	if tenant != "" {
		ev.SetExtension(bus.ExtTenant, tenant)
	}
	if data == nil {
		data = map[string]any{"tool_name": "web_search", "success": true, "latency_ms": 120}
	}
	require.NoError(t, ev.SetData("application/json", data))
	return ev
}

func (s *stack) binary(t *testing.T, ev event.Event) *http.Request {
	t.Helper()
	req, err := cehttp.NewHTTPRequestFromEvent(context.Background(), s.url, ev) // binary mode
	require.NoError(t, err)
	return s.auth(req)
}

func (s *stack) structured(t *testing.T, ev event.Event) *http.Request {
	t.Helper()
	body, err := json.Marshal(ev)
	require.NoError(t, err)
	return s.raw(t, "application/cloudevents+json", body)
}

func (s *stack) batch(t *testing.T, evs ...event.Event) *http.Request {
	t.Helper()
	req, err := cehttp.NewHTTPRequestFromEvents(context.Background(), s.url, evs)
	require.NoError(t, err)
	return s.auth(req)
}

func (s *stack) raw(t *testing.T, contentType string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	return s.auth(req)
}

func (s *stack) auth(req *http.Request) *http.Request {
	req.Header.Set("Authorization", "Bearer "+s.token)
	return req
}

// answer is a response as the client reads it.
type answer struct {
	code int
	resp ingest.Response
	err  ingest.ErrorBody
	hdr  http.Header
	body string
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	// The body may be sent twice (a retry): keep it.
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		require.NoError(t, err)
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	a := answer{code: res.StatusCode, hdr: res.Header, body: string(raw)}
	require.Equal(t, "application/json", res.Header.Get("Content-Type"), a.body)
	if strings.Contains(a.body, `"results"`) {
		require.NoError(t, json.Unmarshal(raw, &a.resp), a.body)
	} else {
		require.NoError(t, json.Unmarshal(raw, &a.err), a.body)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	return a
}

// stored returns every message of stream AGENTQ, by sequence.
func stored(t *testing.T, js jetstream.JetStream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		require.NoError(t, err)
		out = append(out, m)
	}
	return out
}

// Every content mode lands the event as agentq publish would have: on its
// subject, with the tenant-scoped Nats-Msg-Id, the token's tenant, its
// data unchanged, and the attributes agentq sets when the agent did not.
func TestContentModes(t *testing.T) {
	s := start(t)
	explicit := newEvent(t, s.tenant, nil)
	explicit.SetTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	explicit.SetSubject("run-42")
	cases := []struct {
		name string
		evs  []event.Event
		req  func([]event.Event) *http.Request
	}{
		{"binary", []event.Event{newEvent(t, "", nil)}, func(e []event.Event) *http.Request { return s.binary(t, e[0]) }},
		{"binary with tenantid", []event.Event{explicit}, func(e []event.Event) *http.Request { return s.binary(t, e[0]) }},
		{"structured", []event.Event{newEvent(t, "", map[string]any{"tool_name": "pdf_extract", "success": false, "error_class": "timeout"})},
			func(e []event.Event) *http.Request { return s.structured(t, e[0]) }},
		{"batch", []event.Event{newEvent(t, "", nil), newEvent(t, s.tenant, nil), newEvent(t, "", map[string]any{"tool_name": "x", "success": true})},
			func(e []event.Event) *http.Request { return s.batch(t, e...) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now().UTC().Add(-time.Second)
			a := do(t, tc.req(tc.evs))
			require.Equal(t, http.StatusAccepted, a.code, a.body)
			require.Equal(t, len(tc.evs), a.resp.Accepted)
			require.Zero(t, a.resp.Rejected+a.resp.Duplicate+a.resp.Unavailable+a.resp.Unconfirmed)
			require.Len(t, a.resp.Results, len(tc.evs))
			st, err := s.nats.JS.Stream(context.Background(), bus.StreamName)
			require.NoError(t, err)
			for i, ev := range tc.evs {
				r := a.resp.Results[i]
				require.Equal(t, ingest.Result{Index: i, ID: ev.ID(), Type: executed, Status: ingest.StatusAccepted, Stream: bus.StreamName, Seq: r.Seq}, r)
				m, err := st.GetMsg(context.Background(), r.Seq)
				require.NoError(t, err)
				require.Equal(t, "tool.executed."+s.tenant, m.Subject)
				require.Equal(t, bus.MsgID(s.tenant, ev.ID()), m.Header.Get("Nats-Msg-Id"))
				got, err := bus.Decode(m.Header, m.Data)
				require.NoError(t, err)
				require.Equal(t, ev.ID(), got.ID())
				require.Equal(t, "test-agent", got.Source())
				require.Equal(t, s.tenant, bus.Tenant(got))
				require.Equal(t, "application/json", got.DataContentType())
				require.Equal(t, bus.SchemaURL(executed), got.DataSchema())
				require.JSONEq(t, string(ev.Data()), string(got.Data()))
				require.Equal(t, ev.Subject(), got.Subject())
				if ev.Time().IsZero() {
					require.WithinRange(t, got.Time(), before, time.Now().UTC().Add(time.Second))
				} else {
					require.True(t, ev.Time().Equal(got.Time()), "time %s kept, got %s", ev.Time(), got.Time())
				}
			}
		})
	}
	require.Len(t, stored(t, s.nats.JS), 6)
}

// A batch with invalid members: each is refused with its reason, the valid
// ones are published all the same, and the answer (400) says both.
func TestBatchWithInvalidMembers(t *testing.T) {
	s := start(t)
	good1, good2 := newEvent(t, "", nil), newEvent(t, s.tenant, nil)
	badSchema := newEvent(t, "", map[string]any{"success": "yes"})
	otherTenant := newEvent(t, "someone-else", nil)
	result := newEvent(t, "", map[string]any{"target": "tool", "tool_name": "x", "quality_score": 1, "success_rate": 1, "total_calls": 1})
	result.SetType("agentq.quality.changed.v1")
	unknown := newEvent(t, "", nil)
	unknown.SetType("agentq.tool.exploded.v1")
	notJSON := newEvent(t, "", nil)
	notJSON.SetDataContentType("text/plain")
	members := []event.Event{good1, badSchema, otherTenant, result, unknown, notJSON, good2}
	body, err := json.Marshal(members)
	require.NoError(t, err)
	// A member that is not a CloudEvent at all, and one without an id.
	body = append(body[:len(body)-1], []byte(`,42,{"specversion":"1.0","source":"x","type":"agentq.tool.executed.v1","data":{}}]`)...)

	a := do(t, s.raw(t, "application/cloudevents-batch+json", body))
	require.Equal(t, http.StatusBadRequest, a.code, a.body)
	require.Equal(t, 2, a.resp.Accepted)
	require.Equal(t, 7, a.resp.Rejected)
	require.Equal(t, "7 of 9 events refused (see their errors); the other 2 stored all the same.", a.resp.Message)
	want := []struct{ status, reason, err string }{
		{ingest.StatusAccepted, "", ""},
		{ingest.StatusRejected, ingest.ReasonSchema, "data does not match agentq.tool.executed.v1: /success: got string, want boolean; /tool_name: missing"},
		{ingest.StatusRejected, ingest.ReasonTenantMismatch, `tenantid "someone-else" is not the tenant of the token (` + s.tenant + `)`},
		{ingest.StatusRejected, ingest.ReasonNotInput, "agentq.quality.changed.v1 is a result agentq publishes, not an input"},
		{ingest.StatusRejected, ingest.ReasonUnknownType, `type "agentq.tool.exploded.v1" is not an agentq input event`},
		{ingest.StatusRejected, ingest.ReasonDecode, `data must be JSON, not "text/plain"`},
		{ingest.StatusAccepted, "", ""},
		{ingest.StatusRejected, ingest.ReasonDecode, "not a CloudEvent"},
		{ingest.StatusRejected, ingest.ReasonDecode, "id"},
	}
	require.Len(t, a.resp.Results, len(want))
	for i, w := range want {
		r := a.resp.Results[i]
		require.Equal(t, i, r.Index)
		require.Equal(t, w.status, r.Status, "member %d: %+v", i, r)
		require.Equal(t, w.reason, r.Reason, "member %d: %+v", i, r)
		require.Contains(t, r.Error, w.err, "member %d", i)
		if i < len(members) {
			require.Equal(t, members[i].ID(), r.ID)
		}
	}
	msgs := stored(t, s.nats.JS)
	require.Len(t, msgs, 2)
	require.Equal(t, bus.MsgID(s.tenant, good1.ID()), msgs[0].Header.Get("Nats-Msg-Id"))
	require.Equal(t, bus.MsgID(s.tenant, good2.ID()), msgs[1].Header.Get("Nats-Msg-Id"))
	require.Equal(t, []uint64{a.resp.Results[0].Seq, a.resp.Results[6].Seq}, []uint64{msgs[0].Sequence, msgs[1].Sequence})

	// A single event of another tenant: refused, nothing stored.
	a = do(t, s.structured(t, newEvent(t, "someone-else", nil)))
	require.Equal(t, http.StatusBadRequest, a.code, a.body)
	require.Equal(t, ingest.ReasonTenantMismatch, a.resp.Results[0].Reason)
	require.Len(t, stored(t, s.nats.JS), 2)
}

// No token, a malformed header, an unknown token: 401, nothing read or
// published; the token of another tenant publishes for that tenant only.
func TestAuthentication(t *testing.T) {
	s := start(t)
	ev := newEvent(t, "", nil)
	for _, tc := range []struct{ name, header, want string }{
		{"none", "", "no bearer token"},
		{"not bearer", "Basic " + s.token, "no bearer token"},
		{"unknown", "Bearer aq_notatokenanyoneknows", "unknown bearer token"},
		{"empty", "Bearer ", "no bearer token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := s.structured(t, ev)
			req.Header.Del("Authorization")
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			a := do(t, req)
			require.Equal(t, http.StatusUnauthorized, a.code, a.body)
			require.Equal(t, `Bearer realm="agentq"`, a.hdr.Get("WWW-Authenticate"))
			require.Equal(t, "unauthorized", a.err.Code)
			require.Contains(t, a.err.Error, tc.want)
			require.NotContains(t, a.body, s.token)
			require.NotContains(t, a.body, "aq_notatokenanyoneknows")
		})
	}
	require.Empty(t, stored(t, s.nats.JS))
}

// A retried POST has no second effect: the same events are reported
// duplicate, with the sequence of the stored ones, and stored once.
func TestRetriedPost(t *testing.T) {
	s := start(t)
	single := s.structured(t, newEvent(t, "", nil))
	first := do(t, single)
	require.Equal(t, http.StatusAccepted, first.code, first.body)
	again := do(t, single)
	require.Equal(t, http.StatusAccepted, again.code, again.body)
	require.Equal(t, 1, again.resp.Duplicate)
	require.Equal(t, ingest.StatusDuplicate, again.resp.Results[0].Status)
	require.Equal(t, first.resp.Results[0].Seq, again.resp.Results[0].Seq)
	require.Equal(t, "1 event already stored (same tenant and id): nothing stored again.", again.resp.Message)

	evs := []event.Event{newEvent(t, "", nil), newEvent(t, "", nil), newEvent(t, "", nil)}
	batch := s.batch(t, evs...)
	first = do(t, batch)
	require.Equal(t, 3, first.resp.Accepted, first.body)
	// The retry adds one new event: only that one is stored.
	evs = append(evs, newEvent(t, "", nil))
	again = do(t, s.batch(t, evs...))
	require.Equal(t, http.StatusAccepted, again.code, again.body)
	require.Equal(t, 1, again.resp.Accepted)
	require.Equal(t, 3, again.resp.Duplicate)
	require.Equal(t, "1 event stored; 3 already stored (same tenant and id), not stored again.", again.resp.Message)
	for i := range 3 {
		require.Equal(t, ingest.StatusDuplicate, again.resp.Results[i].Status)
		require.Equal(t, first.resp.Results[i].Seq, again.resp.Results[i].Seq)
	}
	require.Len(t, stored(t, s.nats.JS), 5)
}

// Bodies and batches over their limits are refused whole (413); an event
// whose data is over AGENTQ_MAX_PAYLOAD is refused alone.
func TestLimits(t *testing.T) {
	s := start(t, func(o *ingest.Options) { o.MaxPayload, o.MaxBody, o.MaxBatch = 2048, 200<<10, 3 })
	big := func(n int) event.Event {
		return newEvent(t, "", map[string]any{"tool_name": "x", "success": true, "output": strings.Repeat("a", n)})
	}
	cases := []struct {
		name   string
		req    *http.Request
		code   int
		reason string // of the first result; "" for a refusal of the whole request
	}{
		{"single event's data over the payload limit", s.structured(t, big(3000)), http.StatusRequestEntityTooLarge, ingest.ReasonOversize},
		{"single event's body over its limit", s.binary(t, big(100<<10)), http.StatusRequestEntityTooLarge, ""},
		{"batch over its event limit", s.batch(t, big(1), big(1), big(1), big(1)), http.StatusRequestEntityTooLarge, ""},
		{"batch over the body limit", s.batch(t, big(150<<10), big(150<<10)), http.StatusRequestEntityTooLarge, ""},
		{"batch with an oversized member", s.batch(t, big(3000), big(10)), http.StatusBadRequest, ingest.ReasonOversize},
		{"batch of oversized members", s.batch(t, big(3000), big(4000)), http.StatusRequestEntityTooLarge, ingest.ReasonOversize},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, tc.req)
			require.Equal(t, tc.code, a.code, a.body)
			if tc.reason == "" {
				require.Equal(t, "too_large", a.err.Code)
				return
			}
			require.Equal(t, tc.reason, a.resp.Results[0].Reason)
			require.Contains(t, a.resp.Results[0].Error, "over the 2048-byte limit")
		})
	}
	// Only the small member of the last batch was stored.
	require.Len(t, stored(t, s.nats.JS), 1)
}

// What is not a CloudEvent request is refused as a whole, and the
// CloudEvents webhook handshake is answered.
func TestRequestShapes(t *testing.T) {
	s := start(t)
	a := do(t, s.raw(t, "application/json", []byte(`{"tool_name":"x","success":true}`)))
	require.Equal(t, http.StatusUnsupportedMediaType, a.code, a.body)
	require.Contains(t, a.err.Error, "binary mode (ce-specversion")
	for _, body := range []string{`{"not":"an array"}`, `[`, `[] []`, `[]`} {
		a = do(t, s.raw(t, "application/cloudevents-batch+json", []byte(body)))
		require.Equal(t, http.StatusBadRequest, a.code, "%s: %s", body, a.body)
		require.Equal(t, "bad_request", a.err.Code)
	}
	a = do(t, s.raw(t, "application/cloudevents+json", []byte(`{"specversion":"0.3","id":"1","source":"x","type":"agentq.tool.executed.v1"}`)))
	require.Equal(t, http.StatusBadRequest, a.code, a.body)
	require.Contains(t, a.resp.Results[0].Error, "CloudEvents 1.0 only")

	req, err := http.NewRequest(http.MethodOptions, s.url, nil)
	require.NoError(t, err)
	req.Header.Set("WebHook-Request-Origin", "eventemitter.example.com")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "eventemitter.example.com", res.Header.Get("WebHook-Allowed-Origin"))

	// A browser's preflight, and the answer it may then read.
	req, err = http.NewRequest(http.MethodOptions, s.url, nil)
	require.NoError(t, err)
	req.Header.Set("Origin", "https://agent.example.com")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, ce-id")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "*", res.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "POST", res.Header.Get("Access-Control-Allow-Methods"))
	require.Equal(t, "authorization, content-type, ce-id", res.Header.Get("Access-Control-Allow-Headers"))
	require.Equal(t, "*", a.hdr.Get("Access-Control-Allow-Origin"))

	res, err = http.Get(s.url)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
	require.Empty(t, stored(t, s.nats.JS))
}

// JetStream without the stream: 503 with Retry-After, nothing stored and
// each event saying so; the same request after the stream is back stores
// every event once.
func TestStreamRemoved(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	require.NoError(t, s.nats.JS.DeleteStream(ctx, bus.StreamName))
	req := s.batch(t, newEvent(t, "", nil), newEvent(t, "", nil), newEvent(t, "", nil))
	a := do(t, req)
	require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	require.Equal(t, "2", a.hdr.Get("Retry-After"))
	require.Equal(t, 3, a.resp.Unavailable)
	require.Contains(t, a.resp.Message, "JetStream did not take 3 events of 3 (3 not stored, 0 unconfirmed); 0 stored.")
	for _, r := range a.resp.Results {
		require.Equal(t, ingest.StatusUnavailable, r.Status)
		require.Contains(t, r.Error, "not stored")
	}

	require.NoError(t, bus.EnsureStreams(ctx, s.nats.JS, bus.StreamOptions{}))
	a = do(t, req)
	require.Equal(t, http.StatusAccepted, a.code, a.body)
	require.Equal(t, 3, a.resp.Accepted)
	require.Len(t, stored(t, s.nats.JS), 3)
}

// Part of a batch taken and part not: the answer says which went in, and
// sending the whole batch again stores the rest and nothing twice.
func TestPartlyStored(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	// The stream stops taking feedback.
	st, err := s.nats.JS.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	cfg.Subjects = slices.DeleteFunc(slices.Clone(cfg.Subjects), func(s string) bool { return s == "feedback.>" })
	_, err = s.nats.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	feedback := newEvent(t, "", map[string]any{"target": "tool", "tool_name": "web_search", "rating": 0.9})
	feedback.SetType("agentq.feedback.submitted.v1")
	req := s.batch(t, newEvent(t, "", nil), feedback, newEvent(t, "", nil))
	a := do(t, req)
	require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	require.Equal(t, []string{ingest.StatusAccepted, ingest.StatusUnavailable, ingest.StatusAccepted},
		[]string{a.resp.Results[0].Status, a.resp.Results[1].Status, a.resp.Results[2].Status})
	require.Contains(t, a.resp.Message, "JetStream did not take 1 event of 3 (1 not stored, 0 unconfirmed); 2 stored.")
	require.Len(t, stored(t, s.nats.JS), 2)

	require.NoError(t, bus.EnsureStreams(ctx, s.nats.JS, bus.StreamOptions{}))
	again := do(t, req)
	require.Equal(t, http.StatusAccepted, again.code, again.body)
	require.Equal(t, []string{ingest.StatusDuplicate, ingest.StatusAccepted, ingest.StatusDuplicate},
		[]string{again.resp.Results[0].Status, again.resp.Results[1].Status, again.resp.Results[2].Status})
	msgs := stored(t, s.nats.JS)
	require.Len(t, msgs, 3)
	require.Equal(t, "feedback.submitted."+s.tenant, msgs[2].Subject)
}

// Something takes the events but never acknowledges them: after the ack
// timeout they are unconfirmed (maybe stored), with a 503.
func TestUnconfirmed(t *testing.T) {
	s := start(t, func(o *ingest.Options) { o.AckTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	require.NoError(t, s.nats.JS.DeleteStream(ctx, bus.StreamName))
	seen := make(chan *nats.Msg, 4)
	sub, err := s.nats.NC.ChanSubscribe("tool.executed."+s.tenant, seen)
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, s.nats.NC.Flush())

	ev := newEvent(t, "", nil)
	a := do(t, s.binary(t, ev))
	require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	require.Equal(t, 1, a.resp.Unconfirmed)
	require.Equal(t, ingest.StatusUnconfirmed, a.resp.Results[0].Status)
	require.Contains(t, a.resp.Results[0].Error, "it may be stored")
	require.Equal(t, bus.MsgID(s.tenant, ev.ID()), (<-seen).Header.Get("Nats-Msg-Id"))
}

// The NATS server down: 503 at once, nothing buffered to be stored behind
// the client's back; once it is back, the same request is stored once.
func TestNATSDown(t *testing.T) {
	dir := t.TempDir()
	n := testenv.StartNATSIn(t, dir)
	s := startOn(t, n)
	port := regexp.MustCompile(`:(\d+)$`).FindStringSubmatch(n.URL)[1]
	healthz := strings.TrimSuffix(s.url, ingest.Path) + "/healthz"

	n.Server.Shutdown()
	testenv.Eventually(t, 5*time.Second, func() bool { return !s.nc.IsConnected() }, "the endpoint sees NATS gone")
	res, err := http.Get(healthz)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode)

	req := s.batch(t, newEvent(t, "", nil), newEvent(t, "", nil))
	a := do(t, req)
	require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	require.Equal(t, 2, a.resp.Unavailable)
	require.Contains(t, a.resp.Results[0].Error, "NATS is not connected")

	srv, err := broker.Start(broker.Options{Port: atoi(t, port), StoreDir: dir, Log: zerolog.Nop()})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	testenv.Eventually(t, 15*time.Second, func() bool { return s.nc.IsConnected() }, "the endpoint reconnects")
	a = do(t, req)
	require.Equal(t, http.StatusAccepted, a.code, a.body)
	require.Equal(t, 2, a.resp.Accepted)

	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.Len(t, stored(t, js), 2)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// Operator commands need a token of scope operator: with an agent's token
// each is refused (forbidden; 403 when every event of the request is one),
// and the other events of a batch are stored all the same.
func TestOperatorCommands(t *testing.T) {
	s := start(t)
	opToken, opLine, err := auth.NewScoped(s.tenant, auth.ScopeOperator)
	require.NoError(t, err)
	command := func(typ string, data map[string]any) event.Event {
		ev := newEvent(t, "", data)
		ev.SetType(typ)
		return ev
	}
	released := func() event.Event {
		return command("agentq.tool.released.v1", map[string]any{"tool_name": "geo", "reason": "fixed"})
	}
	activated := func() event.Event {
		return command("agentq.prompt.activated.v1", map[string]any{"prompt_id": "p", "version": 2, "label": "production"})
	}
	cancelled := func() event.Event {
		return command("agentq.experiment.cancelled.v1", map[string]any{"experiment_id": "e-1"})
	}
	forbidden := func(t *testing.T, r ingest.Result, typ string) {
		require.Equal(t, ingest.StatusRejected, r.Status)
		require.Equal(t, ingest.ReasonForbidden, r.Reason)
		require.Equal(t, typ+" is an operator command, and this token may not send it: an operator's token may (its line in the token file ends with operator; agentq token new --operator makes one)", r.Error)
	}

	for name, req := range map[string]*http.Request{
		"binary":     s.binary(t, released()),
		"structured": s.structured(t, activated()),
		"batch":      s.batch(t, cancelled(), released()),
	} {
		t.Run("agent token, "+name, func(t *testing.T) {
			a := do(t, req)
			require.Equal(t, http.StatusForbidden, a.code, a.body)
			require.Zero(t, a.resp.Accepted)
			for _, r := range a.resp.Results {
				forbidden(t, r, r.Type)
			}
			require.Contains(t, a.resp.Message, "nothing stored")
		})
	}
	require.Empty(t, stored(t, s.nats.JS))

	mixed := []event.Event{newEvent(t, "", nil), released(), activated(), cancelled()}
	a := do(t, s.batch(t, mixed...))
	require.Equal(t, http.StatusBadRequest, a.code, a.body)
	require.Equal(t, 1, a.resp.Accepted)
	require.Equal(t, 3, a.resp.Rejected)
	require.Equal(t, ingest.StatusAccepted, a.resp.Results[0].Status)
	for i, typ := range []string{"agentq.tool.released.v1", "agentq.prompt.activated.v1", "agentq.experiment.cancelled.v1"} {
		forbidden(t, a.resp.Results[i+1], typ)
	}
	require.Len(t, stored(t, s.nats.JS), 1)

	// The operator's token: the same batch is stored whole.
	tokens, err := auth.Parse(strings.NewReader(opLine))
	require.NoError(t, err)
	reg, err := schemas.Load()
	require.NoError(t, err)
	h, err := ingest.New(s.nc, reg, tokens, ingest.Options{MaxPayload: 1 << 20, MaxBody: 1 << 20, MaxBatch: 10, AckTimeout: 5 * time.Second})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	req := s.batch(t, mixed...)
	req.URL, err = req.URL.Parse(srv.URL + ingest.Path)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+opToken)
	a = do(t, req)
	require.Equal(t, http.StatusAccepted, a.code, a.body)
	require.Equal(t, 1, a.resp.Duplicate)
	require.Equal(t, 3, a.resp.Accepted)
	msgs := stored(t, s.nats.JS)
	require.Len(t, msgs, 4)
	require.Equal(t, []string{"tool.released." + s.tenant, "prompt.activated." + s.tenant, "experiment.cancelled." + s.tenant},
		[]string{msgs[1].Subject, msgs[2].Subject, msgs[3].Subject})
}

// The W3C trace context of a request reaches the stream with its events,
// as the CloudEvents distributed tracing extension (ce-traceparent and
// ce-tracestate on NATS): an event's own wins over the request's headers,
// which fill the events that have none; an invalid or ambiguous header is
// ignored.
func TestTraceContext(t *testing.T) {
	s := start(t)
	const (
		hdrParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		hdrState  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
		ownParent = "00-0af7651916cd43dd8448eb211c80319c-b9c7c989f97918e1-01"
	)
	withOwn := func() event.Event {
		ev := newEvent(t, "", nil)
		ev.SetExtension("traceparent", ownParent)
		return ev
	}
	type want struct{ parent, state string }
	cases := []struct {
		name    string
		evs     []event.Event
		req     func([]event.Event) *http.Request
		headers map[string][]string
		want    []want
	}{
		{"binary, from the headers", []event.Event{newEvent(t, "", nil)}, func(e []event.Event) *http.Request { return s.binary(t, e[0]) },
			map[string][]string{"traceparent": {hdrParent}, "tracestate": {"rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE"}}, []want{{hdrParent, hdrState}}},
		{"binary, its own ce-traceparent wins", []event.Event{withOwn()}, func(e []event.Event) *http.Request { return s.binary(t, e[0]) },
			map[string][]string{"traceparent": {hdrParent}, "tracestate": {hdrState}}, []want{{ownParent, ""}}},
		{"structured, its own", []event.Event{withOwn()}, func(e []event.Event) *http.Request { return s.structured(t, e[0]) },
			nil, []want{{ownParent, ""}}},
		{"batch, the headers fill what has none", []event.Event{withOwn(), newEvent(t, "", nil)}, func(e []event.Event) *http.Request { return s.batch(t, e...) },
			map[string][]string{"traceparent": {hdrParent}, "tracestate": {hdrState}}, []want{{ownParent, ""}, {hdrParent, hdrState}}},
		{"an invalid traceparent header", []event.Event{newEvent(t, "", nil)}, func(e []event.Event) *http.Request { return s.binary(t, e[0]) },
			map[string][]string{"traceparent": {"00-" + strings.Repeat("0", 32) + "-00f067aa0ba902b7-01"}, "tracestate": {hdrState}}, []want{{}}},
		{"two traceparent headers", []event.Event{newEvent(t, "", nil)}, func(e []event.Event) *http.Request { return s.structured(t, e[0]) },
			map[string][]string{"traceparent": {hdrParent, ownParent}}, []want{{}}},
		{"none", []event.Event{newEvent(t, "", nil)}, func(e []event.Event) *http.Request { return s.binary(t, e[0]) }, nil, []want{{}}},
	}
	st, err := s.nats.JS.Stream(context.Background(), bus.StreamName)
	require.NoError(t, err)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req(tc.evs)
			for k, vs := range tc.headers {
				for _, v := range vs {
					req.Header.Add(k, v)
				}
			}
			a := do(t, req)
			require.Equal(t, http.StatusAccepted, a.code, a.body)
			for i, w := range tc.want {
				m, err := st.GetMsg(context.Background(), a.resp.Results[i].Seq)
				require.NoError(t, err)
				require.Equal(t, w.parent, m.Header.Get("ce-traceparent"), "member %d", i)
				require.Equal(t, w.state, m.Header.Get("ce-tracestate"), "member %d", i)
				got, err := bus.Decode(m.Header, m.Data)
				require.NoError(t, err)
				tc := bus.Trace(got)
				parent, state := tc.Parent, tc.State
				require.Equal(t, w, want{parent, state}, "member %d", i)
			}
		})
	}
}

// At most MaxInFlight requests are served at once: one more is answered
// 503 with Retry-After before its body is read, and a slot freed by an
// answered request takes the next one.
func TestMaxInFlight(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := start(t, func(o *ingest.Options) { o.MaxInFlight, o.Registerer = 2, reg })
	inFlight := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "agentq_ingest_requests_in_flight" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	// Two batches whose bodies are still coming: they hold both slots.
	type slow struct {
		w    *io.PipeWriter
		done chan answer
	}
	hold := func() slow {
		pr, pw := io.Pipe()
		req, err := http.NewRequest(http.MethodPost, s.url, pr)
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/cloudevents-batch+json")
		s.auth(req)
		sl := slow{pw, make(chan answer, 1)}
		go func() { sl.done <- doRaw(t, req) }()
		// Enough to push the headers out of the client's buffer.
		_, err = pw.Write([]byte("[" + strings.Repeat(" ", 8<<10)))
		require.NoError(t, err)
		return sl
	}
	first, second := hold(), hold()
	testenv.Eventually(t, 10*time.Second, func() bool { return inFlight() == 2 }, "both requests in flight")

	ev := newEvent(t, "", nil)
	a := do(t, s.structured(t, ev))
	require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	require.Equal(t, "1", a.hdr.Get("Retry-After"))
	require.Equal(t, "overloaded", a.err.Code)
	require.Equal(t, "the endpoint is serving 2 requests already, its limit: nothing was read or stored. Send the request again after Retry-After", a.err.Error)
	require.Empty(t, stored(t, s.nats.JS))

	// The first ends: its event is stored, and its slot takes the retry.
	body, err := json.Marshal(newEvent(t, "", nil))
	require.NoError(t, err)
	_, err = first.w.Write(append(body, ']'))
	require.NoError(t, err)
	require.NoError(t, first.w.Close())
	got := <-first.done
	require.Equal(t, http.StatusAccepted, got.code, got.body)
	a = do(t, s.structured(t, ev))
	require.Equal(t, http.StatusAccepted, a.code, a.body)
	require.Equal(t, ingest.StatusAccepted, a.resp.Results[0].Status)

	// A body that stops half-way frees its slot too.
	require.NoError(t, second.w.CloseWithError(io.ErrUnexpectedEOF))
	<-second.done
	testenv.Eventually(t, 10*time.Second, func() bool { return inFlight() == 0 }, "no request in flight")
	require.Len(t, stored(t, s.nats.JS), 2)
}

// doRaw is do for a request whose body streams: the answer, or a zero
// answer when the transport failed (the body was cut).
func doRaw(t *testing.T, req *http.Request) answer {
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return answer{code: res.StatusCode, hdr: res.Header, body: string(raw)}
}

// InputTypes are exactly the inputs of the published contract.
func TestInputTypesAreTheContractsInputs(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "schemas", "README.md"))
	require.NoError(t, err)
	text := string(raw)
	start := strings.Index(text, "Inputs, published by agents and operators")
	end := strings.Index(text, "Results, published by agentq")
	require.True(t, start >= 0 && end > start)
	var inputs []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(agentq\\.[a-z_.0-9]+)` \\|").FindAllStringSubmatch(text[start:end], -1) {
		inputs = append(inputs, m[1])
	}
	require.ElementsMatch(t, inputs, ingest.InputTypes)
	reg, err := schemas.Load()
	require.NoError(t, err)
	for _, typ := range ingest.InputTypes {
		require.True(t, reg.Has(typ), typ)
	}
}

// BenchmarkPostBatch posts batches of 100 tool.executed events and waits
// for each answer: CPU per event of the endpoint and the embedded server
// (`agentq bench ingest` measures it against its anchors).
func BenchmarkPostBatch(b *testing.B) {
	s := start(b)
	out := strings.Repeat("Result excerpt of a web search, as agents report it. ", 4)
	bodies := make([][]byte, b.N)
	for i := range bodies {
		var batch []map[string]any
		for j := range 100 {
			batch = append(batch, map[string]any{"specversion": "1.0", "id": uuid.NewString(), "source": "bench", "type": executed,
				"data": map[string]any{"tool_name": "web_search", "success": j%10 != 0, "latency_ms": 120, "input": map[string]any{"query": "weather in Paris"}, "output": out}})
		}
		raw, err := json.Marshal(batch)
		require.NoError(b, err)
		bodies[i] = raw
	}
	client := &http.Client{}
	b.ResetTimer()
	for i := range b.N {
		req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(bodies[i]))
		req.Header.Set("Content-Type", "application/cloudevents-batch+json")
		req.Header.Set("Authorization", "Bearer "+s.token)
		res, err := client.Do(req)
		require.NoError(b, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(b, http.StatusAccepted, res.StatusCode)
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}
