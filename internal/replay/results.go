package replay

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/outbox"
)

// Results is the sender through which a rebuild's handler stores the
// results it publishes one per event (the rater's tool.rated): it stores
// in the outbox only those whose id is not in the stream yet, and sends
// nothing; the relay publishes them once the rebuild is complete (see the
// package comment). Make one per rebuild, with NewResults.
//
// It keeps the ids of the results it read, about 40 bytes each.
type Results struct {
	subjects []string // tenant token "*"

	mu        sync.RWMutex
	filter    []string
	through   uint64 // the last stream sequence read
	published map[[16]byte]struct{}
	// byCause: an event owes no result once any result it caused is in
	// the stream (NewResultsByCause).
	byCause bool
	causes  map[[16]byte]struct{}
}

// NewResults returns the sender of a consumer whose per-event results are
// published on subjects (tenant token "*"), with deterministic ids (see
// bus.NewResult).
func NewResults(subjects ...string) *Results {
	return &Results{subjects: subjects}
}

// NewResultsByCause is NewResults for a consumer that may revise a
// decision (the indexer: a late event decides a key again, and the
// revision has another type and id than the result it supersedes): an
// event whose decision is on the stream in any form owes none. A rebuild
// decides in stream order, as the live copies' last revision did, so what
// it would store for such an event is already said.
func NewResultsByCause(subjects ...string) *Results {
	return &Results{subjects: subjects, byCause: true}
}

// Queue adds to b the statements storing the results among evs that are
// not in the stream.
func (r *Results) Queue(b *pgx.Batch, evs ...event.Event) error {
	var owed []event.Event
	for _, ev := range evs {
		if r.byCause && r.caused(bus.Causation(ev)) {
			continue
		}
		if !r.has(ev.ID()) {
			owed = append(owed, ev)
		}
	}
	return outbox.QueueAdd(b, owed...)
}

// Send publishes nothing: the relay publishes what Queue stored once the
// rebuild is complete.
func (r *Results) Send(context.Context, []event.Event) error { return nil }

// Published reports whether a result with this id was on the stream when
// the rebuild began: a target that decides commands uses it to tell one
// already answered (by a live copy that kept no record of it) from one to
// decide.
func (r *Results) Published(id string) bool { return r.has(id) }

func (r *Results) has(id string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.published[key(id)]
	return ok
}

// key is a result id in 16 bytes: the UUID that bus.DeriveID makes, or a
// hash of any other id.
func (r *Results) caused(cause string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.causes[key(cause)]
	return cause != "" && ok
}

func key(id string) [16]byte {
	if u, err := uuid.Parse(id); err == nil {
		return u
	}
	var k [16]byte
	sum := sha256.Sum256([]byte(id))
	copy(k[:], sum[:])
	return k
}

// load reads the ids of every result of tenant ("" every tenant) in the
// stream.
func (r *Results) load(ctx context.Context, js jetstream.JetStream, tenant string) error {
	r.mu.Lock()
	r.filter, r.through, r.published = filter(r.subjects, tenant), 0, map[[16]byte]struct{}{}
	r.causes = map[[16]byte]struct{}{}
	r.mu.Unlock()
	return r.catchUp(ctx, js)
}

// catchUp reads the ids of the results that reached the stream since the
// last read.
func (r *Results) catchUp(ctx context.Context, js jetstream.JetStream) error {
	r.mu.RLock()
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: r.filter, HeadersOnly: true, DeliverPolicy: jetstream.DeliverAllPolicy}
	if r.through > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, r.through+1
	}
	r.mu.RUnlock()
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, cfg)
	if err != nil {
		return fmt.Errorf("read results: %w", err)
	}
	return scan(ctx, cons, func(m jetstream.Msg, seq uint64) error {
		id := m.Headers().Get("ce-id")
		if id == "" { // structured mode: Nats-Msg-Id is <tenant>:<id>
			_, id, _ = strings.Cut(m.Headers().Get("Nats-Msg-Id"), ":")
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if id != "" {
			r.published[key(id)] = struct{}{}
		}
		// Binary mode carries the cause as a header; a structured
		// result's cause is not read (it would need the body), so such
		// a result counts by its id alone.
		if c := m.Headers().Get("ce-" + bus.ExtCausation); r.byCause && c != "" {
			r.causes[key(c)] = struct{}{}
		}
		r.through = seq
		return nil
	})
}

// deadLettered reports whether consumer dead-lettered the message at d's
// stream sequence: AGENTQ_DLQ holds a dead letter of it.
func deadLettered(ctx context.Context, js jetstream.JetStream, consumer string, d *bus.Delivery) (bool, error) {
	cons, err := js.OrderedConsumer(ctx, bus.DLQName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.DLQSubject(consumer, d.Subject)}, HeadersOnly: true,
	})
	if err != nil {
		return false, err
	}
	found := false
	err = scan(ctx, cons, func(m jetstream.Msg, _ uint64) error {
		dl := bus.ParseDeadLetter(m.Headers(), nil)
		if dl.StreamSeq == d.StreamSeq && (dl.EventID == "" || dl.EventID == d.Event.ID()) {
			found = true
		}
		return nil
	})
	return found, err
}

// scan calls fn with every message cons has pending now and its stream
// sequence.
func scan(ctx context.Context, cons jetstream.Consumer, fn func(m jetstream.Msg, seq uint64) error) error {
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	pending := info.NumPending
	for pending > 0 {
		mb, err := cons.Fetch(int(min(pending, 1000)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		got := 0
		for m := range mb.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			if err := fn(m, meta.Sequence.Stream); err != nil {
				return err
			}
			got++
			pending = meta.NumPending
		}
		if err := mb.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if got == 0 {
			// Nothing came: the pending messages may have been removed
			// (max age) meanwhile. Ask again rather than wait forever.
			if err := ctx.Err(); err != nil {
				return err
			}
			if info, err = cons.Info(ctx); err != nil {
				return err
			}
			pending = info.NumPending
		}
	}
	return nil
}
