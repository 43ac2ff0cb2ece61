package uselite_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed/eval"
	"github.com/agentq/agentq/internal/embed/uselite"
)

func root(t testing.TB) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	return r
}

func load(t testing.TB) *uselite.Model {
	t.Helper()
	m, err := uselite.Load(root(t))
	require.NoError(t, err)
	return m
}

// long is ~800 tokens, 5,000 characters: far past what the model reads.
var long = strings.Repeat("the indexer embeds prompts and tools for retrieval by meaning ", 80)

// corpus is every text of the evaluation sets, and texts aimed at the
// tokenizer's corners: unknown symbols and their runs, characters outside
// the BMP, NFKC folding, null-scored pieces, long words, long texts.
func corpus(t *testing.T) []string {
	var texts []string
	for _, name := range []string{"tools", "prompts", "prompts-intent"} {
		set, err := eval.Load(filepath.Join("..", "testdata", name+".json"))
		require.NoError(t, err)
		for _, d := range set.Docs {
			texts = append(texts, d.Text)
		}
		for _, q := range set.Queries {
			texts = append(texts, q.Text)
		}
	}
	return append(texts,
		"send an email",
		"send 😀 an email",
		"emoji 😀😀 and 🚀 rockets, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math letters",
		"ﬁnance ｆｕｌｌｗｉｄｔｈ ①②③ ℌ",
		"漢字漢字漢字 ☃☃☃ ǅ",
		"  leading and   multiple   spaces\tand\ttabs\nand lines  ",
		"time: 10:30; ratio 3:2 — colons",
		"supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis",
		"----------------................////////",
		"a",
		long,
		long[:700],
	)
}

type reference struct {
	Tokens  [][]int     `json:"tokens"`
	Vectors [][]float32 `json:"vectors"`
}

// packageReference runs testdata/reference.mjs: the npm package's own
// tokenizer and EmbeddingsModel.embed (TensorFlow.js), each text alone.
func packageReference(t *testing.T, texts []string) reference {
	t.Helper()
	in, err := json.Marshal(texts)
	require.NoError(t, err)
	script, err := filepath.Abs(filepath.Join("testdata", "reference.mjs"))
	require.NoError(t, err)
	cmd := exec.Command("node", script)
	cmd.Dir = root(t)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node testdata/reference.mjs: %s", stderr.String())
	var ref reference
	require.NoError(t, json.Unmarshal(out, &ref))
	require.Len(t, ref.Tokens, len(texts))
	require.Len(t, ref.Vectors, len(texts))
	return ref
}

// TestMatchesPackage proves that uselite computes what the npm package
// computes through TensorFlow.js: the same token ids for every text, and
// vectors equal to within float rounding (different summation orders and
// transcendental functions, never a different computation: a wrong
// operation moves a vector by far more than 1e-5).
func TestMatchesPackage(t *testing.T) {
	m := load(t)
	texts := corpus(t)
	ref := packageReference(t, texts)
	var worstCos, worstDiff float64 = 1, 0 // worst over the corpus, for the log
	for i, text := range texts {
		require.Equal(t, ref.Tokens[i], m.Tokenize(text), "tokens of %.80q", text)
		got := m.Embed(text)
		want := ref.Vectors[i]
		require.Len(t, got, uselite.Dimension)
		var dot, gg, ww, diff float64
		for j := range got {
			g, w := float64(got[j]), float64(want[j])
			dot += g * w
			gg += g * g
			ww += w * w
			diff = max(diff, math.Abs(g-w))
		}
		cos := dot / math.Sqrt(gg*ww)
		worstCos, worstDiff = min(worstCos, cos), max(worstDiff, diff)
		require.Greater(t, cos, 0.99999, "cosine with the package's vector of %.80q", text)
		require.Less(t, diff, 1e-5, "largest difference from the package's vector of %.80q", text)
	}
	t.Logf("%d texts: worst cosine 1 - %.2g, largest difference %.2g", len(texts), 1-worstCos, worstDiff)
}

// TestLoadRefuses: a package holding another graph or other weights is
// refused, not computed with code written for another.
func TestLoadRefuses(t *testing.T) {
	src := filepath.Join(root(t), uselite.Package, "dist")
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	copyPackage := func(t *testing.T, edit func(name string, data []byte) []byte) string {
		dir := t.TempDir()
		dist := filepath.Join(dir, uselite.Package, "dist")
		require.NoError(t, os.MkdirAll(dist, 0o755))
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(src, e.Name()))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dist, e.Name()), edit(e.Name(), data), 0o644))
		}
		return dir
	}
	tests := []struct {
		name string
		edit func(name string, data []byte) []byte
		want string
	}{
		{"another graph", func(name string, data []byte) []byte {
			if name == "model.json" {
				return bytes.Replace(data, []byte(`"Tanh"`), []byte(`"Relu"`), 1)
			}
			return data
		}, "model.json has sha256"},
		{"other weights", func(name string, data []byte) []byte {
			if name == "group1-shard3of7" {
				data[1000] ^= 1
			}
			return data
		}, "weights and vocabulary"},
		{"another vocabulary", func(name string, data []byte) []byte {
			if name == "vocab.json" {
				return bytes.Replace(data, []byte(`"▁an"`), []byte(`"▁on"`), 1)
			}
			return data
		}, "weights and vocabulary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := uselite.Load(copyPackage(t, tt.edit))
			require.ErrorIs(t, err, uselite.ErrUnknownModel)
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err = uselite.Load(t.TempDir())
	require.ErrorIs(t, err, os.ErrNotExist)
}

// BenchmarkEmbed: one text of 6, 33 and 128 tokens (a tool query, a
// tool's description, a prompt cut to what the model reads).
func BenchmarkEmbed(b *testing.B) {
	m, err := uselite.Load(filepath.Join("..", "..", ".."))
	require.NoError(b, err)
	for _, text := range []string{
		"send an email to a customer",
		"Delete a file from the disk permanently, and never look back, because the quick brown fox jumps over the lazy dog again and again.",
		long,
	} {
		n := min(len(m.Tokenize(text)), uselite.MaxTokens)
		b.Run(fmt.Sprintf("%03d-tokens", n), func(b *testing.B) {
			for b.Loop() {
				m.Embed(text)
			}
		})
	}
}
