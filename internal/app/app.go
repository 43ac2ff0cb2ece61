// Package app wires an agentq process: logger, NATS and JetStream, streams,
// migrations, the Postgres pool, schemas, metrics, and the consumers it
// runs, with a bounded teardown in reverse order. Every cmd/ main is a
// call to Main; agentq dev and the tests call Start and Run directly, so the
// whole service can be embedded in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mattn/go-isatty"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/schemas"
)

// Deps are the shared dependencies a consumer runs on.
type Deps struct {
	Config    config.Config
	Log       zerolog.Logger
	NC        *nats.Conn
	JS        jetstream.JetStream
	Pool      *pgxpool.Pool
	Schemas   *schemas.Registry
	Publisher *bus.Publisher
	Outbox    *outbox.Outbox
	Registry  *prometheus.Registry
	Metrics   *bus.Metrics

	lag     *lagCollector
	closers []closer
}

type closer struct {
	name string
	fn   func(context.Context) error
}

// Consumer is one agentq consumer, run by its own binary or by agentq dev.
// Run blocks until ctx ends and returns after a graceful stop.
type Consumer struct {
	Name string
	Run  func(ctx context.Context, d *Deps) error
}

// NewLogger builds the process logger: JSON, or console on a terminal when
// the format is auto.
func NewLogger(cfg config.Config, w io.Writer) zerolog.Logger {
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		level = zerolog.InfoLevel
	}
	console := cfg.LogFormat == "console"
	if cfg.LogFormat == "auto" {
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			console = true
		}
	}
	if console {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// Start connects to NATS, ensures the streams, applies migrations, opens
// the pool and loads the schemas. Close releases everything it opened.
func Start(ctx context.Context, cfg config.Config, name string, log zerolog.Logger) (*Deps, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("AGENTQ_DATABASE_URL is not set: point it at Postgres with pgvector, or run `agentq dev` for the embedded setup")
	}
	d := &Deps{Config: cfg, Log: log}
	fail := func(err error) (*Deps, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return nil, errors.Join(err, d.Close(cctx))
	}
	var err error
	d.NC, err = nats.Connect(cfg.NATSURL, nats.Name("agentq-"+name), nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: we closed it
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info().Str("url", c.ConnectedUrl()).Msg("nats reconnected") }))
	if err != nil {
		return fail(fmt.Errorf("connect to NATS at %s: %w", cfg.NATSURL, err))
	}
	d.push("nats", func(ctx context.Context) error {
		// Flush so the acks of the last batch reach the server.
		err := d.NC.FlushWithContext(ctx)
		d.NC.Close()
		return err
	})
	d.JS, err = jetstream.New(d.NC, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return fail(fmt.Errorf("jetstream: %w", err))
	}
	if err := bus.EnsureStreams(ctx, d.JS, cfg.Stream); err != nil {
		return fail(err)
	}
	if err := database.Migrate(ctx, cfg.DatabaseURL, log); err != nil {
		return fail(err)
	}
	d.Pool, err = database.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return fail(err)
	}
	d.push("postgres", func(context.Context) error { d.Pool.Close(); return nil })
	d.Schemas, err = schemas.Load()
	if err != nil {
		return fail(err)
	}
	d.Publisher = bus.NewPublisher(d.JS, d.Schemas)
	d.Outbox = outbox.New(d.Pool, d.Publisher, log.With().Str("component", "outbox").Logger())
	d.Registry = prometheus.NewRegistry()
	d.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.Metrics = bus.NewMetrics(d.Registry)
	d.lag = newLagCollector(d.JS, log)
	d.Registry.MustRegister(d.lag)
	return d, nil
}

func (d *Deps) push(name string, fn func(context.Context) error) {
	d.closers = append(d.closers, closer{name, fn})
}

// Close releases the dependencies in reverse order of opening, within ctx.
func (d *Deps) Close(ctx context.Context) error {
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		c := d.closers[i]
		if err := c.fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", c.name, err))
		}
	}
	d.closers = nil
	return errors.Join(errs...)
}

// Run runs the consumers and one outbox relay until ctx ends, then waits
// for all of them to stop. It returns the consumers' start-up errors. The
// lag of each consumer's durable (agentq_consumer_pending, _ack_pending,
// _redelivered) is on d.Registry from now on.
func Run(ctx context.Context, d *Deps, consumers ...Consumer) error {
	var wg sync.WaitGroup
	errs := make([]error, len(consumers))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The relay outlives the consumers, so it cleans up after their last
	// batches.
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		d.Outbox.Relay(relayCtx, d.Config.RelayInterval, d.Config.RelayMinAge)
	}()
	defer func() { stopRelay(); <-relayDone }()
	if d.Config.InboxRetention > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pruneInbox(ctx, d)
		}()
	}
	for i, c := range consumers {
		if d.lag != nil {
			d.lag.add(c.Name) // the app consumer's name is its durable consumer's
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(ctx, d); err != nil {
				errs[i] = fmt.Errorf("%s: %w", c.Name, err)
				d.Log.Error().Err(err).Str("consumer", c.Name).Msg("consumer failed")
				cancel() // one failed consumer stops the process; its supervisor restarts it
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pruneInbox deletes expired inbox rows now and every hour until ctx ends.
func pruneInbox(ctx context.Context, d *Deps) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		n, err := database.PruneInbox(ctx, d.Pool, d.Config.InboxRetention)
		switch {
		case err != nil && ctx.Err() == nil:
			d.Log.Warn().Err(err).Msg("inbox pruning")
		case n > 0:
			d.Log.Info().Int64("rows", n).Dur("retention", d.Config.InboxRetention).Msg("inbox pruned")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// MetricsHandler serves /metrics (Prometheus) and /healthz (NATS connected
// and the database answering) for d.
func MetricsHandler(d *Deps) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{Registry: d.Registry}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !d.NC.IsConnected() {
			http.Error(w, "nats disconnected", http.StatusServiceUnavailable)
			return
		}
		if err := d.Pool.Ping(r.Context()); err != nil {
			http.Error(w, "database: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// ServeMetrics serves MetricsHandler on addr until ctx ends.
func ServeMetrics(ctx context.Context, addr string, d *Deps) error {
	srv := &http.Server{Addr: addr, Handler: MetricsHandler(d), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server on %s: %w", addr, err)
	}
	return nil
}

// Main is the whole life of a consumer binary: configuration from the
// environment, signals to cancellation, dependencies, the consumers, and a
// teardown bounded by the shutdown grace. It returns the exit code.
func Main(name string, consumers ...Consumer) int {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: configuration: %v\n", name, err)
		return 2
	}
	log := NewLogger(cfg, os.Stderr).With().Str("service", name).Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := Start(ctx, cfg, name, log)
	if err != nil {
		log.Error().Err(err).Msg("start")
		return 1
	}
	if cfg.MetricsAddr != "" {
		go func() {
			if err := ServeMetrics(ctx, cfg.MetricsAddr, d); err != nil {
				log.Error().Err(err).Msg("metrics")
			}
		}()
	}
	runErr := Run(ctx, d, consumers...)
	cctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	if err := errors.Join(runErr, d.Close(cctx)); err != nil {
		log.Error().Err(err).Msg("stopped with errors")
		return 1
	}
	log.Info().Msg("stopped")
	return 0
}
