package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/library"
)

// querier runs statements; pgx.Tx and *pgxpool.Pool satisfy it.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// The lab's read model of prompt versions (DESIGN.md §10: a consumer
// keeps its own, from the stream, rather than reading another's tables).
// prompt.created gives the content; the indexer's result for it, with the
// created event as its cause, gives the version it was stored as and the
// labels on it. The two are joined by that event id, so they may arrive in
// either order, and again.
//
// The indexer may revise a result (an event arriving late decides the
// events after it again, in stream order): the newest result of a cause,
// by stream sequence, is what its event did. Every result is kept
// (lab_prompt_results) and the version a create is (lab_prompt_versions)
// follows the newest of its cause: a create revised to another version
// moves there, one revised to indexer.rejected is no version at all, and
// the labels a superseded result reported no longer count.

// promptCreated is the part of prompt.created the lab keeps.
type promptCreated struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Tags        []string        `json:"tags"`
	Author      string          `json:"author"`
	Content     string          `json:"content"`
	Parameters  []library.Param `json:"parameters"`
	Metadata    json.RawMessage `json:"metadata"`
}

// promptIndexed is the part of prompt.indexed the lab keeps.
type promptIndexed struct {
	PromptID    string   `json:"prompt_id"`
	Version     int      `json:"version"`
	ContentHash string   `json:"content_hash"`
	Labels      []string `json:"labels"`
	Outcome     string   `json:"outcome"` // created (or absent) or unchanged
}

// indexerRejected is the part of indexer.rejected the lab keeps.
type indexerRejected struct {
	EventType  string `json:"event_type"`
	EventID    string `json:"event_id"`
	ReasonCode string `json:"reason_code"`
	Reason     string `json:"reason"`
}

// keptRejection reports whether an indexer.rejected is about the prompt
// library: a tool's is no concern of the lab.
func keptRejection(d *bus.Delivery) (bool, error) {
	var r indexerRejected
	if err := bus.DecodeData(d.Event.Data(), &r); err != nil {
		return false, bus.Permanentf("indexer.rejected data: %v", err)
	}
	return r.EventType == typePromptCreated || r.EventType == typePromptActivated, nil
}

// applyCreated stores a prompt.created's content under its event id.
func applyCreated(ctx context.Context, q querier, d *bus.Delivery) error {
	var p promptCreated
	if err := bus.DecodeData(d.Event.Data(), &p); err != nil {
		return bus.Permanentf("prompt.created data: %v", err)
	}
	params, err := json.Marshal(nonNil(p.Parameters))
	if err != nil {
		return bus.Permanentf("prompt.created parameters: %v", err)
	}
	var schema, tools []byte
	if len(p.Metadata) > 0 {
		var md struct {
			ResponseSchema json.RawMessage `json:"response_schema"`
			Tools          json.RawMessage `json:"tools"`
		}
		if json.Unmarshal(p.Metadata, &md) == nil {
			if len(md.ResponseSchema) > 0 && string(md.ResponseSchema) != "null" {
				schema = md.ResponseSchema
			}
			if len(md.Tools) > 0 && string(md.Tools) != "null" {
				tools = md.Tools
			}
		}
	}
	var tags []byte
	if len(p.Tags) > 0 {
		tags, _ = json.Marshal(p.Tags)
	}
	_, err = q.Exec(ctx, `
		INSERT INTO lab_prompt_sources (tenant_id, event_id, prompt_id, content, parameters, response_schema, type, name, description, tags, author, tools)
		VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, nullif($7, ''), nullif($8, ''), nullif($9, ''), $10::jsonb, nullif($11, ''), $12::jsonb)
		ON CONFLICT DO NOTHING`, d.Tenant, d.Event.ID(), p.ID, p.Content, string(params), nullJSON(schema),
		p.Type, p.Name, p.Description, nullJSON(tags), p.Author, nullJSON(tools))
	if err != nil {
		return fmt.Errorf("store prompt.created: %w", err)
	}
	return nil
}

// applyIndexed records a prompt.indexed, at its stream sequence: the
// version its cause (a prompt.created, or a prompt.activated: no content,
// the join finds nothing, harmlessly) became, and the labels it reports. A
// label belongs to the version of the latest prompt.indexed (by stream
// sequence) that reports it, unless a later result of the same cause
// superseded that one.
func applyIndexed(ctx context.Context, q querier, d *bus.Delivery) error {
	var p promptIndexed
	if err := bus.DecodeData(d.Event.Data(), &p); err != nil {
		return bus.Permanentf("prompt.indexed data: %v", err)
	}
	if cause := bus.Causation(d.Event); cause != "" {
		if _, err := q.Exec(ctx, `
			INSERT INTO lab_prompt_results (tenant_id, event_id, cause_id, prompt_id, version, created, content_hash, stream_seq)
			VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), $8) ON CONFLICT DO NOTHING`,
			d.Tenant, d.Event.ID(), cause, p.PromptID, p.Version, p.Outcome != "unchanged", p.ContentHash, int64(d.StreamSeq)); err != nil {
			return fmt.Errorf("store prompt.indexed: %w", err)
		}
		if err := followCause(ctx, q, d.Tenant, cause); err != nil {
			return err
		}
	}
	for _, label := range p.Labels {
		if _, err := q.Exec(ctx, `
			INSERT INTO lab_prompt_label_sets (tenant_id, event_id, prompt_id, label, version, stream_seq)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
			d.Tenant, d.Event.ID(), p.PromptID, label, p.Version, int64(d.StreamSeq)); err != nil {
			return fmt.Errorf("store prompt.indexed labels: %w", err)
		}
	}
	return nil
}

// applyRejected records an indexer.rejected of a prompt event: its cause
// is no version (until a newer result says otherwise), for the reason it
// gives (a run from feedback fails naming it when its candidate is the
// cause).
func applyRejected(ctx context.Context, q querier, d *bus.Delivery) error {
	var r indexerRejected
	if err := bus.DecodeData(d.Event.Data(), &r); err != nil {
		return bus.Permanentf("indexer.rejected data: %v", err)
	}
	cause := bus.Causation(d.Event)
	if cause == "" {
		cause = r.EventID
	}
	if _, err := q.Exec(ctx, `
		INSERT INTO lab_prompt_results (tenant_id, event_id, cause_id, stream_seq, reason_code, reason)
		VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, '')) ON CONFLICT DO NOTHING`,
		d.Tenant, d.Event.ID(), cause, int64(d.StreamSeq), r.ReasonCode, cutTo(r.Reason, 2048)); err != nil {
		return fmt.Errorf("store indexer.rejected: %w", err)
	}
	return followCause(ctx, q, d.Tenant, cause)
}

// followCause makes the version a cause is the one its newest result
// names, or none. Copies applying two results of one cause at once take
// turns (a transaction-scoped lock on the cause), so the second sees the
// first's row.
func followCause(ctx context.Context, q querier, tenant, cause string) error {
	if _, err := q.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('lab-cause/' || $1 || '/' || $2, 0))`,
		tenant, cause); err != nil {
		return fmt.Errorf("lock %s: %w", cause, err)
	}
	if _, err := q.Exec(ctx, `DELETE FROM lab_prompt_versions WHERE tenant_id = $1 AND source_event_id = $2`, tenant, cause); err != nil {
		return fmt.Errorf("version of %s: %w", cause, err)
	}
	if _, err := q.Exec(ctx, `
		INSERT INTO lab_prompt_versions (tenant_id, prompt_id, version, source_event_id, created, content_hash)
		SELECT tenant_id, prompt_id, version, cause_id, created, content_hash FROM (
			SELECT * FROM lab_prompt_results WHERE tenant_id = $1 AND cause_id = $2
			ORDER BY stream_seq DESC, event_id DESC LIMIT 1) newest
		WHERE version IS NOT NULL
		ON CONFLICT DO NOTHING`, tenant, cause); err != nil {
		return fmt.Errorf("version of %s: %w", cause, err)
	}
	return nil
}

// moveResult moves the indexer's result eventID (its labels too) to
// stream sequence seq: a republished copy of it was applied first, at a
// later sequence, and the original counts at its own place.
func moveResult(ctx context.Context, q querier, tenant, eventID string, seq uint64) error {
	if _, err := q.Exec(ctx, `UPDATE lab_prompt_label_sets SET stream_seq = $3 WHERE tenant_id = $1 AND event_id = $2`,
		tenant, eventID, int64(seq)); err != nil {
		return fmt.Errorf("move prompt.indexed labels: %w", err)
	}
	var cause string
	err := q.QueryRow(ctx, `UPDATE lab_prompt_results SET stream_seq = $3 WHERE tenant_id = $1 AND event_id = $2 RETURNING cause_id`,
		tenant, eventID, int64(seq)).Scan(&cause)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // stored before results were kept
	}
	if err != nil {
		return fmt.Errorf("move indexer result: %w", err)
	}
	return followCause(ctx, q, tenant, cause)
}

// currentLabels is the condition on lab_prompt_label_sets l that its row
// still counts: no later result of the same cause superseded the one that
// reported it.
const currentLabels = `NOT EXISTS (
	SELECT 1 FROM lab_prompt_results r JOIN lab_prompt_results n
	  ON n.tenant_id = r.tenant_id AND n.cause_id = r.cause_id AND (n.stream_seq, n.event_id) > (r.stream_seq, r.event_id)
	WHERE r.tenant_id = l.tenant_id AND r.event_id = l.event_id)`

// promptVersions lists the versions of a prompt whose content the lab
// has, ascending, and the version labelled production (0: none known).
func promptVersions(ctx context.Context, q querier, tenant, promptID string) ([]int, int, error) {
	rows, err := q.Query(ctx, `
		SELECT DISTINCT v.version FROM lab_prompt_versions v
		JOIN lab_prompt_sources s ON s.tenant_id = v.tenant_id AND s.event_id = v.source_event_id AND s.prompt_id = v.prompt_id
		WHERE v.tenant_id = $1 AND v.prompt_id = $2 ORDER BY v.version`, tenant, promptID)
	if err != nil {
		return nil, 0, fmt.Errorf("prompt versions: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, 0, fmt.Errorf("prompt versions: %w", err)
	}
	var production int
	err = q.QueryRow(ctx, `SELECT l.version FROM lab_prompt_label_sets l
		WHERE l.tenant_id = $1 AND l.prompt_id = $2 AND l.label = 'production' AND `+currentLabels+`
		ORDER BY l.stream_seq DESC, l.event_id DESC LIMIT 1`, tenant, promptID).Scan(&production)
	if err != nil && err != pgx.ErrNoRows {
		return nil, 0, fmt.Errorf("prompt labels: %w", err)
	}
	if !slices.Contains(versions, production) {
		production = 0 // labelled, but its content was never seen
	}
	return versions, production, nil
}

// versionContents reads the content of versions, in the order given: of
// the create that made each (not one answered unchanged, whose metadata
// the version does not have).
func versionContents(ctx context.Context, q querier, tenant, promptID string, versions []int) ([]VersionSpec, error) {
	rows, err := q.Query(ctx, `
		SELECT DISTINCT ON (v.version) v.version, s.content, s.parameters, s.response_schema, s.tools
		FROM lab_prompt_versions v
		JOIN lab_prompt_sources s ON s.tenant_id = v.tenant_id AND s.event_id = v.source_event_id AND s.prompt_id = v.prompt_id
		WHERE v.tenant_id = $1 AND v.prompt_id = $2 AND v.version = ANY($3)
		ORDER BY v.version, NOT v.created, s.event_id`, tenant, promptID, versions)
	if err != nil {
		return nil, fmt.Errorf("prompt contents: %w", err)
	}
	byVersion := map[int]VersionSpec{}
	var v VersionSpec
	var params, schema, tools []byte
	_, err = pgx.ForEachRow(rows, []any{&v.Version, &v.Content, &params, &schema, &tools}, func() error {
		vs := VersionSpec{Version: v.Version, Content: v.Content}
		if err := json.Unmarshal(params, &vs.Params); err != nil {
			return err
		}
		if len(schema) > 0 {
			vs.Schema = json.RawMessage(slices.Clone(schema))
		}
		if len(tools) > 0 {
			if err := json.Unmarshal(tools, &vs.Tools); err != nil {
				vs.Tools = []json.RawMessage{json.RawMessage(slices.Clone(tools))} // not a list: refused by resolve
			}
		}
		byVersion[v.Version] = vs
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("prompt contents: %w", err)
	}
	out := make([]VersionSpec, 0, len(versions))
	for _, n := range versions {
		vs, ok := byVersion[n]
		if !ok {
			return nil, fmt.Errorf("prompt %s version %d: content vanished", promptID, n)
		}
		out = append(out, vs)
	}
	return out, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func nullJSON(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}
