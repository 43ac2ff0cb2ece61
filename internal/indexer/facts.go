package indexer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentq/agentq/internal/bus"
)

// Fact is what live processing decided for one input event, as its
// result in the stream says.
type Fact struct {
	Outcome string // OutcomeCreated, OutcomeUnchanged or OutcomeRejected
	Version int    // the version created (prompt or tool definition)
}

// Facts looks up the decision live processing made for an event, and the
// versions it created: an event without a fact of its own (its result was
// not yet published when the rebuild began) must not take a version a
// later event is known to have taken.
type Facts interface {
	Lookup(tenant, eventID string) (Fact, bool)
	// Taken returns the hash of version of the prompt id or tool name
	// (kind "prompt" or "tool") if a fact says it was created.
	Taken(tenant, kind, key string, version int) (hash string, ok bool)
}

// StreamFacts holds the indexer's results read back from the stream, by
// tenant and causing event id. Events without a fact (their results were
// not yet published when the rebuild began) are decided as live
// processing decides them, in stream order.
type StreamFacts struct {
	mu    sync.RWMutex
	m     map[string]Fact
	taken map[string]string // tenant, kind, key, version → hash
}

// NewStreamFacts returns an empty set of facts.
func NewStreamFacts() *StreamFacts {
	return &StreamFacts{m: map[string]Fact{}, taken: map[string]string{}}
}

func takenKey(tenant, kind, key string, version int) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%d", tenant, kind, key, version)
}

// Taken implements Facts.
func (f *StreamFacts) Taken(tenant, kind, key string, version int) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h, ok := f.taken[takenKey(tenant, kind, key, version)]
	return h, ok
}

// Lookup implements Facts.
func (f *StreamFacts) Lookup(tenant, eventID string) (Fact, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	x, ok := f.m[tenant+"\x00"+eventID]
	return x, ok
}

// Len is the number of facts held.
func (f *StreamFacts) Len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.m)
}

// Add records the fact a result carries; results of other consumers and
// unknown types are ignored.
func (f *StreamFacts) Add(consumer string, ev event.Event) {
	cause, _ := ev.Extensions()[bus.ExtCausation].(string)
	if cause == "" || ev.Source() != "agentq/"+consumer {
		return
	}
	var d struct {
		Outcome  string `json:"outcome"`
		Version  int    `json:"version"`
		PromptID string `json:"prompt_id"`
		ToolName string `json:"tool_name"`
		Hash     string `json:"content_hash"`
	}
	var x Fact
	taken := ""
	switch ev.Type() {
	case TypePromptIndexed, TypeToolIndexed:
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return
		}
		x = Fact{Outcome: d.Outcome, Version: d.Version}
		if x.Outcome == "" {
			x.Outcome = OutcomeCreated
		}
		if x.Outcome == OutcomeCreated {
			if ev.Type() == TypePromptIndexed {
				taken = takenKey(bus.Tenant(ev), "prompt", d.PromptID, d.Version)
			} else {
				taken = takenKey(bus.Tenant(ev), "tool", d.ToolName, d.Version)
			}
		}
	case TypeRejected:
		x = Fact{Outcome: OutcomeRejected}
	default:
		return
	}
	f.mu.Lock()
	f.m[bus.Tenant(ev)+"\x00"+cause] = x
	if taken != "" {
		f.taken[taken] = d.Hash
	}
	f.mu.Unlock()
}

// Load reads consumer's results of tenant ("" = every tenant) into f: all
// the stream holds when it starts, not only up to the rebuild's horizon,
// since the results of events just before the horizon are published just
// after it.
func (f *StreamFacts) Load(ctx context.Context, js jetstream.JetStream, consumer, tenant string) error {
	subjects := make([]string, len(ResultSubjects))
	for i, s := range ResultSubjects {
		if tenant != "" {
			s = strings.TrimSuffix(s, "*") + tenant
		}
		subjects[i] = s
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("read indexer results: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("read indexer results: %w", err)
	}
	pending := info.NumPending
	for pending > 0 {
		mb, err := cons.Fetch(int(min(pending, 1000)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("read indexer results: %w", err)
		}
		n := 0
		for m := range mb.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("read indexer results: %w", err)
			}
			pending = meta.NumPending
			if ev, err := bus.Decode(m.Headers(), m.Data()); err == nil {
				f.Add(consumer, ev)
			}
		}
		if err := mb.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("read indexer results: %w", err)
		}
		if n == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}
