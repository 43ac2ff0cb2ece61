package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/provider/providertest"
)

func newEmbedder(t *testing.T, edit func(*provider.EmbedOptions)) (*provider.Embedder, *providertest.Server) {
	t.Helper()
	srv := providertest.New(t)
	opts := provider.EmbedOptions{Options: provider.Options{BaseURL: srv.URL, Model: "embed-model"}}
	if edit != nil {
		edit(&opts)
	}
	e, err := provider.NewEmbedder(opts)
	require.NoError(t, err)
	return e, srv
}

func texts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("prompt number %d about topic %d", i, i%7)
	}
	return out
}

func TestEmbedBatchesInOrder(t *testing.T) {
	tests := []struct {
		name        string
		n, batch    int
		reverse     bool
		wantBatches []int
	}{
		{"150 texts at 64", 150, 64, false, []int{64, 64, 22}},
		{"150 texts at 64, server lists them backwards", 150, 64, true, []int{64, 64, 22}},
		{"one batch exactly", 64, 64, false, []int{64}},
		{"default batch size", 65, 0, false, []int{64, 1}},
		{"one text", 1, 64, false, []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, srv := newEmbedder(t, func(o *provider.EmbedOptions) { o.BatchSize = tt.batch })
			srv.SetReverseOrder(tt.reverse)
			srv.SetMaxBatch(64)
			require.Zero(t, e.Dimension())
			in := texts(tt.n)
			vecs, err := e.Embed(context.Background(), in)
			require.NoError(t, err)
			require.Len(t, vecs, tt.n)
			for i, text := range in {
				require.Equal(t, providertest.Vector(text, providertest.DefaultDimension), vecs[i], "vector %d", i)
			}
			require.Equal(t, tt.wantBatches, srv.EmbeddingBatches())
			require.Equal(t, len(tt.wantBatches), srv.EmbeddingRequests())
			require.Equal(t, providertest.DefaultDimension, e.Dimension())
			require.Equal(t, "embed-model", e.Model())
		})
	}
}

func TestEmbedDimensionChange(t *testing.T) {
	e, srv := newEmbedder(t, nil)
	_, err := e.Embed(context.Background(), []string{"first"})
	require.NoError(t, err)
	require.Equal(t, 8, e.Dimension())

	srv.SetDimension(12)
	vecs, err := e.Embed(context.Background(), []string{"second"})
	require.Nil(t, vecs)
	require.ErrorIs(t, err, provider.ErrDimensionChanged)
	require.False(t, bus.IsUnavailable(err))
	var dim *provider.DimensionError
	require.ErrorAs(t, err, &dim)
	require.Equal(t, provider.DimensionError{Model: "embed-model", Want: 8, Got: 12}, *dim)
	require.ErrorContains(t, err, `embedding model "embed-model" returned 12-dimensional vectors, but its vectors so far have 8 dimensions`)
	require.Equal(t, 8, e.Dimension(), "the dimension of record does not move")
}

func TestEmbedKnownDimension(t *testing.T) {
	e, _ := newEmbedder(t, func(o *provider.EmbedOptions) { o.KnownDimension = 384 })
	require.Equal(t, 384, e.Dimension())
	_, err := e.Embed(context.Background(), []string{"text"})
	var dim *provider.DimensionError
	require.ErrorAs(t, err, &dim)
	require.Equal(t, provider.DimensionError{Model: "embed-model", Want: 384, Got: 8}, *dim)
}

func TestEmbedRequestsDimensions(t *testing.T) {
	e, srv := newEmbedder(t, func(o *provider.EmbedOptions) { o.Dimensions = 4 })
	vecs, err := e.Embed(context.Background(), []string{"a text"})
	require.NoError(t, err)
	require.Equal(t, [][]float32{providertest.Vector("a text", 4)}, vecs)
	var body map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(srv.LastBody(), &body))
	require.JSONEq(t, `4`, string(body["dimensions"]))
	require.JSONEq(t, `["a text"]`, string(body["input"]))
	require.JSONEq(t, `"embed-model"`, string(body["model"]))
	require.Equal(t, 4, e.Dimension())
}

func TestEmbedFailures(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(*providertest.Server)
		in       []string
		want     error
		requests int
	}{
		{"empty text is refused before sending", func(*providertest.Server) {}, []string{"a", " "}, provider.ErrRejected, 0},
		{"server down", func(s *providertest.Server) { s.Down() }, []string{"a"}, provider.ErrUnavailable, 0},
		{"503 on every try", func(s *providertest.Server) { s.SetFailing(http.StatusServiceUnavailable, "0") }, []string{"a"}, provider.ErrUnavailable, 4},
		{"batch too large for the server", func(s *providertest.Server) { s.SetMaxBatch(1) }, []string{"a", "b"}, provider.ErrRejected, 1},
		{"HTML instead of JSON", func(s *providertest.Server) { s.SetJunk(providertest.JunkBody) }, []string{"a"}, provider.ErrBadOutput, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, srv := newEmbedder(t, nil)
			tt.setup(srv)
			vecs, err := e.Embed(context.Background(), tt.in)
			require.Nil(t, vecs)
			require.ErrorIs(t, err, tt.want)
			require.Equal(t, tt.want == provider.ErrUnavailable, bus.IsUnavailable(err))
			require.Equal(t, tt.requests, srv.EmbeddingRequests())
		})
	}
}

func TestEmbedRetriesWithinBatch(t *testing.T) {
	e, srv := newEmbedder(t, func(o *provider.EmbedOptions) { o.BatchSize = 2 })
	srv.FailNext(1, http.StatusTooManyRequests, "0")
	vecs, err := e.Embed(context.Background(), texts(3))
	require.NoError(t, err)
	require.Len(t, vecs, 3)
	require.Equal(t, 3, srv.EmbeddingRequests(), "the first batch twice, the second once")
	require.Equal(t, []int{2, 1}, srv.EmbeddingBatches())
}

// A 429 or 503 with Retry-After is retried no sooner than the server asked,
// measured where it matters, at the server, and the batch still comes back
// whole and in order.
func TestEmbedHonoursRetryAfter(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		retryAfter string
		atLeast    time.Duration
	}{
		{"429", http.StatusTooManyRequests, "1", time.Second},
		{"503", http.StatusServiceUnavailable, "1", time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, srv := newEmbedder(t, nil)
			srv.FailNext(1, tt.status, tt.retryAfter)
			in := texts(3)
			vecs, err := e.Embed(context.Background(), in)
			require.NoError(t, err)
			require.Len(t, vecs, len(in))
			for i, text := range in {
				require.Equal(t, providertest.Vector(text, providertest.DefaultDimension), vecs[i], "vector %d", i)
			}
			require.Equal(t, 2, srv.EmbeddingRequests(), "one refused, one retried")
			require.Equal(t, 1, srv.Answered(tt.status))
			require.Equal(t, []int{3}, srv.EmbeddingBatches(), "the retry carried the whole batch")
			times := srv.RequestTimes()
			require.Len(t, times, 2)
			require.GreaterOrEqual(t, times[1].Sub(times[0]), tt.atLeast, "the retry came before the Retry-After")
		})
	}
}
