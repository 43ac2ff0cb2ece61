package search_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
)

// A tenant's own prompt or tool shadows the _global one of the same id or
// name in search as in prompts.get: search returns the tenant's alone, so
// a result's id always names what prompts.get (or a call by name) gives.
// A figure the tenant's agents reported by <id>@<version> is about the
// tenant's own prompt and never lends its quality to the _global copy.
func TestTenantShadowsGlobalInSearch(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	a, b, w := testenv.Tenant(t), testenv.Tenant(t), word(t)
	shared := "shared-" + w
	f.prompt(promptSpec{tenant: "_global", id: shared, content: "Draft a polite refund reply " + w})
	own := f.prompt(promptSpec{tenant: a, id: shared, content: "Draft a refund reply in our house style " + w})
	// a's agents used their own shared@1 and rated it highly.
	f.quality(a, "prompt", shared+"@1", 0.9, 20, time.Now(), nil)
	f.tool("_global", "refund_"+w, "Refund a card payment "+w, time.Time{})
	f.tool(a, "refund_"+w, "Refund a card payment through our gateway "+w, time.Time{})
	f.quality(a, "tool", "refund_"+w, 0.9, 20, time.Now(), ptr(time.Now()))

	pr, err := f.s.Prompts(ctx, a, search.PromptsRequest{Query: "refund reply " + w, Limit: search.MaxPromptLimit})
	require.NoError(t, err)
	require.Equal(t, []string{a + "/" + shared}, promptIDs(pr, w), "the _global prompt is shadowed")
	require.Equal(t, own.Hash, pr.Results[0].Prompt.Hash)
	require.InDelta(t, 0.9, pr.Results[0].Components.Quality, 1e-12)
	g, err := f.s.Get(ctx, a, search.GetRequest{ID: shared})
	require.NoError(t, err)
	require.Equal(t, own.Hash, g.Prompt.Hash, "search and prompts.get agree")

	tr, err := f.s.Tools(ctx, a, search.ToolsRequest{Query: "refund payment " + w, Limit: search.MaxToolLimit})
	require.NoError(t, err)
	require.Equal(t, []string{a + "/refund_" + w}, toolNames(tr, w), "the _global tool is shadowed")

	// Every other tenant sees the _global ones, without a's figures.
	pr, err = f.s.Prompts(ctx, b, search.PromptsRequest{Query: "refund reply " + w, Limit: search.MaxPromptLimit})
	require.NoError(t, err)
	require.Equal(t, []string{"_global/" + shared}, promptIDs(pr, w))
	require.Equal(t, search.DefaultNeutralQuality, pr.Results[0].Components.Quality)
	tr, err = f.s.Tools(ctx, b, search.ToolsRequest{Query: "refund payment " + w, Limit: search.MaxToolLimit})
	require.NoError(t, err)
	require.Equal(t, []string{"_global/refund_" + w}, toolNames(tr, w))
	require.Nil(t, tr.Results[0].Tool.QualityScore)

	// The full-text arm alone shadows too (the filter is the arms').
	lr, err := f.s.WithMode(search.Lexical).Prompts(ctx, a, search.PromptsRequest{Query: "refund reply " + w, Limit: search.MaxPromptLimit})
	require.NoError(t, err)
	require.Equal(t, []string{a + "/" + shared}, promptIDs(lr, w))
}

// Queries a client can send must be answered: a bad_request for what is
// not text, results otherwise, never an internal error.
func TestHostileQueries(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	f.prompt(promptSpec{tenant: ten, id: "guide-" + w, content: "Platform support guide: answer questions about supported platforms " + w})
	f.tool(ten, "platforms_"+w, "List the supported platforms of the support guide "+w, time.Time{})

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"prompts: NUL", func() error {
			_, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "platform\x00 guide"})
			return err
		}},
		{"tools: NUL", func() error { _, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "\x00"}); return err }},
		{"prompts: not UTF-8", func() error {
			_, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "guide \xff\xfe"})
			return err
		}},
		{"prompts: NUL in a tag", func() error {
			_, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "guide", Tags: []string{"a\x00"}})
			return err
		}},
		{"tools: NUL in exclude_names", func() error {
			_, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "guide", ExcludeNames: []string{"x\x00"}})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, service.CodeBadRequest, code(t, tc.call()))
		})
	}

	// A pasted heading rule: a long run of "-" is not 40 negations (which
	// websearch_to_tsquery cannot hold: "tsquery stack too small").
	for _, q := range []string{
		"# " + strings.Repeat("-", 80) + " # PLATFORM SUPPORT GUIDE " + w,
		strings.Repeat("- ", 40) + "platform support guide " + w,
		"platform support guide " + w + " " + strings.Repeat("-!", 40),
		`"platform support guide" ` + w + " " + strings.Repeat("-", 2000-40),
	} {
		for _, mode := range []search.Mode{search.Hybrid, search.Lexical} {
			s := f.s.WithMode(mode)
			pr, err := s.Prompts(ctx, ten, search.PromptsRequest{Query: q})
			require.NoError(t, err, "%s %.60q", mode, q)
			require.Equal(t, search.Retrieval{Mode: mode}, pr.Retrieval)
			require.Equal(t, []string{ten + "/guide-" + w}, promptIDs(pr, w), "%s %.60q", mode, q)
			tr, err := s.Tools(ctx, ten, search.ToolsRequest{Query: q})
			require.NoError(t, err, "%s %.60q", mode, q)
			require.Equal(t, []string{ten + "/platforms_" + w}, toolNames(tr, w), "%s %.60q", mode, q)
		}
	}
}

// syncBuffer is a log sink tests read while searches write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the logged lines at level.
func (s *syncBuffer) lines(level string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		var e struct {
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Level == level {
			out = append(out, l)
		}
	}
	return out
}

// A query with nothing to embed is a fact about the query, not an outage:
// answered by full text (degraded: the mode is not the usual one) with a
// reason naming the query, counted, and not logged above debug. An
// embedder outage is counted per search and logged at most once per
// interval however many clients search.
func TestUnembeddedQueriesDoNotFloodTheLog(t *testing.T) {
	srv := providertest.New(t)
	srv.SetDimension(16)
	pe, err := provider.NewEmbedder(provider.EmbedOptions{Options: provider.Options{BaseURL: srv.URL, Model: "test-embed-16", MaxRetries: 1}})
	require.NoError(t, err)
	ctx := context.Background()
	pool := testenv.Pool(t)
	require.NoError(t, search.EnsureIndexes(ctx, pool, search.Embedders{Prompts: lexical, Tools: lexical}, search.IndexOptions{}))
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	ten := testenv.Tenant(t)

	s, err := search.New(pool, search.Embedders{Prompts: lexical, Tools: lexical}, search.Options{Registerer: reg}, log)
	require.NoError(t, err)
	for range 50 {
		r, err := s.Tools(ctx, ten, search.ToolsRequest{Query: "?? -- !!"})
		require.NoError(t, err)
		require.Equal(t, search.Lexical, r.Retrieval.Mode)
		require.True(t, r.Retrieval.Degraded, "mode is not the usual one")
		require.Contains(t, r.Retrieval.Reason, "the query has no words to embed", "the query, not a fault")
	}
	require.Empty(t, logs.lines("warn"))
	require.Equal(t, 50.0, testenv.CounterValue(reg, "agentq_search_arm_skipped_total", map[string]string{"arm": "vector", "reason": "no_words"}))

	srv.SetFailing(503, "")
	reg2 := prometheus.NewRegistry()
	down, err := search.New(pool, search.Embedders{Prompts: embed.Provider(pe), Tools: embed.Provider(pe)},
		search.Options{Registerer: reg2, CacheSize: -1}, log)
	require.NoError(t, err)
	for range 20 {
		r, err := down.Tools(ctx, ten, search.ToolsRequest{Query: "refund a payment"})
		require.NoError(t, err)
		require.True(t, r.Retrieval.Degraded)
	}
	require.Len(t, logs.lines("warn"), 1, "one line for the outage, not one per search")
	require.Equal(t, 20.0, testenv.CounterValue(reg2, "agentq_search_arm_skipped_total", map[string]string{"arm": "vector", "reason": "embedder_unavailable"}))
}

// A time in the future (an agent's clock, or a publisher lying about
// ce-time) must not pin a candidate's recency at 1: recency measures how
// far from now a candidate was last created or used, either way.
func TestFutureTimesDoNotPinRecency(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	now := time.Now()
	year := 365 * 24 * time.Hour
	f.prompt(promptSpec{tenant: "_global", id: "future-" + w, content: "Summarise a meeting transcript " + w, createdAt: now.Add(year)})
	f.prompt(promptSpec{tenant: ten, id: "honest-" + w, content: "Summarise a meeting transcript " + w, createdAt: now.Add(-time.Hour)})
	f.tool("_global", "future_"+w, "Summarise a meeting transcript "+w, now.Add(year))
	f.tool(ten, "used_"+w, "Summarise a meeting transcript "+w, now.Add(-30*24*time.Hour))
	f.quality(ten, "tool", "used_"+w, 0.5, 3, now, ptr(now.Add(year))) // a last success "next year"

	pr, err := f.s.Prompts(ctx, ten, search.PromptsRequest{Query: "meeting transcript " + w})
	require.NoError(t, err)
	rec := map[string]float64{}
	for _, x := range pr.Results {
		rec[x.Prompt.ID] = x.Components.Recency
	}
	require.Less(t, rec["future-"+w], 0.01, "a year ahead is as far from now as a year ago")
	require.InDelta(t, 1, rec["honest-"+w], 0.01)
	require.Equal(t, []string{ten + "/honest-" + w, "_global/future-" + w}, promptIDs(pr, w))

	tr, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "meeting transcript " + w})
	require.NoError(t, err)
	for _, x := range tr.Results {
		if strings.Contains(x.Tool.Name, w) {
			require.Less(t, x.Components.Recency, 0.01, x.Tool.Name)
		}
	}
}

// The scorer gives a target with no observations quality.NoEvidence, and
// search gives a candidate with no figures the same value: one successful
// call rated 0.8 (quality 0.4, more evidence of worth than none) must not
// rank a tool below an unused one that matches the query less well.
func TestNoEvidenceIsOneNeutralValue(t *testing.T) {
	require.Equal(t, quality.NoEvidence, (&quality.Metrics{}).Quality())
	require.Equal(t, quality.NoEvidence, search.DefaultNeutralQuality)
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, quality.NoEvidence, cfg.Search.NeutralQuality, "AGENTQ_SEARCH_NEUTRAL_QUALITY's default")

	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, w := testenv.Tenant(t), word(t)
	now := time.Now()
	var once quality.Metrics
	once.Call(true, -1, 1)
	once.Rate(0.8)
	require.InDelta(t, 0.4, once.Quality(), 1e-9)
	f.tool(ten, "used_"+w, "Convert currency amounts "+w, now.Add(-time.Hour))
	f.tool(ten, "unused_"+w, "Convert currency amounts between accounts "+w, now.Add(-time.Hour))
	f.quality(ten, "tool", "used_"+w, once.Quality(), 1, now.Add(-time.Hour), ptr(now.Add(-time.Hour)))

	r, err := f.s.Tools(ctx, ten, search.ToolsRequest{Query: "convert currency amounts " + w})
	require.NoError(t, err)
	by := map[string]search.Components{}
	for _, x := range r.Results {
		by[x.Tool.Name] = x.Components
	}
	require.Greater(t, by["used_"+w].Similarity, by["unused_"+w].Similarity, "the premise: the used tool matches better")
	require.Equal(t, quality.NoEvidence, by["unused_"+w].Quality)
	require.Equal(t, []string{ten + "/used_" + w, ten + "/unused_" + w}, toolNames(r, w), "%+v", by)
}

// When Postgres refuses the full-text form of a query all the same (a
// parser limit fullTextQuery does not know of; here, its rewriting
// turned off), a hybrid search answers from its vector arm, flagged
// degraded and counted; a search with no other arm is a bad request.
// Never an internal error.
func TestRefusedFullTextFallsBackToVectors(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	require.NoError(t, search.EnsureIndexes(ctx, pool, search.Embedders{Prompts: lexical, Tools: lexical}, search.IndexOptions{}))
	reg := prometheus.NewRegistry()
	s, err := search.New(pool, search.Embedders{Prompts: lexical, Tools: lexical}, search.Options{Registerer: reg}, testenv.Logger(t))
	require.NoError(t, err)
	f := &fixture{t: t, pool: pool, emb: lexical, s: s}
	ten, w := testenv.Tenant(t), word(t)
	f.prompt(promptSpec{tenant: ten, id: "guide-" + w, content: "Platform support guide " + w})
	f.tool(ten, "guide_"+w, "Platform support guide "+w, time.Time{})
	defer search.RawFullTextQueries()()

	q := "# " + strings.Repeat("-", 40) + " # PLATFORM SUPPORT GUIDE " + w
	pr, err := s.Prompts(ctx, ten, search.PromptsRequest{Query: q})
	require.NoError(t, err)
	require.Equal(t, search.Vector, pr.Retrieval.Mode)
	require.True(t, pr.Retrieval.Degraded)
	require.Contains(t, pr.Retrieval.Reason, "tsquery stack too small")
	require.Equal(t, []string{ten + "/guide-" + w}, promptIDs(pr, w))
	tr, err := s.Tools(ctx, ten, search.ToolsRequest{Query: q})
	require.NoError(t, err)
	require.Equal(t, search.Vector, tr.Retrieval.Mode)
	require.Equal(t, []string{ten + "/guide_" + w}, toolNames(tr, w))
	require.Equal(t, 2.0, testenv.CounterValue(reg, "agentq_search_arm_skipped_total", map[string]string{"arm": "full_text", "reason": "query_rejected"}))

	_, err = s.WithMode(search.Lexical).Prompts(ctx, ten, search.PromptsRequest{Query: q})
	require.Equal(t, service.CodeBadRequest, code(t, err))
}
