package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/devdb"
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/ingest"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/rating"
	"github.com/agentq/agentq/internal/webhook"
)

// Consumers are every consumer agentq has so far, as agentq dev runs them.
var Consumers = []app.Consumer{indexer.Consumer, quality.Consumer, rating.Consumer, health.Consumer, webhook.Consumer, lab.Consumer}

func init() {
	register("dev", "run everything in one process: embedded NATS, dev database, migrations, all consumers, the HTTP ingest endpoint", runDev)
	describe("dev", "[--data DIR] [--nats-listen HOST:PORT]", `Runs an embedded NATS server with JetStream, the PGlite dev database (unless
AGENTQ_DATABASE_URL is set), migrations and every consumer in one process,
until Ctrl-C. While it runs, the other agentq commands in another terminal
find it by itself: it leaves its NATS and database URLs in a state file,
dev.json in the user's cache directory (and in the --data directory), removed
on exit. A --data directory is locked while agentq dev runs on it: a second
instance on the same directory is refused (it would share the NATS store and
the database), and the lock goes with the process, however it ends.

It also serves the CloudEvents-over-HTTP endpoint of agentq ingest at
AGENTQ_INGEST_ADDR (off: none). Without AGENTQ_TOKEN_FILE it grants one
token, to tenant demo, printed at start and kept in dev-token beside the
state file (and in the --data directory), reused at the next start.`)
}

func runDev(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("dev", e)
	data := fs.String("data", cfg.DataDir, "keep NATS and the dev database under this directory (default: a temporary one, removed on exit)")
	listen := fs.String("nats-listen", cfg.NATSListen, "host:port of the embedded NATS server (port 0: any free port)")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if fs.NArg() > 0 {
		return usageError(e, fs, "dev", "unexpected argument %q", fs.Arg(0))
	}
	// Ctrl-C while starting is a stop, not a failure.
	interrupted := func(err error) error {
		if ctx.Err() != nil {
			fmt.Fprintln(e.Stdout, "agentq dev stopped while starting.")
			return nil
		}
		return err
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
	// One agentq dev per data directory, checked before anything else:
	// a second one would share the NATS store and the database, and the
	// port clashes it would meet next say nothing of that.
	if *data != "" {
		if err := os.MkdirAll(*data, 0o755); err != nil {
			return err
		}
		release, err := lockDataDir(*data)
		if err != nil {
			return err
		}
		defer release()
	}
	// Another agentq dev holding the ports is the usual cause of a clash.
	other := ""
	if st, _, ok := liveDevState(e, config.Config{DataDir: *data}); ok && st.PID != os.Getpid() {
		other = fmt.Sprintf("; agentq dev (pid %d, NATS %s) is already running", st.PID, st.NATSURL)
	}

	// Bound before anything is advertised: a taken port is an error now,
	// not a warning after the banner has printed the address.
	var metricsLn net.Listener
	if cfg.MetricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("metrics address %s is not available (%v)%s: set AGENTQ_METRICS_ADDR to a free host:port, or AGENTQ_METRICS_ADDR=off to run without metrics", cfg.MetricsAddr, err, other)
		}
		defer metricsLn.Close() // no-op once the server has shut down
	}
	var ingestLn net.Listener
	if cfg.Ingest.Addr != "" {
		if ingestLn, err = net.Listen("tcp", cfg.Ingest.Addr); err != nil {
			return fmt.Errorf("ingest address %s is not available (%v)%s: set AGENTQ_INGEST_ADDR to a free host:port, or AGENTQ_INGEST_ADDR=off to run without the HTTP endpoint", cfg.Ingest.Addr, err, other)
		}
		defer ingestLn.Close()
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
	srv, err := broker.Start(broker.Options{
		Host: host, Port: port, StoreDir: filepath.Join(dir, "nats"),
		Log: log.With().Str("component", "nats").Logger(),
		// The streams exist before the port opens: an agent that connects
		// the moment it can and publishes at once must not get "no
		// responders".
		Setup: func(ctx context.Context, js jetstream.JetStream) error {
			return bus.EnsureStreams(ctx, js, cfg.Stream)
		},
	})
	if err != nil {
		return fmt.Errorf("embedded NATS on %s: %w%s (--nats-listen 127.0.0.1:0 picks any free port)", *listen, err, other)
	}
	defer srv.Shutdown()
	cfg.NATSURL = srv.ClientURL()

	dbWhere := "AGENTQ_DATABASE_URL " + redact(cfg.DatabaseURL)
	if cfg.DatabaseURL == "" {
		opts := devdb.Options{Dir: cfg.PGliteDir, Log: log, StartTimeout: cfg.DevDBStartTimeout}
		kind := "in memory"
		if persistent {
			opts.DataDir = filepath.Join(dir, "pglite")
			kind = "in " + opts.DataDir
		}
		db, err := devdb.Start(ctx, opts)
		if err != nil {
			return interrupted(err)
		}
		defer db.Close()
		cfg.DatabaseURL = db.URL() // with default_query_exec_mode=exec, which pgx needs with PGlite
		// psql takes it as printed; agentq commands in other terminals
		// find the pgx form in the state file.
		dbWhere = db.PsqlURL() + "\n             (PGlite dev database " + kind + "; psql \"<url>\" works; as AGENTQ_DATABASE_URL add &default_query_exec_mode=exec)"
	}
	d, err := app.Start(ctx, cfg, "dev", log)
	if err != nil {
		return interrupted(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
		defer cancel()
		_ = d.Close(cctx)
	}()
	if metricsLn != nil {
		stop := serveMetrics(metricsLn, d, log)
		defer stop()
	}
	ingestLine := "off"
	if ingestLn != nil {
		stop, about, err := devIngest(ctx, e, cfg, dirIf(persistent, dir), ingestLn, d.Schemas, d.Registry, log)
		if err != nil {
			return interrupted(err)
		}
		defer stop()
		ingestLine = ingest.URL(ingestLn.Addr().String()) + "   " + about
	}

	statePath := devStatePath(e, "") + " (agentq commands in other terminals use this instance)"
	removeState, err := writeDevState(e, dirIf(persistent, dir), devState{
		NATSURL: cfg.NATSURL, DatabaseURL: cfg.DatabaseURL, PID: os.Getpid(), StartedAt: time.Now().UTC(), DataDir: dirIf(persistent, dir),
	})
	if err != nil {
		// Not fatal: the other commands then need AGENTQ_NATS_URL and
		// AGENTQ_DATABASE_URL, as the banner says.
		log.Warn().Err(err).Msg("other agentq commands will not find this instance by themselves")
		statePath = "not written: set AGENTQ_NATS_URL and AGENTQ_DATABASE_URL in other terminals"
	} else {
		defer removeState() // first thing on the way out: no command picks a stopping instance
	}

	names := make([]string, len(Consumers))
	for i, c := range Consumers {
		names[i] = c.Name
	}
	where := dir
	if !persistent {
		where += " (temporary; use --data DIR to keep it)"
	}
	// The commands must work as printed: with a NATS server that is not
	// the default they name it (they would also find it in the state file,
	// unless AGENTQ_NATS_URL is set to something else in that terminal).
	prefix := ""
	if cfg.NATSURL != defaultOf("AGENTQ_NATS_URL") {
		prefix = "AGENTQ_NATS_URL=" + cfg.NATSURL + " "
	}
	prefix += runningCommand()
	fmt.Fprintf(e.Stdout, `agentq dev is running. Ctrl-C stops it.

  NATS       %s   (JetStream, streams AGENTQ and AGENTQ_DLQ)
  database   %s
  data       %s
  consumers  %v
  metrics    %s
  ingest     %s
  state      %s

Try it, in another terminal:
  %s tail quality.changed.demo tool.rated.demo &
  %s publish --tenant demo --type tool.executed --data '{"tool_name":"web_search","success":true,"latency_ms":120,"input":{"query":"weather in Paris"},"output":"Paris: 21°C, sunny"}'
`, cfg.NATSURL, dbWhere, where, names, metricsURL(cfg.MetricsAddr), ingestLine, statePath, prefix, prefix)
	err = app.Run(ctx, d, Consumers...)
	fmt.Fprintln(e.Stdout, "agentq dev stopped.")
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// A consumer stopped by Ctrl-C while it was still starting.
		return nil
	}
	return err
}

// runningCommand is how a person runs the agentq that is running, from
// the working directory (see selfCommand).
func runningCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "agentq"
	}
	wd, _ := os.Getwd()
	onPath, _ := exec.LookPath("agentq")
	if onPath != "" {
		onPath, _ = filepath.Abs(onPath)
	}
	return selfCommand(exe, wd, onPath)
}

// selfCommand is how the banner's examples run the binary at exe:
// bin/agentq after make dev (relative to the working directory wd),
// "agentq" when it is the one on PATH (onPath), go run when go run built
// it in a temporary directory that is gone once it exits, else its path.
func selfCommand(exe, wd, onPath string) string {
	if slices.ContainsFunc(strings.Split(filepath.ToSlash(exe), "/"), func(e string) bool { return strings.HasPrefix(e, "go-build") }) {
		return "go run ./cmd/agentq"
	}
	if exe == onPath {
		return "agentq"
	}
	if rel, err := filepath.Rel(wd, exe); err == nil && wd != "" && !strings.HasPrefix(rel, "..") {
		if !strings.ContainsRune(rel, filepath.Separator) {
			rel = "." + string(filepath.Separator) + rel
		}
		return rel
	}
	return exe
}

func dirIf(ok bool, dir string) string {
	if ok {
		return dir
	}
	return ""
}

// defaultOf is the documented default of an AGENTQ_* variable.
func defaultOf(name string) string {
	for _, v := range config.Vars {
		if v.Name == name {
			return v.Default
		}
	}
	return ""
}

// redact hides the password in a database URL shown on screen.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// serveMetrics serves /metrics and /healthz on ln, as app.ServeMetrics does
// on an address; stop shuts the server down. The listener is bound by the
// caller so that a taken port fails agentq dev before its banner.
func serveMetrics(ln net.Listener, d *app.Deps, log zerolog.Logger) (stop func()) {
	return serveHandler(ln, app.MetricsHandler(d), log)
}

func metricsURL(addr string) string {
	if addr == "" {
		return "off"
	}
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	return "http://" + addr + "/metrics"
}
