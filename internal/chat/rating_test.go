package chat_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/chat"
)

// ratingInput is a typical call the rater rates, also used by benchmarks.
var ratingInput = chat.RatingInput{
	ToolName:        "search.query",
	ToolDescription: "Search the document index. Returns the best hits first.",
	Source:          "search",
	Query:           "Which release fixed the login timeout?",
	Input:           `{"q":"login timeout fixed","limit":3}`,
	Output: `{"hits":[` +
		`{"path":"CHANGELOG.md","line":42,"text":"v1.5: fix login timeout when the session cache is cold"},` +
		`{"path":"docs/auth.md","line":7,"text":"Sessions time out after 30 minutes of inactivity."},` +
		`{"path":"CHANGELOG.md","line":58,"text":"v1.4: raise default login timeout to 60s"}],"total":3}`,
}

func TestParseRating(t *testing.T) {
	tests := []struct {
		name string
		text string
		want chat.Rating
	}{
		{"bare", `{"relevance": 0.9, "correctness": 0.75, "reason": "Hits match."}`,
			chat.Rating{Relevance: 0.9, Correctness: 0.75, Reason: "Hits match."}},
		{"json fence", "```json\n{\"relevance\": 1, \"correctness\": 0}\n```",
			chat.Rating{Relevance: 1, Correctness: 0}},
		{"prose around", "Here is my rating:\n{\"relevance\":0.5,\"correctness\":0.5,\"reason\":\"ok\"}\nHope this helps {:",
			chat.Rating{Relevance: 0.5, Correctness: 0.5, Reason: "ok"}},
		{"skips objects without the fields", `Format {"a": 1} then {"Relevance": 0.2, "CORRECTNESS": 0.4, "reason": null}`,
			chat.Rating{Relevance: 0.2, Correctness: 0.4}},
		{"example quoted before the answer", "The format is {\"relevance\": 0.0, \"correctness\": 0.0, \"reason\": \"...\"}.\nMy answer:\n{\"relevance\": 0.7, \"correctness\": 0.9}",
			chat.Rating{Relevance: 0.7, Correctness: 0.9}},
		{"answer nested in a wrapper", `{"rating": {"relevance": 0.1, "correctness": 0.2}}`,
			chat.Rating{Relevance: 0.1, Correctness: 0.2}},
		{"nested braces in reason", `{"reason": "uses {curly} braces", "relevance": 0.3, "correctness": 0.6}`,
			chat.Rating{Relevance: 0.3, Correctness: 0.6, Reason: "uses {curly} braces"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := chat.ParseRating(tt.text)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestParseRating_Errors(t *testing.T) {
	tests := []struct {
		name string
		text string
		want error
	}{
		{"empty", "", chat.ErrNoAnswer},
		{"prose only", "The output looks relevant and correct.", chat.ErrNoAnswer},
		{"missing field", `{"relevance": 0.9}`, chat.ErrNoAnswer},
		{"truncated", `{"relevance": 0.9, "correctness": 0.`, chat.ErrNoAnswer},
		{"above range", `{"relevance": 9, "correctness": 0.5}`, chat.ErrBadAnswer},
		{"negative", `{"relevance": 0.5, "correctness": -0.1}`, chat.ErrBadAnswer},
		{"string number", `{"relevance": "0.5", "correctness": 0.5}`, chat.ErrBadAnswer},
		{"keys differing in case", `{"relevance": 0.5, "Relevance": 0.9, "correctness": 0.5}`, chat.ErrBadAnswer},
		{"reason not string", `{"relevance": 0.5, "correctness": 0.5, "reason": 3}`, chat.ErrBadAnswer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := chat.ParseRating(tt.text)
			require.ErrorIs(t, err, tt.want)
		})
	}
}

func TestRatingScore(t *testing.T) {
	require.InDelta(t, 0.65, chat.Rating{Relevance: 0.9, Correctness: 0.4}.Score(), 1e-9)
}

func TestRatingMessages_SourceInstructionsChange(t *testing.T) {
	// The rating system prompt is memoised; instructions reloaded at run
	// time must still show up.
	src := chat.SourceInstructions{"search": "Version one."}
	b := chat.NewBuilder(chat.WithSources(src))
	first, err := b.RatingMessages(ratingInput)
	require.NoError(t, err)
	require.Contains(t, first[0].Content(), "Version one.")

	src["search"] = "Version two."
	second, err := b.RatingMessages(ratingInput)
	require.NoError(t, err)
	require.Contains(t, second[0].Content(), "Version two.")
	require.NotContains(t, second[0].Content(), "Version one.")

	for i := range 300 { // past the memo's bound, prompts are still right
		in := ratingInput
		in.Custom = fmt.Sprintf("custom %d", i)
		msgs, err := b.RatingMessages(in)
		require.NoError(t, err)
		require.Contains(t, msgs[0].Content(), in.Custom)
	}
}
