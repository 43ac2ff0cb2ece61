package indexer_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/testenv"
)

// renamed is an embedder whose vectors are Lexical's under another model
// name: a model change the index must catch up with.
type renamed struct{ embed.Lexical }

func (renamed) Model() string { return "test-renamed-v1" }

// After a model change, Reindex re-embeds exactly the rows of the old
// model, in place, and a second run finds nothing to do.
func TestReindexAfterModelChange(t *testing.T) {
	r := newRig(t)
	for i := range 70 { // more than one batch
		r.apply(t, indexer.TypePromptCreated, prompt(fmt.Sprintf("p%02d", i), 1, fmt.Sprintf("Prompt number %d about invoices", i)))
	}
	r.apply(t, indexer.TypeToolRegistered, map[string]any{"name": "send_invoice", "description": "Send an invoice by email"})
	ctx := context.Background()
	before, err := indexer.ReadState(ctx, r.pool, r.tenant)
	require.NoError(t, err)

	emb := indexer.Embedders{Prompts: renamed{}, Tools: renamed{}}
	// Before the reindex the model in force has no vector of these rows:
	// search finds them by their words, the vector arm finding none.
	s, err := search.New(r.pool, search.Embedders{Prompts: emb.Prompts, Tools: emb.Tools}, search.Options{}, testenv.Logger(t))
	require.NoError(t, err)
	vecOnly, err := s.WithMode(search.Vector).Prompts(ctx, r.tenant, search.PromptsRequest{Query: "Prompt number 7 about invoices"})
	require.NoError(t, err)
	require.Empty(t, vecOnly.Results, "no vector of the model in force yet")
	found, err := s.Prompts(ctx, r.tenant, search.PromptsRequest{Query: "Prompt number 7 about invoices", Limit: search.MaxPromptLimit})
	require.NoError(t, err)
	require.Equal(t, search.Retrieval{Mode: search.Hybrid}, found.Retrieval)
	var first string // of the tenant's own: other tests' _global prompts may be found too
	for _, x := range found.Results {
		if x.Prompt.Tenant == r.tenant && first == "" {
			first = x.Prompt.ID
		}
	}
	require.Equal(t, "p07", first, "found by its words")
	tools, err := s.Tools(ctx, r.tenant, search.ToolsRequest{Query: "send an invoice", Limit: search.MaxToolLimit})
	require.NoError(t, err)
	var own []string // other tests' _global tools may be found too
	for _, x := range tools.Results {
		if x.Tool.Tenant == r.tenant {
			own = append(own, x.Tool.Name)
		}
	}
	require.Equal(t, []string{"send_invoice"}, own)

	var calls []string
	rep, err := indexer.Reindex(ctx, r.pool, emb, indexer.ReindexOptions{Tenant: r.tenant, BatchSize: 32,
		Progress: func(kind string, done, total int) { calls = append(calls, fmt.Sprintf("%s %d/%d", kind, done, total)) }})
	require.NoError(t, err)
	require.Equal(t, indexer.ReindexReport{Prompts: 70, Tools: 1, PromptModel: "test-renamed-v1", ToolModel: "test-renamed-v1", Took: rep.Took}, rep)
	require.Equal(t, []string{"prompts 0/70", "prompts 32/70", "prompts 64/70", "prompts 70/70", "tools 0/1", "tools 1/1"}, calls)

	var models []string
	rows, err := r.pool.Query(ctx, `SELECT DISTINCT embedding_model || '/' || embedding_dim FROM prompts WHERE tenant_id = $1
	                                UNION SELECT DISTINCT embedding_model || '/' || embedding_dim FROM tools WHERE tenant_id = $1`, r.tenant)
	require.NoError(t, err)
	for rows.Next() {
		var m string
		require.NoError(t, rows.Scan(&m))
		models = append(models, m)
	}
	require.Equal(t, []string{fmt.Sprintf("test-renamed-v1/%d", embed.Lexical{}.Dimension())}, models)
	after, err := indexer.ReadState(ctx, r.pool, r.tenant)
	require.NoError(t, err)
	require.Equal(t, before, after, "only vectors change")

	rep, err = indexer.Reindex(ctx, r.pool, emb, indexer.ReindexOptions{Tenant: r.tenant})
	require.NoError(t, err)
	require.Zero(t, rep.Prompts+rep.Tools, "nothing left to re-embed")
}

// Stale counts what Reindex would re-embed after a model change, by kind
// and stored model, for one tenant; the indexer logs it at start.
func TestStale(t *testing.T) {
	r := newRig(t)
	for i := range 3 {
		r.apply(t, indexer.TypePromptCreated, prompt(fmt.Sprintf("p%d", i), 1, fmt.Sprintf("Prompt number %d about invoices", i)))
	}
	r.apply(t, indexer.TypeToolRegistered, map[string]any{"name": "send_invoice", "description": "Send an invoice by email"})
	ctx := context.Background()
	lex := embed.Lexical{}

	stale, err := indexer.Stale(ctx, r.pool, indexer.Embedders{Prompts: lex, Tools: lex}, r.tenant)
	require.NoError(t, err)
	require.Empty(t, stale, "the models in force embedded everything")

	renamedEmb := indexer.Embedders{Prompts: renamed{}, Tools: renamed{}}
	stale, err = indexer.Stale(ctx, r.pool, renamedEmb, r.tenant)
	require.NoError(t, err)
	require.Equal(t, []indexer.StaleModel{
		{Kind: indexer.KindPrompts, Model: embed.LexicalModel, Rows: 3},
		{Kind: indexer.KindTools, Model: embed.LexicalModel, Rows: 1},
	}, stale)

	stale, err = indexer.Stale(ctx, r.pool, indexer.Embedders{Prompts: lex, Tools: renamed{}}, r.tenant)
	require.NoError(t, err)
	require.Equal(t, []indexer.StaleModel{{Kind: indexer.KindTools, Model: embed.LexicalModel, Rows: 1}}, stale, "only the kind whose model changed")

	// What the indexer logs at start (every tenant of the test database).
	var logged bytes.Buffer
	indexer.WarnStale(ctx, r.pool, renamedEmb, zerolog.New(&logged))
	require.Contains(t, logged.String(), `"level":"warn","kind":"tools","model":"agentq-lexical-v1","rows":`)
	require.Contains(t, logged.String(), `"in_force":"test-renamed-v1","message":"rows embedded by another model than the one in force: search finds them by their words only until `+"`agentq reindex`"+` re-embeds them"`)

	_, err = indexer.Reindex(ctx, r.pool, renamedEmb, indexer.ReindexOptions{Tenant: r.tenant})
	require.NoError(t, err)
	stale, err = indexer.Stale(ctx, r.pool, renamedEmb, r.tenant)
	require.NoError(t, err)
	require.Empty(t, stale, "nothing left after a reindex")
}
