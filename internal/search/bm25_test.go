package search_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
)

// TestBM25RareWordOutranksCommonWord: a query of a common and a rare word
// ranks the row holding only the rare word above rows holding only the
// common one, however often they repeat it (IDF, term saturation).
func TestBM25RareWordOutranksCommonWord(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	tenant := testenv.Tenant(t)
	rare := word(t)
	for i := range 12 {
		f.tool(tenant, fmt.Sprintf("report_tool_%02d", i), "Build a report; the report lists every report section.", time.Time{})
	}
	f.tool(tenant, "rare_tool", "Look up the "+rare+" of an account.", time.Time{})
	f.tool(tenant, "other_tool", "Send a message to a channel.", time.Time{})

	resp, err := f.s.WithMode(search.Lexical).Tools(context.Background(), tenant, search.ToolsRequest{Query: "report " + rare, Limit: 20})
	require.NoError(t, err)
	names := namesIn(resp, tenant)
	require.Len(t, names, 13, names) // the 12 report tools and the rare one; other_tool matches nothing
	require.Equal(t, "rare_tool", names[0], names)
	require.NotContains(t, names, "other_tool")
}

// TestBM25CandidatesAreBounded: with LexicalCandidates 5, a query of a
// word in 30 rows and a word in one row ranks only the rows of the rare
// word (the common word's 30 matches exceed the bound and are not read),
// and finds that row even though the common word's matches are many;
// with the default bound both words' rows are ranked.
func TestBM25CandidatesAreBounded(t *testing.T) {
	ctx := context.Background()
	tenant := testenv.Tenant(t)
	rare, common := word(t), word(t)+"c"
	f := newFixture(t, lexical, search.Options{LexicalCandidates: 5})
	for i := range 30 {
		f.prompt(promptSpec{tenant: tenant, id: fmt.Sprintf("common-%02d", i), content: "Write about " + common + " and more " + common + "."})
	}
	f.prompt(promptSpec{tenant: tenant, id: "rare", content: "Explain the " + rare + " to a newcomer."})

	resp, err := f.s.WithMode(search.Lexical).Prompts(ctx, tenant, search.PromptsRequest{Query: common + " " + rare, Limit: 50})
	require.NoError(t, err)
	require.Equal(t, []string{"rare"}, idsIn(resp, tenant))

	wide, err := search.New(f.pool, search.Embedders{Prompts: lexical, Tools: lexical}, search.Options{}, testenv.Logger(t))
	require.NoError(t, err)
	resp, err = wide.WithMode(search.Lexical).Prompts(ctx, tenant, search.PromptsRequest{Query: common + " " + rare, Limit: 50})
	require.NoError(t, err)
	ids := idsIn(resp, tenant)
	require.Len(t, ids, 31, ids)
	require.Equal(t, "rare", ids[0])

	// A query of the common word alone still answers, from at most the
	// bound's rows.
	resp, err = f.s.WithMode(search.Lexical).Prompts(ctx, tenant, search.PromptsRequest{Query: common, Limit: 50})
	require.NoError(t, err)
	require.Len(t, idsIn(resp, tenant), 5)
}

// TestBM25OddQueries: quotes, backslashes and operators in a query are
// words, not syntax.
func TestBM25OddQueries(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	tenant := testenv.Tenant(t)
	f.tool(tenant, "path_tool", `Open C:\temp\o'brien's files and "quoted" names.`, time.Time{})
	for _, q := range []string{`o'brien's`, `C:\temp\o'brien`, `"quoted" OR -names`, `a & b | !c <-> d:*`, `'''`, `\`} {
		for _, m := range []search.Mode{search.Lexical, search.Hybrid} {
			_, err := f.s.WithMode(m).Tools(context.Background(), tenant, search.ToolsRequest{Query: q})
			require.NoError(t, err, "%s %q", m, q)
		}
	}
	resp, err := f.s.WithMode(search.Lexical).Tools(context.Background(), tenant, search.ToolsRequest{Query: `o'brien's files`})
	require.NoError(t, err)
	require.Equal(t, []string{"path_tool"}, namesIn(resp, tenant))
}

// TestSearchStatsFollowRows: the statistics behind IDF equal a count over
// the rows after inserts, new prompt versions, tool re-registrations,
// re-embedding and tenant resets: as searches read them (search_corpus and
// search_lexemes plus the changes logged and not folded yet), and, once
// folded, in the tables alone, with no lexeme left at 0.
func TestSearchStatsFollowRows(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, lexical, search.Options{})
	tenant := testenv.Tenant(t)
	strs := func(sql string, args ...any) []string {
		t.Helper()
		rows, err := f.pool.Query(ctx, sql, args...)
		require.NoError(t, err)
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, rows.Err())
		return out
	}
	corpus := func(sql string, args ...any) [2]int64 {
		t.Helper()
		var v [2]int64
		require.NoError(t, f.pool.QueryRow(ctx, sql, args...).Scan(&v[0], &v[1]))
		return v
	}
	check := func(step string) {
		t.Helper()
		for _, k := range []struct{ table, kind string }{{"prompts", "prompt"}, {"tools", "tool"}} {
			want := strs(`SELECT x || ':' || count(*) FROM `+k.table+` a, unnest(tsvector_to_array(a.search_text)) x
				WHERE a.tenant_id = $1 GROUP BY x ORDER BY x`, tenant)
			wantCorpus := corpus(`SELECT count(*), coalesce(sum(length(search_text)), 0) FROM `+k.table+` WHERE tenant_id = $1`, tenant)
			read := strs(`SELECT lexeme || ':' || sum(df) FROM (
				SELECT lexeme, df FROM search_lexemes WHERE tenant_id = $1 AND kind = $2
				UNION ALL
				SELECT u, g.sign FROM search_stats_log g, unnest(g.lexemes) u WHERE g.tenant_id = $1 AND g.kind = $2) z
				GROUP BY lexeme HAVING sum(df) <> 0 ORDER BY lexeme`, tenant, k.kind)
			require.Equal(t, want, read, "%s: %s lexemes as searches read them", step, k.table)
			require.Equal(t, wantCorpus, corpus(`SELECT coalesce(sum(d), 0), coalesce(sum(l), 0) FROM (
				SELECT docs AS d, lexemes AS l FROM search_corpus WHERE tenant_id = $1 AND kind = $2
				UNION ALL
				SELECT sign, sign * length FROM search_stats_log WHERE tenant_id = $1 AND kind = $2) z`, tenant, k.kind),
				"%s: %s corpus as searches read it", step, k.table)
		}
		_, err := search.FoldStats(ctx, f.pool)
		require.NoError(t, err)
		for _, k := range []struct{ table, kind string }{{"prompts", "prompt"}, {"tools", "tool"}} {
			want := strs(`SELECT x || ':' || count(*) FROM `+k.table+` a, unnest(tsvector_to_array(a.search_text)) x
				WHERE a.tenant_id = $1 GROUP BY x ORDER BY x`, tenant)
			got := strs(`SELECT lexeme || ':' || df FROM search_lexemes WHERE tenant_id = $1 AND kind = $2 ORDER BY lexeme`, tenant, k.kind)
			require.Equal(t, want, got, "%s: %s lexemes, folded", step, k.table)
			require.Equal(t,
				corpus(`SELECT count(*), coalesce(sum(length(search_text)), 0) FROM `+k.table+` WHERE tenant_id = $1`, tenant),
				corpus(`SELECT coalesce(sum(docs), 0), coalesce(sum(lexemes), 0) FROM search_corpus WHERE tenant_id = $1 AND kind = $2`, tenant, k.kind),
				"%s: %s corpus, folded", step, k.table)
			require.Empty(t, strs(`SELECT id::text FROM search_stats_log WHERE tenant_id = $1`, tenant), "%s: folded", step)
		}
	}

	f.prompt(promptSpec{tenant: tenant, id: "greet", content: "Greet the user warmly by name."})
	f.prompt(promptSpec{tenant: tenant, id: "greet", version: 2, content: "Greet the customer politely and briefly."})
	f.prompt(promptSpec{tenant: tenant, id: "bye", content: "Say goodbye to the user."})
	f.tool(tenant, "send_email", "Send an email to a recipient.", time.Time{})
	f.tool(tenant, "send_sms", "Send a text message to a phone.", time.Time{})
	check("inserted")

	// Re-registration replaces the tool's row: its old words leave.
	f.tool(tenant, "send_email", "Deliver a mail message with attachments.", time.Time{})
	check("re-registered")

	// Re-embedding changes no words.
	f.exec(`UPDATE tools SET embedding_model = embedding_model WHERE tenant_id = $1`, tenant)
	f.exec(`UPDATE prompts SET embedding_dim = embedding_dim WHERE tenant_id = $1`, tenant)
	check("re-embedded")

	require.NoError(t, registry.Reset(ctx, f.pool, tenant))
	require.NoError(t, library.Reset(ctx, f.pool, tenant))
	check("reset")
	var n int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM search_lexemes WHERE tenant_id = $1`, tenant).Scan(&n))
	require.Zero(t, n)
}

// namesIn and idsIn list the results of tenant, best first.
func namesIn(r search.ToolsResponse, tenant string) []string {
	var out []string
	for _, x := range r.Results {
		if x.Tool.Tenant == tenant {
			out = append(out, x.Tool.Name)
		}
	}
	return out
}

func idsIn(r search.PromptsResponse, tenant string) []string {
	var out []string
	for _, x := range r.Results {
		if x.Prompt.Tenant == tenant {
			out = append(out, x.Prompt.ID)
		}
	}
	return out
}

// TestStatsDoNotSerialiseWriters: a transaction writing prompts of a tenant
// commits while another transaction that wrote the same words to the same
// tenant is still open; the statistics are logged, not upserted on rows
// both would lock (migration 00011). Native Postgres only: PGlite runs one
// transaction at a time whatever the locks.
func TestStatsDoNotSerialiseWriters(t *testing.T) {
	if os.Getenv("AGENTQ_DATABASE_URL") == "" {
		t.Skip("PGlite serialises transactions; set AGENTQ_DATABASE_URL to native Postgres")
	}
	ctx := context.Background()
	pool := testenv.Pool(t)
	tenant := testenv.Tenant(t)
	w := word(t)
	insert := func(ctx context.Context, db library.DB, id string, seq uint64) {
		t.Helper()
		content := "Summarise the " + w + " report for the team."
		p := library.Prompt{Tenant: tenant, ID: id, Version: 1, Hash: library.Hash(id, 1, content, "task"), Type: "task",
			Name: id, Content: content, CreatedAt: time.Now()}
		ok, err := library.Insert(ctx, db, library.Row{Prompt: p, EventID: id, StreamSeq: seq})
		require.NoError(t, err)
		require.True(t, ok)
	}
	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	insert(ctx, first, "first", 1)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	second, err := pool.Begin(wctx)
	require.NoError(t, err)
	insert(wctx, second, "second", 2)
	require.NoError(t, second.Commit(wctx), "the second writer does not wait for the first")
	require.NoError(t, first.Commit(ctx))

	_, err = search.FoldStats(ctx, pool)
	require.NoError(t, err)
	var df int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT df FROM search_lexemes WHERE tenant_id = $1 AND kind = 'prompt' AND lexeme = $2`,
		tenant, w).Scan(&df))
	require.Equal(t, int64(2), df)
	var docs int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT docs FROM search_corpus WHERE tenant_id = $1 AND kind = 'prompt'`, tenant).Scan(&docs))
	require.Equal(t, int64(2), docs)
}

// TestBM25AllWordsBranch: when the rarest word of a query is in more rows
// than the bound, the rows holding every word are still candidates, by
// the second candidate query (which a query of one lexeme skips: see
// lexCTEs). The row with both words is inserted last, so the bounded
// first query (5 of the 31 rows with its rarest word) would not read it.
func TestBM25AllWordsBranch(t *testing.T) {
	ctx := context.Background()
	tenant := testenv.Tenant(t)
	a, b := word(t)+"a", word(t)+"b"
	f := newFixture(t, lexical, search.Options{LexicalCandidates: 5})
	for i := range 30 {
		f.prompt(promptSpec{tenant: tenant, id: fmt.Sprintf("a-%02d", i), content: "Write about " + a + "."})
	}
	for i := range 40 {
		f.prompt(promptSpec{tenant: tenant, id: fmt.Sprintf("b-%02d", i), content: "Write about " + b + "."})
	}
	f.prompt(promptSpec{tenant: tenant, id: "both", content: "Write about " + a + " and " + b + "."})
	resp, err := f.s.WithMode(search.Lexical).Prompts(ctx, tenant, search.PromptsRequest{Query: a + " " + b, Limit: 50})
	require.NoError(t, err)
	ids := idsIn(resp, tenant)
	require.NotEmpty(t, ids)
	require.Equal(t, "both", ids[0], ids)
	require.LessOrEqual(t, len(ids), 10, "at most the bound's rows from each candidate query")
}
