package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// Creates without a version for one id, handled at once by two indexer
// copies, take the versions stream order gives: 1..n by sequence, whatever
// order the copies commit in. Each create has exactly one result of its
// own and, when an earlier create was applied after it, revised ones; the
// last names the version stored. Both copies handle some of them (each
// copy's runner counts what it acked). A rebuild into empty tables then
// gives the same library.
func TestNextFreeVersionUnderTwoCopiesAndRebuild(t *testing.T) {
	n := testenv.StartNATS(t)
	cfg := testenv.Config(t, n.URL)
	cfg.BatchSize = 4
	tenant := testenv.Tenant(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(n.JS, reg)

	var mu sync.Mutex
	first := map[string]int{}    // cause → results that are not revisions
	versions := map[string]int{} // cause → the version its newest result names
	ids := map[string]bool{}     // result ids
	revisions := 0
	sub, err := n.NC.Subscribe("prompt.indexed."+tenant, func(m *nats.Msg) {
		ev, err := bus.Decode(m.Header, m.Data)
		if err != nil {
			return
		}
		var d struct {
			Version int    `json:"version"`
			Outcome string `json:"outcome"`
			Revised bool   `json:"revised"`
		}
		_ = json.Unmarshal(ev.Data(), &d)
		mu.Lock()
		defer mu.Unlock()
		cause, _ := ev.Extensions()[bus.ExtCausation].(string)
		if ids[ev.ID()] {
			t.Errorf("result %s published twice", ev.ID())
		}
		ids[ev.ID()] = true
		if d.Revised {
			revisions++
		} else if first[cause]++; first[cause] > 1 {
			t.Errorf("two results for %s", cause)
		}
		if d.Outcome != "created" {
			t.Errorf("outcome %q for %s", d.Outcome, cause)
		}
		versions[cause] = d.Version
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()

	a := testenv.StartProcess(t, cfg, "indexer-a", indexer.Consumer)
	b := testenv.StartProcess(t, cfg, "indexer-b", indexer.Consumer)
	// Publish once both copies have a pull request waiting on the shared
	// durable consumer, so the first batches go to both.
	testenv.Eventually(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := n.JS.Consumer(ctx, bus.StreamName, "indexer")
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumWaiting >= 2
	}, "both copies fetching")
	const count = 60
	for i := range count {
		ev, err := bus.NewEvent(indexer.TypePromptCreated, tenant, "test", map[string]any{
			"id": "shared", "type": "task", "name": "Shared", "content": fmt.Sprintf("Variant %d", i)})
		require.NoError(t, err)
		_, err = pub.PublishAsync(ev)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, pub.Flush(ctx))
	testenv.Eventually(t, 60*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(first) == count }, "every create answered")
	// Each copy acked some creates: both copies decided versions, not one
	// alone while the other idled. Results are published
	// before the ack, hence the wait; a redelivery acked by the other copy
	// as already applied counts twice, hence at least count.
	var ackedA, ackedB float64
	testenv.Eventually(t, 30*time.Second, func() bool {
		ackedA, ackedB = a.Counter("agentq_events_acked_total", nil), b.Counter("agentq_events_acked_total", nil)
		return ackedA+ackedB >= count
	}, "every create acked")
	t.Logf("creates acked: copy a %v, copy b %v", ackedA, ackedB)
	require.Positive(t, ackedA, "copy a acked no create")
	require.Positive(t, ackedB, "copy b acked no create")
	pool := testenv.Pool(t)
	hist := conformance.History(t, n.JS, indexer.Subjects, tenant)
	require.Len(t, hist, count)
	want := indexer.Compute("indexer", hist)
	for i := range want.Prompts {
		want.Prompts[i].CreatedAt = want.Prompts[i].CreatedAt.Truncate(time.Microsecond)
	}
	live, err := indexer.ReadState(ctx, pool, tenant)
	require.NoError(t, err)
	require.Equal(t, want, live, "the versions stream order gives")
	require.Len(t, live.Prompts, count)
	for i, p := range live.Prompts {
		require.Equal(t, i+1, p.Version)
		require.Equal(t, hist[i].Event.ID(), p.EventID, "version %d is the %dth create in the stream", i+1, i+1)
		require.Equal(t, library.Hash("shared", p.Version, p.Content, "task"), p.Hash)
	}
	// The results' last word is the stored version (revisions are
	// published with the commit of the create that caused them).
	testenv.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range live.Prompts {
			if versions[p.EventID] != p.Version {
				return false
			}
		}
		return true
	}, "each create's newest result names its stored version")
	mu.Lock()
	t.Logf("revised results: %d", revisions)
	mu.Unlock()

	// Both copies stop; a rebuild applies the history in stream order.
	a.Stop()
	b.Stop()
	lex := embed.Lexical{}
	rep, err := replay.Rebuild(ctx, n.JS, pool, reg, indexer.RebuildTarget(pool, indexer.Embedders{Prompts: lex, Tools: lex}, indexer.Options{}, testenv.Logger(t)),
		replay.Options{Tenant: tenant, Log: testenv.Logger(t)})
	require.NoError(t, err)
	require.Equal(t, count, rep.Events)
	rebuilt, err := indexer.ReadState(ctx, pool, tenant)
	require.NoError(t, err)
	require.Equal(t, live, rebuilt)
}

// The indexer's maintenance runs in the process: on a database of its own,
// prompts' IVFFlat index starts with one list, and once the served prompts
// have grown past two lists' worth the process rebuilds it with two and
// drops the first, by itself (AGENTQ_SEARCH_INDEX_CHECK).
func TestIndexerRebuildsPromptsIndexAsPromptsGrow(t *testing.T) {
	n := testenv.StartNATS(t)
	cfg := testenv.Config(t, n.URL)
	cfg.DatabaseURL = testenv.FreshDatabase(t)
	cfg.Search.IndexCheck = 50 * time.Millisecond
	testenv.StartProcess(t, cfg, "indexer", indexer.Consumer)
	ctx := context.Background()
	pool, err := database.Open(ctx, cfg.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	lex := embed.Lexical{}
	indexes := func() []string {
		rows, err := pool.Query(ctx, `SELECT indexname FROM pg_indexes WHERE tablename = 'prompts' AND indexdef LIKE '%ivfflat%' ORDER BY 1`)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	l1, l2 := search.IVFFlatName("prompts", lex.Model(), lex.Dimension(), 1), search.IVFFlatName("prompts", lex.Model(), lex.Dimension(), 2)
	testenv.Eventually(t, 30*time.Second, func() bool { return slices.Equal(indexes(), []string{l1}) }, "the index of an empty table, one list")

	docs := make([]search.EvalDoc, 2*search.RowsPerList+10)
	for i := range docs {
		docs[i] = search.EvalDoc{ID: fmt.Sprintf("p%04d", i), Text: fmt.Sprintf("prompt number %d about topic %d", i, i%37)}
	}
	require.NoError(t, search.LoadCorpus(ctx, pool, testenv.Tenant(t), search.EvalPrompts, search.EvalSet{Docs: docs}, lex))
	testenv.Eventually(t, 60*time.Second, func() bool { return slices.Equal(indexes(), []string{l2}) }, "rebuilt with two lists, the first dropped")
}
