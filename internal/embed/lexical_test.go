package embed_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/embed/eval"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/lexical-golden.json (only after changing LexicalModel)")

// goldenTexts cover ASCII, camelCase and snake_case names, accents,
// non-Latin scripts, repetition and stop words only.
var goldenTexts = []string{
	"get_weather: Get the current weather conditions and temperature for a city.",
	"createCalendarEvent with attendees",
	"Café crème brûlée — naïve résumé",
	"Привет, мир! 東京の天気",
	"retry retry retry retry backoff",
	"the and of",
	"x",
}

type golden struct {
	Model     string   `json:"model"`
	Dimension int      `json:"dimension"`
	Texts     []string `json:"texts"`
	// SHA256 is the hex SHA-256 of every vector's float32 values, little
	// endian, in order: any change to any bit of any vector changes it.
	SHA256 string `json:"sha256"`
}

func checksum(t testing.TB, vecs [][]float32) string {
	h := sha256.New()
	for _, v := range vecs {
		require.NoError(t, binary.Write(h, binary.LittleEndian, v))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestLexicalGolden pins Lexical's vectors to a checksum stored in
// testdata: the same texts give bit-identical vectors in every process, on
// every platform, in every build. If it fails, the features changed:
// stored vectors no longer match new ones, so bump LexicalModel's version
// and run `go test ./internal/embed/ -run Golden -update`.
func TestLexicalGolden(t *testing.T) {
	vecs, err := embed.Lexical{}.Embed(context.Background(), goldenTexts)
	require.NoError(t, err)
	got := golden{Model: embed.LexicalModel, Dimension: embed.LexicalDimension, Texts: goldenTexts, SHA256: checksum(t, vecs)}
	path := filepath.Join("testdata", "lexical-golden.json")
	if *updateGolden {
		data, err := json.MarshalIndent(got, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(data, '\n'), 0o644))
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var want golden
	require.NoError(t, json.Unmarshal(data, &want))
	require.Equal(t, want, got, "Lexical's vectors changed: bump LexicalModel and update the golden file")
}

// TestLexicalAcrossProcesses embeds the golden texts in a fresh process
// (this test binary re-run) and compares checksums: nothing seeded per
// process (map order, maphash) leaks into the vectors.
func TestLexicalAcrossProcesses(t *testing.T) {
	if os.Getenv("AGENTQ_EMBED_CHILD") == "1" {
		vecs, err := embed.Lexical{}.Embed(context.Background(), goldenTexts)
		require.NoError(t, err)
		fmt.Printf("checksum=%s\n", checksum(t, vecs))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLexicalAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AGENTQ_EMBED_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	vecs, err := embed.Lexical{}.Embed(context.Background(), goldenTexts)
	require.NoError(t, err)
	require.Contains(t, string(out), "checksum="+checksum(t, vecs)+"\n")
}

func TestLexicalVectors(t *testing.T) {
	l := embed.Lexical{}
	require.Equal(t, "agentq-lexical-v1", l.Model())
	require.Equal(t, 1024, l.Dimension())
	ctx := context.Background()

	texts := []string{"send an email", "Send an e-mail!", "delete a file", "send an email"}
	vecs, err := l.Embed(ctx, texts)
	require.NoError(t, err)
	require.Len(t, vecs, len(texts))
	for i, v := range vecs {
		require.Len(t, v, embed.LexicalDimension)
		var sum float64
		for _, x := range v {
			sum += float64(x) * float64(x)
		}
		require.InDelta(t, 1, math.Sqrt(sum), 1e-6, "vector %d has unit length", i)
		one, err := l.Embed(ctx, []string{texts[i]})
		require.NoError(t, err)
		require.Equal(t, one[0], v, "vector %d is the one of its text alone: order preserved, no batch effects", i)
	}
	require.Equal(t, vecs[0], vecs[3], "same text, same vector")
	require.InDelta(t, 1, embed.Cosine(vecs[0], vecs[3]), 1e-6)
	require.Greater(t, embed.Cosine(vecs[0], vecs[1]), embed.Cosine(vecs[0], vecs[2]), "case and punctuation matter less than words")

	vecs, err = l.Embed(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, vecs)
}

func TestLexicalEmptyText(t *testing.T) {
	for _, text := range []string{"", "   ", "?!. -- ...", "\n\t"} {
		t.Run(fmt.Sprintf("%q", text), func(t *testing.T) {
			vecs, err := embed.Lexical{}.Embed(context.Background(), []string{"fine", text})
			require.Nil(t, vecs)
			require.ErrorIs(t, err, embed.ErrEmptyText)
			require.ErrorContains(t, err, "agentq-lexical-v1: text 1: ")
		})
	}
	// A text of stop words only still has features: they are kept when
	// nothing else is left.
	vecs, err := embed.Lexical{}.Embed(context.Background(), []string{"the", "of the"})
	require.NoError(t, err)
	require.Less(t, embed.Cosine(vecs[0], vecs[1]), 0.99)
	require.Greater(t, embed.Cosine(vecs[0], vecs[1]), 0.3)
}

// TestLexicalSimilarities checks the features one by one: each pair
// shares exactly one kind of evidence and must be more similar than an
// unrelated text.
func TestLexicalSimilarities(t *testing.T) {
	tests := []struct {
		name, a, b string
		min        float64
	}{
		{"inflections fold to one word", "creating invoices", "create invoice", 0.6},
		{"camelCase and snake_case names split", "getWeatherForecast", "get_weather_forecast", 0.99},
		{"accents are dropped", "résumé café", "resume cafe", 0.99},
		{"stop words do not count", "how do I get the weather in the city", "get weather city", 0.99},
		{"trigrams link related words", "configuration", "configure", 0.3},
	}
	unrelated := "transcribe podcast audio"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vecs, err := embed.Lexical{}.Embed(context.Background(), []string{tt.a, tt.b, unrelated})
			require.NoError(t, err)
			sim := embed.Cosine(vecs[0], vecs[1])
			require.GreaterOrEqual(t, sim, tt.min)
			require.Less(t, math.Abs(embed.Cosine(vecs[0], vecs[2])), 0.15, "unrelated texts are near orthogonal")
		})
	}
}

// TestLexicalRetrieval measures Lexical on the evaluation sets in testdata
// and logs the figures (go test -v -run Retrieval). The floors are the
// figures measured when the embedder was written, rounded down: Lexical is
// deterministic, so a drop below them is a regression of the features, not
// noise.
//
//   - tools: 40 tools (name: one-line description), 40 queries that
//     paraphrase a need without any word of the tool's description
//     (TestToolQueriesAreParaphrases): the case a lexical embedder is
//     worst at. Its floor documents that weakness rather than a goal.
//   - prompts: 20 prompts of 96-117 words, 20 queries quoting or closely
//     paraphrasing a phrase of one prompt.
//   - prompts-intent: the same 20 prompts, 20 queries saying what the user
//     wants in their own words ("help me apply for a job"), the way an
//     agent searches; few words are shared.
func TestLexicalRetrieval(t *testing.T) {
	floors := map[string]struct{ recall5, ndcg10 float64 }{
		"tools":          {0.2, 0.19}, // measured 0.200, 0.196; chance is 0.125 for recall@5
		"prompts":        {1, 0.99},   // measured 1.000, 1.000
		"prompts-intent": {0.8, 0.64}, // measured 0.800, 0.648; chance is 0.25 for recall@5
	}
	ctx := context.Background()
	for _, name := range []string{"tools", "prompts", "prompts-intent"} {
		t.Run(name, func(t *testing.T) {
			set, err := eval.Load(filepath.Join("testdata", name+".json"))
			require.NoError(t, err)
			rank, err := eval.Cosine(ctx, embed.Lexical{}, set.Docs)
			require.NoError(t, err)
			rep, err := eval.Evaluate(ctx, set, rank)
			require.NoError(t, err)
			t.Log(rep)
			for _, r := range rep.Results {
				if r.Recall5 < 1 {
					t.Logf("miss: %q → %s", r.Query, strings.Join(r.Ranked[:5], ", "))
				}
			}
			require.GreaterOrEqual(t, rep.Recall5, floors[name].recall5)
			require.GreaterOrEqual(t, rep.NDCG10, floors[name].ndcg10)
		})
	}
}

// TestToolQueriesAreParaphrases keeps the tool set honest: no query
// shares a word (after folding case) with the description of the tool it
// looks for, stop words aside.
func TestToolQueriesAreParaphrases(t *testing.T) {
	set, err := eval.Load(filepath.Join("testdata", "tools.json"))
	require.NoError(t, err)
	require.Len(t, set.Docs, 40)
	require.Len(t, set.Queries, 40)
	words := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
			return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
		}) {
			m[w] = true
		}
		return m
	}
	common := words("a an the to of in into for on at is it my me i what how this do which with from and or its by be are")
	text := map[string]string{}
	for _, d := range set.Docs {
		text[d.ID] = d.Text
	}
	for _, q := range set.Queries {
		desc := words(text[q.Relevant[0]])
		for w := range words(q.Text) {
			if !common[w] {
				require.False(t, desc[w], "query %q repeats %q of %s", q.Text, w, q.Relevant[0])
			}
		}
	}
}

// TestLexicalConcurrent embeds from several goroutines at once (run it
// with -race): Lexical keeps no state between calls.
func TestLexicalConcurrent(t *testing.T) {
	texts := benchTexts(32, 40)
	want, err := embed.Lexical{}.Embed(context.Background(), texts)
	require.NoError(t, err)
	errs := make(chan error, 8)
	got := make([][][]float32, 8)
	for g := range got {
		go func() {
			var err error
			got[g], err = embed.Lexical{}.Embed(context.Background(), texts)
			errs <- err
		}()
	}
	for range got {
		require.NoError(t, <-errs)
	}
	for g := range got {
		require.Equal(t, want, got[g])
	}
}
