package search_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// TestList pages through what a tenant sees, by id: its own prompts and
// _global's, a _global one shadowed by the tenant's of the same id, each
// in the version prompts.get serves by default, without content; the
// filters; and bad requests.
func TestList(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ctx := context.Background()
	ten, other, w := testenv.Tenant(t), testenv.Tenant(t), word(t)
	tags := []string{w} // _global rows of other tests do not carry it
	created := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	params := []library.Param{{Name: "Topic", Type: "string", Required: true, Description: "what it is about"}}
	f.prompt(promptSpec{tenant: ten, id: "a-" + w, content: "A v1 {{.Topic}}", tags: tags, params: params, description: "first", createdAt: created})
	a2 := f.prompt(promptSpec{tenant: ten, id: "a-" + w, version: 2, content: "A v2 {{.Topic}}", tags: tags, params: params, description: "first", createdAt: created})
	b1 := f.prompt(promptSpec{tenant: ten, id: "b-" + w, typ: "system", content: "B v1", tags: []string{w, "ops"}, createdAt: created})
	f.prompt(promptSpec{tenant: ten, id: "b-" + w, version: 2, typ: "system", content: "B v2", tags: []string{w, "ops"}, createdAt: created})
	_, err := library.SetLabel(ctx, f.pool, ten, "b-"+w, "production", 1, 50, "l-"+w, time.Now())
	require.NoError(t, err)
	f.s.PromptChanged(ten, "b-"+w)
	c := f.prompt(promptSpec{tenant: "_global", id: "c-" + w, content: "shared C", tags: tags, createdAt: created})
	f.prompt(promptSpec{tenant: "_global", id: "a-" + w, content: "shared A, shadowed", tags: tags, createdAt: created})
	f.prompt(promptSpec{tenant: other, id: "d-" + w, content: "another tenant's", tags: tags, createdAt: created})

	listed := func(p library.Prompt, labels ...string) search.ListedPrompt {
		return search.ListedPrompt{Tenant: p.Tenant, ID: p.ID, Version: p.Version, Hash: p.Hash, Type: p.Type, Name: p.Name,
			Description: p.Description, Parameters: p.Parameters, Tags: p.Tags, Labels: labels, CreatedAt: p.CreatedAt}
	}
	want := []search.ListedPrompt{listed(a2), listed(b1, "production"), listed(c)}

	got, err := f.s.List(ctx, ten, search.ListRequest{Tags: tags})
	require.NoError(t, err)
	require.Equal(t, search.ListResponse{Prompts: want}, got)

	// Pages of two, then one: the cursor is the last id of a page.
	page1, err := f.s.List(ctx, ten, search.ListRequest{Tags: tags, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, search.ListResponse{Prompts: want[:2], NextCursor: "b-" + w}, page1)
	page2, err := f.s.List(ctx, ten, search.ListRequest{Tags: tags, Limit: 2, Cursor: page1.NextCursor})
	require.NoError(t, err)
	require.Equal(t, search.ListResponse{Prompts: want[2:]}, page2)

	got, err = f.s.List(ctx, ten, search.ListRequest{Tags: []string{w, "ops"}})
	require.NoError(t, err)
	require.Equal(t, []search.ListedPrompt{want[1]}, got.Prompts)
	got, err = f.s.List(ctx, ten, search.ListRequest{Tags: tags, Type: "system"})
	require.NoError(t, err)
	require.Equal(t, []search.ListedPrompt{want[1]}, got.Prompts)

	for _, req := range []search.ListRequest{{Limit: 101}, {Limit: -1}, {Cursor: "not a cursor"}, {Type: "poem"}, {Tags: []string{"a\x00"}}} {
		_, err := f.s.List(ctx, ten, req)
		require.Equal(t, service.CodeBadRequest, code(t, err), "%+v", req)
	}
	_, err = f.s.List(ctx, "Not-A-Tenant", search.ListRequest{})
	require.Equal(t, service.CodeBadRequest, code(t, err))
}

// A page stops before its prompts pass 512 KiB, whatever the limit, and
// says where the next one starts.
func TestListPageBytes(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	ten, w := testenv.Tenant(t), word(t)
	long := strings.Repeat("d", 8000) // descriptions go up to 8192 characters
	for i := range 70 {
		f.prompt(promptSpec{tenant: ten, id: fmt.Sprintf("p%02d-%s", i, w), content: "x", description: long, tags: []string{w}})
	}
	seen := 0
	cursor := ""
	for pages := 1; ; pages++ {
		got, err := f.s.List(context.Background(), ten, search.ListRequest{Tags: []string{w}, Limit: 100, Cursor: cursor})
		require.NoError(t, err)
		b, err := json.Marshal(got)
		require.NoError(t, err)
		require.Less(t, len(b), 600<<10)
		seen += len(got.Prompts)
		if got.NextCursor == "" {
			require.Equal(t, 2, pages)
			break
		}
		require.Equal(t, got.Prompts[len(got.Prompts)-1].ID, got.NextCursor)
		cursor = got.NextCursor
	}
	require.Equal(t, 70, seen)
}

// The endpoint answers over NATS, its replies valid against the response
// schema.
func TestListEndpoint(t *testing.T) {
	f := newFixture(t, lexical, search.Options{})
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	svc, err := service.New(n.NC, service.Options{Name: "list", Validator: reg, Log: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop() })
	require.NoError(t, f.s.Register(svc))
	ten, w := testenv.Tenant(t), word(t)
	p := f.prompt(promptSpec{tenant: ten, id: "l-" + w, content: "Hello {{.Who}}", tags: []string{w},
		params: []library.Param{{Name: "Who", Default: "you"}}})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var raw json.RawMessage
	require.NoError(t, service.Call(ctx, n.NC, search.ListSubject+"."+ten, map[string]any{"tags": []string{w}}, &raw))
	require.NoError(t, reg.Validate("agentq.prompts.list.response.v1", raw), string(raw))
	var got search.ListResponse
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Len(t, got.Prompts, 1)
	require.Equal(t, p.ID, got.Prompts[0].ID)
	require.Equal(t, "you", got.Prompts[0].Parameters[0].Default)
	require.NotContains(t, string(raw), `"content"`)

	err = service.Call(ctx, n.NC, search.ListSubject+"."+ten, json.RawMessage(`{"limit":0.5}`), nil)
	require.Equal(t, service.CodeBadRequest, code(t, err))
}
