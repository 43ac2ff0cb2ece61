package embed_test

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/embed/eval"
)

// TestLexicalDimension is why LexicalDimension is 1024: hashing features
// into fewer buckets adds collision noise to every cosine. Against
// reference vectors of 2^16 buckets (nearly collision-free), it
// measures for each dimension the mean absolute error of query-document
// cosines and how many of the reference top-5 documents with a cosine of 0.1 or more
// stay in the top 5,
// over both evaluation sets (60 queries × their documents). Run with -v to
// see the table; the assertion only pins LexicalDimension's figures.
func TestLexicalDimension(t *testing.T) {
	type pair struct{ queries, docs []string }
	var sets []pair
	for _, name := range []string{"tools", "prompts"} {
		set, err := eval.Load(filepath.Join("testdata", name+".json"))
		require.NoError(t, err)
		var p pair
		for _, q := range set.Queries {
			p.queries = append(p.queries, q.Text)
		}
		for _, d := range set.Docs {
			p.docs = append(p.docs, d.Text)
		}
		sets = append(sets, p)
	}
	cosines := func(dim int, p pair) [][]float64 {
		qv, err := embed.EmbedLexical(p.queries, dim)
		require.NoError(t, err)
		dv, err := embed.EmbedLexical(p.docs, dim)
		require.NoError(t, err)
		out := make([][]float64, len(qv))
		for i := range qv {
			for j := range dv {
				out[i] = append(out[i], embed.Cosine(qv[i], dv[j]))
			}
		}
		return out
	}
	top5 := func(row []float64) []int {
		idx := make([]int, len(row))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case row[a] > row[b]:
				return -1
			case row[a] < row[b]:
				return 1
			}
			return 0
		})
		return idx[:5]
	}
	var refs [][][]float64
	for _, p := range sets {
		refs = append(refs, cosines(1<<16, p))
	}
	measure := func(dim int) (mae, overlap float64) {
		n, m := 0, 0
		for s, p := range sets {
			got := cosines(dim, p)
			for i := range got {
				for j := range got[i] {
					mae += math.Abs(got[i][j] - refs[s][i][j])
					n++
				}
				// Only matches that mean something: among near-zero
				// cosines the order is noise at any dimension.
				var want []int
				for _, d := range top5(refs[s][i]) {
					if refs[s][i][d] >= 0.1 {
						want = append(want, d)
					}
				}
				for _, d := range top5(got[i]) {
					if slices.Contains(want, d) {
						overlap++
					}
				}
				m += len(want)
			}
		}
		return mae / float64(n), overlap / float64(m)
	}
	for _, dim := range []int{256, 512, 1024, 2048} {
		mae, overlap := measure(dim)
		t.Logf("dimension %4d: mean |cosine error| %.4f, reference top-5 kept %.3f", dim, mae, overlap)
	}
	// Measured at 1024: 0.0197 and 0.940 (512: 0.0291 and 0.881).
	mae, overlap := measure(embed.LexicalDimension)
	require.Less(t, mae, 0.02)
	require.GreaterOrEqual(t, overlap, 0.92)
}
