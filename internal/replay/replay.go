// Package replay rebuilds a consumer's derived state from the stream while
// live traffic flows and any number of the consumer's copies keep running.
//
// A rebuild:
//
//  1. refuses when stream AGENTQ no longer holds the history the state
//     came from — MaxAge or MaxBytes removed the oldest events, events were
//     deleted, or the stream was deleted and created again after the
//     consumer applied events of the tenant (ErrRecreated) — since a
//     rebuild from it would silently miss them;
//  2. in one transaction, locks the consumer's fence row (so no live batch
//     straddles the reset), reads the stream's last sequence as its
//     horizon, records the rebuild, and resets the state (one tenant's, or
//     all) and its inbox;
//  3. reads the history up to the horizon with its own ordered consumer
//     (filtered to the tenant's subjects, so the live consumer is never
//     stalled) and applies it with the consumer's own handler;
//  4. removes the rebuild record.
//
// Meanwhile live copies keep applying new events — consumers' states are
// functions of the set of events, so the order in which the rebuild and
// the live copies apply them does not matter, and the inbox applies each
// event once — but withhold the tenant's results until the rebuild is
// complete (database.Claimed.Withheld).
//
// # Results: each published once, none while a rebuild runs
//
// A withheld state result (the scorer's quality.changed) is simply not
// published: the next change after the rebuild publishes the complete
// state. A per-event result (the rater's tool.rated) has no next change:
// it must reach the stream exactly once, whoever applies its event, and
// whenever. So:
//
//   - a live copy stores a result it withholds in the outbox, with its
//     deterministic id, and does not send it; the outbox relay leaves a
//     consumer's rows of a tenant being rebuilt alone (the rebuild's start
//     waits for a relay busy with them) and publishes them once the
//     rebuild record is gone;
//   - the rebuild first reads the consumer's results of the tenant back
//     from the stream (Target.Results), and stores in the outbox the
//     result of an event it applies only when no result with that id is
//     in the stream: an event live copies had not handled yet, whose
//     delivery to them will now be a duplicate;
//   - in the transaction that removes its record, under the fence so no
//     live batch commits meanwhile, it reads the results that reached the
//     stream since, and drops the stored rows whose results are in the
//     stream: an event redelivered to a live copy after the reset (its
//     inbox row was gone) is applied and stored again, though its result
//     was published before.
//
// Nothing of the tenant's is published from the moment the rebuild is
// recorded until it is complete, by the rebuild or by live copies, except
// sends already under way (a batch that committed before the rebuild took
// the fence publishes after its commit). What waited is then published by
// the relay of any running copy (AGENTQ_OUTBOX_RELAY_INTERVAL). A crash
// anywhere leaves at worst a row published twice under the same id, which
// JetStream's duplicate window drops.
//
// # Outages and failures
//
// A database outage is waited out however long it lasts (bus.Unavailable:
// retried with a wait that doubles up to MaxRetryWait, until ctx ends). An
// event refused for what it is — undecodable, against its schema, or a
// permanent error of the handler — is skipped: live copies dead-letter it
// too. An event that keeps failing for any other reason is skipped only if
// the live consumer dead-lettered it (the rebuild looks for it in
// AGENTQ_DLQ); otherwise the rebuild fails and names it. A rebuild that
// fails keeps its record, so results stay withheld, and running it again
// repairs everything: the reset starts over.
package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/outbox"
)

// Target is what a consumer gives to be rebuilt.
type Target struct {
	// Consumer is the durable consumer's name, as in its inbox.
	Consumer string
	// Subjects are the consumer's filter subjects, tenant token "*".
	Subjects []string
	// Reset deletes the consumer's derived state and inbox rows of tenant
	// ("" = every tenant) inside tx.
	Reset func(ctx context.Context, tx pgx.Tx, tenant string) error
	// Handler applies events. It publishes nothing: it stores per-event
	// results through Results, state results nowhere (see outbox.Discard).
	Handler bus.BatchHandler
	// Results, for a consumer that publishes a result per event, is the
	// sender its Handler stores them through (see the package comment);
	// nil for a consumer whose results carry its state.
	Results *Results
	// Prepare, when set, runs after the reset and before the history is
	// read, with the horizon: a consumer whose decisions depend on what it
	// applied before reads them back from its own results here (see
	// indexer.StreamFacts).
	Prepare func(ctx context.Context, js jetstream.JetStream, tenant string, horizon uint64) error
}

// Options tune a rebuild.
type Options struct {
	Tenant         string        // "" rebuilds every tenant
	BatchSize      int           // events per handler call; default 500
	MaxPayload     int           // as the consumer's runner; default 1 MiB
	HandlerTimeout time.Duration // per handler call; default 30s
	// RetryWait is the wait before a failed batch is retried; it doubles
	// with each retry, up to MaxRetryWait. Defaults 500ms and 10s.
	RetryWait    time.Duration
	MaxRetryWait time.Duration
	// Attempts is how many times an event that fails for its own reasons
	// (not an outage) is tried before the rebuild looks for it in
	// AGENTQ_DLQ. Default 10.
	Attempts int
	// AllowTruncated rebuilds from what the stream still holds when its
	// oldest events are gone, or it was created again after the consumer
	// applied events, instead of refusing.
	AllowTruncated bool
	// Progress, when set, is called after each batch.
	Progress func(done, total uint64)
	Log      zerolog.Logger
}

func (o Options) withDefaults() Options {
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.RetryWait <= 0 {
		o.RetryWait = 500 * time.Millisecond
	}
	if o.MaxRetryWait <= 0 {
		o.MaxRetryWait = 10 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 10
	}
	return o
}

// Report says what a rebuild did.
type Report struct {
	Horizon uint64 // the stream's last sequence when the rebuild began
	Events  int    // events of the consumer's subjects read up to the horizon
	// Skipped counts the events not applied, by dead-letter reason: events
	// refused for what they are, which live copies dead-letter too, and
	// events that kept failing which the live consumer dead-lettered
	// (found in AGENTQ_DLQ).
	Skipped map[string]int
	// Owed counts the per-event results waiting in the outbox for the
	// relay: results live processing had not published (see Results).
	Owed     int
	FirstSeq uint64 // the stream's first sequence (1 unless truncated)
	Took     time.Duration
}

// ErrTruncated means the stream no longer holds the whole history.
var ErrTruncated = errors.New("the stream no longer holds the whole history")

// ErrRecreated means the stream was created after the consumer applied
// events: they came from an earlier stream, which is gone.
var ErrRecreated = errors.New("the stream was created again")

// Rebuild rebuilds t's state; see the package comment.
func Rebuild(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, schema bus.Validator, t Target, o Options) (Report, error) {
	begin := time.Now()
	o = o.withDefaults()
	if o.Tenant != "" && !bus.ValidTenant(o.Tenant) {
		return Report{}, fmt.Errorf("tenant %q does not match [a-z0-9_-]{1,64}", o.Tenant)
	}
	stream, err := js.Stream(ctx, bus.StreamName)
	if err != nil {
		return Report{}, fmt.Errorf("stream %s: %w", bus.StreamName, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("stream %s: %w", bus.StreamName, err)
	}
	rep := Report{FirstSeq: info.State.FirstSeq, Skipped: map[string]int{}}
	if truncated := info.State.FirstSeq > 1 || info.State.NumDeleted > 0; truncated && !o.AllowTruncated {
		return rep, fmt.Errorf("%w: %s starts at sequence %d and has %d deleted events (max age %s, max bytes %d); "+
			"events before it are gone and a rebuild would miss them — rebuild from what is left with --allow-truncated",
			ErrTruncated, bus.StreamName, info.State.FirstSeq, info.State.NumDeleted, info.Config.MaxAge, info.Config.MaxBytes)
	}
	if err := recreated(ctx, pool, stream, t.Consumer, o.Tenant); err != nil {
		if !errors.Is(err, ErrRecreated) || !o.AllowTruncated {
			return rep, err
		}
		o.Log.Warn().Err(err).Msg("rebuilding from what the stream holds, as asked")
	}
	if rep.Horizon, err = start(ctx, pool, stream, t, o.Tenant); err != nil {
		return rep, err
	}
	if t.Results != nil {
		if err := t.Results.load(ctx, js, o.Tenant); err != nil {
			return rep, fmt.Errorf("rebuild %s: read its results (the rebuild record stays; run it again): %w", t.Consumer, err)
		}
	}
	if t.Prepare != nil {
		if err := t.Prepare(ctx, js, o.Tenant, rep.Horizon); err != nil {
			return rep, fmt.Errorf("rebuild %s: prepare (the rebuild record stays; run it again): %w", t.Consumer, err)
		}
	}
	if err := apply(ctx, js, schema, t, o, &rep); err != nil {
		return rep, fmt.Errorf("rebuild %s (the rebuild record stays: results stay withheld until a rebuild completes; run it again): %w", t.Consumer, err)
	}
	if err := outlast(ctx, o, "finish rebuild", func() (err error) {
		rep.Owed, err = finish(ctx, js, pool, t, o.Tenant)
		return err
	}); err != nil {
		return rep, fmt.Errorf("rebuild %s: applied, but not finished (the rebuild record stays; run it again): %w", t.Consumer, err)
	}
	rep.Took = time.Since(begin)
	return rep, nil
}

func scope(tenant string) string {
	if tenant == "" {
		return "*"
	}
	return tenant
}

// filter returns subjects with their tenant token set to tenant ("" keeps
// "*").
func filter(subjects []string, tenant string) []string {
	out := make([]string, len(subjects))
	for i, s := range subjects {
		if tenant != "" && strings.HasSuffix(s, ".*") {
			s = strings.TrimSuffix(s, "*") + tenant
		}
		out[i] = s
	}
	return out
}

// recreated returns ErrRecreated when consumer applied events of tenant
// ("" any) before the stream was created: its inbox holds rows older than
// the stream. A stream deleted and created again starts at sequence 1 and
// passes the truncation check, but holds none of the events the state
// came from. The stream's creation time is moved onto the database's
// clock (the server reports its own time with the stream's info), so
// clocks that disagree do not matter; what is left is the uncertainty of
// the two round trips, which is given to the consumer. Inbox rows pruned
// by age (AGENTQ_INBOX_RETENTION) can no longer tell.
func recreated(ctx context.Context, pool *pgxpool.Pool, stream jetstream.Stream, consumer, tenant string) error {
	t0 := time.Now()
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s: %w", bus.StreamName, err)
	}
	t1 := time.Now()
	var dbNow time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		return fmt.Errorf("check the stream's identity: %w", err)
	}
	t2 := time.Now()
	if info.Created.IsZero() {
		return nil
	}
	created := info.Created
	if !info.TimeStamp.IsZero() {
		// Each clock's lead over ours, taken at the middle of its round trip.
		natsAhead := info.TimeStamp.Sub(t0.Add(t1.Sub(t0) / 2))
		dbAhead := dbNow.Sub(t1.Add(t2.Sub(t1) / 2))
		created = created.Add(dbAhead - natsAhead)
	}
	uncertainty := t2.Sub(t0)/2 + 10*time.Millisecond
	var oldest *time.Time
	if err := pool.QueryRow(ctx, `
		SELECT min(processed_at) FROM inbox
		WHERE consumer = $1 AND ($2 = '' OR tenant_id = $2) AND processed_at < $3`,
		consumer, tenant, created.Add(-uncertainty)).Scan(&oldest); err != nil {
		return fmt.Errorf("check the stream's identity: %w", err)
	}
	if oldest == nil {
		return nil
	}
	return fmt.Errorf("%w: %s was created at %s, after %s had applied events of %s (the oldest at %s): "+
		"they came from an earlier stream, which is gone, and a rebuild would reset the state and rebuild it from the new stream's events only "+
		"— rebuild from what the stream holds with --allow-truncated",
		ErrRecreated, bus.StreamName, info.Created.UTC().Format(time.RFC3339), consumer, scopeText(tenant), oldest.UTC().Format(time.RFC3339))
}

func scopeText(tenant string) string {
	if tenant == "" {
		return "any tenant"
	}
	return "tenant " + tenant
}

// start resets the state under the consumer's fence and returns the
// horizon: every event a live batch applied before the reset has a
// sequence at or below it.
func start(ctx context.Context, pool *pgxpool.Pool, stream jetstream.Stream, t Target, tenant string) (uint64, error) {
	if err := database.EnsureFence(ctx, pool, t.Consumer); err != nil {
		return 0, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("start rebuild: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM consumer_fences WHERE consumer = $1 FOR UPDATE`, t.Consumer); err != nil {
		return 0, fmt.Errorf("start rebuild: lock fence: %w", err)
	}
	// Read the horizon while holding the fence: batches that committed
	// before hold events already in the stream.
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("start rebuild: %w", err)
	}
	horizon := info.State.LastSeq
	if _, err := tx.Exec(ctx, `
		INSERT INTO rebuilds (consumer, tenant_id, horizon) VALUES ($1, $2, $3)
		ON CONFLICT (consumer, tenant_id) DO UPDATE SET horizon = excluded.horizon, started_at = now()`,
		t.Consumer, scope(tenant), int64(horizon)); err != nil {
		return 0, fmt.Errorf("start rebuild: %w", err)
	}
	// From the commit on, relays leave the consumer's results of the tenant
	// alone; wait for one that is publishing some now.
	if err := outbox.Hold(ctx, tx, t.Consumer, tenant); err != nil {
		return 0, fmt.Errorf("start rebuild: %w", err)
	}
	if err := t.Reset(ctx, tx, tenant); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("start rebuild: %w", err)
	}
	return horizon, nil
}

// finish removes the rebuild record, and with it the stored results that
// are in the stream already (see the package comment), and returns how
// many stored results are left for the relay. It holds the fence so that
// no live batch stores a result meanwhile.
func finish(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, t Target, tenant string) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM consumer_fences WHERE consumer = $1 FOR UPDATE`, t.Consumer); err != nil {
		return 0, err
	}
	owed := 0
	if t.Results != nil {
		// Live batches wait for the fence meanwhile: keep it short.
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := t.Results.catchUp(rctx, js)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("read results: %w", err)
		}
		ids, err := outbox.Held(ctx, tx, t.Consumer, tenant)
		if err != nil {
			return 0, err
		}
		var published []string
		for _, id := range ids {
			if t.Results.has(id) {
				published = append(published, id)
			}
		}
		if err := outbox.Drop(ctx, tx, published); err != nil {
			return 0, err
		}
		owed = len(ids) - len(published)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM rebuilds WHERE consumer = $1 AND tenant_id = $2`, t.Consumer, scope(tenant)); err != nil {
		return 0, err
	}
	return owed, tx.Commit(ctx)
}

// outlast runs op until it succeeds, fails with something other than an
// outage, or ctx ends: a database outage is waited out however long it
// lasts.
func outlast(ctx context.Context, o Options, what string, op func() error) error {
	wait := o.RetryWait
	for {
		err := database.Classify(op())
		if err == nil || !bus.IsUnavailable(err) {
			return err
		}
		o.Log.Warn().Err(err).Dur("retry_in", wait).Msg(what + ": the database is unavailable; waiting")
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, o.MaxRetryWait)
	}
}

func apply(ctx context.Context, js jetstream.JetStream, schema bus.Validator, t Target, o Options, rep *Report) error {
	if rep.Horizon == 0 {
		return nil
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: filter(t.Subjects, o.Tenant), DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("read history: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("read history: %w", err)
	}
	if info.NumPending == 0 {
		return nil
	}
	// Ask for no more than is pending, so the last fetch returns as soon as
	// the history is read instead of waiting out its window.
	pending := info.NumPending
	for {
		mb, err := cons.Fetch(int(min(uint64(o.BatchSize), max(pending, 1))), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("read history: %w", err)
		}
		var batch []*bus.Delivery
		done := false
		for m := range mb.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("read history: %w", err)
			}
			if meta.Sequence.Stream > rep.Horizon {
				done = true // live copies handle what came after the horizon
				continue
			}
			rep.Events++
			d, err := bus.ReadAs(t.Consumer, m, schema, o.MaxPayload)
			switch {
			case errors.Is(err, bus.ErrNotForConsumer):
				// Another consumer's redrive: live copies ack it unread.
			case err != nil:
				rep.Skipped[bus.ReasonOf(err)]++
			default:
				batch = append(batch, d)
			}
			pending = meta.NumPending
			if meta.Sequence.Stream == rep.Horizon || meta.NumPending == 0 {
				done = true
			}
		}
		if err := mb.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("read history: %w", err)
		}
		if err := handle(ctx, js, t, batch, o, rep); err != nil {
			return err
		}
		if o.Progress != nil {
			o.Progress(uint64(rep.Events), rep.Horizon)
		}
		if done {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// handle applies one batch. What fails because of an outage is retried
// until it succeeds or ctx ends; an event refused for what it is
// (bus.Permanent) is skipped; an event that keeps failing otherwise is
// retried o.Attempts times, then skipped if the live consumer dead-lettered
// it, else the rebuild fails.
func handle(ctx context.Context, js jetstream.JetStream, t Target, batch []*bus.Delivery, o Options, rep *Report) error {
	failures := map[*bus.Delivery]int{}
	wait := o.RetryWait
	for len(batch) > 0 {
		errs := bus.Handle(ctx, t.Handler, batch, o.HandlerTimeout, o.Log)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var retry []*bus.Delivery
		var last error
		for i, err := range errs {
			d := batch[i]
			switch {
			case err == nil:
				continue
			case bus.IsPermanent(err):
				rep.Skipped[bus.ReasonOf(err)]++
				continue
			case !bus.IsUnavailable(err):
				if failures[d]++; failures[d] >= o.Attempts {
					dead, derr := deadLettered(ctx, js, t.Consumer, d)
					if derr != nil {
						return fmt.Errorf("event %s (stream sequence %d) keeps failing (%w), and AGENTQ_DLQ cannot be read: %w", d.Event.ID(), d.StreamSeq, err, derr)
					}
					if !dead {
						return fmt.Errorf("event %s (%s, stream sequence %d) failed %d times: %w; the live consumer has not dead-lettered it, "+
							"so skipping it would leave a state live processing does not have", d.Event.ID(), d.Event.Type(), d.StreamSeq, failures[d], err)
					}
					o.Log.Warn().Err(err).Str("event_id", d.Event.ID()).Uint64("stream_seq", d.StreamSeq).
						Msg("rebuild skips an event that keeps failing: the live consumer dead-lettered it too")
					rep.Skipped[bus.ReasonMaxDeliver]++
					continue
				}
			}
			retry, last = append(retry, d), err
		}
		if len(retry) == 0 {
			return nil
		}
		o.Log.Warn().Err(last).Int("events", len(retry)).Dur("retry_in", wait).Msg("rebuild batch failed; retrying")
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), last)
		case <-time.After(wait):
		}
		wait = min(2*wait, o.MaxRetryWait)
		batch = retry
	}
	return nil
}
