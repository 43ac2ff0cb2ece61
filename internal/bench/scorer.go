package bench

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/quality"
)

// ScorerOptions configure Scorer.
type ScorerOptions struct {
	Events int // events per phase
	Rounds int // rounds of raw and scorer measurements; medians are reported
	Light  int // single events published one at a time for the light-traffic latency
	// Diagnostics, when not nil, receives a line per scorer round: handler
	// time per batch.
	Diagnostics io.Writer
}

// ScorerResult is what one scorer bench run measured. Rates are medians
// over the rounds; each round measures raw and scorer back to back, so the
// two see the same machine conditions.
type ScorerResult struct {
	Events      int
	Rounds      int
	BatchSize   int       // the scorer's, events per transaction
	PublishRate float64   // events/s, async publish with acks
	RawRate     float64   // events/s, raw JetStream consume + ack of a backlog
	ScorerRate  float64   // events/s, scorer consume + validate + commit + ack of the same backlog
	RoundRatios []float64 // scorer/raw per round
	// CeilingRate is what Postgres alone sustains for the scorer's shape of
	// work: per batch, one transaction inserting the batch's inbox rows and
	// upserting its targets, sent as one pipelined round trip; no NATS, no
	// decoding. CeilingRatios are scorer/ceiling per round.
	CeilingRate   float64
	CeilingRatios []float64
	// End to end: publishing and consuming at once, from the first publish
	// to the last ack (raw) or commit (scorer).
	RawE2ERate    float64
	ScorerE2ERate float64
	LightP50      time.Duration
	LightP99      time.Duration
	LightSamples  int
	Database      string
}

// Ratio is the scorer's rate as a share of raw JetStream consume+ack.
func (r ScorerResult) Ratio() float64 { return r.ScorerRate / r.RawRate }

// CeilingRatio is the scorer's rate as a share of the Postgres ceiling.
func (r ScorerResult) CeilingRatio() float64 { return r.ScorerRate / r.CeilingRate }

// Print writes r as the table `agentq bench` prints.
func (r ScorerResult) Print(w io.Writer) {
	percents := func(xs []float64) string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[i] = fmt.Sprintf("%.1f%%", 100*x)
		}
		return strings.Join(out, " ")
	}
	fmt.Fprintf(w, `agentq bench: %d events per phase, %d rounds (medians), scorer batch %d, database: %s
  publish (async, acked)                   %9.0f events/s
  draining a backlog (consume only):
    raw JetStream consume + ack            %9.0f events/s
    scorer consume → commit → ack          %9.0f events/s
    scorer / raw                           %9.1f %%   (per round: %s)
    Postgres ceiling: inbox + upsert only  %9.0f events/s   (one pipelined transaction per batch, no NATS)
    scorer / ceiling                       %9.1f %%   (per round: %s)
  end to end, publishing and consuming at once (first publish → last ack / commit):
    raw JetStream publish + consume + ack  %9.0f events/s
    scorer published → committed           %9.0f events/s
    scorer / raw                           %9.1f %%
  light traffic, publish → quality.changed: p50 %s, p99 %s (%d events, one at a time)
`, r.Events, r.Rounds, r.BatchSize, r.Database, r.PublishRate, r.RawRate, r.ScorerRate, 100*r.Ratio(),
		percents(r.RoundRatios), r.CeilingRate, 100*r.CeilingRatio(), percents(r.CeilingRatios), r.RawE2ERate, r.ScorerE2ERate, 100*r.ScorerE2ERate/r.RawE2ERate, r.LightP50.Round(time.Microsecond), r.LightP99.Round(time.Microsecond), r.LightSamples)
}

// Scorer runs the load generator on an embedded NATS server and cfg's
// database (the PGlite dev database when none is set), with the scorer
// committing batches of cfg.BatchSize.
func Scorer(ctx context.Context, cfg config.Config, o ScorerOptions, log zerolog.Logger) (ScorerResult, error) {
	n, rounds, light := o.Events, o.Rounds, o.Light
	diag := stdlog.New(io.Discard, "bench: ", 0)
	if o.Diagnostics != nil {
		diag.SetOutput(o.Diagnostics)
	}
	res := ScorerResult{Events: n, Rounds: rounds, BatchSize: cfg.BatchSize, Database: "AGENTQ_DATABASE_URL"}
	cfg, pglite, stop, err := embedded(ctx, cfg)
	defer stop()
	if err != nil {
		return res, err
	}
	if pglite {
		res.Database = "PGlite dev database (WASM; measure on native Postgres for production figures)"
	}
	quiet := log.Level(zerolog.WarnLevel)
	d, err := app.Start(ctx, cfg, "bench", quiet)
	if err != nil {
		return res, err
	}
	defer d.Close(context.WithoutCancel(ctx))

	// Raw: the same messages as the scorer gets, in a stream of their own,
	// consumed by a plain pull consumer that acks one by one.
	if _, err := d.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCH_RAW", Subjects: []string{"benchraw.>"}, Storage: jetstream.FileStorage}); err != nil {
		return res, err
	}
	if err := publishRaw(d, benchEvents(n, "raw"), "benchraw."); err != nil {
		return res, err
	}
	<-d.JS.PublishAsyncComplete()

	var raws, scorers, ceilings, rawE2Es, scorerE2Es []float64
	for r := range rounds {
		ceiling, err := ceilingRound(ctx, d, n, cfg.BatchSize, r)
		if err != nil {
			return res, err
		}
		raw, err := rawRound(ctx, d, cfg, n, r)
		if err != nil {
			return res, err
		}
		tenant := fmt.Sprintf("bench-%d-%x", r, rand.Uint32())
		pubRate, scorer, err := scorerRound(ctx, d, benchEvents(n, tenant), tenant, diag)
		if err != nil {
			return res, err
		}
		rawE2E, err := rawE2ERound(ctx, d, cfg, n, r)
		if err != nil {
			return res, err
		}
		tenant = fmt.Sprintf("bench-e2e-%d-%x", r, rand.Uint32())
		scorerE2E, err := scorerE2ERound(ctx, d, benchEvents(n, tenant), tenant)
		if err != nil {
			return res, err
		}
		raws, scorers, ceilings = append(raws, raw), append(scorers, scorer), append(ceilings, ceiling)
		res.CeilingRatios = append(res.CeilingRatios, scorer/ceiling)
		rawE2Es, scorerE2Es = append(rawE2Es, rawE2E), append(scorerE2Es, scorerE2E)
		res.RoundRatios = append(res.RoundRatios, scorer/raw)
		res.PublishRate = max(res.PublishRate, pubRate)
	}
	res.RawRate, res.ScorerRate, res.CeilingRate = median(raws), median(scorers), median(ceilings)
	res.RawE2ERate, res.ScorerE2ERate = median(rawE2Es), median(scorerE2Es)

	lat, err := lightRound(ctx, d, light)
	if err != nil {
		return res, err
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		res.LightP50 = lat[len(lat)/2]
		res.LightP99 = lat[min(len(lat)-1, len(lat)*99/100)]
		res.LightSamples = len(lat)
	}
	return res, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// acker acks every message of cons until n are acked; done closes then.
func acker(cons jetstream.Consumer, cfg config.Config, n int) (done <-chan struct{}, stop func(), err error) {
	var acked atomic.Int64
	ch := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		if acked.Add(1) == int64(n) {
			close(ch)
		}
	}, jetstream.PullMaxMessages(2*cfg.BatchSize))
	if err != nil {
		return nil, nil, err
	}
	return ch, cc.Stop, nil
}

// rateWhen returns n over the time since start once done closes.
func rateWhen(ctx context.Context, done <-chan struct{}, n int, start time.Time) (float64, error) {
	select {
	case <-done:
		return float64(n) / time.Since(start).Seconds(), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// publishRaw publishes events asynchronously, as agentq encodes them, on
// their subjects under prefix, so they land in a bench stream, not AGENTQ.
func publishRaw(d *app.Deps, events []event.Event, prefix string) error {
	for _, ev := range events {
		m, err := bus.Encode(ev)
		if err != nil {
			return err
		}
		m.Subject = prefix + m.Subject
		// Wait while the async window is full, as bus.Publisher does: on a
		// loaded machine the client's default 200 ms stall fails the run.
		if _, err := d.JS.PublishMsgAsync(m, jetstream.WithStallWait(10*time.Second)); err != nil {
			return err
		}
	}
	return nil
}

// runScorer runs the scorer on d until the returned stop is called.
func runScorer(ctx context.Context, d *app.Deps) (stop func()) {
	sctx, cancel := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- app.Run(sctx, d, quality.Consumer) }()
	return func() { cancel(); <-runDone }
}

func rawConsumer(ctx context.Context, d *app.Deps, cfg config.Config, stream, durable string) (jetstream.Consumer, error) {
	return d.JS.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4 * cfg.BatchSize,
	})
}

// rawRound drains the BENCH_RAW backlog with a new consumer and returns the
// consume+ack rate.
func rawRound(ctx context.Context, d *app.Deps, cfg config.Config, n, round int) (float64, error) {
	cons, err := rawConsumer(ctx, d, cfg, "BENCH_RAW", fmt.Sprintf("raw-%d", round))
	if err != nil {
		return 0, err
	}
	start := time.Now()
	done, stop, err := acker(cons, cfg, n)
	if err != nil {
		return 0, err
	}
	defer stop()
	return rateWhen(ctx, done, n, start)
}

// rawE2ERound publishes n messages while a plain pull consumer acks them,
// and returns n over the time from the first publish to the last ack.
func rawE2ERound(ctx context.Context, d *app.Deps, cfg config.Config, n, round int) (float64, error) {
	stream := fmt.Sprintf("BENCH_E2E_%d", round)
	prefix := fmt.Sprintf("benche2e%d.", round)
	if _, err := d.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ">"}, Storage: jetstream.FileStorage}); err != nil {
		return 0, err
	}
	cons, err := rawConsumer(ctx, d, cfg, stream, "raw")
	if err != nil {
		return 0, err
	}
	done, stop, err := acker(cons, cfg, n)
	if err != nil {
		return 0, err
	}
	defer stop()
	start := time.Now()
	if err := publishRaw(d, benchEvents(n, "rawe2e"), prefix); err != nil {
		return 0, err
	}
	return rateWhen(ctx, done, n, start)
}

// scorerE2ERound publishes events while the scorer runs and returns their
// number over the time from the first publish to the last commit.
func scorerE2ERound(ctx context.Context, d *app.Deps, events []event.Event, tenant string) (float64, error) {
	defer runScorer(ctx, d)()
	start := time.Now()
	for _, ev := range events {
		if _, err := d.Publisher.PublishAsync(ev); err != nil {
			return 0, err
		}
	}
	if err := waitCommitted(ctx, d, tenant, int64(len(events))); err != nil {
		return 0, err
	}
	return float64(len(events)) / time.Since(start).Seconds(), nil
}

// scorerRound publishes events as a backlog while no scorer runs, then
// starts one and measures until every effect is committed and acked.
func scorerRound(ctx context.Context, d *app.Deps, events []event.Event, tenant string, diag *stdlog.Logger) (pubRate, rate float64, err error) {
	start := time.Now()
	for _, ev := range events {
		if _, err := d.Publisher.PublishAsync(ev); err != nil {
			return 0, 0, err
		}
	}
	if err := d.Publisher.Flush(ctx); err != nil {
		return 0, 0, err
	}
	pubRate = float64(len(events)) / time.Since(start).Seconds()
	start = time.Now()
	sum0, n0 := handleTime(d)
	stop := runScorer(ctx, d)
	err = waitCommitted(ctx, d, tenant, int64(len(events)))
	elapsed := time.Since(start)
	rate = float64(len(events)) / elapsed.Seconds()
	stop()
	if sum, n := handleTime(d); n > n0 {
		diag.Printf("scorer round: %d batches, handler %.1f ms per batch, %.0f%% of the wall time", n-n0,
			1000*(sum-sum0)/float64(n-n0), 100*(sum-sum0)/elapsed.Seconds())
	}
	return pubRate, rate, err
}

// lightRound publishes single events one at a time and measures publish →
// quality.changed received.
func lightRound(ctx context.Context, d *app.Deps, light int) ([]time.Duration, error) {
	tenant := fmt.Sprintf("bench-light-%x", rand.Uint32())
	sub, err := d.NC.SubscribeSync("quality.changed." + tenant)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	defer runScorer(ctx, d)()
	var lat []time.Duration
	for i := range light {
		ev, _ := bus.NewEvent(quality.TypeToolExecuted, tenant, "agentq-bench", map[string]any{"tool_name": fmt.Sprintf("light_%d", i), "success": true})
		t0 := time.Now()
		if _, err := d.Publisher.Publish(ctx, ev); err != nil {
			return nil, err
		}
		for {
			m, err := sub.NextMsg(10 * time.Second)
			if err != nil {
				return nil, fmt.Errorf("light traffic: no quality.changed: %w", err)
			}
			if m.Header.Get("ce-causationid") == ev.ID() {
				break
			}
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(10 * time.Millisecond)
	}
	return lat, nil
}

// ceilingRound is the Postgres ceiling of the scorer's work for n events
// (UUIDv7 ids, as the events have) in batches of batch over the bench's 50
// targets: per batch, BEGIN, the inbox
// insert, one upsert per target and COMMIT travel as one pipelined round
// trip on one connection. It is the nearest physical anchor for the
// scorer's database work: no NATS, no decoding, no reading state back.
func ceilingRound(ctx context.Context, d *app.Deps, n, batch, round int) (float64, error) {
	tenant := fmt.Sprintf("bench-ceiling-%d-%x", round, rand.Uint32())
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	start := time.Now()
	for i := 0; i < n; i += batch {
		size := min(batch, n-i)
		tenants, ids := make([]string, size), make([]string, size)
		calls := map[string]int64{}
		for j := range size {
			id, err := uuid.NewV7() // the same kind of id as the scorer's events
			if err != nil {
				return 0, err
			}
			tenants[j], ids[j] = tenant, id.String()
			calls[fmt.Sprintf("tool_%d", (i+j)%50)]++
		}
		keys, counts := make([]string, 0, len(calls)), make([]int64, 0, len(calls))
		for k, c := range calls {
			keys, counts = append(keys, k), append(counts, c)
		}
		b := &pgx.Batch{}
		b.Queue(`BEGIN`)
		b.Queue(`INSERT INTO inbox (consumer, tenant_id, event_id)
			SELECT 'bench-ceiling', t, e FROM unnest($1::text[], $2::text[]) AS u(t, e) ON CONFLICT DO NOTHING`, tenants, ids)
		b.Queue(`INSERT INTO quality_metrics AS m (tenant_id, target, target_key, total_calls)
			SELECT $1, 'tool', k, c FROM unnest($2::text[], $3::bigint[]) AS u(k, c)
			ON CONFLICT (tenant_id, target, target_key) DO UPDATE SET total_calls = m.total_calls + excluded.total_calls`, tenant, keys, counts)
		b.Queue(`COMMIT`)
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return 0, fmt.Errorf("ceiling: %w", err)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// handleTime reads the runner's handler-time histogram: total seconds and
// batches so far.
func handleTime(d *app.Deps) (float64, uint64) {
	mfs, _ := d.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "agentq_batch_handle_seconds" {
			var sum float64
			var n uint64
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
				n += m.GetHistogram().GetSampleCount()
			}
			return sum, n
		}
	}
	return 0, 0
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
