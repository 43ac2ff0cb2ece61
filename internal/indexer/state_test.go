package indexer

// This file is the test oracle: the state of a tenant read from the
// database (ReadState) and the state the stream gives applied in order with
// no database (Compute), field by field, for the conformance suite, replay
// and stream-order tests. It is compiled into tests only.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/library"
)

// State is the indexer's whole state of one tenant, every field that
// matters in a canonical order: what replay and the conformance suite
// compare. Vectors are left out (Compute has no model); their model and
// dimension are not.
type State struct {
	Prompts []PromptRow
	Labels  []LabelRow
	Tools   []ToolRow // current definitions
	History []ToolRow // every definition
	Quality []QualityRow
	Health  []HealthRow
}

// PromptRow is a stored prompt version.
type PromptRow struct {
	ID, Hash, Type, Name, Description, Content string
	Version                                    int
	Parameters, Metadata                       string // canonical JSON
	Tags                                       []string
	Author                                     string
	CreatedAt                                  time.Time
	EventID                                    string
	StreamSeq                                  int64
	Current                                    bool // the version a consumer gets
}

// LabelRow is where a label points.
type LabelRow struct {
	PromptID, Label string
	Version         int
	StreamSeq       int64
}

// ToolRow is a tool definition.
type ToolRow struct {
	Name, Hash, Description, Server string
	Version                         int
	InputSchema                     string // canonical JSON
	Tags                            []string
	RegisteredAt                    time.Time
	EventID                         string
	StreamSeq                       int64
}

// QualityRow is the read model of one quality.changed target.
type QualityRow struct {
	Target, Ref           string
	StateVersion          int64
	Score, SuccessRate    float64
	TotalCalls, Successes int64
	LastSuccess           *time.Time
	UpdatedAt             time.Time
}

// HealthRow is the read model of one tool's health.
type HealthRow struct {
	ToolName, State string
	Quarantined     bool
	ExpiresAt       *time.Time
	StreamSeq       int64
	UpdatedAt       time.Time
}

// canonicalJSON re-encodes JSON with sorted keys and no spaces; "" stays "".
func canonicalJSON(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return ""
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return "invalid:" + string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// ReadState reads tenant's state from the database.
func ReadState(ctx context.Context, db library.DB, tenant string) (State, error) {
	var s State
	var err error
	collect := func(sql string, scan func(pgx.Rows) error) {
		if err != nil {
			return
		}
		var rows pgx.Rows
		if rows, err = db.Query(ctx, sql, tenant); err != nil {
			return
		}
		defer rows.Close()
		for rows.Next() {
			if err = scan(rows); err != nil {
				return
			}
		}
		err = rows.Err()
	}
	collect(`SELECT id, version, hash, type, name, description, content, parameters::text, coalesce(metadata::text, ''), tags, author,
	         created_at, event_id, stream_seq, current FROM prompts WHERE tenant_id = $1 ORDER BY id, version`, func(r pgx.Rows) error {
		var p PromptRow
		if err := r.Scan(&p.ID, &p.Version, &p.Hash, &p.Type, &p.Name, &p.Description, &p.Content, &p.Parameters, &p.Metadata,
			&p.Tags, &p.Author, &p.CreatedAt, &p.EventID, &p.StreamSeq, &p.Current); err != nil {
			return err
		}
		p.Parameters, p.Metadata, p.CreatedAt = canonicalJSON([]byte(p.Parameters)), canonicalJSON([]byte(p.Metadata)), p.CreatedAt.UTC()
		s.Prompts = append(s.Prompts, p)
		return nil
	})
	collect(`SELECT prompt_id, label, version, stream_seq FROM prompt_labels WHERE tenant_id = $1 ORDER BY prompt_id, label`, func(r pgx.Rows) error {
		var l LabelRow
		if err := r.Scan(&l.PromptID, &l.Label, &l.Version, &l.StreamSeq); err != nil {
			return err
		}
		s.Labels = append(s.Labels, l)
		return nil
	})
	tool := func(dst *[]ToolRow) func(pgx.Rows) error {
		return func(r pgx.Rows) error {
			var t ToolRow
			if err := r.Scan(&t.Name, &t.Version, &t.Hash, &t.Description, &t.InputSchema, &t.Server, &t.Tags, &t.RegisteredAt, &t.EventID, &t.StreamSeq); err != nil {
				return err
			}
			t.InputSchema, t.RegisteredAt = canonicalJSON([]byte(t.InputSchema)), t.RegisteredAt.UTC()
			*dst = append(*dst, t)
			return nil
		}
	}
	const toolCols = `name, version, hash, description, coalesce(input_schema::text, ''), server, tags, registered_at, event_id, stream_seq`
	collect(`SELECT `+toolCols+` FROM tools WHERE tenant_id = $1 ORDER BY name`, tool(&s.Tools))
	collect(`SELECT `+toolCols+` FROM tool_history WHERE tenant_id = $1 ORDER BY name, version`, tool(&s.History))
	collect(`SELECT target, ref, state_version, quality_score, success_rate, total_calls, successes, last_success, updated_at
	         FROM index_quality WHERE tenant_id = $1 ORDER BY target, ref`, func(r pgx.Rows) error {
		var q QualityRow
		if err := r.Scan(&q.Target, &q.Ref, &q.StateVersion, &q.Score, &q.SuccessRate, &q.TotalCalls, &q.Successes, &q.LastSuccess, &q.UpdatedAt); err != nil {
			return err
		}
		q.LastSuccess, q.UpdatedAt = utcPtr(q.LastSuccess), q.UpdatedAt.UTC()
		s.Quality = append(s.Quality, q)
		return nil
	})
	collect(`SELECT tool_name, state, quarantined, expires_at, stream_seq, updated_at FROM index_tool_health
	         WHERE tenant_id = $1 ORDER BY tool_name`, func(r pgx.Rows) error {
		var h HealthRow
		if err := r.Scan(&h.ToolName, &h.State, &h.Quarantined, &h.ExpiresAt, &h.StreamSeq, &h.UpdatedAt); err != nil {
			return err
		}
		h.ExpiresAt, h.UpdatedAt = utcPtr(h.ExpiresAt), h.UpdatedAt.UTC()
		s.Health = append(s.Health, h)
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("read indexer state of %s: %w", tenant, err)
	}
	return s, nil
}

// Compute is the reference: the state deliveries give when applied one by
// one in the order given (stream order), in memory, without a database.
// An event id seen before (a republished copy) counts at its first
// occurrence only. Deliveries may include consumer's own results
// (prompt.indexed, tool.indexed, indexer.rejected): they hold no state.
func Compute(consumer string, ds []*bus.Delivery) State {
	type pkey struct {
		id string
		v  int
	}
	prompts := map[pkey]PromptRow{}
	declared := map[pkey]string{} // each version's parameters, as paramsKey gives
	head := map[string]int{}
	labels := map[[2]string]LabelRow{}
	tools := map[string]ToolRow{}
	var history []ToolRow
	quality := map[[2]string]QualityRow{}
	health := map[string]HealthRow{}
	seen := map[[2]string]bool{}

	for _, d := range ds {
		if d.Event.Source() == "agentq/"+consumer {
			continue
		}
		if k := [2]string{d.Tenant, d.Event.ID()}; seen[k] {
			continue
		} else {
			seen[k] = true
		}
		o, err := decode(d)
		if err != nil || o.reject != nil {
			continue // dead letters, rejections: no state
		}
		switch o.kind {
		case opPrompt:
			p := o.prompt
			switch {
			case p.Version > 0:
				if _, exists := prompts[pkey{p.ID, p.Version}]; exists {
					continue // unchanged or a conflict: nothing stored
				}
			default:
				h := head[p.ID]
				if h > 0 && prompts[pkey{p.ID, h}].Hash == library.Hash(p.ID, h, p.Content, p.Type) && declared[pkey{p.ID, h}] == paramsKey(p.Parameters) {
					continue
				}
				if h == math.MaxInt32 {
					continue // no next version: rejected
				}
				p.Version = h + 1
			}
			params, _ := json.Marshal(nonNil(p.Parameters))
			tags := p.Tags
			if tags == nil {
				tags = []string{}
			}
			prompts[pkey{p.ID, p.Version}] = PromptRow{
				ID: p.ID, Version: p.Version, Hash: library.Hash(p.ID, p.Version, p.Content, p.Type), Type: p.Type, Name: p.Name,
				Description: p.Description, Content: p.Content, Parameters: canonicalJSON(params), Metadata: canonicalJSON(p.Metadata),
				Tags: tags, Author: p.Author, CreatedAt: o.at, EventID: d.Event.ID(), StreamSeq: int64(d.StreamSeq),
			}
			declared[pkey{p.ID, p.Version}] = paramsKey(p.Parameters)
			head[p.ID] = max(head[p.ID], p.Version)
		case opLabel:
			if _, ok := prompts[pkey{o.label.promptID, o.label.version}]; !ok {
				continue
			}
			k := [2]string{o.label.promptID, o.label.label}
			labels[k] = LabelRow{PromptID: o.label.promptID, Label: o.label.label, Version: o.label.version, StreamSeq: int64(d.StreamSeq)}
		case opTool:
			t := o.tool
			cur, exists := tools[t.Name]
			if exists && cur.Hash == t.Hash {
				continue
			}
			t.Version = cur.Version + 1
			tags := t.Tags
			if tags == nil {
				tags = []string{}
			}
			row := ToolRow{Name: t.Name, Version: t.Version, Hash: t.Hash, Description: t.Description, Server: t.Server,
				InputSchema: canonicalJSON(t.InputSchema), Tags: tags, RegisteredAt: o.at, EventID: d.Event.ID(), StreamSeq: int64(d.StreamSeq)}
			history = append(history, row)
			tools[t.Name] = row
		case opQuality:
			q := o.quality
			k := [2]string{q.target, q.ref}
			at := o.at
			cur, ok := quality[k]
			if !ok {
				row := QualityRow{Target: q.target, Ref: q.ref, StateVersion: q.stateVersion, Score: q.score, SuccessRate: q.successRate,
					TotalCalls: q.totalCalls, Successes: q.successes, UpdatedAt: at}
				if q.successes > 0 {
					row.LastSuccess = &at
				}
				quality[k] = row
				continue
			}
			if q.stateVersion > cur.StateVersion {
				cur.StateVersion, cur.Score, cur.SuccessRate, cur.TotalCalls, cur.UpdatedAt = q.stateVersion, q.score, q.successRate, q.totalCalls, at
			}
			switch {
			case q.successes > cur.Successes:
				cur.Successes, cur.LastSuccess = q.successes, &at
			case q.successes == cur.Successes && cur.LastSuccess != nil && at.Before(*cur.LastSuccess):
				cur.LastSuccess = &at
			}
			quality[k] = cur
		case opHealth:
			h := o.health
			health[h.toolName] = HealthRow{ToolName: h.toolName, State: h.state, Quarantined: h.quarantined,
				ExpiresAt: h.expiresAt, StreamSeq: int64(d.StreamSeq), UpdatedAt: o.at}
		}
	}
	var s State
	for k, p := range prompts {
		served := head[p.ID]
		if l, ok := labels[[2]string{p.ID, "production"}]; ok {
			served = l.Version
		}
		p.Current = k.v == served
		s.Prompts = append(s.Prompts, p)
	}
	sort.Slice(s.Prompts, func(i, j int) bool {
		a, b := s.Prompts[i], s.Prompts[j]
		return a.ID < b.ID || a.ID == b.ID && a.Version < b.Version
	})
	for _, l := range labels {
		s.Labels = append(s.Labels, l)
	}
	sort.Slice(s.Labels, func(i, j int) bool {
		a, b := s.Labels[i], s.Labels[j]
		return a.PromptID < b.PromptID || a.PromptID == b.PromptID && a.Label < b.Label
	})
	for _, t := range tools {
		s.Tools = append(s.Tools, t)
	}
	sort.Slice(s.Tools, func(i, j int) bool { return s.Tools[i].Name < s.Tools[j].Name })
	s.History = history
	sort.SliceStable(s.History, func(i, j int) bool {
		a, b := s.History[i], s.History[j]
		return a.Name < b.Name || a.Name == b.Name && a.Version < b.Version
	})
	for _, q := range quality {
		s.Quality = append(s.Quality, q)
	}
	sort.Slice(s.Quality, func(i, j int) bool {
		a, b := s.Quality[i], s.Quality[j]
		return a.Target < b.Target || a.Target == b.Target && a.Ref < b.Ref
	})
	for _, h := range health {
		s.Health = append(s.Health, h)
	}
	sort.Slice(s.Health, func(i, j int) bool { return s.Health[i].ToolName < s.Health[j].ToolName })
	return s
}

// paramsKey is a declaration as the reference compares two: sorted by
// name, each parameter's JSON with sorted keys and no zero fields.
func paramsKey(ps []library.Param) string {
	sorted := append([]library.Param{}, ps...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	b, _ := json.Marshal(sorted)
	return canonicalJSON(b)
}

func nonNil(p []library.Param) []library.Param {
	if p == nil {
		return []library.Param{}
	}
	return p
}
