package search

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/service"
)

// GetRequest is prompts.get.request.v1: a version by number or by label
// (latest, implicit, is the highest version), not both; with neither, the
// version labelled production, else the latest.
type GetRequest struct {
	ID      string         `json:"id"`
	Version int            `json:"version,omitempty"`
	Label   string         `json:"label,omitempty"`
	Params  map[string]any `json:"params,omitempty"`
	// Fresh reads the prompt from the database, not from this copy's
	// cache. A client that heard prompt.indexed asks so: the copy that
	// answers may not have heard it yet.
	Fresh bool `json:"fresh,omitempty"`
}

// GetResponse is prompts.get.response.v1.
type GetResponse struct {
	Prompt library.Prompt `json:"prompt"`
	// Rendered is present when the request gave params, and when it gave
	// none but the prompt renders from its defaults alone.
	Rendered *string `json:"rendered,omitempty"`
}

var (
	idRE    = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,128}$`)
	labelRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)
)

// getSQL resolves the prompt in one statement. The owner is the caller
// when it has any version of the id, else _global: a tenant's prompt
// shadows a shared one of the same id as a whole, so a version or label
// never mixes the two. The label latest is implicit (the indexer refuses
// to move it): the owner's highest version.
const getSQL = `WITH o AS (
  SELECT coalesce(
    (SELECT $1::text WHERE EXISTS (SELECT 1 FROM prompts WHERE tenant_id = $1 AND id = $2)),
    (SELECT '_global'::text WHERE EXISTS (SELECT 1 FROM prompts WHERE tenant_id = '_global' AND id = $2))) AS tenant)
SELECT ` + library.Columns + `
FROM o JOIN prompts p ON p.tenant_id = o.tenant AND p.id = $2
WHERE p.version = CASE
  WHEN $3::int > 0 THEN $3::int
  WHEN $4::text = 'latest' THEN (SELECT max(x.version) FROM prompts x WHERE x.tenant_id = o.tenant AND x.id = $2)
  WHEN $4::text <> '' THEN (SELECT l.version FROM prompt_labels l WHERE l.tenant_id = o.tenant AND l.prompt_id = $2 AND l.label = $4)
  ELSE coalesce((SELECT l.version FROM prompt_labels l WHERE l.tenant_id = o.tenant AND l.prompt_id = $2 AND l.label = 'production'),
                (SELECT max(x.version) FROM prompts x WHERE x.tenant_id = o.tenant AND x.id = $2)) END`

// GetStatement runs the statement Get runs on a cache miss for tenant's
// prompt id (its served version), reads the row and returns nothing else:
// no cache, no parsing, no rendering. agentq bench indexer measures it as
// the database's part of prompts.get.
func (s *Searcher) GetStatement(ctx context.Context, tenant, id string) error {
	_, err := s.getRow(ctx, tenant, GetRequest{ID: id})
	return err
}

// getRow reads the prompt version req names (getSQL).
func (s *Searcher) getRow(ctx context.Context, tenant string, req GetRequest) (library.Prompt, error) {
	return library.Scan(s.pool.QueryRow(ctx, getSQL, tenant, req.ID, req.Version, req.Label))
}

// Get returns one prompt version of tenant's, else of _global's, and its
// content rendered with req.Params and the parameters' defaults. The
// rendering is always there, so a prompt with required parameters needs
// params; a missing, unknown or mistyped parameter, or a template that
// fails on the values, is a *service.Error with code rendering, and a
// rendering stopped at a limit of Options.Render one with code
// render_limit. An unknown
// id, version or label is code not_found.
func (s *Searcher) Get(ctx context.Context, tenant string, req GetRequest) (GetResponse, error) {
	if err := checkTenant(tenant); err != nil {
		return GetResponse{}, err
	}
	switch {
	case !idRE.MatchString(req.ID):
		return GetResponse{}, service.BadRequest("id %q must match %s", truncate(req.ID, 140), idRE)
	case req.Version < 0:
		return GetResponse{}, service.BadRequest("version %d must be 1 or more", req.Version)
	case req.Version > 0 && req.Label != "":
		return GetResponse{}, service.BadRequest("give version or label, not both")
	case req.Label != "" && !labelRE.MatchString(req.Label):
		return GetResponse{}, service.BadRequest("label %q must match %s", truncate(req.Label, 80), labelRE)
	}
	key := getKey{tenant: tenant, id: req.ID, version: req.Version, label: req.Label}
	p, tmpl, gen, hit := s.prompts.get(key)
	var err error
	if !hit || req.Fresh {
		p, err = s.getRow(ctx, tenant, req)
		if err == nil {
			tmpl, _ = library.Parse(p.Content) // nil: Render reports why
			s.prompts.put(key, p, tmpl, gen)
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		what := fmt.Sprintf("prompt %q", req.ID)
		switch {
		case req.Version > 0:
			what += fmt.Sprintf(" version %d", req.Version)
		case req.Label != "":
			what += fmt.Sprintf(" label %q", req.Label)
		}
		return GetResponse{}, service.NotFound("%s not found for tenant %s or _global", what, tenant)
	}
	if err != nil {
		return GetResponse{}, fmt.Errorf("get prompt %s: %w", req.ID, database.Classify(err))
	}
	var out string
	if tmpl != nil {
		out, err = tmpl.Render(ctx, p.Parameters, req.Params, s.opts.Render)
	} else {
		out, err = library.Render(ctx, p.Content, p.Parameters, req.Params, s.opts.Render)
	}
	switch {
	case err == nil:
		return GetResponse{Prompt: p, Rendered: &out}, nil
	case ctx.Err() != nil:
		return GetResponse{}, fmt.Errorf("render %s@%d: %w", p.ID, p.Version, err)
	case req.Params == nil:
		// Asked for the prompt, not a rendering: a prompt that needs
		// parameters (or that its defaults alone take past a render
		// limit) is returned as it is.
		return GetResponse{Prompt: p}, nil
	}
	return GetResponse{}, service.Errorf(renderCode(err), "%s@%d: %s", p.ID, p.Version, renderMessage(err))
}
