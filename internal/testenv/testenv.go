// Package testenv gives tests the real parts agentq runs on: an embedded
// NATS server with JetStream per test, and one Postgres with pgvector per
// test binary — a database of its own on the server at AGENTQ_DATABASE_URL
// when it is set, else the PGlite dev database — migrated once. Tests isolate their data by tenant
// (Tenant gives each test its own), since every table is keyed by tenant.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/devdb"
)

// NATS is an embedded server with the agentq streams, and a client on it.
type NATS struct {
	Server *broker.Server
	URL    string
	NC     *nats.Conn
	JS     jetstream.JetStream
}

// StartNATS starts an embedded NATS server on a free port with its store in
// a temporary directory, ensures the streams, and stops it all at cleanup.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	return StartNATSIn(t, t.TempDir())
}

// StartNATSIn is StartNATS with the store in dir, so a test can restart a
// server on the same data.
func StartNATSIn(t testing.TB, dir string) *NATS {
	t.Helper()
	srv, err := broker.Start(broker.Options{Port: -1, StoreDir: dir, Log: zerolog.Nop()})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, bus.StreamOptions{}); err != nil {
		t.Fatalf("ensure streams: %v", err)
	}
	return &NATS{Server: srv, URL: srv.ClientURL(), NC: nc, JS: js}
}

var (
	dbOnce  sync.Once
	dbURL   string
	dbErr   error
	dbSrv   *devdb.Server
	dbOwned func() // drops the test binary's own database on a shared server
)

// envOwnDB marks a process whose AGENTQ_DATABASE_URL already names its
// test binary's own database: a child process (StartChild, a consumer's
// binary) shares its parent's rather than making another.
const envOwnDB = "AGENTQ_TEST_OWN_DATABASE"

// DatabaseURL returns the URL of the test database, migrated. The dev
// database is started once per test binary; Main stops it.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	url, err := Database()
	if err != nil {
		t.Fatalf("test database: %v", err)
	}
	return url
}

// Database is DatabaseURL for code without a testing.TB (a TestMain that
// starts what all its tests share; it calls Shutdown at the end).
func Database() (string, error) {
	dbOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		dbURL = os.Getenv("AGENTQ_DATABASE_URL")
		if dbURL != "" && os.Getenv(envOwnDB) == "" {
			// Test binaries run in parallel (go test -p) and consumers
			// act on every tenant's rows (outbox relays, job workers,
			// folds): on one shared database one binary's consumers
			// would take another's work. Each gets a database of its own.
			dbURL, dbOwned, dbErr = ownDatabase(ctx, dbURL)
			if dbErr != nil {
				return
			}
			os.Setenv("AGENTQ_DATABASE_URL", dbURL)
			os.Setenv(envOwnDB, "1")
		}
		if dbURL == "" {
			log := zerolog.Nop()
			if os.Getenv("AGENTQ_TEST_DEVDB_LOG") != "" { // debugging aid: the PGlite server's own log
				log = zerolog.New(os.Stderr).Level(zerolog.DebugLevel).With().Timestamp().Logger()
			}
			startTimeout, _ := time.ParseDuration(os.Getenv("AGENTQ_DEVDB_START_TIMEOUT")) // unset or bad: devdb's default, 60s
			dbSrv, dbErr = devdb.Start(ctx, devdb.Options{Dir: os.Getenv(devdb.EnvDir), Log: log, StartTimeout: startTimeout})
			if dbErr != nil {
				return
			}
			dbURL = dbSrv.URL()
		}
		dbErr = database.Migrate(ctx, dbURL, zerolog.Nop())
	})
	return dbURL, dbErr
}

// Pool opens a pool on the test database, closed at cleanup.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := database.Open(ctx, DatabaseURL(t))
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Main runs a package's tests and stops the dev database afterwards. Call
// it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Shutdown()
	os.Exit(code)
}

// Shutdown stops the dev database, if this binary started one. Main
// calls it; a TestMain that does not use Main calls it last.
func Shutdown() {
	if dbSrv != nil {
		_ = dbSrv.Close()
	}
	if dbOwned != nil {
		dbOwned()
	}
}

// Tenant returns a tenant id no other test uses.
func Tenant(t testing.TB) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// Config returns a configuration for an in-process agentq against nc's
// server and the test database, with fast retries.
func Config(t testing.TB, natsURL string) config.Config {
	t.Helper()
	cfg, err := config.Load(func(k string) string {
		switch k {
		case "AGENTQ_NATS_URL":
			return natsURL
		case "AGENTQ_DATABASE_URL":
			return DatabaseURL(t)
		}
		return ""
	})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	cfg.MetricsAddr = "" // an empty variable means the default; tests serve no metrics
	// Tests rank by words, the same on every machine and cheap to reason
	// about; tests that want the sentence encoder ask for it
	// (internal/embed and internal/embed/uselite test it).
	cfg.EmbedTools = "lexical"
	return cfg
}

// Logger writes to the test log when -v is on, at warn level.
func Logger(t testing.TB) zerolog.Logger {
	if !testing.Verbose() {
		return zerolog.Nop()
	}
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).With().Timestamp().Logger()
}

// Eventually polls cond every 50 ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, fmt.Sprintf(format, args...))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Strings returns the first column of the rows query selects, in their
// order: what a test compares with the list it expects. It fails the test
// on any error.
func Strings(t testing.TB, pool *pgxpool.Pool, query string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("query %q: %v", query, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read %q: %v", query, err)
	}
	return got
}
