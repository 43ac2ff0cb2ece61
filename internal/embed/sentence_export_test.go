package embed

import "context"

// Hooks into Sentence for its tests.

// SentenceBatch is how many texts Embed sends per request.
const SentenceBatch = sentenceBatch

// SentencePID returns the current child's process id, 0 if none.
func SentencePID(s *Sentence) int { return s.pid() }

// SentencePending returns how many requests the current child has not
// answered yet.
func SentencePending(s *Sentence) int {
	s.mu.Lock()
	c := s.child
	s.mu.Unlock()
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// SentenceTokenize returns the child's token ids for texts and those of
// the npm package's own tokenizer.
func SentenceTokenize(ctx context.Context, s *Sentence, texts []string) (ours, theirs [][]int, err error) {
	return s.tokenize(ctx, texts, true)
}

// SentenceRaw returns the child's vectors for texts in one request, not
// normalised.
func SentenceRaw(ctx context.Context, s *Sentence, texts []string) ([][]float32, error) {
	return s.raw(ctx, texts)
}

// SentenceReference returns the npm package's own vectors for texts in one
// batch, not normalised.
func SentenceReference(ctx context.Context, s *Sentence, texts []string) ([][]float32, error) {
	return s.reference(ctx, texts)
}
