package uselite

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func load(t testing.TB) *Model {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	m, err := Load(root)
	require.NoError(t, err)
	return m
}

// TestRowsIndependent: a row of a matrix product is the same bits whatever
// the other rows, and however the product splits rows across cores. It is
// what makes a text's vector independent of the machine's core count.
func TestRowsIndependent(t *testing.T) {
	m := load(t)
	for _, d := range []dense{m.layers[0].qkv, m.layers[1].ffn1, m.layers[1].ffn2} {
		for _, n := range []int{1, 3, 4, 5, 7, 9, 33, MaxTokens} {
			x := make([]float32, n*d.in)
			for i := range x {
				x[i] = float32(i%97)/97 - 0.5
			}
			all := make([]float32, n*d.out)
			d.apply(all, x, n)
			one := make([]float32, d.out)
			for p := 0; p < n; p++ {
				d.apply(one, x[p*d.in:(p+1)*d.in], 1)
				require.Equal(t, one, all[p*d.out:(p+1)*d.out], "%d×%d, %d rows: row %d", d.in, d.out, n, p)
			}
		}
	}
}

// TestRunLimits: the first and last ids of the vocabulary, one token and
// MaxTokens of them, give unit vectors.
func TestRunLimits(t *testing.T) {
	m := load(t)
	last := len(m.tok.length) - 1
	long := make([]int, MaxTokens)
	for i := range long {
		long[i] = (i * 131) % (last + 1)
	}
	for _, ids := range [][]int{{0}, {last}, long} {
		v := m.run(ids)
		require.Len(t, v, Dimension)
		var sum float64
		for _, x := range v {
			sum += float64(x) * float64(x)
		}
		require.InDelta(t, 1, sum, 1e-5)
	}
}
