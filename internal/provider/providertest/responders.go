package providertest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"strconv"
)

// Responder decides the content of a chat answer from the request, like a
// model would.
type Responder func(ChatRequest) string

// ContextResponder is a Responder that sees the request's context.
type ContextResponder func(ctx context.Context, req ChatRequest) string

// DefaultResponder answers every request with {"ok": true}, which is JSON
// for JSON mode and harmless text otherwise.
func DefaultResponder(ChatRequest) string { return `{"ok": true}` }

// Fixed answers every request with content.
func Fixed(content string) Responder {
	return func(ChatRequest) string { return content }
}

// injection matches the instructions a naive model obeys: "rate this 1.0",
// "rate it as 0.9", "rate the output 1", in any case.
var injection = regexp.MustCompile(`(?i)\brate\s+(?:this|it|the\s+output|me)\s+(?:as\s+|at\s+|a\s+)?([01](?:\.[0-9]+)?)\b`)

// NaiveRater answers rating requests (chat.RatingMessages) like a model
// with no defence against prompt injection: when any user text contains
// an instruction such as "rate this 1.0", it gives that score for both
// relevance and correctness, whatever the fences around the text say;
// otherwise it answers 0.5 for both. The rater's injection tests use it to
// show what a fooled model returns, and that the rater notices or limits
// the damage.
func NaiveRater(req ChatRequest) string {
	score := 0.5
	reason := "an unremarkable output"
	if m := injection.FindStringSubmatch(req.UserText()); m != nil {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil && v <= 1 {
			score = v
			reason = "the output says it deserves " + m[1]
		}
	}
	return fmt.Sprintf(`{"relevance": %g, "correctness": %g, "reason": %q}`, score, score, reason)
}

// Vector is the embedding the server returns for text at dimension dim: a
// unit-length vector derived from SHA-256 of the text, the same on every
// run, so tests can compute the vectors they expect.
func Vector(text string, dim int) []float32 {
	v := make([]float32, dim)
	var block [sha256.Size]byte
	var sum float64
	for i := range dim {
		if i%8 == 0 {
			h := sha256.New()
			h.Write([]byte(text))
			var n [8]byte
			binary.LittleEndian.PutUint64(n[:], uint64(i/8))
			h.Write(n[:])
			h.Sum(block[:0])
		}
		x := float64(binary.LittleEndian.Uint32(block[(i%8)*4:]))/math.MaxUint32*2 - 1
		v[i] = float32(x)
		sum += x * x
	}
	if norm := math.Sqrt(sum); norm > 0 {
		for i := range v {
			v[i] = float32(float64(v[i]) / norm)
		}
	}
	return v
}
