package uselite

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// separator is SentencePiece's word boundary, put before every word.
const separator = '\u2581'

// reserved is how many ids at the start of the vocabulary ("�", "<s>",
// "</s>", three extra tokens) are never produced by matching.
const reserved = 6

// tokenizer is the npm package's Tokenizer (@energetic-ai/embeddings
// 0.2.0): a unigram Viterbi over a trie of the vocabulary's pieces, run in
// time linear in the text (the package's own is quadratic). Same pieces,
// same visiting order, same tie rule, so the same ids: TestTokenizer
// compares it with the package's on a corpus.
type tokenizer struct {
	root   *trieNode
	length []int // piece id → length in runes (none is outside the BMP, so also in UTF-16 units)
}

type trieNode struct {
	children map[rune]*trieNode
	end      bool
	score    float64
	id       int
}

func newTokenizer(pieces []string, scores []float64) *tokenizer {
	t := &tokenizer{root: &trieNode{}, length: make([]int, len(pieces))}
	for i, p := range pieces {
		t.length[i] = len([]rune(p))
		if i < reserved {
			continue
		}
		node := t.root
		for _, r := range p {
			next := node.children[r]
			if next == nil {
				if node.children == nil {
					node.children = map[rune]*trieNode{}
				}
				next = &trieNode{}
				node.children[r] = next
			}
			node = next
		}
		// A piece listed twice keeps its last entry, as in the package.
		node.end, node.score, node.id = true, scores[i], i
	}
	return t
}

// match is a piece ending at some position: where it starts, its score
// and its id.
type match struct {
	start int
	score float64
	id    int
}

// encode returns the ids of text: NFKC, a separator before the text and
// in place of every space, then the best segmentation into pieces.
// Symbols no piece starts with are id 0; a run of them is one id 0.
func (t *tokenizer) encode(text string) []int {
	normalized := norm.NFKC.String(text)
	if normalized == "" {
		return nil
	}
	symbols := []rune(string(separator) + strings.ReplaceAll(normalized, " ", string(separator)))
	n := len(symbols)
	// ends[e] lists the pieces ending at e, in increasing start: the
	// order in which the package visits them.
	ends := make([][]match, n+1)
	for i := 0; i < n; i++ {
		found := false
		node := t.root.children[symbols[i]]
		for j := i; j < n && node != nil; j++ {
			if node.end {
				ends[j+1] = append(ends[j+1], match{i, node.score, node.id})
				found = true
			}
			if j+1 < n {
				node = node.children[symbols[j+1]]
			} else {
				node = nil
			}
		}
		if !found {
			ends[i+1] = append(ends[i+1], match{i, 0, 0})
		}
	}
	best := make([]float64, n+1)
	words := make([]int, n+1)
	for e := 1; e <= n; e++ {
		for _, m := range ends[e] {
			total := m.score + best[m.start]
			// A best of exactly 0 counts as unset, as in the package.
			if best[e] == 0 || total >= best[e] {
				best[e], words[e] = total, m.id
			}
		}
	}
	var ids []int
	// Back from the end by the chosen piece's length; an unknown symbol
	// steps by the length of piece 0, "�", one: as the package does.
	for e := n; e > 0; e -= t.length[words[e]] {
		ids = append(ids, words[e])
	}
	// Runs of unknown symbols collapse to one id 0.
	merged := ids[:0]
	previousUnknown := false
	for _, id := range ids {
		if !(previousUnknown && id == 0) {
			merged = append(merged, id)
		}
		previousUnknown = id == 0
	}
	for i, j := 0, len(merged)-1; i < j; i, j = i+1, j-1 {
		merged[i], merged[j] = merged[j], merged[i]
	}
	return merged
}
