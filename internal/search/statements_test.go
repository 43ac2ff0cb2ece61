package search_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"time"

	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
)

// planCounts is one prepared statement's row in pg_prepared_statements.
type planCounts struct{ generic, custom int64 }

// TestStatementsArePreparedPerTenantWithGenericPlans runs searches on a
// pool of one connection, so every search uses the same connection and
// its statements can be read from it: each tenant and kind is prepared
// once, runs with a generic plan (the planning it saves is the point),
// the settings do not outlive the statement, at most Prepared statements
// are kept, and a statement lost behind the searcher's back costs one
// failed search, not every later one.
func TestStatementsArePreparedPerTenantWithGenericPlans(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	pool, err := database.Open(ctx, url+sep+"pool_max_conns=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := search.New(pool, search.Embedders{Prompts: lexical, Tools: lexical}, search.Options{Prepared: 2, EFSearch: 77, Probes: 7}, testenv.Logger(t))
	require.NoError(t, err)

	a, b, w := testenv.Tenant(t), testenv.Tenant(t), word(t)
	f.prompt(promptSpec{tenant: a, id: "pa-" + w, content: "Reconcile the ledger " + w})
	f.prompt(promptSpec{tenant: b, id: "pb-" + w, content: "Reconcile the ledger " + w})
	f.tool(a, "ta_"+w, "Reconcile a ledger "+w, time.Time{})

	names := func() []string {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		return search.PreparedNames(c.Conn())
	}
	server := func(name string) (planCounts, bool) {
		var p planCounts
		err := pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1`, name).Scan(&p.generic, &p.custom)
		if err != nil {
			require.ErrorContains(t, err, "no rows")
			return p, false
		}
		return p, true
	}
	searchPrompts := func(tenant string) []string {
		r, err := s.Prompts(ctx, tenant, search.PromptsRequest{Query: "reconcile ledger " + w})
		require.NoError(t, err)
		return promptIDs(r, w)
	}

	require.Equal(t, []string{a + "/pa-" + w}, searchPrompts(a))
	require.Equal(t, []string{a + "/pa-" + w}, searchPrompts(a))
	got := names()
	require.Len(t, got, 1)
	pa := got[0]
	p, ok := server(pa)
	require.True(t, ok, "statement %s is not prepared on the server", pa)
	require.Equal(t, planCounts{generic: 2, custom: 0}, p)

	// The settings were the statement's transaction's alone.
	var mode, ef, probes string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), coalesce(current_setting('hnsw.ef_search', true), ''),
coalesce(current_setting('ivfflat.probes', true), '')`).Scan(&mode, &ef, &probes))
	require.Equal(t, "auto", mode)
	require.NotEqual(t, "77", ef)
	require.NotEqual(t, "7", probes)

	tr, err := s.Tools(ctx, a, search.ToolsRequest{Query: "reconcile ledger " + w})
	require.NoError(t, err)
	require.Equal(t, []string{a + "/ta_" + w}, toolNames(tr, w))
	got = names()
	require.Len(t, got, 2)
	ta := got[0]
	require.Equal(t, []string{ta, pa}, got)

	// Another tenant is another statement (its tenant is a literal the
	// plan was made for); the least recently used goes, on both sides.
	require.Equal(t, []string{b + "/pb-" + w}, searchPrompts(b))
	got = names()
	require.Len(t, got, 2)
	pb := got[0]
	require.Equal(t, []string{pb, ta}, got)
	_, ok = server(pa)
	require.False(t, ok, "evicted statement %s is still prepared", pa)

	// A statement deallocated behind the searcher's back fails one search
	// and is prepared again by the next.
	_, err = pool.Exec(ctx, "DEALLOCATE "+pb)
	require.NoError(t, err)
	_, err = s.Prompts(ctx, b, search.PromptsRequest{Query: "reconcile ledger " + w})
	require.Error(t, err)
	require.Equal(t, []string{b + "/pb-" + w}, searchPrompts(b))
	p, ok = server(pb)
	require.True(t, ok)
	require.Equal(t, planCounts{generic: 1, custom: 0}, p)
}

// TestSimpleProtocolPlansEverySearch: a pool in pgx's simple protocol
// mode (the one for a transaction-pooling PgBouncer, where a prepared
// statement would not outlive its transaction) prepares nothing and
// finds what a pool with prepared statements finds.
func TestSimpleProtocolPlansEverySearch(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	if strings.Contains(url, "default_query_exec_mode=") {
		url = strings.NewReplacer("default_query_exec_mode=exec", "default_query_exec_mode=simple_protocol").Replace(url)
	} else if strings.Contains(url, "?") {
		url += "&default_query_exec_mode=simple_protocol"
	} else {
		url += "?default_query_exec_mode=simple_protocol"
	}
	require.Contains(t, url, "default_query_exec_mode=simple_protocol")
	pool, err := database.Open(ctx, url+"&pool_max_conns=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := search.New(pool, search.Embedders{Prompts: lexical, Tools: lexical}, search.Options{}, testenv.Logger(t))
	require.NoError(t, err)

	a, w := testenv.Tenant(t), word(t)
	f.prompt(promptSpec{tenant: a, id: "pa-" + w, content: "Reconcile the ledger " + w})
	f.tool(a, "ta_"+w, "Reconcile a ledger "+w, time.Time{})
	for _, mode := range []search.Mode{search.Hybrid, search.Lexical} {
		pr, err := s.WithMode(mode).Prompts(ctx, a, search.PromptsRequest{Query: "reconcile ledger " + w})
		require.NoError(t, err)
		require.Equal(t, []string{a + "/pa-" + w}, promptIDs(pr, w))
		want, err := f.s.WithMode(mode).Prompts(ctx, a, search.PromptsRequest{Query: "reconcile ledger " + w})
		require.NoError(t, err)
		require.Equal(t, len(want.Results), len(pr.Results))
		for i := range want.Results {
			require.Equal(t, want.Results[i].Prompt, pr.Results[i].Prompt)
			require.Equal(t, want.Results[i].Components.Similarity, pr.Results[i].Components.Similarity)
		}
		tr, err := s.WithMode(mode).Tools(ctx, a, search.ToolsRequest{Query: "reconcile ledger " + w})
		require.NoError(t, err)
		require.Equal(t, []string{a + "/ta_" + w}, toolNames(tr, w))
	}
	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	require.Empty(t, search.PreparedNames(c.Conn()))
}
