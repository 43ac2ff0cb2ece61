// Package mcpserver is agentq's Model Context Protocol server: agents on
// MCP frameworks find and use prompts and tools, report tool calls and
// give feedback with one tool call each, and see agentq's prompt library
// as MCP prompts, without a NATS client or the subject conventions.
//
// It speaks to a running agentq over NATS, as any agent would: searches,
// gets and lists are the indexer's request/reply calls (search.prompts,
// search.tools, prompts.get, prompts.list), tool health is folded from the
// degrader's results on the stream (tool.degraded, tool.quarantined,
// tool.recovered), and the write tools publish input events
// (prompt.created, tool.executed, feedback.submitted), validated against
// the schemas first and sent with the tenant-scoped Nats-Msg-Id. Tool
// inputs are the contract's own shapes (schemas/), so an MCP tool call and
// the NATS request or event it stands for take the same fields and give
// the same results.
//
// A Server acts for one tenant (Options.Tenant, for stdio), or for the
// tenant each request's bearer token names (HTTPHandler): the tenant never
// comes from the request's arguments. Errors an agent can act on are tool
// results with IsError and a sentence saying what to do; protocol errors
// are left for requests that are malformed as MCP.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/schemas"
)

// Options configure a Server.
type Options struct {
	// NC is the connection to agentq's NATS. Required.
	NC *nats.Conn
	// Registry validates inputs against the contract. Required.
	Registry *schemas.Registry
	// Tenant, when set, is the tenant every request acts for (stdio).
	// Empty: each request's bearer token names it (HTTPHandler), and a
	// request without one is refused.
	Tenant string
	// ReadOnly leaves the write tools (prompt_create, tool_report,
	// feedback_submit) out: they are neither listed nor callable.
	ReadOnly bool
	// CallTimeout bounds each request/reply call to agentq. Default 10s.
	CallTimeout time.Duration
	// AnswerTimeout is how long prompt_create waits for the indexer's
	// answer. Default 30s.
	AnswerTimeout time.Duration
	// HealthTenants is how many tenants' tool health tool_health keeps
	// folded from the stream, the least recently asked about dropped
	// first (and read again from the stream when asked). Default 1000.
	HealthTenants int
	// Version is reported to clients as the server's version.
	Version string
	// Log hears one line per tool call at debug level, and failures of
	// agentq's calls at warn.
	Log zerolog.Logger
}

func (o *Options) validate() error {
	switch {
	case o.NC == nil:
		return errors.New("mcpserver: Options.NC is required")
	case o.Registry == nil:
		return errors.New("mcpserver: Options.Registry is required")
	case o.Tenant != "" && !bus.ValidTenant(o.Tenant):
		return fmt.Errorf("mcpserver: tenant %q does not match [a-z0-9_-]{1,64}", o.Tenant)
	case o.CallTimeout < 0 || o.AnswerTimeout < 0:
		return errors.New("mcpserver: timeouts must not be negative")
	case o.HealthTenants < 0:
		return errors.New("mcpserver: HealthTenants must not be negative")
	}
	if o.HealthTenants == 0 {
		o.HealthTenants = 1000
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = 10 * time.Second
	}
	if o.AnswerTimeout == 0 {
		o.AnswerTimeout = 30 * time.Second
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	return nil
}

// Server is an MCP server over one agentq.
type Server struct {
	opts   Options
	js     jetstream.JetStream
	pub    *bus.Publisher
	mcp    *mcp.Server
	health *healthFold
	log    zerolog.Logger
	// contracts maps a tool to the contract schema its arguments follow.
	contracts map[string]string
}

// source is the CloudEvents source of the events the server publishes.
const source = "agentq-mcp"

// instructions tell the agent what the server is for and how its tools fit
// together.
const instructions = `agentq keeps a searchable prompt library and tool registry, ranked by how well each prompt and tool has worked.
Find a prompt with prompt_search (by what it should do) or prompt_list, then prompt_get it by id, rendered with its parameters.
Find a tool with tool_search; tools agentq has quarantined for failing are never returned, and tool_health says which tools are degraded or quarantined and why.
After calling a tool, report the outcome with tool_report; rate a prompt or tool with feedback_submit. These feed the quality scores that rank search results.
Add a prompt (or a new version of one) with prompt_create.`

// New returns a Server with its tools and prompts.
func New(opts Options) (*Server, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(opts.NC)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	s := &Server{opts: opts, js: js, pub: bus.NewPublisher(js, opts.Registry), health: newHealthFold(js, opts.HealthTenants),
		contracts: map[string]string{}, log: opts.Log.With().Str("component", "mcp").Logger()}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "agentq", Title: "agentq prompt library and tool registry", Version: opts.Version},
		&mcp.ServerOptions{
			Instructions: instructions,
			// Prompts are the tenant's library, served by the middleware
			// below, so the capability is declared rather than inferred
			// from registered prompts; no logging capability.
			Capabilities: &mcp.ServerCapabilities{Prompts: &mcp.PromptCapabilities{}, Tools: &mcp.ToolCapabilities{}},
		})
	if err := s.addTools(); err != nil {
		return nil, err
	}
	s.mcp.AddReceivingMiddleware(s.promptsMiddleware, s.argumentErrors)
	return s, nil
}

// MCP returns the SDK server, to run on a transport (Run with
// mcp.StdioTransport, Connect with an in-memory transport in tests).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves one client on t (stdio: &mcp.StdioTransport{}) until it
// disconnects or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	if s.opts.Tenant == "" {
		return errors.New("mcpserver: a server without Options.Tenant serves HTTP only (each request's token names its tenant)")
	}
	err := s.mcp.Run(ctx, t)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// tenantKey is where the HTTP handler's token check leaves the tenant in
// the request's token info.
const tenantKey = "agentq_tenant"

// errNoTenant is a request that names no tenant: an HTTP request that
// passed no token check, which HTTPHandler never lets through.
var errNoTenant = errors.New("no tenant: this server needs a bearer token naming one")

// tenant is the tenant a request acts for: the one its bearer token
// names, else the server's own.
func (s *Server) tenant(extra *mcp.RequestExtra) (string, error) {
	if extra != nil && extra.TokenInfo != nil {
		if t, _ := extra.TokenInfo.Extra[tenantKey].(string); t != "" {
			return t, nil
		}
		return "", errNoTenant
	}
	if s.opts.Tenant != "" {
		return s.opts.Tenant, nil
	}
	return "", errNoTenant
}

// reachable fails at once, with what to do, while the connection to
// agentq's NATS is down (agentq not started yet, or restarting), rather
// than let a call wait out its timeout.
func (s *Server) reachable() error {
	if s.opts.NC.IsConnected() {
		return nil
	}
	return actionable("agentq is not reachable: the MCP server is not connected to agentq's NATS server. Make sure agentq is running (make dev runs it), then retry.")
}
