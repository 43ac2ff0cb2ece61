//go:build research

package devdb

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// rawStartup opens a wire-protocol connection and completes the startup.
func rawStartup(t *testing.T, port int) (net.Conn, *pgproto3.Frontend) {
	t.Helper()
	nc, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	fe := pgproto3.NewFrontend(nc, nc)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "postgres", "database": "postgres"}})
	require.NoError(t, fe.Flush())
	for {
		m, err := fe.Receive()
		require.NoError(t, err)
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			return nc, fe
		}
	}
}

func TestResearch2(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{})
	require.NoError(t, err)
	defer s.Close()
	base := strings.Replace(s.URL(), "&default_query_exec_mode=exec", "", 1)

	t.Run("same-sql-and-big-params", func(t *testing.T) {
		big := strings.Repeat("x", 300_000)
		for _, mode := range []string{"cache_statement", "exec", "simple_protocol"} {
			for _, size := range []string{"small", "big"} {
				p := researchPool(t, base+"&default_query_exec_mode="+mode, 8)
				var errs atomic.Int64
				var first atomic.Value
				var wg sync.WaitGroup
				t0 := time.Now()
				for g := 0; g < 8; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						for i := 0; i < 30; i++ {
							want := fmt.Sprint(g, "-", i)
							if size == "big" {
								want += big
							}
							var got string
							var n int
							err := p.QueryRow(ctx, "select $1::text, $2::int", want, g*1000+i).Scan(&got, &n)
							if err == nil && (got != want || n != g*1000+i) {
								err = fmt.Errorf("wrong answer for g=%d i=%d: n=%d len=%d", g, i, n, len(got))
							}
							if err != nil {
								errs.Add(1)
								first.CompareAndSwap(nil, err.Error())
							}
						}
					}(g)
				}
				wg.Wait()
				t.Logf("mode %-16s %-5s 8x30 same-SQL queries: %d errors in %s (first: %.200v)", mode, size, errs.Load(), time.Since(t0), first.Load())
				p.Close()
			}
		}
	})

	t.Run("startup-search-path", func(t *testing.T) {
		c0, err := pgx.Connect(ctx, s.URL())
		require.NoError(t, err)
		_, err = c0.Exec(ctx, "create schema if not exists sp1")
		require.NoError(t, err)
		c, err := pgx.Connect(ctx, s.URL()+"&search_path=sp1")
		require.NoError(t, err)
		var a, b string
		require.NoError(t, c.QueryRow(ctx, "show search_path").Scan(&a))
		require.NoError(t, c0.QueryRow(ctx, "show search_path").Scan(&b))
		t.Logf("startup param search_path=sp1: own=%q other=%q", a, b)
		_ = c.Close(ctx)
		_ = c0.Close(ctx)
	})

	t.Run("partial-extended-protocol", func(t *testing.T) {
		// Parse (bad SQL) and Bind sent, no Sync, then the socket dies.
		nc, fe := rawStartup(t, s.Port())
		fe.Send(&pgproto3.Parse{Query: "select * from no_such_table"})
		fe.Send(&pgproto3.Bind{})
		require.NoError(t, fe.Flush())
		time.Sleep(200 * time.Millisecond)
		_ = nc.Close()
		time.Sleep(200 * time.Millisecond)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		c, err := pgx.Connect(cctx, s.URL())
		if err != nil {
			t.Logf("connect after partial+error: %v", err)
			return
		}
		var n int
		err = c.QueryRow(cctx, "select 7").Scan(&n)
		t.Logf("after dead client left an errored extended-protocol batch unsynced: n=%d err=%v", n, err)
		err = c.QueryRow(cctx, "select 8").Scan(&n)
		t.Logf("second query: n=%d err=%v", n, err)
		_ = c.Close(ctx)

		// Parse good SQL, no Sync, die.
		nc, fe = rawStartup(t, s.Port())
		fe.Send(&pgproto3.Parse{Query: "select 1"})
		require.NoError(t, fe.Flush())
		time.Sleep(200 * time.Millisecond)
		_ = nc.Close()
		time.Sleep(200 * time.Millisecond)
		c, err = pgx.Connect(cctx, s.URL())
		require.NoError(t, err)
		err = c.QueryRow(cctx, "select 9").Scan(&n)
		t.Logf("after dead client left a good unsynced Parse: n=%d err=%v", n, err)
		_ = c.Close(ctx)
	})

	t.Run("idle-in-transaction-client-hangs", func(t *testing.T) {
		c1, err := pgx.Connect(ctx, s.URL())
		require.NoError(t, err)
		_, err = c1.Exec(ctx, "begin")
		require.NoError(t, err)
		cctx0, cancel0 := context.WithTimeout(ctx, 3*time.Second)
		defer cancel0()
		c2, err := pgx.Connect(cctx0, s.URL())
		t.Logf("connect while another conn idles in tx: err=%v", err)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			var n int
			err = c2.QueryRow(cctx, "select 1").Scan(&n)
			cancel()
			t.Logf("query while another conn idles in tx: %v", err)
			_ = c2.Close(ctx)
		}
		_, _ = c1.Exec(ctx, "rollback")
		_ = c1.Close(ctx)
	})

	t.Run("memory-idle", func(t *testing.T) {
		s2, err := Start(ctx, Options{})
		require.NoError(t, err)
		defer s2.Close()
		t.Log(rss(t, s2.cmd.Process.Pid))
	})
}
