package search

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/service"
)

// List page sizes: the default, the most a request may ask for, and the
// bytes of prompts one page carries at most (a page stops early rather
// than outgrow the NATS max payload: descriptions and parameters are
// long enough for 100 prompts to reach it).
const (
	DefaultListLimit = 50
	MaxListLimit     = 100
	maxListBytes     = 512 << 10
)

// ListRequest is prompts.list.request.v1: one page of the prompts a tenant
// sees, by id.
type ListRequest struct {
	// Cursor is the next_cursor of the previous page; empty: the first.
	Cursor string   `json:"cursor,omitempty"`
	Limit  int      `json:"limit,omitempty"`
	Type   string   `json:"type,omitempty"`
	Tags   []string `json:"tags,omitempty"`
}

// ListResponse is prompts.list.response.v1.
type ListResponse struct {
	Prompts []ListedPrompt `json:"prompts"`
	// NextCursor is set when more prompts follow: send it as cursor.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ListedPrompt is a prompt's served version without its content (a page
// of contents would not fit a reply; prompts.get returns one).
type ListedPrompt struct {
	Tenant      string          `json:"tenant"`
	ID          string          `json:"id"`
	Version     int             `json:"version"`
	Hash        string          `json:"content_hash"`
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  []library.Param `json:"parameters,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Labels      []string        `json:"labels,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
}

// listColumns is library.Columns without the content, which Scan then
// reads as "".
var listColumns = strings.Replace(library.Columns, "p.content", "''::text", 1)

// listSQL reads the served versions (prompts.current, indexed per tenant
// and id) of the tenant's and _global's prompts after a cursor, by id. A
// _global prompt whose id the tenant has too is left out, as in search
// and prompts.get: the tenant's shadows it, so ids are unique in the list
// and each names what prompts.get returns.
const listSQL = `SELECT {cols} FROM prompts p
WHERE p.current AND p.tenant_id IN ($1, '_global') AND p.id > $2::text
  AND (p.tenant_id = $1 OR NOT EXISTS (SELECT 1 FROM prompts o WHERE o.tenant_id = $1 AND o.id = p.id))
  AND ($3::text = '' OR p.type = $3::text) AND p.tags @> $4::text[]
ORDER BY p.id LIMIT $5::int`

// List returns one page of the prompts tenant sees (its own and
// _global's), by id, each in the version prompts.get serves by default
// (labelled production, else the latest).
func (s *Searcher) List(ctx context.Context, tenant string, req ListRequest) (ListResponse, error) {
	if err := checkTenant(tenant); err != nil {
		return ListResponse{}, err
	}
	limit, err := checkLimit(req.Limit, DefaultListLimit, MaxListLimit)
	if err != nil {
		return ListResponse{}, err
	}
	switch {
	case req.Cursor != "" && !idRE.MatchString(req.Cursor):
		return ListResponse{}, service.BadRequest("cursor %q is not one a list returned (next_cursor)", truncate(req.Cursor, 140))
	case req.Type != "" && !slices.Contains(library.Types, req.Type):
		return ListResponse{}, service.BadRequest("type %q is not one of %v", truncate(req.Type, 40), library.Types)
	case len(req.Tags) > 64:
		return ListResponse{}, service.BadRequest("%d tags; at most 64", len(req.Tags))
	}
	if err := checkTexts("a tag", req.Tags); err != nil {
		return ListResponse{}, err
	}
	tags := req.Tags
	if tags == nil {
		tags = []string{}
	}
	// One row more than the page tells whether another page follows.
	rows, err := s.pool.Query(ctx, strings.Replace(listSQL, "{cols}", listColumns, 1), tenant, req.Cursor, req.Type, tags, limit+1)
	if err != nil {
		return ListResponse{}, fmt.Errorf("list prompts: %w", database.Classify(err))
	}
	defer rows.Close()
	resp := ListResponse{Prompts: make([]ListedPrompt, 0, min(limit, 64))}
	size := 0
	for rows.Next() {
		p, err := library.Scan(rows)
		if err != nil {
			return ListResponse{}, fmt.Errorf("list prompts: %w", err)
		}
		lp := ListedPrompt{Tenant: p.Tenant, ID: p.ID, Version: p.Version, Hash: p.Hash, Type: p.Type, Name: p.Name,
			Description: p.Description, Parameters: orNil(p.Parameters), Tags: orNil(p.Tags), Labels: orNil(p.Labels), CreatedAt: p.CreatedAt}
		b, err := json.Marshal(lp)
		if err != nil {
			return ListResponse{}, fmt.Errorf("list prompts: %w", err)
		}
		if len(resp.Prompts) == limit || (len(resp.Prompts) > 0 && size+len(b) > maxListBytes) {
			resp.NextCursor = resp.Prompts[len(resp.Prompts)-1].ID
			break
		}
		size += len(b)
		resp.Prompts = append(resp.Prompts, lp)
	}
	if err := rows.Err(); err != nil {
		return ListResponse{}, fmt.Errorf("list prompts: %w", database.Classify(err))
	}
	return resp, nil
}

// orNil is s, or nil when it is empty: the same listed prompt whatever
// the database returned for an empty array.
func orNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
