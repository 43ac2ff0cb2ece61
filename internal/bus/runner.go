package bus

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Delivery is one decoded, validated event in hand, with its delivery facts.
type Delivery struct {
	Event        event.Event
	Tenant       string
	Subject      string
	StreamSeq    uint64
	NumDelivered uint64
	msg          jetstream.Msg
}

// BatchHandler handles a batch of deliveries, in stream order, and returns
// one outcome per delivery, aligned with batch: nil when the event's effect
// is committed (or was already applied), an error marked Permanent when the
// event can never succeed, any other error to retry it later. A nil slice
// means every event succeeded. The handler must not ack: the runner does,
// after it returns. If ctx ends, the handler should stop and return errors.
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
	BatchSize int
	// Linger is how long to wait for more events after the first of a batch
	// arrives. Default 0: a batch is whatever is already buffered, so light
	// traffic adds no latency and heavy traffic fills batches by itself.
	Linger time.Duration
	// MaxDeliver is how many deliveries a failing event gets before it is
	// dead-lettered. Default 5.
	MaxDeliver int
	// AckWait is how long JetStream waits for an ack before redelivering.
	// Default 30s.
	AckWait time.Duration
	// MaxAckPending bounds unacked events across all copies. Default
	// max(1000, 4*BatchSize).
	MaxAckPending int
	// MaxPayload is the largest data accepted, in bytes. Default 1 MiB.
	MaxPayload int
	// Backoff gives the redelivery delay after the n-th failed delivery
	// (n from 1); the last entry repeats. Default 1s, 2s, 5s, 10s, 30s.
	Backoff []time.Duration
	// HandlerTimeout bounds one handler call. Default AckWait * 4/5.
	HandlerTimeout time.Duration
	// Grace bounds how long a stopping runner waits for the batch in hand.
	// Default 10s.
	Grace time.Duration
}

func (o RunnerOptions) withDefaults() RunnerOptions {
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = 5
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.MaxAckPending <= 0 {
		o.MaxAckPending = max(1000, 4*o.BatchSize)
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = 1 << 20
	}
	if len(o.Backoff) == 0 {
		o.Backoff = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second}
	}
	if o.HandlerTimeout <= 0 {
		o.HandlerTimeout = o.AckWait * 4 / 5
	}
	if o.Grace <= 0 {
		o.Grace = 10 * time.Second
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
// validates each message, calls the handler, and settles every message
// exactly once as Ack, NakWithDelay, or Term plus a dead letter.
type Runner struct {
	js      jetstream.JetStream
	schema  Validator
	handler BatchHandler
	opts    RunnerOptions
	log     zerolog.Logger
	metrics runnerMetrics
	// outages counts consecutive batches that failed with Unavailable; it
	// sets the nak delay and the pause before the next fetch.
	outages int
}

// runnerMetrics are one consumer's series of Metrics.
type runnerMetrics struct {
	acks, naks            prometheus.Counter
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
		handleTime:  metrics.handleTime.WithLabelValues(opts.Consumer),
		batchSize:   metrics.batchSize.WithLabelValues(opts.Consumer),
		deadLetters: map[string]prometheus.Counter{},
	}
	for _, r := range []string{ReasonDecode, ReasonOversize, ReasonTenantMismatch, ReasonUnknownType, ReasonSchema, ReasonPermanent, ReasonPanic, ReasonMaxDeliver} {
		obs.deadLetters[r] = metrics.deadLetters.WithLabelValues(opts.Consumer, r)
	}
	return &Runner{
		js: js, schema: schema, handler: handler, opts: opts, metrics: obs,
		log: log.With().Str("consumer", opts.Consumer).Logger(),
	}, nil
}

// EnsureConsumer creates or updates the durable consumer. The delivery
// limit is enforced by the runner, not by JetStream (MaxDeliver -1), so
// that a message whose dead letter could not be published is retried rather
// than stranded at the server's limit.
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
// hand within the grace period, naks what is buffered so another copy can
// take it, and returns. It returns an error only if it cannot start. If the
// durable consumer disappears (an operator's replay deletes it), Run
// recreates it and goes on from where the new consumer starts.
func (r *Runner) Run(ctx context.Context) error {
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
		if err != nil {
			if !first && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if done, err := r.consume(ctx, hard, cons); done || err != nil {
			return err
		}
		r.log.Warn().Msg("consumer went away; recreating it")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// consume runs one Consume session. It returns done when ctx ended, and
// done=false when the session closed under it.
func (r *Runner) consume(ctx, hard context.Context, cons jetstream.Consumer) (done bool, err error) {
	buffer := 2 * r.opts.BatchSize
	in := make(chan prepared, buffer)
	stopping := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		// Decoding and validation happen here, on the client's delivery
		// goroutine, so they overlap with the batch loop's database work.
		d, err := r.prepare(m)
		select {
		case <-stopping: // checked first: select picks among ready cases at random
			_ = m.Nak()
			return
		default:
		}
		select {
		case in <- prepared{d, err}:
		case <-stopping:
			_ = m.Nak()
		}
	},
		jetstream.PullMaxMessages(buffer),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			r.log.Warn().Err(err).Msg("consume")
		}))
	if err != nil {
		return false, fmt.Errorf("consume %s: %w", r.opts.Consumer, err)
	}
	r.log.Info().Strs("subjects", r.opts.Subjects).Int("batch", r.opts.BatchSize).Msg("consumer started")
	defer func() {
		cc.Stop()
		close(stopping)
		// Let a callback in flight finish before draining what it buffered.
		select {
		case <-cc.Closed():
		case <-time.After(time.Second):
		}
		r.nakBuffered(in)
	}()

	batch := make([]prepared, 0, r.opts.BatchSize)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			r.log.Info().Msg("consumer stopped")
			return true, nil
		case <-cc.Closed():
			return false, nil
		case p := <-in:
			batch = append(batch, p)
		}
		batch = r.fill(ctx, in, batch)
		if r.process(hard, batch) {
			// Pause so an outage is not hammered; the nakked events come
			// back after their delay.
			select {
			case <-ctx.Done():
			case <-time.After(r.backoff(uint64(r.outages))):
			}
		}
	}
}

// fill adds what is already buffered (and, with Linger, what arrives soon)
// to batch, up to BatchSize.
func (r *Runner) fill(ctx context.Context, in <-chan prepared, batch []prepared) []prepared {
	var linger <-chan time.Time
	if r.opts.Linger > 0 {
		t := time.NewTimer(r.opts.Linger)
		defer t.Stop()
		linger = t.C
	}
	for len(batch) < r.opts.BatchSize {
		select {
		case m := <-in:
			batch = append(batch, m)
			continue
		default:
		}
		if linger == nil {
			return batch
		}
		select {
		case m := <-in:
			batch = append(batch, m)
		case <-linger:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

func (r *Runner) nakBuffered(in <-chan prepared) {
	for {
		select {
		case p := <-in:
			_ = p.d.msg.Nak()
			r.metrics.naks.Inc()
		default:
			return
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
func (r *Runner) process(ctx context.Context, msgs []prepared) (down bool) {
	batch := make([]*Delivery, 0, len(msgs))
	for _, p := range msgs {
		if p.err != nil {
			r.deadLetter(ctx, p.d.msg, p.d, reasonCode(p.err), p.err)
			continue
		}
		batch = append(batch, p.d)
	}
	if len(batch) == 0 {
		return false
	}
	hctx, cancel := context.WithTimeout(ctx, r.opts.HandlerTimeout)
	defer cancel()
	start := time.Now()
	errs := r.call(hctx, batch)
	r.metrics.handleTime.Observe(time.Since(start).Seconds())
	r.metrics.batchSize.Observe(float64(len(batch)))
	down = true
	for _, err := range errs {
		down = down && IsUnavailable(err)
	}
	if down {
		r.outages++
	} else {
		r.outages = 0
	}
	for i, d := range batch {
		r.settle(ctx, d, errs[i])
	}
	return down
}

// prepare turns a message into a Delivery, or a permanent error with the
// reason it must be dead-lettered. The delivery is returned even on error
// so the dead letter can carry what was learnt.
func (r *Runner) prepare(m jetstream.Msg) (*Delivery, error) {
	d := &Delivery{Subject: m.Subject(), msg: m}
	if meta, err := m.Metadata(); err == nil {
		d.StreamSeq, d.NumDelivered = meta.Sequence.Stream, meta.NumDelivered
	}
	if n := len(m.Data()); n > r.opts.MaxPayload {
		return d, rejectf(ReasonOversize, "payload is %d bytes, over the %d-byte limit", n, r.opts.MaxPayload)
	}
	ev, err := Decode(m.Headers(), m.Data())
	if err != nil {
		return d, rejectf(ReasonDecode, "not a CloudEvent: %v", err)
	}
	d.Event = ev
	d.Tenant = Tenant(ev)
	subjectTenant := lastToken(d.Subject)
	switch {
	case d.Tenant == "":
		return d, rejectf(ReasonTenantMismatch, "missing %s extension (subject tenant is %q)", ExtTenant, subjectTenant)
	case d.Tenant != subjectTenant:
		return d, rejectf(ReasonTenantMismatch, "%s %q does not match subject tenant %q", ExtTenant, d.Tenant, subjectTenant)
	}
	want, err := SubjectFor(ev.Type(), d.Tenant)
	if err != nil {
		return d, rejectf(ReasonUnknownType, "%v", err)
	}
	if want != d.Subject {
		return d, rejectf(ReasonUnknownType, "type %s belongs on subject %s, not %s", ev.Type(), want, d.Subject)
	}
	if r.schema != nil {
		if err := r.schema.Validate(ev.Type(), ev.Data()); err != nil {
			return d, rejectf(ReasonSchema, "%v", err)
		}
	}
	return d, nil
}

func lastToken(subject string) string {
	for i := len(subject) - 1; i >= 0; i-- {
		if subject[i] == '.' {
			return subject[i+1:]
		}
	}
	return subject
}

// call runs the handler, recovering a panic. After a panic in a batch of
// several events it retries them one at a time, so only the event that
// panics is dead-lettered.
func (r *Runner) call(ctx context.Context, batch []*Delivery) []error {
	errs, panicked := r.safeCall(ctx, batch)
	if panicked == nil {
		return errs
	}
	if len(batch) == 1 {
		return []error{panicked}
	}
	r.log.Warn().Err(panicked).Int("batch", len(batch)).Msg("handler panicked; retrying the batch one event at a time")
	errs = make([]error, len(batch))
	for i := range batch {
		one, p := r.safeCall(ctx, batch[i:i+1])
		if p != nil {
			errs[i] = p
		} else {
			errs[i] = one[0]
		}
	}
	return errs
}

func (r *Runner) safeCall(ctx context.Context, batch []*Delivery) (errs []error, panicked error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("handler panic")
			panicked = rejectf(ReasonPanic, "handler panicked: %v", p)
		}
	}()
	errs = r.handler(ctx, batch)
	switch {
	case errs == nil:
		errs = make([]error, len(batch))
	case len(errs) != len(batch):
		err := fmt.Errorf("handler returned %d outcomes for %d events", len(errs), len(batch))
		errs = make([]error, len(batch))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs, nil
}

// settle is the one place where an outcome becomes an ack decision.
func (r *Runner) settle(ctx context.Context, d *Delivery, err error) {
	switch {
	case err == nil:
		if aerr := d.msg.Ack(); aerr != nil {
			// The effect is committed; a redelivery will be recognised by
			// the inbox and acked then.
			r.eventLog(r.log.Warn(), d).Err(aerr).Msg("ack failed")
			return
		}
		r.metrics.acks.Inc()
		r.eventLog(r.log.Debug(), d).Msg("ack")
	case IsPermanent(err):
		r.deadLetter(ctx, d.msg, d, reasonCode(err), err)
	case IsUnavailable(err):
		delay := r.backoff(uint64(r.outages))
		_ = d.msg.NakWithDelay(delay)
		r.metrics.naks.Inc()
		r.eventLog(r.log.Warn(), d).Err(err).Dur("retry_in", delay).Msg("nak: dependency unavailable")
	case d.NumDelivered >= uint64(r.opts.MaxDeliver):
		r.deadLetter(ctx, d.msg, d, ReasonMaxDeliver,
			fmt.Errorf("failed %d deliveries, last error: %w", d.NumDelivered, err))
	default:
		delay := r.backoff(d.NumDelivered)
		_ = d.msg.NakWithDelay(delay)
		r.metrics.naks.Inc()
		r.eventLog(r.log.Warn(), d).Err(err).Dur("retry_in", delay).Uint64("delivery", d.NumDelivered).Msg("nak")
	}
}

func (r *Runner) backoff(numDelivered uint64) time.Duration {
	i := int(numDelivered) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(r.opts.Backoff) {
		i = len(r.opts.Backoff) - 1
	}
	return r.opts.Backoff[i]
}

func (r *Runner) eventLog(e *zerolog.Event, d *Delivery) *zerolog.Event {
	return e.Str("event_id", d.Event.ID()).Str("type", d.Event.Type()).Str("tenant", d.Tenant).Str("subject", d.Subject)
}
