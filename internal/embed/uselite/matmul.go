package uselite

import (
	"runtime"
	"sync"
)

// Matrix products y = x·w of a few rows (a text's tokens) by a weight
// matrix, the encoder's whole cost. w is packed once, at load, in panels
// of panelWidth columns ([out/panelWidth][in][panelWidth]), so the kernel
// reads it in order; the kernel computes blockRows rows of one panel at a
// time, each output element a fused multiply-add chain over k in order
// from 0. So a row's result never depends on the other rows or on how the
// panels are shared between cores: a text's vector is the same alone or
// in any batch, on any number of cores.
const (
	panelWidth = 16
	blockRows  = 6
)

// parallelMACs is the product size from which the panels are shared
// between cores: below it, handing work over costs more than it saves. A
// variable so tests can share small products.
var parallelMACs = 1 << 24

// packed is a weight matrix in panels.
type packed struct {
	p       []float32
	in, out int
}

func pack(w []float32, in, out int) packed {
	if out%panelWidth != 0 {
		panic("uselite: a weight matrix's width is not a multiple of the panel width")
	}
	p := make([]float32, len(w))
	for j := 0; j < out; j += panelWidth {
		panel := p[j*in : (j+panelWidth)*in]
		for k := 0; k < in; k++ {
			copy(panel[k*panelWidth:(k+1)*panelWidth], w[k*out+j:k*out+j+panelWidth])
		}
	}
	return packed{p: p, in: in, out: out}
}

// mul sets y (n rows of w.out) to x (n rows of w.in) times w. x and y
// must have room for n rounded up to blockRows rows: mul clears x's extra
// rows and writes garbage in y's.
func (w *packed) mul(y, x []float32, n int) {
	blocks := (n + blockRows - 1) / blockRows
	clear(x[n*w.in : blocks*blockRows*w.in])
	panels := w.out / panelWidth
	workers := 1
	if n*w.in*w.out >= parallelMACs {
		workers = min(runtime.GOMAXPROCS(0), panels)
	}
	if workers == 1 {
		w.mulPanels(y, x, blocks, 0, panels)
		return
	}
	var wg sync.WaitGroup
	for i := 1; i < workers; i++ {
		wg.Go(func() { w.mulPanels(y, x, blocks, i*panels/workers, (i+1)*panels/workers) })
	}
	w.mulPanels(y, x, blocks, 0, panels/workers)
	wg.Wait()
}

// mulPanels computes panels [from, to) of y = x·w for blocks of rows.
func (w *packed) mulPanels(y, x []float32, blocks, from, to int) {
	for j := from; j < to; j++ {
		panel := w.p[j*panelWidth*w.in : (j+1)*panelWidth*w.in]
		for b := 0; b < blocks; b++ {
			r := b * blockRows
			kernel(w.in, x[r*w.in:(r+blockRows)*w.in], w.in, panel, y[r*w.out+j*panelWidth:(r+blockRows-1)*w.out+(j+1)*panelWidth], w.out)
		}
	}
}

// kernelGo is the kernel in Go, for machines without the assembly one:
// blockRows rows of x (row stride xs) times one panel (k rows of
// panelWidth) into y (row stride ys). Its multiply-adds are not fused
// (math.FMA is emulated, slowly, where there is no FMA instruction), so its
// last bits differ from the assembly's: a vector is the same bits on the
// same kind of machine, within ~1e-7 across kinds.
func kernelGo(k int, x []float32, xs int, panel []float32, y []float32, ys int) {
	for r := 0; r < blockRows; r++ {
		var acc [panelWidth]float32
		row := x[r*xs : r*xs+k]
		for i, a := range row {
			p := panel[i*panelWidth : (i+1)*panelWidth]
			for c := range acc {
				acc[c] += float32(a * p[c])
			}
		}
		copy(y[r*ys:r*ys+panelWidth], acc[:])
	}
}
