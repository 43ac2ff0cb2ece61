package embed

import (
	"context"
	"fmt"

	"github.com/agentq/agentq/internal/provider"
)

// *provider.Embedder already has Embedder's methods; Provider adds the
// unit-length guarantee on top.
var _ Embedder = (*provider.Embedder)(nil)

// Provider returns e as an Embedder whose vectors are of unit length.
// OpenAI's vectors already are; Ollama's, llama.cpp's and other servers'
// need not be, and the indexer compares by dot product. Model, Dimension
// and errors are e's unchanged: an outage is provider.ErrUnavailable and
// bus.Unavailable, a changed dimension provider.ErrDimensionChanged, an
// empty text provider.ErrRejected. A zero vector from the server is a
// provider.ErrBadOutput error.
func Provider(e *provider.Embedder) Embedder { return providerEmbedder{e} }

type providerEmbedder struct{ *provider.Embedder }

func (p providerEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	vecs, err := p.Embedder.Embed(ctx, texts)
	if err != nil {
		return nil, err
	}
	for i, v := range vecs {
		if !Normalize(v) {
			return nil, fmt.Errorf("embeddings with %s: %w: vector %d is all zeros", p.Model(), provider.ErrBadOutput, i)
		}
	}
	return vecs, nil
}

// New returns the embedder that opts configure: Lexical when opts.BaseURL
// is empty (no provider configured, the documented offline default),
// else Provider over a provider.Embedder built from opts. It does not
// contact the server; a bad option is an error, never a silent fallback
// to Lexical, since vectors of the two are not comparable.
func New(opts provider.EmbedOptions) (Embedder, error) {
	if opts.BaseURL == "" {
		return Lexical{}, nil
	}
	e, err := provider.NewEmbedder(opts)
	if err != nil {
		return nil, err
	}
	return Provider(e), nil
}
