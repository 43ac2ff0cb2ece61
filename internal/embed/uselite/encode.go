package uselite

import (
	"math"
	"sync"
)

// Tokenize returns text's token ids, all of them; the model reads the
// first MaxTokens.
func (m *Model) Tokenize(text string) []int { return m.tok.encode(text) }

// Embed returns text's vector, of unit length, or nil for a text with no
// tokens (empty once normalised). Its cost grows with the text's length
// up to MaxTokens tokens, and then only with the tokenizing.
func (m *Model) Embed(text string) []float32 {
	ids := m.Tokenize(text)
	if len(ids) == 0 {
		return nil
	}
	if len(ids) > MaxTokens {
		ids = ids[:MaxTokens]
	}
	return m.run(ids)
}

// workspace holds one run's intermediate rows: MaxTokens of each width,
// rounded up to whole blocks of the matrix kernel.
type workspace struct {
	x, h, qkv, att, y, ffn []float32
	q, kt, v, s            []float32 // one head's attention
	mean, pooled           []float32
}

const (
	maxRows = (MaxTokens + blockRows - 1) / blockRows * blockRows
	maxKeys = (MaxTokens + panelWidth - 1) / panelWidth * panelWidth
	maxHead = 128 // the widest head's dimensions
)

var workspaces = sync.Pool{New: func() any {
	return &workspace{
		x:      make([]float32, maxRows*512),
		h:      make([]float32, maxRows*512),
		qkv:    make([]float32, maxRows*1536),
		att:    make([]float32, maxRows*512),
		y:      make([]float32, maxRows*512),
		ffn:    make([]float32, maxRows*1536),
		q:      make([]float32, maxRows*maxHead),
		kt:     make([]float32, maxKeys*maxHead),
		v:      make([]float32, MaxTokens*maxHead),
		s:      make([]float32, maxRows*maxKeys),
		mean:   make([]float32, blockRows*512),
		pooled: make([]float32, blockRows*Dimension),
	}
}}

// run computes the vector of a sequence of token ids (1 to MaxTokens of
// them, each below the vocabulary's size), as the graph does for one text:
//
//	x  = 2·embedding + timing signal   (the graph adds the embeddings to
//	                                    themselves-plus-timing)
//	for each layer: y = attention(LN(x)) + residual(x); x = y + FFN(LN(y))
//	v  = l2normalize(tanh(mean(x)·W + b))
func (m *Model) run(ids []int) []float32 {
	n := len(ids)
	ws := workspaces.Get().(*workspace)
	defer workspaces.Put(ws)

	const d, half = embedWidth, embedWidth / 2
	x := ws.x[:n*d]
	for p, id := range ids {
		row := x[p*d : (p+1)*d]
		e := m.embed[id*d : (id+1)*d]
		pos := float32(p)
		for i := 0; i < half; i++ {
			a := pos * m.inv[i]
			row[i] = e[i] + (e[i] + float32(math.Sin(float64(a))))
			row[half+i] = e[half+i] + (e[half+i] + float32(math.Cos(float64(a))))
		}
	}
	for l := range m.layers {
		x = m.layers[l].run(ws, x, n, m.lnEps)
	}
	// Mean over the tokens, then the tanh layer.
	mean := ws.mean[:512]
	clear(mean)
	for p := 0; p < n; p++ {
		add(mean, x[p*512:(p+1)*512])
	}
	for i := range mean {
		mean[i] /= float32(n)
	}
	pooled := ws.pooled[:Dimension]
	m.pool.apply(pooled, ws.mean, 1)
	out := make([]float32, Dimension)
	var sum float32
	for i, v := range pooled {
		t := float32(math.Tanh(float64(v)))
		out[i] = t
		sum += float32(t * t)
	}
	inv := float32(1 / math.Sqrt(float64(max(sum, m.l2Eps))))
	for i := range out {
		out[i] *= inv
	}
	return out
}

// run applies the layer to x, n rows of its input width, and returns its
// output, n rows of 512, in ws.x.
func (ly *layer) run(ws *workspace, x []float32, n int, eps float32) []float32 {
	in := ly.qkv.w.in
	att := in // width of q, k and v
	h := ws.h[:n*in]
	layerNorm(h, x, n, in, ly.ln1Scale, ly.ln1Bias, eps)
	qkv := ws.qkv[:n*3*att]
	ly.qkv.apply(qkv, ws.h, n)
	ly.attend(ws, ws.att, qkv, n)
	y := ws.y[:n*512]
	ly.out.apply(y, ws.att, n)
	if ly.residual != nil {
		r := ws.h[:n*512] // h is free again
		ly.residual.apply(r, ws.x, n)
		add(y, r)
	} else {
		add(y, x)
	}
	h = ws.h[:n*512]
	layerNorm(h, y, n, 512, ly.ln2Scale, ly.ln2Bias, eps)
	f := ws.ffn[:n*1536]
	ly.ffn1.apply(f, ws.h, n)
	for i, v := range f {
		f[i] = max(v, 0) // ReLU
	}
	out := ws.x[:n*512]
	ly.ffn2.apply(ws.x, ws.ffn, n)
	add(out, y)
	return out
}

// attend computes multi-head self-attention over n rows of q|k|v into
// out, the heads side by side. Every token attends to every token. Both
// products of a head (q·kᵀ, then softmax·v) go through the matrix kernel,
// with kᵀ and v packed in panels for it.
func (ly *layer) attend(ws *workspace, out, qkv []float32, n int) {
	att := ly.heads * ly.headDim
	stride := 3 * att
	dh := ly.headDim
	blocks := (n + blockRows - 1) / blockRows
	panels := (n + panelWidth - 1) / panelWidth
	cols := panels * panelWidth // score columns, keys padded with zeros
	q := ws.q[:blocks*blockRows*dh]
	kt := ws.kt[:panels*panelWidth*dh]
	v := ws.v[:n*dh]
	scores := ws.s[:blocks*blockRows*cols]
	clear(q[n*dh:])
	clear(kt)
	for h := 0; h < ly.heads; h++ {
		off := h * dh
		for i := 0; i < n; i++ {
			row := qkv[i*stride : (i+1)*stride]
			for c, x := range row[off : off+dh] {
				q[i*dh+c] = x * ly.qScale
			}
			// kᵀ panel i/16 holds key i in column i%16; v is [n][dh]
			// packed in panels of 16 dimensions.
			panel := kt[i/panelWidth*panelWidth*dh:]
			for c, x := range row[att+off : att+off+dh] {
				panel[c*panelWidth+i%panelWidth] = x
			}
			for c, x := range row[2*att+off : 2*att+off+dh] {
				v[c/panelWidth*panelWidth*n+i*panelWidth+c%panelWidth] = x
			}
		}
		for p := 0; p < panels; p++ {
			for b := 0; b < blocks; b++ {
				r := b * blockRows
				kernel(dh, q[r*dh:], dh, kt[p*panelWidth*dh:(p+1)*panelWidth*dh], scores[r*cols+p*panelWidth:], cols)
			}
		}
		for i := 0; i < n; i++ {
			row := scores[i*cols : i*cols+n]
			top := float32(math.Inf(-1))
			for _, x := range row {
				top = max(top, x)
			}
			var sum float32
			for j, x := range row {
				e := float32(math.Exp(float64(x - top)))
				row[j] = e
				sum += e
			}
			for j := range row {
				row[j] /= sum
			}
		}
		for p := 0; p < dh/panelWidth; p++ {
			for b := 0; b < blocks; b++ {
				r := b * blockRows
				kernel(n, scores[r*cols:], cols, v[p*panelWidth*n:(p+1)*panelWidth*n], out[r*att+off+p*panelWidth:], att)
			}
		}
	}
}

// layerNorm normalises each of n rows of x (width w) into dst.
//
// Here and below, float32(a*b) keeps the compiler from fusing a multiply
// and an add (the spec allows it, GOAMD64=v3 and arm64 do it): the same
// bits whatever the build.
func layerNorm(dst, x []float32, n, w int, scale, bias []float32, eps float32) {
	for p := 0; p < n; p++ {
		row := x[p*w : (p+1)*w]
		out := dst[p*w : (p+1)*w]
		var mean float32
		for _, r := range row {
			mean += r
		}
		mean /= float32(w)
		var v float32
		for i, r := range row {
			c := r - mean
			out[i] = c
			v += float32(c * c)
		}
		v /= float32(w)
		inv := float32(1 / math.Sqrt(float64(v+eps)))
		for i := range out {
			out[i] = float32(scale[i]*inv*out[i]) + bias[i]
		}
	}
}

// apply computes dst = x·w + b for n rows; dst and x have room for n
// rounded up to whole blocks (see packed.mul).
func (d *dense) apply(dst, x []float32, n int) {
	d.w.mul(dst, x, n)
	out := d.w.out
	for p := 0; p < n; p++ {
		add(dst[p*out:(p+1)*out], d.b)
	}
}

// add adds y to x, element by element.
func add(x, y []float32) {
	y = y[:len(x)]
	for i := range x {
		x[i] += y[i]
	}
}
