package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/schemas"
)

// toolError is a failure worded for the agent: what went wrong and what to
// do about it. The SDK turns it into a result with IsError.
type toolError struct{ msg string }

func (e *toolError) Error() string { return e.msg }

func actionable(format string, args ...any) error {
	return &toolError{msg: fmt.Sprintf(format, args...)}
}

// explain turns an error of a call to agentq (subject) into one the agent
// can act on. what names the thing asked for in messages.
func explain(err error, subject string) error {
	var te *toolError
	var se *service.Error
	var ve *schemas.ValidationError
	switch {
	case errors.As(err, &te):
		return te
	case errors.As(err, &ve):
		return actionable("invalid arguments: %s. Fix them (the tool's input schema describes every field) and call again.", strings.Join(ve.Problems, "; "))
	case errors.As(err, &se):
		switch se.Code {
		case service.CodeBadRequest:
			return actionable("invalid arguments: %s. Fix them and call again.", se.Message)
		case service.CodeNotFound:
			return actionable("%s. Check the id and version or label: prompt_search or prompt_list show what exists.", se.Message)
		case service.CodeRendering:
			return actionable("the prompt does not render with these params: %s. Pass every required parameter in params, with values of the declared types (prompt_get without params returns the prompt and its parameters).", se.Message)
		case service.CodeRenderLimit:
			return actionable("the prompt's rendering reached a limit: %s. Pass shorter parameter values.", se.Message)
		case service.CodeUnavailable, service.CodeOverloaded, service.CodeTimeout:
			return actionable("agentq cannot answer right now (%s: %s). Retry in a few seconds.", se.Code, se.Message)
		}
		return actionable("agentq failed to answer (%s: %s). Retry later; if it persists, tell the operator.", se.Code, se.Message)
	case errors.Is(err, nats.ErrNoResponders):
		return actionable("nothing serves %s: agentq's indexer is not running. Ask the operator to start agentq (make dev runs everything), then retry.", subject)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return actionable("agentq did not answer in time on %s. Retry in a few seconds.", subject)
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
		return actionable("the MCP server has lost its connection to agentq's NATS. Retry in a few seconds.")
	}
	return actionable("agentq failed: %v. Retry later; if it persists, tell the operator.", err)
}

// argumentErrors rewords the SDK's own check of a tool call's arguments
// against the tool's input schema, so it says what is wrong as the
// contract's validator words it (/version: got 0, want >= 1) and what to
// do, like the server's other errors.
func (s *Server) argumentErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method != "tools/call" || err != nil {
			return res, err
		}
		r, ok := res.(*mcp.CallToolResult)
		call, isCall := req.(*mcp.CallToolRequest)
		if !ok || !isCall || !r.IsError || len(r.Content) != 1 {
			return res, err
		}
		tc, ok := r.Content[0].(*mcp.TextContent)
		if !ok {
			return res, err
		}
		rest, found := strings.CutPrefix(tc.Text, `validating "arguments": `)
		if !found {
			return res, err
		}
		problems := strings.Join(strings.Fields(sdkPaths.Replace(rest)), " ")
		if name, ok := s.contracts[call.Params.Name]; ok {
			var verr *schemas.ValidationError
			if _, data, derr := eventData(call.Params.Arguments); derr == nil && errors.As(s.opts.Registry.Validate(name, data), &verr) {
				problems = strings.Join(verr.Problems, "; ")
			}
		}
		tc.Text = "invalid arguments: " + problems + ". Fix them (the tool's input schema describes every field) and call again."
		return res, err
	}
}

// sdkPaths shortens the SDK validator's locations to JSON pointers.
var sdkPaths = strings.NewReplacer("validating root: ", "", "validating /properties/", "/")
