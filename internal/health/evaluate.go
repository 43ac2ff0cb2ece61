package health

import (
	"context"
	"fmt"
	"sort"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
)

// Sender publishes results after commit; *outbox.Outbox satisfies it.
type Sender interface {
	Queue(b *pgx.Batch, evs ...event.Event) error
	Send(ctx context.Context, evs []event.Event) error
}

// folder applies stored facts to tenants' state in stream order.
type folder struct {
	pool     *pgxpool.Pool
	out      Sender
	consumer string
	p        Params
	log      zerolog.Logger
	observe  func(tenant string, trs []Transition) // metrics and logs; may be nil
	// rebuild: this folder is a rebuild's, which folds while the tenant's
	// rebuild record exists; a live folder leaves such a tenant alone.
	rebuild bool
}

// fold applies tenant's facts with sequences up to through, in stream
// order, in one transaction, and publishes the transitions not published
// before. Call it only when every event of the consumer up to through is
// stored (the ack floor, or a rebuild's ordered read).
func (f *folder) fold(ctx context.Context, tenant string, through uint64) error {
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		return database.Classify(fmt.Errorf("fold %s: %w", tenant, err))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if !f.rebuild {
		// The fence orders this fold with a rebuild's reset: a fold either
		// commits before the reset, or sees the rebuild record after it
		// and leaves the tenant to the rebuild.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM consumer_fences WHERE consumer = $1 FOR SHARE`, f.consumer); err != nil {
			return database.Classify(fmt.Errorf("fold %s: %w", tenant, err))
		}
		var busy bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rebuilds WHERE consumer = $1 AND tenant_id IN ('*', $2))`, f.consumer, tenant).Scan(&busy); err != nil {
			return database.Classify(fmt.Errorf("fold %s: %w", tenant, err))
		}
		if busy {
			return nil
		}
	}
	row, ok, err := lockTenant(ctx, tx, tenant)
	if err != nil || !ok || (row.evaluated >= through && !row.refold) {
		return database.Classify(err)
	}
	if row.refold {
		// A late fact: decide the tenant again from its first fact, in
		// stream order, as a rebuild would. Transitions of facts already
		// published are not published again (they cannot be taken back);
		// the state is the stream's.
		if _, err := tx.Exec(ctx, `DELETE FROM health_tools WHERE tenant_id = $1`, tenant); err != nil {
			return database.Classify(fmt.Errorf("refold %s: %w", tenant, err))
		}
		through = max(through, row.evaluated)
		row.evaluated, row.known, row.quarantined = 0, 0, 0
	}
	facts, err := readFacts(ctx, tx, tenant, row.evaluated, through)
	if err != nil {
		return database.Classify(err)
	}
	names := make([]string, 0, len(facts))
	seen := map[string]bool{}
	for _, fc := range facts {
		if !seen[fc.Tool] {
			seen[fc.Tool] = true
			names = append(names, fc.Tool)
		}
	}
	tools, err := loadTools(ctx, tx, tenant, names)
	if err != nil {
		return database.Classify(err)
	}
	tn := &Tenant{Tools: tools, Known: row.known, Quarantined: row.quarantined}
	var results []event.Event
	var all []Transition
	for _, fc := range facts {
		trs, rejected := apply(tn, fc, f.p)
		all = append(all, trs...)
		if fc.Seq <= row.published {
			continue // published before (a rebuild meets it again)
		}
		evs, err := f.results(tenant, fc, trs, rejected)
		if err != nil {
			return err
		}
		results = append(results, evs...)
	}
	b := &pgx.Batch{}
	if err := queueSaveTools(b, tenant, tn.Tools); err != nil {
		return bus.Permanent(err)
	}
	b.Queue(`UPDATE health_tenants SET evaluated_through = $2, published_through = greatest(published_through, $2),
		known = $3, quarantined = $4, refold_from = NULL WHERE tenant_id = $1`, tenant, int64(through), tn.Known, tn.Quarantined)
	if err := f.out.Queue(b, results...); err != nil {
		return bus.Permanent(err)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return database.Classify(fmt.Errorf("save health of %s: %w", tenant, err))
	}
	if err := tx.Commit(ctx); err != nil {
		return database.Classify(fmt.Errorf("save health of %s: %w", tenant, err))
	}
	if f.observe != nil && len(all) > 0 {
		f.observe(tenant, all)
	}
	if err := f.out.Send(ctx, results); err != nil {
		f.log.Warn().Err(err).Str("tenant", tenant).Int("events", len(results)).Msg("health transitions left for the outbox relay")
	}
	return nil
}

// apply folds one fact into tn; a release that cannot be done returns its
// reason.
func apply(tn *Tenant, fc fact, p Params) ([]Transition, error) {
	switch fc.Kind {
	case kindCall:
		return tn.Observe(fc.Tool, Calls, fc.Bad, fc.At, p), nil
	case kindRating:
		return tn.Observe(fc.Tool, Ratings, fc.Rating < p.RatingThreshold, fc.At, p), nil
	case kindKnown:
		tn.Register(fc.Tool, p, fc.At)
	case kindTimer:
		return tn.Expire(fc.Tool, fc.Due, fc.At, p), nil
	case kindRelease:
		why := "released by an operator"
		if fc.By != "" {
			why = "released by " + fc.By
		}
		if fc.Reason != "" {
			why += ": " + fc.Reason
		}
		return tn.Release(fc.Tool, why, fc.At, p)
	}
	return nil, nil
}

// cause is the causing event as far as a result needs it.
func cause(tenant string, fc fact) event.Event {
	ev := event.New()
	ev.SetID(fc.EventID)
	ev.SetType(fc.Type)
	ev.SetExtension(bus.ExtTenant, tenant)
	fc.Trace.Set(&ev)
	return ev
}

func (f *folder) results(tenant string, fc fact, trs []Transition, rejected error) ([]event.Event, error) {
	var out []event.Event
	if rejected != nil {
		ev, err := bus.NewResult(f.consumer, TypeRejected, cause(tenant, fc), map[string]any{
			"reason_code": "not_quarantined", "reason": rejected.Error(), "event_type": fc.Type, "event_id": fc.EventID,
		})
		if err != nil {
			return nil, bus.Permanent(err)
		}
		return append(out, ev), nil
	}
	for _, tr := range trs {
		typ := resultType(tr)
		if typ == "" {
			continue
		}
		ev, err := bus.NewStateResult(f.consumer, typ, tenant, tr.Tool, tr.Version, cause(tenant, fc), dataOf(tr))
		if err != nil {
			return nil, bus.Permanent(err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// pending lists the tenants with stored facts not yet folded, less those
// being rebuilt.
func (f *folder) pending(ctx context.Context, through uint64) ([]string, error) {
	skip, err := rebuilding(ctx, f.pool, f.consumer)
	if err != nil {
		return nil, database.Classify(err)
	}
	if skip["*"] {
		return nil, nil
	}
	rows, err := f.pool.Query(ctx, `SELECT tenant_id FROM health_tenants WHERE (stored_through > evaluated_through AND evaluated_through < $1) OR refold_from IS NOT NULL`, int64(through))
	if err != nil {
		return nil, database.Classify(fmt.Errorf("pending tenants: %w", err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		if !skip[t] {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out, rows.Err()
}
