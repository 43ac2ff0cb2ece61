// Package quality keeps rolling quality for every tool and prompt version of
// a tenant (the scorer): call counts, success rate, latency, automated rating
// and user-feedback averages kept apart, a recent-window success rate, the
// consecutive-failure count and a composite quality score that is honest
// about few observations.
//
// The composite score (seed 001: success rate × average rating) uses
// posterior means instead of raw averages, so one lucky or unlucky call does
// not swing it:
//
//	S = (successes + 1) / (calls + 2)                       Beta(1,1) prior on success
//	R = (Σrating + w·Σfeedback + k·m) / (n + w·f + k)       ratings shrunk toward m
//	quality = S × R
//
// with n automated ratings (LLM or rule-based rater, and ratings the agent
// attached to the call), f user-feedback ratings weighted w = 2 each (a
// person's judgement counts double), prior mean m = 0.5 and prior weight
// k = 2. With no observations quality is 0.25; it approaches the raw product
// as evidence accumulates.
package quality

import (
	"math"
	"math/bits"
)

// Formula names the composite score in quality.changed events.
const Formula = "beta_posterior(success) * shrunk_mean(rating, feedback x2, prior 0.5 w2)"

// Scoring parameters; see the package comment.
const (
	FeedbackWeight = 2.0
	RatingPrior    = 0.5
	RatingPriorN   = 2.0
	// MaxWindow is the largest recent window the bitmask can hold.
	MaxWindow = 64
)

// Target kinds.
const (
	TargetTool   = "tool"
	TargetPrompt = "prompt"
)

// Key identifies one tool or prompt version of a tenant.
type Key struct {
	Tenant string
	Target string // TargetTool or TargetPrompt
	ID     string // tool name, prompt hash, or "<prompt_id>@<version>"
}

// Metrics is the rolling state of one Key.
type Metrics struct {
	Key
	ToolName      string
	PromptHash    string
	PromptID      string
	PromptVersion int

	TotalCalls          int64
	Successes           int64
	Failures            int64
	ConsecutiveFailures int
	LatencySumMs        float64
	LatencyCount        int64
	RatingSum           float64
	RatingCount         int64
	FeedbackSum         float64
	FeedbackCount       int64
	// RecentBits holds the outcomes of the last RecentCount calls, newest in
	// bit 0 (1 = success).
	RecentBits  uint64
	RecentCount int
	LastEventID string
}

// Call records one call's outcome; latencyMs < 0 means unknown.
func (m *Metrics) Call(success bool, latencyMs float64, window int) {
	m.TotalCalls++
	m.RecentBits <<= 1
	if success {
		m.Successes++
		m.ConsecutiveFailures = 0
		m.RecentBits |= 1
	} else {
		m.Failures++
		m.ConsecutiveFailures++
	}
	if window > MaxWindow {
		window = MaxWindow
	}
	if m.RecentCount < window {
		m.RecentCount++
	}
	if window < MaxWindow {
		m.RecentBits &= (1 << window) - 1
	}
	if latencyMs >= 0 {
		m.LatencySumMs += latencyMs
		m.LatencyCount++
	}
}

// Rate records an automated rating in [0,1].
func (m *Metrics) Rate(r float64) {
	m.RatingSum += clamp(r)
	m.RatingCount++
}

// Feedback records a user's rating in [0,1].
func (m *Metrics) Feedback(r float64) {
	m.FeedbackSum += clamp(r)
	m.FeedbackCount++
}

// SuccessRate is the raw share of successful calls, 0 with no calls.
func (m *Metrics) SuccessRate() float64 {
	if m.TotalCalls == 0 {
		return 0
	}
	return float64(m.Successes) / float64(m.TotalCalls)
}

// RecentScore is the success rate over the last RecentCount calls.
func (m *Metrics) RecentScore() float64 {
	if m.RecentCount == 0 {
		return 0
	}
	mask := uint64(math.MaxUint64)
	if m.RecentCount < MaxWindow {
		mask = (1 << m.RecentCount) - 1
	}
	return float64(bits.OnesCount64(m.RecentBits&mask)) / float64(m.RecentCount)
}

// Quality is the composite score; see the package comment.
func (m *Metrics) Quality() float64 {
	s := (float64(m.Successes) + 1) / (float64(m.TotalCalls) + 2)
	num := m.RatingSum + FeedbackWeight*m.FeedbackSum + RatingPriorN*RatingPrior
	den := float64(m.RatingCount) + FeedbackWeight*float64(m.FeedbackCount) + RatingPriorN
	return s * num / den
}

func clamp(r float64) float64 {
	switch {
	case math.IsNaN(r) || r < 0:
		return 0
	case r > 1:
		return 1
	}
	return r
}

// Changed is the data of a quality.changed event: the state of one target
// after a batch, expressed in calls (not events) so a subscriber can reason
// about it.
type Changed struct {
	Target              string   `json:"target"`
	ToolName            string   `json:"tool_name,omitempty"`
	PromptHash          string   `json:"prompt_hash,omitempty"`
	PromptID            string   `json:"prompt_id,omitempty"`
	Version             int      `json:"version,omitempty"`
	QualityScore        float64  `json:"quality_score"`
	SuccessRate         float64  `json:"success_rate"`
	TotalCalls          int64    `json:"total_calls"`
	Successes           int64    `json:"successes"`
	Failures            int64    `json:"failures"`
	ConsecutiveFailures int      `json:"consecutive_failures"`
	AvgRating           *float64 `json:"avg_rating,omitempty"`
	RatingCount         int64    `json:"rating_count"`
	FeedbackAvg         *float64 `json:"feedback_avg,omitempty"`
	FeedbackCount       int64    `json:"feedback_count"`
	AvgLatencyMs        *float64 `json:"avg_latency_ms,omitempty"`
	RecentScore         float64  `json:"recent_score"`
	RecentWindow        int      `json:"recent_window"`
	QualityFormula      string   `json:"quality_formula"`
}

// Changed renders m as a quality.changed payload.
func (m *Metrics) Changed() Changed {
	avg := func(sum float64, n int64) *float64 {
		if n == 0 {
			return nil
		}
		v := sum / float64(n)
		return &v
	}
	return Changed{
		Target: m.Target, ToolName: m.ToolName, PromptHash: m.PromptHash,
		PromptID: m.PromptID, Version: m.PromptVersion,
		QualityScore: round(m.Quality()), SuccessRate: round(m.SuccessRate()),
		TotalCalls: m.TotalCalls, Successes: m.Successes, Failures: m.Failures,
		ConsecutiveFailures: m.ConsecutiveFailures,
		AvgRating:           avg(m.RatingSum, m.RatingCount), RatingCount: m.RatingCount,
		FeedbackAvg: avg(m.FeedbackSum, m.FeedbackCount), FeedbackCount: m.FeedbackCount,
		AvgLatencyMs: avg(m.LatencySumMs, m.LatencyCount),
		RecentScore:  round(m.RecentScore()), RecentWindow: m.RecentCount,
		QualityFormula: Formula,
	}
}

// round keeps published scores stable to 6 decimals, so replays compare equal
// despite float summation order.
func round(v float64) float64 { return math.Round(v*1e6) / 1e6 }
