// Package outbox publishes a consumer's result events exactly as its effects
// were committed. A handler stores its results with Add in the same
// transaction as the effect; after commit, Send publishes them with their
// deterministic ids and deletes the rows. If the process dies in between,
// Relay publishes the rows left behind, so no committed result is lost, and
// JetStream's duplicate window plus the consumers' inboxes make a second
// publish harmless.
package outbox

import (
	"context"
	"errors"
	"fmt"
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
	ids := make([]string, len(evs))
	tenants := make([]string, len(evs))
	types := make([]string, len(evs))
	bodies := make([][]byte, len(evs))
	for i, ev := range evs {
		b, err := bus.EncodeStructured(ev)
		if err != nil {
			return err
		}
		ids[i], tenants[i], types[i], bodies[i] = ev.ID(), bus.Tenant(ev), ev.Type(), b
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO outbox (id, tenant_id, event_type, event)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])
		ON CONFLICT (id) DO UPDATE SET event = excluded.event`, ids, tenants, types, bodies)
	if err != nil {
		return fmt.Errorf("outbox add: %w", err)
	}
	return nil
}

// Outbox publishes stored results.
type Outbox struct {
	pool *pgxpool.Pool
	pub  Publisher
	log  zerolog.Logger
}

// New returns an outbox over pool that publishes with pub.
func New(pool *pgxpool.Pool, pub Publisher, log zerolog.Logger) *Outbox {
	return &Outbox{pool: pool, pub: pub, log: log}
}

// Send publishes evs, waits for every ack, and deletes the acked ones from
// the outbox. Call it after the transaction that added them has committed.
// Events that could not be published stay in the outbox for Relay.
func (o *Outbox) Send(ctx context.Context, evs []event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	futures := make([]jetstream.PubAckFuture, len(evs))
	var errs []error
	for i, ev := range evs {
		f, err := o.pub.PublishAsync(ev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		futures[i] = f
	}
	acked := make([]string, 0, len(evs))
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			acked = append(acked, evs[i].ID())
		case err := <-f.Err():
			errs = append(errs, fmt.Errorf("publish %s: %w", evs[i].ID(), err))
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
		}
	}
	if len(acked) > 0 {
		if _, err := o.pool.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1)`, acked); err != nil {
			errs = append(errs, fmt.Errorf("outbox delete: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Relay publishes, every interval, outbox rows older than minAge (rows a
// crashed process left behind; younger rows are still being sent by their
// writer), until ctx ends.
func (o *Outbox) Relay(ctx context.Context, interval, minAge time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
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

// Flush publishes up to 1000 outbox rows older than minAge and returns how
// many it sent.
func (o *Outbox) Flush(ctx context.Context, minAge time.Duration) (int, error) {
	rows, err := o.pool.Query(ctx, `
		SELECT event FROM outbox
		WHERE created_at < now() - make_interval(secs => $1)
		ORDER BY created_at LIMIT 1000`, minAge.Seconds())
	if err != nil {
		return 0, fmt.Errorf("outbox scan: %w", err)
	}
	var evs []event.Event
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			rows.Close()
			return 0, fmt.Errorf("outbox scan: %w", err)
		}
		ev, err := bus.Decode(nil, b)
		if err != nil {
			o.log.Error().Err(err).Msg("outbox row is not a CloudEvent; left in place")
			continue
		}
		evs = append(evs, ev)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("outbox scan: %w", err)
	}
	return len(evs), o.Send(ctx, evs)
}
