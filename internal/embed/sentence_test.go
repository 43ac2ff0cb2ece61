package embed_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/embed/eval"
)

// These tests run the real encoder: `npm ci` done in the repository root
// (make deps), as CI does, for its weights.

var (
	sharedOnce     sync.Once
	sharedSentence *embed.Sentence
	sharedErr      error
)

// shared returns one Sentence for the tests that only embed. Tests that
// close it start their own.
func shared(t testing.TB) *embed.Sentence {
	t.Helper()
	sharedOnce.Do(func() {
		sharedSentence, sharedErr = embed.NewSentence(context.Background(), embed.SentenceOptions{})
	})
	require.NoError(t, sharedErr)
	return sharedSentence
}

func newSentence(t testing.TB, opts embed.SentenceOptions) *embed.Sentence {
	t.Helper()
	s, err := embed.NewSentence(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestSentenceGolden pins Sentence's vectors to a checksum stored in
// testdata: the same texts give bit-identical vectors in every process.
// If it fails, the weights, the tokenizer, the truncation or the
// arithmetic changed: stored vectors no longer match new ones, so bump
// SentenceModel's version and run
// `go test ./internal/embed/ -run SentenceGolden -update`.
func TestSentenceGolden(t *testing.T) {
	vecs, err := shared(t).Embed(context.Background(), goldenTexts)
	require.NoError(t, err)
	got := golden{Model: embed.SentenceModel, Dimension: embed.SentenceDimension, Texts: goldenTexts, SHA256: checksum(t, vecs)}
	path := filepath.Join("testdata", "sentence-golden.json")
	if *updateGolden {
		data, err := json.MarshalIndent(got, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(data, '\n'), 0o644))
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var want golden
	require.NoError(t, json.Unmarshal(data, &want))
	require.Equal(t, want, got, "Sentence's vectors changed: bump SentenceModel and update the golden file")

	// Another Sentence, and the texts in another order and batching: the
	// same vectors.
	other := newSentence(t, embed.SentenceOptions{})
	rev := slices.Clone(goldenTexts)
	slices.Reverse(rev)
	again, err := other.Embed(context.Background(), append(rev, "some other text in the batch"))
	require.NoError(t, err)
	for i, text := range goldenTexts {
		require.Equal(t, vecs[i], again[len(goldenTexts)-1-i], "vector of %q", text)
	}
}

func TestSentenceVectors(t *testing.T) {
	s := shared(t)
	require.Equal(t, "agentq-use-lite-v2", s.Model())
	require.Equal(t, 512, s.Dimension())
	ctx := context.Background()

	// Many texts of many token counts, with a repeat: order, count, and
	// no batch effects.
	texts := append(benchTexts(35, 12), "send an email", strings.Repeat("a long text about sending email ", 60), "send an email")
	vecs, err := s.Embed(ctx, texts)
	require.NoError(t, err)
	require.Len(t, vecs, len(texts))
	for i, v := range vecs {
		require.Len(t, v, embed.SentenceDimension)
		var sum float64
		for _, x := range v {
			sum += float64(x) * float64(x)
		}
		require.InDelta(t, 1, math.Sqrt(sum), 1e-6, "vector %d has unit length", i)
		one, err := s.Embed(ctx, []string{texts[i]})
		require.NoError(t, err)
		require.Equal(t, one[0], v, "vector %d is the one of its text alone: order kept, no batch effects", i)
	}
	require.Equal(t, vecs[len(texts)-3], vecs[len(texts)-1], "same text, same vector")

	vecs, err = s.Embed(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, vecs)
}

func TestSentenceEmptyText(t *testing.T) {
	s := shared(t)
	for _, text := range []string{"", "   ", "?!. -- ...", "\n\t"} {
		t.Run(fmt.Sprintf("%q", text), func(t *testing.T) {
			vecs, err := s.Embed(context.Background(), []string{"fine", text})
			require.Nil(t, vecs)
			require.ErrorIs(t, err, embed.ErrEmptyText)
			require.ErrorContains(t, err, "agentq-use-lite-v2: text 1: ")
			require.False(t, bus.IsUnavailable(err))
		})
	}
}

func TestSentenceSemantics(t *testing.T) {
	tests := []struct{ query, near, far string }{
		{"delete a file", "remove a document from disk", "get the weather forecast"},
		{"will it rain tomorrow", "get the weather forecast", "remove a document from disk"},
		{"book a flight to Paris", "reserve plane tickets", "set a timer for ten minutes"},
		{"how much money is in my account", "check the bank balance", "send a text message"},
	}
	s := shared(t)
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			vecs, err := s.Embed(context.Background(), []string{tt.query, tt.near, tt.far})
			require.NoError(t, err)
			near, far := embed.Cosine(vecs[0], vecs[1]), embed.Cosine(vecs[0], vecs[2])
			t.Logf("near %.3f, far %.3f", near, far)
			require.Greater(t, near, far+0.1)
		})
	}
}

// TestSentenceConcurrent embeds from several goroutines at once (run it
// with -race): each gets its own vectors, as computed alone.
func TestSentenceConcurrent(t *testing.T) {
	s := shared(t)
	ctx := context.Background()
	batches := make([][]string, 6)
	want := make([][][]float32, len(batches))
	for g := range batches {
		batches[g] = benchTexts(5+g, 8+3*g)
		var err error
		want[g], err = s.Embed(ctx, batches[g])
		require.NoError(t, err)
	}
	got := make([][][]float32, len(batches))
	errs := make(chan error, len(batches))
	for g := range batches {
		go func() {
			var err error
			got[g], err = s.Embed(ctx, batches[g])
			errs <- err
		}()
	}
	for range batches {
		require.NoError(t, <-errs)
	}
	require.Equal(t, want, got)
}

// longBatch is enough long texts to keep the encoder busy for a second or
// so: time to cancel mid-call.
func longBatch() []string { return benchTexts(96, 200) }

// TestSentenceCancel cancels a call in flight: it returns ctx's error
// before its texts are done, and the next call gets the right vectors.
func TestSentenceCancel(t *testing.T) {
	s := newSentence(t, embed.SentenceOptions{})
	want, err := s.Embed(context.Background(), goldenTexts)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	began := time.Now()
	go func() {
		_, err := s.Embed(ctx, longBatch())
		errc <- err
	}()
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	t.Logf("returned %s after the cancel", time.Since(began))

	got, err := s.Embed(context.Background(), goldenTexts)
	require.NoError(t, err)
	require.Equal(t, want, got)

	_, err = s.Embed(ctx, goldenTexts)
	require.ErrorIs(t, err, context.Canceled, "a cancelled ctx")

	_, err = embed.NewSentence(ctx, embed.SentenceOptions{})
	require.ErrorIs(t, err, context.Canceled)
}

func TestSentenceClose(t *testing.T) {
	s := newSentence(t, embed.SentenceOptions{})
	require.NoError(t, s.Close())
	_, err := s.Embed(context.Background(), []string{"after close"})
	require.ErrorIs(t, err, embed.ErrSentenceClosed)
	require.NoError(t, s.Close(), "twice")

	// The model is shared: another Sentence still embeds.
	vecs, err := shared(t).Embed(context.Background(), []string{"after close"})
	require.NoError(t, err)
	require.Len(t, vecs, 1)
}

func TestSentenceNotInstalled(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	root := filepath.Join(wd, "..", "..")
	require.True(t, embed.SentenceAvailable(""))
	require.True(t, embed.SentenceAvailable(root))
	empty := t.TempDir()
	require.False(t, embed.SentenceAvailable(empty))
	_, err = embed.NewSentence(context.Background(), embed.SentenceOptions{Dir: empty})
	require.ErrorIs(t, err, embed.ErrSentenceNotInstalled)
	require.ErrorContains(t, err, "npm ci")
	require.False(t, bus.IsUnavailable(err))

	// Node.js is not needed to run it.
	t.Setenv("PATH", empty)
	require.True(t, embed.SentenceAvailable(root))
	_, err = embed.NewSentence(context.Background(), embed.SentenceOptions{Dir: root})
	require.NoError(t, err)
}

// TestSentenceRetrieval measures Sentence, Lexical and their fusion by
// reciprocal rank (k = 60, as the indexer's hybrid search) on the
// evaluation sets in testdata and logs the figures (go test -v -run
// SentenceRetrieval). The floors are the figures measured when Sentence
// was written, rounded down; Sentence is deterministic, so a drop is a
// change of the model or its inputs, not noise.
func TestSentenceRetrieval(t *testing.T) {
	floors := map[string]struct{ recall5, ndcg10 float64 }{
		"tools":          {0.87, 0.68}, // measured 0.875, 0.683 (Lexical 0.200, 0.196)
		"prompts":        {1, 0.97},    // measured 1.000, 0.975 (Lexical 1.000, 1.000)
		"prompts-intent": {0.9, 0.79},  // measured 0.900, 0.798 (Lexical 0.800, 0.648)
	}
	ctx := context.Background()
	s := shared(t)
	var table strings.Builder
	table.WriteString("\n| set | method | recall@5 | nDCG@10 | MRR |\n|---|---|---|---|---|\n")
	for _, name := range []string{"tools", "prompts", "prompts-intent"} {
		set, err := eval.Load(filepath.Join("testdata", name+".json"))
		require.NoError(t, err)
		lexical, err := eval.Cosine(ctx, embed.Lexical{}, set.Docs)
		require.NoError(t, err)
		sentence, err := eval.Cosine(ctx, s, set.Docs)
		require.NoError(t, err)
		methods := []struct {
			name string
			rank eval.RankFunc
		}{{"lexical", lexical}, {"sentence", sentence}, {"rrf60", eval.RRF(60, lexical, sentence)}}
		for _, m := range methods {
			rep, err := eval.Evaluate(ctx, set, m.rank)
			require.NoError(t, err)
			fmt.Fprintf(&table, "| %s | %s | %.3f | %.3f | %.3f |\n", name, m.name, rep.Recall5, rep.NDCG10, rep.MRR)
			if m.name == "sentence" {
				require.GreaterOrEqual(t, rep.Recall5, floors[name].recall5, name)
				require.GreaterOrEqual(t, rep.NDCG10, floors[name].ndcg10, name)
			}
		}
	}
	t.Log(table.String())
}

var errNoVectors = errors.New("no vectors")

// BenchmarkSentence reports one short query's latency (the search path:
// one text per call) and texts/s for batches of short (~15 words, a tool
// or a query) and long (~200 words, a prompt; cut to 128 tokens) texts.
func BenchmarkSentence(b *testing.B) {
	s, err := embed.NewSentence(context.Background(), embed.SentenceOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.Run("query-15w", func(b *testing.B) {
		texts := benchTexts(256, 14)
		i := 0
		for b.Loop() {
			vecs, err := s.Embed(ctx, texts[i%len(texts):i%len(texts)+1])
			if err != nil || len(vecs) != 1 {
				b.Fatal(err, errNoVectors)
			}
			i++
		}
	})
	for _, size := range []struct {
		name  string
		words int
	}{{"batch64-short-15w", 14}, {"batch64-long-200w", 199}} {
		b.Run(size.name, func(b *testing.B) {
			texts := benchTexts(64, size.words)
			for b.Loop() {
				if _, err := s.Embed(ctx, texts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(texts))/b.Elapsed().Seconds(), "texts/s")
		})
	}
}

var measure = flag.Bool("sentence.measure", false, "run TestSentenceMeasure: start time, latency, throughput and RSS of Sentence")

// TestSentenceMeasure logs what Sentence costs, for the design notes:
// start (model load), one short query's latency (p50, p99), the same while
// another goroutine embeds long texts (prompts) and while it embeds short
// ones (tools), short queries from 8 callers at once, texts/s in batches
// of 64 short and long texts, and the process's resident memory. Run it with
// go test ./internal/embed/ -run SentenceMeasure -sentence.measure -v.
func TestSentenceMeasure(t *testing.T) {
	if !*measure {
		t.Skip("run with -sentence.measure")
	}
	ctx := context.Background()
	var logs strings.Builder
	var mu sync.Mutex
	began := time.Now()
	s := newSentence(t, embed.SentenceOptions{Log: zerolog.New(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}))})
	t.Logf("start %s; %s", time.Since(began).Round(time.Millisecond), strings.TrimSpace(logs.String()))

	percentiles := func(d []time.Duration) string {
		slices.Sort(d)
		return fmt.Sprintf("p50 %s, p99 %s, max %s (n=%d)", d[len(d)/2].Round(10*time.Microsecond),
			d[len(d)*99/100].Round(10*time.Microsecond), d[len(d)-1].Round(10*time.Microsecond), len(d))
	}
	// timed embeds each query alone, as search does, while background
	// (if any) is embedded over and over by another goroutine, as the
	// indexer does.
	timed := func(queries, background []string) string {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for len(background) > 0 {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = s.Embed(ctx, background)
			}
		}()
		lat := make([]time.Duration, 0, len(queries))
		for _, q := range queries {
			t0 := time.Now()
			_, err := s.Embed(ctx, []string{q})
			require.NoError(t, err)
			lat = append(lat, time.Since(t0))
		}
		close(stop)
		<-done
		return percentiles(lat)
	}
	queries := benchTexts(300, 14)
	t.Logf("query (15 words), idle: %s", timed(queries, nil))
	t.Logf("query (15 words) while long texts are embedded: %s", timed(queries[:100], benchTexts(64, 199)))
	t.Logf("query (15 words) while short texts are embedded: %s", timed(queries[100:200], benchTexts(64, 14)))

	// Eight callers at once, each embedding short queries one after
	// another: more callers than cores, so this is queueing; what matters
	// is that they take turns (p99 a few times p50, not 50×).
	short := benchTexts(1600, 5)
	lat := make([]time.Duration, len(short))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < len(short); i += 8 {
				t0 := time.Now()
				_, err := s.Embed(ctx, short[i:i+1])
				lat[i] = time.Since(t0)
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	t.Logf("query (5 words) from 8 callers at once: %s", percentiles(lat))

	for _, size := range []struct {
		name  string
		words int
	}{{"short (15 words)", 14}, {"long (200 words)", 199}} {
		texts := benchTexts(64, size.words)
		t0 := time.Now()
		rounds := 3
		for range rounds {
			_, err := s.Embed(ctx, texts)
			require.NoError(t, err)
		}
		t.Logf("batch of 64 %s: %.0f texts/s", size.name, float64(rounds*len(texts))/time.Since(t0).Seconds())
	}
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS") || strings.HasPrefix(line, "VmHWM") {
			t.Log(strings.Join(strings.Fields(line), " "))
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
