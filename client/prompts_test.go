package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/client"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
)

// TestGetPrompt: versions, labels, rendering with params (the same text
// the indexer renders), what is served from the cache, and the errors.
func TestGetPrompt(t *testing.T) {
	ctx := context.Background()
	ten := testenv.Tenant(t)
	pub := connect(t, client.Config{Tenant: ten})
	id := "greet-" + ten
	params := []client.Param{{Name: "Name", Type: "string", Required: true}, {Name: "Count", Type: "integer", Default: 1}}
	v1 := indexed(t, pub, client.PromptCreated{ID: id, Type: "system", Name: "Greeting", Author: "tests", Tags: []string{"hello"},
		Metadata: map[string]any{"owner": "team"}, Content: "Hello {{.Name}}, {{.Count}} new", Parameters: params})
	indexed(t, pub, client.PromptCreated{ID: id, Type: "system", Name: "Greeting", Content: "Hi {{.Name}}, {{.Count}} new", Parameters: params})
	indexed(t, pub, client.PromptActivated{PromptID: id, Version: 1, Label: "production"})
	c := connect(t, client.Config{Tenant: ten}) // after the changes: no push arrives while it reads

	got, err := c.GetPrompt(ctx, id, client.WithParams(map[string]any{"Name": "Ada", "Count": 3}))
	require.NoError(t, err)
	require.False(t, got.Cached)
	require.False(t, got.Stale)
	require.Equal(t, "Hello Ada, 3 new", got.Rendered)
	p := got.Prompt
	require.WithinDuration(t, time.Now(), p.CreatedAt, time.Minute)
	require.JSONEq(t, `{"owner":"team"}`, string(p.Metadata))
	p.CreatedAt, p.Metadata = time.Time{}, nil
	require.Equal(t, client.Prompt{ID: id, Version: 1, ContentHash: v1["content_hash"].(string), Type: "system", Name: "Greeting",
		Content: "Hello {{.Name}}, {{.Count}} new", Parameters: []client.Param{params[0], {Name: "Count", Type: "integer", Default: 1.0}},
		Tags: []string{"hello"}, Labels: []string{"production"}, Author: "tests", Tenant: ten}, p)

	// Again: from the cache, rendered with other params.
	got, err = c.GetPrompt(ctx, id, client.WithParams(map[string]any{"Name": "Bo"}))
	require.NoError(t, err)
	require.True(t, got.Cached)
	require.Equal(t, "Hello Bo, 1 new", got.Rendered)

	// The client renders what the indexer renders.
	for _, values := range []map[string]any{{"Name": "Ada", "Count": 3}, {"Name": "Ada", "Count": 2.5}, {"Count": 3}, {"Name": "Ada", "Extra": 1}} {
		req, _ := json.Marshal(map[string]any{"id": id, "params": values})
		m, err := c.Conn().Request("prompts.get."+ten, req, 5*time.Second)
		require.NoError(t, err)
		var server struct {
			Rendered string                 `json:"rendered"`
			Error    *struct{ Code string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(m.Data, &server))
		got, err := c.GetPrompt(ctx, id, client.WithParams(values))
		if server.Error != nil {
			var se *client.ServiceError
			require.ErrorAs(t, err, &se, "%v: the indexer says %s", values, server.Error.Code)
			require.Equal(t, server.Error.Code, se.Code)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, server.Rendered, got.Rendered, "%v", values)
	}

	for _, tc := range []struct {
		name    string
		opts    []client.GetOption
		version int
		render  string
		err     string // a ServiceError code, or "invalid"
	}{
		{"default: production", nil, 1, "", ""},
		{"by version", []client.GetOption{client.AtVersion(2), client.WithParams(map[string]any{"Name": "Cy"})}, 2, "Hi Cy, 1 new", ""},
		{"latest", []client.GetOption{client.AtLabel("latest")}, 2, "", ""},
		{"required parameter missing", []client.GetOption{client.WithParams(nil)}, 0, "", "rendering"},
		{"unknown version", []client.GetOption{client.AtVersion(9)}, 0, "", "not_found"},
		{"unknown label", []client.GetOption{client.AtLabel("staging")}, 0, "", "not_found"},
		{"version and label", []client.GetOption{client.AtVersion(1), client.AtLabel("latest")}, 0, "", "invalid"},
		{"bad label", []client.GetOption{client.AtLabel("Prod!")}, 0, "", "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.GetPrompt(ctx, id, tc.opts...)
			switch tc.err {
			case "":
				require.NoError(t, err)
				require.Equal(t, tc.version, got.Prompt.Version)
				require.Equal(t, tc.render, got.Rendered)
			case "invalid":
				var ve *client.ValidationError
				require.ErrorAs(t, err, &ve)
			default:
				var se *client.ServiceError
				require.ErrorAs(t, err, &se, "%v", err)
				require.Equal(t, tc.err, se.Code)
				require.Equal(t, tc.err == "not_found", errors.Is(err, client.ErrNotFound))
			}
		})
	}
	_, err = c.GetPrompt(ctx, "no-such-"+ten)
	require.ErrorIs(t, err, client.ErrNotFound)
	s := c.CacheStats()
	require.Positive(t, s.Hits)
	require.Positive(t, s.Misses)
	require.Zero(t, s.Stale)
}

// TestChangesReachEveryClient: a new version and label moves, announced
// by the indexer's prompt.indexed, replace the cached answers of every
// connected client, for every way of naming the version.
func TestChangesReachEveryClient(t *testing.T) {
	ten := testenv.Tenant(t)
	id := "route-" + ten
	pub := connect(t, client.Config{Tenant: ten})
	indexed(t, pub, client.PromptCreated{ID: id, Type: "routing", Name: "Router", Content: "Route v1"})
	indexed(t, pub, client.PromptActivated{PromptID: id, Version: 1, Label: "staging"})

	var clients []*client.Client
	for range 4 {
		c := connect(t, client.Config{Tenant: ten})
		require.Equal(t, 1, version(t, c, id))
		require.Equal(t, 1, version(t, c, id, client.AtLabel("staging")))
		require.Equal(t, 1, version(t, c, id, client.AtLabel("latest")))
		clients = append(clients, c)
	}
	// Served from the cache until something changes.
	for _, c := range clients {
		got, err := c.GetPrompt(context.Background(), id)
		require.NoError(t, err)
		require.True(t, got.Cached)
		require.Equal(t, "Route v1", got.Rendered)
	}
	expect := func(what string, def, staging, latest int) {
		t.Helper()
		for i, c := range clients {
			testenv.Eventually(t, 10*time.Second, func() bool {
				return version(t, c, id) == def && version(t, c, id, client.AtLabel("staging")) == staging &&
					version(t, c, id, client.AtLabel("latest")) == latest
			}, "client %d after %s", i, what)
		}
	}
	indexed(t, pub, client.PromptCreated{ID: id, Type: "routing", Name: "Router", Content: "Route v2"})
	expect("a new version", 2, 1, 2)
	indexed(t, pub, client.PromptActivated{PromptID: id, Version: 1, Label: "production"})
	expect("production moved to 1", 1, 1, 2)
	indexed(t, pub, client.PromptActivated{PromptID: id, Version: 2, Label: "staging"})
	expect("staging moved to 2", 1, 2, 2)
	for i, c := range clients {
		got, err := c.GetPrompt(context.Background(), id, client.AtLabel("staging"))
		require.NoError(t, err)
		require.Equal(t, "Route v2", got.Rendered, "client %d", i)
		require.True(t, got.Cached, "client %d: the new version is cached in turn", i)
		require.GreaterOrEqual(t, c.CacheStats().Pushes, uint64(3), "client %d", i)
	}
}

// TestSharedPromptChanges: a tenant without a prompt of its own is served
// _global's, follows its changes, and is served its own once it creates
// one of the same id.
func TestSharedPromptChanges(t *testing.T) {
	ten := testenv.Tenant(t)
	id := "shared-" + ten
	global := connect(t, client.Config{Tenant: bus.GlobalTenant})
	indexed(t, global, client.PromptCreated{ID: id, Type: "task", Name: "Shared", Content: "shared v1"})
	c := connect(t, client.Config{Tenant: ten})
	got, err := c.GetPrompt(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, bus.GlobalTenant, got.Prompt.Tenant)

	indexed(t, global, client.PromptCreated{ID: id, Type: "task", Name: "Shared", Content: "shared v2"})
	testenv.Eventually(t, 10*time.Second, func() bool { return version(t, c, id) == 2 }, "the shared prompt's new version")

	indexed(t, c, client.PromptCreated{ID: id, Type: "task", Name: "Own", Content: "own v1"})
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, err := c.GetPrompt(context.Background(), id)
		require.NoError(t, err)
		return got.Prompt.Tenant == ten && got.Rendered == "own v1"
	}, "the tenant's own prompt shadows the shared one")
}

// TestNATSDown: cut off from NATS, a client serves the last version of
// every prompt it fetched (Stale), and says at once that it cannot get
// one it never fetched; back, it revalidates what it holds, so a change
// made meanwhile (its push missed) is served.
func TestNATSDown(t *testing.T) {
	ctx := context.Background()
	ten := testenv.Tenant(t)
	pub := connect(t, client.Config{Tenant: ten})
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("kept-%d-%s", i, ten)
		indexed(t, pub, client.PromptCreated{ID: id, Type: "task", Name: "Kept", Content: "{{.Who}} v1",
			Parameters: []client.Param{{Name: "Who", Type: "string", Default: "anyone"}}})
		ids = append(ids, id)
	}
	indexed(t, pub, client.PromptCreated{ID: "unseen-" + ten, Type: "task", Name: "Unseen", Content: "never fetched"})

	proxy, opts := proxied(t)
	c := connect(t, client.Config{URL: "nats://" + proxy.Addr(), Tenant: ten, NATSOptions: opts, RequestTimeout: 30 * time.Second})
	require.NoError(t, c.Warm(ctx, ids[:2]...))
	got, err := c.GetPrompt(ctx, ids[2], client.AtVersion(1))
	require.NoError(t, err)
	require.False(t, got.Stale)

	proxy.Down()
	testenv.Eventually(t, 10*time.Second, func() bool { return c.Conn().Status() != nats.CONNECTED }, "client still connected")
	for _, tc := range []struct {
		id   string
		opts []client.GetOption
	}{{ids[0], nil}, {ids[1], []client.GetOption{client.WithParams(map[string]any{"Who": "Ada"})}}, {ids[2], []client.GetOption{client.AtVersion(1)}}} {
		got, err := c.GetPrompt(ctx, tc.id, tc.opts...)
		require.NoError(t, err, tc.id)
		require.True(t, got.Stale, tc.id)
		require.True(t, got.Cached, tc.id)
		require.Equal(t, 1, got.Prompt.Version, tc.id)
	}
	got, err = c.GetPrompt(ctx, ids[1], client.WithParams(map[string]any{"Who": "Ada"}))
	require.NoError(t, err)
	require.Equal(t, "Ada v1", got.Rendered)

	// Never fetched: a typed error, without waiting for the request
	// timeout (30 s here).
	start := time.Now()
	_, err = c.GetPrompt(ctx, "unseen-"+ten)
	var ue *client.UnavailableError
	require.ErrorAs(t, err, &ue, "%v", err)
	require.Less(t, time.Since(start), 10*time.Second)
	_, err = c.GetPrompt(ctx, ids[0], client.AtLabel("latest")) // fetched by another name only
	require.ErrorAs(t, err, &ue)
	_, err = c.SearchPrompts(ctx, client.PromptQuery{Query: "kept"})
	require.ErrorAs(t, err, &ue)

	// Meanwhile a new version; this client cannot hear of it.
	indexed(t, pub, client.PromptCreated{ID: ids[0], Type: "task", Name: "Kept", Content: "{{.Who}} v2",
		Parameters: []client.Param{{Name: "Who", Type: "string", Default: "anyone"}}})
	require.Equal(t, 1, version(t, c, ids[0]), "the last-known version while cut off")

	// Back: the reconnect revalidates everything cached, by itself.
	resyncs := c.CacheStats().Resyncs
	proxy.Up(t)
	testenv.Eventually(t, 10*time.Second, func() bool { return c.CacheStats().Resyncs > resyncs }, "no revalidation after the reconnect")
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, err := c.GetPrompt(ctx, ids[0])
		require.NoError(t, err)
		return got.Prompt.Version == 2 && !got.Stale && got.Cached
	}, "the version made while disconnected, refetched in the background")
	got, err = c.GetPrompt(ctx, ids[1])
	require.NoError(t, err)
	require.False(t, got.Stale)
	require.Equal(t, 1, got.Prompt.Version)
}

// TestLostPushes: should every push be lost without a reconnect, a cached
// answer older than MaxAge is served once more and refetched in the
// background.
func TestLostPushes(t *testing.T) {
	ten := testenv.Tenant(t)
	id := "aged-" + ten
	pub := connect(t, client.Config{Tenant: ten})
	indexed(t, pub, client.PromptCreated{ID: id, Type: "task", Name: "Aged", Content: "aged v1"})
	c := connect(t, client.Config{Tenant: ten, MaxAge: 200 * time.Millisecond})
	require.Equal(t, 1, version(t, c, id))
	c.MissPushes()
	indexed(t, pub, client.PromptCreated{ID: id, Type: "task", Name: "Aged", Content: "aged v2"})
	testenv.Eventually(t, 10*time.Second, func() bool { return version(t, c, id) == 2 }, "never refetched after MaxAge")
	require.Zero(t, c.CacheStats().Pushes)
}
