package indexer

import (
	"context"
	"fmt"
	"slices"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/pgvector/pgvector-go"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/library"
)

// Stream order, whatever order copies commit in.
//
// Which version a create takes, whether it conflicts, whether an
// activation finds its version, and which definition of a tool is served
// depend on the events before it in the stream. Two copies (or one copy
// retrying after a failure while another goes on) can commit a later
// event of a prompt id or tool name before an earlier one. So every such
// event is logged at its stream sequence (migration 00014), under the
// prompt id's or tool name's lock (lockKeys), and:
//
//   - an event later than everything logged for its key (the usual case)
//     is decided against the stored state, as stream order decides it;
//   - an event earlier than something logged (it arrives late) makes the
//     indexer decide every logged event of the key again, in stream order
//     (refoldPrompt, refoldTool), and rewrite the key's versions, labels or
//     definitions to what that gives. Events whose decision changes get a
//     revised result (see revisedResult);
//   - an event already logged at a later sequence (the same event id
//     stored again later in the stream — a republish after the duplicate
//     window, a redrive — applied before the original) is moved back to
//     its first occurrence, and its key decided again.
//
// Tool health is the newest event by sequence: a late one changes nothing
// (compare-and-set), and only a republished one moved back needs the log.

// logged reports whether o's event is logged: what it does depends on the
// events before it in the stream or is displaced by those after it.
// Events rejected whatever came before (an invalid template, a reserved
// label) and quality figures (compare-and-set on their own version) are
// not.
func (o *op) logged() bool {
	switch o.kind {
	case opPrompt, opLabel:
		return o.reject == nil
	case opTool, opHealth:
		return true
	}
	return false
}

// logKey is a tenant's prompt id or tool name.
type logKey struct{ tenant, key string }

func (o *op) logKey() logKey {
	switch o.kind {
	case opPrompt:
		return logKey{o.d.Tenant, o.prompt.ID}
	case opLabel:
		return logKey{o.d.Tenant, o.label.promptID}
	case opTool:
		return logKey{o.d.Tenant, o.tool.Name}
	case opHealth:
		return logKey{o.d.Tenant, o.health.toolName}
	}
	return logKey{o.d.Tenant, ""}
}

// mark is where an event is logged: under which key, at which sequence.
type mark struct {
	key string
	seq uint64
}

// plan is how a transaction applies its events.
type plan struct {
	inc     []int            // decided one by one against the stored state, in stream order
	prompts map[logKey][]int // prompt ids decided again from their log, with these events
	tools   map[logKey][]int // tool names decided again from their log, with these events
	health  []int            // health events moved back to their first occurrence
	moved   map[logKey]bool  // (tenant, event id) of events moved back
	from    map[int]mark     // where a moved event was logged
}

// makePlan sorts todo (fresh events, and claimed ones that may be first
// occurrences of events applied at a later sequence) by what the logs
// say. Call it after lockKeys.
func makePlan(ctx context.Context, db library.DB, ops []op, todo []int, fresh map[int]bool) (*plan, error) {
	var pKeys, pEvents, tKeys, tEvents, hEvents [][2]string
	type seen struct {
		tool bool
		k    logKey
	}
	seenKey := map[seen]bool{}
	for _, i := range todo {
		o := &ops[i]
		if !o.logged() {
			continue
		}
		k, ev := o.logKey(), [2]string{o.d.Tenant, o.d.Event.ID()}
		kk := seen{o.kind == opTool, k}
		switch o.kind {
		case opPrompt, opLabel:
			if !seenKey[kk] {
				pKeys = append(pKeys, [2]string{k.tenant, k.key})
			}
			pEvents = append(pEvents, ev)
		case opTool:
			if !seenKey[kk] {
				tKeys = append(tKeys, [2]string{k.tenant, k.key})
			}
			tEvents = append(tEvents, ev)
		case opHealth:
			hEvents = append(hEvents, ev)
			continue // the newest of a tool's health is not needed
		}
		seenKey[kk] = true
	}
	newestP, loggedP, err := readMarks(ctx, db, "prompt_log", "prompt_id", pKeys, pEvents)
	if err != nil {
		return nil, err
	}
	newestT, loggedT, err := readMarks(ctx, db, "tool_log", "name", tKeys, tEvents)
	if err != nil {
		return nil, err
	}
	_, loggedH, err := readMarks(ctx, db, "index_tool_health_log", "tool_name", nil, hEvents)
	if err != nil {
		return nil, err
	}

	p := &plan{prompts: map[logKey][]int{}, tools: map[logKey][]int{}, moved: map[logKey]bool{}, from: map[int]mark{}}
	last := map[logKey]uint64{} // newest sequence decided one by one in this batch
	for _, i := range todo {
		o := &ops[i]
		if !o.logged() {
			if fresh[i] {
				p.inc = append(p.inc, i)
			}
			continue
		}
		k, ev, seq := o.logKey(), [2]string{o.d.Tenant, o.d.Event.ID()}, o.d.StreamSeq
		logged, newest, again := loggedP, newestP, p.prompts
		switch o.kind {
		case opTool:
			logged, newest, again = loggedT, newestT, p.tools
		case opHealth:
			logged, newest, again = loggedH, nil, nil
		}
		m, isLogged := logged[ev]
		switch {
		case isLogged && m.seq <= seq:
			// This occurrence, or a copy of an event applied at its first
			// occurrence: nothing to do.
		case isLogged:
			// The first occurrence of an event applied at a later one.
			p.moved[logKey{o.d.Tenant, o.d.Event.ID()}] = true
			p.from[i] = m
			if o.kind == opHealth {
				p.health = append(p.health, i)
				break
			}
			again[k] = append(again[k], i)
			if from := (logKey{k.tenant, m.key}); from != k {
				// Republished under another prompt id or tool name: that
				// one loses the entry.
				if _, ok := again[from]; !ok {
					again[from] = nil
				}
			}
		case !fresh[i]:
			// Applied before the log existed.
		case o.kind == opHealth:
			p.inc = append(p.inc, i) // the newest by sequence wins: order does not matter
		default:
			if _, ok := again[k]; ok || seq < newest[[2]string{k.tenant, k.key}] || seq < last[k] {
				again[k] = append(again[k], i)
				break
			}
			last[k] = seq
			p.inc = append(p.inc, i)
		}
	}
	// An event first taken one by one whose key is decided again after
	// all goes with it.
	inc := p.inc[:0]
	for _, i := range p.inc {
		o := &ops[i]
		if o.logged() && o.kind != opHealth {
			again := p.prompts
			if o.kind == opTool {
				again = p.tools
			}
			if _, ok := again[o.logKey()]; ok {
				again[o.logKey()] = append(again[o.logKey()], i)
				continue
			}
		}
		inc = append(inc, i)
	}
	p.inc = inc
	return p, nil
}

// readMarks reads, in one statement, the newest logged sequence of each
// (tenant, key) in keys and where each (tenant, event id) in events is
// logged, from a log table whose key column is keyCol.
func readMarks(ctx context.Context, db library.DB, table, keyCol string, keys, events [][2]string) (map[[2]string]uint64, map[[2]string]mark, error) {
	newest := map[[2]string]uint64{}
	logged := map[[2]string]mark{}
	if len(keys) == 0 && len(events) == 0 {
		return newest, logged, nil
	}
	split := func(ps [][2]string) ([]string, []string) {
		a, b := make([]string, len(ps)), make([]string, len(ps))
		for i, p := range ps {
			a[i], b[i] = p[0], p[1]
		}
		return a, b
	}
	kt, kk := split(keys)
	et, ee := split(events)
	// The newest entry of a key is one backward step of the primary key.
	rows, err := db.Query(ctx, `
SELECT true, u.t, u.k, '', x.seq FROM unnest($1::text[], $2::text[]) AS u(t, k)
CROSS JOIN LATERAL (SELECT l.stream_seq AS seq FROM `+table+` l WHERE l.tenant_id = u.t AND l.`+keyCol+` = u.k
                    ORDER BY l.stream_seq DESC LIMIT 1) x
UNION ALL
SELECT false, l.tenant_id, l.event_id, l.`+keyCol+`, l.stream_seq
FROM unnest($3::text[], $4::text[]) AS e(t, id) JOIN `+table+` l ON l.tenant_id = e.t AND l.event_id = e.id`, kt, kk, et, ee)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var top bool
		var tenant, a, b string
		var seq int64
		if err := rows.Scan(&top, &tenant, &a, &b, &seq); err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", table, err)
		}
		if top {
			newest[[2]string{tenant, a}] = uint64(seq)
		} else {
			logged[[2]string{tenant, a}] = mark{key: b, seq: uint64(seq)}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", table, err)
	}
	return newest, logged, nil
}

// decided is one result to publish: of an event of the batch (o), or a
// revised one of an event applied before whose decision changed.
type decided struct {
	o         *op // nil: an event applied before
	tenant    string
	causeID   string
	causeType string
	res       *result
	revised   string // the new decision's key, when it revises a published one
}

// refileHealth moves a health event back to its first occurrence, and
// makes the newest event by sequence hold each tool it concerns again.
func refileHealth(ctx context.Context, tx library.DB, o *op, from mark) error {
	if _, err := tx.Exec(ctx, `DELETE FROM index_tool_health_log WHERE tenant_id = $1 AND event_id = $2`, o.d.Tenant, o.d.Event.ID()); err != nil {
		return fmt.Errorf("unlog health: %w", err)
	}
	if err := logHealth(ctx, tx, o); err != nil {
		return err
	}
	for _, name := range slices.Compact([]string{o.health.toolName, from.key}) {
		if _, err := tx.Exec(ctx, `DELETE FROM index_tool_health WHERE tenant_id = $1 AND tool_name = $2`, o.d.Tenant, name); err != nil {
			return fmt.Errorf("health of %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO index_tool_health (tenant_id, tool_name, state, quarantined, expires_at, stream_seq, updated_at)
SELECT tenant_id, tool_name, state, quarantined, expires_at, stream_seq, updated_at FROM index_tool_health_log
WHERE tenant_id = $1 AND tool_name = $2 ORDER BY stream_seq DESC LIMIT 1`, o.d.Tenant, name); err != nil {
			return fmt.Errorf("health of %s: %w", name, err)
		}
	}
	return nil
}

func logHealth(ctx context.Context, tx library.DB, o *op) error {
	h := o.health
	if _, err := tx.Exec(ctx, `INSERT INTO index_tool_health_log (tenant_id, tool_name, stream_seq, event_id, state, quarantined, expires_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, o.d.Tenant, h.toolName, int64(o.d.StreamSeq), o.d.Event.ID(), h.state, h.quarantined, h.expiresAt, o.at); err != nil {
		return fmt.Errorf("log health of %s: %w", h.toolName, err)
	}
	return nil
}

// revisedResult is the result that replaces a published one whose
// decision changed, or of an event moved back to its first occurrence
// (whatever it says, the state around it changed: subscribers such as the
// prompts.get caches of other copies hear of it): the same type of result
// for the same cause, its id derived from the cause and the decision (so
// the copy that publishes it again after a crash gives the same id), with
// revised: true.
func (ix *Indexer) revisedResult(x decided) (event.Event, error) {
	cause := event.New()
	cause.SetID(x.causeID)
	cause.SetType(x.causeType)
	cause.SetExtension(bus.ExtTenant, x.tenant)
	x.res.data["revised"] = true
	ev, err := bus.NewResult(ix.opts.Consumer, x.res.typ, cause, x.res.data)
	if err != nil {
		return ev, err
	}
	ev.SetID(bus.DeriveID(ix.opts.Consumer, x.tenant, x.res.typ, "event:"+x.causeID+"#revised:"+x.revised))
	return ev, nil
}

// fillVectors embeds the rows decisions taken again stored without a
// vector, after the commit. A failure leaves them to full text until
// agentq reindex, as a text the model refuses.
func (ix *Indexer) fillVectors(ctx context.Context, fills []vectorFill) {
	for _, f := range fills {
		e := ix.emb.Prompts
		if f.kind == opTool {
			e = ix.emb.Tools
		}
		if e == nil {
			continue
		}
		v, err := e.Embed(ctx, []string{f.text})
		if err == nil {
			vec, model, dim := pgvector.NewVector(v[0]), e.Model(), len(v[0])
			if f.kind == opTool {
				_, err = ix.pool.Exec(ctx, `UPDATE tools SET embedding = $4, embedding_model = $5, embedding_dim = $6
WHERE tenant_id = $1 AND name = $2 AND event_id = $3 AND embedding IS NULL`, f.tenant, f.id, f.eventID, vec, model, dim)
			} else {
				_, err = ix.pool.Exec(ctx, `UPDATE prompts SET embedding = $5, embedding_model = $6, embedding_dim = $7
WHERE tenant_id = $1 AND id = $2 AND version = $3 AND event_id = $4 AND embedding IS NULL`, f.tenant, f.id, f.version, f.eventID, vec, model, dim)
			}
		}
		if err != nil {
			ix.log.Warn().Err(err).Str("event_id", f.eventID).Msg("version decided again stored without a vector; indexed for full-text search until agentq reindex")
		}
	}
}
