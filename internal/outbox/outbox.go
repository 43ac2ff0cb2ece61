// Package outbox publishes a consumer's result events exactly as its effects
// were committed. A handler stores its results with Add in the same
// transaction as the effect; after commit, Send publishes them with their
// deterministic ids and deletes the rows. If the process dies in between,
// Relay publishes the rows left behind, so no committed result is lost, and
// JetStream's duplicate window plus the consumers' inboxes make a second
// publish harmless.
//
// A row names the consumer whose result it holds (the result's source,
// agentq/<consumer>). While that consumer's state of the row's tenant is
// being rebuilt (a rebuilds row, see internal/replay), the relay leaves
// the row alone: results wait for the rebuild to complete, which first
// drops the rows whose results are already in the stream (Held, Drop).
package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
)

// Publisher sends events asynchronously and waits for their acks.
// *bus.Publisher satisfies it.
type Publisher interface {
	PublishAsync(ev event.Event) (jetstream.PubAckFuture, error)
}

var _ Publisher = (*bus.Publisher)(nil)

// Add stores evs in the outbox inside tx.
func Add(ctx context.Context, tx pgx.Tx, evs ...event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	sql, args, err := insert(evs)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("outbox add: %w", err)
	}
	return nil
}

// Queue adds to b, a batch to be sent in the effect's transaction, the
// statement storing evs and the deletion of the rows published since the
// last call, so neither costs a round trip or a commit of its own.
func (o *Outbox) Queue(b *pgx.Batch, evs ...event.Event) error {
	// Delete before inserting: a result stored again under the same id must
	// not be deleted as already published. Ids are tenant-scoped and derive
	// from what the result is about, so a row with the same id holds the
	// same result: an insert never overwrites one.
	if done := o.takePublished(); len(done) > 0 {
		b.Queue(`DELETE FROM outbox WHERE id = ANY($1)`, done)
	}
	return QueueAdd(b, evs...)
}

// QueueAdd adds to b the statement storing evs, as Add does in a
// transaction: for a sender with no Outbox of its own (a rebuild's, see
// internal/replay), whose rows the relay publishes.
func QueueAdd(b *pgx.Batch, evs ...event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	sql, args, err := insert(evs)
	if err != nil {
		return err
	}
	b.Queue(sql, args...)
	return nil
}

func insert(evs []event.Event) (string, []any, error) {
	ids := make([]string, len(evs))
	tenants := make([]string, len(evs))
	types := make([]string, len(evs))
	consumers := make([]string, len(evs))
	bodies := make([][]byte, len(evs))
	for i, ev := range evs {
		b, err := bus.EncodeStructured(ev)
		if err != nil {
			return "", nil, err
		}
		ids[i], tenants[i], types[i], bodies[i] = ev.ID(), bus.Tenant(ev), ev.Type(), b
		if c, ok := strings.CutPrefix(ev.Source(), "agentq/"); ok {
			consumers[i] = c // agentq's results name their consumer so (bus.NewResult)
		}
	}
	return `
		INSERT INTO outbox (id, tenant_id, event_type, consumer, event)
		SELECT i, t, y, nullif(c, ''), e FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[]) AS u(i, t, y, c, e)
		ON CONFLICT (id) DO NOTHING`, []any{ids, tenants, types, consumers, bodies}, nil
}

// Outbox publishes stored results.
type Outbox struct {
	pool *pgxpool.Pool
	pub  Publisher
	log  zerolog.Logger

	mu        sync.Mutex
	published []string // acked, rows not yet deleted
	posted    []posted // published by Post, acks not yet seen
}

// posted is an event Post published, waiting for its ack.
type posted struct {
	id  string
	ack jetstream.PubAckFuture
	at  time.Time
}

// ackTimeout bounds the wait for JetStream's acks of one Send.
const ackTimeout = 10 * time.Second

// maxPending bounds the published ids kept for a later deletion; past it,
// Send deletes at once.
const maxPending = 10000

func (o *Outbox) takePublished() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.harvest()
	done := o.published
	o.published = nil
	return done
}

// harvest moves the posted events whose acks have come to published,
// without waiting for the others. A failed publish, or one not acked within
// ackTimeout, is given up: its row stays for the relay. o.mu is held.
func (o *Outbox) harvest() {
	keep := o.posted[:0]
	for _, p := range o.posted {
		select {
		case <-p.ack.Ok():
			o.published = append(o.published, p.id)
		case err := <-p.ack.Err():
			o.log.Warn().Err(err).Str("event_id", p.id).Msg("result left for the outbox relay")
		default:
			if time.Since(p.at) < ackTimeout {
				keep = append(keep, p)
			} else {
				o.log.Warn().Str("event_id", p.id).Msgf("result not acknowledged within %s; left for the outbox relay", ackTimeout)
			}
		}
	}
	clear(o.posted[len(keep):])
	o.posted = keep
}

// New returns an outbox over pool that publishes with pub.
func New(pool *pgxpool.Pool, pub Publisher, log zerolog.Logger) *Outbox {
	return &Outbox{pool: pool, pub: pub, log: log}
}

// Send publishes evs, waits for every ack, and marks the acked rows for
// deletion: the next Queue or Flush deletes them. Call it after the
// transaction that added them has committed. Events that could not be
// published stay in the outbox for Relay.
func (o *Outbox) Send(ctx context.Context, evs []event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	futures := make([]jetstream.PubAckFuture, len(evs))
	var errs []error
	acked := make([]string, 0, len(evs))
	for i, ev := range evs {
		f, err := o.pub.PublishAsync(ev)
		if err != nil {
			if bus.IsPermanent(err) {
				// It can never be published (it fails its own schema): retrying
				// forever would also hold up the relay. Drop the row, loudly.
				o.log.Error().Err(err).Str("event_id", ev.ID()).Str("type", ev.Type()).Msg("result can never be published; removed from the outbox")
				acked = append(acked, ev.ID())
			}
			errs = append(errs, err)
			continue
		}
		futures[i] = f
	}
	// An ack can be lost (a dropped connection): never wait for one longer
	// than ackTimeout, or a relay would hang on it for good. What is not
	// acked stays in the outbox for the relay.
	timeout := time.NewTimer(ackTimeout)
	defer timeout.Stop()
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			acked = append(acked, evs[i].ID())
		case err := <-f.Err():
			errs = append(errs, fmt.Errorf("publish %s: %w", evs[i].ID(), err))
		case <-timeout.C:
			errs = append(errs, fmt.Errorf("publish %s: no ack within %s", evs[i].ID(), ackTimeout))
			timeout.Reset(0)
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
		}
	}
	o.mu.Lock()
	o.published = append(o.published, acked...)
	full := len(o.published) >= maxPending
	o.mu.Unlock()
	if full {
		errs = append(errs, o.deletePublished(ctx))
	}
	return errors.Join(errs...)
}

// Post publishes evs as Send does but does not wait for their acks, so
// the caller's next transaction overlaps them: the rows of the events
// acked by then are deleted with a later Queue, Flush or relay pass; an
// event whose publish fails, or is not acked within ackTimeout, stays in
// the outbox for the relay, as after a crash. JetStream stores one
// connection's messages in the order they were published, so results
// posted one call after another keep their order. Call it after the
// transaction that added evs has committed.
func (o *Outbox) Post(evs []event.Event) error {
	var errs []error
	now := time.Now()
	ps := make([]posted, 0, len(evs))
	var never []string
	for _, ev := range evs {
		f, err := o.pub.PublishAsync(ev)
		if err != nil {
			if bus.IsPermanent(err) {
				o.log.Error().Err(err).Str("event_id", ev.ID()).Str("type", ev.Type()).Msg("result can never be published; removed from the outbox")
				never = append(never, ev.ID())
			}
			errs = append(errs, err)
			continue
		}
		ps = append(ps, posted{id: ev.ID(), ack: f, at: now})
	}
	o.mu.Lock()
	o.posted = append(o.posted, ps...)
	o.published = append(o.published, never...)
	o.mu.Unlock()
	return errors.Join(errs...)
}

// deletePublished deletes the rows of acked events now.
func (o *Outbox) deletePublished(ctx context.Context) error {
	done := o.takePublished()
	if len(done) == 0 {
		return nil
	}
	if _, err := o.pool.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1)`, done); err != nil {
		o.mu.Lock()
		o.published = append(o.published, done...)
		o.mu.Unlock()
		return fmt.Errorf("outbox delete: %w", err)
	}
	return nil
}

// Relay publishes, every interval, outbox rows older than minAge (rows a
// crashed process left behind, or results that waited for a rebuild;
// younger rows are still being sent by their writer), until ctx ends; then
// it deletes the rows of published events.
func (o *Outbox) Relay(ctx context.Context, interval, minAge time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = o.deletePublished(dctx)
	}()
	for {
		if n, err := o.Flush(ctx, minAge); err != nil && ctx.Err() == nil {
			o.log.Warn().Err(err).Msg("outbox relay")
		} else if n > 0 {
			o.log.Info().Int("events", n).Msg("outbox relay published leftovers")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Flush deletes the rows of events already published, then publishes up
// to 1000 outbox rows older than minAge, except those waiting for a
// rebuild, and returns how many it sent. The
// rows are locked while they are published (FOR UPDATE SKIP LOCKED), so
// several relays — one per running copy — share the leftovers instead of
// each publishing all of them.
func (o *Outbox) Flush(ctx context.Context, minAge time.Duration) (int, error) {
	if err := o.deletePublished(ctx); err != nil {
		return 0, err
	}
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("outbox scan: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// Rows of a consumer whose tenant is being rebuilt wait for the
	// rebuild (see the package comment).
	rows, err := tx.Query(ctx, `
		SELECT o.id, o.event FROM outbox o
		WHERE o.created_at < now() - make_interval(secs => $1)
		  AND NOT EXISTS (SELECT 1 FROM rebuilds r WHERE r.consumer = o.consumer AND r.tenant_id IN ('*', o.tenant_id))
		ORDER BY o.created_at LIMIT 1000
		FOR UPDATE OF o SKIP LOCKED`, minAge.Seconds())
	if err != nil {
		return 0, fmt.Errorf("outbox scan: %w", err)
	}
	var evs []event.Event
	var bad []string
	for rows.Next() {
		var id string
		var b []byte
		if err := rows.Scan(&id, &b); err != nil {
			rows.Close()
			return 0, fmt.Errorf("outbox scan: %w", err)
		}
		ev, err := bus.Decode(nil, b)
		if err != nil {
			bad = append(bad, id)
			o.log.Error().Err(err).Str("event_id", id).Msg("outbox row is not a CloudEvent; removed")
			continue
		}
		evs = append(evs, ev)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("outbox scan: %w", err)
	}
	if len(evs) == 0 && len(bad) == 0 {
		return 0, nil
	}
	sendErr := o.Send(ctx, evs)
	// Send marked what was acked (and what can never be published) for
	// deletion: delete it in this transaction, before the locks go.
	done := append(bad, o.takePublished()...)
	if _, err := tx.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1)`, done); err != nil {
		o.mu.Lock()
		o.published = append(o.published, done...)
		o.mu.Unlock()
		return 0, fmt.Errorf("outbox delete: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("outbox delete: %w", err)
	}
	if sendErr != nil {
		return 0, sendErr
	}
	return len(evs), nil
}

// Discard is a sender that stores and publishes nothing: a rebuild applies
// effects from the stream's history, whose results are already facts in
// the stream.
var Discard discard

type discard struct{}

// Queue adds nothing to b.
func (discard) Queue(*pgx.Batch, ...event.Event) error { return nil }

// Send publishes nothing.
func (discard) Send(context.Context, []event.Event) error { return nil }

// Post publishes nothing.
func (discard) Post([]event.Event) error { return nil }

// Hold waits, inside tx, until no relay is publishing consumer's rows of
// tenant ("" every tenant), and keeps them locked until tx ends. Call it in
// the transaction that records a rebuild of the tenant: once that commits,
// relays leave the rows alone until the rebuild record is removed, so none
// of them is published while the rebuild runs.
func Hold(ctx context.Context, tx pgx.Tx, consumer, tenant string) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM outbox WHERE consumer = $1 AND ($2 = '' OR tenant_id = $2) FOR UPDATE`, consumer, tenant); err != nil {
		return fmt.Errorf("outbox hold: %w", err)
	}
	return nil
}

// Held returns the ids of consumer's rows of tenant ("" every tenant).
func Held(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, consumer, tenant string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT id FROM outbox WHERE consumer = $1 AND ($2 = '' OR tenant_id = $2)`, consumer, tenant)
	if err != nil {
		return nil, fmt.Errorf("outbox held: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("outbox held: %w", err)
	}
	return ids, nil
}

// Drop deletes the rows ids inside tx: results found in the stream
// already, which must not be published again.
func Drop(ctx context.Context, tx pgx.Tx, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("outbox drop: %w", err)
	}
	return nil
}
