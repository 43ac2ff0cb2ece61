package bus

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/schemas"
)

// call runs the handler on batch and isolates failures (see isolation).
// Each call gets its own HandlerTimeout.
func (r *Runner) call(ctx context.Context, batch []*Delivery) []error {
	s := isolation{ctx: ctx, h: r.handler, timeout: r.opts.HandlerTimeout, log: r.log, alive: &r.alive}
	return s.run(batch)
}

// Handle runs h on batch as a runner does: a panic becomes an outcome, and
// failed events are retried in halves down to single events so only the
// culprits fail; a call that runs out of time is blamed on its slow event
// when other events complete in time, else it is an outage. Each handler
// call is bounded by timeout. Tools that drive a handler without a runner
// (a rebuild) use it.
func Handle(ctx context.Context, h BatchHandler, batch []*Delivery, timeout time.Duration, log zerolog.Logger) []error {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	var alive bool
	s := isolation{ctx: ctx, h: h, timeout: timeout, log: log, alive: &alive}
	return s.run(batch)
}

// isolation runs a batch through a handler and narrows its failures down
// to the events that cause them.
type isolation struct {
	ctx     context.Context
	h       BatchHandler
	timeout time.Duration
	log     zerolog.Logger
	// alive says the handler has completed an event since a lone event's
	// timeout was last judged: the only evidence there is that a lone
	// event's timeout is its own and not a hung dependency's.
	alive *bool
}

// run calls the handler on batch and completes the outcomes. When events
// of a batch fail for any reason but an outage or a deferral, the failed
// ones are handed to the handler again in halves, down to single events,
// so one bad event (a NUL byte that fails the batch's transaction, a
// panic) is the only one that fails. A call that runs out of time is
// judged by blame.
func (s *isolation) run(batch []*Delivery) []error {
	alive := *s.alive
	errs, slow := s.call(batch)
	if slow {
		// A batch is split to find out what completes in time; a lone
		// event can only be judged by what the handler did before.
		return s.blame(batch, errs, alive || len(batch) > 1, len(batch) == 1)
	}
	return s.judge(batch, errs)
}

// call runs the handler once within the timeout. slow reports that the
// call ran out of time while ctx was alive; the outcomes it then gave
// (other than a success, a permanent failure or a deferral, which are
// decisions about the event) become timeouts, whatever the handler made of
// the expired context.
func (s *isolation) call(batch []*Delivery) (errs []error, slow bool) {
	hctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	errs = safeCall(hctx, s.h, batch, s.log)
	slow = errors.Is(hctx.Err(), context.DeadlineExceeded) && s.ctx.Err() == nil
	cancel()
	for i, err := range errs {
		switch {
		case err == nil:
			*s.alive = true
		case slow && !IsPermanent(err) && !IsDeferred(err):
			errs[i] = &timeoutError{after: s.timeout, reason: err.Error()}
		}
	}
	return errs, slow
}

// judge completes the outcomes of a call that ended in time.
func (s *isolation) judge(batch []*Delivery, errs []error) []error {
	if len(batch) == 1 || s.ctx.Err() != nil {
		return errs
	}
	var suspects []int
	for i, err := range errs {
		if err != nil && !IsUnavailable(err) && !IsDeferred(err) {
			suspects = append(suspects, i)
		}
	}
	switch {
	case len(suspects) == 0:
		return errs
	case len(suspects) < len(batch):
		// The handler told the failures apart: retry just those.
		for j, err := range s.run(pick(batch, suspects)) {
			errs[suspects[j]] = err
		}
		return errs
	}
	s.log.Debug().Int("batch", len(batch)).Err(errs[0]).Msg("batch failed; retrying it in halves to isolate the failing events")
	half := len(batch) / 2
	copy(errs[:half], s.run(batch[:half]))
	copy(errs[half:], s.run(batch[half:]))
	return errs
}

// blame judges a call that ran out of time: one slow event's fault, or a
// hung dependency's (a database cut away without a reset makes every call
// wait out its timeout)? The handler cannot tell, since an expired
// context looks the same either way; what completes in time can. The
// timed-out events are split and each part called: when one part
// completes an event, the dependency answers and the slow part is split
// again, down to the event whose timeout is then its own failure; when no
// part does, the dependency is hung and the timeouts are an outage. A lone
// event is judged by alive alone (byFlag): its timeout is a failure only
// if the handler completed an event since the last such judgement, so a
// hung dependency costs at most one event one failure, and a slow event
// alone is counted again once other events have gone through.
func (s *isolation) blame(batch []*Delivery, errs []error, alive, byFlag bool) []error {
	if s.ctx.Err() != nil {
		return errs
	}
	var timedOut []int
	for i, err := range errs {
		if isTimeout(err) && !IsUnavailable(err) {
			timedOut = append(timedOut, i)
		}
	}
	switch {
	case len(timedOut) == 0:
		return errs
	case !alive:
		for _, i := range timedOut {
			errs[i] = Unavailable(errs[i])
		}
		*s.alive = false
		return errs
	case len(batch) == 1:
		if byFlag {
			*s.alive = false
		}
		return errs
	}
	sub := pick(batch, timedOut)
	parts := [][]*Delivery{sub}
	if len(sub) > 1 {
		parts = [][]*Delivery{sub[:len(sub)/2], sub[len(sub)/2:]}
	}
	// The other events of the batch completing is evidence too; call every
	// part before judging any, so each is judged by all of it.
	evidence := false
	for _, err := range errs {
		evidence = evidence || err == nil
	}
	outs, slows := make([][]error, len(parts)), make([]bool, len(parts))
	for i, p := range parts {
		outs[i], slows[i] = s.call(p)
		evidence = evidence || answered(outs[i], slows[i])
	}
	s.log.Debug().Int("batch", len(batch)).Int("timed_out", len(sub)).Bool("dependency_answers", evidence).Msg("handler call timed out; finding the slow event")
	j := 0
	for i, p := range parts {
		var r []error
		if slows[i] {
			r = s.blame(p, outs[i], evidence, false)
		} else {
			r = s.judge(p, outs[i])
		}
		for _, err := range r {
			errs[timedOut[j]] = err
			j++
		}
	}
	return errs
}

// answered reports whether a call showed the handler's dependencies
// working: it completed an event, or ended in time with an outcome other
// than an outage.
func answered(errs []error, slow bool) bool {
	for _, err := range errs {
		if err == nil || (!slow && !IsUnavailable(err)) {
			return true
		}
	}
	return false
}

func pick(batch []*Delivery, idx []int) []*Delivery {
	out := make([]*Delivery, len(idx))
	for j, i := range idx {
		out[j] = batch[i]
	}
	return out
}

// safeCall runs the handler once, turning a panic into a panic outcome for
// every event of the batch (call then isolates the culprit).
func safeCall(ctx context.Context, h BatchHandler, batch []*Delivery, log zerolog.Logger) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Int("batch", len(batch)).Msg("handler panic")
			err := rejectf(ReasonPanic, "handler panicked: %v", p)
			errs = make([]error, len(batch))
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	errs = h(ctx, batch)
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
	return errs
}

// settle is the one place where an outcome becomes an ack decision. ctx is
// the runner's own: when it has ended, the handler gave the event up
// because the runner is stopping.
func (r *Runner) settle(ctx context.Context, d *Delivery, err error, f *fetcher) {
	switch {
	case err == nil:
		if aerr := d.msg.Ack(); aerr != nil {
			// The effect is committed; a redelivery will be recognised by
			// the inbox and acked then.
			r.eventLog(r.log.Warn(), d).Err(aerr).Msg("ack failed")
			return
		}
		r.forget(d)
		r.metrics.acks.Inc()
		r.eventLog(r.log.Debug(), d).Msg("ack")
	case ctx.Err() != nil && (!IsPermanent(err) || errors.Is(err, context.Canceled)):
		// A shutdown, whatever the handler made of its cancelled context:
		// not the event's failure. Handed back once the last pull has
		// ended, so another copy takes it at once.
		r.excuse(d)
		d.kept = true
		f.handBackAtStop(d.msg)
		r.eventLog(r.log.Info(), d).Err(err).Msg("handed back: shutting down")
	case IsPermanent(err):
		r.deadLetter(ctx, d, reasonCode(err), err)
	case IsUnavailable(err):
		delay := r.backoff(r.outages)
		r.excuse(d)
		r.nakLater(d, delay)
		r.eventLog(r.log.Warn(), d).Err(err).Dur("retry_in", delay).Msg("nak: dependency unavailable")
	case IsDeferred(err):
		r.excuse(d)
		delay := r.backoff(d.rec.excused)
		r.nakLater(d, delay)
		r.eventLog(r.log.Debug(), d).Err(err).Dur("retry_in", delay).Msg("nak: deferred")
	default:
		d.Failures++
		r.metrics.failures.Inc()
		if d.Failures >= r.opts.MaxDeliver {
			r.deadLetter(ctx, d, ReasonMaxDeliver, fmt.Errorf("failed %d times, last error: %w", d.Failures, err))
			return
		}
		delay := r.backoff(d.Failures)
		if d.known {
			d.rec.failures = d.Failures
			r.store(d)
		}
		r.nakLater(d, delay)
		r.eventLog(r.log.Warn(), d).Err(err).Dur("retry_in", delay).Int("failures", d.Failures).Msg("nak")
	}
}

// excuse records a delivery handed back for a reason not the event's own
// (an outage, a deferral, a shutdown, a dead letter that could not be
// stored): it spends none of the event's budget.
func (r *Runner) excuse(d *Delivery) {
	d.rec.excused++
	if d.known {
		r.store(d)
	}
}

// store writes the event's record, which also clears its in-hand mark.
// Only when the ledger could be read: a record built on an unknown history
// would overwrite the real one.
func (r *Runner) store(d *Delivery) {
	r.ledger.record(d.seq, d.rec)
	d.stored = true
}

// nakLater queues a nak for after the ledger writes of the batch have
// landed (sendNaks): the next delivery, in whichever copy, must read them.
func (r *Runner) nakLater(d *Delivery, delay time.Duration) {
	r.naks = append(r.naks, queuedNak{d.msg, delay})
}

type queuedNak struct {
	m     jetstream.Msg
	delay time.Duration
}

// sendNaks flushes the ledger, then sends the queued naks.
func (r *Runner) sendNaks() {
	r.ledger.flush()
	for _, n := range r.naks {
		_ = n.m.NakWithDelay(n.delay)
		r.metrics.naks.Inc()
	}
	clear(r.naks)
	r.naks = r.naks[:0]
}

// forget drops the ledger record of a settled event.
func (r *Runner) forget(d *Delivery) {
	if d.stored {
		r.ledger.forget(d.seq)
		d.stored = false
	}
}

// isUnknownType reports whether a validator said it has no schema for the
// event's type (an unknown type or type version), as opposed to data that
// does not match the schema.
func isUnknownType(err error) bool { return errors.Is(err, schemas.ErrUnknownType) }
