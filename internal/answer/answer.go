// Package answer follows the results that answer published events: a
// consumer's result carries the id of the event that caused it
// (causationid), so a publisher that wants to know what became of its
// event (the indexer's prompt.indexed or indexer.rejected, the degrader's
// tool.recovered or degrader.rejected) reads the result subjects from the
// stream and keeps the results whose cause it awaits. The CLI's catalogue
// commands and the MCP server's write tools wait for their answers this
// way.
package answer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentq/agentq/internal/bus"
)

// Answer is a result that answers one event.
type Answer struct {
	Type string          // e.g. agentq.prompt.indexed.v1 or agentq.indexer.rejected.v1
	Data json.RawMessage // the result's data
	ID   string          // the result's id
	At   time.Time       // the result's time
}

// Set follows result subjects on stream AGENTQ and keeps the results
// caused by the awaited events. It reads the stream, not a core NATS
// subscription: the answer to an event whose publish JetStream dropped as
// a duplicate was published before the follower started.
type Set struct {
	mu      sync.Mutex
	await   map[string]bool
	got     map[string]Answer
	changed chan struct{} // a token after every new answer
	cc      jetstream.ConsumeContext
}

// Follow starts reading subjects from the stream at start (an ordered
// consumer: no state left on the server) and keeps the results whose
// causationid is one of await. Stop ends the reading.
func Follow(ctx context.Context, js jetstream.JetStream, subjects []string, start jetstream.OrderedConsumerConfig, await []string) (*Set, error) {
	a := &Set{await: map[string]bool{}, got: map[string]Answer{}, changed: make(chan struct{}, 1)}
	for _, id := range await {
		a.await[id] = true
	}
	start.FilterSubjects = subjects
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, start)
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", strings.Join(subjects, " "), err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev, err := bus.Decode(m.Headers(), m.Data())
		if err != nil {
			return // not agentq's: nothing we wait for
		}
		cause := bus.Causation(ev)
		a.mu.Lock()
		defer a.mu.Unlock()
		if !a.await[cause] {
			return
		}
		if _, seen := a.got[cause]; seen {
			return // a republished result: the first one counts
		}
		a.got[cause] = Answer{Type: ev.Type(), Data: ev.Data(), ID: ev.ID(), At: ev.Time()}
		select {
		case a.changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", strings.Join(subjects, " "), err)
	}
	a.cc = cc
	return a, nil
}

// Stop ends the reading.
func (a *Set) Stop() { a.cc.Stop() }

// Count returns how many awaited events have an answer.
func (a *Set) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.got)
}

// Get returns the answer to event id, if any.
func (a *Set) Get(id string) (Answer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ans, ok := a.got[id]
	return ans, ok
}

// Wait returns when every awaited event has an answer, timeout has passed
// or ctx ends; progress, when not nil, is called after every new answer.
func (a *Set) Wait(ctx context.Context, timeout time.Duration, progress func(answered int)) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		n := a.Count()
		if progress != nil {
			progress(n)
		}
		if n == len(a.await) {
			return
		}
		select {
		case <-a.changed:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Await publishes ev (validated by v, with the tenant-scoped Nats-Msg-Id)
// and waits up to timeout for its answer, of type okType or rejType. It
// returns nil and no error when none came in time; ctx's error when ctx
// ended first. ev must be new (a fresh id): its answer is looked for after
// the stream's last message at the time of the call, which needs no clock.
func Await(ctx context.Context, js jetstream.JetStream, v bus.Validator, ev event.Event, okType, rejType string, timeout time.Duration) (*Answer, error) {
	tenant := bus.Tenant(ev)
	okSubject, err := bus.SubjectFor(okType, tenant)
	if err != nil {
		return nil, err
	}
	rejSubject, err := bus.SubjectFor(rejType, tenant)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, bus.StreamName)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", bus.StreamName, err)
	}
	start := s.CachedInfo().State.LastSeq + 1
	ans, err := Follow(ctx, js, []string{okSubject, rejSubject},
		jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start}, []string{ev.ID()})
	if err != nil {
		return nil, err
	}
	defer ans.Stop()
	if _, err := bus.NewPublisher(js, v).Publish(ctx, ev); err != nil {
		return nil, err
	}
	ans.Wait(ctx, timeout, nil)
	if a, ok := ans.Get(ev.ID()); ok {
		return &a, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, nil
}
