package chat_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/chat"
)

// judgeInput is a typical lab judgement, also used by benchmarks.
var judgeInput = chat.JudgeInput{
	Query:     "How do I reset my password?",
	Response:  "Open Settings > Security, choose Reset password and follow the emailed link. The link expires after 15 minutes.",
	Reference: "Settings > Security > Reset password; a link is emailed.",
}

func TestParseJudgement(t *testing.T) {
	custom := chat.Rubric{{Name: "Faithfulness", Points: 60}, {Name: "brevity", Points: 40}}
	tests := []struct {
		name   string
		text   string
		rubric chat.Rubric
		want   chat.Judgement
	}{
		{
			name: "default rubric in a fence",
			text: "```json\n{\"criteria\": {\"helpfulness\": 20, \"accuracy\": 25, \"completeness\": 15, \"safety\": 25}, \"pass\": true, \"reason\": \"Good.\"}\n```",
			want: chat.Judgement{
				Criteria: []chat.CriterionScore{
					{Name: "helpfulness", Points: 20, Max: 25},
					{Name: "accuracy", Points: 25, Max: 25},
					{Name: "completeness", Points: 15, Max: 25},
					{Name: "safety", Points: 25, Max: 25},
				},
				Score: 0.85, Pass: true, Reason: "Good.",
			},
		},
		{
			name:   "custom rubric, any case, half points, extra criterion ignored",
			text:   `Verdict: {"Criteria": {"faithfulness": 30.5, "BREVITY": 40, "style": 99}, "pass": false}`,
			rubric: custom,
			want: chat.Judgement{
				Criteria: []chat.CriterionScore{{Name: "faithfulness", Points: 30.5, Max: 60}, {Name: "brevity", Points: 40, Max: 40}},
				Score:    0.705,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := chat.ParseJudgement(tt.text, tt.rubric)
			require.NoError(t, err)
			require.InDelta(t, tt.want.Score, got.Score, 1e-9)
			got.Score = tt.want.Score
			require.Equal(t, tt.want, got)
		})
	}
}

func TestParseJudgement_Errors(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		rubric chat.Rubric
		want   error
	}{
		{"no json", "Looks great, pass.", nil, chat.ErrNoAnswer},
		{"no pass", `{"criteria": {"helpfulness": 1}}`, nil, chat.ErrNoAnswer},
		{"criteria not object", `{"criteria": [1, 2], "pass": true}`, nil, chat.ErrBadAnswer},
		{"criterion missing", `{"criteria": {"helpfulness": 20, "accuracy": 25, "completeness": 15}, "pass": true}`, nil, chat.ErrBadAnswer},
		{"over points", `{"criteria": {"helpfulness": 26, "accuracy": 25, "completeness": 15, "safety": 25}, "pass": true}`, nil, chat.ErrBadAnswer},
		{"criterion twice", `{"criteria": {"helpfulness": 1, "Helpfulness": 20, "accuracy": 1, "completeness": 1, "safety": 1}, "pass": true}`, nil, chat.ErrBadAnswer},
		{"pass not bool", `{"criteria": {"helpfulness": 1, "accuracy": 1, "completeness": 1, "safety": 1}, "pass": "yes"}`, nil, chat.ErrBadAnswer},
		{"invalid rubric", `{"criteria": {}, "pass": true}`, chat.Rubric{{Name: "", Points: 1}}, chat.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := chat.ParseJudgement(tt.text, tt.rubric)
			require.ErrorIs(t, err, tt.want)
		})
	}
}

func TestDefaultRubric(t *testing.T) {
	r := chat.DefaultRubric()
	require.NoError(t, r.Validate())
	require.Equal(t, 100, r.Total())
	for _, c := range r {
		require.Equal(t, 25, c.Points, c.Name)
	}
	r[0].Points = 1
	require.Equal(t, 25, chat.DefaultRubric()[0].Points, "callers get their own copy")
}
