package indexer

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
)

// Outcomes of an applied event, as prompt.indexed / tool.indexed say them.
const (
	OutcomeCreated   = "created"
	OutcomeUnchanged = "unchanged"
	OutcomeRejected  = "rejected"
)

func (ix *Indexer) apply(ctx context.Context, ops []op, valid []int) ([]event.Event, error) {
	claims := make([]database.InboxKey, len(valid))
	for j, i := range valid {
		claims[j] = database.InboxKey{Tenant: ops[i].d.Tenant, EventID: ops[i].d.Event.ID()}
	}
	tx, claimed, err := database.BeginClaim(ctx, ix.pool, ix.opts.Consumer, claims)
	if err != nil {
		return nil, err
	}
	defer tx.Close(ctx)
	if ix.facts == nil {
		// A tenant being rebuilt has incomplete state: the indexer's
		// decisions (next free version, conflicts) would be wrong and
		// never published as facts. Its events wait for the rebuild.
		var waiting []int
		for _, i := range valid {
			if claimed.Withheld(ops[i].d.Tenant) {
				waiting = append(waiting, i)
			}
		}
		if len(waiting) > 0 {
			return nil, &rebuildingError{idx: waiting}
		}
	}
	var fresh []int
	for j, i := range valid {
		if claimed.Fresh[j] {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) == 0 {
		return nil, tx.Commit(ctx, &pgx.Batch{})
	}
	if err := lockKeys(ctx, tx, ops, fresh); err != nil {
		return nil, fmt.Errorf("lock prompt ids and tool names: %w", err)
	}
	w := newPromptWrites(tx)
	if err := w.load(ctx, ops, fresh); err != nil {
		return nil, err
	}
	var results []event.Event
	for _, i := range fresh { // the batch is in stream order
		o := &ops[i]
		if o.kind != opPrompt {
			// What follows may read prompts (a label's version).
			if err := w.flush(ctx); err != nil {
				return nil, err
			}
		}
		res, err := ix.applyOne(ctx, tx, w, o)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.d.Event.Type(), o.d.Event.ID(), err)
		}
		if res == nil || claimed.Withheld(o.d.Tenant) {
			continue
		}
		ev, err := bus.NewResult(ix.opts.Consumer, res.typ, o.d.Event, res.data)
		if err != nil {
			return nil, bus.Permanent(err)
		}
		results = append(results, ev)
	}
	if err := w.flush(ctx); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	if err := ix.out.Queue(b, results...); err != nil {
		return nil, bus.Permanent(err)
	}
	if err := tx.Commit(ctx, b); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return results, nil
}

// rebuildingError names the events of tenants being rebuilt; nothing of
// the batch was applied.
type rebuildingError struct{ idx []int }

func (e *rebuildingError) Error() string { return "tenant is being rebuilt" }

type result struct {
	typ  string
	data any
}

// taken reports whether a fact says version of key was created (by
// another event), and with which hash.
func (ix *Indexer) taken(o *op, kind, key string, version int) (string, bool) {
	if ix.facts == nil {
		return "", false
	}
	return ix.facts.Taken(o.d.Tenant, kind, key, version)
}

func (ix *Indexer) fact(o *op) (Fact, bool) {
	if ix.facts == nil {
		return Fact{}, false
	}
	return ix.facts.Lookup(o.d.Tenant, o.d.Event.ID())
}

func (ix *Indexer) applyOne(ctx context.Context, tx library.DB, w *promptWrites, o *op) (*result, error) {
	switch o.kind {
	case opPrompt:
		return ix.applyPrompt(ctx, w, o)
	case opLabel:
		return ix.applyLabel(ctx, tx, o)
	case opTool:
		return ix.applyTool(ctx, tx, o)
	case opQuality:
		return nil, applyQuality(ctx, tx, o)
	case opHealth:
		return nil, applyHealth(ctx, tx, o)
	}
	return nil, bus.Permanentf("unknown op")
}

func rejected(o *op, r rejection) *result {
	data := map[string]any{
		"reason_code": r.code, "reason": r.reason,
		"event_type": o.d.Event.Type(), "event_id": o.d.Event.ID(),
	}
	if len(r.details) > 0 {
		data["details"] = r.details
	}
	return &result{typ: TypeRejected, data: data}
}

func (ix *Indexer) model(o *op) (string, int) {
	if o.vec == nil {
		return "", 0
	}
	e := ix.emb.Prompts
	if o.kind == opTool {
		e = ix.emb.Tools
	}
	return e.Model(), len(o.vec)
}

// applyPrompt decides a prompt.created against w, which queues the insert.
func (ix *Indexer) applyPrompt(ctx context.Context, w *promptWrites, o *op) (*result, error) {
	p := o.prompt
	if o.reject != nil {
		return rejected(o, *o.reject), nil
	}
	if f, ok := ix.fact(o); ok {
		// A rebuild: do what live processing did (it publishes nothing).
		if f.Outcome == OutcomeCreated {
			p.Version = f.Version
			p.Hash = library.Hash(p.ID, p.Version, p.Content, p.Type)
			return nil, ix.insertPrompt(w, o, p)
		}
		return nil, nil
	}
	outcome := OutcomeCreated
	if p.Version > 0 {
		p.Hash = library.Hash(p.ID, p.Version, p.Content, p.Type)
		existing, found, err := w.hashOf(p.Tenant, p.ID, p.Version)
		if err != nil {
			return nil, err
		}
		if !found {
			// A rebuild: a later event known to have created it counts.
			existing, found = ix.taken(o, "prompt", p.ID, p.Version)
		}
		switch {
		case !found:
		case existing == p.Hash:
			outcome = OutcomeUnchanged
		default:
			return rejected(o, rejection{
				code:    ReasonVersionConflict,
				reason:  fmt.Sprintf("prompt %s version %d already exists with different content or type (hash %s); versions are immutable: create a new version", p.ID, p.Version, existing),
				details: map[string]any{"prompt_id": p.ID, "version": p.Version, "existing_hash": existing, "hash": p.Hash},
			}), nil
		}
	} else {
		head, err := w.head(p.Tenant, p.ID)
		if err != nil {
			return nil, err
		}
		if head.Version > 0 && library.Hash(p.ID, head.Version, p.Content, p.Type) == head.Hash {
			p.Version, p.Hash, outcome = head.Version, head.Hash, OutcomeUnchanged
		} else {
			p.Version = head.Version + 1
			for _, taken := ix.taken(o, "prompt", p.ID, p.Version); taken; _, taken = ix.taken(o, "prompt", p.ID, p.Version) {
				p.Version++
			}
			p.Hash = library.Hash(p.ID, p.Version, p.Content, p.Type)
		}
	}
	data := map[string]any{
		"prompt_id": p.ID, "version": p.Version, "content_hash": p.Hash,
		"type": p.Type, "name": p.Name, "outcome": outcome,
	}
	if outcome == OutcomeCreated {
		if err := ix.insertPrompt(w, o, p); err != nil {
			return nil, err
		}
		if model, dim := ix.model(o); model != "" {
			data["embedding_model"], data["embedding_dim"] = model, dim
		}
	} else {
		if err := w.flush(ctx); err != nil {
			return nil, err
		}
		labels, err := library.LabelsOf(ctx, w.tx, p.Tenant, p.ID, p.Version)
		if err != nil {
			return nil, err
		}
		if len(labels) > 0 {
			data["labels"] = labels
		}
	}
	return &result{typ: TypePromptIndexed, data: data}, nil
}

func (ix *Indexer) insertPrompt(w *promptWrites, o *op, p library.Prompt) error {
	model, _ := ix.model(o)
	return w.insert(library.Row{Prompt: p, EventID: o.d.Event.ID(), StreamSeq: o.d.StreamSeq, Embedding: o.vec, Model: model})
}

func (ix *Indexer) applyLabel(ctx context.Context, tx library.DB, o *op) (*result, error) {
	l := o.label
	if o.reject != nil {
		return rejected(o, *o.reject), nil
	}
	f, hasFact := ix.fact(o)
	if hasFact && f.Outcome == OutcomeRejected {
		return nil, nil
	}
	hash, createdAt, err := library.Created(ctx, tx, o.d.Tenant, l.promptID, l.version)
	if err == nil && createdAt > o.d.StreamSeq {
		// Created by an event later in the stream, which another copy
		// applied first. In stream order the version does not exist yet
		// (a rebuild would not find it), so the decision must not depend
		// on which copy got there first: unknown.
		err = library.ErrNotFound
	}
	if errors.Is(err, library.ErrNotFound) {
		if hasFact {
			return nil, nil
		}
		return rejected(o, rejection{
			code:    ReasonUnknownVersion,
			reason:  fmt.Sprintf("prompt %s has no version %d in tenant %s created before this activation in the stream", l.promptID, l.version, o.d.Tenant),
			details: map[string]any{"prompt_id": l.promptID, "version": l.version, "label": l.label},
		}), nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := library.SetLabel(ctx, tx, o.d.Tenant, l.promptID, l.label, l.version, o.d.StreamSeq, o.d.Event.ID(), o.at); err != nil {
		return nil, err
	}
	labels, err := library.LabelsOf(ctx, tx, o.d.Tenant, l.promptID, l.version)
	if err != nil {
		return nil, err
	}
	data := map[string]any{"prompt_id": l.promptID, "version": l.version, "content_hash": hash, "outcome": OutcomeUnchanged}
	if len(labels) > 0 {
		data["labels"] = labels
	}
	return &result{typ: TypePromptIndexed, data: data}, nil
}

func (ix *Indexer) applyTool(ctx context.Context, tx library.DB, o *op) (*result, error) {
	t := o.tool
	model, dim := ix.model(o)
	put := func() error {
		return registry.Put(ctx, tx, registry.Row{Tool: t, EventID: o.d.Event.ID(), StreamSeq: o.d.StreamSeq, Embedding: o.vec, Model: model})
	}
	if f, ok := ix.fact(o); ok {
		if f.Outcome == OutcomeCreated {
			t.Version = f.Version
			return nil, put()
		}
		return nil, nil
	}
	head, headHash, err := registry.Head(ctx, tx, t.Tenant, t.Name)
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		return nil, err
	}
	outcome := OutcomeCreated
	if head > 0 && headHash == t.Hash {
		t.Version, outcome = head, OutcomeUnchanged
	} else {
		t.Version = head + 1
		for _, taken := ix.taken(o, "tool", t.Name, t.Version); taken; _, taken = ix.taken(o, "tool", t.Name, t.Version) {
			t.Version++
		}
		if err := put(); err != nil {
			return nil, err
		}
	}
	data := map[string]any{"tool_name": t.Name, "version": t.Version, "content_hash": t.Hash, "outcome": outcome}
	if t.Server != "" {
		data["server"] = t.Server
	}
	if len(t.Tags) > 0 {
		data["tags"] = t.Tags
	}
	if outcome == OutcomeCreated && model != "" {
		data["embedding_model"], data["embedding_dim"] = model, dim
	}
	return &result{typ: TypeToolIndexed, data: data}, nil
}

// applyQuality stores a quality.changed with compare-and-set on its state
// version: a repeated or stale one changes nothing. last_success is kept
// apart, as a merge that does not depend on arrival order: the time of the
// earliest quality.changed that reached the highest successes count seen.
func applyQuality(ctx context.Context, tx library.DB, o *op) error {
	q := o.quality
	_, err := tx.Exec(ctx, `
INSERT INTO index_quality AS iq (tenant_id, target, ref, state_version, quality_score, success_rate, total_calls, successes, last_success, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $8::bigint > 0 THEN $9::timestamptz END, $9)
ON CONFLICT (tenant_id, target, ref) DO UPDATE
SET state_version = greatest(iq.state_version, excluded.state_version),
    quality_score = CASE WHEN excluded.state_version > iq.state_version THEN excluded.quality_score ELSE iq.quality_score END,
    success_rate  = CASE WHEN excluded.state_version > iq.state_version THEN excluded.success_rate ELSE iq.success_rate END,
    total_calls   = CASE WHEN excluded.state_version > iq.state_version THEN excluded.total_calls ELSE iq.total_calls END,
    updated_at    = CASE WHEN excluded.state_version > iq.state_version THEN excluded.updated_at ELSE iq.updated_at END,
    successes     = greatest(iq.successes, excluded.successes),
    last_success  = CASE WHEN excluded.successes > iq.successes THEN excluded.last_success
                         WHEN excluded.successes = iq.successes THEN least(iq.last_success, excluded.last_success)
                         ELSE iq.last_success END
WHERE excluded.state_version > iq.state_version OR excluded.successes >= iq.successes`,
		o.d.Tenant, q.target, q.ref, q.stateVersion, q.score, q.successRate, q.totalCalls, q.successes, o.at)
	return err
}

// applyHealth stores a tool's health unless a later event (by stream
// sequence) already did.
func applyHealth(ctx context.Context, tx library.DB, o *op) error {
	h := o.health
	_, err := tx.Exec(ctx, `
INSERT INTO index_tool_health (tenant_id, tool_name, state, quarantined, expires_at, stream_seq, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (tenant_id, tool_name) DO UPDATE
SET state = excluded.state, quarantined = excluded.quarantined, expires_at = excluded.expires_at,
    stream_seq = excluded.stream_seq, updated_at = excluded.updated_at
WHERE index_tool_health.stream_seq < excluded.stream_seq`,
		o.d.Tenant, h.toolName, h.state, h.quarantined, h.expiresAt, int64(o.d.StreamSeq), o.at)
	return err
}

// Reset deletes the indexer's state and inbox rows of tenant ("" = every
// tenant), for a rebuild.
func Reset(ctx context.Context, tx pgx.Tx, consumer, tenant string) error {
	if err := library.Reset(ctx, tx, tenant); err != nil {
		return err
	}
	if err := registry.Reset(ctx, tx, tenant); err != nil {
		return err
	}
	for _, table := range []string{"index_quality", "index_tool_health"} {
		if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE $1 = '' OR tenant_id = $1`, tenant); err != nil {
			return fmt.Errorf("reset %s: %w", table, err)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM inbox WHERE consumer = $1 AND ($2 = '' OR tenant_id = $2)`, consumer, tenant); err != nil {
		return fmt.Errorf("reset inbox: %w", err)
	}
	return nil
}
