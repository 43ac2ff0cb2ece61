package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bench"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
)

// agentq bench indexer at a small size on the test database: it indexes
// every generated prompt and tool and reports every figure (not a timing
// assertion: the test database is PGlite, whose figures mean nothing).
func TestBenchIndexerReportsEveryFigure(t *testing.T) {
	if testing.Short() {
		t.Skip("indexes a generated corpus")
	}
	ctx := context.Background()
	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn"}
	args := []string{"bench", "indexer", "--prompts", "60", "--prompt-ids", "20", "--tools", "25", "--requests", "12",
		"--warmup", "2", "--rounds", "2", "--concurrency", "1,3", "--tools-embedder", "lexical"}

	code, out, errOut := run(ctx, env, "", append(args, "--allow-pglite", "--json")...)
	require.Equal(t, 0, code, errOut)
	var res bench.IndexerResult
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)

	if os.Getenv("AGENTQ_DATABASE_URL") == "" { // the test database is PGlite
		require.Contains(t, res.Database, "PGlite")
	} else {
		require.NotContains(t, res.Database, "PGlite")
	}
	require.NotEmpty(t, res.Server)
	require.NotEmpty(t, res.PGVector)
	require.Positive(t, res.PoolMaxConns)
	require.True(t, strings.HasPrefix(res.Tenant, "bench-ix-"), res.Tenant)
	require.Equal(t, []int{60, 20, 25, 12, 2, 500}, []int{res.Prompts, res.PromptIDs, res.Tools, res.Requests, res.Rounds, res.BatchSize})
	require.Equal(t, embed.LexicalModel, res.PromptModel)
	require.Equal(t, embed.LexicalModel, res.ToolModel)
	require.Equal(t, []int{20, 30, 64, 200}, []int{res.PromptK, res.ToolK, res.EFSearch, res.LexicalCandidates})
	// Prompts' IVFFlat index, with the lists of the index the database
	// holds (the shared test database's served prompts of the lexical
	// model are this run's 20 and other tests').
	require.Equal(t, "ivfflat", res.PromptIndex)
	require.Equal(t, 10, res.Probes)
	require.GreaterOrEqual(t, res.PromptLists, 1)
	var held int
	name := search.IVFFlatName("prompts", embed.LexicalModel, embed.LexicalDimension, res.PromptLists)
	require.NoError(t, testenv.Pool(t).QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = 'prompts' AND indexname IN ($1::name, $2::name)`, name, name+"r").Scan(&held))
	require.Equal(t, 1, held, "index %s", name)
	require.InDelta(t, 125, res.PromptWords, 30, "prompts of about 100-150 words")
	require.Equal(t, 20, res.HotIDs, "at most the ids there are")
	require.False(t, res.SearchOnly)
	require.Equal(t, 1, res.Copies)
	require.Equal(t, 2, res.Writers, "AGENTQ_INDEXER_WRITERS' default")
	// 20 served prompts and 25 tools of the tenant: HNSW with ef_search 64
	// finds (nearly) all of them. Nearly: on a shared test database the
	// _global rows of other tests are in the index and the exact answer.
	require.Equal(t, 12, res.Recall.Queries)
	for name, r := range map[string]float64{"prompts": res.Recall.Prompts, "tools": res.Recall.Tools} {
		require.GreaterOrEqual(t, r, 0.8, name)
		require.LessOrEqual(t, r, 1.0, name)
	}

	ix := res.Indexing
	for name, rate := range map[string]float64{
		"publish": ix.Publish, "prompts": ix.Prompts, "tools": ix.Tools, "prompts wall": ix.PromptsWall,
		"prompts embed": ix.PromptsEmbed, "tools embed": ix.ToolsEmbed,
		"prompts insert": ix.PromptsInsert, "prompts insert vectors": ix.PromptsInsertVectors,
		"tools insert": ix.ToolsInsert, "tools insert vectors": ix.ToolsInsertVectors,
	} {
		require.Positive(t, rate, name)
	}
	require.Less(t, ix.PromptsWall, ix.Publish, "the wall rate includes publishing")
	require.Equal(t, []int{60, 25, 0}, []int{ix.PromptEmbedSamples, ix.ToolEmbedSamples, ix.Rejected})

	// Concurrency 1 and 3, then the open loop at half of what each
	// measurement carried at concurrency 3 (the --load default).
	require.Len(t, res.Search, 3)
	for i, s := range res.Search {
		require.Equal(t, []int{1, 3, 0}[i], s.Concurrency)
		require.Equal(t, []float64{0, 0, 0.5}[i], s.Load)
		for name, l := range map[string]bench.Latency{
			"search prompts": s.SearchPrompts, "embed prompts": s.EmbedPrompts, "embed tools": s.EmbedTools, "knn prompts": s.KNNPrompts, "fulltext prompts": s.FullTextPrompts, "arms prompts": s.ArmsPrompts,
			"search tools": s.SearchTools, "knn tools": s.KNNTools, "fulltext tools": s.FullTextTools, "arms tools": s.ArmsTools,
			"get": s.Get, "get sql": s.GetSQL, "get params": s.GetParams, "get hot": s.GetHot, "echo": s.Echo,
		} {
			require.Equal(t, 12, l.Requests, name)
			require.Zero(t, l.Errors, name)
			require.Positive(t, l.P50, name)
			require.GreaterOrEqual(t, l.P99, l.P50, name)
			require.GreaterOrEqual(t, l.Max, l.P99, name)
			require.Positive(t, l.Rate, name)
		}
		require.InDelta(t, s.SearchPrompts.P50/s.KNNPrompts.P50, s.PromptsRatioP50, 1e-9)
		require.InDelta(t, s.SearchPrompts.P99/s.KNNPrompts.P99, s.PromptsRatioP99, 1e-9)
		require.InDelta(t, s.SearchTools.P50/s.KNNTools.P50, s.ToolsRatioP50, 1e-9)
		require.InDelta(t, s.SearchTools.P99/s.KNNTools.P99, s.ToolsRatioP99, 1e-9)
		require.InDelta(t, s.SearchPrompts.P50/s.ArmsPrompts.P50, s.PromptsArmsRatioP50, 1e-9)
		require.InDelta(t, s.SearchPrompts.P99/s.ArmsPrompts.P99, s.PromptsArmsRatioP99, 1e-9)
		require.InDelta(t, s.SearchTools.P50/s.ArmsTools.P50, s.ToolsArmsRatioP50, 1e-9)
		require.InDelta(t, s.SearchTools.P99/s.ArmsTools.P99, s.ToolsArmsRatioP99, 1e-9)
		require.Zero(t, s.EmptyPrompts, "every prompt search finds something (the vector arm always does)")
		require.Zero(t, s.EmptyTools)
		require.Zero(t, s.DegradedPrompts)
		require.Zero(t, s.DegradedTools)
	}

	// The open loop is paced: half of each measurement's rate at
	// concurrency 3 is offered, so it carries less than that.
	closed, open := res.Search[1], res.Search[2]
	for name, l := range map[string][2]bench.Latency{
		"search prompts": {closed.SearchPrompts, open.SearchPrompts}, "embed prompts": {closed.EmbedPrompts, open.EmbedPrompts}, "embed tools": {closed.EmbedTools, open.EmbedTools}, "knn prompts": {closed.KNNPrompts, open.KNNPrompts},
		"fulltext prompts": {closed.FullTextPrompts, open.FullTextPrompts}, "search tools": {closed.SearchTools, open.SearchTools},
		"arms prompts": {closed.ArmsPrompts, open.ArmsPrompts}, "arms tools": {closed.ArmsTools, open.ArmsTools},
		"knn tools": {closed.KNNTools, open.KNNTools}, "fulltext tools": {closed.FullTextTools, open.FullTextTools},
		"get": {closed.Get, open.Get}, "get sql": {closed.GetSQL, open.GetSQL}, "get params": {closed.GetParams, open.GetParams}, "get hot": {closed.GetHot, open.GetHot},
		"echo": {closed.Echo, open.Echo},
	} {
		require.Less(t, l[1].Rate, l[0].Rate, name)
	}

	// The table: every measurement at every concurrency, and the verdicts.
	// Two indexer copies share the backlog and the search requests.
	code, out, errOut = run(ctx, env, "", "bench", "indexer", "--allow-pglite", "--prompts", "8", "--prompt-ids", "4", "--tools", "4",
		"--requests", "3", "--warmup", "0", "--rounds", "1", "--concurrency", "2", "--tools-embedder", "lexical", "--copies", "2")
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{
		"prompts: indexer draining the backlog", "bare INSERT with vectors (HNSW maintained)", "embedder alone (agentq-lexical-v1, 8 texts)",
		"2    search.prompts (NATS)", "2      embedder alone, one new query", "2      bare SQL kNN, prompts", "2      bare full-text arm, prompts", "2      bare arms at once, prompts",
		"2    search.tools (NATS)", "2      bare SQL kNN, tools", "2      bare full-text arm, tools", "2      bare arms at once, tools",
		"2    prompts.get (NATS)", "2      bare SQL of prompts.get", "2    prompts.get with params (NATS)", "2    prompts.get, 4 hot ids (NATS)", "2      bare NATS request/reply, same size", "2    search / bare kNN: prompts p50", "2    search / bare arms at once: prompts p50",
		"indexing ", "concurrency 2: search.prompts p99", " (bare arms at once ", " (bare statement ",
		"50%  search.prompts (NATS)", "50%    bare SQL kNN, prompts", "50%  prompts.get, 4 hot ids (NATS)",
		"open loop at 50% of capacity: search.prompts p99", "batch 500, indexer copies 2 of 2 writers each", "rejected: 0",
	} {
		require.Contains(t, out, want)
	}
	// A copy may drain the tiny backlog before the other is seen serving:
	// no rate may come out negative (it once did).
	require.NotRegexp(t, `-[0-9]+ /s`, out)
	require.Regexp(t, `kNN recall@K against an exact scan \(3 queries each\): prompts@20 [01]\.[0-9]{3}, tools@30 [01]\.[0-9]{3}`, out)

	// Search alone, on the first run's tenant: nothing is indexed again.
	code, out, errOut = run(ctx, env, "", append(args, "--allow-pglite", "--json", "--search-only", res.Tenant)...)
	require.Equal(t, 0, code, errOut)
	var again bench.IndexerResult
	require.NoError(t, json.Unmarshal([]byte(out), &again), out)
	require.True(t, again.SearchOnly)
	require.Equal(t, res.Tenant, again.Tenant)
	require.Equal(t, bench.IndexingFigures{}, again.Indexing, "no indexing was run")
	require.Len(t, again.Search, 3)
	require.Equal(t, 12, again.Search[1].GetHot.Requests)
	require.Zero(t, again.Search[1].GetHot.Errors)
	// Another corpus's options do not match the tenant's rows.
	code, _, errOut = run(ctx, env, "", "bench", "indexer", "--allow-pglite", "--prompts", "61", "--prompt-ids", "20", "--tools", "25",
		"--tools-embedder", "lexical", "--search-only", res.Tenant)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--search-only: tenant "+res.Tenant+" holds 60 prompts over 20 ids and 25 tools, not 61 over 20 and 25")

	// Figures on PGlite are refused unless asked for.
	if os.Getenv("AGENTQ_DATABASE_URL") != "" {
		return // native Postgres: nothing to refuse
	}
	code, _, errOut = run(ctx, env, "", args...)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "PGlite")
	require.Contains(t, errOut, "--allow-pglite")
}
