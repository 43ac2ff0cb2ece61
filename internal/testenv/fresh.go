package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

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

// withDatabase returns the connection string base with its database
// replaced by name, for both the URL and the keyword/value forms.
func withDatabase(t testing.TB, base, name string) string {
	t.Helper()
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatalf("parse database url: %v", err)
		}
		u.Path = "/" + name
		return u.String()
	}
	return base + " dbname=" + name // a later keyword overrides an earlier one
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
