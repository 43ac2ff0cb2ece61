package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/devdb"
)

// FreshDatabase returns the URL of an empty database no other test uses,
// not migrated: a new in-memory PGlite server (CREATE DATABASE is useless
// there), or a uniquely named database on the server at AGENTQ_DATABASE_URL.
// It is removed at cleanup.
func FreshDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := os.Getenv("AGENTQ_DATABASE_URL")
	if base == "" {
		startTimeout, _ := time.ParseDuration(os.Getenv("AGENTQ_DEVDB_START_TIMEOUT")) // unset or bad: devdb's default, 60s
		srv, err := devdb.Start(ctx, devdb.Options{Dir: os.Getenv(devdb.EnvDir), StartTimeout: startTimeout})
		if err != nil {
			t.Fatalf("fresh database: %v", err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		return srv.URL()
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "agentq_test_" + hex.EncodeToString(b)
	// A plain pool: the server's default database need not have pgvector.
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatalf("fresh database: %v", err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("fresh database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close()
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return withDatabase(t, base, name)
}

// ownDatabase creates a database for this test binary on the server at
// base and returns its URL and the function that drops it. Databases that
// binaries killed before they could drop theirs left behind are dropped
// here once they are older than any test run (the name carries the time).
func ownDatabase(ctx context.Context, base string) (string, func(), error) {
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("own test database: %w", err)
	}
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'agentq_tb_%'")
	if err == nil {
		names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, n := range names {
			var ts int64
			if _, err := fmt.Sscanf(n, "agentq_tb_%d_", &ts); err == nil && time.Since(time.Unix(ts, 0)) > 3*time.Hour {
				_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)")
			}
		}
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := fmt.Sprintf("agentq_tb_%d_%s", time.Now().Unix(), hex.EncodeToString(b))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("own test database: %w", err)
	}
	url, err := replaceDatabase(base, name)
	if err != nil {
		admin.Close()
		return "", nil, err
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close()
	}
	return url, drop, nil
}

// withDatabase returns the connection string base with its database
// replaced by name, for both the URL and the keyword/value forms.
func withDatabase(t testing.TB, base, name string) string {
	t.Helper()
	u, err := replaceDatabase(base, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func replaceDatabase(base, name string) (string, error) {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			return "", fmt.Errorf("parse database url: %w", err)
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return base + " dbname=" + name, nil // a later keyword overrides an earlier one
}

// DeadLetters reads every message in AGENTQ_DLQ.
func DeadLetters(t testing.TB, js jetstream.JetStream) []bus.DeadLetter {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, bus.DLQName)
	if err != nil {
		t.Fatalf("dlq stream: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("dlq info: %v", err)
	}
	var out []bus.DeadLetter
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("dlq message %d: %v", seq, err)
		}
		out = append(out, bus.ParseDeadLetter(m.Header, m.Data))
	}
	return out
}
