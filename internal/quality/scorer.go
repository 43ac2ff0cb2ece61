package quality

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/outbox"
)

// Options configures the scorer.
type Options struct {
	// Consumer names the durable consumer and the inbox. Default "scorer".
	Consumer string
	// Window is the number of recent calls behind recent_score, 1..64.
	// Default 20.
	Window int
}

func (o Options) withDefaults() Options {
	if o.Consumer == "" {
		o.Consumer = "scorer"
	}
	if o.Window <= 0 {
		o.Window = 20
	}
	if o.Window > MaxWindow {
		o.Window = MaxWindow
	}
	return o
}

// Sender stores results in a transaction and publishes them after commit.
// *outbox.Outbox satisfies it.
type Sender interface {
	// Queue adds the statements that store evs to b, run in the effect's
	// transaction.
	Queue(b *pgx.Batch, evs ...event.Event) error
	// Post publishes evs once their transaction has committed, in the
	// order of the calls, without waiting for JetStream's acks: what is not
	// acked stays stored for the outbox relay.
	Post(evs []event.Event) error
}

// Scorer applies batches of events to the quality metrics.
type Scorer struct {
	pool *pgxpool.Pool
	out  Sender
	opts Options
	log  zerolog.Logger
}

// NewScorer returns a scorer writing to pool and publishing through out.
func NewScorer(pool *pgxpool.Pool, out Sender, opts Options, log zerolog.Logger) *Scorer {
	return &Scorer{pool: pool, out: out, opts: opts.withDefaults(), log: log}
}

var _ Sender = (*outbox.Outbox)(nil)

// Handle is the scorer's bus.BatchHandler. The whole batch is one
// transaction: inbox claims, metric updates and the quality.changed events
// (one per target that gained events, carrying its state version) commit
// together; the events are published after commit. An event applied
// earlier from a copy later in the stream is re-filed at this earlier
// copy's sequence: that changes no count and no state version, so it is
// published with the target's next change. Results of tenants being
// rebuilt are withheld (see database.Claimed.Withheld).
func (s *Scorer) Handle(ctx context.Context, batch []*bus.Delivery) []error {
	errs := make([]error, len(batch))
	obs := make([]observation, len(batch))
	var valid []int
	for i, d := range batch {
		o, err := observe(d)
		if err != nil {
			errs[i] = err
			continue
		}
		obs[i] = o
		valid = append(valid, i)
	}
	if len(valid) == 0 {
		return errs
	}
	results, err := s.apply(ctx, batch, obs, valid)
	if err != nil {
		err = database.Classify(err)
		for _, i := range valid {
			errs[i] = err
		}
		return errs
	}
	if err := s.out.Post(results); err != nil {
		// Committed: the relay publishes what is left in the outbox.
		s.log.Warn().Err(err).Int("events", len(results)).Msg("quality.changed left for the outbox relay")
	}
	return errs
}

func (s *Scorer) apply(ctx context.Context, batch []*bus.Delivery, obs []observation, valid []int) ([]event.Event, error) {
	claims := make([]database.InboxKey, len(valid))
	for j, i := range valid {
		claims[j] = database.InboxKey{Tenant: batch[i].Tenant, EventID: batch[i].Event.ID(), Seq: batch[i].StreamSeq}
	}
	// Every target of the batch is locked and read in the claim's round
	// trip, whatever the claim finds: two round trips, begin + claim + lock
	// and read, then write + commit. A target that gains nothing (its
	// events were applied before) normally has its row already; one the
	// lock had to create is dropped again.
	// Keys are numbered once (at[j] is event valid[j]'s target in all), so
	// the per-event work below indexes slices instead of hashing three
	// strings per lookup.
	all := make([]Key, 0, len(valid))
	number := make(map[Key]int, len(valid))
	at := make([]int, len(valid))
	for j, i := range valid {
		n, ok := number[obs[i].key]
		if !ok {
			n = len(all)
			number[obs[i].key] = n
			all = append(all, obs[i].key)
		}
		at[j] = n
	}
	lock := newMetricsLock(slices.Clone(all)) // sorts its copy: all keeps the numbering
	tx, claimed, err := database.BeginClaimWith(ctx, s.pool, s.opts.Consumer, claims, &database.Rider{Queue: lock.queue, Read: lock.read})
	if err != nil {
		return nil, err
	}
	defer tx.Close(ctx)
	gains := make([]bool, len(all))
	for j := range valid {
		if claimed.Fresh[j] || claimed.Moved[j] != 0 {
			gains[at[j]] = true
		}
	}
	var keys, idle []Key // in key order: results come in a stable order
	for _, k := range lock.keys {
		if gains[number[k]] {
			keys = append(keys, k)
		}
	}
	for _, k := range lock.created {
		if !gains[number[k]] {
			idle = append(idle, k)
		}
	}
	b := &pgx.Batch{}
	queueDrop(b, idle)
	if len(keys) == 0 {
		return nil, tx.Commit(ctx, b) // all duplicates: nothing to apply
	}
	metrics := make([]*Metrics, len(all))
	for n, k := range all {
		metrics[n] = lock.rows[k]
	}
	// The newest event of each target in this batch is the result's cause.
	cause := make([]*bus.Delivery, len(all))
	moved := map[Key]*bus.Delivery{}
	before := map[Key]Changed{} // a re-filed target's payload before its first move here
	for j, i := range valid {
		n := at[j]
		m := metrics[n]
		switch {
		case !claimed.Fresh[j] && claimed.Moved[j] == 0:
			continue
		case m == nil:
			return nil, fmt.Errorf("metrics row for %v vanished", obs[i].key)
		case claimed.Moved[j] != 0:
			// A copy later in the stream was applied first: the event
			// counts where its first copy is. Copies of an event id are the
			// same event, so this copy's observation is the one applied.
			if _, ok := before[obs[i].key]; !ok {
				before[obs[i].key] = m.Changed(s.opts.Window)
			}
			m.refile(obs[i], int64(claimed.Moved[j]), int64(batch[i].StreamSeq))
			moved[obs[i].key] = batch[i]
			continue
		}
		m.apply(obs[i], int64(batch[i].StreamSeq))
		if c := cause[n]; c == nil || batch[i].StreamSeq > c.StreamSeq {
			cause[n] = batch[i]
		}
	}
	touched := make([]*Metrics, 0, len(keys))
	results := make([]event.Event, 0, len(keys))
	for _, k := range keys {
		m := metrics[number[k]]
		touched = append(touched, m)
		if claimed.Withheld(k.Tenant) {
			continue
		}
		if cause[number[k]] == nil {
			// Only re-filed: the state version counts events, so it stays;
			// the revised state goes out under that version, with an id of
			// its content (copies and retries derive the same one).
			ch := m.Changed(s.opts.Window)
			if reflect.DeepEqual(ch, before[k]) {
				continue // the move changed nothing anyone reads
			}
			ch.Revised = true
			raw, err := json.Marshal(ch)
			if err != nil {
				return nil, bus.Permanent(err)
			}
			sum := sha256.Sum256(raw)
			ev, err := bus.NewStateResult(s.opts.Consumer, TypeQualityChanged, k.Tenant,
				k.Target+"/"+k.ID+"#"+hex.EncodeToString(sum[:8]), m.StateVersion, moved[k].Event, ch)
			if err != nil {
				return nil, bus.Permanent(err)
			}
			results = append(results, ev)
			continue
		}
		ev, err := bus.NewStateResult(s.opts.Consumer, TypeQualityChanged, k.Tenant, k.Target+"/"+k.ID, m.StateVersion, cause[number[k]].Event, m.Changed(s.opts.Window))
		if err != nil {
			return nil, bus.Permanent(err)
		}
		results = append(results, ev)
	}
	// The metric updates and the outbox rows go in one round trip.
	queueSave(b, touched)
	if err := s.out.Queue(b, results...); err != nil {
		return nil, bus.Permanent(err)
	}
	if err := tx.Commit(ctx, b); err != nil {
		return nil, fmt.Errorf("save metrics and results: %w", err)
	}
	return results, nil
}
