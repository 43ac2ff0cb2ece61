package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
)

// The MCP prompts primitive over the tenant's library, for clients that
// show prompts to their users: prompts/list pages through prompts.list,
// prompts/get is prompts.get rendered with the arguments. The SDK keeps a
// fixed set of prompts; the library is the tenant's and changes, so both
// methods are answered here, ahead of the SDK's own handlers.
//
// A prompt's name is its id; name@N gets version N and name@label the
// version a label points at (ids never hold "@"). MCP arguments are
// strings: a parameter declared number, integer, boolean, array or object
// is read from its string as JSON ("3", "true", "[1,2]").

// promptsMiddleware answers prompts/list and prompts/get.
func (s *Server) promptsMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "prompts/list":
			if r, ok := req.(*mcp.ListPromptsRequest); ok {
				return s.listPrompts(ctx, r)
			}
		case "prompts/get":
			if r, ok := req.(*mcp.GetPromptRequest); ok {
				return s.getPrompt(ctx, r)
			}
		}
		return next(ctx, method, req)
	}
}

// promptPage is how many prompts one prompts/list page holds at most.
const promptPage = 100

func (s *Server) listPrompts(ctx context.Context, req *mcp.ListPromptsRequest) (*mcp.ListPromptsResult, error) {
	tenant, err := s.tenant(req.Extra)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	lr := search.ListRequest{Limit: promptPage}
	if req.Params != nil {
		lr.Cursor = req.Params.Cursor
	}
	var resp search.ListResponse
	if err := s.callService(ctx, search.ListSubject+"."+tenant, lr, &resp); err != nil {
		return nil, err
	}
	out := &mcp.ListPromptsResult{Prompts: make([]*mcp.Prompt, 0, len(resp.Prompts)), NextCursor: resp.NextCursor,
		// The list is the tenant's and changes with every new version:
		// not for shared caches, and stale at once.
		Cacheable: mcp.Cacheable{CacheScope: "private"}}
	for _, p := range resp.Prompts {
		out.Prompts = append(out.Prompts, &mcp.Prompt{Name: p.ID, Title: p.Name, Description: p.Description, Arguments: arguments(p.Parameters),
			Meta: mcp.Meta{"agentq/version": p.Version, "agentq/content_hash": p.Hash, "agentq/type": p.Type}})
	}
	return out, nil
}

// arguments are a prompt's parameters as MCP prompt arguments: required
// when the template needs a value and has no default.
func arguments(params []library.Param) []*mcp.PromptArgument {
	out := make([]*mcp.PromptArgument, 0, len(params))
	for _, p := range params {
		desc := p.Description
		var notes []string
		if p.Type != "" && p.Type != "string" {
			notes = append(notes, p.Type+", as JSON")
		}
		if p.Default != nil {
			if b, err := json.Marshal(p.Default); err == nil {
				notes = append(notes, "default "+string(b))
			}
		}
		if len(notes) > 0 {
			desc = strings.TrimSpace(desc + " (" + strings.Join(notes, "; ") + ")")
		}
		out = append(out, &mcp.PromptArgument{Name: p.Name, Description: desc, Required: p.Required && p.Default == nil})
	}
	return out
}

func (s *Server) getPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	tenant, err := s.tenant(req.Extra)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	// A map, not search.GetRequest: an empty params object asks for the
	// rendering, and the struct would leave it out.
	gr := map[string]any{"id": req.Params.Name}
	if id, sel, ok := strings.Cut(req.Params.Name, "@"); ok {
		gr["id"] = id
		if v, err := strconv.Atoi(sel); err == nil {
			gr["version"] = v
		} else {
			gr["label"] = sel
		}
	}
	params := map[string]any{}
	if len(req.Params.Arguments) > 0 {
		// The prompt first, for its parameters' types; then the version
		// it named, rendered.
		var p search.GetResponse
		if err := s.callService(ctx, search.GetSubject+"."+tenant, gr, &p); err != nil {
			return nil, err
		}
		delete(gr, "label")
		gr["version"] = p.Prompt.Version
		for _, pa := range p.Prompt.Parameters {
			if v, ok := req.Params.Arguments[pa.Name]; ok {
				params[pa.Name] = argumentValue(pa.Type, v)
			}
		}
		for name := range req.Params.Arguments {
			if _, ok := params[name]; !ok {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
					Message: fmt.Sprintf("prompt %s has no argument %q (it takes %s)", req.Params.Name, name, argNames(p.Prompt.Parameters))}
			}
		}
	}
	gr["params"] = params
	var r search.GetResponse
	if err := s.callService(ctx, search.GetSubject+"."+tenant, gr, &r); err != nil {
		return nil, err
	}
	text := r.Prompt.Content
	if r.Rendered != nil {
		text = *r.Rendered
	}
	return &mcp.GetPromptResult{Description: r.Prompt.Description,
		Meta:     mcp.Meta{"agentq/version": r.Prompt.Version, "agentq/content_hash": r.Prompt.Hash, "agentq/type": r.Prompt.Type},
		Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: text}}}}, nil
}

// argumentValue reads an MCP argument (a string) as the parameter's type:
// JSON for the types that are not strings, the string itself when it does
// not parse (rendering then says what is wrong with it).
func argumentValue(typ, v string) any {
	switch typ {
	case "", "string":
		return v
	}
	var x any
	if err := json.Unmarshal([]byte(v), &x); err != nil {
		return v
	}
	return x
}

func argNames(params []library.Param) string {
	if len(params) == 0 {
		return "none"
	}
	names := make([]string, len(params))
	for i, p := range params {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// callService calls agentq for a prompts method: an error the client
// caused (an unknown prompt, arguments that do not render) is invalid
// params, anything else an internal error, each with the explanation.
func (s *Server) callService(ctx context.Context, subject string, req, resp any) error {
	if err := s.reachable(); err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	err := service.Call(ctx, s.opts.NC, subject, req, resp)
	if err == nil {
		return nil
	}
	var se *service.Error
	if errors.As(err, &se) {
		switch se.Code {
		case service.CodeRendering:
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: se.Message + ". Pass every required argument (prompts/list names them), with values of the declared types."}
		case service.CodeBadRequest, service.CodeNotFound, service.CodeRenderLimit:
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: se.Message}
		}
	} else {
		s.log.Warn().Err(err).Str("subject", subject).Msg("agentq call failed")
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: explain(err, subject).Error()}
}
