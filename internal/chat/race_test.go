package chat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/chat"
)

// TestConversation_SharedAcrossGoroutines shares one Conversation and one
// Builder between goroutines that derive, render, count and compact at the
// same time. Run it with -race: it proves the immutability and the lazy
// token cache, and that the token count is computed only once.
func TestConversation_SharedAcrossGoroutines(t *testing.T) {
	bpe, err := chat.NewBPECounter(chat.O200kBase)
	require.NoError(t, err)
	var counted atomic.Int64
	counter := chat.CounterFunc(func(s string) int {
		counted.Add(1)
		return bpe.CountTokens(s)
	})

	b := testBuilder()
	msgs, err := b.RatingMessages(ratingInput)
	require.NoError(t, err)
	shared := chat.New("gpt-4o").WithTemperature(0).WithCounter(counter).Append(msgs...)
	wantText := shared.Text()
	wantJSON, err := json.Marshal(shared.OpenAIRequest())
	require.NoError(t, err)
	want := bpe.CountTokens(msgs[0].Content()) + bpe.CountTokens(msgs[1].Content()) + 3 + 3 + 3
	counted.Store(0)

	const workers = 32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Go(func() {
			for j := range 20 {
				if n := shared.TokenCount(); n != want {
					errs <- fmt.Errorf("worker %d: token count %d, want %d", i, n, want)
					return
				}
				// Derive siblings from the same parent at once: none may
				// see another's message.
				d := shared.Append(chat.Assistant(fmt.Sprintf("reply %d-%d", i, j)))
				if got := d.Messages()[d.Len()-1].Content(); got != fmt.Sprintf("reply %d-%d", i, j) {
					errs <- fmt.Errorf("worker %d: derived conversation ends with %q", i, got)
					return
				}
				_ = d.TokenCount()
				_ = d.String()
				if shared.Text() != wantText {
					errs <- fmt.Errorf("worker %d: shared text changed", i)
					return
				}
				data, err := json.Marshal(shared.OpenAIRequest())
				if err != nil || string(data) != string(wantJSON) {
					errs <- fmt.Errorf("worker %d: shared request changed: %v", i, err)
					return
				}
				if _, err := d.Compact(context.Background(), chat.Truncate{Budget: 100_000}); err != nil {
					errs <- err
					return
				}
				if _, err := b.RatingMessages(ratingInput); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 2, shared.Len())
	// The shared count ran once (two messages); every other call counted
	// derived conversations, each once as well.
	require.Equal(t, int64(2+workers*20*3), counted.Load())
}
