package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/internal/webhook"
	"github.com/agentq/agentq/schemas"
)

// One trace from an agent's tool call to the alert: each call carries its
// own W3C trace context (the CloudEvents distributed-tracing extension);
// every quality.changed and every alert on the stream carries the trace
// context of the event its causationid names, and the webhook request
// carries it as traceparent and tracestate headers. A malformed
// traceparent is ignored, not carried.
func TestAlertsCarryTheTraceOfTheCallThatCausedThem(t *testing.T) {
	var mu sync.Mutex
	headers := map[string]bus.TraceContext{} // webhook-id → trace headers
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers[r.Header.Get("webhook-id")] = bus.TraceContext{Parent: r.Header.Get("traceparent"), State: r.Header.Get("tracestate")}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	n := testenv.StartNATS(t)
	tenant := testenv.Tenant(t)
	cfg := testenv.Config(t, n.URL)
	cfg.AckWait, cfg.ShutdownGrace = 5*time.Second, 5*time.Second
	cfg.Alerts.WebhookURL = srv.URL + "/hook;tenant=" + tenant
	p := testenv.StartProcess(t, cfg, "agentq", quality.Consumer, health.Consumer, webhook.Consumer)
	defer p.Stop()

	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(n.JS, reg)
	want := map[string]bus.TraceContext{} // input event id → the trace its results carry
	var evs []event.Event
	for i := range 3 {
		ev, err := bus.NewEvent(health.TypeToolRegistered, tenant, "agent", map[string]any{"name": fmt.Sprintf("other-%d", i), "description": "x"})
		require.NoError(t, err)
		evs = append(evs, ev)
	}
	for i := range 42 {
		ev, err := bus.NewEvent(health.TypeToolExecuted, tenant, "agent", map[string]any{"tool_name": "flaky", "success": i < 30})
		require.NoError(t, err)
		tc := bus.TraceContext{Parent: fmt.Sprintf("00-%032x-%016x-01", 0xa000+i, 0xb000+i), State: fmt.Sprintf("agent=call%d", i)}
		if i == 29 {
			tc = bus.TraceContext{Parent: "00-NOT-A-TRACEPARENT"} // ignored
			ev.SetExtension(bus.ExtTraceParent, tc.Parent)
			tc = bus.TraceContext{}
		} else {
			tc.Set(&ev)
		}
		want[ev.ID()] = tc
		evs = append(evs, ev)
	}
	for _, ev := range evs {
		_, err := pub.PublishAsync(ev)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, pub.Flush(ctx))

	var alerts []*bus.Delivery
	testenv.Eventually(t, time.Minute, func() bool {
		alerts = conformance.History(t, n.JS, webhook.Subjects, tenant)
		return len(alerts) >= 2
	}, "degraded and quarantined on the stream")
	testenv.Eventually(t, time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range alerts[:2] {
			if _, ok := headers[a.Event.ID()]; !ok {
				return false
			}
		}
		return true
	}, "both alerts delivered to the webhook")
	for _, a := range alerts[:2] {
		cause := bus.Causation(a.Event)
		require.Contains(t, want, cause, "%s is caused by a call", a.Event.Type())
		require.NotEmpty(t, want[cause].Parent)
		require.Equal(t, want[cause], bus.Trace(a.Event), "%s carries its cause's trace", a.Event.Type())
		mu.Lock()
		require.Equal(t, want[cause], headers[a.Event.ID()], "the webhook request for %s carries its trace", a.Event.Type())
		mu.Unlock()
	}

	changes := conformance.History(t, n.JS, []string{"quality.changed.*"}, tenant)
	require.NotEmpty(t, changes)
	for _, c := range changes {
		cause := bus.Causation(c.Event)
		require.Contains(t, want, cause)
		require.Equal(t, want[cause], bus.Trace(c.Event), "quality.changed caused by %s", cause)
	}
}
