package search

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/service"
)

// PromptsRequest is search.prompts.request.v1.
type PromptsRequest struct {
	Query string   `json:"query"`
	Type  string   `json:"type,omitempty"`
	Tags  []string `json:"tags,omitempty"`
	Limit int      `json:"limit,omitempty"`
	// Params, when not nil (an empty object counts), renders every result.
	Params map[string]any `json:"params,omitempty"`
}

// PromptsResponse is search.prompts.response.v1.
type PromptsResponse struct {
	Results   []PromptResult `json:"results"`
	Retrieval Retrieval      `json:"retrieval"`
	// RenderErrors lists the results that params did not render (a result
	// without rendered): search returns prompts of every shape, and
	// params meant for one rarely fit all, so a rendering failure never
	// fails the search.
	RenderErrors []RenderError `json:"render_errors,omitempty"`
}

// promptFilter is the arms' condition on a prompt version before any
// request filter: the tenant's and _global's, and the version a consumer
// gets (labelled production, else the latest), kept by the indexer in
// prompts.current: the HNSW index is partial on it, so kNN walks only
// served versions (migration 00009). A _global prompt whose id the
// tenant has too is left out: the tenant's shadows it, as in prompts.get
// (getSQL), so every result's id names what prompts.get returns, and a
// figure the tenant reported by <id>@<version> (the tenant's own prompt)
// never reaches the _global one.
const promptFilter = `a.tenant_id IN ({tenant}, '_global') AND a.current
    AND (a.tenant_id = {tenant} OR NOT EXISTS (SELECT 1 FROM prompts o WHERE o.tenant_id = {tenant} AND o.id = a.id))`

// PromptResult is one prompt version found.
type PromptResult struct {
	Prompt     library.Prompt `json:"prompt"`
	Score      float64        `json:"score"`
	Components Components     `json:"components"`
	Rendered   *string        `json:"rendered,omitempty"`
}

// RenderError says why one result has no rendering.
type RenderError struct {
	ID      string `json:"id"`
	Version int    `json:"version"`
	Code    string `json:"code"` // rendering, or render_limit
	Message string `json:"message"`
}

// Prompts searches tenant's and _global's prompts (see the package
// comment). Errors are *service.Error for bad requests; database errors are
// classified (bus.Unavailable for an outage).
func (s *Searcher) Prompts(ctx context.Context, tenant string, req PromptsRequest) (PromptsResponse, error) {
	if err := checkTenant(tenant); err != nil {
		return PromptsResponse{}, err
	}
	q, err := checkQuery(req.Query)
	if err != nil {
		return PromptsResponse{}, err
	}
	limit, err := checkLimit(req.Limit, s.opts.PromptLimit, MaxPromptLimit)
	if err != nil {
		return PromptsResponse{}, err
	}
	if req.Type != "" && !slices.Contains(library.Types, req.Type) {
		return PromptsResponse{}, service.BadRequest("type %q is not one of %v", truncate(req.Type, 40), library.Types)
	}
	if len(req.Tags) > 64 {
		return PromptsResponse{}, service.BadRequest("%d tags; at most 64", len(req.Tags))
	}
	if err := checkTexts("a tag", req.Tags); err != nil {
		return PromptsResponse{}, err
	}
	k := max(s.opts.PromptK, limit)
	p := s.plan(ctx, s.emb.Prompts, q)

	named, err := s.named(tenant, q, k)
	if err != nil {
		return PromptsResponse{}, err
	}
	filter := promptFilter
	if req.Type != "" {
		filter += ` AND a.type = {type}`
		named["type"] = req.Type
	}
	if len(req.Tags) > 0 {
		filter += ` AND a.tags @> {tags}::text[]`
		named["tags"] = req.Tags
	}
	if p.mode != Lexical {
		named["vec"] = p.vector()
	}
	tune := s.promptTune
	cos, err := cosineSQL("p", p)
	if err != nil {
		return PromptsResponse{}, err
	}
	tail := `
SELECT ` + library.Columns + `, f.rrf, f.cov, f.lrank, ` + cos + `, qs.quality, qs.calls, qs.last_used
FROM fused f JOIN prompts p ON p.tenant_id = f.tenant_id AND p.id = f.id AND p.version = f.version
LEFT JOIN LATERAL (
  SELECT coalesce(sum(q.quality_score * q.total_calls) / nullif(sum(q.total_calls), 0)::float8, avg(q.quality_score)) AS quality,
         coalesce(sum(q.total_calls), 0)::bigint AS calls, max(q.updated_at) AS last_used
  FROM index_quality q
  WHERE q.tenant_id IN ({tenant}, p.tenant_id) AND q.target = 'prompt' AND q.ref IN (p.hash, p.id || '@' || p.version)
) qs ON true`

	type row struct {
		prompt   library.Prompt
		params   []byte // decoded for the results returned
		f        fused
		cos      *float64 // nil: no vector of the query's model
		quality  *float64
		calls    int64
		lastUsed *time.Time
	}
	rows, err := retrieveRows(ctx, s, &p, k, promptKind, tune, filter, named, tail, func(r pgx.Rows) (row, error) {
		var x row
		var err error
		x.prompt, x.params, err = library.ScanLazy(r, &x.f.rrf, &x.f.cov, &x.f.lrank, &x.cos, &x.quality, &x.calls, &x.lastUsed)
		return x, err
	}, func(x *row) (candidate, *fused) {
		return candidate{tenant: x.prompt.Tenant, name: x.prompt.ID, version: x.prompt.Version}, &x.f
	})
	if err != nil {
		return PromptsResponse{}, fmt.Errorf("search prompts: %w", err)
	}

	ev := make([]evidence, len(rows))
	for i, x := range rows {
		ev[i] = evidence{f: x.f, cos: x.cos, quality: x.quality, calls: x.calls, times: []time.Time{x.prompt.CreatedAt}}
		if x.lastUsed != nil {
			ev[i].times = append(ev[i].times, *x.lastUsed)
		}
	}
	comps, scores, order := s.rerank(p.mode, tune, s.opts.PromptWeights, ev, func(i int) candidate {
		return candidate{tenant: rows[i].prompt.Tenant, name: rows[i].prompt.ID, version: rows[i].prompt.Version}
	}, limit)
	resp := PromptsResponse{Results: make([]PromptResult, 0, len(order)), Retrieval: p.retrieval()}
	for _, i := range order {
		r := PromptResult{Prompt: rows[i].prompt, Score: scores[i], Components: comps[i]}
		if err := r.Prompt.DecodeParameters(rows[i].params); err != nil {
			return PromptsResponse{}, fmt.Errorf("search prompts: %w", err)
		}
		if req.Params != nil {
			out, err := library.Render(ctx, r.Prompt.Content, r.Prompt.Parameters, req.Params, s.opts.Render)
			if err != nil && ctx.Err() != nil {
				return PromptsResponse{}, fmt.Errorf("search prompts: render %s@%d: %w", r.Prompt.ID, r.Prompt.Version, err)
			}
			if err != nil {
				resp.RenderErrors = append(resp.RenderErrors, RenderError{
					ID: r.Prompt.ID, Version: r.Prompt.Version, Code: renderCode(err), Message: renderMessage(err)})
			} else {
				r.Rendered = &out
			}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// renderCode is the error code of a rendering's error: render_limit when
// it was stopped at a limit, else rendering.
func renderCode(err error) string {
	if errors.Is(err, library.ErrRenderLimit) {
		return service.CodeRenderLimit
	}
	return service.CodeRendering
}

// renderMessage is a rendering error for the client: Render's errors name
// the parameters and the template position, nothing internal.
func renderMessage(err error) string {
	msg := err.Error()
	if !errors.Is(err, library.ErrParams) && !errors.Is(err, library.ErrTemplate) && !errors.Is(err, library.ErrRenderLimit) {
		msg = "cannot render: " + msg
	}
	return truncate(msg, 1000)
}
