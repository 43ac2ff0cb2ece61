package bus

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/schemas"
)

// call runs the handler on batch and isolates failures: when events of a
// batch fail for any reason but an outage, the failed ones are handed to
// the handler again in halves, down to single events, so one bad event (a
// NUL byte that fails the batch's transaction, a panic) is the only one
// that fails. Each call gets its own HandlerTimeout.
func (r *Runner) call(ctx context.Context, batch []*Delivery) []error {
	return isolate(ctx, r.handler, batch, r.opts.HandlerTimeout, r.log)
}

// Handle runs h on batch as a runner does: a panic becomes an outcome, and
// failed events are retried in halves down to single events so only the
// culprits fail. Each handler call is bounded by timeout. Tools that drive
// a handler without a runner (a rebuild) use it.
func Handle(ctx context.Context, h BatchHandler, batch []*Delivery, timeout time.Duration, log zerolog.Logger) []error {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return isolate(ctx, h, batch, timeout, log)
}

func isolate(ctx context.Context, h BatchHandler, batch []*Delivery, timeout time.Duration, log zerolog.Logger) []error {
	hctx, cancel := context.WithTimeout(ctx, timeout)
	errs := safeCall(hctx, h, batch, log)
	cancel()
	if len(batch) == 1 || ctx.Err() != nil {
		return errs
	}
	var suspects []int
	for i, err := range errs {
		if err != nil && !IsUnavailable(err) {
			suspects = append(suspects, i)
		}
	}
	switch {
	case len(suspects) == 0:
		return errs
	case len(suspects) < len(batch):
		// The handler told the failures apart: retry just those.
		sub := make([]*Delivery, len(suspects))
		for j, i := range suspects {
			sub[j] = batch[i]
		}
		for j, err := range isolate(ctx, h, sub, timeout, log) {
			errs[suspects[j]] = err
		}
		return errs
	}
	log.Debug().Int("batch", len(batch)).Err(errs[0]).Msg("batch failed; retrying it in halves to isolate the failing events")
	half := len(batch) / 2
	copy(errs[:half], isolate(ctx, h, batch[:half], timeout, log))
	copy(errs[half:], isolate(ctx, h, batch[half:], timeout, log))
	return errs
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
		r.forget(d)
		r.metrics.acks.Inc()
		r.eventLog(r.log.Debug(), d).Msg("ack")
	case IsPermanent(err):
		r.deadLetter(ctx, d, reasonCode(err), err)
	case IsUnavailable(err):
		delay := r.backoff(r.outages)
		r.nakExcused(d, delay)
		r.eventLog(r.log.Warn(), d).Err(err).Dur("retry_in", delay).Msg("nak: dependency unavailable")
	default:
		d.Failures++
		r.metrics.failures.Inc()
		if d.Failures >= r.opts.MaxDeliver {
			r.deadLetter(ctx, d, ReasonMaxDeliver, fmt.Errorf("failed %d times, last error: %w", d.Failures, err))
			return
		}
		delay := r.backoff(d.Failures)
		r.ledger.record(d.StreamSeq, d.Failures, d.excused)
		d.ledger = true
		_ = d.msg.NakWithDelay(delay)
		r.metrics.naks.Inc()
		r.eventLog(r.log.Warn(), d).Err(err).Dur("retry_in", delay).Int("failures", d.Failures).Msg("nak")
	}
}

// nakExcused hands an event back for a reason that is not its own (an
// outage, a shutdown, a dead letter that could not be stored): the
// delivery is recorded as excused, so it spends none of the event's budget.
func (r *Runner) nakExcused(d *Delivery, delay ...time.Duration) {
	d.excused++
	r.ledger.record(d.StreamSeq, d.Failures, d.excused)
	d.ledger = true
	if len(delay) > 0 && delay[0] > 0 {
		_ = d.msg.NakWithDelay(delay[0])
	} else {
		_ = d.msg.Nak()
	}
	r.metrics.naks.Inc()
}

// forget drops the ledger record of a settled event.
func (r *Runner) forget(d *Delivery) {
	if d.ledger {
		r.ledger.forget(d.StreamSeq)
		d.ledger = false
	}
}

// isUnknownType reports whether a validator said it has no schema for the
// event's type (an unknown type or type version), as opposed to data that
// does not match the schema.
func isUnknownType(err error) bool { return errors.Is(err, schemas.ErrUnknownType) }
