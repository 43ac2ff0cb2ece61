package eval_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed/eval"
)

func TestMeasures(t *testing.T) {
	inv2 := 1 / math.Log2(3) // discount of rank 2: 1/log2(3) = 0.6309
	tests := []struct {
		name               string
		ranked, relevant   []string
		r1, r2, r3, ndcg10 float64
		mrr                float64
	}{
		{
			// DCG = 1/log2(3) + 1/log2(4) = 0.6309 + 0.5 = 1.1309;
			// ideal = 1 + 1/log2(3) = 1.6309; nDCG = 0.6934.
			name: "relevant a and c ranked second and third", ranked: []string{"b", "a", "c"}, relevant: []string{"a", "c"},
			r1: 0, r2: 0.5, r3: 1, ndcg10: (inv2 + 0.5) / (1 + inv2), mrr: 0.5,
		},
		{
			name: "perfect ranking", ranked: []string{"a", "c", "b"}, relevant: []string{"a", "c"},
			r1: 0.5, r2: 1, r3: 1, ndcg10: 1, mrr: 1,
		},
		{
			// DCG = 1/log2(4) = 0.5, ideal = 1: nDCG = 0.5.
			name: "one relevant, third", ranked: []string{"b", "c", "a"}, relevant: []string{"a"},
			r1: 0, r2: 0, r3: 1, ndcg10: 0.5, mrr: 1.0 / 3,
		},
		{
			name: "relevant not retrieved (top-k cut)", ranked: []string{"b", "c"}, relevant: []string{"a"},
			r1: 0, r2: 0, r3: 0, ndcg10: 0, mrr: 0,
		},
		{
			// The repeat of a counts once: DCG = 1, ideal = 1 + 1/log2(3).
			name: "repeated id counts once", ranked: []string{"a", "a", "b"}, relevant: []string{"a", "c"},
			r1: 0.5, r2: 0.5, r3: 0.5, ndcg10: 1 / (1 + inv2), mrr: 1,
		},
		{
			name: "nothing relevant", ranked: []string{"a"}, relevant: nil,
			r1: 0, r2: 0, r3: 0, ndcg10: 0, mrr: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.r1, eval.Recall(tt.ranked, tt.relevant, 1), 1e-12)
			require.InDelta(t, tt.r2, eval.Recall(tt.ranked, tt.relevant, 2), 1e-12)
			require.InDelta(t, tt.r3, eval.Recall(tt.ranked, tt.relevant, 3), 1e-12)
			require.InDelta(t, tt.ndcg10, eval.NDCG(tt.ranked, tt.relevant, 10), 1e-12)
			require.InDelta(t, tt.mrr, eval.MRR(tt.ranked, tt.relevant), 1e-12)
		})
	}
	require.InDelta(t, 0.693426, eval.NDCG([]string{"b", "a", "c"}, []string{"a", "c"}, 10), 1e-6, "the first case by hand")
	require.InDelta(t, 0, eval.NDCG([]string{"b", "a", "c"}, []string{"a", "c"}, 1), 1e-12, "nDCG@1 sees only b")
}

// vectors is an Embedder with fixed, already unit-length vectors.
type vectors map[string][]float32

func (v vectors) Model() string  { return "fixed" }
func (v vectors) Dimension() int { return 2 }
func (v vectors) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		vec, ok := v[t]
		if !ok {
			return nil, errors.New("unknown text " + t)
		}
		out[i] = vec
	}
	return out, nil
}

func TestCosineAndEvaluate(t *testing.T) {
	// Three documents on the unit circle at 0°, 60° and 90°; queries at
	// 80° (closest: c at 90°, then b at 60°, then a) and at 0°.
	deg := func(d float64) []float32 {
		r := d * math.Pi / 180
		return []float32{float32(math.Cos(r)), float32(math.Sin(r))}
	}
	e := vectors{"doc a": deg(0), "doc b": deg(60), "doc c": deg(90), "q80": deg(80), "q0": deg(0)}
	set := eval.Set{
		Name: "circle",
		Docs: []eval.Doc{{ID: "a", Text: "doc a"}, {ID: "b", Text: "doc b"}, {ID: "c", Text: "doc c"}},
		Queries: []eval.Query{
			{Text: "q80", Relevant: []string{"a", "b"}}, // ranked c, b, a
			{Text: "q0", Relevant: []string{"a"}},       // ranked a, b, c
		},
	}
	require.NoError(t, set.Validate())
	ctx := context.Background()
	rank, err := eval.Cosine(ctx, e, set.Docs)
	require.NoError(t, err)
	ranked, err := rank(ctx, "q80")
	require.NoError(t, err)
	require.Equal(t, []string{"c", "b", "a"}, ranked)

	rep, err := eval.Evaluate(ctx, set, rank)
	require.NoError(t, err)
	// q80: recall@1 0, @5 1; DCG = 1/log2(3) + 1/log2(4), ideal 1 + 1/log2(3); MRR 1/2.
	// q0: every measure 1.
	inv2 := 1 / math.Log2(3)
	require.Equal(t, "circle", rep.Set)
	require.Equal(t, 2, rep.Queries)
	require.InDelta(t, 0.5, rep.Recall1, 1e-12)
	require.InDelta(t, 1, rep.Recall5, 1e-12)
	require.InDelta(t, 1, rep.Recall10, 1e-12)
	require.InDelta(t, ((inv2+0.5)/(1+inv2)+1)/2, rep.NDCG10, 1e-12)
	require.InDelta(t, 0.75, rep.MRR, 1e-12)
	require.Len(t, rep.Results, 2)
	require.Equal(t, []string{"a", "b", "c"}, rep.Results[1].Ranked)

	// Any ranking function can be measured: here a fixed one.
	rep, err = eval.Evaluate(ctx, set, func(context.Context, string) ([]string, error) { return []string{"a"}, nil })
	require.NoError(t, err)
	require.InDelta(t, (0.5+1)/2, rep.Recall5, 1e-12)

	boom := errors.New("boom")
	_, err = eval.Evaluate(ctx, set, func(context.Context, string) ([]string, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
}

func TestValidateAndLoad(t *testing.T) {
	bad := eval.Set{
		Docs:    []eval.Doc{{ID: "a"}, {ID: "a"}, {ID: ""}},
		Queries: []eval.Query{{Text: "", Relevant: []string{"z"}}, {Text: "q"}},
	}
	err := bad.Validate()
	require.ErrorContains(t, err, `doc id "a" is repeated`)
	require.ErrorContains(t, err, "doc 2 has no id")
	require.ErrorContains(t, err, "query 0 has no text")
	require.ErrorContains(t, err, `names unknown doc "z"`)
	require.ErrorContains(t, err, `query 1 ("q") has no relevant ids`)

	path := filepath.Join(t.TempDir(), "set.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"name":"s","docs":[{"id":"a","text":"x"}],"queries":[{"text":"x","relevant":["a"]}]}`), 0o600))
	s, err := eval.Load(path)
	require.NoError(t, err)
	require.Equal(t, eval.Set{Name: "s", Docs: []eval.Doc{{ID: "a", Text: "x"}}, Queries: []eval.Query{{Text: "x", Relevant: []string{"a"}}}}, s)

	require.NoError(t, os.WriteFile(path, []byte(`{"docs":[{"id":"a"}],"queries":[{"text":"x","relevant":["b"]}]}`), 0o600))
	_, err = eval.Load(path)
	require.ErrorContains(t, err, `names unknown doc "b"`)
}

func TestRRF(t *testing.T) {
	fixed := func(ids ...string) eval.RankFunc {
		return func(context.Context, string) ([]string, error) { return ids, nil }
	}
	// k = 60: a = 1/61 + 1/62 = 0.03252, c = 1/63 + 1/61 = 0.03227,
	// b = 1/62 = 0.01613, d = 1/63 = 0.01587.
	got, err := eval.RRF(60, fixed("a", "b", "c"), fixed("c", "a", "d"))(context.Background(), "q")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c", "b", "d"}, got)

	// Equal scores go by id; an id repeated in one ranking counts once.
	got, err = eval.RRF(1, fixed("y", "x"), fixed("x", "y", "x"))(context.Background(), "q")
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y"}, got)

	boom := errors.New("boom")
	_, err = eval.RRF(60, fixed("a"), func(context.Context, string) ([]string, error) { return nil, boom })(context.Background(), "q")
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "ranking 2 of 2")
}
