package uselite

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly kernel: AVX2 and FMA (x86-64-v3).
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

func kernel(k int, x []float32, xs int, panel []float32, y []float32, ys int) {
	if !useAVX2 {
		kernelGo(k, x, xs, panel, y, ys)
		return
	}
	// Bounds the assembly relies on.
	_ = x[(blockRows-1)*xs+k-1]
	_ = panel[k*panelWidth-1]
	_ = y[(blockRows-1)*ys+panelWidth-1]
	kernelAVX2(k, &x[0], xs, &panel[0], &y[0], ys)
}

// kernelAVX2 is kernelGo with 12 accumulators of 8 floats (6 rows × 16
// columns) and one fused multiply-add per k, row and half-panel.
//
//go:noescape
func kernelAVX2(k int, x *float32, xs int, panel *float32, y *float32, ys int)
