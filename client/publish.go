package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/schemas"
)

// PublishOption sets an attribute of one published event.
type PublishOption func(*event.Event)

// WithEventID sets the event id (default: a new UUIDv7). Publishing again
// with the same id, within JetStream's duplicate window (2 minutes by
// default), stores nothing new: use it to retry safely.
func WithEventID(id string) PublishOption { return func(e *event.Event) { e.SetID(id) } }

// WithSource sets the CloudEvents source (default Config.Source).
func WithSource(source string) PublishOption { return func(e *event.Event) { e.SetSource(source) } }

// WithTime sets the event's time (default now).
func WithTime(t time.Time) PublishOption { return func(e *event.Event) { e.SetTime(t.UTC()) } }

// WithSubject sets the CloudEvents subject attribute, free text.
func WithSubject(s string) PublishOption { return func(e *event.Event) { e.SetSubject(s) } }

// WithTrace sets the event's W3C trace context (the CloudEvents
// distributed-tracing extension): traceparent, and tracestate unless it is
// empty. Every result agentq publishes because of the event carries it, so
// ratings, quality changes and alerts join the agent's trace. With
// OpenTelemetry, take both from a propagation.TraceContext injected into a
// carrier. An empty traceparent (no trace) sets nothing; one not in W3C
// Trace Context's format is a *ValidationError.
func WithTrace(traceparent, tracestate string) PublishOption {
	return func(e *event.Event) {
		if traceparent == "" {
			return
		}
		e.SetExtension(bus.ExtTraceParent, traceparent)
		if tracestate != "" {
			e.SetExtension(bus.ExtTraceState, tracestate)
		}
	}
}

// Ack is JetStream's acknowledgement of a stored event.
type Ack struct {
	ID       string // the event id
	Stream   string
	Sequence uint64
	// Duplicate is true when the tenant's event id was already in the
	// stream's duplicate window: nothing new was stored.
	Duplicate bool
}

// Pending is a published event whose ack may still be on its way.
type Pending struct {
	ID   string // the event id
	Type string // the CloudEvents type
	done chan struct{}
	ack  Ack
	err  error
}

// Done is closed once the event is acked or has failed.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Result is the ack, or why the event was not stored (*RefusedError,
// *TimeoutError, *UnavailableError). Call it after Done is closed.
func (p *Pending) Result() (Ack, error) {
	select {
	case <-p.done:
		return p.ack, p.err
	default:
		return Ack{}, errors.New("publish " + p.Type + " " + p.ID + ": not acked yet")
	}
}

// Wait waits for the ack until ctx ends.
func (p *Pending) Wait(ctx context.Context) (Ack, error) {
	select {
	case <-p.done:
		return p.ack, p.err
	case <-ctx.Done():
		return Ack{}, fmt.Errorf("publish %s %s: waiting for the ack: %w", p.Type, p.ID, ctx.Err())
	}
}

// publisher is the bounded window of events awaiting their ack.
type publisher struct {
	slots      chan struct{} // one token per outstanding event
	ackTimeout time.Duration

	mu       sync.Mutex
	pending  map[*nats.Msg]*Pending
	idle     chan struct{} // closed while nothing is outstanding
	failures []error       // since the last Flush
	dropped  int           // failures beyond maxFailures
}

// maxFailures bounds the failures Flush reports one by one.
const maxFailures = 100

func (p *publisher) init(window int, ackTimeout time.Duration) {
	p.slots, p.ackTimeout = make(chan struct{}, window), ackTimeout
	p.pending = map[*nats.Msg]*Pending{}
	p.idle = make(chan struct{})
	close(p.idle)
}

// Publish checks ev's data against its schema and sends it as a
// CloudEvent on <domain>.<event>.<tenant>, with the tenant-scoped
// Nats-Msg-Id "<tenant>:<event id>" (JetStream drops a duplicate publish).
// It returns once the event is sent; the ack is awaited in the
// background, at most Config.MaxPending at once: while that many are
// outstanding, Publish waits for room until ctx ends. Learn the outcome
// from the returned Pending, or from Flush.
//
// Data that does not match its schema is a *ValidationError naming the
// field, and nothing is sent.
func (c *Client) Publish(ctx context.Context, ev Event, opts ...PublishOption) (*Pending, error) {
	if c.closed() {
		return nil, ErrClosed
	}
	if ev == nil {
		return nil, errors.New("publish: no event")
	}
	typ := ev.EventType()
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("publish %s: encode data: %w", typ, err)
	}
	if err := c.validate(typ, data); err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("publish %s: new event id: %w", typ, err)
	}
	ce := event.New()
	ce.SetID(id.String())
	ce.SetType(typ)
	ce.SetSource(c.cfg.Source)
	ce.SetTime(time.Now().UTC())
	ce.SetExtension(bus.ExtTenant, c.cfg.Tenant)
	ce.SetDataSchema(bus.SchemaURL(typ))
	for _, o := range opts {
		o(&ce)
	}
	if err := bus.ValidID(ce.ID()); err != nil {
		return nil, &ValidationError{Type: typ, Problems: []Problem{{Field: "id", Message: strings.TrimPrefix(err.Error(), "event id ")}}}
	}
	if tp, ok := ce.Extensions()[bus.ExtTraceParent].(string); ok && !bus.ValidTraceParent(tp) {
		return nil, &ValidationError{Type: typ, Problems: []Problem{{Field: bus.ExtTraceParent, Message: "not a W3C traceparent (version-traceid-parentid-flags in lower-case hex)"}}}
	}
	if err := ce.SetData("application/json", json.RawMessage(data)); err != nil {
		return nil, fmt.Errorf("publish %s: %w", typ, err)
	}
	// The checks agentq's consumers make on decoding: an event they
	// would dead-letter as undecodable never leaves.
	m, err := bus.Encode(ce)
	if err != nil {
		return nil, &ValidationError{Type: typ, Problems: []Problem{{Message: err.Error()}}}
	}
	return c.send(ctx, m, &Pending{ID: ce.ID(), Type: typ, done: make(chan struct{})})
}

// send takes a slot of the window and sends m asynchronously.
func (c *Client) send(ctx context.Context, m *nats.Msg, p *Pending) (*Pending, error) {
	select {
	case c.pub.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("publish %s %s: %d events awaiting their ack, no room: %w", p.Type, p.ID, cap(c.pub.slots), ctx.Err())
	}
	c.pub.add(m, p)
	_, err := c.js.PublishMsgAsync(m, jetstream.WithMsgID(bus.MsgID(c.cfg.Tenant, p.ID)))
	if err != nil {
		c.pub.forget(m)
		return nil, publishError(p, err, 0)
	}
	return p, nil
}

// validate checks data against the schema of typ.
func (c *Client) validate(typ string, data []byte) error {
	err := c.reg.Validate(typ, data)
	var ve *schemas.ValidationError
	if errors.As(err, &ve) {
		out := &ValidationError{Type: typ}
		for _, line := range ve.Problems {
			field, msg, ok := strings.Cut(line, ": ")
			if !ok {
				field, msg = "", line
			}
			out.Problems = append(out.Problems, Problem{Field: field, Message: msg})
		}
		return out
	}
	if err != nil {
		return fmt.Errorf("%s: %w", typ, err)
	}
	return nil
}

func (p *publisher) add(m *nats.Msg, pd *Pending) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) == 0 {
		p.idle = make(chan struct{})
	}
	p.pending[m] = pd
}

// forget removes m's Pending when m could not be sent.
func (p *publisher) forget(m *nats.Msg) {
	p.resolve(m, func(*Pending) error { return nil })
}

// resolve settles m's Pending with fill, which returns the failure to
// report, if any; a second resolution of m does nothing. The failure is
// recorded and the Pending closed before m stops counting as outstanding,
// so a Flush that finds nothing outstanding has every failure.
func (p *publisher) resolve(m *nats.Msg, fill func(*Pending) error) {
	p.mu.Lock()
	pd := p.pending[m]
	if pd == nil {
		p.mu.Unlock()
		return
	}
	delete(p.pending, m)
	if err := fill(pd); err != nil {
		if len(p.failures) < maxFailures {
			p.failures = append(p.failures, err)
		} else {
			p.dropped++
		}
	}
	close(pd.done)
	if len(p.pending) == 0 {
		close(p.idle)
	}
	p.mu.Unlock()
	<-p.slots
}

// acked is JetStream's ack callback; it must not block.
func (p *publisher) acked(_ jetstream.JetStream, m *nats.Msg, a *jetstream.PubAck) {
	p.resolve(m, func(pd *Pending) error {
		pd.ack = Ack{ID: pd.ID, Stream: a.Stream, Sequence: a.Sequence, Duplicate: a.Duplicate}
		return nil
	})
}

// failed is JetStream's error callback (a refusal, no stream, a timeout,
// a lost connection); it must not block.
func (p *publisher) failed(_ jetstream.JetStream, m *nats.Msg, err error) {
	p.resolve(m, func(pd *Pending) error {
		pd.err = publishError(pd, err, p.ackTimeout)
		return pd.err
	})
}

// publishError types err.
func publishError(p *Pending, err error, after time.Duration) error {
	op := "publish " + p.Type + " " + p.ID
	var api *jetstream.APIError
	switch {
	case errors.As(err, &api):
		return &RefusedError{Type: p.Type, ID: p.ID, Code: api.Code, ErrCode: uint16(api.ErrorCode), Description: api.Description, err: err}
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return &TimeoutError{Op: op, After: after, err: err}
	case errors.Is(err, nats.ErrDisconnected):
		// The connection dropped before the ack: the event may be stored,
		// or still in the reconnect buffer and sent on reconnect.
		return &TimeoutError{Op: op, err: fmt.Errorf("connection lost before the ack: %w", err)}
	case errors.Is(err, jetstream.ErrJetStreamPublisherClosed):
		return &TimeoutError{Op: op, err: fmt.Errorf("client closed before the ack: %w", err)}
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrReconnectBufExceeded):
		return &UnavailableError{Op: op, err: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Flush waits until every event published so far is acked or has failed,
// or ctx ends, and returns the failures since the previous Flush, joined
// (errors.As finds each *RefusedError, *TimeoutError, ...; at most 100
// are kept one by one).
func (c *Client) Flush(ctx context.Context) error {
	for {
		c.pub.mu.Lock()
		n, idle := len(c.pub.pending), c.pub.idle
		if n == 0 {
			errs, dropped := c.pub.failures, c.pub.dropped
			c.pub.failures, c.pub.dropped = nil, 0
			c.pub.mu.Unlock()
			if dropped > 0 {
				errs = append(errs, fmt.Errorf("and %d more events failed", dropped))
			}
			return errors.Join(errs...)
		}
		c.pub.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("flush: %d events still awaiting their ack: %w", n, ctx.Err())
		}
	}
}
