package mcpserver

import (
	"context"
	"errors"
	"io"
	"net/http"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tenants names the tenant of a bearer token. *auth.File (the token file,
// kept current) satisfies it.
type Tenants interface {
	Tenant(token string) (string, error)
}

// HTTPHandler serves the server over MCP's streamable HTTP transport,
// stateless (any copy answers any request, nothing to resume), with every
// request authenticated: a bearer token tokens names a tenant, and the
// request acts for that tenant. A request without a token, or with one
// tokens does not know, is answered 401 with no word about the token; the
// token is never logged. The server must have no fixed tenant.
func (s *Server) HTTPHandler(tokens Tenants) (http.Handler, error) {
	if s.opts.Tenant != "" {
		return nil, errors.New("mcpserver: a server with a fixed tenant must not serve HTTP: each request's token names its tenant")
	}
	if tokens == nil {
		return nil, errors.New("mcpserver: HTTPHandler needs the tokens")
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true,
			// The SDK refuses requests that reach a loopback address under
			// another host name (DNS rebinding), which also refuses a
			// reverse proxy on the same machine. Every request here needs a
			// bearer token, which a rebinding page cannot have.
			DisableLocalhostProtection: true})
	verify := func(_ context.Context, token string, _ *http.Request) (*mcpauth.TokenInfo, error) {
		tenant, err := tokens.Tenant(token)
		if err != nil {
			// The SDK writes the error into the 401's body: say nothing
			// of the token.
			return nil, mcpauth.ErrInvalidToken
		}
		return &mcpauth.TokenInfo{UserID: tenant, Extra: map[string]any{tenantKey: tenant}}, nil
	}
	return mcpauth.RequireBearerToken(verify, &mcpauth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h), nil
}

// Healthz answers 200 while the connection to agentq's NATS is up, and
// 503 while it is not: the readiness of an HTTP server (a container's
// healthcheck, a load balancer's probe). It needs no token and says
// nothing but that.
func (s *Server) Healthz(w http.ResponseWriter, _ *http.Request) {
	if !s.opts.NC.IsConnected() {
		http.Error(w, "nats disconnected", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}
