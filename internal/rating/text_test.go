package rating_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/rating"
)

func TestTruncate(t *testing.T) {
	bpe, err := chat.NewBPECounter(chat.O200kBase)
	require.NoError(t, err)
	for _, counter := range []chat.TokenCounter{bpe, chat.ApproxCounter{}} {
		long := strings.Repeat("the weather in Paris is sunny, 21°C; ", 400)
		got, cut := rating.Truncate(long, 100, counter)
		require.True(t, cut)
		kept, note, found := strings.Cut(got, "\n[... cut by agentq: ")
		require.True(t, found, got)
		require.True(t, strings.HasPrefix(long, kept))
		require.LessOrEqual(t, counter.CountTokens(kept), 100)
		require.Greater(t, counter.CountTokens(kept), 90, "cut close to the limit")
		require.True(t, utf8.ValidString(kept))
		require.Contains(t, note, "tokens shown]")

		short := "Paris: sunny"
		got, cut = rating.Truncate(short, 100, counter)
		require.False(t, cut)
		require.Equal(t, short, got)
	}
	// Multi-byte runes are never split.
	got, cut := rating.Truncate(strings.Repeat("é漢🙂", 500), 64, chat.ApproxCounter{})
	require.True(t, cut)
	require.True(t, utf8.ValidString(got))
}

func TestDay(t *testing.T) {
	// Stream time decides the day, in UTC.
	at := time.Date(2026, 3, 1, 23, 30, 0, 0, time.FixedZone("UTC-5", -5*3600))
	require.Equal(t, "2026-03-02", rating.Day(at))
}
