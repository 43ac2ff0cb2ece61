package client_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/client"
	"github.com/agentq/agentq/internal/testenv"
)

// TestSearch: prompt and tool search through the running indexer, with
// what each result carries, filters, and the errors a caller can act on.
func TestSearch(t *testing.T) {
	ctx := context.Background()
	ten := testenv.Tenant(t)
	w := "zq" + ten[1:] // a word no other test's prompts or tools contain
	c := connect(t, client.Config{Tenant: ten})
	id := "reply-" + w
	created := indexed(t, c, client.PromptCreated{ID: id, Type: "task", Name: "Reply " + w, Author: "tests",
		Content:    "Reply to {{.Customer}} about the delayed parcel " + w,
		Parameters: []client.Param{{Name: "Customer", Type: "string", Required: true}}, Tags: []string{"support", w}})
	indexed(t, c, client.ToolRegistered{Name: "track_" + w, Description: "Track a delayed parcel by its number " + w, Server: "shipping", Tags: []string{"shipping"}})
	indexed(t, c, client.ToolRegistered{Name: "refund_" + w, Description: "Refund an order " + w, Server: "billing"})

	res, err := c.SearchPrompts(ctx, client.PromptQuery{Query: "delayed parcel " + w, Params: map[string]any{"Customer": "Ada"}})
	require.NoError(t, err)
	require.NotEmpty(t, res.Results)
	top := res.Results[0]
	require.Equal(t, id, top.Prompt.ID)
	require.Equal(t, 1, top.Prompt.Version)
	require.Equal(t, created["content_hash"], top.Prompt.ContentHash)
	require.Equal(t, ten, top.Prompt.Tenant)
	require.Equal(t, "task", top.Prompt.Type)
	require.Equal(t, "tests", top.Prompt.Author)
	require.Equal(t, []string{"support", w}, top.Prompt.Tags)
	require.Equal(t, []client.Param{{Name: "Customer", Type: "string", Required: true}}, top.Prompt.Parameters)
	require.Equal(t, "Reply to Ada about the delayed parcel "+w, top.Rendered)
	require.Greater(t, top.Components.Similarity, 0.0)
	require.Greater(t, top.Score, 0.0)
	require.NotEmpty(t, res.Retrieval.Mode)

	res, err = c.SearchPrompts(ctx, client.PromptQuery{Query: "delayed parcel " + w, Type: "system"})
	require.NoError(t, err)
	for _, r := range res.Results {
		require.NotEqual(t, id, r.Prompt.ID, "filtered out by type")
	}

	tools, err := c.SearchTools(ctx, client.ToolQuery{Query: "where is my delayed parcel " + w, Limit: 5})
	require.NoError(t, err)
	require.NotEmpty(t, tools.Results)
	require.Equal(t, "track_"+w, tools.Results[0].Tool.Name)
	require.Equal(t, "shipping", tools.Results[0].Tool.Server)
	require.Equal(t, ten, tools.Results[0].Tool.Tenant)
	require.Equal(t, 1, tools.Results[0].Tool.Version)
	tools, err = c.SearchTools(ctx, client.ToolQuery{Query: "where is my delayed parcel " + w, ExcludeNames: []string{"track_" + w}})
	require.NoError(t, err)
	for _, r := range tools.Results {
		require.NotEqual(t, "track_"+w, r.Tool.Name, "excluded")
	}

	// A malformed query is refused before it leaves.
	_, err = c.SearchPrompts(ctx, client.PromptQuery{Query: "x", Limit: 500})
	var ve *client.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "/limit", ve.Field())
	_, err = c.SearchTools(ctx, client.ToolQuery{})
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "/query", ve.Field())

	// Nothing serving search: a server without an indexer.
	alone := connect(t, client.Config{URL: testenv.StartNATS(t).URL, Tenant: ten})
	_, err = alone.SearchTools(ctx, client.ToolQuery{Query: "anything"})
	var ue *client.UnavailableError
	require.ErrorAs(t, err, &ue, "%v", err)
	require.ErrorIs(t, err, nats.ErrNoResponders)
}
