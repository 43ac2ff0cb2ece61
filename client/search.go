package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentq/agentq/internal/service"
)

// Prompt is one stored prompt version.
type Prompt struct {
	ID      string `json:"id"`
	Version int    `json:"version"`
	// ContentHash identifies the version; prompt.used and
	// feedback.submitted can refer to it as prompt_hash.
	ContentHash string          `json:"content_hash"`
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Content     string          `json:"content"` // a Go text/template, unrendered
	Parameters  []Param         `json:"parameters,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Labels      []string        `json:"labels,omitempty"` // labels on this version, e.g. production
	Author      string          `json:"author,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	// Tenant owns the prompt: the client's, or _global for shared ones.
	Tenant    string    `json:"tenant"`
	CreatedAt time.Time `json:"created_at"`
}

// Tool is a registered tool definition with its current health.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Server      string          `json:"server,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Version     int             `json:"version"`
	ContentHash string          `json:"content_hash"`
	Tenant      string          `json:"tenant"`
	// State is healthy, warning, degraded or probation; quarantined tools
	// are never returned.
	State        string   `json:"state,omitempty"`
	QualityScore *float64 `json:"quality_score,omitempty"` // nil while the tool has none
}

// Components are the parts of a ranking score, each 0 (worst) to 1.
type Components struct {
	Similarity float64 `json:"similarity"`
	Quality    float64 `json:"quality"`
	Recency    float64 `json:"recency"`
	Usage      float64 `json:"usage"`
}

// Retrieval says how a search found its candidates.
type Retrieval struct {
	Mode     string `json:"mode"` // hybrid, lexical or vector
	Degraded bool   `json:"degraded,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// PromptQuery is a prompt search.
type PromptQuery struct {
	Query string   `json:"query"`          // what the prompt should do, in plain language
	Type  string   `json:"type,omitempty"` // only prompts of this type
	Tags  []string `json:"tags,omitempty"` // only prompts with every one of these tags
	Limit int      `json:"limit,omitempty"`
	// Params, when set, renders each result (PromptHit.Rendered).
	Params map[string]any `json:"params,omitempty"`
}

// PromptHit is one prompt search result.
type PromptHit struct {
	Prompt     Prompt     `json:"prompt"`
	Score      float64    `json:"score"`
	Components Components `json:"components"`
	Rendered   string     `json:"rendered,omitempty"`
}

// PromptResults is the answer to a prompt search, best first.
type PromptResults struct {
	Results   []PromptHit `json:"results"`
	Retrieval Retrieval   `json:"retrieval"`
	// RenderErrors lists results that did not render with the params.
	RenderErrors []RenderError `json:"render_errors,omitempty"`
}

// RenderError is a search result whose content did not render.
type RenderError struct {
	ID      string `json:"id"`
	Version int    `json:"version"`
	Code    string `json:"code"` // rendering or render_limit
	Message string `json:"message"`
}

// ToolQuery is a tool search.
type ToolQuery struct {
	Query        string   `json:"query"`
	Limit        int      `json:"limit,omitempty"`
	ExcludeNames []string `json:"exclude_names,omitempty"` // e.g. tools already tried
	// MinQuality drops tools whose quality score is below it (0..1).
	MinQuality *float64 `json:"min_quality,omitempty"`
}

// ToolHit is one tool search result.
type ToolHit struct {
	Tool       Tool       `json:"tool"`
	Score      float64    `json:"score"`
	Components Components `json:"components"`
}

// ToolResults is the answer to a tool search, best first.
type ToolResults struct {
	Results   []ToolHit `json:"results"`
	Retrieval Retrieval `json:"retrieval"`
}

// SearchPrompts finds the tenant's and shared prompts that fit q, ranked
// by similarity, quality, recency and usage (search.prompts.<tenant>).
func (c *Client) SearchPrompts(ctx context.Context, q PromptQuery) (PromptResults, error) {
	var out PromptResults
	err := c.call(ctx, "search.prompts", "search.prompts."+c.cfg.Tenant, "agentq.search.prompts.request.v1", q, &out)
	return out, err
}

// SearchTools finds the tenant's and shared tools that fit q, ranked by
// similarity, quality and recency; quarantined tools are left out
// (search.tools.<tenant>).
func (c *Client) SearchTools(ctx context.Context, q ToolQuery) (ToolResults, error) {
	var out ToolResults
	err := c.call(ctx, "search.tools", "search.tools."+c.cfg.Tenant, "agentq.search.tools.request.v1", q, &out)
	return out, err
}

// call validates req against its schema, sends it to subject and decodes
// the reply into resp, with typed errors: *ValidationError before
// sending, *ServiceError for an error reply, *UnavailableError when the
// connection is down or nothing serves subject, *TimeoutError when no
// reply came in time.
func (c *Client) call(ctx context.Context, op, subject, schema string, req, resp any) error {
	if c.closed() {
		return ErrClosed
	}
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: encode request: %w", op, err)
	}
	if err := c.validate(schema, data); err != nil {
		return err
	}
	if st := c.nc.Status(); st != nats.CONNECTED {
		// Fail now rather than wait in the reconnect buffer until the
		// deadline: the caller has a cached answer, or wants to know.
		return &UnavailableError{Op: op, err: fmt.Errorf("NATS connection %s", st)}
	}
	rctx, cancel := c.requestContext(ctx)
	defer cancel()
	start := time.Now()
	err = service.Call(rctx, c.nc, subject, json.RawMessage(data), resp)
	var se *service.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return &ServiceError{Op: op, Code: se.Code, Message: se.Message}
	case errors.Is(err, nats.ErrNoResponders):
		return &UnavailableError{Op: op, err: fmt.Errorf("nothing serves %s (is an indexer running?): %w", subject, nats.ErrNoResponders)}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return &TimeoutError{Op: op, After: time.Since(start).Round(time.Millisecond), err: err}
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
		return &UnavailableError{Op: op, err: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}
