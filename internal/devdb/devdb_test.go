package devdb

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
	pgxvec "github.com/pgvector/pgvector-go/pgx"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// testCtx leaves Start its whole DefaultStartTimeout on a busy machine.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultStartTimeout+30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	if opts.Dir == "" {
		opts.Dir = os.Getenv(EnvDir) // as agentq's configuration does; empty: search
	}
	s, err := Start(testCtx(t), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestStartInMemory(t *testing.T) {
	ctx := testCtx(t)
	s := start(t, Options{})
	require.Contains(t, s.URL(), "default_query_exec_mode=exec")
	require.Equal(t, s.URL(), s.PsqlURL()+"&default_query_exec_mode=exec", "the URL for people is the pgx one without pgx's parameter")

	conn, err := pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	var version string
	require.NoError(t, conn.QueryRow(ctx, "select version()").Scan(&version))
	require.Contains(t, version, "PGlite")
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
}

func TestPersistsAcrossRestart(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()

	s := start(t, Options{DataDir: dir})
	conn, err := pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "create table kept (id int primary key, note text)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "insert into kept values ($1, $2)", 1, "survives")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, s.Close())

	s = start(t, Options{DataDir: dir})
	conn, err = pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var note string
	require.NoError(t, conn.QueryRow(ctx, "select note from kept where id = $1", 1).Scan(&note))
	require.Equal(t, "survives", note)
}

func TestPgvectorThroughPool(t *testing.T) {
	ctx := testCtx(t)
	s := start(t, Options{})

	// RegisterTypes needs the extension, so create it before the pool.
	conn, err := pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "create extension if not exists vector")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	cfg, err := pgxpool.ParseConfig(s.URL())
	require.NoError(t, err)
	cfg.MaxConns = 8
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error { return pgxvec.RegisterTypes(ctx, c) }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()

	_, err = pool.Exec(ctx, `create table items (id int primary key, embedding vector(3) not null)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `create index on items using hnsw (embedding vector_cosine_ops)`)
	require.NoError(t, err)

	// Insert from several goroutines, so several pool connections are used.
	vecs := map[int][]float32{1: {1, 0, 0}, 2: {0, 1, 0}, 3: {0, 0, 1}, 4: {1, 1, 0}}
	var wg sync.WaitGroup
	errs := make(chan error, len(vecs))
	for id, v := range vecs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := pool.Exec(ctx, "insert into items values ($1, $2)", id, pgvector.NewVector(v))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "set local hnsw.ef_search = 10")
	require.NoError(t, err)
	rows, err := tx.Query(ctx, "select id, embedding from items order by embedding <=> $1 limit 2",
		pgvector.NewVector([]float32{0.9, 0.1, 0}))
	require.NoError(t, err)
	var ids []int
	for rows.Next() {
		var id int
		var v pgvector.Vector
		require.NoError(t, rows.Scan(&id, &v))
		require.Equal(t, vecs[id], v.Slice())
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int{1, 4}, ids)
}

func TestCloseKillsChild(t *testing.T) {
	s := start(t, Options{})
	addr := fmt.Sprintf("127.0.0.1:%d", s.Port())
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err)
	_ = c.Close()

	pid := s.cmd.Process.Pid
	require.NoError(t, s.Close())

	// Close reaps the child, so the pid no longer names our process.
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH)
	_, err = net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err, "nothing listens after Close")
}

func TestCloseWhileClientsConnected(t *testing.T) {
	ctx := testCtx(t)
	s := start(t, Options{})
	pool, err := pgxpool.New(ctx, s.URL())
	require.NoError(t, err)
	defer pool.Close()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	// The rollback fails on the cut connection but returns it to the pool,
	// which pool.Close waits for.
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "create table t (i int)")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung with an open transaction")
	}
}

func TestMissingNodeModules(t *testing.T) {
	empty := t.TempDir()
	_, err := Start(testCtx(t), Options{Dir: empty})
	require.ErrorIs(t, err, ErrNotInstalled)
	require.Contains(t, err.Error(), "npm ci")
	require.Contains(t, err.Error(), "make deps")
	require.Contains(t, err.Error(), empty)
}

// A child that dies at once (node_modules holds pglite-socket's
// package.json but not PGlite itself, so the launcher's import fails) makes
// Start fail quickly with the child's own words in the error.
func TestChildFailureQuotesItsStderr(t *testing.T) {
	dir := t.TempDir()
	pkg := filepath.Join(dir, socketPackage)
	require.NoError(t, os.MkdirAll(filepath.Dir(pkg), 0o755))
	require.NoError(t, os.WriteFile(pkg, []byte(`{"name":"@electric-sql/pglite-socket","version":"0.0.0"}`), 0o644))

	began := time.Now()
	_, err := Start(testCtx(t), Options{Dir: dir})
	require.Error(t, err)
	require.Less(t, time.Since(began), 20*time.Second, "a dead child is reported at once, not at the start timeout")
	msg := err.Error()
	t.Log(msg)
	require.Contains(t, msg, "pglite server exited during start")
	require.Contains(t, msg, "child stderr:")
	require.Contains(t, msg, "@electric-sql/pglite", "the error quotes node's complaint about the missing package")
	require.Contains(t, msg, "ERR_MODULE_NOT_FOUND")
}

func TestDefaultStartTimeout(t *testing.T) {
	require.Equal(t, 60*time.Second, DefaultStartTimeout)
}

func TestMissingNodeModulesSearch(t *testing.T) {
	// Neither the working directory nor the test binary's directory has
	// node_modules above it, and no override is set.
	t.Setenv(EnvDir, "")
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.NoError(t, os.Chdir(t.TempDir()))
	t.Cleanup(func() { _ = os.Chdir(wd) })

	_, err = findDir("")
	if exe, _ := os.Executable(); err == nil {
		t.Skipf("test binary %s lives under a directory with node_modules", exe)
	}
	require.True(t, errors.Is(err, ErrNotInstalled), "got %v", err)
	require.Contains(t, err.Error(), "npm ci")
	require.Contains(t, err.Error(), EnvDir)
}

// TestChildDiesWithParent SIGKILLs a process that started a server (this
// test binary, re-executed) and expects the node child to go too.
func TestChildDiesWithParent(t *testing.T) {
	if os.Getenv("DEVDB_TEST_PARENT") == "1" {
		s, err := Start(context.Background(), Options{Dir: os.Getenv(EnvDir)})
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("CHILD", s.cmd.Process.Pid)
		select {} // wait to be killed
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	parent := exec.Command(exe, "-test.run=^TestChildDiesWithParent$")
	parent.Env = append(os.Environ(), "DEVDB_TEST_PARENT=1")
	out, err := parent.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })

	var child int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if pid, ok := strings.CutPrefix(sc.Text(), "CHILD "); ok {
			child, err = strconv.Atoi(pid)
			require.NoError(t, err)
			break
		}
		require.False(t, strings.HasPrefix(sc.Text(), "ERR"), sc.Text())
	}
	require.NotZero(t, child, "helper never reported its child")
	require.NoError(t, syscall.Kill(child, 0), "child alive before the parent dies")

	require.NoError(t, parent.Process.Kill())
	_ = parent.Wait()
	require.Eventually(t, func() bool {
		// The child is reparented and reaped by init once dead; a zombie
		// that init has not reaped yet still answers kill 0, so also look
		// at its state.
		if syscall.Kill(child, 0) != nil {
			return true
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		return err != nil || strings.Contains(string(st), ") Z ")
	}, 5*time.Second, 50*time.Millisecond, "node child %d outlived its parent", child)
}

// readsEOF waits for the server to close c (a fail-safe deadline, not a
// timing assertion: a server that keeps the connection open never ends it).
func readsEOF(t *testing.T, c net.Conn, what string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the server closes the connection after %s, as Postgres does", what)
}

// A client that abandons a busy connection (pgx on a cancelled context, a
// pool closed under a running query) sends a CancelRequest on a new
// connection, then Terminate, and reads each until the server closes it.
// The server closes both, as Postgres does, more times than it takes
// connections at once; a Terminate inside a transaction rolls it back,
// and the database goes on serving others.
func TestCancelRequestAndTerminateEndTheirConnections(t *testing.T) {
	ctx := testCtx(t)
	s := start(t, Options{})
	conn, err := pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, "create table kept (id int primary key)")
	require.NoError(t, err)

	for i := range MaxConnections + 1 {
		cancel, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port()))
		require.NoError(t, err)
		req := binary.BigEndian.AppendUint32(nil, 16)
		req = binary.BigEndian.AppendUint32(req, 80877102) // CancelRequest
		req = binary.BigEndian.AppendUint32(req, conn.PgConn().PID())
		req = append(req, conn.PgConn().SecretKey()...)
		_, err = cancel.Write(req)
		require.NoError(t, err)
		readsEOF(t, cancel, fmt.Sprintf("CancelRequest %d", i))
		require.NoError(t, cancel.Close())
	}

	for i := range MaxConnections + 1 {
		gone, err := pgx.Connect(ctx, s.URL())
		require.NoError(t, err)
		_, err = gone.Exec(ctx, "begin")
		require.NoError(t, err)
		_, err = gone.Exec(ctx, "insert into kept values ($1)", i)
		require.NoError(t, err)
		gone.PgConn().Frontend().Send(&pgproto3.Terminate{})
		require.NoError(t, gone.PgConn().Frontend().Flush())
		readsEOF(t, gone.PgConn().Conn(), fmt.Sprintf("Terminate %d", i))
		require.NoError(t, gone.PgConn().Conn().Close())
	}

	// As pgx abandons a connection whose query outlives its context: the
	// cleanup (cancel, Terminate, the server's close) ends, and the
	// transaction is gone.
	busy, err := pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	_, err = busy.Exec(ctx, "begin")
	require.NoError(t, err)
	_, err = busy.Exec(ctx, "insert into kept values (-1)")
	require.NoError(t, err)
	qctx, qcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer qcancel()
	_, err = busy.Exec(qctx, "select pg_sleep(1)")
	require.Error(t, err, "the query outlives its context")
	require.True(t, busy.IsClosed())
	select {
	case <-busy.PgConn().CleanupDone():
	case <-time.After(30 * time.Second): // fail-safe, as readsEOF's
		t.Fatal("the abandoned connection's cleanup did not end: the server kept a connection open")
	}

	var n int
	require.NoError(t, conn.QueryRow(ctx, "select count(*) from kept").Scan(&n))
	require.Zero(t, n, "the terminated sessions' transactions were rolled back")
}
