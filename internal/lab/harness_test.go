package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// world is one test's NATS, database, model server and tenant, and what
// the lab published for the tenant.
type world struct {
	t      testing.TB
	nats   *testenv.NATS
	pool   *pgxpool.Pool
	dbURL  string
	model  *providertest.Server
	sim    *modelSim
	tenant string
	cfg    config.Config
	pub    *bus.Publisher

	mu      sync.Mutex
	results []event.Event
}

// newWorld starts NATS and a model server answering as modelSim does.
func newWorld(t testing.TB) *world {
	t.Helper()
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	w := &world{
		t: t, nats: n, pool: testenv.Pool(t), dbURL: testenv.DatabaseURL(t),
		model: providertest.New(t), sim: newModelSim(), tenant: testenv.Tenant(t),
		pub: bus.NewPublisher(n.JS, reg),
	}
	w.model.SetContextResponder(w.sim.respond)
	cfg := testenv.Config(t, n.URL)
	cfg.LLM.BaseURL, cfg.LLM.Model = w.model.URL, "model-a"
	cfg.RelayInterval, cfg.RelayMinAge = 200*time.Millisecond, time.Second
	cfg.ShutdownGrace = 2 * time.Second
	cfg.Lab.Timeout = time.Minute
	cfg.Lab.CallTimeout = 10 * time.Second
	w.cfg = cfg
	for _, subj := range lab.ResultSubjects {
		sub, err := n.NC.Subscribe(strings.TrimSuffix(subj, "*")+w.tenant, func(m *nats.Msg) {
			ev, err := bus.Decode(m.Header, m.Data)
			if err == nil {
				w.mu.Lock()
				w.results = append(w.results, ev)
				w.mu.Unlock()
			}
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, n.NC.Flush())
	return w
}

// copyOpts are fast job timings for tests.
func copyOpts() lab.Options {
	return lab.Options{
		PromptWait: 300 * time.Millisecond,
		Job: job.Options{
			Lease: 2 * time.Second, Heartbeat: 200 * time.Millisecond, Poll: 100 * time.Millisecond,
			Grace: time.Second, Backoff: []time.Duration{100 * time.Millisecond},
		},
	}
}

// labCopy is a running lab behind a database proxy of its own, so it can
// be killed as kill -9 would: connections cut first.
type labCopy struct {
	p     *testenv.Process
	proxy *testenv.Proxy
}

func (w *world) start(cfg config.Config) *labCopy {
	w.t.Helper()
	return w.startWith(cfg, copyOpts())
}

func (w *world) startWith(cfg config.Config, opts lab.Options) *labCopy {
	w.t.Helper()
	pcfg, err := pgx.ParseConfig(w.dbURL)
	require.NoError(w.t, err)
	proxy := testenv.StartProxy(w.t, net.JoinHostPort(pcfg.Host, strconv.Itoa(int(pcfg.Port))))
	cfg.DatabaseURL = proxy.RewriteURL(w.t, w.dbURL)
	return &labCopy{p: testenv.StartProcess(w.t, cfg, "lab", lab.NewConsumer(opts)), proxy: proxy}
}

// kill stops a copy abruptly: its database connections cut first, so it
// neither releases its job nor records anything more.
func (c *labCopy) kill() {
	c.proxy.Down()
	c.p.Kill()
}

// publish publishes an event of typ with data for the world's tenant.
func (w *world) publish(typ string, data any) event.Event {
	w.t.Helper()
	ev, err := bus.NewEvent(typ, w.tenant, "lab-test", data)
	require.NoError(w.t, err)
	w.publishEvent(ev)
	return ev
}

func (w *world) publishEvent(ev event.Event) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := w.pub.Publish(ctx, ev)
	require.NoError(w.t, err)
}

// version publishes prompt.created for a version and the indexer's
// prompt.indexed for it, as the indexer would.
func (w *world) version(promptID string, version int, content string, labels ...string) {
	w.t.Helper()
	created := w.publish(bus.Type("prompt", "created"), map[string]any{
		"id": promptID, "type": "system", "name": promptID, "content": content, "version": version,
	})
	data := map[string]any{"prompt_id": promptID, "version": version, "content_hash": fmt.Sprintf("h%d", version), "outcome": "created"}
	if len(labels) > 0 {
		data["labels"] = labels
	}
	ix, err := bus.NewResult("indexer", bus.Type("prompt", "indexed"), created, data)
	require.NoError(w.t, err)
	w.publishEvent(ix)
}

// request publishes experiment.requested.
func (w *world) request(data map[string]any) event.Event {
	w.t.Helper()
	return w.publish(lab.TypeRequested, data)
}

// queries returns n test queries "q0".."q<n-1>" of intent.
func queries(n int, intent string) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = map[string]any{"query": fmt.Sprintf("q%d", i)}
		if intent != "" {
			out[i]["intent"] = intent
		}
	}
	return out
}

// result waits for the lab's result of type typ caused by cause.
func (w *world) result(typ string, cause event.Event, timeout time.Duration) event.Event {
	w.t.Helper()
	var got event.Event
	w.eventually(timeout, func() bool {
		for _, ev := range w.published() {
			if ev.Type() == typ && bus.Causation(ev) == cause.ID() {
				got = ev
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("no %s for %s; the lab published %s", typ, cause.ID(), w.describe()) })
	return got
}

// ending waits for the event that ends the experiment caused by cause:
// experiment.completed or experiment.failed.
func (w *world) ending(cause event.Event, timeout time.Duration) event.Event {
	w.t.Helper()
	var got event.Event
	w.eventually(timeout, func() bool {
		for _, ev := range w.published() {
			if (ev.Type() == lab.TypeCompleted || ev.Type() == lab.TypeFailed) && bus.Causation(ev) == cause.ID() {
				got = ev
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("the experiment of %s never ended; the lab published %s", cause.ID(), w.describe())
	})
	return got
}

// eventually polls cond every 50 ms until it holds, or fails with msg()
// evaluated then.
func (w *world) eventually(timeout time.Duration, cond func() bool, msg func() string) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("after %s: %s", timeout, msg())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (w *world) published() []event.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]event.Event(nil), w.results...)
}

// count counts the lab's results of typ caused by cause.
func (w *world) count(typ string, cause event.Event) int {
	n := 0
	for _, ev := range w.published() {
		if ev.Type() == typ && bus.Causation(ev) == cause.ID() {
			n++
		}
	}
	return n
}

func (w *world) describe() string {
	var parts []string
	for _, ev := range w.published() {
		parts = append(parts, fmt.Sprintf("%s %s", ev.Type(), ev.Data()))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, "; ")
}

// status is the experiment's job state.
func (w *world) status(id string) job.Status {
	w.t.Helper()
	s, err := job.Get(context.Background(), w.pool, job.Key{Tenant: w.tenant, Consumer: "lab", ID: id})
	require.NoError(w.t, err)
	return s
}

// state is the experiment's job state, "" while it has none.
func (w *world) state(id string) job.State {
	s, err := job.Get(context.Background(), w.pool, job.Key{Tenant: w.tenant, Consumer: "lab", ID: id})
	if err != nil {
		return ""
	}
	return s.State
}

// storedTrials lists the trial steps stored for an experiment.
func (w *world) storedTrials(id string) []string {
	w.t.Helper()
	rows, err := w.pool.Query(context.Background(), `
		SELECT step FROM job_steps WHERE tenant_id = $1 AND consumer = 'lab' AND job_id = $2 AND step LIKE 'trial/%' ORDER BY step`,
		w.tenant, id)
	require.NoError(w.t, err)
	steps, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(w.t, err)
	return steps
}

// completedData decodes experiment.completed or experiment.failed data.
type completedData struct {
	ExperimentID    string          `json:"experiment_id"`
	BaselineVersion int             `json:"baseline_version"`
	TotalTrials     int             `json:"total_trials"`
	CompletedTrials int             `json:"completed_trials"`
	ReasonCode      string          `json:"reason_code"`
	Reason          string          `json:"reason"`
	Summary         string          `json:"summary"`
	Judge           *lab.JudgeSpend `json:"judge"`
	Report          struct {
		Versions []struct {
			Version       int                `json:"version"`
			Baseline      bool               `json:"baseline"`
			Trials        int                `json:"trials"`
			PassRate      float64            `json:"pass_rate"`
			AvgScore      float64            `json:"avg_score"`
			ErrorRate     float64            `json:"error_rate"`
			TotalTokens   int                `json:"total_tokens"`
			TierBreakdown map[string]float64 `json:"tier_breakdown"`
			PerQuery      []struct {
				Query    int     `json:"query"`
				Trials   int     `json:"trials"`
				Passes   int     `json:"passes"`
				PassRate float64 `json:"pass_rate"`
			} `json:"per_query"`
		} `json:"versions"`
		Recommendation struct {
			Version    int      `json:"version"`
			Confidence string   `json:"confidence"`
			Warnings   []string `json:"warnings"`
		} `json:"recommendation"`
	} `json:"report"`
}

func decode(t *testing.T, ev event.Event) completedData {
	t.Helper()
	var d completedData
	require.NoError(t, json.Unmarshal(ev.Data(), &d))
	return d
}

// rejection decodes lab.rejected.
type rejection struct {
	ReasonCode string         `json:"reason_code"`
	Reason     string         `json:"reason"`
	EventID    string         `json:"event_id"`
	Details    map[string]any `json:"details"`
}
