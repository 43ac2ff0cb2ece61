package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/devdb"
	"github.com/agentq/agentq/internal/quality"
)

func init() {
	register("bench", "load generator: raw JetStream consume+ack vs the scorer end to end, in one run", runBench)
}

// BenchResult is what one bench run measured.
type BenchResult struct {
	Events       int
	PublishRate  float64 // events/s, async publish with acks
	RawRate      float64 // events/s, raw JetStream consume + ack of a backlog
	ScorerRate   float64 // events/s, scorer consume + validate + commit + ack of the same backlog
	LightP50     time.Duration
	LightP99     time.Duration
	LightSamples int
	Database     string
}

// Ratio is the scorer's rate as a share of raw JetStream consume+ack.
func (r BenchResult) Ratio() float64 { return r.ScorerRate / r.RawRate }

func runBench(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("bench", e)
	n := fs.Int("events", 20000, "events per phase")
	batch := fs.Int("batch", cfg.BatchSize, "scorer batch size (events per transaction)")
	light := fs.Int("light", 50, "single events published one at a time for the light-traffic latency")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	cfg.BatchSize = *batch
	res, err := Bench(ctx, cfg, *n, *light, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, `agentq bench: %d events per phase, scorer batch %d, database: %s
  publish (async, acked)           %9.0f events/s
  raw JetStream consume + ack      %9.0f events/s
  scorer consume → commit → ack    %9.0f events/s
  scorer / raw                     %9.1f %%
  light traffic, publish → quality.changed: p50 %s, p99 %s (%d events, one at a time)
`, res.Events, *batch, res.Database, res.PublishRate, res.RawRate, res.ScorerRate, 100*res.Ratio(),
		res.LightP50.Round(time.Microsecond), res.LightP99.Round(time.Microsecond), res.LightSamples)
	return nil
}

// Bench runs the load generator on an embedded NATS server and the
// configured database (the PGlite dev database when none is set).
func Bench(ctx context.Context, cfg config.Config, n, light int, log zerolog.Logger) (BenchResult, error) {
	res := BenchResult{Events: n, Database: "AGENTQ_DATABASE_URL"}
	dir, err := os.MkdirTemp("", "agentq-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	srv, err := broker.Start(broker.Options{Port: -1, StoreDir: dir, Log: zerolog.Nop()})
	if err != nil {
		return res, err
	}
	defer srv.Shutdown()
	cfg.NATSURL = srv.ClientURL()
	cfg.MetricsAddr = ""
	if cfg.DatabaseURL == "" {
		db, err := devdb.Start(ctx, devdb.Options{Dir: cfg.PGliteDir, Log: zerolog.Nop()})
		if err != nil {
			return res, err
		}
		defer db.Close()
		cfg.DatabaseURL = db.URL()
		res.Database = "PGlite dev database (WASM; measure on native Postgres for production figures)"
	}
	quiet := log.Level(zerolog.WarnLevel)
	d, err := app.Start(ctx, cfg, "bench", quiet)
	if err != nil {
		return res, err
	}
	defer d.Close(context.WithoutCancel(ctx))

	tenant := fmt.Sprintf("bench-%x", rand.Uint32())
	events := benchEvents(n, tenant)

	// Raw: the same messages into a stream of their own, then a plain pull
	// consumer acks them one by one.
	if _, err := d.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCH_RAW", Subjects: []string{"benchraw.>"}, Storage: jetstream.FileStorage}); err != nil {
		return res, err
	}
	msgs := make([]*nats.Msg, len(events))
	for i, ev := range events {
		if msgs[i], err = bus.Encode(ev); err != nil {
			return res, err
		}
		msgs[i].Subject = "benchraw." + msgs[i].Subject
	}
	start := time.Now()
	for _, m := range msgs {
		if _, err := d.JS.PublishMsgAsync(m); err != nil {
			return res, err
		}
	}
	<-d.JS.PublishAsyncComplete()
	res.PublishRate = float64(n) / time.Since(start).Seconds()
	raw, err := d.JS.CreateOrUpdateConsumer(ctx, "BENCH_RAW", jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4 * cfg.BatchSize})
	if err != nil {
		return res, err
	}
	var acked atomic.Int64
	done := make(chan struct{})
	start = time.Now()
	cc, err := raw.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		if acked.Add(1) == int64(n) {
			close(done)
		}
	}, jetstream.PullMaxMessages(2*cfg.BatchSize))
	if err != nil {
		return res, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		cc.Stop()
		return res, ctx.Err()
	}
	res.RawRate = float64(n) / time.Since(start).Seconds()
	cc.Stop()

	// Scorer: the same events as a backlog on AGENTQ, then the scorer
	// drains it; done when every event's effect is committed and acked.
	pub := d.Publisher
	for _, ev := range events {
		if _, err := pub.PublishAsync(ev); err != nil {
			return res, err
		}
	}
	if err := pub.Flush(ctx); err != nil {
		return res, err
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	runDone := make(chan error, 1)
	start = time.Now()
	go func() { runDone <- app.Run(sctx, d, quality.Consumer) }()
	if err := waitCommitted(ctx, d, tenant, int64(n)); err != nil {
		return res, err
	}
	res.ScorerRate = float64(n) / time.Since(start).Seconds()

	// Light traffic: one event at a time, publish → quality.changed seen.
	sub, err := d.NC.SubscribeSync("quality.changed." + tenant)
	if err != nil {
		return res, err
	}
	defer sub.Unsubscribe()
	var lat []time.Duration
	for i := range light {
		ev, _ := bus.NewEvent(quality.TypeToolExecuted, tenant, "agentq-bench", map[string]any{"tool_name": fmt.Sprintf("light_%d", i), "success": true})
		t0 := time.Now()
		if _, err := pub.Publish(ctx, ev); err != nil {
			return res, err
		}
		// Skip results of the backlog phase still arriving: wait for the
		// one this event caused.
		for {
			m, err := sub.NextMsg(10 * time.Second)
			if err != nil {
				return res, fmt.Errorf("light traffic: no quality.changed: %w", err)
			}
			if m.Header.Get("ce-causationid") == ev.ID() {
				break
			}
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(10 * time.Millisecond)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		res.LightP50 = lat[len(lat)/2]
		res.LightP99 = lat[min(len(lat)-1, len(lat)*99/100)]
		res.LightSamples = len(lat)
	}
	stop()
	<-runDone
	return res, nil
}

func waitCommitted(ctx context.Context, d *app.Deps, tenant string, n int64) error {
	for {
		var total int64
		if err := d.Pool.QueryRow(ctx, `SELECT coalesce(sum(total_calls), 0) FROM quality_metrics WHERE tenant_id = $1`, tenant).Scan(&total); err != nil {
			return err
		}
		if total >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func benchEvents(n int, tenant string) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i], _ = bus.NewEvent(quality.TypeToolExecuted, tenant, "agentq-bench", map[string]any{
			"tool_name": fmt.Sprintf("tool_%d", i%50), "success": i%7 != 0, "latency_ms": i % 900,
			"run_id": "bench", "step_idx": i % 10, "output": "ok",
		})
	}
	return evs
}
