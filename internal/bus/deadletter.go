package bus

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Dead-letter headers, added to the original message's headers.
const (
	HeaderDLQReason     = "Agentq-Dlq-Reason"
	HeaderDLQReasonCode = "Agentq-Dlq-Reason-Code"
	HeaderDLQConsumer   = "Agentq-Dlq-Consumer"
	HeaderDLQSubject    = "Agentq-Dlq-Subject"
	HeaderDLQStreamSeq  = "Agentq-Dlq-Stream-Seq"
	// HeaderDLQPlaceSeq and HeaderDLQPlaceTime say where the event counts
	// in the history (its first occurrence's sequence and stream time):
	// the message's own, or for a redriven copy its original's.
	HeaderDLQPlaceSeq   = "Agentq-Dlq-Place-Seq"
	HeaderDLQPlaceTime  = "Agentq-Dlq-Place-Time"
	HeaderDLQDeliveries = "Agentq-Dlq-Deliveries"
	HeaderDLQTime       = "Agentq-Dlq-Time"
	// HeaderDLQPayload is "reference" when the dead letter does not carry
	// the original payload and headers (they did not fit beside the
	// Agentq-Dlq-* headers): the original is the message at
	// Agentq-Dlq-Stream-Seq in stream AGENTQ. Such a dead letter expires
	// no later than its original under AGENTQ's max age (a per-message
	// TTL), so a reference never outlives what it refers to.
	HeaderDLQPayload = "Agentq-Dlq-Payload"
	// HeaderDLQEventID and HeaderDLQEventType name the event when it could
	// be decoded, so listings need not decode the payload.
	HeaderDLQEventID   = "Agentq-Dlq-Event-Id"
	HeaderDLQEventType = "Agentq-Dlq-Event-Type"
)

// DLQPayloadReference is the value of HeaderDLQPayload for a dead letter
// that refers to its original instead of copying it.
const DLQPayloadReference = "reference"

// DLQSubject is where consumer's dead letters of messages from subject go.
func DLQSubject(consumer, subject string) string {
	return dlqPrefix + "." + consumer + "." + subject
}

// deadLetter publishes the original message with the reason to AGENTQ_DLQ,
// then terminates it. When the original and the Agentq-Dlq-* headers do not
// fit in one message, the dead letter refers to the original (it is in
// AGENTQ at its stream sequence) instead of copying it, so a dead letter
// can always be stored; it then lives only as long as the original has
// left under AGENTQ's max age. If it still cannot be stored, the message
// is nakked instead (an excused delivery): it is retried later, never lost.
func (r *Runner) deadLetter(ctx context.Context, d *Delivery, code string, cause error) {
	m := d.msg
	dl := nats.NewMsg(DLQSubject(r.opts.Consumer, m.Subject()))
	reason := loggable(strings.Join(strings.Fields(cause.Error()), " "))
	if len(reason) > 1024 {
		reason = reason[:1024] + "…"
	}
	dl.Header.Set(HeaderDLQReason, reason)
	dl.Header.Set(HeaderDLQReasonCode, code)
	dl.Header.Set(HeaderDLQConsumer, r.opts.Consumer)
	dl.Header.Set(HeaderDLQSubject, m.Subject())
	dl.Header.Set(HeaderDLQStreamSeq, strconv.FormatUint(d.seq, 10))
	// Where the event counts in the history: a redrive puts its copy there.
	dl.Header.Set(HeaderDLQPlaceSeq, strconv.FormatUint(d.StreamSeq, 10))
	if !d.Time.IsZero() {
		dl.Header.Set(HeaderDLQPlaceTime, d.Time.UTC().Format(time.RFC3339Nano))
	}
	dl.Header.Set(HeaderDLQDeliveries, strconv.FormatUint(d.NumDelivered, 10))
	dl.Header.Set(HeaderDLQTime, time.Now().UTC().Format(time.RFC3339Nano))
	if id := d.Event.ID(); id != "" {
		dl.Header.Set(HeaderDLQEventID, loggable(id))
		dl.Header.Set(HeaderDLQEventType, loggable(d.Event.Type()))
	} else if raw := d.rawID(); raw != "" {
		dl.Header.Set(HeaderDLQEventID, raw)
	}
	const margin = 1024 // the subject, the protocol line and the header block's framing
	size := wireHeaderBytes(dl.Header) + wireHeaderBytes(m.Headers()) + len(m.Data()) + margin
	var ttl time.Duration // 0: the DLQ's own limits
	if limit := r.js.Conn().MaxPayload(); limit > 0 && int64(size) > limit {
		dl.Header.Set(HeaderDLQPayload, DLQPayloadReference)
		ttl = r.referenceTTL(d)
	} else {
		for k, v := range m.Headers() {
			if k == headerMsgID {
				continue
			}
			dl.Header[k] = append([]string(nil), v...)
		}
		dl.Data = m.Data()
	}
	id := "dlq-" + r.opts.Consumer + "-" + strconv.FormatUint(d.seq, 10) + "-" + strconv.FormatUint(d.NumDelivered, 10)

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(id)}
	if ttl > 0 {
		opts = append(opts, jetstream.WithMsgTTL(ttl))
	}
	_, err := r.js.PublishMsg(pctx, dl, opts...)
	if ttl > 0 && isTTLDisabled(err) {
		// A DLQ stream not (yet) updated by EnsureStreams: storing the dead
		// letter matters more than its expiry.
		r.eventLog(r.log.Warn(), d).Msg("AGENTQ_DLQ does not allow per-message TTLs (run any agentq binary to update it); this dead letter by reference may outlive its original")
		_, err = r.js.PublishMsg(pctx, dl, jetstream.WithMsgID(id))
	}
	if err != nil {
		r.excuse(d)
		r.nakLater(d, r.backoff(d.rec.excused))
		r.eventLog(r.log.Error(), d).Err(err).Str("reason_code", code).Msg("dead letter not stored; nak to retry")
		return
	}
	_ = m.TermWithReason(code)
	r.forget(d)
	c, ok := r.metrics.deadLetters[code]
	if !ok {
		c = r.metrics.deadLetters[ReasonPermanent]
	}
	c.Inc()
	r.eventLog(r.log.Error(), d).Str("reason_code", code).Str("reason", reason).Uint64("delivery", d.NumDelivered).Msg("dead-lettered")
}

// referenceTTL is how long a dead letter that refers to d's original may
// live: what is left of the original's life under AGENTQ's max age, in
// whole seconds rounded down (the unit of a message TTL), at least one.
// 0 when AGENTQ keeps events forever.
func (r *Runner) referenceTTL(d *Delivery) time.Duration {
	if r.maxAge <= 0 {
		return 0
	}
	left := (r.maxAge - time.Since(d.Time)).Truncate(time.Second)
	return max(left, time.Second)
}

// isTTLDisabled reports the error of a stream that does not allow
// per-message TTLs.
func isTTLDisabled(err error) bool {
	var jerr jetstream.JetStreamError
	return errors.As(err, &jerr) && jerr.APIError() != nil && jerr.APIError().ErrorCode == jsErrMessageTTLDisabled
}

// jsErrMessageTTLDisabled is the server's JSMessageTTLDisabledErr.
const jsErrMessageTTLDisabled jetstream.ErrorCode = 10166

func wireHeaderBytes(h nats.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // ": " and CRLF
		}
	}
	return n
}

// DeadLetter is a message read back from AGENTQ_DLQ.
type DeadLetter struct {
	Subject    string // original subject
	Consumer   string
	ReasonCode string
	Reason     string
	Deliveries uint64
	StreamSeq  uint64
	EventID    string // "" when the message was not a readable CloudEvent
	EventType  string
	// ByReference is set when Header and Data do not hold the original:
	// read it from stream AGENTQ at StreamSeq.
	ByReference bool
	Header      nats.Header // original headers plus the Agentq-Dlq-* ones
	Data        []byte      // original payload
}

// ParseDeadLetter reads a dead letter's facts from its headers.
func ParseDeadLetter(h nats.Header, data []byte) DeadLetter {
	n, _ := strconv.ParseUint(h.Get(HeaderDLQDeliveries), 10, 64)
	s, _ := strconv.ParseUint(h.Get(HeaderDLQStreamSeq), 10, 64)
	return DeadLetter{
		Subject: h.Get(HeaderDLQSubject), Consumer: h.Get(HeaderDLQConsumer),
		ReasonCode: h.Get(HeaderDLQReasonCode), Reason: h.Get(HeaderDLQReason),
		Deliveries: n, StreamSeq: s, Header: h, Data: data,
		EventID: h.Get(HeaderDLQEventID), EventType: h.Get(HeaderDLQEventType),
		ByReference: h.Get(HeaderDLQPayload) == DLQPayloadReference,
	}
}
