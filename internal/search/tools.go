package search

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/registry"
	"github.com/agentq/agentq/internal/service"
)

// ToolsRequest is search.tools.request.v1.
type ToolsRequest struct {
	Query        string   `json:"query"`
	Limit        int      `json:"limit,omitempty"`
	ExcludeNames []string `json:"exclude_names,omitempty"`
	// MinQuality keeps tools whose quality is at least this; a tool with
	// no figures yet counts as NeutralQuality (by default the scorer's
	// quality for no observations), as it ranks.
	MinQuality float64 `json:"min_quality,omitempty"`
}

// ToolsResponse is search.tools.response.v1.
type ToolsResponse struct {
	Results   []ToolResult `json:"results"`
	Retrieval Retrieval    `json:"retrieval"`
}

// ToolResult is one tool found.
type ToolResult struct {
	Tool       Tool       `json:"tool"`
	Score      float64    `json:"score"`
	Components Components `json:"components"`
}

// toolFilter is the arms' condition on a tool before any request
// filter: the tenant's and _global's, not quarantined. A _global tool
// whose name the tenant has registered too is left out: agents call tools
// by name, so two results of one name would be ambiguous, and the
// tenant's registration is its own definition of that name (as a tenant's
// prompt shadows a _global one of the same id). The tenant's quality and
// health rows of that name are then about its own tool alone.
const toolFilter = `a.tenant_id IN ({tenant}, '_global')
    AND (a.tenant_id = {tenant} OR NOT EXISTS (SELECT 1 FROM tools o WHERE o.tenant_id = {tenant} AND o.name = a.name))
    AND NOT EXISTS (SELECT 1 FROM index_tool_health h
                    WHERE h.tenant_id IN ({tenant}, a.tenant_id) AND h.tool_name = a.name
                      AND h.quarantined AND (h.expires_at IS NULL OR h.expires_at > now()))`

// Tool is a tool's current definition with its health from the read
// model.
type Tool struct {
	Tenant      string          `json:"tenant"`
	Name        string          `json:"name"`
	Version     int             `json:"version"`
	Hash        string          `json:"content_hash"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Server      string          `json:"server,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	// State is healthy, warning, degraded or probation; absent before any
	// tool.degraded/recovered. A quarantine that has expired reads as
	// probation (the degrader's next state) until its event arrives.
	State string `json:"state,omitempty"`
	// QualityScore is the read model's figure, absent while there is none.
	QualityScore *float64 `json:"quality_score,omitempty"`
}

// Tools searches tenant's and _global's tools, a tenant's tool shadowing
// a _global one of the same name; quarantined ones (a health row of the
// caller or of the tool's tenant saying quarantined, not expired) are
// never returned.
func (s *Searcher) Tools(ctx context.Context, tenant string, req ToolsRequest) (ToolsResponse, error) {
	if err := checkTenant(tenant); err != nil {
		return ToolsResponse{}, err
	}
	q, err := checkQuery(req.Query)
	if err != nil {
		return ToolsResponse{}, err
	}
	limit, err := checkLimit(req.Limit, s.opts.ToolLimit, MaxToolLimit)
	if err != nil {
		return ToolsResponse{}, err
	}
	if req.MinQuality < 0 || req.MinQuality > 1 || req.MinQuality != req.MinQuality {
		return ToolsResponse{}, service.BadRequest("min_quality %g is out of range 0..1", req.MinQuality)
	}
	if len(req.ExcludeNames) > 256 {
		return ToolsResponse{}, service.BadRequest("%d exclude_names; at most 256", len(req.ExcludeNames))
	}
	if err := checkTexts("an exclude_names entry", req.ExcludeNames); err != nil {
		return ToolsResponse{}, err
	}
	k := max(s.opts.ToolK, limit)
	p := s.plan(ctx, s.emb.Tools, q)

	named, err := s.named(tenant, q, k)
	if err != nil {
		return ToolsResponse{}, err
	}
	filter := toolFilter
	if len(req.ExcludeNames) > 0 {
		filter += ` AND NOT (a.name = ANY ({excl}::text[]))`
		named["excl"] = req.ExcludeNames
	}
	if req.MinQuality > 0 {
		filter += ` AND coalesce((SELECT ` + toolQuality + ` FROM index_quality q
      WHERE q.tenant_id IN ({tenant}, a.tenant_id) AND q.target = 'tool' AND q.ref = a.name), {neutral}::float8) >= {minq}::float8`
		named["neutral"], named["minq"] = s.opts.NeutralQuality, req.MinQuality
	}
	if p.mode != Lexical {
		named["vec"] = p.vector()
	}
	tune := s.toolTune
	cos, err := cosineSQL("t", p)
	if err != nil {
		return ToolsResponse{}, err
	}
	tail := `
SELECT ` + registry.Columns + `, f.rrf, f.cov, f.lrank, ` + cos + `, qs.quality, qs.calls, qs.last_success, h.state, h.quarantined
FROM fused f JOIN tools t ON t.tenant_id = f.tenant_id AND t.name = f.name
LEFT JOIN LATERAL (
  SELECT ` + toolQuality + ` AS quality, coalesce(sum(q.total_calls), 0)::bigint AS calls, max(q.last_success) AS last_success
  FROM index_quality q WHERE q.tenant_id IN ({tenant}, t.tenant_id) AND q.target = 'tool' AND q.ref = t.name
) qs ON true
LEFT JOIN LATERAL (
  SELECT h.state, h.quarantined FROM index_tool_health h
  WHERE h.tenant_id IN ({tenant}, t.tenant_id) AND h.tool_name = t.name
  ORDER BY h.tenant_id = {tenant} DESC LIMIT 1
) h ON true`

	type row struct {
		tool        registry.Tool
		f           fused
		cos         *float64 // nil: no vector of the query's model
		quality     *float64
		calls       int64
		lastSuccess *time.Time
		state       *string
		quarantined *bool
	}
	rows, err := retrieveRows(ctx, s, &p, k, toolKind, tune, filter, named, tail, func(r pgx.Rows) (row, error) {
		var x row
		var err error
		x.tool, err = registry.Scan(r, &x.f.rrf, &x.f.cov, &x.f.lrank, &x.cos, &x.quality, &x.calls, &x.lastSuccess, &x.state, &x.quarantined)
		return x, err
	}, func(x *row) (candidate, *fused) {
		return candidate{tenant: x.tool.Tenant, name: x.tool.Name}, &x.f
	})
	if err != nil {
		return ToolsResponse{}, fmt.Errorf("search tools: %w", err)
	}

	ev := make([]evidence, len(rows))
	for i, x := range rows {
		last := x.tool.RegisteredAt
		if x.lastSuccess != nil {
			last = *x.lastSuccess
		}
		ev[i] = evidence{f: x.f, cos: x.cos, quality: x.quality, calls: x.calls, times: []time.Time{last}}
	}
	comps, scores, order := s.rerank(p.mode, tune, s.opts.ToolWeights, ev, func(i int) candidate {
		return candidate{tenant: rows[i].tool.Tenant, name: rows[i].tool.Name}
	}, limit)
	resp := ToolsResponse{Results: make([]ToolResult, 0, len(order)), Retrieval: p.retrieval()}
	for _, i := range order {
		x := rows[i]
		t := Tool{Tenant: x.tool.Tenant, Name: x.tool.Name, Version: x.tool.Version, Hash: x.tool.Hash,
			Description: x.tool.Description, InputSchema: x.tool.InputSchema, Server: x.tool.Server, Tags: x.tool.Tags}
		if x.quality != nil {
			qv := comps[i].Quality
			t.QualityScore = &qv
		}
		if x.state != nil {
			t.State = publicState(*x.state)
		}
		resp.Results = append(resp.Results, ToolResult{Tool: t, Score: scores[i], Components: comps[i]})
	}
	return resp, nil
}

// toolQuality is the quality of the index_quality rows q of one tool: the
// mean weighted by calls, or the plain mean when none has calls; NULL
// when there are no rows.
const toolQuality = `coalesce(sum(q.quality_score * q.total_calls) / nullif(sum(q.total_calls), 0)::float8, avg(q.quality_score))`

// publicState maps the degrader's states to the response's: a tool that
// is returned is not quarantined, so a stale "quarantined" (expired) is
// probation; anything unknown is left out.
func publicState(s string) string {
	switch s {
	case "healthy", "warning", "degraded", "probation":
		return s
	case "quarantined":
		return "probation"
	}
	return ""
}
