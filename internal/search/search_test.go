package search_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/registry"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var lexical = embed.Lexical{}

// fixture is a database with the indexes for an embedder, and a searcher.
type fixture struct {
	t    testing.TB
	pool *pgxpool.Pool
	emb  embed.Embedder
	s    *search.Searcher
	seq  uint64
}

func newFixture(t testing.TB, emb embed.Embedder, opts search.Options) *fixture {
	t.Helper()
	pool := testenv.Pool(t)
	ctx := context.Background()
	require.NoError(t, search.EnsureIndexes(ctx, pool, search.Embedders{Prompts: lexical, Tools: lexical}, search.IndexOptions{}))
	if emb != lexical {
		require.NoError(t, search.EnsureIndexes(ctx, pool, search.Embedders{Prompts: emb, Tools: emb}, search.IndexOptions{}))
	}
	s, err := search.New(pool, search.Embedders{Prompts: emb, Tools: emb}, opts, testenv.Logger(t))
	require.NoError(t, err)
	return &fixture{t: t, pool: pool, emb: emb, s: s}
}

type promptSpec struct {
	tenant, id  string
	version     int
	typ         string
	content     string
	tags        []string
	params      []library.Param
	createdAt   time.Time
	description string
}

func (f *fixture) prompt(p promptSpec) library.Prompt {
	f.t.Helper()
	if p.version == 0 {
		p.version = 1
	}
	if p.typ == "" {
		p.typ = "task"
	}
	if p.createdAt.IsZero() {
		p.createdAt = time.Now().Add(-time.Hour)
	}
	vec, err := f.emb.Embed(context.Background(), []string{p.id + " " + p.description + " " + p.content})
	require.NoError(f.t, err)
	f.seq++
	pr := library.Prompt{Tenant: p.tenant, ID: p.id, Version: p.version, Hash: library.Hash(p.id, p.version, p.content, p.typ),
		Type: p.typ, Name: p.id, Description: p.description, Content: p.content, Parameters: p.params, Tags: p.tags, CreatedAt: p.createdAt}
	ok, err := library.Insert(context.Background(), f.pool, library.Row{Prompt: pr, EventID: fmt.Sprint("e", f.seq), StreamSeq: f.seq,
		Embedding: vec[0], Model: f.emb.Model()})
	require.NoError(f.t, err)
	require.True(f.t, ok)
	f.s.PromptChanged(p.tenant, p.id) // what the indexer does after commit
	return pr
}

func (f *fixture) tool(tenant, name, description string, registeredAt time.Time) {
	f.t.Helper()
	if registeredAt.IsZero() {
		registeredAt = time.Now().Add(-time.Hour)
	}
	vec, err := f.emb.Embed(context.Background(), []string{name + ": " + description})
	require.NoError(f.t, err)
	h, err := registry.Hash(name, description, nil, "", nil)
	require.NoError(f.t, err)
	f.seq++
	require.NoError(f.t, registry.Put(context.Background(), f.pool, registry.Row{
		Tool:    registry.Tool{Tenant: tenant, Name: name, Version: 1, Hash: h, Description: description, RegisteredAt: registeredAt},
		EventID: fmt.Sprint("e", f.seq), StreamSeq: f.seq, Embedding: vec[0], Model: f.emb.Model()}))
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.pool.Exec(context.Background(), sql, args...)
	require.NoError(f.t, err)
}

func (f *fixture) quality(tenant, target, ref string, score float64, calls int64, updated time.Time, lastSuccess *time.Time) {
	f.t.Helper()
	f.exec(`INSERT INTO index_quality (tenant_id, target, ref, state_version, quality_score, success_rate, total_calls, successes, last_success, updated_at)
VALUES ($1, $2, $3, 1, $4, $4, $5, $5, $6, $7)
ON CONFLICT (tenant_id, target, ref) DO UPDATE SET quality_score = excluded.quality_score, total_calls = excluded.total_calls,
  last_success = excluded.last_success, updated_at = excluded.updated_at`, tenant, target, ref, score, calls, lastSuccess, updated)
}

func (f *fixture) health(tenant, tool, state string, quarantined bool, expires *time.Time) {
	f.t.Helper()
	f.exec(`INSERT INTO index_tool_health (tenant_id, tool_name, state, quarantined, expires_at, stream_seq, updated_at)
VALUES ($1, $2, $3, $4, $5, 1, now())
ON CONFLICT (tenant_id, tool_name) DO UPDATE SET state = excluded.state, quarantined = excluded.quarantined, expires_at = excluded.expires_at`,
		tenant, tool, state, quarantined, expires)
}

// promptIDs and toolNames list the results that carry w: the kNN arm
// always fills its K, so other tests' _global rows come along.
func promptIDs(r search.PromptsResponse, w string) []string {
	var ids []string
	for _, x := range r.Results {
		if strings.Contains(x.Prompt.ID, w) {
			ids = append(ids, x.Prompt.Tenant+"/"+x.Prompt.ID)
		}
	}
	return ids
}

func toolNames(r search.ToolsResponse, w string) []string {
	var ids []string
	for _, x := range r.Results {
		if strings.Contains(x.Tool.Name, w) {
			ids = append(ids, x.Tool.Tenant+"/"+x.Tool.Name)
		}
	}
	return ids
}

func code(t *testing.T, err error) string {
	t.Helper()
	var se *service.Error
	require.True(t, errors.As(err, &se), "want a *service.Error, got %v", err)
	return se.Code
}

// word is a token no other test's rows contain, so _global rows of other
// tests never match.
func word(t *testing.T) string { return "zq" + testenv.Tenant(t)[1:] }

func TestTenantIsolation(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	a, b, w := testenv.Tenant(t), testenv.Tenant(t), word(t)
	text := "Summarise the customer's billing dispute politely " + w
	f.prompt(promptSpec{tenant: a, id: "pa-" + w, content: text})
	f.prompt(promptSpec{tenant: b, id: "pb-" + w, content: text})
	f.prompt(promptSpec{tenant: "_global", id: "pg-" + w, content: text})
	f.tool(a, "ta_"+w, "Refund a billing charge "+w, time.Time{})
	f.tool(b, "tb_"+w, "Refund a billing charge "+w, time.Time{})
	f.tool("_global", "tg_"+w, "Refund a billing charge "+w, time.Time{})

	for _, tc := range []struct{ tenant, own, other string }{{a, "a", "b"}, {b, "b", "a"}} {
		pr, err := f.s.Prompts(ctx, tc.tenant, search.PromptsRequest{Query: "billing dispute " + w, Limit: 10})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{tc.tenant + "/p" + tc.own + "-" + w, "_global/pg-" + w}, promptIDs(pr, w))
		require.Equal(t, search.Retrieval{Mode: search.Hybrid}, pr.Retrieval)

		tr, err := f.s.Tools(ctx, tc.tenant, search.ToolsRequest{Query: "refund billing " + w})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{tc.tenant + "/t" + tc.own + "_" + w, "_global/tg_" + w}, toolNames(tr, w))

		g, err := f.s.Get(ctx, tc.tenant, search.GetRequest{ID: "p" + tc.own + "-" + w})
		require.NoError(t, err)
		require.Equal(t, tc.tenant, g.Prompt.Tenant)
		_, err = f.s.Get(ctx, tc.tenant, search.GetRequest{ID: "p" + tc.other + "-" + w})
		require.Equal(t, service.CodeNotFound, code(t, err))
		g, err = f.s.Get(ctx, tc.tenant, search.GetRequest{ID: "pg-" + w})
		require.NoError(t, err)
		require.Equal(t, "_global", g.Prompt.Tenant)
		// The bench's anchor runs the same statement, isolation included.
		require.NoError(t, f.s.GetStatement(ctx, tc.tenant, "p"+tc.own+"-"+w))
		require.NoError(t, f.s.GetStatement(ctx, tc.tenant, "pg-"+w))
		require.ErrorIs(t, f.s.GetStatement(ctx, tc.tenant, "p"+tc.other+"-"+w), pgx.ErrNoRows)
	}

	// _global itself sees only _global's rows.
	pr, err := f.s.Prompts(ctx, "_global", search.PromptsRequest{Query: "billing dispute " + w})
	require.NoError(t, err)
	require.Equal(t, []string{"_global/pg-" + w}, promptIDs(pr, w))

	// A tenant's prompt shadows a shared one with the same id, every
	// version of it.
	f.prompt(promptSpec{tenant: "_global", id: "shared-" + w, content: "global v1 " + w})
	f.prompt(promptSpec{tenant: "_global", id: "shared-" + w, version: 2, content: "global v2 " + w})
	f.prompt(promptSpec{tenant: a, id: "shared-" + w, content: "own v1 " + w})
	g, err := f.s.Get(ctx, a, search.GetRequest{ID: "shared-" + w})
	require.NoError(t, err)
	require.Equal(t, ptr("own v1 "+w), g.Rendered)
	_, err = f.s.Get(ctx, a, search.GetRequest{ID: "shared-" + w, Version: 2})
	require.Equal(t, service.CodeNotFound, code(t, err))
	g, err = f.s.Get(ctx, b, search.GetRequest{ID: "shared-" + w})
	require.NoError(t, err)
	require.Equal(t, ptr("global v2 "+w), g.Rendered)
}

func TestQuarantinedToolsAreExcluded(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	f.tool(ten, "flaky_"+w, "Translate text between languages "+w, time.Time{})
	f.tool(ten, "steady_"+w, "Translate text between languages "+w, time.Time{})
	f.tool("_global", "shared_"+w, "Translate text between languages "+w, time.Time{})
	find := func() map[string]string {
		r, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "translate " + w})
		require.NoError(t, err)
		states := map[string]string{}
		for _, x := range r.Results {
			if strings.Contains(x.Tool.Name, w) {
				states[x.Tool.Name] = x.Tool.State
			}
		}
		return states
	}
	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	require.Equal(t, map[string]string{"flaky_" + w: "", "steady_" + w: "", "shared_" + w: ""}, find())

	f.health(ten, "flaky_"+w, "quarantined", true, &future)
	f.health(ten, "steady_"+w, "warning", false, nil)
	f.health("_global", "shared_"+w, "quarantined", true, nil) // _global's quarantine holds for everyone
	require.Equal(t, map[string]string{"steady_" + w: "warning"}, find())

	f.health(ten, "flaky_"+w, "quarantined", true, &past) // expired, the degrader has not said so yet
	require.Equal(t, map[string]string{"flaky_" + w: "probation", "steady_" + w: "warning"}, find())

	f.health(ten, "flaky_"+w, "healthy", false, nil)
	f.health("_global", "shared_"+w, "probation", false, nil)
	require.Equal(t, map[string]string{"flaky_" + w: "healthy", "steady_" + w: "warning", "shared_" + w: "probation"}, find())

	// The tenant's own quarantine of a shared tool hides it for the tenant only.
	f.health(ten, "shared_"+w, "quarantined", true, nil)
	require.NotContains(t, find(), "shared_"+w)
	other, err := f.s.Tools(ctx, testenv.Tenant(t), search.ToolsRequest{Query: "translate " + w})
	require.NoError(t, err)
	require.Equal(t, []string{"_global/shared_" + w}, toolNames(other, w))
}

func TestScoreIsWeightedSumOfComponents(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	now := time.Now()
	p1 := f.prompt(promptSpec{tenant: ten, id: "one-" + w, content: "Write release notes from merged pull requests " + w, createdAt: now.Add(-14 * 24 * time.Hour)})
	f.prompt(promptSpec{tenant: ten, id: "two-" + w, content: "Write a haiku about release day " + w, createdAt: now.Add(-time.Minute)})
	// Both figures of p1 count, weighted by calls: (0.9×30 + 0.3×10)/40 = 0.75.
	f.quality(ten, "prompt", p1.Hash, 0.9, 30, now.Add(-7*24*time.Hour), nil)
	f.quality(ten, "prompt", p1.ID+"@1", 0.3, 10, now.Add(-8*24*time.Hour), nil)
	f.tool(ten, "notes_"+w, "Publish release notes "+w, now.Add(-30*24*time.Hour))
	f.quality(ten, "tool", "notes_"+w, 0.8, 5, now, ptr(now.Add(-7*24*time.Hour)))

	r, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "release notes " + w, Limit: search.MaxPromptLimit})
	require.NoError(t, err)
	require.Equal(t, []string{ten + "/one-" + w, ten + "/two-" + w}, promptIDs(r, w))
	wts := search.DefaultPromptWeights
	for _, x := range r.Results {
		c := x.Components
		require.Equal(t, wts.Similarity*c.Similarity+wts.Quality*c.Quality+wts.Recency*c.Recency+wts.Usage*c.Usage, x.Score, x.Prompt.ID)
		for _, v := range []float64{c.Similarity, c.Quality, c.Recency, c.Usage} {
			require.True(t, v >= 0 && v <= 1, "%+v", c)
		}
	}
	byID := map[string]search.Components{}
	for _, x := range r.Results {
		byID[x.Prompt.ID] = x.Components
	}
	one, two := byID["one-"+w], byID["two-"+w]
	require.InDelta(t, 0.75, one.Quality, 1e-12)
	require.Equal(t, search.DefaultNeutralQuality, two.Quality)
	require.InDelta(t, 0.5, one.Recency, 0.001) // last used 7 days ago, one half-life
	require.InDelta(t, 1, two.Recency, 0.001)
	require.Equal(t, 1.0, one.Usage) // the most used candidate
	require.Equal(t, 0.0, two.Usage)
	// Similarity is the mean of the vectors' cosine (halfvec in the
	// database: float16's rounding) and the full-text coverage (1: every
	// query word is in it), whatever the candidates' ranks.
	vecs, err := lexical.Embed(ctx, []string{"release notes " + w, p1.ID + " " + p1.Description + " " + p1.Content})
	require.NoError(t, err)
	cos := 0.0
	for i := range vecs[0] {
		cos += float64(vecs[0][i]) * float64(vecs[1][i])
	}
	require.InDelta(t, 0.5*cos+0.5, one.Similarity, 2e-3)
	require.Less(t, two.Similarity, one.Similarity)

	tr, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "release notes " + w, Limit: search.MaxToolLimit})
	require.NoError(t, err)
	require.Equal(t, []string{ten + "/notes_" + w}, toolNames(tr, w))
	var x search.ToolResult // other tests' _global tools may be found too
	for _, y := range tr.Results {
		if y.Tool.Tenant == ten {
			x = y
		}
	}
	tw := search.DefaultToolWeights
	c := x.Components
	require.Equal(t, tw.Similarity*c.Similarity+tw.Quality*c.Quality+tw.Recency*c.Recency+tw.Usage*c.Usage, x.Score)
	require.InDelta(t, 0.5, c.Recency, 0.001) // from the last success, not the registration
	require.Equal(t, 0.8, c.Quality)
	require.Equal(t, ptr(0.8), x.Tool.QualityScore)
}

func ptr[T any](v T) *T { return &v }

// In a small catalogue every prompt is a candidate of both arms; a
// better-rated prompt on another subject must not outrank the one that
// matches the query, both in use. (With the fused rank as the
// similarity, the 2nd of three scored 0.98 against 1 and the better
// quality won.)
func TestRelevanceOutweighsAQualityGap(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	now := time.Now()
	created := now.Add(-time.Hour)
	sql := f.prompt(promptSpec{tenant: ten, id: "sql-repair-" + w, createdAt: created, description: "Repair a failing SQL query " + w,
		content: "The following {{.Dialect}} query failed. Query: {{.Query}} Error: {{.Error}} Return the corrected query in a single sql block " + w})
	web := f.prompt(promptSpec{tenant: ten, id: "web-search-tool-" + w, createdAt: created, description: "Describe the web search tool to the model " + w,
		content: "Use web_search when the answer needs current information. Write the query as keywords, not a question; cite the results you use " + w})
	f.prompt(promptSpec{tenant: ten, id: "ticket-summary-" + w, createdAt: created, description: "Summarise a support ticket " + w,
		content: "Summarise this support ticket in three bullet points: the problem, what was tried, what the customer wants " + w})
	f.quality(ten, "prompt", web.Hash, 0.82, 12, now, nil)
	f.quality(ten, "prompt", sql.Hash, 0.6, 10, now, nil)

	r, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "fix a failing SQL query " + w, Limit: search.MaxPromptLimit})
	require.NoError(t, err)
	ids := promptIDs(r, w)
	require.Len(t, ids, 3)
	require.Equal(t, ten+"/"+sql.ID, ids[0], "%+v", r.Results)
	require.Equal(t, ten+"/"+web.ID, ids[1], "quality and usage still rank it above the third")
}

func TestRankingOrder(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	now := time.Now()
	// Same words: similarity alone cannot separate them much; quality
	// and recency decide.
	desc := "Look up the shipping status of an order " + w
	f.tool(ten, "track_a_"+w, desc, now.Add(-60*24*time.Hour))
	f.tool(ten, "track_b_"+w, desc, now.Add(-60*24*time.Hour))
	f.tool(ten, "track_c_"+w, desc, now.Add(-60*24*time.Hour))
	f.quality(ten, "tool", "track_a_"+w, 0.2, 50, now, ptr(now.Add(-60*24*time.Hour)))
	f.quality(ten, "tool", "track_b_"+w, 0.95, 50, now, ptr(now.Add(-time.Hour)))
	f.quality(ten, "tool", "track_c_"+w, 0.95, 50, now, ptr(now.Add(-30*24*time.Hour)))
	f.tool(ten, "weather_"+w, "Weather forecast for a city "+w, now)

	r, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "shipping status of my order " + w})
	require.NoError(t, err)
	// weather shares one word of four with the query: its similarity
	// (about a quarter of the query's IDF, a distant vector) keeps it
	// behind every track tool, even the poor, stale track_a (quality 0.2,
	// 60 days old) against a fresh weather tool of neutral quality; among
	// the track tools, alike in similarity, quality and recency decide.
	require.Equal(t, []string{ten + "/track_b_" + w, ten + "/track_c_" + w, ten + "/track_a_" + w, ten + "/weather_" + w}, toolNames(r, w))

	// min_quality drops the poor tool; a tool with no figures counts as
	// neutral (the scorer's quality for no observations, 0.25).
	r, err = f.s.Tools(ctx, ten, search.ToolsRequest{Query: "shipping status of my order " + w, MinQuality: search.DefaultNeutralQuality, ExcludeNames: []string{"track_c_" + w}})
	require.NoError(t, err)
	require.Equal(t, []string{ten + "/track_b_" + w, ten + "/weather_" + w}, toolNames(r, w))

	// Limit cuts after sorting.
	r, err = f.s.Tools(ctx, ten, search.ToolsRequest{Query: "shipping status of my order " + w, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []string{ten + "/track_b_" + w}, toolNames(r, w))
}

func TestPromptVersionsAndLabels(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	id := "greet-" + w
	for v := 1; v <= 3; v++ {
		f.prompt(promptSpec{tenant: ten, id: id, version: v, content: fmt.Sprintf("Greet the visitor warmly, version %d %s", v, w)})
	}
	get := func(req search.GetRequest) (int, error) {
		req.ID = id
		g, err := f.s.Get(ctx, ten, req)
		return g.Prompt.Version, err
	}
	searchVersions := func() []int {
		r, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "greet visitor " + w})
		require.NoError(t, err)
		var vs []int
		for _, x := range r.Results {
			if x.Prompt.ID == id {
				vs = append(vs, x.Prompt.Version)
			}
		}
		return vs
	}
	v, err := get(search.GetRequest{})
	require.NoError(t, err)
	require.Equal(t, 3, v, "no production label: the latest")
	require.Equal(t, []int{3}, searchVersions())

	_, err = library.SetLabel(ctx, f.pool, ten, id, "production", 2, 10, "l1", time.Now())
	require.NoError(t, err)
	_, err = library.SetLabel(ctx, f.pool, ten, id, "staging", 1, 11, "l2", time.Now())
	require.NoError(t, err)
	f.s.PromptChanged(ten, id)
	for _, tc := range []struct {
		name string
		req  search.GetRequest
		want int
		code string
	}{
		{"default is production", search.GetRequest{}, 2, ""},
		{"label", search.GetRequest{Label: "staging"}, 1, ""},
		{"latest is implicit", search.GetRequest{Label: "latest"}, 3, ""},
		{"version", search.GetRequest{Version: 3}, 3, ""},
		{"unknown label", search.GetRequest{Label: "canary"}, 0, service.CodeNotFound},
		{"unknown version", search.GetRequest{Version: 9}, 0, service.CodeNotFound},
		{"version and label", search.GetRequest{Version: 1, Label: "staging"}, 0, service.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := get(tc.req)
			if tc.code != "" {
				require.Equal(t, tc.code, code(t, err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, v)
		})
	}
	g, err := f.s.Get(ctx, ten, search.GetRequest{ID: id})
	require.NoError(t, err)
	require.Equal(t, []string{"production"}, g.Prompt.Labels)
	require.Equal(t, []int{2}, searchVersions(), "search returns the production version")
}

// TestGetFreshReadsPastTheCache: a change another indexer copy made (here:
// the database changed behind the cache, as when this copy has not heard
// the result yet) is read by a request with fresh, which also refreshes
// the cached answer for later requests.
func TestGetFreshReadsPastTheCache(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	id := "fresh-" + w
	for v := 1; v <= 2; v++ {
		f.prompt(promptSpec{tenant: ten, id: id, version: v, content: fmt.Sprintf("Answer briefly, version %d %s", v, w)})
	}
	get := func(fresh bool) int {
		t.Helper()
		g, err := f.s.Get(ctx, ten, search.GetRequest{ID: id, Fresh: fresh})
		require.NoError(t, err)
		return g.Prompt.Version
	}
	require.Equal(t, 2, get(false), "no production label: the latest")
	_, err := library.SetLabel(ctx, f.pool, ten, id, "production", 1, 10, "l1", time.Now())
	require.NoError(t, err)
	require.Equal(t, 2, get(false), "the cached answer, as the copy has not heard of the move")
	require.Equal(t, 1, get(true), "fresh reads the database")
	require.Equal(t, 1, get(false), "and the fresh answer replaced the cached one")
}

func TestRendering(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	f.prompt(promptSpec{tenant: ten, id: "hello-" + w, content: "Hello {{.name}}, you have {{.count}} messages " + w,
		params: []library.Param{{Name: "name", Type: "string", Required: true}, {Name: "count", Type: "integer", Default: 0.0}}})
	f.prompt(promptSpec{tenant: ten, id: "plain-" + w, content: "Hello messages without parameters " + w})

	for _, tc := range []struct {
		name   string
		params map[string]any
		want   string
		code   string
	}{
		{"given and default", map[string]any{"name": "Ada"}, "Hello Ada, you have 0 messages " + w, ""},
		{"all given", map[string]any{"name": "Ada", "count": 3.0}, "Hello Ada, you have 3 messages " + w, ""},
		{"missing", map[string]any{}, "", service.CodeRendering},
		{"no params: the prompt without rendering", nil, "", ""},
		{"wrong type", map[string]any{"name": 5.0}, "", service.CodeRendering},
		{"extra", map[string]any{"name": "Ada", "colour": "red"}, "", service.CodeRendering},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := f.s.Get(ctx, ten, search.GetRequest{ID: "hello-" + w, Params: tc.params})
			if tc.code != "" {
				require.Equal(t, tc.code, code(t, err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, "hello-"+w, g.Prompt.ID)
			if tc.params == nil {
				require.Nil(t, g.Rendered)
				return
			}
			require.Equal(t, ptr(tc.want), g.Rendered)
		})
	}

	// In a search, params that fit one prompt and not another render the
	// first and report the second, without failing the search.
	r, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "hello messages " + w, Params: map[string]any{"name": "Ada"}})
	require.NoError(t, err)
	rendered := map[string]*string{}
	for _, x := range r.Results {
		rendered[x.Prompt.ID] = x.Rendered
	}
	require.Contains(t, rendered, "plain-"+w)
	require.Equal(t, ptr("Hello Ada, you have 0 messages "+w), rendered["hello-"+w])
	require.Nil(t, rendered["plain-"+w])
	var errs []search.RenderError
	for _, e := range r.RenderErrors {
		if strings.Contains(e.ID, w) {
			errs = append(errs, e)
		}
	}
	require.Len(t, errs, 1)
	require.Equal(t, "plain-"+w, errs[0].ID)
	require.Equal(t, service.CodeRendering, errs[0].Code)
	require.Contains(t, errs[0].Message, "unknown parameter(s) name")

	// Without params nothing is rendered.
	r, err = f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "hello messages " + w})
	require.NoError(t, err)
	for _, x := range r.Results {
		require.Nil(t, x.Rendered)
	}
	require.Empty(t, r.RenderErrors)
}

// While a provider's model changes dimension behind its name (until
// agentq reindex has re-embedded every row), rows of the model are at two
// dimensions: a search reads only those of its query's, through that
// dimension's index, and finds the others by their words; none is cast
// to a dimension it does not have, which would fail the search.
func TestMixedDimensionsOfOneModel(t *testing.T) {
	srv := providertest.New(t)
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	model := "test-mixed-" + w
	open := func(dim int) *fixture {
		srv.SetDimension(dim)
		pe, err := provider.NewEmbedder(provider.EmbedOptions{Options: provider.Options{BaseURL: srv.URL, Model: model, MaxRetries: 1}})
		require.NoError(t, err)
		return newFixture(t, embed.Provider(pe), search.Options{CacheSize: -1})
	}
	f8 := open(8)
	f8.prompt(promptSpec{tenant: ten, id: "old-" + w, content: "Explain a slow SQL query plan " + w})
	f8.tool(ten, "old_"+w, "Explain a slow SQL query plan "+w, time.Time{})
	f16 := open(16)
	f16.prompt(promptSpec{tenant: ten, id: "new-" + w, content: "Explain a slow SQL query plan " + w})
	f16.tool(ten, "new_"+w, "Explain a slow SQL query plan "+w, time.Time{})

	r, err := f16.s.Prompts(ctx, ten, search.PromptsRequest{Query: "slow query plan " + w, Limit: search.MaxPromptLimit})
	require.NoError(t, err)
	require.Equal(t, search.Retrieval{Mode: search.Hybrid}, r.Retrieval)
	require.Equal(t, []string{ten + "/new-" + w, ten + "/old-" + w}, promptIDs(r, w), "the 8-dimension row by its words, behind")
	tr, err := f16.s.Tools(ctx, ten, search.ToolsRequest{Query: "slow query plan " + w, Limit: search.MaxToolLimit})
	require.NoError(t, err)
	require.Equal(t, search.Retrieval{Mode: search.Hybrid}, tr.Retrieval)
	require.Equal(t, []string{ten + "/new_" + w, ten + "/old_" + w}, toolNames(tr, w))
	vec, err := f16.s.WithMode(search.Vector).Prompts(ctx, ten, search.PromptsRequest{Query: "slow query plan " + w, Limit: search.MaxPromptLimit})
	require.NoError(t, err)
	require.Equal(t, []string{ten + "/new-" + w}, promptIDs(vec, w), "the vector arm reads the query's dimension only")
}

func TestProviderDownFallsBackToLexical(t *testing.T) {
	srv := providertest.New(t)
	srv.SetDimension(16)
	pe, err := provider.NewEmbedder(provider.EmbedOptions{Options: provider.Options{BaseURL: srv.URL, Model: "test-embed-16", MaxRetries: 1}})
	require.NoError(t, err)
	emb := embed.Provider(pe)
	f := newFixture(t, emb, search.Options{EmbedTimeout: 2 * time.Second, CacheSize: -1})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	f.prompt(promptSpec{tenant: ten, id: "sql-" + w, content: "Explain a slow SQL query plan " + w})
	f.tool(ten, "explain_"+w, "Explain a slow SQL query plan "+w, time.Time{})

	r, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "slow query plan " + w})
	require.NoError(t, err)
	require.Equal(t, search.Retrieval{Mode: search.Hybrid}, r.Retrieval)
	require.Equal(t, []string{ten + "/sql-" + w}, promptIDs(r, w))

	srv.SetFailing(503, "")
	r, err = f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "slow query plan " + w})
	require.NoError(t, err)
	require.Equal(t, search.Lexical, r.Retrieval.Mode)
	require.True(t, r.Retrieval.Degraded)
	require.Contains(t, r.Retrieval.Reason, "embedding provider unavailable (test-embed-16)")
	require.Equal(t, []string{ten + "/sql-" + w}, promptIDs(r, w))
	require.Equal(t, 1.0, r.Results[0].Components.Similarity, "first in the only arm")
	tr, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "slow query plan " + w})
	require.NoError(t, err)
	require.True(t, tr.Retrieval.Degraded)
	require.Equal(t, []string{ten + "/explain_" + w}, toolNames(tr, w))
	// Ranked as a lexical search ranks ("zebra" is in no tool, so the
	// hybrid's coverage weighting would tell).
	tr, err = f.s.Tools(ctx, ten, search.ToolsRequest{Query: "slow query plan zebra " + w})
	require.NoError(t, err)
	require.True(t, tr.Retrieval.Degraded)
	lr, err := f.s.WithMode(search.Lexical).Tools(ctx, ten, search.ToolsRequest{Query: "slow query plan zebra " + w})
	require.NoError(t, err)
	require.NotEmpty(t, lr.Results)
	require.Equal(t, len(lr.Results), len(tr.Results))
	for i := range lr.Results {
		require.Equal(t, lr.Results[i].Tool, tr.Results[i].Tool)
		require.Equal(t, lr.Results[i].Components.Similarity, tr.Results[i].Components.Similarity, tr.Results[i].Tool.Name)
	}

	srv.Down()
	r, err = f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "slow query plan " + w})
	require.NoError(t, err)
	require.True(t, r.Retrieval.Degraded)

	require.NoError(t, srv.Up())
	srv.SetFailing(0, "")
	r, err = f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "slow query plan " + w})
	require.NoError(t, err)
	require.Equal(t, search.Retrieval{Mode: search.Hybrid}, r.Retrieval)
}

func TestQueryEmbeddingCache(t *testing.T) {
	srv := providertest.New(t)
	pe, err := provider.NewEmbedder(provider.EmbedOptions{Options: provider.Options{BaseURL: srv.URL, Model: "test-embed-8"}})
	require.NoError(t, err)
	f := newFixture(t, embed.Provider(pe), search.Options{CacheSize: 2})
	ctx := context.Background()
	ten := testenv.Tenant(t)
	before := srv.EmbeddingRequests()
	for _, q := range []string{"a b", "a b", "c d", "a b", "e f", "c d"} {
		_, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: q})
		require.NoError(t, err)
	}
	// Misses: a b, c d, e f (which evicts c d, the least recently used),
	// c d again.
	require.Equal(t, 4, srv.EmbeddingRequests()-before)
}

func TestBadRequests(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten := testenv.Tenant(t)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"prompts: no query", func() error { _, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "  "}); return err }},
		{"prompts: limit", func() error {
			_, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "x", Limit: 51})
			return err
		}},
		{"prompts: type", func() error {
			_, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "x", Type: "poem"})
			return err
		}},
		{"prompts: tenant", func() error { _, err := f.s.Prompts(ctx, "Bad Tenant", search.PromptsRequest{Query: "x"}); return err }},
		{"tools: limit", func() error { _, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "x", Limit: 101}); return err }},
		{"tools: negative limit", func() error { _, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "x", Limit: -1}); return err }},
		{"tools: min_quality", func() error {
			_, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "x", MinQuality: 1.5})
			return err
		}},
		{"get: no id", func() error { _, err := f.s.Get(ctx, ten, search.GetRequest{}); return err }},
		{"get: bad label", func() error { _, err := f.s.Get(ctx, ten, search.GetRequest{ID: "x", Label: "Prod!"}); return err }},
		{"get: tenant", func() error { _, err := f.s.Get(ctx, "", search.GetRequest{ID: "x"}); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, service.CodeBadRequest, code(t, tc.call()))
		})
	}
	// Stop words only: a valid query that no word matches.
	r, err := f.s.WithMode(search.Lexical).Prompts(ctx, ten, search.PromptsRequest{Query: "the of and"})
	require.NoError(t, err)
	require.Empty(t, r.Results)
}

func TestFiltersByTypeAndTags(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	f.prompt(promptSpec{tenant: ten, id: "a-" + w, typ: "system", tags: []string{"support", "en"}, content: "Support agent persona " + w})
	f.prompt(promptSpec{tenant: ten, id: "b-" + w, typ: "task", tags: []string{"support"}, content: "Support ticket triage " + w})
	f.prompt(promptSpec{tenant: ten, id: "c-" + w, typ: "system", content: "Support escalation " + w})
	for _, tc := range []struct {
		req  search.PromptsRequest
		want []string
	}{
		{search.PromptsRequest{Type: "system"}, []string{"a-" + w, "c-" + w}},
		{search.PromptsRequest{Tags: []string{"support"}}, []string{"a-" + w, "b-" + w}},
		{search.PromptsRequest{Type: "system", Tags: []string{"support", "en"}}, []string{"a-" + w}},
		{search.PromptsRequest{Tags: []string{"fr"}}, nil},
	} {
		tc.req.Query = "support " + w
		r, err := f.s.Prompts(ctx, ten, tc.req)
		require.NoError(t, err)
		var ids []string
		for _, x := range r.Results {
			ids = append(ids, x.Prompt.ID)
		}
		require.ElementsMatch(t, tc.want, ids, "%+v", tc.req)
	}
}

// TestEndpoints serves the three endpoints on a real NATS server with
// schema validation, and checks every reply against its response schema.
func TestEndpoints(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	svc, err := service.New(n.NC, service.Options{Name: "search", Validator: reg, Log: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	require.NoError(t, f.s.Register(svc))

	ten, w := testenv.Tenant(t), word(t)
	f.prompt(promptSpec{tenant: ten, id: "ask-" + w, content: "Ask {{.who}} for the invoice " + w, description: "invoice chaser",
		tags: []string{"billing"}, params: []library.Param{{Name: "who", Type: "string", Required: true, Description: "person"}}})
	f.tool(ten, "invoice_"+w, "Fetch an invoice by number "+w, time.Time{})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := func(subject, req, schema string) (json.RawMessage, error) {
		t.Helper()
		var raw json.RawMessage
		err := service.Call(ctx, n.NC, subject+"."+ten, json.RawMessage(req), &raw)
		if err == nil {
			require.NoError(t, reg.Validate(schema, raw), string(raw))
		}
		return raw, err
	}
	raw, err := call("search.prompts", `{"query":"chase the invoice `+w+`","params":{"who":"Bob"}}`, "agentq.search.prompts.response.v1")
	require.NoError(t, err)
	var pr search.PromptsResponse
	require.NoError(t, json.Unmarshal(raw, &pr))
	require.Equal(t, []string{ten + "/ask-" + w}, promptIDs(pr, w))
	require.Equal(t, ptr("Ask Bob for the invoice "+w), pr.Results[0].Rendered)

	raw, err = call("search.tools", `{"query":"invoice `+w+`","limit":3}`, "agentq.search.tools.response.v1")
	require.NoError(t, err)
	var tr search.ToolsResponse
	require.NoError(t, json.Unmarshal(raw, &tr))
	require.Equal(t, []string{ten + "/invoice_" + w}, toolNames(tr, w))

	raw, err = call("prompts.get", `{"id":"ask-`+w+`","params":{"who":"Eve"}}`, "agentq.prompts.get.response.v1")
	require.NoError(t, err)
	var g search.GetResponse
	require.NoError(t, json.Unmarshal(raw, &g))
	require.Equal(t, ptr("Ask Eve for the invoice "+w), g.Rendered)

	// Without params: the prompt, unrendered (it needs "who").
	raw, err = call("prompts.get", `{"id":"ask-`+w+`"}`, "agentq.prompts.get.response.v1")
	require.NoError(t, err)
	g = search.GetResponse{}
	require.NoError(t, json.Unmarshal(raw, &g))
	require.Equal(t, "ask-"+w, g.Prompt.ID)
	require.Nil(t, g.Rendered)

	for _, tc := range []struct{ subject, req, code string }{
		{"search.prompts", `{"query":""}`, service.CodeBadRequest},
		{"search.prompts", `{"query":"x","limit":500}`, service.CodeBadRequest},
		{"search.tools", `{"limit":5}`, service.CodeBadRequest},
		{"prompts.get", `{"id":"nope-` + w + `"}`, service.CodeNotFound},
		{"prompts.get", `{"id":"ask-` + w + `","params":{}}`, service.CodeRendering},
		{"prompts.get", `{"id":"ask-` + w + `","version":1,"label":"production"}`, service.CodeBadRequest},
		{"search.prompts", `{"query":`, service.CodeBadRequest},                // not JSON
		{"search.tools", `["invoice"]`, service.CodeBadRequest},                // not an object
		{"search.prompts", `{"query":"x","limit":-1}`, service.CodeBadRequest}, // out of range
		{"search.tools", `{"query":"x","min_quality":2}`, service.CodeBadRequest},
		{"prompts.get", `{"id":""}`, service.CodeBadRequest},
	} {
		_, err := call(tc.subject, tc.req, "")
		require.Equal(t, tc.code, code(t, err), "%s %s", tc.subject, tc.req)
	}
	// A tenant that is not one ([a-z0-9_-]{1,64}) is answered, not left to
	// time out.
	for _, subject := range []string{"search.prompts.Not_A_Tenant", "search.tools." + strings.Repeat("t", 65), "prompts.get.T"} {
		var raw json.RawMessage
		err := service.Call(ctx, n.NC, subject, json.RawMessage(`{"query":"invoice","id":"x"}`), &raw)
		require.Equal(t, service.CodeBadRequest, code(t, err), subject)
	}
}

// TestGetCacheFollowsResults: a prompts.get answer is kept until the
// prompt's prompt.indexed result is heard (another indexer copy moved its
// label), then read afresh; a _global prompt's result refreshes every
// tenant's answer.
func TestGetCacheFollowsResults(t *testing.T) {
	ctx := context.Background()
	n := testenv.StartNATS(t)
	f := newFixture(t, lexical, search.Options{})
	stop, err := f.s.FollowPromptChanges(n.NC)
	require.NoError(t, err)
	t.Cleanup(stop)
	reg, err := schemas.Load()
	require.NoError(t, err)
	tenant := testenv.Tenant(t)
	id := "greet-" + word(t)
	for _, owner := range []string{tenant, "_global"} {
		gid := id
		if owner == "_global" {
			gid += "-shared"
		}
		for v := 1; v <= 2; v++ {
			f.prompt(promptSpec{tenant: owner, id: gid, version: v, content: fmt.Sprintf("Hello, version %d.", v)})
		}
		version := func() int {
			r, err := f.s.Get(ctx, tenant, search.GetRequest{ID: gid})
			require.NoError(t, err)
			return r.Prompt.Version
		}
		require.Equal(t, 2, version(), "%s: the latest", owner)

		// Another copy moves production to 1: the database changes, this
		// copy has not heard of it yet and answers from its cache.
		_, err = library.SetLabel(ctx, f.pool, owner, gid, "production", 1, uint64(100+len(owner)), "move-"+owner, time.Now())
		require.NoError(t, err)
		require.Equal(t, 2, version(), "%s: cached", owner)

		// What the indexer publishes for an activation (the schema checks
		// the shape).
		ev, err := bus.NewEvent(bus.Type("prompt", "indexed"), owner, "indexer", map[string]any{
			"prompt_id": gid, "version": 1, "content_hash": strings.Repeat("ab", 32), "type": "task", "name": gid,
			"outcome": "unchanged", "labels": []string{"production"}})
		require.NoError(t, err)
		require.NoError(t, reg.Validate(ev.Type(), ev.Data()))
		msg, err := bus.Encode(ev)
		require.NoError(t, err)
		require.NoError(t, n.NC.PublishMsg(msg))
		require.Eventually(t, func() bool { return version() == 1 }, 10*time.Second, 5*time.Millisecond, "%s: the result refreshes the answer", owner)
	}
}
