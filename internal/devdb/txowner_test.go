package devdb

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// A connection that goes away (closed, or its process killed) while
// another's transaction is under way must leave that transaction alone:
// the server once took the connection that had last been served for the
// owner of the open transaction and rolled back another's, whose later
// statements then ran outside any transaction, each committed on its own.
// Connections here open and close while others run transactions; every
// transaction must keep one transaction id from its first statement to
// its commit, and what it committed must all be there.
func TestClosedConnectionsLeaveOthersTransactionsAlone(t *testing.T) {
	ctx := testCtx(t)
	s := start(t, Options{})
	pool, err := pgxpool.New(ctx, s.URL())
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE TABLE claims (id text PRIMARY KEY, n int NOT NULL)`)
	require.NoError(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var committed, broken atomic.Int64
	var firstBroken atomic.Value
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("%d-%d", w, i)
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var x1, x2 int64
					if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&x1); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, `INSERT INTO claims VALUES ($1, 1)`, id); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, `UPDATE claims SET n = 2 WHERE id = $1`, id); err != nil {
						return err
					}
					if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&x2); err != nil {
						return err
					}
					if x1 != x2 {
						broken.Add(1)
						firstBroken.CompareAndSwap(nil, fmt.Sprintf("transaction %s began as %d and ended as %d", id, x1, x2))
					}
					return nil
				})
				if err != nil {
					broken.Add(1)
					firstBroken.CompareAndSwap(nil, fmt.Sprintf("transaction %s: %v", id, err))
					continue
				}
				committed.Add(1)
			}
		}()
	}
	// Connections that come and go, each the last one served just before
	// it leaves: every other one closes properly; the others are cut off
	// (as a killed process's are) in a transaction of their own, which
	// must be rolled back.
	closes := 0
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) || closes < 100 {
		c, err := pgx.Connect(ctx, s.URL())
		require.NoError(t, err)
		if closes%2 == 0 {
			_, err = c.Exec(ctx, `SELECT 1`)
			require.NoError(t, err)
			require.NoError(t, c.Close(ctx))
		} else {
			tx, err := c.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `INSERT INTO claims VALUES ($1, 0)`, fmt.Sprintf("gone-%d", closes))
			require.NoError(t, err)
			require.NoError(t, c.PgConn().Conn().Close())
		}
		closes++
		if closes >= 1000 {
			break
		}
	}
	close(stop)
	wg.Wait()

	var rows, partial int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE n <> 2) FROM claims`).Scan(&rows, &partial))
	// The cut-off connections' transactions were rolled back, and the
	// backend serves everyone (a transaction left open would hold it).
	t.Logf("%d connections closed; %d transactions committed, %d broken", closes, committed.Load(), broken.Load())
	require.Zero(t, broken.Load(), "first: %v", firstBroken.Load())
	require.Equal(t, int(committed.Load()), rows)
	require.Zero(t, partial)
}
