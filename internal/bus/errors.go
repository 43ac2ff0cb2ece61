package bus

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Reason codes of dead letters. They are the values of the reason label of
// the dead-letter metric and of the Agentq-Dlq-Reason-Code header.
const (
	ReasonDecode         = "decode"          // not a CloudEvent in either content mode
	ReasonOversize       = "oversize"        // payload over the configured limit
	ReasonTenantMismatch = "tenant_mismatch" // tenantid extension differs from the subject's tenant token, that token is not a tenant id, or Nats-Msg-Id is not "<tenant>:<id>" of the event
	ReasonUnknownType    = "unknown_type"    // no schema for the event type, or type does not match subject
	ReasonSchema         = "schema"          // data does not match the type's schema
	ReasonPermanent      = "permanent"       // the handler said the event can never succeed
	ReasonPanic          = "panic"           // the handler panicked on this event alone
	ReasonMaxDeliver     = "max_deliver"     // transient failures until the delivery limit
	ReasonUnsettled      = "unsettled"       // delivered again and again with no decision: the process died or hung holding it
)

// ReasonCodes lists every dead-letter reason code.
var ReasonCodes = []string{ReasonDecode, ReasonOversize, ReasonTenantMismatch, ReasonUnknownType,
	ReasonSchema, ReasonPermanent, ReasonPanic, ReasonMaxDeliver, ReasonUnsettled}

// permanentError marks an error that retrying cannot fix.
type permanentError struct {
	code string
	err  error
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the runner terminates the message and
// dead-letters it instead of retrying. Errors not marked are transient.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{code: ReasonPermanent, err: err}
}

// Permanentf is Permanent(fmt.Errorf(format, args...)).
func Permanentf(format string, args ...any) error {
	return Permanent(fmt.Errorf(format, args...))
}

// rejectf builds a permanent error with a specific reason code.
func rejectf(code, format string, args ...any) error {
	return &permanentError{code: code, err: fmt.Errorf(format, args...)}
}

// IsPermanent reports whether err (or anything it wraps) was marked permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// reasonCode returns the dead-letter reason code of a permanent error.
func reasonCode(err error) string {
	var p *permanentError
	if errors.As(err, &p) {
		return p.code
	}
	return ReasonPermanent
}

// unavailableError marks a dependency outage.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// Unavailable marks err as an outage of a dependency (the database is
// unreachable, say): the event is fine and must wait, however long the
// outage lasts. The runner naks it with backoff and pauses fetching, and
// such deliveries do not count toward the dead-letter limit.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// IsUnavailable reports whether err (or anything it wraps) was marked as a
// dependency outage.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}

// deferredError marks an event that must wait for a reason of its own.
type deferredError struct{ err error }

func (e *deferredError) Error() string { return e.err.Error() }
func (e *deferredError) Unwrap() error { return e.err }

// Deferred marks err as a reason for the event to wait that is neither its
// fault nor a dependency's: its tenant's state is being rebuilt, say. The
// runner hands the event back with a delay (growing with each deferral, as
// Backoff gives), spends none of its budget, and, unlike Unavailable, goes
// on fetching and handling other events at once: a deferral is about the
// event, not about the process's ability to work.
func Deferred(err error) error {
	if err == nil {
		return nil
	}
	return &deferredError{err: err}
}

// IsDeferred reports whether err (or anything it wraps) was marked Deferred.
func IsDeferred(err error) bool {
	var d *deferredError
	return errors.As(err, &d)
}

// timeoutError is the outcome of an event whose handler call ran out of its
// HandlerTimeout. It wraps context.DeadlineExceeded, not what the handler
// returned, so the handler's own classification (a database error on an
// expired context is Unavailable) does not decide: the runner does, from
// whether other events completed in time (see isolation.blame).
type timeoutError struct {
	after  time.Duration
	reason string // what the handler returned
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("handler call timed out after %s: %s", e.after, e.reason)
}
func (e *timeoutError) Unwrap() error { return context.DeadlineExceeded }

func isTimeout(err error) bool {
	var t *timeoutError
	return errors.As(err, &t)
}
