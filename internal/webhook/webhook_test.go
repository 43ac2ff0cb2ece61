package webhook_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/internal/webhook"
	"github.com/agentq/agentq/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// receiver is an HTTP endpoint that can be down (503), gone (410) or up,
// and verifies every request with the Standard Webhooks reference library.
type receiver struct {
	mu       sync.Mutex
	status   int
	verifier *standardwebhooks.Webhook
	seen     map[string]int // webhook-id → requests
	accepted map[string]map[string]any
	times    map[string]int // webhook-id → requests accepted
	bad      []string
	srv      *httptest.Server
}

func newReceiver(t *testing.T, secret string) *receiver {
	r := &receiver{status: http.StatusServiceUnavailable, seen: map[string]int{}, accepted: map[string]map[string]any{}, times: map[string]int{}}
	if secret != "" {
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		r.verifier = wh
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		id := req.Header.Get("webhook-id")
		r.seen[id]++
		if r.status != http.StatusOK {
			w.WriteHeader(r.status)
			return
		}
		if r.verifier != nil {
			if err := r.verifier.Verify(body, req.Header); err != nil {
				r.bad = append(r.bad, fmt.Sprintf("%s: %v", id, err))
			}
		}
		var ce map[string]any
		if err := json.Unmarshal(body, &ce); err != nil || req.Header.Get("Content-Type") == "" {
			r.bad = append(r.bad, fmt.Sprintf("%s: body %q", id, body))
		}
		r.accepted[id] = ce
		r.times[id]++
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) set(status int) { r.mu.Lock(); r.status = status; r.mu.Unlock() }

func (r *receiver) snapshot() (accepted map[string]map[string]any, seen map[string]int, bad []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	accepted, seen = map[string]map[string]any{}, map[string]int{}
	for k, v := range r.accepted {
		accepted[k] = v
	}
	for k, v := range r.seen {
		seen[k] = v
	}
	for id, n := range r.times {
		if n > 1 {
			r.bad = append(r.bad, fmt.Sprintf("%s accepted %d times", id, n))
		}
	}
	return accepted, seen, append([]string(nil), r.bad...)
}

// A receiver that is down while a tool degrades, is quarantined, recovers
// — and while agentq restarts — gets every transition once it is up: one
// accepted request per webhook-id, each the stream's event, each signature
// verified by the Standard Webhooks reference library.
func TestReceiverOutageLosesNothing(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a-secret-of-at-least-24-bytes!!"))
	rcv := newReceiver(t, secret)
	n := testenv.StartNATS(t)
	tenant := testenv.Tenant(t)
	cfg := testenv.Config(t, n.URL)
	cfg.AckWait = 5 * time.Second
	cfg.ShutdownGrace = 5 * time.Second
	cfg.Degrade.QuarantineBase, cfg.Degrade.QuarantineMax = time.Second, 5*time.Second
	cfg.Degrade.Probation = time.Second
	cfg.Degrade.TimerEvery, cfg.Degrade.Poll = 100*time.Millisecond, 50*time.Millisecond
	cfg.Alerts.WebhookURL = rcv.srv.URL + "/hook;tenant=" + tenant
	cfg.Alerts.WebhookSecret = secret
	p := testenv.StartProcess(t, cfg, "degrader", health.Consumer, webhook.Consumer)

	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(n.JS, reg)
	for i := 0; i < 3; i++ {
		ev, err := bus.NewEvent(health.TypeToolRegistered, tenant, "test", map[string]any{"name": fmt.Sprintf("other-%d", i), "description": "x"})
		require.NoError(t, err)
		_, err = pub.Publish(context.Background(), ev)
		require.NoError(t, err)
	}
	for i := 0; i < 42; i++ {
		ev, err := bus.NewEvent(health.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "flaky", "success": i < 30})
		require.NoError(t, err)
		_, err = pub.Publish(context.Background(), ev)
		require.NoError(t, err)
	}
	// While the receiver is down the whole episode happens, and agentq
	// restarts in the middle of it.
	transitions := func() []string {
		var ids []string
		for _, subj := range webhook.Subjects {
			s, err := n.JS.Stream(context.Background(), bus.StreamName)
			require.NoError(t, err)
			cons, err := s.OrderedConsumer(context.Background(), jetstreamAll(subj[:len(subj)-1]+tenant))
			require.NoError(t, err)
			info, err := cons.Info(context.Background())
			require.NoError(t, err)
			for k := uint64(0); k < info.NumPending; k++ {
				m, err := cons.Next()
				require.NoError(t, err)
				ev, err := bus.Decode(m.Headers(), m.Data())
				require.NoError(t, err)
				ids = append(ids, ev.ID())
			}
		}
		return ids
	}
	testenv.Eventually(t, time.Minute, func() bool { return len(transitions()) >= 2 }, "degraded and quarantined")
	testenv.Eventually(t, time.Minute, func() bool { _, seen, _ := rcv.snapshot(); return len(seen) >= 1 }, "a first attempt while down")
	p.Stop()
	p = testenv.StartProcess(t, cfg, "degrader", health.Consumer, webhook.Consumer)
	defer p.Stop()
	testenv.Eventually(t, time.Minute, func() bool { return len(transitions()) >= 4 }, "recovered through probation")
	rcv.set(http.StatusOK)

	want := transitions()
	testenv.Eventually(t, 2*time.Minute, func() bool { acc, _, _ := rcv.snapshot(); return len(acc) == len(want) },
		"every transition delivered")
	acc, seen, bad := rcv.snapshot()
	require.Empty(t, bad, "every request verifies and carries the event")
	for _, id := range want {
		require.Contains(t, acc, id)
		require.Equal(t, id, acc[id]["id"], "the body is the CloudEvent itself")
		require.Equal(t, tenant, acc[id]["tenantid"])
		require.GreaterOrEqual(t, seen[id], 1)
	}
	// The sender records a delivery after the receiver's answer: the last
	// one may still be on its way.
	var delivered int
	testenv.Eventually(t, 30*time.Second, func() bool {
		require.NoError(t, p.Deps.Pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries WHERE tenant_id = $1`, tenant).Scan(&delivered))
		return delivered >= len(want)
	}, "a delivery recorded for each of the %d transitions", len(want))
	require.Equal(t, len(want), delivered, "one delivery recorded per transition")
}

func jetstreamAll(subject string) jetstream.OrderedConsumerConfig {
	return jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy}
}

func TestParseEndpoints(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef01234567"))
	for _, tc := range []struct {
		name, spec string
		want       int
		err        string
		check      func(t *testing.T, eps []webhook.Endpoint)
	}{
		{name: "empty", spec: "  ", want: 0},
		{name: "two", spec: "https://a.example/x http://b.example/y;tenant=acme,beta;format=slack", want: 2,
			check: func(t *testing.T, eps []webhook.Endpoint) {
				require.True(t, eps[0].Wants("anyone"))
				require.True(t, eps[1].Wants("beta"))
				require.False(t, eps[1].Wants("other"))
				require.Equal(t, webhook.Slack, eps[1].Format)
				require.Nil(t, eps[0].Secret)
			}},
		{name: "own secret", spec: "https://a.example/x;secret=" + secret, want: 1,
			check: func(t *testing.T, eps []webhook.Endpoint) { require.Len(t, eps[0].Secret, 24) }},
		{name: "not http", spec: "ftp://a.example/x", err: "not an http(s) URL"},
		{name: "bad option", spec: "https://a.example/x;colour=red", err: `unknown option "colour"`},
		{name: "bad format", spec: "https://a.example/x;format=xml", err: "want cloudevents or slack"},
		{name: "short secret", spec: "https://a.example/x;secret=whsec_c2hvcnQ=", err: "at least 24"},
		{name: "twice", spec: "https://a.example/x https://a.example/x", err: "listed twice"},
		{name: "token stays out of errors", spec: "https://a.example/T0KEN;colour=red", err: "https://a.example/…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eps, err := webhook.ParseEndpoints(tc.spec, "")
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), "T0KEN")
				return
			}
			require.NoError(t, err)
			require.Len(t, eps, tc.want)
			if tc.check != nil {
				tc.check(t, eps)
			}
		})
	}
}

// Our signature is the one the Standard Webhooks reference library
// computes (the specification's own example secret and message).
func TestSignMatchesReference(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	key, err := webhook.DecodeSecret(secret)
	require.NoError(t, err)
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	ts := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	want, err := wh.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", ts, body)
	require.NoError(t, err)
	require.Equal(t, want, webhook.Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", ts, body))
}
