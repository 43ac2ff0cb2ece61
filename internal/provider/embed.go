package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/sashabaranov/go-openai"
)

// maxEmbedBody bounds an embeddings body: 64 vectors of 3072 floats as
// JSON text are about 4 MB.
const maxEmbedBody = 64 << 20

// EmbedOptions configure an Embedder.
type EmbedOptions struct {
	Options
	// BatchSize is the most texts sent in one request; 0 means
	// DefaultBatchSize. OpenAI takes up to 2048, local servers often far
	// fewer.
	BatchSize int
	// Dimensions, if not 0, asks the server for vectors of this size (the
	// API's dimensions parameter, for models that can shorten their
	// vectors such as text-embedding-3-*) and expects it.
	Dimensions int
	// KnownDimension, if not 0, is the dimension of the vectors already
	// stored for this model, so a changed model is caught on its first
	// answer rather than by the database.
	KnownDimension int
}

// Embedder calls an OpenAI-compatible /embeddings endpoint. It is safe for
// concurrent use.
type Embedder struct {
	c     *client
	model string
	batch int
	dims  int
	dim   atomic.Int64
}

// NewEmbedder checks opts and returns an embeddings client. It does not
// contact the server.
func NewEmbedder(opts EmbedOptions) (*Embedder, error) {
	var errs []error
	c, err := newClient(opts.Options, "/embeddings", DefaultEmbedTimeout, maxEmbedBody)
	if err != nil {
		errs = append(errs, err)
	}
	if opts.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("provider options: batch size %d is negative", opts.BatchSize))
	}
	if opts.Dimensions < 0 || opts.KnownDimension < 0 {
		errs = append(errs, errors.New("provider options: dimensions must be 0 or more"))
	}
	if opts.Dimensions > 0 && opts.KnownDimension > 0 && opts.Dimensions != opts.KnownDimension {
		errs = append(errs, fmt.Errorf("provider options: requested dimensions %d differ from the known dimension %d",
			opts.Dimensions, opts.KnownDimension))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	e := &Embedder{c: c, model: strings.TrimSpace(opts.Model), batch: opts.BatchSize, dims: opts.Dimensions}
	if e.batch == 0 {
		e.batch = DefaultBatchSize
	}
	e.dim.Store(int64(max(opts.Dimensions, opts.KnownDimension)))
	return e, nil
}

// Model returns the configured model name, the one to record with the
// vectors.
func (e *Embedder) Model() string { return e.model }

// Dimension returns the dimension of the model's vectors: the known or
// requested one, else the one of the first answer; 0 until then.
func (e *Embedder) Dimension() int { return int(e.dim.Load()) }

// Embed returns one vector per text, in the order of texts, sending them
// in batches of BatchSize one after another; each batch is bounded by the
// Timeout. Every vector has the model's dimension: one that differs from
// what the model returned before is a *DimensionError. Empty texts are
// refused (ErrRejected) before anything is sent, as OpenAI would.
//
// Errors are classified as for Chat.Complete: ErrUnavailable (and
// bus.Unavailable), ErrRejected, ErrBadOutput, ErrDimensionChanged, or
// ctx's error.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	for i, t := range texts {
		if strings.TrimSpace(t) == "" {
			return nil, e.wrap(rejected(fmt.Errorf("text %d is empty", i)))
		}
	}
	out := make([][]float32, len(texts))
	for lo := 0; lo < len(texts); lo += e.batch {
		hi := min(lo+e.batch, len(texts))
		if err := e.embedBatch(ctx, texts[lo:hi], out[lo:hi]); err != nil {
			if len(texts) > e.batch {
				err = fmt.Errorf("texts %d to %d of %d: %w", lo, hi-1, len(texts), err)
			}
			return nil, e.wrap(err)
		}
	}
	return out, nil
}

func (e *Embedder) wrap(err error) error {
	return fmt.Errorf("embeddings with %s at %s: %w", e.model, e.c.name, err)
}

// embedBatch embeds texts into out, which has the same length.
func (e *Embedder) embedBatch(ctx context.Context, texts []string, out [][]float32) error {
	body, err := json.Marshal(openai.EmbeddingRequest{Input: texts, Model: openai.EmbeddingModel(e.model), Dimensions: e.dims})
	if err != nil {
		return rejected(fmt.Errorf("encode request: %w", err))
	}
	callCtx, cancel := context.WithTimeout(ctx, e.c.timeout)
	defer cancel()
	data, err := e.c.post(callCtx, &call{c: e.c}, body)
	if err == nil {
		err = e.decode(data, out)
	}
	if err != nil {
		return e.c.fail(ctx, callCtx, err)
	}
	return nil
}

// decode checks an embeddings answer against the batch and places each
// vector by its index: the order of data is not guaranteed by every server.
func (e *Embedder) decode(data []byte, out [][]float32) error {
	var wire openai.EmbeddingResponse
	if err := json.Unmarshal(data, &wire); err != nil {
		return badOutput("answer is not an embeddings list (%v): %s", err, snippet(data))
	}
	if len(wire.Data) != len(out) {
		return badOutput("%d vectors for %d texts", len(wire.Data), len(out))
	}
	dim := 0
	for _, d := range wire.Data {
		if d.Index < 0 || d.Index >= len(out) || out[d.Index] != nil {
			return badOutput("vector index %d is out of range or repeated", d.Index)
		}
		if len(d.Embedding) == 0 {
			return badOutput("vector %d is empty", d.Index)
		}
		if dim == 0 {
			dim = len(d.Embedding)
		} else if len(d.Embedding) != dim {
			return badOutput("vectors of %d and %d dimensions in one answer", dim, len(d.Embedding))
		}
		out[d.Index] = d.Embedding
	}
	if !e.dim.CompareAndSwap(0, int64(dim)) {
		if want := int(e.dim.Load()); want != dim {
			clear(out)
			return &DimensionError{Model: e.model, Want: want, Got: dim}
		}
	}
	return nil
}
