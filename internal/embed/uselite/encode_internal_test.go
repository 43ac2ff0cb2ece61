package uselite

import (
	"fmt"
	"path/filepath"
	"runtime"
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
// the other rows, and however the product shares its panels between
// cores. It is what makes a text's vector independent of its batch and of
// the machine's core count.
func TestRowsIndependent(t *testing.T) {
	m := load(t)
	for _, d := range []dense{m.layers[0].qkv, m.layers[1].ffn1, m.layers[1].ffn2} {
		for _, n := range []int{1, 3, 4, 5, 7, 9, 33, MaxTokens} {
			x := make([]float32, maxRows*d.w.in)
			for i := range x[:n*d.w.in] {
				x[i] = float32(i%97)/97 - 0.5
			}
			all := make([]float32, maxRows*d.w.out)
			d.apply(all, x, n)
			xs := make([]float32, blockRows*d.w.in)
			one := make([]float32, blockRows*d.w.out)
			for p := 0; p < n; p++ {
				copy(xs, x[p*d.w.in:(p+1)*d.w.in])
				d.apply(one, xs, 1)
				require.Equal(t, one[:d.w.out], all[p*d.w.out:(p+1)*d.w.out], "%d×%d, %d rows: row %d", d.w.in, d.w.out, n, p)
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

// TestMul compares packed products with a float64 reference, for every
// row count around the kernel's block, on the assembly kernel and the Go
// one, one core and all.
func TestMul(t *testing.T) {
	const in, out = 96, 48
	w := make([]float32, in*out)
	for i := range w {
		w[i] = float32((i*7919)%1000)/500 - 1
	}
	p := pack(w, in, out)
	kernels := []struct {
		name string
		avx2 bool
	}{{"go", false}}
	if useAVX2 {
		kernels = append(kernels, struct {
			name string
			avx2 bool
		}{"avx2", true})
	}
	for _, k := range kernels {
		for _, procs := range []int{1, 2} {
			for n := 1; n <= 2*blockRows+1; n++ {
				t.Run(fmt.Sprintf("%s/procs=%d/rows=%d", k.name, procs, n), func(t *testing.T) {
					defer setAVX2(k.avx2)()
					defer setProcs(procs)()
					rows := (n + blockRows - 1) / blockRows * blockRows
					x := make([]float32, rows*in)
					for i := range x[:n*in] {
						x[i] = float32((i*104729)%777)/388 - 1
					}
					for i := n * in; i < len(x); i++ {
						x[i] = 1e30 // padding rows must be cleared, not read
					}
					y := make([]float32, rows*out)
					p.mul(y, x, n)
					for r := 0; r < n; r++ {
						for c := 0; c < out; c++ {
							var want float64
							for k := 0; k < in; k++ {
								want += float64(x[r*in+k]) * float64(w[k*out+c])
							}
							require.InDelta(t, want, y[r*out+c], 1e-4, "row %d column %d", r, c)
						}
					}
				})
			}
		}
	}
}

func setAVX2(on bool) func() {
	was := useAVX2
	useAVX2 = on && was
	return func() { useAVX2 = was }
}

// setProcs sets GOMAXPROCS and, above 1, shares every product between
// the cores.
func setProcs(n int) func() {
	was, macs := runtime.GOMAXPROCS(n), parallelMACs
	if n > 1 {
		parallelMACs = 0
	}
	return func() { runtime.GOMAXPROCS(was); parallelMACs = macs }
}
