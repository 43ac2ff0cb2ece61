package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/ingest"
	"github.com/agentq/agentq/schemas"
)

func init() {
	register("ingest", "serve CloudEvents over HTTP: agents POST events, published to JetStream once validated", runIngest)
	describe("ingest", "[--addr HOST:PORT]", `Serves POST /events: CloudEvents in the HTTP protocol binding (binary,
structured application/cloudevents+json, and batches
application/cloudevents-batch+json), each authenticated by a bearer token
of AGENTQ_TOKEN_FILE that names its tenant, validated as agentq publish
validates, published to JetStream, and answered once JetStream acknowledged
it: 202 with a result per event; 400 naming the refused events (the others
are published all the same); 413 over the size limits; 503 with
Retry-After when JetStream did not take them (sending them again is safe),
or when AGENTQ_INGEST_MAX_INFLIGHT requests are in flight already.
GET /healthz answers 200 while NATS is connected. agentq dev runs the same
endpoint at AGENTQ_INGEST_ADDR.`)
}

// tokenPoll is how often a token file is looked at for changes.
const tokenPoll = 2 * time.Second

func runIngest(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("ingest", e)
	addr := fs.String("addr", cfg.Ingest.Addr, "host:port to serve on (:8088 for every interface)")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	switch {
	case fs.NArg() > 0:
		return usageError(e, fs, "ingest", "unexpected argument %q", fs.Arg(0))
	case *addr == "":
		return usageError(e, fs, "ingest", "no address: set --addr or AGENTQ_INGEST_ADDR")
	}
	// Without tokens every request would be refused: say so now rather
	// than serve an endpoint nobody can use.
	if cfg.TokenFile == "" {
		return errors.New("AGENTQ_TOKEN_FILE is not set, so every request would be refused: make a token with `agentq token new --tenant T`, add its line to a file and set AGENTQ_TOKEN_FILE to that file")
	}
	log = log.With().Str("service", "ingest").Logger()
	tokens, err := watchTokens(ctx, cfg.TokenFile, log)
	if err != nil {
		return err
	}
	reg, err := schemas.Load()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	defer ln.Close()
	cfg.NATSURL = natsURL(e, cfg)
	nc, err := ingest.Connect(cfg.NATSURL, "agentq-ingest", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := bus.EnsureStreams(ctx, js, cfg.Stream); err != nil {
		return err
	}
	registry := newRegistry()
	h, err := ingest.New(nc, reg, tokens, ingestOptions(cfg, registry, log))
	if err != nil {
		return err
	}
	mln, err := listenMetrics(cfg)
	if err != nil {
		return err
	}
	if mln != nil {
		stop := serveHandler(mln, metricsHandler(registry, h), log)
		defer stop()
	}
	fmt.Fprintf(e.Stdout, "agentq ingest: POST CloudEvents to %s (NATS %s; %d tokens from %s, reloaded when it changes). Ctrl-C stops it.\n",
		ingest.URL(ln.Addr().String()), nc.ConnectedUrlRedacted(), tokens.Tokens().Len(), cfg.TokenFile)
	return ingest.Serve(ctx, ln, h, cfg.ShutdownGrace)
}

// ingestOptions are the endpoint's limits from the configuration.
func ingestOptions(cfg config.Config, reg prometheus.Registerer, log zerolog.Logger) ingest.Options {
	return ingest.Options{
		MaxPayload: cfg.MaxPayload, MaxBody: cfg.Ingest.MaxBody, MaxBatch: cfg.Ingest.MaxBatch,
		AckTimeout: cfg.Ingest.AckTimeout, MaxInFlight: cfg.Ingest.MaxInFlight, Registerer: reg, Log: log,
	}
}

// watchTokens opens the token file and keeps it current until ctx ends.
func watchTokens(ctx context.Context, path string, log zerolog.Logger) (*auth.File, error) {
	f, err := auth.Open(path)
	if err != nil {
		return nil, err
	}
	go f.Watch(ctx, tokenPoll, func(err error) {
		if err != nil {
			log.Warn().Err(err).Msg("token file unreadable: keeping the tokens last read")
			return
		}
		log.Info().Int("tokens", f.Tokens().Len()).Msg("token file read again")
	})
	return f, nil
}

// serveHandler serves h on ln until stop is called.
func serveHandler(ln net.Listener, h http.Handler, log zerolog.Logger) (stop func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("addr", ln.Addr().String()).Msg("http server")
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}

// devTokenFile holds the token agentq dev's endpoint grants to tenant demo
// when AGENTQ_TOKEN_FILE is not set, next to the state file (and in the
// --data directory), so a client finds it as it finds the instance.
const devTokenFile = "dev-token"

// devTenant is the tenant of the dev token: the one the examples use.
const devTenant = "demo"

// devToken returns the dev token and the file a client reads it from: the
// one already saved (in the --data directory first), so clients keep
// working across restarts, else a new one. A token that could not be saved
// anywhere still serves, with path "" and the reason in err.
func devToken(e Env, dataDir string) (token, path string, err error) {
	paths := []string{filepath.Join(filepath.Dir(devStatePath(e, "")), devTokenFile)}
	if dataDir != "" {
		paths = append([]string{filepath.Join(dataDir, devTokenFile)}, paths...)
	}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if tok := strings.TrimSpace(string(raw)); err == nil && len(tok) >= auth.MinTokenLen && !strings.ContainsAny(tok, " \t\r\n") {
			token = tok
			break
		}
	}
	if token == "" {
		if token, _, err = auth.New(devTenant); err != nil {
			return "", "", err
		}
	}
	var errs []error
	for _, p := range paths {
		// 0600, as the state file: the token is a credential.
		if werr := writeFileAtomic(p, []byte(token+"\n")); werr != nil {
			errs = append(errs, werr)
			continue
		}
		path = p
	}
	if path == "" {
		return token, "", fmt.Errorf("dev token not saved: %w", errors.Join(errs...))
	}
	return token, path, nil
}

// devIngest starts agentq dev's endpoint on ln, publishing through its own
// connection to natsURL, until the returned stop is called. It describes
// itself for the banner.
func devIngest(ctx context.Context, e Env, cfg config.Config, dataDir string, ln net.Listener, validator bus.Validator, reg prometheus.Registerer, log zerolog.Logger) (stop func(), banner string, err error) {
	log = log.With().Str("component", "ingest").Logger()
	var authn ingest.Authenticator
	if cfg.TokenFile != "" {
		f, err := watchTokens(ctx, cfg.TokenFile, log)
		if err != nil {
			return nil, "", err
		}
		authn = f
		banner = fmt.Sprintf("(CloudEvents over HTTP; bearer tokens from %s)", cfg.TokenFile)
	} else {
		token, path, err := devToken(e, dataDir)
		if token == "" {
			return nil, "", err
		}
		saved := "saved in " + path
		if path == "" {
			log.Warn().Err(err).Msg("clients must take the dev token from the banner")
			saved = "not saved"
		}
		// Of scope operator: agentq dev's NATS, open to every local
		// process, takes anyone's operator commands anyway.
		t, err := auth.Parse(strings.NewReader(devTenant + " " + token + " " + string(auth.ScopeOperator)))
		if err != nil {
			return nil, "", err
		}
		authn = t
		banner = fmt.Sprintf("(CloudEvents over HTTP; tenant %s, bearer token %s, %s)", devTenant, token, saved)
	}
	nc, err := ingest.Connect(cfg.NATSURL, "agentq-dev-ingest", log)
	if err != nil {
		return nil, "", err
	}
	h, err := ingest.New(nc, validator, authn, ingestOptions(cfg, reg, log))
	if err != nil {
		nc.Close()
		return nil, "", err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ingest.Serve(sctx, ln, h, cfg.ShutdownGrace); err != nil {
			log.Error().Err(err).Msg("ingest endpoint stopped")
		}
	}()
	return func() {
		cancel()
		<-done
		nc.Close()
	}, banner, nil
}

var (
	_ ingest.Authenticator = (*auth.File)(nil)
	_ ingest.Authenticator = (*auth.Tokens)(nil)
)
