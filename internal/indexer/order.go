package indexer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
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

func (f *promptFold) head(string, string) (library.Found, error) {
	return library.Found{Version: f.top, Hash: f.hashes[f.top]}, nil
}

func (f *promptFold) hashOf(_, _ string, v int) (string, bool, error) {
	h, ok := f.hashes[v]
	return h, ok, nil
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
	var before, after []*promptIn
	var unlog []string
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
				return nil, nil, fmt.Errorf("prompt %s, event %s: %w", k.key, e.EventID, library.ErrUnlogged)
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
	inBatch := map[string]bool{}
	for _, o := range batch {
		in := &promptIn{seq: o.d.StreamSeq, eventID: o.d.Event.ID(), at: o.at, o: o}
		if o.kind == opLabel {
			in.activate, in.label = true, o.label
		} else {
			in.p = o.prompt
		}
		inBatch[in.eventID] = true
		after = append(after, in)
	}
	sort.SliceStable(after, func(a, b int) bool { return after[a].seq < after[b].seq })
	was, err := foldPrompt(k.tenant, before)
	if err != nil {
		return nil, nil, err
	}
	now, err := foldPrompt(k.tenant, after)
	if err != nil {
		return nil, nil, err
	}

	// The log: moved events leave their later sequence; the batch's
	// events enter at theirs.
	if len(unlog) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM prompt_log WHERE tenant_id = $1 AND prompt_id = $2 AND event_id = ANY($3)`, k.tenant, k.key, unlog); err != nil {
			return nil, nil, fmt.Errorf("unlog: %w", err)
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
			return nil, nil, err
		}
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, fmt.Errorf("log: %w", err)
	}

	// The versions: a row whose event still makes a version keeps its
	// text and vector (renumbered if need be); the others go, and the
	// versions made by events without a row come.
	inAfter := map[string]*promptIn{}
	for _, in := range after {
		inAfter[in.eventID] = in
	}
	kept := map[string]bool{}
	var del []int
	var moves []library.Renumber
	for _, s := range stored {
		d, ok := now.dec[s.EventID]
		makes := ok && d.reject == nil && d.outcome == OutcomeCreated
		switch {
		case !makes || inBatch[s.EventID]:
			del = append(del, s.Version)
			if in := inAfter[s.EventID]; in != nil && in.noInput && !inBatch[s.EventID] {
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

	// The results: the batch's new events, and every decision that
	// changed.
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
	return out, fills, nil
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
	for _, kind := range []opKind{opPrompt, opTool} {
		e, table := ix.emb.Prompts, "prompts"
		if kind == opTool {
			e, table = ix.emb.Tools, "tools"
		}
		if e == nil {
			continue
		}
		for _, f := range fills {
			if f.kind != kind {
				continue
			}
			v, err := e.Embed(ctx, []string{f.text})
			if err == nil {
				where := `tenant_id = $1 AND name = $2 AND event_id = $3`
				args := []any{f.tenant, f.id, f.eventID}
				if kind == opPrompt {
					where = `tenant_id = $1 AND id = $2 AND event_id = $3 AND version = $4`
					args = append(args, f.version)
				}
				_, err = ix.pool.Exec(ctx, `UPDATE `+table+` SET embedding = $`+fmt.Sprint(len(args)+1)+`::vector, embedding_model = $`+fmt.Sprint(len(args)+2)+
					`, embedding_dim = $`+fmt.Sprint(len(args)+3)+` WHERE `+where+` AND embedding IS NULL`, append(args, pgvector.NewVector(v[0]), e.Model(), len(v[0]))...)
			}
			if err != nil {
				ix.log.Warn().Err(err).Str("event_id", f.eventID).Msg("version decided again stored without a vector; indexed for full-text search until agentq reindex")
			}
		}
	}
}
