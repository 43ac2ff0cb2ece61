package chat_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/chat"
)

func TestBPECounter_KnownCounts(t *testing.T) {
	// Counts agree with OpenAI's tiktoken: "hello world" and
	// "tiktoken is great!" are the examples of its README and cookbook.
	tests := []struct {
		text   string
		cl100k int
		o200k  int
	}{
		{"", 0, 0},
		{"hello world", 2, 2},
		{"tiktoken is great!", 6, 6},
		{"Hello, world!", 4, 4},
		{"The quick brown fox jumps over the lazy dog.", 10, 10},
		{"antidisestablishmentarianism", 6, 6},
		{"12345678", 3, 3},
		{"你好，世界", 6, 3},
		// Special tokens in content are plain text, not control tokens.
		{"<|endoftext|>", 7, 7},
	}
	cl100k, err := chat.NewBPECounter(chat.Cl100kBase)
	require.NoError(t, err)
	o200k, err := chat.NewBPECounter(chat.O200kBase)
	require.NoError(t, err)
	require.Equal(t, chat.Cl100kBase, cl100k.Encoding())
	require.Equal(t, chat.O200kBase, o200k.Encoding())
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			require.Equal(t, tt.cl100k, cl100k.CountTokens(tt.text), "cl100k_base")
			require.Equal(t, tt.o200k, o200k.CountTokens(tt.text), "o200k_base")
		})
	}
}

func TestNewBPECounter_UnknownEncoding(t *testing.T) {
	_, err := chat.NewBPECounter("p50k_base")
	require.ErrorIs(t, err, chat.ErrUnknownEncoding)
}

func TestCounterForModel(t *testing.T) {
	tests := []struct {
		model string
		want  chat.Encoding // "" means ApproxCounter
	}{
		{"gpt-4o", chat.O200kBase},
		{"gpt-4o-mini-2024-07-18", chat.O200kBase},
		{"o3-mini", chat.O200kBase},
		{"gpt-4", chat.Cl100kBase},
		{"gpt-3.5-turbo", chat.Cl100kBase},
		{"claude-sonnet-4", ""},
		{"llama3:8b", ""},
		{"text-davinci-003", ""}, // p50k_base: not one of ours
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			c := chat.CounterForModel(tt.model)
			if tt.want == "" {
				require.IsType(t, chat.ApproxCounter{}, c)
				return
			}
			bpe, ok := c.(*chat.BPECounter)
			require.True(t, ok, "%T", c)
			require.Equal(t, tt.want, bpe.Encoding())
			require.Same(t, bpe, chat.CounterForModel(tt.model), "cached")
		})
	}
}

func TestApproxCounter_CloseToBPE(t *testing.T) {
	texts := map[string]string{
		"prose": "The rater scores each tool call for relevance and correctness. When an output is too large, " +
			"it is summarised first, keeping every error and warning, and the summary is rated instead.",
		"json": ratingInput.Output,
		"code": "func (c Conversation) TokenCount() int {\n\tc.tokens.once.Do(func() {\n\t\tc.tokens.n = countTokens(c.Counter(), c.messages)\n\t})\n\treturn c.tokens.n\n}\n",
		"prompt": func() string {
			msgs, err := chat.NewBuilder().RatingMessages(ratingInput)
			require.NoError(t, err)
			return msgs[0].Content() + msgs[1].Content()
		}(),
	}
	bpe, err := chat.NewBPECounter(chat.O200kBase)
	require.NoError(t, err)
	for name, text := range texts {
		t.Run(name, func(t *testing.T) {
			exact := bpe.CountTokens(text)
			approx := chat.ApproxCounter{}.CountTokens(text)
			ratio := float64(approx) / float64(exact)
			t.Logf("exact %d approx %d ratio %.2f", exact, approx, ratio)
			require.InDelta(t, 1, ratio, 0.25)
		})
	}
}

func TestApproxCounter_Cases(t *testing.T) {
	tests := []struct {
		text string
		want int
	}{
		{"", 0},
		{"hello world", 2},
		{"antidisestablishmentarianism", 5},
		{"12345678", 3},
		{`{"a":1}`, 5},
		{"a\n\n\nb", 3},
		{"    indented", 3},
		{"你好，世界", 5},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			require.Equal(t, tt.want, chat.ApproxCounter{}.CountTokens(tt.text))
		})
	}
}

func TestConversation_TokenCount(t *testing.T) {
	bpe, err := chat.NewBPECounter(chat.Cl100kBase)
	require.NoError(t, err)
	c := chat.New("gpt-4").Append(chat.System("hello world"), chat.User("tiktoken is great!"))
	// OpenAI's framing: 3 per message, 3 to prime the reply.
	require.Equal(t, 3+2+3+6+3, c.TokenCount())
	require.Equal(t, 3+2+3+6+3, c.WithCounter(bpe).TokenCount())
	require.Equal(t, 3+2+3+6+3+(1+1), c.Append(chat.User("hi").WithName("ada")).TokenCount()-(3+1), "a name costs its tokens plus one")

	calls := 0
	counting := chat.CounterFunc(func(s string) int { calls++; return len(strings.Fields(s)) })
	cc := c.WithCounter(counting)
	first := cc.TokenCount()
	require.Equal(t, first, cc.TokenCount())
	require.Equal(t, 2, calls, "counted once, then cached")
}
