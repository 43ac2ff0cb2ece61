package indexer

import (
	"context"
	"errors"
	"fmt"
	"sort"

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
	if !ix.rebuild {
		// A tenant being rebuilt has incomplete state: the indexer's
		// decisions (next free version, conflicts) would be wrong. Its
		// events wait for the rebuild.
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
	// Fresh events are new to the inbox. A logged kind of event the inbox
	// knows may be the first occurrence of one applied at a later
	// sequence: the logs say (see order.go).
	var todo []int
	fresh := map[int]bool{}
	for j, i := range valid {
		if claimed.Fresh[j] {
			fresh[i] = true
			todo = append(todo, i)
		} else if ops[i].logged() {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return nil, tx.Commit(ctx, &pgx.Batch{})
	}
	if err := lockKeys(ctx, tx, ops, todo); err != nil {
		return nil, fmt.Errorf("lock prompt ids and tool names: %w", err)
	}
	p, err := makePlan(ctx, tx, ops, todo, fresh)
	if err != nil {
		return nil, err
	}
	w := newPromptWrites(tx)
	if err := w.load(ctx, ops, p.inc); err != nil {
		return nil, err
	}
	var out []decided
	for _, i := range p.inc { // the batch is in stream order
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
		if res != nil {
			out = append(out, decided{o: o, tenant: o.d.Tenant, causeID: o.d.Event.ID(), causeType: o.d.Event.Type(), res: res})
		}
	}
	if err := w.flush(ctx); err != nil {
		return nil, err
	}
	var fills []vectorFill
	for _, refold := range []struct {
		keys map[logKey][]int
		f    func(context.Context, txDB, logKey, []*op, map[logKey]bool) ([]decided, []vectorFill, error)
	}{{p.prompts, ix.refoldPrompt}, {p.tools, ix.refoldTool}} {
		keys := make([]logKey, 0, len(refold.keys))
		for k := range refold.keys {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(a, b int) bool {
			return keys[a].tenant < keys[b].tenant || keys[a].tenant == keys[b].tenant && keys[a].key < keys[b].key
		})
		for _, k := range keys {
			batch := make([]*op, len(refold.keys[k]))
			for j, i := range refold.keys[k] {
				batch[j] = &ops[i]
			}
			d, f, err := refold.f(ctx, tx, k, batch, p.moved)
			if err != nil {
				return nil, fmt.Errorf("decide %s again in stream order: %w", k.key, err)
			}
			out, fills = append(out, d...), append(fills, f...)
		}
	}
	for _, i := range p.health {
		if err := refileHealth(ctx, tx, &ops[i], p.from[i]); err != nil {
			return nil, err
		}
	}
	var results []event.Event
	for _, x := range out {
		// Live copies defer a tenant under rebuild (above); a result
		// withheld here is one the rebuild makes, which its sender
		// keeps only if the stream lacks it (RebuildTarget).
		if claimed.Withheld(x.tenant) && !ix.rebuild {
			continue
		}
		var ev event.Event
		var err error
		if x.revised == "" {
			ev, err = bus.NewResult(ix.opts.Consumer, x.res.typ, x.o.d.Event, x.res.data)
		} else {
			ev, err = ix.revisedResult(x)
		}
		if err != nil {
			return nil, bus.Permanent(err)
		}
		results = append(results, ev)
	}
	b := &pgx.Batch{}
	if err := ix.out.Queue(b, results...); err != nil {
		return nil, bus.Permanent(err)
	}
	if err := tx.Commit(ctx, b); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	if len(fills) > 0 {
		ix.fillVectors(ctx, fills)
	}
	return results, nil
}

// rebuildingError names the events of tenants being rebuilt; nothing of
// the batch was applied.
type rebuildingError struct{ idx []int }

func (e *rebuildingError) Error() string { return "tenant is being rebuilt" }

type result struct {
	typ  string
	data map[string]any
}

func (ix *Indexer) applyOne(ctx context.Context, tx txDB, w *promptWrites, o *op) (*result, error) {
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
		if err := logHealth(ctx, tx, o); err != nil {
			return nil, err
		}
		return nil, applyHealth(ctx, tx, o)
	}
	return nil, bus.Permanentf("unknown op")
}

func rejected(o *op, r rejection) *result {
	return &result{typ: TypeRejected, data: rejectedData(o.d.Event.Type(), o.d.Event.ID(), r)}
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

// applyPrompt decides a prompt.created later in the stream than every
// logged event of its id against w, which queues the insert and the log
// entry.
func (ix *Indexer) applyPrompt(ctx context.Context, w *promptWrites, o *op) (*result, error) {
	p := o.prompt
	if o.reject != nil {
		return rejected(o, *o.reject), nil
	}
	d, err := decidePrompt(w, p)
	if err != nil {
		return nil, err
	}
	entry := library.Entry{Tenant: p.Tenant, PromptID: p.ID, StreamSeq: o.d.StreamSeq, EventID: o.d.Event.ID(), Version: p.Version, At: o.at}
	if d.reject != nil || d.outcome != OutcomeCreated {
		entry.Input = &p // no version row holds it
	}
	if err := w.log(entry); err != nil {
		return nil, err
	}
	if d.reject != nil {
		return rejected(o, *d.reject), nil
	}
	model, dim := "", 0
	var labels []string
	if d.outcome == OutcomeCreated {
		p.Version, p.Hash = d.version, d.hash
		model, dim = ix.model(o)
		if err := w.insert(library.Row{Prompt: p, EventID: o.d.Event.ID(), StreamSeq: o.d.StreamSeq, Embedding: o.vec, Model: model}); err != nil {
			return nil, err
		}
	} else {
		if err := w.flush(ctx); err != nil {
			return nil, err
		}
		if labels, err = library.LabelsOf(ctx, w.tx, p.Tenant, p.ID, d.version); err != nil {
			return nil, err
		}
	}
	return &result{typ: TypePromptIndexed, data: promptData(p, d, model, dim, labels, false)}, nil
}

// applyLabel decides a prompt.activated later in the stream than every
// logged event of its prompt id.
func (ix *Indexer) applyLabel(ctx context.Context, tx txDB, o *op) (*result, error) {
	l := o.label
	if o.reject != nil {
		return rejected(o, *o.reject), nil
	}
	hash, createdAt, err := library.Created(ctx, tx, o.d.Tenant, l.promptID, l.version)
	if err == nil && createdAt > o.d.StreamSeq {
		// Created by an event later in the stream: in stream order the
		// version does not exist yet. (Not reached while the log holds
		// every create; kept for rows written without one.)
		err = library.ErrNotFound
	}
	found := err == nil
	if err != nil && !errors.Is(err, library.ErrNotFound) {
		return nil, err
	}
	b := &pgx.Batch{}
	if err := library.QueueLog(b, library.Entry{Tenant: o.d.Tenant, PromptID: l.promptID, StreamSeq: o.d.StreamSeq, EventID: o.d.Event.ID(),
		Activate: true, Version: l.version, Label: l.label, At: o.at}); err != nil {
		return nil, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	d := decideLabel(o.d.Tenant, l, hash, found)
	if d.reject != nil {
		return rejected(o, *d.reject), nil
	}
	if _, err := library.SetLabel(ctx, tx, o.d.Tenant, l.promptID, l.label, l.version, o.d.StreamSeq, o.d.Event.ID(), o.at); err != nil {
		return nil, err
	}
	labels, err := library.LabelsOf(ctx, tx, o.d.Tenant, l.promptID, l.version)
	if err != nil {
		return nil, err
	}
	return &result{typ: TypePromptIndexed, data: promptData(library.Prompt{ID: l.promptID}, d, "", 0, labels, true)}, nil
}

// applyTool decides a tool.registered later in the stream than every
// logged registration of its tool.
func (ix *Indexer) applyTool(ctx context.Context, tx library.DB, o *op) (*result, error) {
	t := o.tool
	head, headHash, err := registry.Head(ctx, tx, t.Tenant, t.Name)
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		return nil, err
	}
	d := decideTool(head, headHash, t.Hash)
	entry := registry.Entry{Tenant: t.Tenant, Name: t.Name, StreamSeq: o.d.StreamSeq, EventID: o.d.Event.ID(), Hash: t.Hash, RegisteredAt: o.at}
	if d.outcome != OutcomeCreated {
		entry.Def = &t // no history row holds it
	}
	if err := registry.InsertLog(ctx, tx, entry); err != nil {
		return nil, err
	}
	model, dim := ix.model(o)
	if d.outcome == OutcomeCreated {
		t.Version = d.version
		if err := registry.Put(ctx, tx, registry.Row{Tool: t, EventID: o.d.Event.ID(), StreamSeq: o.d.StreamSeq, Embedding: o.vec, Model: model}); err != nil {
			return nil, err
		}
	}
	return &result{typ: TypeToolIndexed, data: toolData(t, d, model, dim)}, nil
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

// Reset deletes the indexer's state, logs and inbox rows of tenant ("" =
// every tenant), for a rebuild.
func Reset(ctx context.Context, tx pgx.Tx, consumer, tenant string) error {
	if err := library.Reset(ctx, tx, tenant); err != nil {
		return err
	}
	if err := registry.Reset(ctx, tx, tenant); err != nil {
		return err
	}
	for _, table := range []string{"index_quality", "index_tool_health", "index_tool_health_log"} {
		if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE $1 = '' OR tenant_id = $1`, tenant); err != nil {
			return fmt.Errorf("reset %s: %w", table, err)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM inbox WHERE consumer = $1 AND ($2 = '' OR tenant_id = $2)`, consumer, tenant); err != nil {
		return fmt.Errorf("reset inbox: %w", err)
	}
	return nil
}
