package search

import (
	"context"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/service"
)

// Endpoint names, subject prefixes and request schemas.
const (
	PromptsSubject = "search.prompts"
	ToolsSubject   = "search.tools"
	GetSubject     = "prompts.get"
	ListSubject    = "prompts.list"
)

// Register adds search.prompts.*, search.tools.*, prompts.get.* and
// prompts.list.* to svc.
// Requests are validated against their schemas when svc has a Validator;
// the handlers check them again, so a service without one still answers
// bad_request, never a timeout.
func (s *Searcher) Register(svc *service.Service) error {
	for _, ep := range []struct {
		name, subject, schema string
		h                     service.Handler
	}{
		{"search-prompts", PromptsSubject, "agentq.search.prompts.request.v1", handle(s.Prompts)},
		{"search-tools", ToolsSubject, "agentq.search.tools.request.v1", handle(s.Tools)},
		{"prompts-get", GetSubject, "agentq.prompts.get.request.v1", handle(s.Get)},
		{"prompts-list", ListSubject, "agentq.prompts.list.request.v1", handle(s.List)},
	} {
		if err := svc.AddEndpoint(ep.name, ep.subject, ep.schema, ep.h); err != nil {
			return err
		}
	}
	return nil
}

// handle decodes the request body into Req and calls f.
func handle[Req, Resp any](f func(context.Context, string, Req) (Resp, error)) service.Handler {
	return func(ctx context.Context, r service.Request) (any, error) {
		var req Req
		if err := bus.DecodeData(r.Data, &req); err != nil {
			return nil, service.BadRequest("request is not the expected JSON object: %s", truncate(err.Error(), 300))
		}
		return f(ctx, r.Tenant, req)
	}
}
