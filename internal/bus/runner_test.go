package bus_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// recorder is a handler whose behaviour is chosen by the event's tool_name.
type recorder struct {
	mu       sync.Mutex
	handled  map[string]int // tool_name -> successful handlings
	attempts map[string]int
}

func newRecorder() *recorder {
	return &recorder{handled: map[string]int{}, attempts: map[string]int{}}
}

func (r *recorder) handle(_ context.Context, d *bus.Delivery) error {
	var data struct {
		ToolName string `json:"tool_name"`
	}
	if err := json.Unmarshal(d.Event.Data(), &data); err != nil {
		return bus.Permanent(err)
	}
	r.mu.Lock()
	r.attempts[data.ToolName]++
	n := r.attempts[data.ToolName]
	r.mu.Unlock()
	switch {
	case data.ToolName == "panics":
		panic("tool output exploded")
	case data.ToolName == "permanent":
		return bus.Permanentf("version conflict for %s", data.ToolName)
	case data.ToolName == "flaky" && n < 3:
		return errFixed("llm timeout")
	case data.ToolName == "always-fails":
		return errFixed("still failing")
	case data.ToolName == "db-down" && n < 4:
		return bus.Unavailable(errFixed("connection refused"))
	}
	r.mu.Lock()
	r.handled[data.ToolName]++
	r.mu.Unlock()
	return nil
}

func (r *recorder) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.handled[name]
}

func startRunner(t *testing.T, n *testenv.NATS, h bus.BatchHandler, opts bus.RunnerOptions) (stop func()) {
	t.Helper()
	reg, err := schemas.Load()
	require.NoError(t, err)
	if opts.Consumer == "" {
		opts.Consumer = "test"
	}
	if len(opts.Subjects) == 0 {
		opts.Subjects = []string{"tool.executed.*"}
	}
	if opts.Backoff == nil {
		opts.Backoff = []time.Duration{20 * time.Millisecond}
	}
	r, err := bus.NewRunner(n.JS, reg, h, opts, testenv.Logger(t), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(20 * time.Second):
				t.Error("runner did not stop within 20s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func publish(t *testing.T, js jetstream.JetStream, m *nats.Msg) {
	t.Helper()
	_, err := js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
}

func toolMsg(t *testing.T, tenant, tool string) *nats.Msg {
	t.Helper()
	m, err := bus.Encode(newToolEvent(t, tenant, map[string]any{"tool_name": tool, "success": true}))
	require.NoError(t, err)
	return m
}

// msgID sets m's Nats-Msg-Id to prefix followed by its event id.
func msgID(m *nats.Msg, prefix string) *nats.Msg {
	m.Header.Set("Nats-Msg-Id", prefix+m.Header.Get("ce-id"))
	return m
}

func waitDeadLetters(t *testing.T, js jetstream.JetStream, n int) []bus.DeadLetter {
	t.Helper()
	var dls []bus.DeadLetter
	testenv.Eventually(t, 20*time.Second, func() bool {
		dls = testenv.DeadLetters(t, js)
		return len(dls) >= n
	}, "want %d dead letters, have %d", n, len(dls))
	return dls
}

func TestRunnerDeadLettersBadInputAndKeepsGoing(t *testing.T) {
	n := testenv.StartNATS(t)
	rec := newRecorder()
	startRunner(t, n, bus.Each(rec.handle), bus.RunnerOptions{MaxPayload: 2048, MaxDeliver: 3})
	tenant := "acme"

	raw := func(header nats.Header, data string) *nats.Msg {
		m := nats.NewMsg("tool.executed." + tenant)
		if header != nil {
			m.Header = header
		}
		m.Data = []byte(data)
		return m
	}
	binary := func(id, typ, tenantID, data string) *nats.Msg {
		h := nats.Header{"ce-specversion": {"1.0"}, "ce-id": {id}, "ce-source": {"test"}, "ce-type": {typ}, "content-type": {"application/json"}}
		if tenantID != "" {
			h.Set("ce-tenantid", tenantID)
		}
		return raw(h, data)
	}
	cases := []struct {
		name   string
		msg    *nats.Msg
		reason string
		want   string // in the reason text
	}{
		{"not a cloudevent", raw(nil, "this is not json"), bus.ReasonDecode, "not a CloudEvent"},
		{"oversized", binary("big", "agentq.tool.executed.v1", tenant, `{"tool_name":"x","success":true,"output":"`+strings.Repeat("a", 4000)+`"}`), bus.ReasonOversize, "over the 2048-byte limit"},
		{"wrong tenant", binary("wt", "agentq.tool.executed.v1", "other", `{"tool_name":"x","success":true}`), bus.ReasonTenantMismatch, `"other" does not match subject tenant "acme"`},
		{"no tenant", binary("nt", "agentq.tool.executed.v1", "", `{"tool_name":"x","success":true}`), bus.ReasonTenantMismatch, "missing tenantid"},
		{"schema violation", binary("sv", "agentq.tool.executed.v1", tenant, `{"tool_name":"x","success":"yes"}`), bus.ReasonSchema, "/success"},
		{"type on the wrong subject", binary("ws", "agentq.prompt.used.v1", tenant, `{"prompt_hash":"h","success":true}`), bus.ReasonUnknownType, "belongs on subject prompt.used.acme"},
		{"unknown type version", binary("v7", "agentq.tool.executed.v7", tenant, `{"tool_name":"x","success":true}`), bus.ReasonUnknownType, "agentq.tool.executed.v7"},
		{"another tenant's message id", msgID(toolMsg(t, tenant, "x"), "rival:"), bus.ReasonTenantMismatch, `Nats-Msg-Id "rival:`},
		{"another event's message id", msgID(toolMsg(t, tenant, "x"), tenant+":not-"), bus.ReasonTenantMismatch, `Nats-Msg-Id "` + tenant + `:not-`},
		{"handler says permanent", toolMsg(t, tenant, "permanent"), bus.ReasonPermanent, "version conflict"},
		{"handler panics", toolMsg(t, tenant, "panics"), bus.ReasonPanic, "tool output exploded"},
		{"transient until the limit", toolMsg(t, tenant, "always-fails"), bus.ReasonMaxDeliver, "failed 3 times, last error: still failing"},
	}
	for _, c := range cases {
		publish(t, n.JS, c.msg)
	}
	publish(t, n.JS, toolMsg(t, tenant, "valid"))
	publish(t, n.JS, toolMsg(t, tenant, "flaky"))

	dls := waitDeadLetters(t, n.JS, len(cases))
	byReason := map[string]bus.DeadLetter{} // reason code + original ce-id
	for _, dl := range dls {
		byReason[dl.ReasonCode+"/"+dl.Header.Get("ce-id")] = dl
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dl, ok := byReason[c.reason+"/"+c.msg.Header.Get("ce-id")]
			require.True(t, ok, "no dead letter with reason %s among %d", c.reason, len(dls))
			require.Contains(t, dl.Reason, c.want)
			require.Equal(t, "test", dl.Consumer)
			require.Equal(t, "tool.executed.acme", dl.Subject)
			require.Equal(t, c.msg.Data, dl.Data, "original data kept")
			require.NotZero(t, dl.StreamSeq)
			require.NotZero(t, dl.Deliveries)
			for k := range c.msg.Header {
				if k != "Nats-Msg-Id" {
					require.Equal(t, c.msg.Header.Get(k), dl.Header.Get(k), "original header %s kept", k)
				}
			}
		})
	}
	require.Len(t, dls, len(cases), "one dead letter per bad message")
	testenv.Eventually(t, 10*time.Second, func() bool { return rec.count("valid") == 1 && rec.count("flaky") == 1 },
		"valid and flaky events processed after the bad ones")
	for _, dl := range dls {
		if dl.ReasonCode == bus.ReasonMaxDeliver {
			require.Equal(t, uint64(3), dl.Deliveries)
		}
	}
}

func TestRunnerUnavailableRetriesWithoutDeadLetter(t *testing.T) {
	n := testenv.StartNATS(t)
	rec := newRecorder()
	// MaxDeliver 2 is below the 4 attempts the outage takes: an outage must
	// not spend the delivery budget.
	startRunner(t, n, bus.Each(rec.handle), bus.RunnerOptions{MaxDeliver: 2})
	publish(t, n.JS, toolMsg(t, "acme", "db-down"))
	testenv.Eventually(t, 15*time.Second, func() bool { return rec.count("db-down") == 1 }, "event applied after the outage")
	require.Empty(t, testenv.DeadLetters(t, n.JS))
}

func TestRunnerPanicInBatchIsolatesTheEvent(t *testing.T) {
	n := testenv.StartNATS(t)
	var mu sync.Mutex
	handled := map[string]int{}
	h := func(_ context.Context, batch []*bus.Delivery) []error {
		for _, d := range batch {
			if strings.Contains(string(d.Event.Data()), "panics") {
				panic("bad event in batch")
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, d := range batch {
			handled[d.Event.ID()]++
		}
		return nil
	}
	// Publish before starting so the runner sees one full batch.
	var ids []string
	for i := range 20 {
		name := "ok"
		if i == 7 {
			name = "panics"
		}
		m := toolMsg(t, "acme", name)
		if name == "ok" {
			ids = append(ids, m.Header.Get("ce-id"))
		}
		publish(t, n.JS, m)
	}
	startRunner(t, n, h, bus.RunnerOptions{BatchSize: 50})
	dls := waitDeadLetters(t, n.JS, 1)
	require.Equal(t, bus.ReasonPanic, dls[0].ReasonCode)
	testenv.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == len(ids)
	}, "every good event of the batch handled")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, handled[id], "event %s handled once", id)
	}
}

func TestRunnerGracefulStopFinishesBatchInHand(t *testing.T) {
	n := testenv.StartNATS(t)
	started := make(chan struct{})
	release := make(chan struct{})
	var acked sync.WaitGroup
	acked.Add(1)
	h := func(ctx context.Context, batch []*bus.Delivery) []error {
		close(started)
		<-release
		acked.Done()
		return nil
	}
	stop := startRunner(t, n, h, bus.RunnerOptions{Consumer: "graceful", Grace: 10 * time.Second})
	publish(t, n.JS, toolMsg(t, "acme", "slow"))
	<-started
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("runner stopped before the batch in hand finished")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	<-stopped
	acked.Wait()
	cons, err := n.JS.Consumer(context.Background(), bus.StreamName, "graceful")
	require.NoError(t, err)
	testenv.Eventually(t, 5*time.Second, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, "the finished event was acked, nothing left pending")
}

func TestRunnerGraceBoundsAStuckHandler(t *testing.T) {
	n := testenv.StartNATS(t)
	started := make(chan struct{}, 1)
	h := func(ctx context.Context, batch []*bus.Delivery) []error {
		started <- struct{}{}
		<-ctx.Done() // a handler that only stops when told
		errs := make([]error, len(batch))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
	stop := startRunner(t, n, h, bus.RunnerOptions{Consumer: "stuck", Grace: 300 * time.Millisecond})
	publish(t, n.JS, toolMsg(t, "acme", "stuck"))
	<-started
	begin := time.Now()
	stop()
	// Not a timing assertion on speed: the bound is the configured grace
	// plus generous slack; without the grace the handler would never return.
	require.Less(t, time.Since(begin), 15*time.Second)
	require.Empty(t, testenv.DeadLetters(t, n.JS), "an interrupted event is retried, not dead-lettered")
}

func TestMain(m *testing.M) { testenv.Main(m) }
