//go:build !amd64

package uselite

// useAVX2 is false: the assembly kernel is amd64's.
var useAVX2 = false

func kernel(k int, x []float32, xs int, panel []float32, y []float32, ys int) {
	kernelGo(k, x, xs, panel, y, ys)
}
