package embed

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTurns checks the order in which requests reach the child: priority
// waiters first, each kind in arrival order, and a waiter that gives up
// neither takes nor loses a turn.
func TestTurns(t *testing.T) {
	var tr turns
	ctx := context.Background()
	require.NoError(t, tr.acquire(ctx, false)) // busy now
	order := make(chan string, 4)
	wait := func(name string, priority bool) {
		go func() {
			require.NoError(t, tr.acquire(ctx, priority))
			order <- name
		}()
	}
	waiting := func(n int) func() bool {
		return func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return len(tr.high)+len(tr.low) == n
		}
	}
	wait("low1", false)
	require.Eventually(t, waiting(1), 5*time.Second, time.Millisecond)
	wait("low2", false)
	require.Eventually(t, waiting(2), 5*time.Second, time.Millisecond)
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- tr.acquire(cctx, true) }()
	require.Eventually(t, waiting(3), 5*time.Second, time.Millisecond)
	wait("high", true)
	require.Eventually(t, waiting(4), 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)

	var got []string
	for range 3 {
		tr.release()
		got = append(got, <-order)
	}
	require.Equal(t, []string{"high", "low1", "low2"}, got)
	tr.release()
	require.False(t, tr.busy)
}

func TestSplitBatches(t *testing.T) {
	long := strings.Repeat("word ", 200)                                                       // 128 tokens estimated
	short := "a short query"                                                                   // 5
	tool := "Send an email to one or more recipients, with a subject, a body and attachments." // 22
	var shorts []string
	for range 40 {
		shorts = append(shorts, short)
	}
	sizes := func(b [][]string) []int {
		var n []int
		for _, x := range b {
			n = append(n, len(x))
		}
		return n
	}
	// About one text a request, so a query waits for little: a long
	// text goes alone, a tool's description too, short ones a few at once.
	require.Equal(t, []int{1, 1, 1, 1, 1}, sizes(splitBatches([]string{long, long, long, long, long})))
	require.Equal(t, []int{6, 6, 6, 6, 6, 6, 4}, sizes(splitBatches(shorts)))
	require.Equal(t, []int{1, 1, 1, 1}, sizes(splitBatches([]string{long, short, long, long})))
	require.Equal(t, []int{1, 1, 1}, sizes(splitBatches([]string{tool, tool, tool})))
	require.Equal(t, []int{2, 2}, sizes(splitBatches([]string{short, tool, tool, short})))
	require.Equal(t, []int{16, 16}, sizes(splitBatches(slices.Repeat([]string{"hi"}, 32))), "at most sentenceBatch texts")
	require.Empty(t, splitBatches(nil))
	require.Equal(t, 128, tokenEstimate(long))
	require.Equal(t, 22, tokenEstimate(tool))
}
