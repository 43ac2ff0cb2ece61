package rating_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/rating"
	"github.com/agentq/agentq/internal/testenv"
)

// benchLatency is the model's fixed latency in BenchmarkLLMThroughput.
const benchLatency = 200 * time.Millisecond

// BenchmarkLLMThroughput measures rated events per second through the
// whole rater (JetStream, runner, inbox, transaction, outbox) against a
// model that always takes 200 ms, at the default concurrency of 16 and
// the default settings otherwise (the batch is capped to what 16 calls can
// rate within the handler timeout). ideal_ratio is the rate over the ideal
// concurrency / latency = 80 events/s.
//
//	go test ./internal/rating/ -run '^$' -bench LLMThroughput -benchtime 3x -count 5
func BenchmarkLLMThroughput(b *testing.B) {
	r := benchRig(b, true)
	r.srv.SetLatency(benchLatency)
	r.srv.SetResponder(providertest.Fixed(`{"relevance": 1, "correctness": 0.5, "reason": "ok"}`))
	r.cfg.BatchSize = 500 // the process default; the rater caps it
	rated := countResults(b, r.nats.NC)
	in := r.start(b)
	const perIteration = 640
	concurrency := float64(r.cfg.Rater.Concurrency)
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		evs := benchEvents(b, r.tenant, perIteration, i)
		want := rated.Load() + perIteration
		start := time.Now()
		r.publish(b, evs...)
		waitCount(b, rated, want)
		total += time.Since(start)
	}
	perSecond := float64(b.N*perIteration) / total.Seconds()
	b.ReportMetric(perSecond, "events/s")
	b.ReportMetric(perSecond/(concurrency/benchLatency.Seconds()), "ideal_ratio")
	events, batches := histogram(in, "agentq_batch_events")
	seconds, _ := histogram(in, "agentq_batch_handle_seconds")
	b.ReportMetric(events/batches, "events/batch")
	b.ReportMetric(seconds/batches*1000, "ms/batch")
	b.ReportMetric(0, "ns/op")
}

// histogram returns the sum and count of a histogram of in's registry.
func histogram(in *instance, name string) (sum, count float64) {
	mfs, _ := in.Deps.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
				count += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum, count
}

// BenchmarkRulesThroughput measures events per second through the rules
// rater, beside raw JetStream consume+ack of as many events on the same
// kind of server, in the same run.
//
//	go test ./internal/rating/ -run '^$' -bench RulesThroughput -benchtime 3x -count 5
func BenchmarkRulesThroughput(b *testing.B) {
	const perIteration = 5000
	b.Run("rater", func(b *testing.B) {
		r := benchRig(b, false)
		r.cfg.BatchSize = 500
		rated := countResults(b, r.nats.NC)
		r.start(b)
		var total time.Duration
		for i := 0; b.Loop(); i++ {
			evs := benchEvents(b, r.tenant, perIteration, i)
			want := rated.Load() + perIteration
			start := time.Now()
			r.publish(b, evs...)
			waitCount(b, rated, want)
			total += time.Since(start)
		}
		b.ReportMetric(float64(b.N*perIteration)/total.Seconds(), "events/s")
		b.ReportMetric(0, "ns/op")
	})
	b.Run("jetstream", func(b *testing.B) {
		r := benchRig(b, false)
		ctx := context.Background()
		cons, err := r.nats.JS.CreateOrUpdateConsumer(ctx, bus.StreamName, jetstream.ConsumerConfig{
			Durable: "raw", FilterSubject: "tool.executed." + r.tenant, AckPolicy: jetstream.AckExplicitPolicy,
			MaxAckPending: 1000,
		})
		require.NoError(b, err)
		var total time.Duration
		for i := 0; b.Loop(); i++ {
			evs := benchEvents(b, r.tenant, perIteration, i)
			start := time.Now()
			r.publish(b, evs...)
			for got := 0; got < perIteration; {
				mb, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
				require.NoError(b, err)
				for m := range mb.Messages() {
					require.NoError(b, m.Ack())
					got++
				}
			}
			require.NoError(b, r.nats.NC.Flush())
			total += time.Since(start)
		}
		b.ReportMetric(float64(b.N*perIteration)/total.Seconds(), "events/s")
		b.ReportMetric(0, "ns/op")
	})
}

// benchRig is newRig for a benchmark: its own NATS and tenant, quiet logs.
func benchRig(b *testing.B, llm bool) *rig {
	b.Helper()
	n := testenv.StartNATS(b)
	r := &rig{nats: n, tenant: testenv.Tenant(b)}
	r.pub = newPublisher(b, n)
	r.cfg = testenv.Config(b, n.URL)
	if llm {
		r.srv = providertest.New(b)
		r.cfg.LLM.BaseURL, r.cfg.LLM.Model = r.srv.URL, model
	}
	return r
}

func benchEvents(b *testing.B, tenant string, n, round int) []event.Event {
	b.Helper()
	evs := make([]event.Event, n)
	for i := range evs {
		ev, err := bus.NewEvent(rating.TypeToolExecuted, tenant, "bench", map[string]any{
			"tool_name": "web_search", "success": true, "latency_ms": 120,
			"input":  map[string]any{"query": "weather in Paris"},
			"output": fmt.Sprintf("Paris: %d°C, sunny (reading %d)", 15+i%10, round*n+i),
		})
		require.NoError(b, err)
		evs[i] = ev
	}
	return evs
}

// countResults counts every tool.rated event published on nc's server.
func countResults(b *testing.B, nc *nats.Conn) *atomic.Int64 {
	b.Helper()
	var n atomic.Int64
	sub, err := nc.Subscribe("tool.rated.*", func(*nats.Msg) { n.Add(1) })
	require.NoError(b, err)
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(b, nc.Flush())
	return &n
}

func waitCount(b *testing.B, n *atomic.Int64, want int64) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for n.Load() < want {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d results after 5 minutes", n.Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
