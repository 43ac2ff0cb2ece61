package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/mcpserver"
	"github.com/agentq/agentq/schemas"
)

func init() {
	register("mcp", "serve agentq to MCP clients: on stdio for one tenant, or over HTTP with a bearer token per tenant", runMCP)
	describe("mcp", "[--tenant T] [--read-only] | --http ADDR [--read-only]", `Serves agentq as a Model Context Protocol server, so agents on MCP
frameworks (desktop agents, IDEs, agent SDKs) search, get and create
prompts, search tools, report tool calls, give feedback and see tool
health with one tool call each; the tenant's prompt library is also served
as MCP prompts. It talks to a running agentq over NATS (AGENTQ_NATS_URL, or
the running agentq dev's), and keeps waiting for it when it is not up yet.

Without --http it serves one client on standard input and output, acting
for tenant --tenant (else AGENTQ_TENANT, else "default"): the command an
MCP client's configuration starts. Logs go to standard error.

With --http ADDR it serves MCP's streamable HTTP transport at
http://ADDR/mcp for any number of clients. Every request needs an
Authorization: Bearer header with a token of the token file
(AGENTQ_TOKEN_FILE, made with agentq token new); the token names the
tenant the request acts for. A request without a known token is answered
401. Tokens added to or removed from the file take effect within seconds.
GET /healthz answers 200 while NATS is connected (agentq healthcheck
--addr ADDR). /metrics (agentq_mcp_requests_total{code}, Go and process
metrics) and /healthz are also served on AGENTQ_METRICS_ADDR, as every
agentq process does; when that is the default address and taken (by
agentq dev), the server goes on without them.

--read-only (or AGENTQ_MCP_READ_ONLY=true) leaves out the tools that
write: prompt_create, tool_report and feedback_submit.`)
}

func runMCP(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	const name = "mcp"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	addr := fs.String("http", "", "serve streamable HTTP on this address (host:port), tenants from bearer tokens, instead of stdio")
	readOnly := fs.Bool("read-only", cfg.MCPReadOnly, "offer no write tools (prompt_create, tool_report, feedback_submit); AGENTQ_MCP_READ_ONLY sets the default")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(e, fs, name, "unexpected arguments %v", pos)
	}
	tenantSet := false
	fs.Visit(func(f *flag.Flag) { tenantSet = tenantSet || f.Name == "tenant" })
	var tokens *auth.File
	if *addr != "" {
		if tenantSet {
			return usageError(e, fs, name, "--tenant and --http exclude each other: over HTTP each request's token names its tenant")
		}
		if cfg.TokenFile == "" {
			return errors.New("--http needs AGENTQ_TOKEN_FILE, the file of bearer tokens (`agentq token new --tenant T` makes a token and its line)")
		}
		if tokens, err = auth.Open(cfg.TokenFile); err != nil {
			return err
		}
		*tenant = ""
	} else if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}

	reg, err := schemas.Load()
	if err != nil {
		return err
	}
	url := natsURL(e, cfg)
	// Desktop clients start the server with the app: it waits for agentq
	// rather than fail, and its tools say so meanwhile.
	nc, err := nats.Connect(url, nats.Name("agentq-mcp"), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	defer nc.Close()
	srv, err := mcpserver.New(mcpserver.Options{NC: nc, Registry: reg, Tenant: *tenant, ReadOnly: *readOnly, Log: log})
	if err != nil {
		return err
	}
	mode := "read and write"
	if *readOnly {
		mode = "read-only"
	}
	if *addr == "" {
		log.Info().Str("tenant", *tenant).Str("nats", url).Str("tools", mode).Msg("agentq mcp: serving on stdio")
		return srv.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(e.Stdin), Writer: nopWriteCloser{e.Stdout}})
	}

	go tokens.Watch(ctx, 2*time.Second, func(err error) {
		if err != nil {
			log.Error().Err(err).Msg("token file: keeping the tokens read last")
		} else {
			log.Info().Msg("token file: read again")
		}
	})
	h, err := srv.HTTPHandler(tokens)
	if err != nil {
		return err
	}
	registry := newRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentq_mcp_requests_total",
		Help: "Requests to /mcp by HTTP status code (401: no known bearer token).",
	}, []string{"code"})
	registry.MustRegister(requests)
	mux := http.NewServeMux()
	mux.Handle("/mcp", promhttp.InstrumentHandlerCounter(requests, h))
	mux.HandleFunc("GET /healthz", srv.Healthz)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	defer ln.Close()
	metrics := "off"
	mln, err := listenMetrics(cfg)
	switch {
	case err != nil && e.Getenv("AGENTQ_METRICS_ADDR") == "":
		// The default address is agentq dev's too: next to it, serve MCP
		// without metrics rather than not at all.
		fmt.Fprintf(e.Stderr, "note: %v\n", err)
	case err != nil:
		return err
	case mln != nil:
		stop := serveHandler(mln, metricsHandler(registry, http.HandlerFunc(srv.Healthz)), log)
		defer stop()
		metrics = "http://" + mln.Addr().String() + "/metrics"
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.Stdout, "agentq mcp: serving streamable HTTP at http://%s/mcp (%s tools, %d tokens; metrics %s)\n", ln.Addr(), mode, tokens.Tokens().Len(), metrics)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// nopWriteCloser keeps the command's standard output open when the MCP
// session ends: it belongs to the process.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
