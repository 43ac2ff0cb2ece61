package rating_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/rating"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// model is the model name the tests configure.
const model = "test-model"

// rig is one test's world: NATS, the test database, optionally an
// OpenAI-compatible test server, a publisher, a tenant and what arrives on
// the tenant's result subjects.
type rig struct {
	nats    *testenv.NATS
	srv     *providertest.Server // nil: no LLM, the rules rate
	cfg     config.Config
	pub     *bus.Publisher
	tenant  string
	results *results
}

func newRig(t *testing.T, llm bool) *rig {
	t.Helper()
	n := testenv.StartNATS(t)
	r := &rig{nats: n, pub: newPublisher(t, n), tenant: testenv.Tenant(t)}
	r.cfg = testenv.Config(t, n.URL)
	r.cfg.AckWait = 5 * time.Second
	r.cfg.ShutdownGrace = 5 * time.Second
	r.cfg.BatchSize = 50
	r.cfg.Rater.Timeout = 2 * time.Second
	if llm {
		r.srv = providertest.New(t)
		r.cfg.LLM.BaseURL, r.cfg.LLM.Model = r.srv.URL, model
	}
	r.results = subscribe(t, n.NC, r.tenant)
	return r
}

func newPublisher(t testing.TB, n *testenv.NATS) *bus.Publisher {
	t.Helper()
	reg, err := schemas.Load()
	require.NoError(t, err)
	return bus.NewPublisher(n.JS, reg)
}

// instance is one agentq process embedded in the test.
type instance = testenv.Process

// start runs consumers (the rater by default) with the rig's configuration.
func (r *rig) start(t testing.TB, consumers ...app.Consumer) *instance {
	t.Helper()
	if len(consumers) == 0 {
		consumers = []app.Consumer{rating.Consumer}
	}
	return testenv.StartProcess(t, r.cfg, "rater-test", consumers...)
}

// toolEvent builds a tool.executed event of the rig's tenant.
func (r *rig) toolEvent(t *testing.T, data map[string]any) event.Event {
	t.Helper()
	if data["tool_name"] == nil {
		data["tool_name"] = "web_search"
	}
	if data["success"] == nil {
		data["success"] = true
	}
	ev, err := bus.NewEvent(rating.TypeToolExecuted, r.tenant, "test-agent", data)
	require.NoError(t, err)
	return ev
}

func (r *rig) promptEvent(t *testing.T, data map[string]any) event.Event {
	t.Helper()
	ev, err := bus.NewEvent(rating.TypePromptUsed, r.tenant, "test-agent", data)
	require.NoError(t, err)
	return ev
}

func (r *rig) publish(t testing.TB, evs ...event.Event) {
	t.Helper()
	for _, ev := range evs {
		_, err := r.pub.PublishAsync(ev)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, r.pub.Flush(ctx))
}

// republish stores ev in the stream again, without Nats-Msg-Id, as a
// publisher that does not set it would: the rater sees it twice.
func (r *rig) republish(t *testing.T, ev event.Event) {
	t.Helper()
	m, err := bus.Encode(ev)
	require.NoError(t, err)
	m.Header.Del("Nats-Msg-Id")
	_, err = r.nats.JS.PublishMsg(context.Background(), m)
	require.NoError(t, err)
}

// applied counts the rater's inbox rows of the rig's tenant.
func (r *rig) applied(t *testing.T, in *instance) int {
	t.Helper()
	var n int
	require.NoError(t, in.Deps.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM inbox WHERE consumer = 'rater' AND tenant_id = $1`, r.tenant).Scan(&n))
	return n
}

func (r *rig) waitApplied(t *testing.T, in *instance, want int) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() bool { return r.applied(t, in) >= want }, "rater applied %d of %d events", r.applied(t, in), want)
	require.Equal(t, want, r.applied(t, in))
}

// drained waits until the rater's durable consumer holds nothing.
func (r *rig) drained(t *testing.T) {
	t.Helper()
	cons, err := r.nats.JS.Consumer(context.Background(), bus.StreamName, "rater")
	require.NoError(t, err)
	testenv.Eventually(t, 60*time.Second, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, "rater consumed everything")
}

func (r *rig) ratings(t *testing.T, in *instance) []rating.Stored {
	t.Helper()
	got, err := rating.List(context.Background(), in.Deps.Pool, r.tenant)
	require.NoError(t, err)
	return got
}

func (r *rig) deadLetters(t *testing.T) []bus.DeadLetter {
	t.Helper()
	var out []bus.DeadLetter
	for _, dl := range testenv.DeadLetters(t, r.nats.JS) {
		if strings.HasSuffix(dl.Subject, "."+r.tenant) {
			out = append(out, dl)
		}
	}
	return out
}

// published is one tool.rated or prompt.rated event as a subscriber sees it.
type published struct {
	ev   event.Event
	data ratedData
}

// ratedData is the data of tool.rated and prompt.rated, decoded the way a
// subscriber would, independently of the rater's own types.
type ratedData struct {
	ToolName           string   `json:"tool_name"`
	PromptHash         string   `json:"prompt_hash"`
	PromptID           string   `json:"prompt_id"`
	Version            int      `json:"version"`
	Rating             float64  `json:"rating"`
	Relevance          *float64 `json:"relevance"`
	Correctness        *float64 `json:"correctness"`
	RaterKind          string   `json:"rater_kind"`
	Rater              string   `json:"rater"`
	Reason             string   `json:"reason"`
	RunID              string   `json:"run_id"`
	StepIdx            *int     `json:"step_idx"`
	TokensUsed         *int     `json:"tokens_used"`
	LatencyMs          *int64   `json:"latency_ms"`
	InjectionSuspected bool     `json:"injection_suspected"`
}

// results records what arrives on a tenant's result subjects, by the id
// of the event that caused it.
type results struct {
	mu      sync.Mutex
	byCause map[string]published
}

func subscribe(t *testing.T, nc *nats.Conn, tenant string) *results {
	t.Helper()
	res := &results{byCause: map[string]published{}}
	for _, subject := range []string{"tool.rated." + tenant, "prompt.rated." + tenant} {
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			ev, err := bus.Decode(m.Header, m.Data)
			if err != nil {
				return
			}
			var d ratedData
			if json.Unmarshal(ev.Data(), &d) != nil {
				return
			}
			res.mu.Lock()
			defer res.mu.Unlock()
			p := published{ev: ev, data: d}
			res.byCause[bus.Causation(ev)] = p
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, nc.Flush())
	return res
}

func (res *results) count() int {
	res.mu.Lock()
	defer res.mu.Unlock()
	return len(res.byCause)
}

func (res *results) of(cause string) (published, bool) {
	res.mu.Lock()
	defer res.mu.Unlock()
	p, ok := res.byCause[cause]
	return p, ok
}

// wait waits for the results of the causes given and returns them.
func (res *results) wait(t *testing.T, causes ...event.Event) []published {
	t.Helper()
	out := make([]published, len(causes))
	testenv.Eventually(t, 60*time.Second, func() bool {
		for i, c := range causes {
			p, ok := res.of(c.ID())
			if !ok {
				return false
			}
			out[i] = p
		}
		return true
	}, "results of %d events (%d arrived)", len(causes), res.count())
	return out
}

// recorder answers chat requests with respond and keeps them.
type recorder struct {
	mu   sync.Mutex
	reqs []providertest.ChatRequest
}

func (rec *recorder) responder(respond providertest.Responder) providertest.Responder {
	return func(req providertest.ChatRequest) string {
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, req)
		rec.mu.Unlock()
		return respond(req)
	}
}

func (rec *recorder) requests() []providertest.ChatRequest {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]providertest.ChatRequest(nil), rec.reqs...)
}

// forEvent returns the requests whose user text holds marker.
func (rec *recorder) forEvent(marker string) []providertest.ChatRequest {
	var out []providertest.ChatRequest
	for _, r := range rec.requests() {
		if strings.Contains(r.UserText(), marker) {
			out = append(out, r)
		}
	}
	return out
}
