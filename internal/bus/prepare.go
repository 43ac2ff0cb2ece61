package bus

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
)

// prepare turns a message into a Delivery, or a permanent error with the
// reason it must be dead-lettered. The delivery is returned even on error
// so the dead letter can carry what was learnt.
func (r *Runner) prepare(m jetstream.Msg) (*Delivery, error) {
	d := &Delivery{Subject: m.Subject(), msg: m, known: true}
	if meta, err := m.Metadata(); err == nil {
		d.StreamSeq, d.NumDelivered, d.Time = meta.Sequence.Stream, meta.NumDelivered, meta.Timestamp
		d.seq = d.StreamSeq
	}
	to, err := notFor(r.opts.Consumer, m)
	if err != nil {
		return d, err // skip: acked without effect (redrive.go)
	}
	if d.NumDelivered > 1 {
		// A redelivery: learn how the earlier deliveries ended. Checked
		// before decoding, so a message that kills the process is
		// dead-lettered before it can do so again.
		rec, found, err := r.ledger.get(d.seq)
		switch {
		case err != nil:
			// Unknown, which is not "none": handle it, and overwrite
			// nothing the ledger may still hold.
			d.known = false
		case found:
			if rec.inHand != 0 && rec.inHand < d.NumDelivered {
				// Marked in hand and never decided: the process
				// holding it died or hung.
				rec.unsettled++
			}
			rec.inHand = 0
			d.rec, d.stored, d.Failures = rec, true, rec.failures
		}
		if d.rec.unsettled >= r.opts.MaxUnsettled {
			return d, rejectf(ReasonUnsettled, "delivered %d times and %d of those deliveries ended with no decision (the process holding it died or hung): not handled again", d.NumDelivered, d.rec.unsettled)
		}
	}
	if err := check(d, m, r.schema, r.opts.MaxPayload); err != nil {
		return d, err
	}
	atOriginal(d, r.opts.Consumer, to, m)
	return d, nil
}

// Read decodes and validates a message exactly as a runner does, for tools
// that read the stream without one (a rebuild). On error the delivery
// still carries what was learnt, and the error's reason code is that of
// the dead letter a runner would have written (see ReasonOf).
func Read(m jetstream.Msg, schema Validator, maxPayload int) (*Delivery, error) {
	d := &Delivery{Subject: m.Subject(), msg: m}
	if meta, err := m.Metadata(); err == nil {
		d.StreamSeq, d.NumDelivered, d.Time = meta.Sequence.Stream, meta.NumDelivered, meta.Timestamp
		d.seq = d.StreamSeq
	}
	if maxPayload <= 0 {
		maxPayload = 1 << 20
	}
	return d, check(d, m, schema, maxPayload)
}

// ReasonOf returns the dead-letter reason code of a permanent error.
func ReasonOf(err error) string { return reasonCode(err) }

func check(d *Delivery, m jetstream.Msg, schema Validator, maxPayload int) error {
	if n := len(m.Data()); n > maxPayload {
		return rejectf(ReasonOversize, "payload is %d bytes, over the %d-byte limit", n, maxPayload)
	}
	ev, err := Decode(m.Headers(), m.Data())
	if err != nil {
		return rejectf(ReasonDecode, "not a CloudEvent: %v", err)
	}
	d.Event = ev
	d.Tenant = Tenant(ev)
	subjectTenant := lastToken(d.Subject)
	switch {
	case !ValidTenant(subjectTenant):
		return rejectf(ReasonTenantMismatch, "subject tenant %q is not a tenant id ([a-z0-9_-]{1,64})", loggable(subjectTenant))
	case d.Tenant == "":
		return rejectf(ReasonTenantMismatch, "missing %s extension (subject tenant is %q)", ExtTenant, subjectTenant)
	case d.Tenant != subjectTenant:
		return rejectf(ReasonTenantMismatch, "%s %q does not match subject tenant %q", ExtTenant, loggable(d.Tenant), subjectTenant)
	}
	// JetStream's duplicate window is stream-wide: a message id that is not
	// this event's own "<tenant>:<id>" could suppress another tenant's
	// event (or another event of this tenant) published after it. Absent
	// is fine: not every publisher sets it.
	if id := headerValue(m.Headers(), headerMsgID); id != "" {
		if want := MsgID(d.Tenant, ev.ID()); id != want {
			return rejectf(ReasonTenantMismatch, "%s %s is not %s, the tenant and id of the event", headerMsgID, quote(id), quote(want))
		}
	}
	want, err := SubjectFor(ev.Type(), d.Tenant)
	if err != nil {
		return rejectf(ReasonUnknownType, "%v", err)
	}
	if want != d.Subject {
		return rejectf(ReasonUnknownType, "type %s belongs on subject %s, not %s", ev.Type(), want, d.Subject)
	}
	if schema != nil {
		if err := schema.Validate(ev.Type(), ev.Data()); err != nil {
			if isUnknownType(err) {
				return rejectf(ReasonUnknownType, "%v", err)
			}
			return rejectf(ReasonSchema, "%v", err)
		}
	}
	return nil
}

func lastToken(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}

// loggable makes an untrusted value safe for a log line or a header value:
// printable, valid UTF-8, at most 256 bytes.
func loggable(s string) string {
	const limit = 256
	if len(s) > limit {
		s = s[:limit]
		for !utf8.ValidString(s) && len(s) > 0 {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
}

// rawID is the ce-id header as received, made loggable: what names an event
// that could not be decoded. Computed only when needed, off the hot path.
func (d *Delivery) rawID() string {
	if d.msg == nil {
		return ""
	}
	return loggable(headerValue(d.msg.Headers(), headerPrefix+"id"))
}
