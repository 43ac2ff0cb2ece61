package service_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
)

// BenchmarkRoundTrip measures one request/reply at a time from a client
// connection: through a Service (tenant check, handler goroutine, JSON
// reply, metrics), the same with request validation, and against a bare
// nc.Subscribe responder echoing the body, on the same server in the same
// run. The difference is the service's overhead per request. cpu-ns/op is
// the process's CPU time per round trip (server, client and responder are
// all in this process).
func BenchmarkRoundTrip(b *testing.B) {
	env := testenv.StartNATS(b)
	body := []byte(`{"query":"summarise the incident report","limit":10}`)

	s, err := service.New(env.NC, service.Options{
		Name: "bench", Registry: prometheus.NewRegistry(), Log: zerolog.Nop(),
		Validator: newSchemaValidator(b, echoSchema, echoSchemaDoc),
	})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Stop() })
	echo := func(_ context.Context, r service.Request) (any, error) { return json.RawMessage(r.Data), nil }
	require.NoError(b, s.AddEndpoint("plain", "bench.service", "", echo))
	require.NoError(b, s.AddEndpoint("validated", "bench.validated", echoSchema, echo))
	sub, err := env.NC.Subscribe("bench.raw.acme", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	require.NoError(b, err)
	b.Cleanup(func() { _ = sub.Unsubscribe() })

	client, err := nats.Connect(env.URL)
	require.NoError(b, err)
	b.Cleanup(client.Close)

	for _, bc := range []struct{ name, subject string }{
		{"raw", "bench.raw.acme"},
		{"service", "bench.service.acme"},
		{"service_validated", "bench.validated.acme"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				msg, err := client.Request(bc.subject, body, 5*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if len(msg.Data) == 0 || msg.Header.Get("Nats-Service-Error") != "" {
					b.Fatalf("bad reply %q %v", msg.Data, msg.Header)
				}
			}
			// CPU per round trip, of the whole process: less sensitive than
			// ns/op to other work on a shared machine.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
