package lab

import (
	"context"
	"encoding/json"
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
// prompt.created gives the content; prompt.indexed, published by the
// indexer with the created event as its cause, gives the version it was
// stored as and the labels on it. The two are joined by that event id, so
// they may arrive in either order, and again.

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
}

// applyCreated stores a prompt.created's content under its event id.
func applyCreated(ctx context.Context, q querier, d *bus.Delivery) error {
	var p promptCreated
	if err := json.Unmarshal(d.Event.Data(), &p); err != nil {
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

// applyIndexed records the version a prompt.created became and the labels
// a prompt.indexed reports, at its stream sequence. A label belongs to the
// version of the latest prompt.indexed (by stream sequence) that reports
// it.
func applyIndexed(ctx context.Context, q querier, d *bus.Delivery) error {
	var p promptIndexed
	if err := json.Unmarshal(d.Event.Data(), &p); err != nil {
		return bus.Permanentf("prompt.indexed data: %v", err)
	}
	if err := storeHash(ctx, q, d.Tenant, p); err != nil {
		return err
	}
	cause, _ := d.Event.Extensions()[bus.ExtCausation].(string)
	if cause != "" {
		// The cause is a prompt.created (its content) or a prompt.activated
		// (no content: the join finds nothing, harmlessly).
		if _, err := q.Exec(ctx, `
			INSERT INTO lab_prompt_versions (tenant_id, prompt_id, version, source_event_id)
			VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, d.Tenant, p.PromptID, p.Version, cause); err != nil {
			return fmt.Errorf("store prompt.indexed: %w", err)
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

// moveIndexed moves the labels of prompt.indexed eventID to stream
// sequence seq: a republished copy of it was applied first, at a later
// sequence, and the original counts at its own place.
func moveIndexed(ctx context.Context, q querier, tenant, eventID string, seq uint64) error {
	if _, err := q.Exec(ctx, `UPDATE lab_prompt_label_sets SET stream_seq = $3 WHERE tenant_id = $1 AND event_id = $2`,
		tenant, eventID, int64(seq)); err != nil {
		return fmt.Errorf("move prompt.indexed labels: %w", err)
	}
	return nil
}

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
	err = q.QueryRow(ctx, `SELECT version FROM lab_prompt_label_sets WHERE tenant_id = $1 AND prompt_id = $2 AND label = 'production'
		ORDER BY stream_seq DESC, event_id DESC LIMIT 1`, tenant, promptID).Scan(&production)
	if err != nil && err != pgx.ErrNoRows {
		return nil, 0, fmt.Errorf("prompt labels: %w", err)
	}
	if !slices.Contains(versions, production) {
		production = 0 // labelled, but its content was never seen
	}
	return versions, production, nil
}

// versionContents reads the content of versions, in the order given.
func versionContents(ctx context.Context, q querier, tenant, promptID string, versions []int) ([]VersionSpec, error) {
	rows, err := q.Query(ctx, `
		SELECT DISTINCT ON (v.version) v.version, s.content, s.parameters, s.response_schema, s.tools
		FROM lab_prompt_versions v
		JOIN lab_prompt_sources s ON s.tenant_id = v.tenant_id AND s.event_id = v.source_event_id AND s.prompt_id = v.prompt_id
		WHERE v.tenant_id = $1 AND v.prompt_id = $2 AND v.version = ANY($3)
		ORDER BY v.version, s.event_id`, tenant, promptID, versions)
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
