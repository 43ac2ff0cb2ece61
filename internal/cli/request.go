package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentq/agentq/internal/answer"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/schemas"
)

// This file holds what the commands that publish an event on a user's
// behalf share (publish, prompt activate, experiment run, cancel and
// activate, tool release): the event is built and checked against its
// schema before anything connects, published on stream AGENTQ, and, for a
// command to a consumer, followed to the consumer's answer, the result
// whose causationid is the event's id.

// cliSource is the CloudEvents source of the events the CLI makes.
const cliSource = "agentq-cli"

// request is one event the CLI publishes, with the connection it goes
// out on once connect has been called.
type request struct {
	ev  event.Event
	reg *schemas.Registry
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *bus.Publisher

	start   uint64 // the stream's last sequence when follow was first called
	started bool
}

// newRequest builds the event of type typ for tenant from data.
func newRequest(typ, tenant, source string, data any) (*request, error) {
	reg, err := schemas.Load()
	if err != nil {
		return nil, err
	}
	ev, err := bus.NewEvent(typ, tenant, source, data)
	if err != nil {
		return nil, err
	}
	return &request{ev: ev, reg: reg}, nil
}

// check validates the event's data against its type's schema, so that a
// command can refuse bad input before it needs a server. publish checks
// again: a command that skips check fails there.
func (r *request) check() error { return r.reg.Validate(r.ev.Type(), r.ev.Data()) }

// tenant is the event's tenant.
func (r *request) tenant() string { return bus.Tenant(r.ev) }

// connect connects to the NATS server the commands use (natsURL: an
// explicit AGENTQ_NATS_URL, else a running agentq dev's). close closes it.
func (r *request) connect(e Env, cfg config.Config) error {
	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	r.nc, r.js, r.pub = nc, js, bus.NewPublisher(js, r.reg)
	return nil
}

func (r *request) close() {
	if r.nc != nil {
		r.nc.Close()
	}
}

// publish validates and publishes the event and returns JetStream's ack.
func (r *request) publish(ctx context.Context) (*jetstream.PubAck, error) {
	return r.pub.Publish(ctx, r.ev)
}

// follow starts following the tenant's results of types that answer the
// event or one of the events also names. Every follow reads from the
// stream's last sequence at the first call, which needs no clock: call it
// before publish. The caller stops the set.
func (r *request) follow(ctx context.Context, types []string, also ...string) (*answer.Set, error) {
	if !r.started {
		s, err := r.js.Stream(ctx, bus.StreamName)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", bus.StreamName, err)
		}
		r.start, r.started = s.CachedInfo().State.LastSeq, true
	}
	subjects := make([]string, len(types))
	for i, t := range types {
		subjects[i], _ = bus.SubjectFor(t, r.tenant())
	}
	causes := append([]string{r.ev.ID()}, also...)
	return answer.Follow(ctx, r.js, subjects,
		jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: r.start + 1}, causes)
}

// await publishes the event and waits up to timeout for its answer, of
// type okType or rejType: nil and no error when none came in time.
func (r *request) await(ctx context.Context, okType, rejType string, timeout time.Duration) (*answer.Answer, error) {
	return answer.Await(ctx, r.js, r.reg, r.ev, okType, rejType, timeout)
}

// finish prints a command's outcome: out as JSON with --json, whatever
// the outcome, else line when the command succeeded. It returns failure,
// which decides the exit code (1 when the consumer refused or did not
// answer), so a script reading --json learns why as well.
func finish(e Env, asJSON bool, out any, failure error, line func(w io.Writer)) error {
	if asJSON {
		if err := writeJSON(e.Stdout, out); err != nil {
			return err
		}
	} else if failure == nil && line != nil {
		line(e.Stdout)
	}
	return failure
}
