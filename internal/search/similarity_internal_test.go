package search

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// similarity by mode: the mean of cosine and coverage in a hybrid search,
// each arm's own measure alone, a missing measure counting 0, full text
// alone scaled by BM25 against the best candidate's.
func TestSimilarity(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tune := tuning{cosShare: 0.5}
	for _, c := range []struct {
		name  string
		mode  Mode
		cos   *float64
		fu    fused
		bestL float64
		want  float64
	}{
		{"hybrid, both", Hybrid, f(0.6), fused{cov: f(1), lrank: f(3)}, 6, 0.8},
		{"hybrid, vector only", Hybrid, f(0.6), fused{}, 6, 0.3},
		{"hybrid, full text only", Hybrid, nil, fused{cov: f(0.5), lrank: f(6)}, 6, 0.25},
		{"hybrid, negative cosine", Hybrid, f(-0.2), fused{cov: f(0.4), lrank: f(1)}, 6, 0.2},
		{"vector", Vector, f(0.7), fused{cov: f(1), lrank: f(1)}, 1, 0.7},
		{"full text, the best", Lexical, nil, fused{cov: f(0.75), lrank: f(4)}, 4, 0.75},
		{"full text, half the best's BM25", Lexical, f(0.9), fused{cov: f(1), lrank: f(2)}, 4, 0.5},
		{"full text, not found", Lexical, nil, fused{}, 4, 0},
	} {
		require.InDelta(t, c.want, tune.similarity(c.mode, c.cos, c.fu, c.bestL), 1e-12, c.name)
	}
}
