//go:build research

// The experiments behind the findings in doc.go. Rerun them after upgrading
// PGlite or pglite-socket:
//
//	go test -tags research -run Research -v ./internal/devdb/
package devdb

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxvec "github.com/pgvector/pgvector-go/pgx"
	"github.com/stretchr/testify/require"
)

func researchPool(t *testing.T, url string, conns int) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = int32(conns)
	cfg.MinConns = int32(conns)
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func rss(t *testing.T, pid int) string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "VmRSS") || strings.HasPrefix(l, "VmHWM") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return strings.Join(out, ", ")
}

func TestResearch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("a-startup", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			t0 := time.Now()
			s, err := Start(ctx, Options{})
			require.NoError(t, err)
			t.Logf("in-memory start #%d: %s", i, time.Since(t0))
			require.NoError(t, s.Close())
		}
		dir := t.TempDir()
		for i, what := range []string{"cold", "warm"} {
			t0 := time.Now()
			s, err := Start(ctx, Options{DataDir: dir})
			require.NoError(t, err)
			t.Logf("data dir %s start #%d: %s", what, i, time.Since(t0))
			t0 = time.Now()
			require.NoError(t, s.Close())
			t.Logf("data dir close: %s", time.Since(t0))
		}
	})

	s, err := Start(ctx, Options{})
	require.NoError(t, err)
	defer s.Close()
	base := strings.Replace(s.URL(), "&default_query_exec_mode=exec", "", 1)

	t.Run("h-exec-modes", func(t *testing.T) {
		for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
			p := researchPool(t, base+"&default_query_exec_mode="+mode, 8)
			var errs atomic.Int64
			var first atomic.Value
			var wg sync.WaitGroup
			t0 := time.Now()
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for i := 0; i < 50; i++ {
						var a int
						var b string
						err := p.QueryRow(ctx, "select $1::int + "+strconv.Itoa(g)+", $2::text", i, fmt.Sprint(g, "-", i)).Scan(&a, &b)
						if err == nil && (a != i+g || b != fmt.Sprint(g, "-", i)) {
							err = fmt.Errorf("wrong answer %d %q for g=%d i=%d", a, b, g, i)
						}
						if err != nil {
							errs.Add(1)
							first.CompareAndSwap(nil, err.Error())
						}
					}
				}(g)
			}
			wg.Wait()
			t.Logf("mode %-16s 8x50 concurrent queries: %d errors in %s (first: %v)", mode, errs.Load(), time.Since(t0), first.Load())
			p.Close()
		}
	})

	pool := researchPool(t, s.URL(), 8)

	t.Run("b-transactions", func(t *testing.T) {
		_, err := pool.Exec(ctx, "create table tx_t (id int primary key, v int)")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "insert into tx_t values (1, 0)")
		require.NoError(t, err)
		c1, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c1.Release()
		c2, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c2.Release()
		tx1, err := c1.Begin(ctx)
		require.NoError(t, err)
		_, err = tx1.Exec(ctx, "update tx_t set v = v + 1 where id = 1")
		require.NoError(t, err)
		done := make(chan error, 1)
		t0 := time.Now()
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			tx2, err := c2.Begin(cctx)
			if err != nil {
				done <- fmt.Errorf("begin: %w", err)
				return
			}
			_, err = tx2.Exec(cctx, "update tx_t set v = v + 10 where id = 1")
			if err == nil {
				err = tx2.Commit(cctx)
			}
			done <- err
		}()
		select {
		case err := <-done:
			t.Logf("tx2 finished while tx1 open after %s: %v", time.Since(t0), err)
		case <-time.After(1 * time.Second):
			t.Logf("tx2 still blocked 1s after tx1 opened (serialised)")
		}
		require.NoError(t, tx1.Commit(ctx))
		select {
		case err := <-done:
			t.Logf("tx2 after tx1 commit: %v (total %s)", err, time.Since(t0))
		case <-time.After(5 * time.Second):
			t.Logf("tx2 still blocked 5s after tx1 commit: DEADLOCK")
		}
		var v int
		require.NoError(t, pool.QueryRow(ctx, "select v from tx_t where id=1").Scan(&v))
		t.Logf("final v=%d", v)
		// Non-transaction query from another conn while a tx is open.
		tx3, err := c1.Begin(ctx)
		require.NoError(t, err)
		cctx, cancel := context.WithTimeout(ctx, 1*time.Second)
		var one int
		err = c2.QueryRow(cctx, "select 1").Scan(&one)
		cancel()
		t.Logf("plain query on conn2 while conn1 in tx: %v", err)
		require.NoError(t, tx3.Rollback(ctx))
	})

	t.Run("c-session-state", func(t *testing.T) {
		p := researchPool(t, s.URL(), 2)
		c1, err := p.Acquire(ctx)
		require.NoError(t, err)
		c2, err := p.Acquire(ctx)
		require.NoError(t, err)
		_, err = c1.Exec(ctx, "create schema if not exists leak_s")
		require.NoError(t, err)
		_, err = c1.Exec(ctx, "set search_path = leak_s, public")
		require.NoError(t, err)
		var sp string
		require.NoError(t, c2.QueryRow(ctx, "show search_path").Scan(&sp))
		t.Logf("conn2 search_path after conn1 SET: %q", sp)
		var pid1, pid2 int
		require.NoError(t, c1.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid1))
		require.NoError(t, c2.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid2))
		t.Logf("backend pids: %d %d", pid1, pid2)
		_, err = c1.Exec(ctx, "create temp table tmp_x(i int)")
		require.NoError(t, err)
		_, err = c2.Exec(ctx, "select * from tmp_x")
		t.Logf("conn2 sees conn1 temp table: %v", err == nil)
		_, _ = c1.Exec(ctx, "reset search_path")
		c1.Release()
		c2.Release()
		// New connection after a SET: does startup reset it?
		_, err = pool.Exec(ctx, "set search_path = leak_s")
		require.NoError(t, err)
		c3, err := pgx.Connect(ctx, s.URL())
		require.NoError(t, err)
		require.NoError(t, c3.QueryRow(ctx, "show search_path").Scan(&sp))
		t.Logf("fresh connection search_path after SET on another: %q", sp)
		_ = c3.Close(ctx)
		_, _ = pool.Exec(ctx, "reset search_path")
	})

	t.Run("d-advisory-locks", func(t *testing.T) {
		p := researchPool(t, s.URL(), 2)
		c1, err := p.Acquire(ctx)
		require.NoError(t, err)
		defer c1.Release()
		c2, err := p.Acquire(ctx)
		require.NoError(t, err)
		defer c2.Release()
		var ok bool
		require.NoError(t, c1.QueryRow(ctx, "select pg_try_advisory_lock(42)").Scan(&ok))
		t.Logf("conn1 try_lock: %v", ok)
		require.NoError(t, c2.QueryRow(ctx, "select pg_try_advisory_lock(42)").Scan(&ok))
		t.Logf("conn2 try_lock while conn1 holds: %v", ok)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = c2.Exec(cctx, "select pg_advisory_lock(42)")
		cancel()
		t.Logf("conn2 pg_advisory_lock while conn1 holds: %v", err)
		var n int
		_ = pool.QueryRow(ctx, "select count(*) from pg_locks where locktype='advisory'").Scan(&n)
		t.Logf("advisory locks held: %d", n)
		_, _ = c1.Exec(ctx, "select pg_advisory_unlock_all()")
		// Transaction-level lock.
		tx, err := c1.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, tx.QueryRow(ctx, "select pg_try_advisory_xact_lock(7)").Scan(&ok))
		t.Logf("conn1 xact lock: %v", ok)
		cctx, cancel = context.WithTimeout(ctx, 1*time.Second)
		err = c2.QueryRow(cctx, "select pg_try_advisory_xact_lock(7)").Scan(&ok)
		cancel()
		t.Logf("conn2 try_xact_lock while conn1 tx open: ok=%v err=%v", ok, err)
		_ = tx.Rollback(ctx)
	})

	t.Run("e-pgvector", func(t *testing.T) {
		_, err := pool.Exec(ctx, "create extension if not exists vector")
		require.NoError(t, err)
		var ver string
		require.NoError(t, pool.QueryRow(ctx, "select extversion from pg_extension where extname='vector'").Scan(&ver))
		var pgver string
		require.NoError(t, pool.QueryRow(ctx, "select version()").Scan(&pgver))
		t.Logf("pgvector %s on %s", ver, pgver)
		cfg, err := pgxpool.ParseConfig(s.URL())
		require.NoError(t, err)
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error { return pgxvec.RegisterTypes(ctx, c) }
		vp, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer vp.Close()
		_, err = vp.Exec(ctx, "create table items (id bigserial primary key, embedding vector(3))")
		require.NoError(t, err)
		_, err = vp.Exec(ctx, "create index on items using hnsw (embedding vector_cosine_ops)")
		require.NoError(t, err)
		t.Log("hnsw index created")
	})

	t.Run("f-create-database-schema", func(t *testing.T) {
		_, err := pool.Exec(ctx, "create schema s1")
		t.Logf("create schema: %v", err)
		_, err = pool.Exec(ctx, "create database other")
		t.Logf("create database: %v", err)
		if err == nil {
			c, err := pgx.Connect(ctx, strings.Replace(s.URL(), "/postgres?", "/other?", 1))
			if err == nil {
				var db string
				err = c.QueryRow(ctx, "select current_database()").Scan(&db)
				t.Logf("connect to 'other': current_database=%q err=%v", db, err)
				_ = c.Close(ctx)
			} else {
				t.Logf("connect to other: %v", err)
			}
		}
	})

	t.Run("g-abrupt-close", func(t *testing.T) {
		p := researchPool(t, s.URL(), 2)
		c, err := p.Acquire(ctx)
		require.NoError(t, err)
		tx, err := c.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "create table abrupt (i int)")
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "insert into abrupt values (1)")
		require.NoError(t, err)
		// Kill the TCP connection under the transaction.
		_ = c.Conn().PgConn().Conn().Close()
		c.Release()
		p.Close()
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var n int
		err = pool.QueryRow(cctx, "select count(*) from pg_tables where tablename='abrupt'").Scan(&n)
		t.Logf("after abrupt close: next query err=%v tables=%d in %s", err, n, time.Since(t0))
		// Abrupt close mid-query stream: a long query then close.
		c2, err := pgx.Connect(ctx, s.URL())
		require.NoError(t, err)
		go func() { _, _ = c2.Exec(ctx, "select pg_sleep(1)") }()
		time.Sleep(100 * time.Millisecond)
		_ = c2.PgConn().Conn().Close()
		t0 = time.Now()
		cctx2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
		defer cancel2()
		err = pool.QueryRow(cctx2, "select 1").Scan(&n)
		t.Logf("after close mid-query: err=%v in %s", err, time.Since(t0))
		// Connection that dies mid extended-protocol message (Parse sent, no Sync).
	})

	t.Run("i-max-connections", func(t *testing.T) {
		var conns []*pgx.Conn
		var err error
		for i := 0; i < MaxConnections+2; i++ {
			var c *pgx.Conn
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			c, err = pgx.Connect(cctx, s.URL())
			cancel()
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		t.Logf("opened %d connections (pool 'pool' holds some too), then: %v", len(conns), err)
		for _, c := range conns {
			_ = c.Close(ctx)
		}
	})

	t.Run("j-memory", func(t *testing.T) {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
		require.NoError(t, err)
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(l, "VmRSS") || strings.HasPrefix(l, "VmHWM") {
				t.Log(l)
			}
		}
	})
}
