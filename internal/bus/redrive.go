package bus

import (
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// HeaderRedriveFor names the consumer a redriven dead letter is for
// (agentq dlq --redrive sets it to the consumer that dead-lettered it). The
// copy is stored in stream AGENTQ like any message, so every consumer whose
// filter matches is delivered it; only the named one handles it. Without
// the header a redrive would reach every consumer a second time: work for
// nothing at best, a new dead letter of another consumer at worst.
const HeaderRedriveFor = "Agentq-Redrive-For"

// HeaderRedriveSeq and HeaderRedriveTime carry, on a redriven copy, the
// sequence and stream time of the event's first occurrence. For the
// consumer it is for, the copy counts there (Delivery.StreamSeq and Time),
// as it does in a rebuild, which meets the original at that place: so
// state that depends on order is the same live and rebuilt.
const (
	HeaderRedriveSeq  = "Agentq-Redrive-Seq"
	HeaderRedriveTime = "Agentq-Redrive-Time"
)

// atOriginal places a redriven copy for consumer at its original's
// sequence and time, when it carries them and they come before it.
// to is the message's redriveFor, read once by the caller.
func atOriginal(d *Delivery, consumer, to string, m jetstream.Msg) {
	if to != consumer {
		return
	}
	h := m.Headers()
	seq, err := strconv.ParseUint(headerValue(h, HeaderRedriveSeq), 10, 64)
	if err != nil || seq == 0 || seq >= d.StreamSeq {
		return
	}
	d.StreamSeq = seq
	if t, err := time.Parse(time.RFC3339Nano, headerValue(h, HeaderRedriveTime)); err == nil {
		d.Time = t
	}
}

// ErrNotForConsumer is what reading a message gives when it is a redrive
// for another consumer: it is acked without effect, and a rebuild skips it.
var ErrNotForConsumer = errors.New("a redriven dead letter of another consumer")

// redriveFor returns the consumer a redriven message is for, or "" when
// the message is not a redrive (every consumer handles it).
func redriveFor(h nats.Header) string { return headerValue(h, HeaderRedriveFor) }

// notFor returns the consumer m is a redrive for ("" when it is not one),
// and ErrNotForConsumer when that is another than consumer.
func notFor(consumer string, m jetstream.Msg) (string, error) {
	to := redriveFor(m.Headers())
	if to != "" && to != consumer {
		return to, ErrNotForConsumer
	}
	return to, nil
}

// ReadAs is Read for consumer's rebuild: a redrive for another consumer is
// not read (ErrNotForConsumer), as a runner of consumer acks it unread.
func ReadAs(consumer string, m jetstream.Msg, schema Validator, maxPayload int) (*Delivery, error) {
	to, err := notFor(consumer, m)
	if err != nil {
		return &Delivery{Subject: m.Subject(), msg: m}, err
	}
	d, err := Read(m, schema, maxPayload)
	if err == nil {
		atOriginal(d, consumer, to, m)
	}
	return d, err
}

// skipped acks p's message without effect when it is a redrive for another
// consumer, and reports whether it was.
func (r *Runner) skipped(p prepared) bool {
	if !errors.Is(p.err, ErrNotForConsumer) {
		return false
	}
	if err := p.d.msg.Ack(); err != nil {
		// Redelivered, and skipped again.
		r.log.Warn().Err(err).Str("subject", p.d.Subject).Uint64("stream_seq", p.d.StreamSeq).Msg("ack of another consumer's redrive failed")
		return true
	}
	r.forget(p.d)
	r.metrics.acks.Inc()
	r.log.Debug().Str("subject", p.d.Subject).Uint64("stream_seq", p.d.StreamSeq).
		Str("redrive_for", loggable(redriveFor(p.d.msg.Headers()))).Msg("ack without effect: a redrive for another consumer")
	return true
}
