package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
)

// Validator checks event data against the schema of its type.
// *schemas.Registry satisfies it.
type Validator interface {
	Validate(eventType string, data []byte) error
}

// Publisher publishes agentq events to JetStream. It is safe for concurrent
// use.
type Publisher struct {
	js     jetstream.JetStream
	schema Validator
}

// NewPublisher returns a publisher that validates every event with schema
// before sending it. For the bounded async window, create js with
// jetstream.WithPublishAsyncMaxPending.
func NewPublisher(js jetstream.JetStream, schema Validator) *Publisher {
	return &Publisher{js: js, schema: schema}
}

// Publish validates ev, sends it on its derived subject with Nats-Msg-Id set
// to MsgID(tenant, id), and waits for the JetStream ack. A duplicate of a
// tenant's event id already in the duplicate window is acked by JetStream
// without being stored again; the returned ack's Duplicate field says so.
func (p *Publisher) Publish(ctx context.Context, ev event.Event) (*jetstream.PubAck, error) {
	m, err := p.encode(ev)
	if err != nil {
		return nil, err
	}
	ack, err := p.js.PublishMsg(ctx, m, jetstream.WithMsgID(MsgID(Tenant(ev), ev.ID())))
	if err != nil {
		return nil, fmt.Errorf("publish %s %s: %w", ev.Type(), ev.ID(), err)
	}
	return ack, nil
}

// PublishAsync validates and sends ev without waiting for its ack. It blocks
// while the async window (jetstream.WithPublishAsyncMaxPending) is full. Use
// Flush, or the returned future, to learn the outcome.
func (p *Publisher) PublishAsync(ev event.Event) (jetstream.PubAckFuture, error) {
	m, err := p.encode(ev)
	if err != nil {
		return nil, err
	}
	// Wait (up to asyncStall) while the window is full, as documented,
	// rather than fail after the client default of 200 ms.
	f, err := p.js.PublishMsgAsync(m, jetstream.WithMsgID(MsgID(Tenant(ev), ev.ID())), jetstream.WithStallWait(asyncStall))
	if err != nil {
		return nil, fmt.Errorf("publish %s %s: %w", ev.Type(), ev.ID(), err)
	}
	return f, nil
}

// Flush waits until every async publish has been acked or failed, or ctx ends.
func (p *Publisher) Flush(ctx context.Context) error {
	select {
	case <-p.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flush async publishes: %w", ctx.Err())
	}
}

func (p *Publisher) encode(ev event.Event) (*nats.Msg, error) {
	if ev.DataContentType() == "" {
		ev.SetDataContentType(jsonCT)
	}
	if p.schema != nil {
		if err := p.schema.Validate(ev.Type(), ev.Data()); err != nil {
			return nil, Permanent(fmt.Errorf("publish %s %s: %w", ev.Type(), ev.ID(), err))
		}
	}
	m, err := Encode(ev)
	if err != nil {
		return nil, Permanent(err)
	}
	return m, nil
}

// asyncStall bounds how long PublishAsync waits for room in a full async
// window before it fails.
const asyncStall = 30 * time.Second

// IsJSONContentType reports whether a datacontenttype announces JSON
// (application/json, text/json, any +json type; none means JSON too), the
// only data agentq's events carry.
func IsJSONContentType(ct string) bool { return isJSON(ct) }
