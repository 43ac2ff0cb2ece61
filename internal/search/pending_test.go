package search_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
)

// FlushPendingLists merges what inserts left in the full-text indexes'
// pending lists, and a search finds the same before and after. The
// inserts and both flushes run in one transaction, so no other session's
// flush (an indexer process of another test) can empty the list between
// them.
func TestFlushPendingLists(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	tenant, w := testenv.Tenant(t), word(t)
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for i := range 40 {
		content := fmt.Sprintf("Summarise the quarterly %s report number %d for the board, %s", w, i, strings.Repeat("with figures and caveats ", 20))
		p := library.Prompt{Tenant: tenant, ID: fmt.Sprintf("p%d-%s", i, w), Version: 1, Type: "task", Name: "p", Content: content,
			Hash: library.Hash(fmt.Sprintf("p%d-%s", i, w), 1, content, "task"), CreatedAt: time.Now()}
		vec, err := lexical.Embed(ctx, []string{content})
		require.NoError(t, err)
		ok, err := library.Insert(ctx, tx, library.Row{Prompt: p, EventID: fmt.Sprint("e", i), StreamSeq: uint64(i + 1), Embedding: vec[0], Model: lexical.Model()})
		require.NoError(t, err)
		require.True(t, ok)
	}
	matches := func() int {
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM prompts a WHERE a.tenant_id = $1 AND a.current AND a.search_text @@ plainto_tsquery('english', $2)`,
			tenant, "quarterly "+w).Scan(&n))
		return n
	}
	require.Equal(t, 40, matches())
	pages, err := search.FlushPendingLists(ctx, tx)
	require.NoError(t, err)
	require.Positive(t, pages, "40 inserts left nothing in the pending list")
	require.Equal(t, 40, matches())
	pages, err = search.FlushPendingLists(ctx, tx)
	require.NoError(t, err)
	require.Zero(t, pages)
}
