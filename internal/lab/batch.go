package lab

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
)

// HandleBatch applies a runner's batch in stream order. Consecutive events
// of the feedback read model (feedback.submitted and prompt.used: a row
// each, no result) are applied together, in one transaction; every other
// event in one of its own (Handle), after the rows before it in the batch,
// so a request reads the feedback published before it.
func (l *Lab) HandleBatch(ctx context.Context, batch []*bus.Delivery) []error {
	errs := make([]error, len(batch))
	var rows []int
	flush := func() {
		if len(rows) == 0 {
			return
		}
		ds := make([]*bus.Delivery, len(rows))
		for j, i := range rows {
			ds[j] = batch[i]
		}
		for j, err := range l.applyRows(ctx, ds) {
			errs[rows[j]] = err
		}
		rows = rows[:0]
	}
	for i, d := range batch {
		if isRowEvent(d) {
			rows = append(rows, i)
			continue
		}
		flush()
		errs[i] = l.Handle(ctx, d)
	}
	flush()
	return errs
}

// isRowEvent reports whether d is an event of the feedback read model.
func isRowEvent(d *bus.Delivery) bool {
	t := d.Event.Type()
	return t == typeFeedback || t == typePromptUsed
}

// pruneEvery is how often a lab copy deletes the feedback and prompt.used
// rows past AGENTQ_LAB_FEEDBACK_RETENTION: with the first batch of rows
// after it starts, then at most once an hour, unless a prune left rows
// (see pruneLimit).
const pruneEvery = time.Hour

// pruneLimit bounds the rows of each table one prune deletes, so that a
// backlog (a first prune, a retention shortened) never makes a batch's
// transaction long; a prune that reached it is due again with the next
// batch of rows.
const pruneLimit = 1000

// The prunes, bounded: ctid, as internal/database's inbox prune, so the
// deletion needs no key.
const (
	pruneUses = `DELETE FROM lab_prompt_uses WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM lab_prompt_uses WHERE used_at < $1 LIMIT $2))`
	pruneFeedback = `DELETE FROM lab_feedback WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM lab_feedback WHERE submitted_at < $1 LIMIT $2))`
)

// pruner remembers when this copy last pruned.
type pruner struct {
	mu   sync.Mutex
	last time.Time
}

// due reports whether a prune is due at now.
func (p *pruner) due(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last.IsZero() || now.Sub(p.last) >= pruneEvery
}

func (p *pruner) done(at time.Time) {
	p.mu.Lock()
	p.last = at
	p.mu.Unlock()
}

// applyRows applies events of the feedback read model in one transaction:
// their claims, their rows (none for an event the lab does not keep, or
// one already past the retention) and, when due, the pruning of the rows
// past the retention. An event whose data cannot be
// read fails alone.
func (l *Lab) applyRows(ctx context.Context, ds []*bus.Delivery) []error {
	errs := make([]error, len(ds))
	now := time.Now()
	retention := l.opts.Lab.FeedbackRetention
	var keys []database.InboxKey
	var stmts []func(*pgx.Batch)
	var idx []int
	for i, d := range ds {
		keep, err := kept(d)
		if err != nil || !keep {
			errs[i] = err // feedback and uses the lab has no use for cost no claim
			continue
		}
		var queue func(*pgx.Batch)
		switch d.Event.Type() {
		case typeFeedback:
			queue, err = feedbackRow(d, now, retention)
		case typePromptUsed:
			queue, err = usedRow(d, now, retention)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		keys = append(keys, database.InboxKey{Tenant: d.Tenant, EventID: d.Event.ID(), Seq: d.StreamSeq})
		stmts = append(stmts, queue)
		idx = append(idx, i)
	}
	if len(keys) == 0 {
		return errs
	}
	fail := func(err error) []error {
		for _, i := range idx {
			errs[i] = err
		}
		return errs
	}
	tx, claimed, err := database.BeginClaim(ctx, l.pool, l.opts.Consumer, keys)
	if err != nil {
		return fail(database.Classify(err))
	}
	defer tx.Close(ctx)
	b := &pgx.Batch{}
	for j, queue := range stmts {
		if claimed.Fresh[j] && queue != nil {
			queue(b)
		}
	}
	prune := retention > 0 && l.prune.due(now)
	more := false
	if prune {
		for _, stmt := range []string{pruneUses, pruneFeedback} {
			b.Queue(stmt, now.Add(-retention), pruneLimit).Exec(func(tag pgconn.CommandTag) error {
				more = more || tag.RowsAffected() >= pruneLimit
				return nil
			})
		}
	}
	if err := tx.Commit(ctx, b); err != nil {
		return fail(database.Classify(err))
	}
	if prune && !more {
		l.prune.done(now)
	}
	return errs
}
