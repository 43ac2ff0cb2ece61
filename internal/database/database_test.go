package database_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/migrations"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	dbURL := testenv.FreshDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Four copies released together, as N binaries starting at once.
	const copies = 4
	start := make(chan struct{})
	errs := make([]error, copies)
	var wg sync.WaitGroup
	for i := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = database.Migrate(ctx, dbURL, zerolog.Nop())
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "copy %d", i)
	}

	pool, err := database.Open(ctx, dbURL) // also proves the vector types register now
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	for _, table := range []string{"inbox", "outbox", "quality_metrics"} {
		var exists bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('public.'||$1) IS NOT NULL`, table).Scan(&exists))
		require.True(t, exists, "table %s", table)
	}
	var ext int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_extension WHERE extname = 'vector'`).Scan(&ext))
	require.Equal(t, 1, ext)

	// Every embedded migration is recorded. (On PGlite the advisory lock
	// does not exclude, so two copies may both apply and record one: the
	// migrations are idempotent, which is what makes that harmless.)
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT DISTINCT version_id FROM goose_db_version WHERE version_id > 0`)
	require.NoError(t, err)
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, applied, len(files))

	// A fifth run finds nothing to apply: it logs no "migration applied"
	// line and records no version.
	versions := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM goose_db_version`).Scan(&n))
		return n
	}
	before := versions()
	var logged bytes.Buffer
	require.NoError(t, database.Migrate(ctx, dbURL, zerolog.New(&logged)))
	require.Empty(t, logged.String())
	require.Equal(t, before, versions())
}

func TestOpenRegistersVectorTypes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := testenv.Pool(t)

	// The type map of a pooled connection knows vector: scanning does not
	// depend on falling back to text.
	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, ok := c.Conn().TypeMap().TypeForName("vector")
	c.Release()
	require.True(t, ok, "vector type not registered")

	in := pgvector.NewVector([]float32{1, -2.5, 3.25, 0})
	var out pgvector.Vector
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::vector`, in).Scan(&out))
	require.Equal(t, in.Slice(), out.Slice())
}

func TestClaim(t *testing.T) {
	// A key names its tenant by index, so each case gets fresh tenants.
	type key struct {
		tenant int
		event  string
		seq    uint64
	}
	type step struct {
		keys   []key
		commit bool // else roll back
		want   []bool
		moved  []uint64 // nil: none
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"new keys are claimed", []step{
			{keys: []key{{0, "e1", 0}, {0, "e2", 0}}, commit: true, want: []bool{true, true}},
		}},
		{"committed keys are duplicates in a later transaction", []step{
			{keys: []key{{0, "e1", 0}, {0, "e2", 0}}, commit: true, want: []bool{true, true}},
			{keys: []key{{0, "e2", 0}, {0, "e1", 0}, {0, "e3", 0}}, commit: true, want: []bool{false, false, true}},
		}},
		{"a repeat within one call is a duplicate", []step{
			{keys: []key{{0, "e1", 0}, {0, "e1", 0}, {0, "e2", 0}, {0, "e1", 0}}, commit: true, want: []bool{true, false, true, false}},
		}},
		{"the same event id under two tenants is new for each", []step{
			{keys: []key{{0, "e1", 0}, {1, "e1", 0}}, commit: true, want: []bool{true, true}},
			{keys: []key{{1, "e1", 0}, {0, "e1", 0}}, commit: true, want: []bool{false, false}},
		}},
		{"a rolled-back claim is not recorded", []step{
			{keys: []key{{0, "e1", 0}}, commit: false, want: []bool{true}},
			{keys: []key{{0, "e1", 0}}, commit: true, want: []bool{true}},
			{keys: []key{{0, "e1", 0}}, commit: true, want: []bool{false}},
		}},
		{"an earlier copy moves the claim to its sequence; later copies are duplicates", []step{
			{keys: []key{{0, "e1", 10}, {0, "e2", 11}}, commit: true, want: []bool{true, true}},
			{keys: []key{{0, "e1", 4}, {0, "e2", 12}}, commit: true, want: []bool{false, false}, moved: []uint64{10, 0}},
			{keys: []key{{0, "e1", 4}}, commit: true, want: []bool{false}},
			{keys: []key{{0, "e1", 7}}, commit: true, want: []bool{false}},
			{keys: []key{{0, "e1", 10}}, commit: true, want: []bool{false}},
			{keys: []key{{0, "e1", 2}}, commit: true, want: []bool{false}, moved: []uint64{4}},
		}},
		{"a rolled-back move is not recorded", []step{
			{keys: []key{{0, "e1", 10}}, commit: true, want: []bool{true}},
			{keys: []key{{0, "e1", 4}}, commit: false, want: []bool{false}, moved: []uint64{10}},
			{keys: []key{{0, "e1", 6}}, commit: true, want: []bool{false}, moved: []uint64{10}},
		}},
		{"of copies in one call the earliest is new, whatever their order", []step{
			{keys: []key{{0, "e1", 9}, {0, "e1", 3}, {0, "e2", 5}, {0, "e1", 6}}, commit: true, want: []bool{false, true, true, false}},
			{keys: []key{{0, "e1", 2}, {0, "e1", 1}}, commit: true, want: []bool{false, false}, moved: []uint64{0, 3}},
		}},
		{"an event claimed without a sequence never moves", []step{
			{keys: []key{{0, "e1", 0}}, commit: true, want: []bool{true}},
			{keys: []key{{0, "e1", 3}}, commit: true, want: []bool{false}},
			{keys: []key{{0, "e2", 3}}, commit: true, want: []bool{true}},
			{keys: []key{{0, "e2", 0}}, commit: true, want: []bool{false}},
		}},
		{"copies under two tenants are apart", []step{
			{keys: []key{{0, "e1", 8}, {1, "e1", 9}}, commit: true, want: []bool{true, true}},
			{keys: []key{{1, "e1", 5}, {0, "e1", 8}}, commit: true, want: []bool{false, false}, moved: []uint64{9, 0}},
		}},
	}
	pool := testenv.Pool(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tenants := []string{testenv.Tenant(t), testenv.Tenant(t)}
			for i, s := range tc.steps {
				keys := make([]database.InboxKey, len(s.keys))
				for j, k := range s.keys {
					keys[j] = database.InboxKey{Tenant: tenants[k.tenant], EventID: k.event, Seq: k.seq}
				}
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				got, err := database.Claim(ctx, tx, "claim-test", keys)
				if err != nil || !s.commit {
					_ = tx.Rollback(ctx) // never leave a transaction open: PGlite would block every other connection
				} else {
					require.NoError(t, tx.Commit(ctx))
				}
				require.NoError(t, err, "step %d", i)
				require.Equal(t, s.want, got.Fresh, "step %d", i)
				moved := s.moved
				if moved == nil {
					moved = make([]uint64, len(s.keys))
				}
				require.Equal(t, moved, got.Moved, "step %d", i)
				require.False(t, got.Withheld(tenants[0]), "no rebuild in progress")
			}
		})
	}
}

// Two copies earlier than the applied one, claimed at once: the second
// waits for the first's move and sees where it left the event, so the
// effect moves once per copy, each time from where it really was.
func TestClaimConcurrentMoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := testenv.Pool(t)
	tenant := testenv.Tenant(t)
	const consumer = "move-test"
	claim := func(seq uint64) (*database.Unit, database.Claimed) {
		u, c, err := database.BeginClaim(ctx, pool, consumer, []database.InboxKey{{Tenant: tenant, EventID: "e1", Seq: seq}})
		require.NoError(t, err)
		return u, c
	}
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("first commits: %v", commit), func(t *testing.T) {
			_, err := pool.Exec(ctx, `DELETE FROM inbox WHERE consumer = $1 AND tenant_id = $2`, consumer, tenant)
			require.NoError(t, err)
			u, c := claim(10)
			require.Equal(t, []bool{true}, c.Fresh)
			require.NoError(t, u.Commit(ctx, &pgx.Batch{}))
			u.Close(ctx)

			first, c := claim(6)
			require.Equal(t, []uint64{10}, c.Moved)
			type outcome struct {
				c   database.Claimed
				err error
			}
			second := make(chan outcome, 1)
			go func() {
				u, c, err := database.BeginClaim(ctx, pool, consumer, []database.InboxKey{{Tenant: tenant, EventID: "e1", Seq: 3}})
				if err == nil {
					err = u.Commit(ctx, &pgx.Batch{})
					u.Close(ctx)
				}
				second <- outcome{c, err}
			}()
			select {
			case o := <-second:
				t.Fatalf("the second claim did not wait for the first: %+v", o)
			case <-time.After(300 * time.Millisecond): // it must still be waiting
			}
			if commit {
				require.NoError(t, first.Commit(ctx, &pgx.Batch{}))
			}
			first.Close(ctx)
			want := uint64(10)
			if commit {
				want = 6
			}
			o := <-second
			require.NoError(t, o.err)
			c = o.c
			require.Equal(t, []bool{false}, c.Fresh)
			require.Equal(t, []uint64{want}, c.Moved)
		})
	}
}

// A rebuild in progress withholds its tenant's results, and a rebuild of
// every tenant withholds all of them; others are not affected.
func TestClaimReportsRebuilds(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	consumer := "rebuild-" + testenv.Tenant(t)
	a, b := testenv.Tenant(t), testenv.Tenant(t)
	require.NoError(t, database.EnsureFence(ctx, pool, consumer))
	claim := func() database.Claimed {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		c, err := database.Claim(ctx, tx, consumer, []database.InboxKey{{Tenant: a, EventID: "e1"}, {Tenant: b, EventID: "e1"}})
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, c.Fresh, "same id, two tenants: both new")
		return c
	}
	c := claim()
	require.False(t, c.Withheld(a))
	require.False(t, c.Withheld(b))
	_, err := pool.Exec(ctx, `INSERT INTO rebuilds (consumer, tenant_id, horizon) VALUES ($1, $2, 10)`, consumer, a)
	require.NoError(t, err)
	c = claim()
	require.True(t, c.Withheld(a))
	require.False(t, c.Withheld(b))
	_, err = pool.Exec(ctx, `INSERT INTO rebuilds (consumer, tenant_id, horizon) VALUES ($1, '*', 10)`, consumer)
	require.NoError(t, err)
	c = claim()
	require.True(t, c.Withheld(b))
	_, err = pool.Exec(ctx, `DELETE FROM rebuilds WHERE consumer = $1`, consumer)
	require.NoError(t, err)
}

func TestClassify(t *testing.T) {
	pgErr := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "m"} }
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name        string
		err         error
		unavailable bool
		permanent   bool
	}{
		{"connection failure 08006", pgErr("08006"), true, false},
		{"admin shutdown 57P01", pgErr("57P01"), true, false},
		{"too many connections 53300", pgErr("53300"), true, false},
		{"unique violation 23505 is transient: a concurrent insert, seen on retry", pgErr("23505"), false, false},
		{"foreign key violation 23503", pgErr("23503"), false, true},
		{"invalid text representation 22P02", pgErr("22P02"), false, true},
		{"NUL byte 22021", fmt.Errorf("inbox claim: %w", pgErr("22021")), false, true},
		{"wrapped unique violation", fmt.Errorf("inbox claim: %w", pgErr("23505")), false, false},
		{"serialization failure 40001 is transient", pgErr("40001"), false, false},
		{"deadlock 40P01 is transient", pgErr("40P01"), false, false},
		{"net.OpError", opErr, true, false},
		{"unexpected EOF", io.ErrUnexpectedEOF, true, false},
		{"already permanent", bus.Permanent(errors.New("bad tool name")), false, true},
		{"plain error is transient", errors.New("llm timeout"), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := database.Classify(tc.err)
			require.ErrorIs(t, got, tc.err, "the cause stays reachable")
			require.Equal(t, tc.unavailable, bus.IsUnavailable(got), "unavailable")
			require.Equal(t, tc.permanent, bus.IsPermanent(got), "permanent")
		})
	}
	t.Run("nil", func(t *testing.T) {
		require.NoError(t, database.Classify(nil))
	})
}

// TestClassifyUnreachableDatabase points at a loopback port nobody listens
// on, as when the database is down.
func TestClassifyUnreachableDatabase(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	dbURL := "postgres://postgres:postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=5"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("Open", func(t *testing.T) {
		// Open pings, so a process starting during an outage sees it here.
		_, err := database.Open(ctx, dbURL)
		require.Error(t, err)
		require.True(t, bus.IsUnavailable(database.Classify(err)), "%v", err)
	})
	t.Run("query", func(t *testing.T) {
		// A pool that connects lazily, as one whose database went away.
		pool, err := pgxpool.New(ctx, dbURL)
		require.NoError(t, err)
		defer pool.Close()
		var one int
		err = pool.QueryRow(ctx, `SELECT 1`).Scan(&one)
		require.Error(t, err)
		require.True(t, bus.IsUnavailable(database.Classify(err)), "%v", err)
	})
}

// PruneInbox forgets only event ids older than the retention.
func TestPruneInbox(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	tenant := testenv.Tenant(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = database.Claim(ctx, tx, "prune-test", []database.InboxKey{{Tenant: tenant, EventID: "old-1"}, {Tenant: tenant, EventID: "old-2"}, {Tenant: tenant, EventID: "new-1"}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	// Other tests' rows are fresh; only ours are made two days old.
	_, err = pool.Exec(ctx, `UPDATE inbox SET processed_at = now() - interval '48 hours' WHERE tenant_id = $1 AND event_id LIKE 'old-%'`, tenant)
	require.NoError(t, err)

	n, err := database.PruneInbox(ctx, pool, 24*time.Hour)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(2))
	left := testenv.Strings(t, pool, `SELECT event_id FROM inbox WHERE tenant_id = $1 ORDER BY event_id`, tenant)
	require.Equal(t, []string{"new-1"}, left)
}
