package embed_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/provider/providertest"
)

func newProvider(t *testing.T) (embed.Embedder, *providertest.Server) {
	t.Helper()
	srv := providertest.New(t)
	pe, err := provider.NewEmbedder(provider.EmbedOptions{Options: provider.Options{BaseURL: srv.URL, Model: "embed-model"}})
	require.NoError(t, err)
	return embed.Provider(pe), srv
}

func TestProvider(t *testing.T) {
	e, srv := newProvider(t)
	srv.SetDimension(16)
	require.Equal(t, "embed-model", e.Model())
	require.Zero(t, e.Dimension(), "unknown until the first answer")

	texts := []string{"first text", "second text", "third text"}
	vecs, err := e.Embed(context.Background(), texts)
	require.NoError(t, err)
	require.Equal(t, 16, e.Dimension())
	require.Len(t, vecs, len(texts))
	for i, v := range vecs {
		require.Len(t, v, 16)
		want := providertest.Vector(texts[i], 16)
		require.InDeltaSlice(t, want, v, 1e-6, "vector %d is its text's, in order", i)
		var sum float64
		for _, x := range v {
			sum += float64(x) * float64(x)
		}
		require.InDelta(t, 1, math.Sqrt(sum), 1e-6)
	}
}

func TestProviderErrors(t *testing.T) {
	t.Run("outage is bus.Unavailable", func(t *testing.T) {
		e, srv := newProvider(t)
		srv.Down()
		vecs, err := e.Embed(context.Background(), []string{"text"})
		require.Nil(t, vecs)
		require.True(t, bus.IsUnavailable(err))
		require.ErrorIs(t, err, provider.ErrUnavailable)

		require.NoError(t, srv.Up())
		vecs, err = e.Embed(context.Background(), []string{"text"})
		require.NoError(t, err, "back when the server is")
		require.Len(t, vecs, 1)
	})
	t.Run("dimension change is not an outage", func(t *testing.T) {
		e, srv := newProvider(t)
		_, err := e.Embed(context.Background(), []string{"text"})
		require.NoError(t, err)
		srv.SetDimension(32)
		vecs, err := e.Embed(context.Background(), []string{"text"})
		require.Nil(t, vecs)
		require.ErrorIs(t, err, provider.ErrDimensionChanged)
		require.False(t, bus.IsUnavailable(err))
	})
	t.Run("empty text is rejected, not an outage", func(t *testing.T) {
		e, srv := newProvider(t)
		vecs, err := e.Embed(context.Background(), []string{"text", ""})
		require.Nil(t, vecs)
		require.ErrorIs(t, err, provider.ErrRejected)
		require.False(t, bus.IsUnavailable(err))
		require.Zero(t, srv.EmbeddingRequests())
	})
}

// TestProviderNormalizes uses a server that answers like Ollama or
// llama.cpp may, with vectors that are not of unit length.
func TestProviderNormalizes(t *testing.T) {
	tests := []struct {
		name    string
		vector  string
		want    []float32
		wantErr error
	}{
		{"scaled to unit length", `[3, 4]`, []float32{0.6, 0.8}, nil},
		{"already unit length", `[0, 1]`, []float32{0, 1}, nil},
		{"zero vector is bad output", `[0, 0]`, nil, provider.ErrBadOutput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/embeddings" {
					http.NotFound(w, r) // the client then fails as rejected
					return
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"object":"list","model":"m","data":[{"object":"embedding","index":0,"embedding":%s}],"usage":{"prompt_tokens":1,"total_tokens":1}}`, tt.vector)
			}))
			t.Cleanup(srv.Close)
			pe, err := provider.NewEmbedder(provider.EmbedOptions{Options: provider.Options{BaseURL: srv.URL + "/v1", Model: "m"}})
			require.NoError(t, err)
			vecs, err := embed.Provider(pe).Embed(context.Background(), []string{"text"})
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.ErrorContains(t, err, "vector 0 is all zeros")
				require.False(t, bus.IsUnavailable(err))
				require.Nil(t, vecs)
				return
			}
			require.NoError(t, err)
			require.Len(t, vecs, 1)
			require.InDeltaSlice(t, tt.want, vecs[0], 1e-7)
		})
	}
}

func TestNew(t *testing.T) {
	e, err := embed.New(provider.EmbedOptions{})
	require.NoError(t, err)
	require.Equal(t, embed.Lexical{}, e, "no provider configured: the lexical embedder")

	srv := providertest.New(t)
	e, err = embed.New(provider.EmbedOptions{Options: provider.Options{BaseURL: srv.URL, Model: "embed-model"}, KnownDimension: 8})
	require.NoError(t, err)
	require.Equal(t, "embed-model", e.Model())
	require.Equal(t, 8, e.Dimension())
	vecs, err := e.Embed(context.Background(), []string{"text"})
	require.NoError(t, err)
	require.InDeltaSlice(t, providertest.Vector("text", 8), vecs[0], 1e-6)

	_, err = embed.New(provider.EmbedOptions{Options: provider.Options{BaseURL: srv.URL}})
	require.Error(t, err, "a provider without a model is a configuration error, not the lexical embedder")
}
