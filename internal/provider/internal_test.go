package provider

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"absent", http.Header{}, 0, false},
		{"seconds", http.Header{"Retry-After": {"2"}}, 2 * time.Second, true},
		{"fractional seconds", http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond, true},
		{"zero", http.Header{"Retry-After": {"0"}}, 0, true},
		{"HTTP date ahead", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second, true},
		{"HTTP date past", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0, true},
		{"milliseconds win", http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"2"}}, 1500 * time.Millisecond, true},
		{"negative", http.Header{"Retry-After": {"-1"}}, 0, false},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := retryAfter(tt.header, now)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestBackoffBounds(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 250 * time.Millisecond, 2: 500 * time.Millisecond, 3: time.Second, 5: 4 * time.Second, 40: 4 * time.Second} {
		for range 100 {
			d := backoff(n)
			require.GreaterOrEqual(t, d, want/2, "retry %d", n)
			require.LessOrEqual(t, d, want, "retry %d", n)
		}
	}
}

func TestFindJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"whole", ` {"a": 1} `, `{"a": 1}`},
		{"fenced", "```json\n{\"a\": {\"b\": [1, 2]}}\n```", `{"a": {"b": [1, 2]}}`},
		{"last top-level object, not a nested one", `x {"a": 1} y {"b": {"c": 2}} z`, `{"b": {"c": 2}}`},
		{"unbalanced brace before", `{ oops {"a": 1}`, `{"a": 1}`},
		{"none", `no json here [1, 2]`, ``},
		{"truncated", `{"a": 1, "b":`, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := findJSON(tt.in)
			require.Equal(t, tt.want != "", ok)
			require.Equal(t, tt.want, string(got))
		})
	}
}

func TestParseBaseURL(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "http://localhost:11434", want: "http://localhost:11434/v1"},
		{in: "http://localhost:11434/", want: "http://localhost:11434/v1"},
		{in: "https://api.openai.com/v1/", want: "https://api.openai.com/v1"},
		{in: "https://r.openai.azure.com/openai/deployments/d?api-version=2024-10-21", want: "https://r.openai.azure.com/openai/deployments/d?api-version=2024-10-21"},
		{in: "localhost:8000", err: "want http:// or https://"},
		{in: "", err: "required"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			u, err := parseBaseURL(tt.in)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, u.String())
		})
	}
}
