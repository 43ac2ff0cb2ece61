package chat_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/chat"
)

// words counts whitespace-separated words, so budgets in these tests are
// easy to work out by hand.
var words = chat.CounterFunc(func(s string) int { return len(strings.Fields(s)) })

// history is a conversation of a system message and three turns, the middle
// one with a tool call. Costs with words (3 framing per message, 3 reply):
// system 5, turn 1 = 5+5 = 10, turn 2 = 5+5+5+5 = 20, turn 3 = 5.
func history(t *testing.T) chat.Conversation {
	t.Helper()
	call, err := chat.ToolCall("search.query", map[string]any{"q": "x"}, nil)
	require.NoError(t, err)
	return chat.New("test-model").WithCounter(words).Append(
		chat.System("be brief"),
		chat.User("first question"),
		chat.Assistant("first answer"),
		chat.User("second question"),
		call, // "search.query" + `{"q":"x"}` = 2 words
		chat.ToolResult(call.CallID(), "tool output"),
		chat.Assistant("second answer"),
		chat.User("third question"),
	)
}

func roles(c chat.Conversation) string {
	var out []string
	for _, m := range c.Messages() {
		s := string(m.Role())
		if m.IsSummary() {
			s += "*"
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func TestSummarizeHistory(t *testing.T) {
	c := history(t)
	var got []chat.Message
	s := chat.SummarizeHistory{Summarizer: chat.SummarizerFunc(func(_ context.Context, msgs []chat.Message) (string, error) {
		got = msgs
		return "The user asked three questions.", nil
	})}
	out, err := c.Compact(context.Background(), s)
	require.NoError(t, err)
	require.Equal(t, "system,assistant*", roles(out))
	require.Equal(t, "be brief", out.Messages()[0].Content())
	require.Equal(t, "The user asked three questions.", out.Messages()[1].Content())
	require.Len(t, got, c.Len()-1, "everything but the system message is summarised")
	require.Equal(t, "first question", got[0].Content())
	require.Equal(t, 8, c.Len(), "the original is unchanged")
	require.Equal(t, "test-model", out.Model(), "settings carry over")
}

func TestSummarizeHistory_Cases(t *testing.T) {
	summary := chat.SummarizerFunc(func(context.Context, []chat.Message) (string, error) { return "sum", nil })
	tests := []struct {
		name  string
		in    chat.Conversation
		want  string
		calls bool
	}{
		{"no system message", chat.New("m").Append(chat.User("a"), chat.Assistant("b")), "assistant*", true},
		{"system message not first", chat.New("m").Append(chat.User("a"), chat.System("s"), chat.System("s2")), "system,assistant*", true},
		{"only a system message", chat.New("m").Append(chat.System("s")), "system", false},
		{"empty", chat.New("m"), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			s := chat.SummarizeHistory{Summarizer: chat.SummarizerFunc(func(ctx context.Context, m []chat.Message) (string, error) {
				called = true
				return summary(ctx, m)
			})}
			out, err := tt.in.Compact(context.Background(), s)
			require.NoError(t, err)
			require.Equal(t, tt.want, roles(out))
			require.Equal(t, tt.calls, called)
		})
	}
}

func TestSummarizeHistory_Errors(t *testing.T) {
	boom := errors.New("llm down")
	tests := []struct {
		name string
		s    chat.Compactor
		want error
	}{
		{"no summarizer", chat.SummarizeHistory{}, chat.ErrNoSummarizer},
		{"summarizer fails", chat.SummarizeHistory{Summarizer: chat.SummarizerFunc(func(context.Context, []chat.Message) (string, error) {
			return "", boom
		})}, boom},
		{"cancelled", chat.SummarizeHistory{Summarizer: chat.SummarizerFunc(func(ctx context.Context, _ []chat.Message) (string, error) {
			return "", ctx.Err()
		})}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			c := history(t)
			out, err := c.Compact(ctx, tt.s)
			require.ErrorIs(t, err, tt.want)
			require.Equal(t, c.Len(), out.Len(), "on error the conversation comes back unchanged")
		})
	}
	t.Run("empty summary", func(t *testing.T) {
		s := chat.SummarizeHistory{Summarizer: chat.SummarizerFunc(func(context.Context, []chat.Message) (string, error) { return " \n", nil })}
		_, err := history(t).Compact(context.Background(), s)
		require.ErrorContains(t, err, "empty summary")
	})
	t.Run("nil compactor", func(t *testing.T) {
		_, err := history(t).Compact(context.Background(), nil)
		require.Error(t, err)
	})
}

func TestTruncate(t *testing.T) {
	c := history(t)
	require.Equal(t, 3+5+10+20+5, c.TokenCount())
	tests := []struct {
		budget int
		want   string
	}{
		{100, "system,user,assistant,user,assistant,tool,assistant,user"}, // fits already
		{43, "system,user,assistant,user,assistant,tool,assistant,user"},  // exactly fits
		{42, "system,user,assistant,tool,assistant,user"},                 // drop turn 1
		{33, "system,user,assistant,tool,assistant,user"},
		{32, "system,user"}, // drop turns 1 and 2, never split the tool call from its result
		{13, "system,user"}, // system + newest turn + reply priming
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.budget), func(t *testing.T) {
			out, err := c.Compact(context.Background(), chat.Truncate{Budget: tt.budget})
			require.NoError(t, err)
			require.Equal(t, tt.want, roles(out))
			require.LessOrEqual(t, out.TokenCount(), tt.budget)
			last := out.Messages()[out.Len()-1]
			require.Equal(t, "third question", last.Content(), "newest turn kept")
		})
	}
}

func TestTruncate_SystemMessageMovesFirst(t *testing.T) {
	c := chat.New("m").WithCounter(words).Append(
		chat.User("old question"), chat.System("rules"), chat.Assistant("old answer"),
		chat.User("new question"),
	)
	out, err := c.Compact(context.Background(), chat.Truncate{Budget: 3 + 4 + 5})
	require.NoError(t, err)
	require.Equal(t, "system,user", roles(out))
}

func TestTruncate_Errors(t *testing.T) {
	c := history(t)
	tests := []struct {
		name   string
		budget int
		want   error
	}{
		{"newest turn does not fit", 12, chat.ErrOverBudget},
		{"tiny budget", 1, chat.ErrOverBudget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := c.Compact(context.Background(), chat.Truncate{Budget: tt.budget})
			require.ErrorIs(t, err, tt.want)
			require.ErrorContains(t, err, "need 13 tokens")
			require.Equal(t, c.Len(), out.Len())
		})
	}
	_, err := c.Compact(context.Background(), chat.Truncate{})
	require.ErrorContains(t, err, "must be positive")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Compact(ctx, chat.Truncate{Budget: 10})
	require.ErrorIs(t, err, context.Canceled)
}
