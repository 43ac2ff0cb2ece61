package embed

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/runes"
	"golang.org/x/text/transform"
	"golang.org/x/text/unicode/norm"
)

const (
	// LexicalModel is Lexical's model name, recorded with its vectors. The
	// version changes whenever a change to the features would change any
	// vector, so stored vectors are re-embedded rather than mixed.
	LexicalModel = "agentq-lexical-v1"
	// LexicalDimension is the size of Lexical's vectors. A 130-word prompt
	// has several hundred distinct features, so buckets collide; 1024
	// rather than 512 cuts the cosine error that collisions add by a third
	// (mean 0.020 against 0.029 on the evaluation sets,
	// TestLexicalDimension) for 4 KB a vector instead of 2 KB, still cheap
	// for pgvector's HNSW (limit 2000 dimensions). A power of two, so the
	// bucket is a mask of the hash.
	LexicalDimension = 1024
)

// Weights of the three feature kinds. A word contributes one unigram and
// about len(word) trigrams, so trigrams weigh less each; together they let
// "configure" meet "configuration". Bigrams reward phrases shared verbatim.
// Set by judgement, not tuned: on the evaluation sets in testdata a sweep
// (unigrams only; no bigrams; trigrams at 0, 0.15, 0.5, 1; bigrams at 0.3,
// 1) moved recall@5 by at most one or two queries either way, within the
// noise of 20-40 queries. Trigrams did help the paraphrased sets a little
// (prompts-intent recall@5 0.75 without, 0.80 with; measured with
// 1 + ln count, before the switch to √count). Changing a weight
// changes every vector: bump LexicalModel's version with it.
const (
	weightUnigram = 1.0
	weightBigram  = 0.6
	weightTrigram = 0.3
)

// Lexical is the built-in offline embedder: a deterministic bag of
// features hashed into LexicalDimension buckets. The zero value is ready
// to use and safe for concurrent use.
//
// What it computes, for each text:
//
//  1. Unicode NFKD with combining marks removed ("café" is "cafe"), words
//     split at anything not a letter or digit and at camelCase humps
//     ("getWeather" is "get weather"), lower-cased.
//  2. English stop words dropped (unless the text has nothing else).
//  3. Features: every word folded by a light suffix rule (plural -s/-es/
//     -ies, -ing, -ed, final -e: "creates", "created", "creating" and
//     "create" are one feature), every pair of adjacent folded words, and
//     every character trigram of each unfolded word with boundary marks
//     ("<we", "wea", ... "er>").
//  4. Each distinct feature weighs weight(kind) × √count, sublinear so a
//     repeated word does not drown the rest, and is added with a sign
//     to one bucket, both chosen by a 64-bit hash of the feature (FNV-1a,
//     then a mixer): signed hashing makes collisions cancel on average
//     instead of piling up.
//  5. The vector is scaled to unit length.
//
// What it is not: semantic. Texts match in proportion to the words, word
// pairs and word pieces they share; synonyms ("delete" and "remove") and
// paraphrases with no shared vocabulary do not match at all. There are no
// corpus statistics (no IDF), so a vector depends only on its text: it is
// bit-for-bit the same in every process, on every platform, in every
// version of agentq with this LexicalModel (testdata/lexical-golden.json
// pins it; a Go or x/text upgrade with new Unicode tables could move rare
// characters, and that test would say so).
type Lexical struct{}

var _ Embedder = Lexical{}

// Model returns LexicalModel.
func (Lexical) Model() string { return LexicalModel }

// Dimension returns LexicalDimension.
func (Lexical) Dimension() int { return LexicalDimension }

// Embed returns the vectors of texts, in order. A text with no letters or
// digits is an ErrEmptyText error and no vectors are returned. ctx is not
// consulted: the work is pure computation, about 50 µs for 130 words on
// one core.
func (Lexical) Embed(_ context.Context, texts []string) ([][]float32, error) {
	return embedLexical(texts, LexicalDimension)
}

// embedLexical is Embed with vectors of dim buckets, a power of two; tests
// compare dimensions with it.
func embedLexical(texts []string, dim int) ([][]float32, error) {
	out := make([][]float32, len(texts))
	s := &scratch{acc: make([]float64, dim)}
	for i, t := range texts {
		v := make([]float32, dim)
		if !s.embed(t, v) {
			return nil, fmt.Errorf("%s: text %d: %w", LexicalModel, i, ErrEmptyText)
		}
		out[i] = v
	}
	return out, nil
}

// scratch holds one Embed call's reusable buffers.
type scratch struct {
	acc     []float64 // one per bucket; the length is a power of two
	words   []string
	uni     []uint64
	bi      []uint64
	tri     []uint64
	buf     []byte
	offsets []int
}

// embed writes text's vector into v and reports whether it had features.
func (s *scratch) embed(text string, v []float32) bool {
	s.tokenize(text)
	if len(s.words) == 0 {
		return false
	}
	s.uni, s.bi, s.tri = s.uni[:0], s.bi[:0], s.tri[:0]
	prev := ""
	for i, w := range s.words {
		f := fold(w)
		s.uni = append(s.uni, hashKind(kindUnigram, f, ""))
		if i > 0 {
			s.bi = append(s.bi, hashKind(kindBigram, prev, f))
		}
		prev = f
		s.trigrams(w)
	}
	clear(s.acc)
	s.add(s.uni, weightUnigram)
	s.add(s.bi, weightBigram)
	s.add(s.tri, weightTrigram)
	var sum float64
	for _, x := range s.acc {
		sum += float64(x * x) // the conversion forbids fusing into an FMA (Go spec), which arm64 would do
	}
	if sum == 0 { // every feature cancelled out: practically impossible
		s.acc[0], sum = 1, 1
	}
	inv := 1 / math.Sqrt(sum)
	for i, x := range s.acc {
		v[i] = float32(x * inv)
	}
	return true
}

// add accumulates the features in keys with sublinear counts. Sorting
// makes the order of additions, and so the float rounding, depend only on
// the features: the vector is bit-for-bit the same in every process.
// √count rather than the usual 1 + ln count (nearly the same curve up to
// ten repeats): square root is correctly rounded on every platform, while
// math.Log has an assembly version on amd64 only, which could change
// the last bit elsewhere.
func (s *scratch) add(keys []uint64, weight float64) {
	slices.Sort(keys)
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j] == keys[i] {
			j++
		}
		w := weight * math.Sqrt(float64(j-i))
		h := keys[i]
		if h>>63 == 1 {
			w = -w
		}
		s.acc[h&uint64(len(s.acc)-1)] += w
		i = j
	}
}

// trigrams appends the hashes of w's character trigrams, with '<' and '>'
// marking the word's ends.
func (s *scratch) trigrams(w string) {
	s.buf = append(append(append(s.buf[:0], '<'), w...), '>')
	s.offsets = s.offsets[:0]
	for i := range string(s.buf) {
		s.offsets = append(s.offsets, i)
	}
	s.offsets = append(s.offsets, len(s.buf))
	for i := 0; i+3 < len(s.offsets); i++ {
		s.tri = append(s.tri, hashKind(kindTrigram, string(s.buf[s.offsets[i]:s.offsets[i+3]]), ""))
	}
}

// tokenize splits text into lower-cased words without stop words (all
// words when every one is a stop word).
func (s *scratch) tokenize(text string) {
	if !isASCII(text) {
		if t, _, err := transform.String(foldMarks, text); err == nil {
			text = t
		}
	}
	s.words = s.words[:0]
	start := -1
	var last rune
	flush := func(end int) {
		if start >= 0 {
			s.words = append(s.words, strings.ToLower(text[start:end]))
			start = -1
		}
	}
	for i, r := range text {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush(i)
			last = 0
			continue
		}
		if start >= 0 && unicode.IsUpper(r) && unicode.IsLower(last) {
			flush(i) // camelCase hump
		}
		if start < 0 {
			start = i
		}
		last = r
	}
	flush(len(text))
	content := 0
	for _, w := range s.words {
		if !stopWords[w] {
			content++
		}
	}
	if content == 0 {
		return // stop words only: keep them all
	}
	kept := s.words[:0]
	for _, w := range s.words {
		if !stopWords[w] {
			kept = append(kept, w)
		}
	}
	s.words = kept
}

// foldMarks decomposes and drops combining marks: "é" becomes "e".
var foldMarks = transform.Chain(norm.NFKD, runes.Remove(runes.In(unicode.Mn)), norm.NFC)

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// fold strips a common English inflection so that forms of one word share
// a unigram. It is deliberately crude (not Porter): a stem must keep at
// least three letters, so short words are left alone.
func fold(w string) string {
	n := len(w)
	switch {
	case n > 4 && strings.HasSuffix(w, "ies"):
		return w[:n-3] + "y"
	case n > 4 && strings.HasSuffix(w, "sses"):
		return w[:n-2]
	case n > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		w = w[:n-1]
	case n > 5 && strings.HasSuffix(w, "ing"):
		w = w[:n-3]
	case n > 4 && strings.HasSuffix(w, "ed"):
		w = w[:n-2]
	}
	if n := len(w); n > 4 && w[n-1] == 'e' {
		w = w[:n-1]
	}
	return w
}

const (
	kindUnigram byte = iota + 1
	kindBigram
	kindTrigram
)

// hashKind hashes a feature of kind made of a and, for bigrams, b: FNV-1a
// 64, then the splitmix64 finaliser so that the low bits (the bucket) and
// the top bit (the sign) are well mixed.
func hashKind(kind byte, a, b string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	h = (h ^ uint64(kind)) * prime
	for i := 0; i < len(a); i++ {
		h = (h ^ uint64(a[i])) * prime
	}
	if b != "" {
		h = (h ^ 0x1f) * prime
		for i := 0; i < len(b); i++ {
			h = (h ^ uint64(b[i])) * prime
		}
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// stopWords are English function words that carry no topic; dropping them
// keeps "how do I get the weather" close to "get weather".
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	// s, t, d, ll, re, ve: what apostrophes leave ("client's", "don't").
	for _, w := range strings.Fields(`s t d ll re ve a about above after again all also am an and any are as at be because been
		before being below between both but by can could did do does doing down during each few for from further
		had has have having he her here hers him his how i if in into is it its itself just me more most my no nor
		not of off on once only or other our ours out over own same she should so some such than that the their
		theirs them then there these they this those through to too under until up very was we were what when
		where which while who whom why will with would you your yours`) {
		m[w] = true
	}
	return m
}()
