package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
)

// Contract names of what the tools send and receive.
const (
	promptsSearchRequest  = "agentq.search.prompts.request.v1"
	promptsSearchResponse = "agentq.search.prompts.response.v1"
	toolsSearchRequest    = "agentq.search.tools.request.v1"
	toolsSearchResponse   = "agentq.search.tools.response.v1"
	getRequest            = "agentq.prompts.get.request.v1"
	getResponse           = "agentq.prompts.get.response.v1"
	listRequest           = "agentq.prompts.list.request.v1"
	listResponse          = "agentq.prompts.list.response.v1"
)

// call is what a tool handler gets besides its typed input: the tenant
// the request acts for and the arguments as the client sent them (an
// object; {} when it sent none), which are what is checked against the
// contract and passed on, so nothing is lost or added on the way.
type call struct {
	tenant string
	args   json.RawMessage
}

// addTool registers a tool whose handler acts for the request's tenant.
// The handler's errors are worded for the agent (explain). contract names
// the contract schema the arguments follow ("" for none).
func addTool[In, Out any](s *Server, contract string, t *mcp.Tool, h func(ctx context.Context, c call, in In) (Out, error)) {
	if contract != "" {
		s.contracts[t.Name] = contract
	}
	mcp.AddTool(s.mcp, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		start := time.Now()
		tenant, err := s.tenant(req.Extra)
		if err != nil {
			return nil, zero, actionable("%v", err)
		}
		args := req.Params.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		if err := s.reachable(); err != nil {
			return nil, zero, err
		}
		out, err := h(ctx, call{tenant: tenant, args: args}, in)
		s.log.Debug().Str("tool", t.Name).Str("tenant", tenant).Dur("took", time.Since(start)).Bool("is_error", err != nil).Msg("tool call")
		if err != nil {
			return nil, zero, err
		}
		return nil, out, nil
	})
}

// relay is a read tool that stands for one request/reply call: its
// arguments are the request, its result the reply.
type relay struct {
	tool              mcp.Tool
	request, response string // contract names
	prefix            string // subject prefix; the tenant is the last token
	required          string // the reply's member that is always there
}

// addRelay registers r. The arguments are checked against the request's
// contract schema (its cross-field rules included) and sent as they came;
// the reply is the result as it came, structured and as text. Nothing is
// decoded or encoded on the way: the reply's own schema is the tool's
// output schema, and the indexer's replies are held to it by its tests.
// (mcp.AddTool would decode, re-encode and validate every reply: 0.6 ms
// more CPU a search, measured by BenchmarkPromptSearch.)
func (s *Server) addRelay(r relay) error {
	in, err := inputSchema(r.request, nil)
	if err != nil {
		return err
	}
	out, err := outputSchema(r.response, r.required)
	if err != nil {
		return err
	}
	t := r.tool
	t.Annotations, t.InputSchema, t.OutputSchema = readOnly, in, out
	s.mcp.AddTool(&t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		var reply json.RawMessage
		err := s.relayCall(ctx, req, r, &reply)
		s.log.Debug().Str("tool", t.Name).Dur("took", time.Since(start)).Bool("is_error", err != nil).Msg("tool call")
		if err != nil {
			return toolResult(err), nil
		}
		return &mcp.CallToolResult{StructuredContent: reply, Content: []mcp.Content{&mcp.TextContent{Text: string(reply)}}}, nil
	})
	return nil
}

func (s *Server) relayCall(ctx context.Context, req *mcp.CallToolRequest, r relay, reply *json.RawMessage) error {
	tenant, err := s.tenant(req.Extra)
	if err != nil {
		return actionable("%v", err)
	}
	if err := s.reachable(); err != nil {
		return err
	}
	args := req.Params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	return s.request(ctx, call{tenant: tenant, args: args}, r.request, r.prefix, reply)
}

// toolResult is err as a tool error: the agent reads what to do.
func toolResult(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
}

// readOnly marks a tool that changes nothing.
var readOnly = &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: new(false)}

func (s *Server) addTools() error {
	for _, r := range []relay{
		{tool: mcp.Tool{Name: "prompt_search", Title: "Search prompts",
			Description: "Find prompts in agentq's library (this tenant's and the shared ones) by what they should do, in plain language: " +
				"by meaning and by words, ranked by how well each has worked, how recent and how used it is. " +
				"Each result is a prompt version with its score and the components of the score; with params, each is rendered too. " +
				"retrieval.degraded says when search fell back to words alone. Get one with prompt_get."},
			request: promptsSearchRequest, response: promptsSearchResponse, prefix: search.PromptsSubject, required: "results"},
		{tool: mcp.Tool{Name: "prompt_get", Title: "Get a prompt",
			Description: "Get one prompt version by id: by default the version labelled production, else the latest; or name a version or a label (not both). " +
				"With params, rendered is the content with the parameters filled in (parameters left out take their defaults); " +
				"without, rendered is there when the prompt needs no parameter. Use content_hash, or id and version, in feedback_submit."},
			request: getRequest, response: getResponse, prefix: search.GetSubject, required: "prompt"},
		{tool: mcp.Tool{Name: "prompt_list", Title: "List prompts",
			Description: "List the prompts in agentq's library (this tenant's and the shared ones) by id, a page at a time, each in the version prompt_get returns by default, without its content. " +
				"Pass next_cursor as cursor for the next page. To find prompts by what they do, prompt_search is better."},
			request: listRequest, response: listResponse, prefix: search.ListSubject, required: "prompts"},
		{tool: mcp.Tool{Name: "tool_search", Title: "Search tools",
			Description: "Find tools in agentq's registry (this tenant's and the shared ones) by what they should do, in plain language, ranked by relevance and by how well each has worked. " +
				"Tools agentq has quarantined for failing are never returned; each result carries its health state and quality score. " +
				"After calling a tool, report the outcome with tool_report."},
			request: toolsSearchRequest, response: toolsSearchResponse, prefix: search.ToolsSubject, required: "results"},
	} {
		if err := s.addRelay(r); err != nil {
			return err
		}
	}

	addTool(s, "", &mcp.Tool{Name: "tool_health", Title: "Tool health", Annotations: readOnly,
		Description: "The tools agentq's degrader has flagged: degraded (failing more than usual: prefer another tool), quarantined (hidden from tool_search: do not call it until it is released or the quarantine ends) " +
			"or on probation (back after a quarantine; its next calls decide), with the figures and the reason. " +
			"With tool_name, that tool's last announced state, healthy included; an empty list means the degrader never flagged it."},
		s.toolHealth)

	if s.opts.ReadOnly {
		return nil
	}
	return s.addWriteTools()
}

// request checks c's arguments against the contract's request schema
// (cross-field rules included) and sends them to subject.<tenant>,
// decoding the reply into resp.
func (s *Server) request(ctx context.Context, c call, schema, prefix string, resp any) error {
	if err := s.opts.Registry.Validate(schema, c.args); err != nil {
		return explain(err, "")
	}
	subject := prefix + "." + c.tenant
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	if err := service.Call(ctx, s.opts.NC, subject, c.args, resp); err != nil {
		if se := (*service.Error)(nil); !errors.As(err, &se) {
			s.log.Warn().Err(err).Str("subject", subject).Msg("agentq call failed")
		}
		return explain(err, subject)
	}
	return nil
}
