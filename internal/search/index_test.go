package search_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
)

// named is the lexical embedder under another model name, so a test gets
// indexes of its own.
type named struct {
	embed.Lexical
	model string
}

func (n named) Model() string { return n.model }

// TestEnsureIndexesConcurrently: copies starting together on a database
// without their model's indexes all succeed, and the indexes exist once.
// Without the advisory lock, concurrent CREATE INDEX IF NOT EXISTS fails
// on native Postgres with a unique violation on pg_class.
func TestEnsureIndexesConcurrently(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	e := named{model: fmt.Sprintf("test-concurrent-%d", time.Now().UnixNano())}
	t.Cleanup(func() {
		for _, table := range []string{"prompts", "tools"} {
			_, err := pool.Exec(context.Background(), "DROP INDEX IF EXISTS "+search.IndexName(table, e.model, embed.LexicalDimension))
			require.NoError(t, err)
		}
	})
	const copies = 8
	errs := make([]error, copies)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = search.EnsureIndexes(ctx, pool, search.Embedders{Prompts: e, Tools: e})
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "copy %d", i)
	}
	for _, table := range []string{"prompts", "tools"} {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = $1 AND indexname = $2`,
			table, search.IndexName(table, e.model, embed.LexicalDimension)).Scan(&n))
		require.Equal(t, 1, n, table)
	}
}
