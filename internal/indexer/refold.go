package indexer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
)

// Deciding a prompt id's or a tool's logged events again in stream order
// (see order.go): a fold over the log, the rows rewritten to what it
// gives, and the results of what changed.

// vectorFill is a row a decision taken again stored without a vector: its
// text was embedded with another decision, or never (a create answered
// unchanged or rejected before). Embedded after the commit.
type vectorFill struct {
	kind       opKind // opPrompt or opTool
	tenant, id string
	version    int // a prompt's
	eventID    string
	text       string
}

// promptIn is one logged event of a prompt id, decided in a fold.
type promptIn struct {
	seq      uint64
	eventID  string
	activate bool
	label    labelMove      // an activation's
	p        library.Prompt // a create's, as given (Version 0: the next free one)
	at       time.Time
	o        *op // an event of this batch
	noInput  bool
}

// promptFold is a prompt id's state after its events in stream order,
// and the decision of each (by event id).
type promptFold struct {
	made   map[int]*promptIn // version → the create that made it
	hashes map[int]string
	top    int
	labels map[string]library.Label
	dec    map[string]decision
}

func (f *promptFold) head(tenant, id string) (library.Found, error) {
	found, _, err := f.version(tenant, id, f.top)
	return found, err
}

func (f *promptFold) version(_, _ string, v int) (library.Found, bool, error) {
	h, ok := f.hashes[v]
	if !ok {
		return library.Found{}, false, nil
	}
	return library.Found{Version: v, Hash: h, Params: f.made[v].p.Parameters}, true, nil
}

// labelsOn returns the labels on version, sorted.
func (f *promptFold) labelsOn(version int) []string {
	var out []string
	for name, l := range f.labels {
		if l.Version == version {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// foldPrompt decides ins (in stream order) one by one, as the batch path
// does (decidePrompt, decideLabel).
func foldPrompt(tenant string, ins []*promptIn) (*promptFold, error) {
	f := &promptFold{made: map[int]*promptIn{}, hashes: map[int]string{}, labels: map[string]library.Label{}, dec: map[string]decision{}}
	for _, in := range ins {
		if in.activate {
			h, ok := f.hashes[in.label.version]
			d := decideLabel(tenant, in.label, h, ok)
			if d.reject == nil {
				f.labels[in.label.label] = library.Label{Label: in.label.label, Version: in.label.version, StreamSeq: in.seq, EventID: in.eventID, At: in.at}
			}
			f.dec[in.eventID] = d
			continue
		}
		d, err := decidePrompt(f, in.p)
		if err != nil {
			return nil, err
		}
		if d.reject == nil && d.outcome == OutcomeCreated {
			f.made[d.version], f.hashes[d.version], f.top = in, d.hash, max(f.top, d.version)
		}
		f.dec[in.eventID] = d
	}
	return f, nil
}

// refoldPrompt decides the logged events of one prompt id again in stream
// order, with batch (its events of this batch, arriving late or moved back
// to their first occurrence) in their places, and rewrites the id's
// versions and labels to what that gives. moved names the events moved
// back (their entries leave the log at their later sequence).
func (ix *Indexer) refoldPrompt(ctx context.Context, tx txDB, k logKey, batch []*op, moved map[logKey]bool) ([]decided, []vectorFill, error) {
	entries, err := library.ReadLog(ctx, tx, k.tenant, k.key)
	if err != nil {
		return nil, nil, err
	}
	stored, err := library.Versions(ctx, tx, k.tenant, k.key)
	if err != nil {
		return nil, nil, err
	}
	rowOf := map[string]*library.Stored{}
	for i := range stored {
		rowOf[stored[i].EventID] = &stored[i]
	}
	before, after, unlog, err := promptInputs(k, entries, rowOf, batch, moved)
	if err != nil {
		return nil, nil, err
	}
	was, err := foldPrompt(k.tenant, before)
	if err != nil {
		return nil, nil, err
	}
	now, err := foldPrompt(k.tenant, after)
	if err != nil {
		return nil, nil, err
	}
	if err := logPrompts(ctx, tx, k, unlog, batch); err != nil {
		return nil, nil, err
	}
	kept, fills, err := ix.rewriteVersions(ctx, tx, k, stored, after, now)
	if err != nil {
		return nil, nil, err
	}
	labels := make([]library.Label, 0, len(now.labels))
	for _, l := range now.labels {
		labels = append(labels, l)
	}
	sort.Slice(labels, func(a, b int) bool { return labels[a].Label < labels[b].Label })
	if err := library.ReplaceLabels(ctx, tx, k.tenant, k.key, labels); err != nil {
		return nil, nil, err
	}
	if err := library.Refresh(ctx, tx, k.tenant, k.key); err != nil {
		return nil, nil, err
	}
	return ix.promptResults(k, after, was, now, moved, rowOf, kept), fills, nil
}

// promptInputs are a prompt id's events in stream order before this batch
// (the log as it is) and after it (moved events out of their later place,
// the batch's events in theirs), and the moved events to unlog here.
func promptInputs(k logKey, entries []library.Entry, rowOf map[string]*library.Stored, batch []*op, moved map[logKey]bool) (before, after []*promptIn, unlog []string, err error) {
	for _, e := range entries {
		in := &promptIn{seq: e.StreamSeq, eventID: e.EventID, activate: e.Activate, at: e.At}
		if e.Activate {
			in.label = labelMove{promptID: k.key, label: e.Label, version: e.Version}
		} else {
			switch r := rowOf[e.EventID]; {
			case e.Input != nil:
				in.p = *e.Input
			case r != nil:
				in.p, in.noInput = r.Prompt, true
			default:
				return nil, nil, nil, fmt.Errorf("prompt %s, event %s: %w", k.key, e.EventID, library.ErrUnlogged)
			}
			in.p.Tenant, in.p.ID, in.p.Version, in.p.Hash, in.p.Labels, in.p.CreatedAt = k.tenant, k.key, e.Version, "", nil, e.At
		}
		before = append(before, in)
		if moved[logKey{k.tenant, e.EventID}] {
			unlog = append(unlog, e.EventID)
			continue
		}
		after = append(after, in)
	}
	for _, o := range batch {
		in := &promptIn{seq: o.d.StreamSeq, eventID: o.d.Event.ID(), at: o.at, o: o}
		if o.kind == opLabel {
			in.activate, in.label = true, o.label
		} else {
			in.p = o.prompt
		}
		after = append(after, in)
	}
	sort.SliceStable(after, func(a, b int) bool { return after[a].seq < after[b].seq })
	return before, after, unlog, nil
}

// logPrompts takes moved events out of a prompt id's log at their later
// sequence and logs the batch's events at theirs.
func logPrompts(ctx context.Context, tx txDB, k logKey, unlog []string, batch []*op) error {
	if len(unlog) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM prompt_log WHERE tenant_id = $1 AND prompt_id = $2 AND event_id = ANY($3)`, k.tenant, k.key, unlog); err != nil {
			return fmt.Errorf("unlog: %w", err)
		}
	}
	b := &pgx.Batch{}
	for _, o := range batch {
		e := library.Entry{Tenant: k.tenant, PromptID: k.key, StreamSeq: o.d.StreamSeq, EventID: o.d.Event.ID(), At: o.at}
		if o.kind == opLabel {
			e.Activate, e.Version, e.Label = true, o.label.version, o.label.label
		} else {
			p := o.prompt
			e.Version, e.Input = p.Version, &p
		}
		if err := library.QueueLog(b, e); err != nil {
			return err
		}
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("log: %w", err)
	}
	return nil
}

// rewriteVersions makes a prompt id's version rows what now says: a row
// whose event (not of this batch) still makes a version keeps its text and
// vector, renumbered if need be (kept); the other rows go, and the
// versions made by events without a row come, with the batch's vectors or
// none yet (fills).
func (ix *Indexer) rewriteVersions(ctx context.Context, tx txDB, k logKey, stored []library.Stored, after []*promptIn, now *promptFold) (map[string]bool, []vectorFill, error) {
	inAfter := map[string]*promptIn{}
	for _, in := range after {
		inAfter[in.eventID] = in
	}
	kept := map[string]bool{}
	var del []int
	var moves []library.Renumber
	for _, s := range stored {
		d, ok := now.dec[s.EventID]
		in := inAfter[s.EventID]
		switch {
		case !ok || d.reject != nil || d.outcome != OutcomeCreated || in.o != nil:
			del = append(del, s.Version)
			if in != nil && in.noInput && in.o == nil {
				// It stays in the log without the row that held its input.
				if err := library.KeepInput(ctx, tx, k.tenant, s.EventID, in.p); err != nil {
					return nil, nil, err
				}
			}
		case d.version == s.Version:
			kept[s.EventID] = true
		default:
			moves = append(moves, library.Renumber{EventID: s.EventID, Version: d.version, Hash: d.hash})
			kept[s.EventID] = true
		}
	}
	if err := library.DeleteVersions(ctx, tx, k.tenant, k.key, del); err != nil {
		return nil, nil, err
	}
	if err := library.RenumberVersions(ctx, tx, k.tenant, k.key, moves); err != nil {
		return nil, nil, err
	}
	var fills []vectorFill
	versions := make([]int, 0, len(now.made))
	for v := range now.made {
		versions = append(versions, v)
	}
	slices.Sort(versions)
	for _, v := range versions {
		in := now.made[v]
		if kept[in.eventID] {
			continue
		}
		p := in.p
		p.Version, p.Hash, p.CreatedAt = v, now.hashes[v], in.at
		row := library.Row{Prompt: p, EventID: in.eventID, StreamSeq: in.seq}
		if in.o != nil {
			row.Embedding = in.o.vec
			row.Model, _ = ix.model(in.o)
		} else if text := promptText(p); text != "" {
			fills = append(fills, vectorFill{kind: opPrompt, tenant: k.tenant, id: k.key, version: v, eventID: in.eventID, text: text})
		}
		if _, err := library.Insert(ctx, tx, row); err != nil {
			return nil, nil, err
		}
	}
	return kept, fills, nil
}

// promptResults are the results of a prompt id decided again: of the
// batch's new events, of the events moved back, and revised ones for every
// other decision that changed.
func (ix *Indexer) promptResults(k logKey, after []*promptIn, was, now *promptFold, moved map[logKey]bool, rowOf map[string]*library.Stored, kept map[string]bool) []decided {
	var out []decided
	for _, in := range after {
		d := now.dec[in.eventID]
		isMoved := moved[logKey{k.tenant, in.eventID}]
		fresh := in.o != nil && !isMoved
		if prev, ok := was.dec[in.eventID]; !fresh && !isMoved && ok && prev.key() == d.key() {
			continue
		}
		typ := TypePromptCreated
		if in.activate {
			typ = TypePromptActivated
		}
		x := decided{o: in.o, tenant: k.tenant, causeID: in.eventID, causeType: typ}
		if !fresh {
			x.revised = d.key()
		}
		switch {
		case d.reject != nil:
			x.res = &result{typ: TypeRejected, data: rejectedData(typ, in.eventID, *d.reject)}
		default:
			model, dim := "", 0
			if in.o != nil {
				model, dim = ix.model(in.o)
			} else if r := rowOf[in.eventID]; r != nil && kept[in.eventID] {
				model, dim = r.Model, r.Dim
			}
			p := in.p
			p.ID = k.key
			x.res = &result{typ: TypePromptIndexed, data: promptData(p, d, model, dim, now.labelsOn(d.version), in.activate)}
		}
		out = append(out, x)
	}
	return out
}

// toolIn is one logged registration of a tool, decided in a fold.
type toolIn struct {
	seq     uint64
	eventID string
	t       registry.Tool // as given
	at      time.Time
	o       *op // an event of this batch
	noDef   bool
}

// toolFold is a tool's definitions after its registrations in stream
// order, and the decision of each (by event id).
type toolFold struct {
	made    map[int]*toolIn // version → the registration that made it
	current *toolIn
	version int
	dec     map[string]decision
}

func foldTool(ins []*toolIn) *toolFold {
	f := &toolFold{made: map[int]*toolIn{}, dec: map[string]decision{}}
	hash := ""
	for _, in := range ins {
		d := decideTool(f.version, hash, in.t.Hash)
		if d.outcome == OutcomeCreated {
			f.made[d.version], f.current, f.version, hash = in, in, d.version, d.hash
		}
		f.dec[in.eventID] = d
	}
	return f
}

// refoldTool is refoldPrompt for a tool: its history, and its current
// definition, the last registered in stream order.
func (ix *Indexer) refoldTool(ctx context.Context, tx txDB, k logKey, batch []*op, moved map[logKey]bool) ([]decided, []vectorFill, error) {
	entries, err := registry.ReadLog(ctx, tx, k.tenant, k.key)
	if err != nil {
		return nil, nil, err
	}
	hist, err := registry.HistoryRows(ctx, tx, k.tenant, k.key)
	if err != nil {
		return nil, nil, err
	}
	cur, err := registry.Current(ctx, tx, k.tenant, k.key)
	hasCur := err == nil
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		return nil, nil, err
	}
	rowOf := map[string]*registry.Stored{}
	for i := range hist {
		rowOf[hist[i].EventID] = &hist[i]
	}
	var before, after []*toolIn
	var unlog []string
	for _, e := range entries {
		in := &toolIn{seq: e.StreamSeq, eventID: e.EventID, at: e.RegisteredAt}
		switch r := rowOf[e.EventID]; {
		case e.Def != nil:
			in.t = *e.Def
		case r != nil:
			in.t, in.noDef = r.Tool, true
		default:
			return nil, nil, fmt.Errorf("tool %s, event %s: %w", k.key, e.EventID, library.ErrUnlogged)
		}
		in.t.Tenant, in.t.Name, in.t.Version, in.t.Hash, in.t.RegisteredAt = k.tenant, k.key, 0, e.Hash, e.RegisteredAt
		before = append(before, in)
		if moved[logKey{k.tenant, e.EventID}] {
			unlog = append(unlog, e.EventID)
			continue
		}
		after = append(after, in)
	}
	inBatch := map[string]bool{}
	for _, o := range batch {
		inBatch[o.d.Event.ID()] = true
		after = append(after, &toolIn{seq: o.d.StreamSeq, eventID: o.d.Event.ID(), t: o.tool, at: o.at, o: o})
	}
	sort.SliceStable(after, func(a, b int) bool { return after[a].seq < after[b].seq })
	was, now := foldTool(before), foldTool(after)

	if len(unlog) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM tool_log WHERE tenant_id = $1 AND name = $2 AND event_id = ANY($3)`, k.tenant, k.key, unlog); err != nil {
			return nil, nil, fmt.Errorf("unlog: %w", err)
		}
	}
	for _, o := range batch {
		t := o.tool
		if err := registry.InsertLog(ctx, tx, registry.Entry{Tenant: k.tenant, Name: k.key, StreamSeq: o.d.StreamSeq, EventID: o.d.Event.ID(),
			Hash: t.Hash, Def: &t, RegisteredAt: o.at}); err != nil {
			return nil, nil, err
		}
	}
	for _, in := range after {
		if d := now.dec[in.eventID]; in.noDef && d.outcome != OutcomeCreated {
			// It stays in the log without the history row that held its
			// definition.
			if err := registry.KeepDefinition(ctx, tx, k.tenant, in.eventID, in.t); err != nil {
				return nil, nil, err
			}
		}
	}
	rows := make([]registry.Row, 0, len(now.made))
	for v := 1; v <= now.version; v++ {
		in := now.made[v]
		t := in.t
		t.Version, t.RegisteredAt = v, in.at
		rows = append(rows, registry.Row{Tool: t, EventID: in.eventID, StreamSeq: in.seq})
	}
	if err := registry.ReplaceHistory(ctx, tx, k.tenant, k.key, rows); err != nil {
		return nil, nil, err
	}
	var fills []vectorFill
	kept := false
	switch c := now.current; {
	case c == nil:
		if err := registry.DeleteCurrent(ctx, tx, k.tenant, k.key); err != nil {
			return nil, nil, err
		}
	case hasCur && cur.EventID == c.eventID && !inBatch[c.eventID]:
		kept = true // its text and vector stay
		if cur.Version != now.version {
			if err := registry.SetCurrentVersion(ctx, tx, k.tenant, k.key, now.version); err != nil {
				return nil, nil, err
			}
		}
	default:
		row := rows[now.version-1]
		if c.o != nil {
			row.Embedding = c.o.vec
			row.Model, _ = ix.model(c.o)
		} else if text := toolText(row.Tool); text != "" {
			fills = append(fills, vectorFill{kind: opTool, tenant: k.tenant, id: k.key, eventID: c.eventID, text: text})
		}
		if err := registry.SetCurrent(ctx, tx, row); err != nil {
			return nil, nil, err
		}
	}

	var out []decided
	for _, in := range after {
		d := now.dec[in.eventID]
		isMoved := moved[logKey{k.tenant, in.eventID}]
		fresh := in.o != nil && !isMoved
		if prev, ok := was.dec[in.eventID]; !fresh && !isMoved && ok && prev.key() == d.key() {
			continue
		}
		x := decided{o: in.o, tenant: k.tenant, causeID: in.eventID, causeType: TypeToolRegistered}
		if !fresh {
			x.revised = d.key()
		}
		model, dim := "", 0
		switch {
		case in.o != nil:
			model, dim = ix.model(in.o)
		case kept && now.current == in:
			model, dim = cur.Model, cur.Dim
		}
		x.res = &result{typ: TypeToolIndexed, data: toolData(in.t, d, model, dim)}
		out = append(out, x)
	}
	return out, fills, nil
}
