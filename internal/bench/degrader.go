package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/webhook"
)

// DegraderOptions configure Degrader.
type DegraderOptions struct {
	Tools   int           // tools of the tenant, each with a history of successful calls
	Samples int           // tools broken one after another (at most half the tools: the share cap)
	Gap     time.Duration // pause between calls: light traffic
}

// DegraderResult is what agentq bench degrader measured.
type DegraderResult struct {
	Tools, Samples int
	Gap            time.Duration
	// Quarantine: from publishing the tool.executed that completes the
	// evidence to tool.quarantined arriving at a subscriber; Webhook: to
	// its POST arriving at a local receiver.
	QuarantineP50, QuarantineP99 time.Duration
	WebhookP50, WebhookP99       time.Duration
	// Anchor: one event published and received by a plain JetStream pull
	// consumer, the floor of any consumer's latency.
	AnchorP50, AnchorP99 time.Duration
	// Commits: two single-row transactions one after the other on the same
	// database, timed between the samples: the path's two commits (store
	// the call, then the decision) with nothing of agentq around them.
	CommitsP50, CommitsP99 time.Duration
	Database               string
}

// Print writes r as the lines `agentq bench degrader` prints.
func (r DegraderResult) Print(w io.Writer) {
	fmt.Fprintf(w, "degrader, %d tools, %d broken one at a time, %s between calls (%s)\n", r.Tools, r.Samples, r.Gap, r.Database)
	fmt.Fprintf(w, "  tool.executed → tool.quarantined on the stream  p50 %6.2f ms  p99 %6.2f ms\n", ms(r.QuarantineP50), ms(r.QuarantineP99))
	fmt.Fprintf(w, "  tool.executed → webhook POST received           p50 %6.2f ms  p99 %6.2f ms\n", ms(r.WebhookP50), ms(r.WebhookP99))
	fmt.Fprintf(w, "  anchor: publish → plain pull consumer           p50 %6.2f ms  p99 %6.2f ms\n", ms(r.AnchorP50), ms(r.AnchorP99))
	fmt.Fprintf(w, "  anchor: two single-row commits, between samples p50 %6.2f ms  p99 %6.2f ms\n", ms(r.CommitsP50), ms(r.CommitsP99))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func quantiles(xs []time.Duration) (p50, p99 time.Duration) {
	if len(xs) == 0 {
		return 0, 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2], xs[min(len(xs)-1, len(xs)*99/100)]
}

// Degrader measures the degrader end to end on an embedded NATS server and
// cfg's database (the PGlite dev database when none is set).
func Degrader(ctx context.Context, cfg config.Config, o DegraderOptions, log zerolog.Logger) (DegraderResult, error) {
	tools, samples, gap := o.Tools, o.Samples, o.Gap
	res := DegraderResult{Tools: tools, Samples: samples, Gap: gap, Database: "AGENTQ_DATABASE_URL"}
	cfg, pglite, stop, err := embedded(ctx, cfg)
	defer stop()
	if err != nil {
		return res, err
	}
	if pglite {
		res.Database = "PGlite dev database (measure on native Postgres for production figures)"
	}

	// A local webhook receiver: when each alert's POST arrives.
	var mu sync.Mutex
	posted := map[string]time.Time{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if _, ok := posted[r.Header.Get("webhook-id")]; !ok {
			posted[r.Header.Get("webhook-id")] = time.Now()
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	tenant := fmt.Sprintf("bench-deg-%x", rand.Uint32())
	cfg.Alerts.WebhookURL = "http://" + ln.Addr().String() + "/hook;tenant=" + tenant

	// Error level: every tool the bench breaks is a health transition,
	// which the degrader logs at warn; hundreds of them would bury the
	// figures.
	d, err := app.Start(ctx, cfg, "bench", log.Level(zerolog.ErrorLevel))
	if err != nil {
		return res, err
	}
	defer d.Close(context.WithoutCancel(ctx))
	rctx, cancel := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- app.Run(rctx, d, health.Consumer, webhook.Consumer) }()
	defer func() { cancel(); <-runDone }()

	// Every tool has a healthy history; the degrader folds it first.
	pub := d.Publisher
	for i := 0; i < tools; i++ {
		for range 30 {
			ev, err := bus.NewEvent(health.TypeToolExecuted, tenant, "bench", map[string]any{"tool_name": fmt.Sprintf("tool-%05d", i), "success": true})
			if err != nil {
				return res, err
			}
			if _, err := pub.PublishAsync(ev); err != nil {
				return res, err
			}
		}
	}
	if err := pub.Flush(ctx); err != nil {
		return res, err
	}
	if err := waitFolded(ctx, d, tenant, tools); err != nil {
		return res, err
	}

	arrived := make(chan *nats.Msg, 16)
	sub, err := d.NC.ChanSubscribe("tool.quarantined."+tenant, arrived)
	if err != nil {
		return res, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if _, err := d.Pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_commit_anchor (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return res, err
	}
	var toQuarantine, toWebhook, commits []time.Duration
	for s := 0; s < samples; s++ {
		tool := fmt.Sprintf("tool-%05d", s)
		sent := map[string]time.Time{}
		var got *nats.Msg
		for got == nil {
			ev, err := bus.NewEvent(health.TypeToolExecuted, tenant, "bench", map[string]any{"tool_name": tool, "success": false})
			if err != nil {
				return res, err
			}
			sent[ev.ID()] = time.Now()
			if _, err := pub.Publish(ctx, ev); err != nil {
				return res, err
			}
			select {
			case got = <-arrived:
			case <-time.After(gap):
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
		at := time.Now()
		q, err := bus.Decode(got.Header, got.Data)
		if err != nil {
			return res, err
		}
		start, ok := sent[bus.Causation(q)]
		if !ok {
			return res, fmt.Errorf("tool.quarantined %s names cause %s, not one of the calls", q.ID(), bus.Causation(q))
		}
		toQuarantine = append(toQuarantine, at.Sub(start))
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			pt, ok := posted[q.ID()]
			mu.Unlock()
			if ok {
				toWebhook = append(toWebhook, pt.Sub(start))
				break
			}
			if time.Now().After(deadline) {
				return res, fmt.Errorf("no webhook POST for %s within 10s", q.ID())
			}
			time.Sleep(time.Millisecond)
		}
		start = time.Now()
		for range 2 {
			if _, err := d.Pool.Exec(ctx, `INSERT INTO bench_commit_anchor DEFAULT VALUES`); err != nil {
				return res, err
			}
		}
		commits = append(commits, time.Since(start))
	}
	res.QuarantineP50, res.QuarantineP99 = quantiles(toQuarantine)
	res.WebhookP50, res.WebhookP99 = quantiles(toWebhook)
	anchor, err := anchorLatency(ctx, d, samples)
	if err != nil {
		return res, err
	}
	res.AnchorP50, res.AnchorP99 = quantiles(anchor)
	res.CommitsP50, res.CommitsP99 = quantiles(commits)
	return res, nil
}

// waitFolded waits until the degrader has folded the tools' histories.
func waitFolded(ctx context.Context, d *app.Deps, tenant string, tools int) error {
	for {
		var n int
		if err := d.Pool.QueryRow(ctx, `SELECT count(*) FROM health_tools WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
			return err
		}
		var pending bool
		if err := d.Pool.QueryRow(ctx, `SELECT coalesce(bool_or(stored_through > evaluated_through), false) FROM health_tenants WHERE tenant_id = $1`, tenant).Scan(&pending); err != nil {
			return err
		}
		if n == tools && !pending {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// anchorLatency publishes n events one at a time to a stream of their own
// and times each until a plain pull consumer holds it.
func anchorLatency(ctx context.Context, d *app.Deps, n int) ([]time.Duration, error) {
	if _, err := d.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCH_ANCHOR", Subjects: []string{"benchanchor.>"}, Storage: jetstream.FileStorage}); err != nil {
		return nil, err
	}
	cons, err := d.JS.CreateOrUpdateConsumer(ctx, "BENCH_ANCHOR", jetstream.ConsumerConfig{Durable: "anchor", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return nil, err
	}
	got := make(chan struct{}, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) { _ = m.Ack(); got <- struct{}{} })
	if err != nil {
		return nil, err
	}
	defer cc.Stop()
	var out []time.Duration
	for range n {
		start := time.Now()
		if _, err := d.JS.Publish(ctx, "benchanchor.x", []byte(`{}`)); err != nil {
			return nil, err
		}
		select {
		case <-got:
			out = append(out, time.Since(start))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}
