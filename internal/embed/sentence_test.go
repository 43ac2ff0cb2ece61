//go:build unix

package embed_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/embed/eval"
)

// These tests run the real encoder: node on PATH and `npm ci` done in the
// repository root (make deps), as CI does.

var (
	sharedOnce     sync.Once
	sharedSentence *embed.Sentence
	sharedErr      error
)

// shared returns one Sentence for the tests that only embed, to pay the
// model's start once per test binary; its child dies with the binary.
// Tests that kill, stop or close the child start their own.
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

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestSentenceGolden pins Sentence's vectors to a checksum stored in
// testdata: the same texts give bit-identical vectors in every process
// (each run starts a new child). If it fails, the model, the packages,
// the tokenizer, the truncation or the batching changed: stored vectors no
// longer match new ones, so bump SentenceModel's version and run
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

	// A second child, and the texts in another order and batching: the
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
	require.Equal(t, "agentq-use-lite-v1", s.Model())
	require.Equal(t, 512, s.Dimension())
	ctx := context.Background()

	// More texts than one request holds, of many token counts, with a
	// repeat: order, count, and no batch effects.
	texts := append(benchTexts(2*embed.SentenceBatch+3, 12), "send an email", strings.Repeat("a long text about sending email ", 60), "send an email")
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
			require.ErrorContains(t, err, "agentq-use-lite-v1: text 1: ")
			require.False(t, bus.IsUnavailable(err))
		})
	}
}

// tokenizerTexts are texts for comparing tokenizers: every text of the
// evaluation sets, the golden texts, and cases aimed at the algorithm's
// corners (unknown symbols and their runs, characters outside the BMP,
// NFKC folding, long words, long texts).
func tokenizerTexts(t *testing.T) []string {
	texts := slices.Clone(goldenTexts)
	for _, name := range []string{"tools", "prompts", "prompts-intent"} {
		set, err := eval.Load(filepath.Join("testdata", name+".json"))
		require.NoError(t, err)
		for _, d := range set.Docs {
			texts = append(texts, d.Text)
		}
		for _, q := range set.Queries {
			texts = append(texts, q.Text)
		}
	}
	return append(texts,
		"emoji 😀😀 and 🚀 rockets, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math letters",
		"ﬁnance ｆｕｌｌｗｉｄｔｈ ①②③ ℌ",
		"漢字漢字漢字 ☃☃☃ ǅ",
		"  leading and   multiple   spaces\tand\ttabs\nand lines  ",
		"supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis",
		"----------------................////////",
		"a",
		strings.Repeat("word salad of many repeated tokens, ", 150), // ~5,000 characters
	)
}

// TestSentenceTokenizer proves that sentence-server.mjs's linear
// tokenizer gives exactly the ids of the npm package's own (quadratic)
// one.
func TestSentenceTokenizer(t *testing.T) {
	texts := tokenizerTexts(t)
	ours, theirs, err := embed.SentenceTokenize(context.Background(), shared(t), texts)
	require.NoError(t, err)
	require.Len(t, ours, len(texts))
	require.Len(t, theirs, len(texts))
	for i := range texts {
		require.NotEmpty(t, ours[i])
		require.Equal(t, theirs[i], ours[i], "tokens of %.80q", texts[i])
	}
}

// TestSentenceMatchesPackage proves that the child's vectors (linear
// tokenizer, texts cut to 4096 runes and 128 tokens, batches of equal
// token count) are bit for bit those of the package's own
// EmbeddingsModel.embed on the whole text, alone: the cuts lose nothing
// the model reads.
func TestSentenceMatchesPackage(t *testing.T) {
	s := shared(t)
	ctx := context.Background()
	long := strings.Repeat("the indexer embeds prompts and tools for retrieval by meaning ", 80) // ~800 tokens, 5,000 characters
	texts := []string{"delete a file", goldenTexts[0], goldenTexts[2], long, long[:700], tokenizerTexts(t)[30]}
	ours, err := embed.SentenceRaw(ctx, s, texts)
	require.NoError(t, err)
	for i, text := range texts {
		ref, err := embed.SentenceReference(ctx, s, []string{text})
		require.NoError(t, err)
		require.Equal(t, ref[0], ours[i], "vector of %.80q", text)
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

// longBatch is enough long texts to keep the child busy for a few
// seconds: time to kill it, stop it or cancel mid-call.
func longBatch() []string { return benchTexts(96, 200) }

// TestSentenceChildKilled kills the child while a call waits on it: the
// call fails with bus.Unavailable, and the next call starts a new child
// and gets the right vectors.
func TestSentenceChildKilled(t *testing.T) {
	s := newSentence(t, embed.SentenceOptions{})
	ctx := context.Background()
	want, err := s.Embed(ctx, goldenTexts)
	require.NoError(t, err)
	pid := embed.SentencePID(s)
	require.NotZero(t, pid)

	errc := make(chan error, 1)
	go func() {
		_, err := s.Embed(ctx, longBatch())
		errc <- err
	}()
	require.Eventually(t, func() bool { return embed.SentencePending(s) > 0 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	err = <-errc
	require.Error(t, err)
	require.True(t, bus.IsUnavailable(err), "%v", err)
	require.ErrorContains(t, err, "the sentence encoder exited")
	require.ErrorContains(t, err, "signal: killed")

	got, err := s.Embed(ctx, goldenTexts)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NotEqual(t, pid, embed.SentencePID(s), "a new child")
	require.False(t, alive(pid))
}

// TestSentenceChildHangs stops the child (SIGSTOP) during a call: after
// HangTimeout with no answer the call fails with bus.Unavailable, the
// child is killed, and the next call starts a new one.
func TestSentenceChildHangs(t *testing.T) {
	s := newSentence(t, embed.SentenceOptions{HangTimeout: time.Second})
	ctx := context.Background()
	pid := embed.SentencePID(s)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	began := time.Now()
	_, err := s.Embed(ctx, []string{"is anyone there"})
	require.True(t, bus.IsUnavailable(err), "%v", err)
	require.ErrorContains(t, err, "answered nothing for 1s")
	require.GreaterOrEqual(t, time.Since(began), time.Second)
	require.False(t, alive(pid), "the hung child is killed")

	vecs, err := s.Embed(ctx, []string{"is anyone there"})
	require.NoError(t, err)
	require.Len(t, vecs, 1)
	require.NotEqual(t, pid, embed.SentencePID(s))
}

// TestSentenceChildStopsReading fills the pipe to a stopped child with
// requests abandoned by their callers, so the next request's write
// blocks: that call still ends after HangTimeout with bus.Unavailable.
func TestSentenceChildStopsReading(t *testing.T) {
	s := newSentence(t, embed.SentenceOptions{HangTimeout: 2 * time.Second})
	pid := embed.SentencePID(s)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	// Two texts of 4096 four-byte runes: a 32 KiB request; a pipe holds
	// 64 KiB.
	big := strings.Repeat("𝔘", 4096)
	for range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := s.Embed(ctx, []string{big, big})
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	began := time.Now()
	_, err := s.Embed(context.Background(), []string{big, big})
	require.True(t, bus.IsUnavailable(err), "%v", err)
	require.Less(t, time.Since(began), 10*time.Second)
	require.False(t, alive(pid), "the stopped child is killed")

	vecs, err := s.Embed(context.Background(), []string{"back to work"})
	require.NoError(t, err)
	require.Len(t, vecs, 1)
}

// TestSentenceCancel cancels a call in flight: it returns ctx's error at
// once, the child survives, and the abandoned answers do not reach the
// next call.
func TestSentenceCancel(t *testing.T) {
	s := newSentence(t, embed.SentenceOptions{})
	want, err := s.Embed(context.Background(), goldenTexts)
	require.NoError(t, err)
	pid := embed.SentencePID(s)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Embed(ctx, longBatch())
		errc <- err
	}()
	require.Eventually(t, func() bool { return embed.SentencePending(s) > 0 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(time.Second):
		t.Fatal("Embed did not return within a second of the cancel")
	}

	got, err := s.Embed(context.Background(), goldenTexts)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, pid, embed.SentencePID(s), "the same child")

	_, err = s.Embed(ctx, goldenTexts)
	require.ErrorIs(t, err, context.Canceled, "a cancelled ctx")

	_, err = embed.NewSentence(ctx, embed.SentenceOptions{})
	require.ErrorIs(t, err, context.Canceled)
}

func TestSentenceClose(t *testing.T) {
	s := newSentence(t, embed.SentenceOptions{})
	pid := embed.SentencePID(s)
	require.NoError(t, s.Close())
	require.False(t, alive(pid))
	_, err := s.Embed(context.Background(), []string{"after close"})
	require.ErrorIs(t, err, embed.ErrSentenceClosed)
	require.NoError(t, s.Close(), "twice")
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

	t.Setenv("PATH", empty)
	require.False(t, embed.SentenceAvailable(root))
	_, err = embed.NewSentence(context.Background(), embed.SentenceOptions{Dir: root})
	require.ErrorIs(t, err, embed.ErrSentenceNotInstalled)
}

// TestSentenceDiesWithParent runs a Sentence in a child test process,
// kills that process with SIGKILL (no cleanup runs) and expects the node
// grandchild to be gone too.
func TestSentenceDiesWithParent(t *testing.T) {
	if os.Getenv("AGENTQ_SENTENCE_CHILD") == "1" {
		s, err := embed.NewSentence(context.Background(), embed.SentenceOptions{})
		require.NoError(t, err)
		fmt.Printf("pid=%d\n", embed.SentencePID(s))
		select {} // until killed
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSentenceDiesWithParent$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AGENTQ_SENTENCE_CHILD=1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	pid := 0
	for pid == 0 && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "pid="); ok {
			pid, err = strconv.Atoi(v)
			require.NoError(t, err)
		}
	}
	require.NotZero(t, pid, "the child test process printed the encoder's pid")
	require.True(t, alive(pid))
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 10*time.Millisecond, "node outlived its parent")
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
// start (model load and warm-up), one short query's latency (p50, p99),
// the same while another goroutine embeds long texts (prompts) and while
// it embeds short ones (tools), texts/s in batches of 64 short and long
// texts, and the child's resident memory. Run it with
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
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", embed.SentencePID(s)))
	require.NoError(t, err)
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS") || strings.HasPrefix(line, "VmHWM") {
			t.Log(strings.Join(strings.Fields(line), " "))
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
