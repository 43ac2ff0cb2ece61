// Package replay rebuilds a consumer's derived state from the stream while
// live traffic flows and any number of the consumer's copies keep running.
//
// A rebuild:
//
//  1. refuses when stream AGENTQ no longer holds its whole history (MaxAge
//     or MaxBytes removed the oldest events, or events were deleted): a
//     rebuild from it would silently miss them;
//  2. in one transaction, locks the consumer's fence row (so no live batch
//     straddles the reset), reads the stream's last sequence as its
//     horizon, records the rebuild, and resets the state (one tenant's, or
//     all) and its inbox;
//  3. reads the history up to the horizon with its own ordered consumer
//     (filtered to the tenant's subjects, so the live consumer is never
//     stalled) and applies it with the consumer's own handler, which
//     publishes nothing: results are facts already in the stream;
//  4. removes the rebuild record.
//
// Meanwhile live copies keep applying new events — consumers' states are
// functions of the set of events, so the order in which the rebuild and
// the live copies apply them does not matter, and the inbox applies each
// event once — but withhold the results of the tenant being rebuilt until
// it is complete (database.Claimed.Withheld). The next change after the
// rebuild publishes the complete state.
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
	// Handler applies events; it must publish nothing (see outbox.Discard).
	Handler bus.BatchHandler
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
	// AllowTruncated rebuilds from what the stream still holds when its
	// oldest events are gone, instead of refusing.
	AllowTruncated bool
	// Progress, when set, is called after each batch.
	Progress func(done, total uint64)
	Log      zerolog.Logger
}

// Report says what a rebuild did.
type Report struct {
	Horizon  uint64         // the stream's last sequence when the rebuild began
	Events   int            // events of the consumer's subjects read up to the horizon
	Skipped  map[string]int // events not applied, by dead-letter reason (live copies dead-lettered them too)
	FirstSeq uint64         // the stream's first sequence (1 unless truncated)
	Took     time.Duration
}

// ErrTruncated means the stream no longer holds the whole history.
var ErrTruncated = errors.New("the stream no longer holds the whole history")

// Rebuild rebuilds t's state; see the package comment.
func Rebuild(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, schema bus.Validator, t Target, o Options) (Report, error) {
	begin := time.Now()
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
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
	if rep.Horizon, err = start(ctx, pool, stream, t, o.Tenant); err != nil {
		return rep, err
	}
	if t.Prepare != nil {
		if err := t.Prepare(ctx, js, o.Tenant, rep.Horizon); err != nil {
			return rep, fmt.Errorf("rebuild %s: prepare (the rebuild record stays; run it again): %w", t.Consumer, err)
		}
	}
	if err := apply(ctx, js, schema, t, o, &rep); err != nil {
		return rep, fmt.Errorf("rebuild %s (the rebuild record stays: results stay withheld until a rebuild completes; run it again): %w", t.Consumer, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM rebuilds WHERE consumer = $1 AND tenant_id = $2`, t.Consumer, scope(o.Tenant)); err != nil {
		return rep, fmt.Errorf("finish rebuild: %w", err)
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
	if err := t.Reset(ctx, tx, tenant); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("start rebuild: %w", err)
	}
	return horizon, nil
}

func apply(ctx context.Context, js jetstream.JetStream, schema bus.Validator, t Target, o Options, rep *Report) error {
	if rep.Horizon == 0 {
		return nil
	}
	subjects := make([]string, len(t.Subjects))
	for i, s := range t.Subjects {
		if o.Tenant != "" && strings.HasSuffix(s, ".*") {
			s = strings.TrimSuffix(s, "*") + o.Tenant
		}
		subjects[i] = s
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverAllPolicy,
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
			d, err := bus.Read(m, schema, o.MaxPayload)
			if err != nil {
				rep.Skipped[bus.ReasonOf(err)]++
			} else {
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
		if err := handle(ctx, t.Handler, batch, o, rep); err != nil {
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

// maxAttempts bounds the retries of an event that keeps failing.
const maxAttempts = 10

// handle applies one batch, retrying what failed for reasons that are not
// the events' own (an outage, a deadlock) until it succeeds or ctx ends.
func handle(ctx context.Context, h bus.BatchHandler, batch []*bus.Delivery, o Options, rep *Report) error {
	for attempt := 1; len(batch) > 0; attempt++ {
		errs := bus.Handle(ctx, h, batch, o.HandlerTimeout, o.Log)
		var retry []*bus.Delivery
		var last error
		for i, err := range errs {
			switch {
			case err == nil:
			case bus.IsPermanent(err):
				rep.Skipped[bus.ReasonOf(err)]++
			default:
				retry, last = append(retry, batch[i]), err
			}
		}
		if len(retry) == 0 {
			return nil
		}
		if attempt >= maxAttempts {
			// A live runner would have dead-lettered these as max_deliver.
			rep.Skipped[bus.ReasonMaxDeliver] += len(retry)
			o.Log.Error().Err(last).Int("events", len(retry)).Msg("rebuild gave up on events that keep failing")
			return nil
		}
		o.Log.Warn().Err(last).Int("events", len(retry)).Int("attempt", attempt).Msg("rebuild batch failed; retrying")
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-time.After(min(time.Duration(attempt)*500*time.Millisecond, 10*time.Second)):
		}
		batch = retry
	}
	return nil
}
