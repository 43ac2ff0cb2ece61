package indexer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// With the embedding provider down (503), nothing is indexed, nothing is
// dead-lettered, and every event is applied once it is back, with the
// provider's model recorded with each vector.
func TestProviderOutageIndexesWhenBack(t *testing.T) {
	srv := providertest.New(t)
	srv.SetFailing(503, "")
	n := testenv.StartNATS(t)
	cfg := testenv.Config(t, n.URL)
	cfg.Embed.BaseURL, cfg.Embed.Model, cfg.Embed.MaxRetries = srv.URL, "test-embed", 0
	cfg.EmbedPrompts, cfg.EmbedTools = "auto", "auto"
	cfg.MaxDeliver = 2 // outages must not spend it
	tenant := testenv.Tenant(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(n.JS, reg)
	testenv.StartProcess(t, cfg, "indexer", indexer.Consumer)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const count = 12
	for i := range count {
		typ, data := indexer.TypePromptCreated, map[string]any{"id": fmt.Sprintf("p%d", i), "type": "task", "name": "P", "content": fmt.Sprintf("Text %d", i)}
		if i%3 == 0 {
			typ, data = indexer.TypeToolRegistered, map[string]any{"name": fmt.Sprintf("tool_%d", i), "description": fmt.Sprintf("Does thing %d", i)}
		}
		ev, err := bus.NewEvent(typ, tenant, "test", data)
		require.NoError(t, err)
		_, err = pub.Publish(ctx, ev)
		require.NoError(t, err)
	}
	pool := testenv.Pool(t)
	applied := func() int {
		var k int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE consumer = 'indexer' AND tenant_id = $1`, tenant).Scan(&k))
		return k
	}
	// Held back while the provider answers 503, for longer than the
	// delivery budget would last if outages counted.
	testenv.Eventually(t, 30*time.Second, func() bool { return srv.EmbeddingRequests() >= 6 }, "the indexer keeps trying the provider")
	require.Zero(t, applied())
	srv.SetFailing(0, "")
	testenv.Eventually(t, 60*time.Second, func() bool { return applied() == count }, "every event applied once the provider is back")
	require.Empty(t, testenv.DeadLetters(t, n.JS))
	var models []string
	rows, err := pool.Query(ctx, `SELECT DISTINCT embedding_model FROM prompts WHERE tenant_id = $1 UNION SELECT DISTINCT embedding_model FROM tools WHERE tenant_id = $1`, tenant)
	require.NoError(t, err)
	for rows.Next() {
		var m string
		require.NoError(t, rows.Scan(&m))
		models = append(models, m)
	}
	require.Equal(t, []string{"test-embed"}, models)
}

// A provider model whose dimension changes behind its name holds events
// back (nothing stored with mixed dimensions, nothing dead-lettered) until
// the operator acts: agentq reindex re-embeds the vectors of the old
// dimension with the new model, and an indexer started after it indexes
// what was held back.
func TestDimensionChangeHoldsEventsBack(t *testing.T) {
	srv := providertest.New(t)
	srv.SetDimension(8)
	n := testenv.StartNATS(t)
	cfg := testenv.Config(t, n.URL)
	cfg.Embed.BaseURL, cfg.Embed.Model, cfg.Embed.MaxRetries = srv.URL, "dim-"+testenv.Tenant(t), 0
	cfg.EmbedPrompts, cfg.EmbedTools = "auto", "auto"
	cfg.MaxDeliver = 2
	tenant := testenv.Tenant(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(n.JS, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	publish := func(id string) {
		ev, err := bus.NewEvent(indexer.TypePromptCreated, tenant, "test", map[string]any{"id": id, "type": "task", "name": "P", "content": "Text " + id})
		require.NoError(t, err)
		_, err = pub.Publish(ctx, ev)
		require.NoError(t, err)
	}
	pool := testenv.Pool(t)
	count := func() int {
		var k int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM prompts WHERE tenant_id = $1`, tenant).Scan(&k))
		return k
	}
	dims := func() map[int]int {
		rows, err := pool.Query(ctx, `SELECT embedding_dim, count(*) FROM prompts WHERE tenant_id = $1 GROUP BY 1`, tenant)
		require.NoError(t, err)
		out := map[int]int{}
		for rows.Next() {
			var d, k int
			require.NoError(t, rows.Scan(&d, &k))
			out[d] = k
		}
		require.NoError(t, rows.Err())
		return out
	}
	p := testenv.StartProcess(t, cfg, "indexer", indexer.Consumer)
	publish("a")
	testenv.Eventually(t, 30*time.Second, func() bool { return count() == 1 }, "indexed at dimension 8")
	p.Stop()

	srv.SetDimension(16) // the model behind the name changed
	before := srv.EmbeddingRequests()
	p = testenv.StartProcess(t, cfg, "indexer", indexer.Consumer)
	publish("b")
	testenv.Eventually(t, 30*time.Second, func() bool { return srv.EmbeddingRequests() >= before+3 }, "the indexer keeps asking")
	require.Equal(t, 1, count(), "nothing stored with another dimension")
	require.Empty(t, testenv.DeadLetters(t, n.JS))

	// The operator re-embeds with the new model (agentq reindex: rows of
	// the old dimension are out of date), then restarts the indexers: the
	// held-back event is indexed.
	emb, release, err := indexer.OpenEmbedders(ctx, cfg, testenv.Logger(t))
	require.NoError(t, err)
	rep, err := indexer.Reindex(ctx, pool, emb, indexer.ReindexOptions{Tenant: tenant})
	release()
	require.NoError(t, err)
	require.Equal(t, 1, rep.Prompts)
	require.Equal(t, map[int]int{16: 1}, dims())
	// The 8-dimension indexes refused 16-dimension vectors: dropped, and
	// the new dimension's built.
	require.ElementsMatch(t, []string{search.IVFFlatName("prompts", cfg.Embed.Model, 8, 1), search.IndexName("tools", cfg.Embed.Model, 8)}, rep.DroppedIndexes)
	var built int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname IN ($1, $2)`,
		search.IVFFlatName("prompts", cfg.Embed.Model, 16, 1), search.IndexName("tools", cfg.Embed.Model, 16)).Scan(&built))
	require.Equal(t, 2, built)
	p.Stop()
	testenv.StartProcess(t, cfg, "indexer", indexer.Consumer)
	testenv.Eventually(t, 30*time.Second, func() bool { return count() == 2 }, "the held-back event indexed after the reindex")
	require.Equal(t, map[int]int{16: 2}, dims())
	require.Empty(t, testenv.DeadLetters(t, n.JS))
}
