package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/devdb"
	"github.com/agentq/agentq/internal/quality"
)

// Consumers are every consumer agentq has so far, as agentq dev runs them.
var Consumers = []app.Consumer{quality.Consumer}

func init() {
	register("dev", "run everything in one process: embedded NATS, dev database, migrations, all consumers", runDev)
}

func runDev(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("dev", e)
	data := fs.String("data", cfg.DataDir, "keep NATS and the dev database under this directory (default: a temporary one, removed on exit)")
	listen := fs.String("nats-listen", cfg.NATSListen, "host:port of the embedded NATS server (port 0: any free port)")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	host, portStr, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("--nats-listen %q: %w", *listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("--nats-listen %q: bad port", *listen)
	}
	if port == 0 {
		port = -1 // any free port
	}
	dir, persistent := *data, *data != ""
	if !persistent {
		if dir, err = os.MkdirTemp("", "agentq-dev-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "nats"), 0o755); err != nil {
		return err
	}
	srv, err := broker.Start(broker.Options{Host: host, Port: port, StoreDir: filepath.Join(dir, "nats"), Log: log.With().Str("component", "nats").Logger()})
	if err != nil {
		return fmt.Errorf("embedded NATS on %s: %w", *listen, err)
	}
	defer srv.Shutdown()
	cfg.NATSURL = srv.ClientURL()

	dbWhere := "AGENTQ_DATABASE_URL"
	if cfg.DatabaseURL == "" {
		opts := devdb.Options{Dir: cfg.PGliteDir, Log: log}
		if persistent {
			opts.DataDir = filepath.Join(dir, "pglite")
			dbWhere = "PGlite dev database in " + opts.DataDir
		} else {
			dbWhere = "PGlite dev database in memory"
		}
		db, err := devdb.Start(ctx, opts)
		if err != nil {
			return err
		}
		defer db.Close()
		cfg.DatabaseURL = db.URL()
	}
	d, err := app.Start(ctx, cfg, "dev", log)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
		defer cancel()
		_ = d.Close(cctx)
	}()
	if cfg.MetricsAddr != "" {
		go func() {
			if err := app.ServeMetrics(ctx, cfg.MetricsAddr, d); err != nil {
				log.Warn().Err(err).Msg("metrics server")
			}
		}()
	}
	names := make([]string, len(Consumers))
	for i, c := range Consumers {
		names[i] = c.Name
	}
	where := dir
	if !persistent {
		where += " (temporary; use --data DIR to keep it)"
	}
	fmt.Fprintf(e.Stdout, `agentq dev is running. Ctrl-C stops it.

  NATS       %s   (JetStream, streams AGENTQ and AGENTQ_DLQ)
  database   %s
  data       %s
  consumers  %v
  metrics    %s

Try it, in another terminal:
  go run ./cmd/agentq tail quality.changed.demo &
  go run ./cmd/agentq publish --tenant demo --type tool.executed --data '{"tool_name":"web_search","success":true,"latency_ms":120}'
`, cfg.NATSURL, dbWhere, where, names, metricsURL(cfg.MetricsAddr))
	err = app.Run(ctx, d, Consumers...)
	fmt.Fprintln(e.Stdout, "agentq dev stopped.")
	return err
}

func metricsURL(addr string) string {
	if addr == "" {
		return "off"
	}
	if addr[0] == ':' {
		addr = "127.0.0.1" + addr
	}
	return "http://" + addr + "/metrics"
}
