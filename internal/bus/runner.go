package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Delivery is one decoded, validated event in hand, with its delivery facts.
type Delivery struct {
	Event   event.Event
	Tenant  string
	Subject string
	// StreamSeq is the event's sequence in stream AGENTQ: its place in the
	// history, the same in every delivery and every replay.
	StreamSeq uint64
	// Time is when the stream stored the event. Decisions that depend on
	// time (expiry, recency) use it, not the clock, so a replay makes them
	// again identically.
	Time time.Time
	// NumDelivered counts deliveries, including this one. Failures counts
	// the earlier deliveries that failed for the event's own reasons;
	// outages, deferrals, ack-wait expiries and shutdowns are not
	// failures. It is 0 when the delivery ledger could not be read.
	NumDelivered uint64
	Failures     int

	msg jetstream.Msg
	// seq is the message's own sequence: what the delivery ledger and dead
	// letters name. It differs from StreamSeq only for a redriven copy,
	// which counts at its original's place (see HeaderRedriveSeq).
	seq uint64
	// rec is what the ledger says of the earlier deliveries, as this one
	// will leave it; known is false when the ledger could not be read (the
	// history is unknown and nothing may be written over it).
	rec   ledgerRecord
	known bool
	// stored: the ledger holds a record of this event, to drop when it is
	// settled. kept: handed back when the runner stops, not released yet.
	stored, kept bool
}

// BatchHandler handles a batch of deliveries, in stream order, and returns
// one outcome per delivery, aligned with batch: nil when the event's effect
// is committed (or was already applied), an error marked Permanent when the
// event can never succeed, Unavailable when a dependency is down, Deferred
// when the event must wait for a reason of its own (its tenant is being
// rebuilt), any other error to retry it later. A nil slice means every
// event succeeded. The handler must not ack: the runner does, after it
// returns. If ctx ends, the handler should stop and return errors: the
// runner, not the handler, tells a shutdown (its own context ended: the
// event is handed back, nothing spent) from a call that ran out of
// HandlerTimeout (the slow event's failure, or an outage when nothing
// completes in time). A batch is retried in parts, so a handler must
// tolerate seeing an event again (the inbox makes that safe).
type BatchHandler func(ctx context.Context, batch []*Delivery) []error

// HandlerFunc handles one event; see BatchHandler for the outcome contract.
type HandlerFunc func(ctx context.Context, d *Delivery) error

// Each adapts a per-event handler to a BatchHandler that handles the batch
// one event at a time.
func Each(h HandlerFunc) BatchHandler {
	return func(ctx context.Context, batch []*Delivery) []error {
		errs := make([]error, len(batch))
		for i, d := range batch {
			errs[i] = h(ctx, d)
		}
		return errs
	}
}

// RunnerOptions configures a Runner. Zero values take the documented defaults.
type RunnerOptions struct {
	// Consumer is the durable consumer name, shared by every copy of a
	// binary so JetStream spreads the work among them. Required.
	Consumer string
	// Subjects are the filter subjects, e.g. "tool.executed.*". Required.
	Subjects []string
	// BatchSize bounds the events handed to the handler at once. Default 100.
	// Each lane holds at most two batches: the one in hand and the next,
	// fetched while the first is worked on.
	BatchSize int
	// Lanes is how many batches this runner hands to the handler at once,
	// each lane with a fetcher of its own, exactly as that many copies of
	// the process would: one lane's database round trips overlap another's
	// decoding and settling. The handler must be safe for concurrent
	// calls, as it is for concurrent copies. Default 1.
	Lanes int
	// MaxDeliver is how many failed deliveries an event gets before it is
	// dead-lettered. Deliveries that end in an outage, a deferral, an
	// ack-wait expiry or a shutdown do not count. Default 5.
	MaxDeliver int
	// MaxUnsettled is how many deliveries may end with no decision at all
	// (the process died or hung holding the event) before the event is
	// dead-lettered without being handled again, so one message that kills
	// the process cannot do so forever. Only deliveries the ledger saw in
	// hand count (see LedgerBucket). Default 4*MaxDeliver.
	MaxUnsettled int
	// AckWait is how long JetStream waits for an ack before redelivering.
	// Messages held longer are kept alive with InProgress. Default 30s.
	AckWait time.Duration
	// MaxAckPending bounds unacked events across all copies. Default
	// max(1000, 4*BatchSize*Lanes).
	MaxAckPending int
	// MaxPayload is the largest data accepted, in bytes. Default 1 MiB.
	MaxPayload int
	// Backoff gives the redelivery delay after the n-th failure (n from 1),
	// or the n-th consecutive outage; the last entry repeats. Default 1s,
	// 2s, 5s, 10s, 30s.
	Backoff []time.Duration
	// HandlerTimeout bounds one handler call. It is independent of AckWait:
	// held messages are kept alive. A call that runs out of it is the slow
	// event's failure, found by splitting the batch, or an outage when
	// nothing completes in time. Default 30s.
	HandlerTimeout time.Duration
	// Grace bounds how long a stopping runner waits for the batch in hand.
	// Default 10s.
	Grace time.Duration
	// FetchWait is how long one pull request waits for messages. It bounds
	// how long a stopping runner waits for its last pull to end before it
	// hands back what it holds. Default 1s.
	FetchWait time.Duration
}

func (o RunnerOptions) withDefaults() RunnerOptions {
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = 5
	}
	if o.MaxUnsettled <= 0 {
		o.MaxUnsettled = 4 * o.MaxDeliver
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.Lanes <= 0 {
		o.Lanes = 1
	}
	if o.MaxAckPending <= 0 {
		o.MaxAckPending = max(1000, 4*o.BatchSize*o.Lanes)
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = 1 << 20
	}
	if len(o.Backoff) == 0 {
		o.Backoff = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second}
	}
	if o.HandlerTimeout <= 0 {
		o.HandlerTimeout = 30 * time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 10 * time.Second
	}
	if o.FetchWait <= 0 {
		o.FetchWait = time.Second
	}
	return o
}

func (o RunnerOptions) validate() error {
	var errs []error
	if o.Consumer == "" {
		errs = append(errs, errors.New("consumer name is required"))
	}
	if len(o.Subjects) == 0 {
		errs = append(errs, errors.New("at least one filter subject is required"))
	}
	return errors.Join(errs...)
}

// Runner runs one durable pull consumer: it fetches batches, decodes and
// validates each message, calls the handler, isolates failing events, and
// settles every message exactly once as Ack, NakWithDelay, or Term plus a
// dead letter. Every message it holds is kept alive until settled.
type Runner struct {
	js      jetstream.JetStream
	schema  Validator
	handler BatchHandler
	opts    RunnerOptions
	log     zerolog.Logger
	metrics runnerMetrics
	ledger  *ledger
	// outages counts consecutive batches that failed with Unavailable; it
	// sets the nak delay and the pause before the next fetch.
	outages int
	// alive: the handler completed an event since a lone event's timeout
	// was last judged (see isolation).
	alive bool
	// naks wait for the batch's ledger writes (sendNaks).
	naks []queuedNak
	// maxAge is stream AGENTQ's, read when a session starts: how long an
	// original lives, so a dead letter that refers to it lives no longer.
	maxAge time.Duration
}

// runnerMetrics are one consumer's series of Metrics.
type runnerMetrics struct {
	acks, naks, failures  prometheus.Counter
	handleTime, batchSize prometheus.Observer
	deadLetters           map[string]prometheus.Counter // by reason code
}

// NewRunner returns a runner for handler. schema validates every incoming
// event; metrics may be nil.
func NewRunner(js jetstream.JetStream, schema Validator, handler BatchHandler, opts RunnerOptions, log zerolog.Logger, metrics *Metrics) (*Runner, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("runner options: %w", err)
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	// Resolve this consumer's series once, off the per-event path; creating
	// them also exports zeros from the start, for dashboards and alerts.
	obs := runnerMetrics{
		acks:        metrics.acks.WithLabelValues(opts.Consumer),
		naks:        metrics.naks.WithLabelValues(opts.Consumer),
		failures:    metrics.failures.WithLabelValues(opts.Consumer),
		handleTime:  metrics.handleTime.WithLabelValues(opts.Consumer),
		batchSize:   metrics.batchSize.WithLabelValues(opts.Consumer),
		deadLetters: map[string]prometheus.Counter{},
	}
	for _, r := range ReasonCodes {
		obs.deadLetters[r] = metrics.deadLetters.WithLabelValues(opts.Consumer, r)
	}
	r := &Runner{js: js, schema: schema, handler: handler, opts: opts, metrics: obs}
	return r.withLog(log.With().Str("consumer", opts.Consumer).Logger()), nil
}

// withLog returns a runner with r's consumer, handler and series, logging
// to log, and state of its own: a ledger (and its cache), no outages, no
// queued naks.
func (r *Runner) withLog(log zerolog.Logger) *Runner {
	return &Runner{
		js: r.js, schema: r.schema, handler: r.handler, opts: r.opts, metrics: r.metrics, log: log,
		ledger: &ledger{js: r.js, consumer: r.opts.Consumer, log: log},
	}
}

// lane returns a runner for lane i of r: the same consumer, handler and
// series, with state of its own, so lanes share nothing a lane changes.
func (r *Runner) lane(i int) *Runner {
	return r.withLog(r.log.With().Int("lane", i).Logger())
}

// EnsureConsumer creates or updates the durable consumer. The delivery
// limit is enforced by the runner, not by JetStream (MaxDeliver -1): the
// runner counts failures, not deliveries, and a message whose dead letter
// could not be stored is retried rather than stranded at the server's limit.
func (r *Runner) EnsureConsumer(ctx context.Context) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		Durable:        r.opts.Consumer,
		Description:    "agentq " + r.opts.Consumer,
		FilterSubjects: r.opts.Subjects,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        r.opts.AckWait,
		MaxDeliver:     -1,
		MaxAckPending:  r.opts.MaxAckPending,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	var cons jetstream.Consumer
	err := retryJS(ctx, func(ctx context.Context) error {
		var err error
		cons, err = r.js.CreateOrUpdateConsumer(ctx, StreamName, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s: %w", r.opts.Consumer, err)
	}
	return cons, nil
}

// Run consumes until ctx ends, then stops fetching, finishes the batch in
// hand within the grace period, waits for its last pull to end
// (FetchWait), naks what it holds so another copy takes it at once, and
// returns. It returns an error only if it cannot start. If the durable
// consumer disappears (an operator deleted it), Run recreates it.
//
// With Lanes above 1, Run runs that many lanes and returns when all have
// returned; one that cannot start stops the others.
func (r *Runner) Run(ctx context.Context) error {
	if r.opts.Lanes <= 1 {
		return r.run(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error // the lane that could not start; the others were stopped
	)
	for i := range r.opts.Lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.lane(i).run(ctx); err != nil {
				once.Do(func() { first = err })
				cancel()
			}
		}()
	}
	wg.Wait()
	return first
}

func (r *Runner) run(ctx context.Context) error {
	if err := r.ledger.open(ctx); err != nil {
		return err
	}
	// hard ends the handler's work Grace after ctx ends.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	go func() {
		select {
		case <-ctx.Done():
		case <-hard.Done():
			return
		}
		t := time.NewTimer(r.opts.Grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancelHard()
		case <-hard.Done():
		}
	}()
	for first := true; ; first = false {
		cons, err := r.EnsureConsumer(ctx)
		if err == nil {
			err = r.session(ctx, cons)
		}
		if err != nil {
			if !first && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if done := r.consume(ctx, hard, cons); done {
			return nil
		}
		r.log.Warn().Msg("consumer went away; recreating it")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// session learns what a consume session needs of the consumer and the
// stream: the consumer's creation time names its ledger records (see
// ledger.epoch), the stream's max age bounds its dead letters' life.
func (r *Runner) session(ctx context.Context, cons jetstream.Consumer) error {
	r.ledger.epoch = strconv.FormatInt(cons.CachedInfo().Created.UnixNano(), 10)
	var s jetstream.Stream
	err := retryJS(ctx, func(ctx context.Context) error {
		var err error
		s, err = r.js.Stream(ctx, StreamName)
		return err
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", StreamName, err)
	}
	r.maxAge = s.CachedInfo().Config.MaxAge
	return nil
}

// consume runs the batch loop on cons until ctx ends (done) or the consumer
// disappears (not done). A fetcher keeps the next batch ready while this
// one is handled; everything either holds is kept alive until settled.
func (r *Runner) consume(ctx, hard context.Context, cons jetstream.Consumer) (done bool) {
	f := newFetcher(ctx, r, cons)
	go f.run()
	r.log.Info().Strs("subjects", r.opts.Subjects).Int("batch", r.opts.BatchSize).Msg("consumer started")
	defer f.stop()

	batch := make([]prepared, 0, r.opts.BatchSize)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			r.log.Info().Msg("consumer stopped")
			return true
		case <-f.gone:
			return false
		case p := <-f.out:
			batch = append(batch, p)
		}
	fill:
		for len(batch) < r.opts.BatchSize {
			select {
			case p := <-f.out:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		if r.process(hard, batch, f) {
			// Pause so an outage is not hammered; the nakked events come
			// back after their delay.
			select {
			case <-ctx.Done():
			case <-time.After(r.backoff(r.outages)):
			}
		}
	}
}

// prepared is a message decoded and validated, or the reason it is not.
type prepared struct {
	d   *Delivery
	err error
}

// process dead-letters the invalid messages of a batch, hands the valid
// events to the handler and settles every message. It reports whether the
// whole batch failed because a dependency is down.
func (r *Runner) process(ctx context.Context, msgs []prepared, f *fetcher) (down bool) {
	defer func() {
		for _, p := range msgs {
			if !p.d.kept {
				f.release(p.d.msg)
			}
		}
	}()
	batch := make([]*Delivery, 0, len(msgs))
	for _, p := range msgs {
		if r.skipped(p) {
			continue
		}
		if p.err != nil {
			r.deadLetter(ctx, p.d, reasonCode(p.err), p.err)
			continue
		}
		batch = append(batch, p.d)
	}
	if len(batch) > 0 {
		r.markInHand(batch)
		start := time.Now()
		errs := r.call(ctx, batch)
		r.metrics.handleTime.Observe(time.Since(start).Seconds())
		r.metrics.batchSize.Observe(float64(len(batch)))
		// All outages: a dependency is down. A shutdown is not an outage,
		// and deferrals say nothing about dependencies either way.
		down = ctx.Err() == nil
		up := false
		for _, err := range errs {
			down = down && IsUnavailable(err)
			up = up || (!IsUnavailable(err) && !IsDeferred(err))
		}
		switch {
		case down:
			r.outages++
			r.alive = false
		case up:
			r.outages = 0
		}
		for i, d := range batch {
			r.settle(ctx, d, errs[i], f)
		}
	}
	r.sendNaks()
	return down
}

// markInHand records that these redeliveries are in hand, before the
// handler sees them, so a process that dies holding one leaves the
// evidence (see LedgerBucket). First deliveries are not marked: that would
// cost a write per event, and an unmarked death only delays an unsettled
// dead letter by one delivery.
func (r *Runner) markInHand(batch []*Delivery) {
	if r.ledger.down() {
		return // no mark could be stored: no evidence either way
	}
	marked := false
	for _, d := range batch {
		if d.NumDelivered > 1 && d.known {
			rec := d.rec
			rec.inHand = d.NumDelivered
			r.ledger.record(d.seq, rec)
			d.stored, marked = true, true
		}
	}
	if marked {
		r.ledger.flush()
	}
}

func (r *Runner) backoff(n int) time.Duration {
	i := n - 1
	if i < 0 {
		i = 0
	}
	if i >= len(r.opts.Backoff) {
		i = len(r.opts.Backoff) - 1
	}
	return r.opts.Backoff[i]
}

func (r *Runner) eventLog(e *zerolog.Event, d *Delivery) *zerolog.Event {
	id := d.Event.ID()
	if id == "" {
		id = d.rawID()
	}
	return e.Str("event_id", id).Str("type", d.Event.Type()).Str("tenant", d.Tenant).
		Str("subject", d.Subject).Uint64("stream_seq", d.StreamSeq)
}
