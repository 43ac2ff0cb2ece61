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
//
// The state is order-independent: whatever the batching, the redelivery
// order, outages or the number of scorer copies, the same set of events
// gives the same state, field for field. consecutive_failures (failures
// after the newest success, by stream sequence) and the recent window (the
// newest calls by stream sequence) are exact for events up to HistoryDepth
// calls late; see HistoryDepth for what happens beyond.
package quality

import (
	"math"
	"slices"
	"sort"
)

// Formula names the composite score in quality.changed events.
const Formula = "beta_posterior(success) * shrunk_mean(rating, feedback x2, prior 0.5 w2)"

// Scoring parameters; see the package comment.
const (
	FeedbackWeight = 2.0
	RatingPrior    = 0.5
	RatingPriorN   = 2.0
	// MaxWindow is the largest recent window.
	MaxWindow = 64
	// HistoryDepth is how many of a target's newest calls (by stream
	// sequence) the state keeps. It bounds how late an event may arrive and
	// still land in its place: a call more than HistoryDepth calls older
	// than the target's newest is counted in the totals but not in the
	// recent window, and a success that late ends the failure streak at
	// the failures still in the history.
	HistoryDepth = 128
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

// Metrics is the rolling state of one Key. It is a function of the set of
// events folded in and their stream sequences, not of their order: sums
// are integers, and the streak and recent window are computed from the
// calls' sequences, so any batching, redelivery order or number of copies
// gives the same state (within HistoryDepth).
type Metrics struct {
	Key
	ToolName      string
	PromptHash    string
	PromptID      string
	PromptVersion int

	// StateVersion counts the events folded in; AsOfSeq is the highest
	// stream sequence among them.
	StateVersion int64
	AsOfSeq      int64

	TotalCalls          int64
	Successes           int64
	Failures            int64
	LatencySumUs        int64 // microseconds
	LatencyCount        int64
	RatingSumMicro      int64 // ratings in millionths
	RatingCount         int64
	FeedbackSumMicro    int64
	FeedbackCount       int64
	LastSuccessSeq      int64
	ConsecutiveFailures int
	// History holds the newest calls by stream sequence, newest first, at
	// most HistoryDepth: +seq for a success, -seq for a failure.
	History []int64
}

// Call records one call's outcome at stream sequence seq; latencyMs < 0
// means unknown.
func (m *Metrics) Call(success bool, latencyMs float64, seq int64) {
	m.TotalCalls++
	if success {
		m.Successes++
	} else {
		m.Failures++
	}
	if latencyMs >= 0 {
		m.LatencySumUs += int64(math.Round(latencyMs * 1000))
		m.LatencyCount++
	}
	// The streak is the number of failures after the newest success.
	switch {
	case !success && seq > m.LastSuccessSeq:
		m.ConsecutiveFailures++
	case success && seq > m.LastSuccessSeq:
		// Every call after seq that the history holds is a failure (it is
		// after the previous newest success); if seq falls outside the
		// history, the older failures are no longer known.
		n := 0
		for _, h := range m.History {
			if abs(h) > seq {
				n++
			}
		}
		m.ConsecutiveFailures = n
		m.LastSuccessSeq = seq
	}
	m.insert(success, seq)
}

func (m *Metrics) insert(success bool, seq int64) {
	i := sort.Search(len(m.History), func(i int) bool { return abs(m.History[i]) < seq })
	if i >= HistoryDepth {
		return // older than everything kept
	}
	if i < len(m.History) && abs(m.History[i]) == seq {
		return
	}
	v := seq
	if !success {
		v = -seq
	}
	m.History = slices.Insert(m.History, i, v)
	if len(m.History) > HistoryDepth {
		m.History = m.History[:HistoryDepth]
	}
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// Rate records an automated rating in [0,1].
func (m *Metrics) Rate(r float64) {
	m.RatingSumMicro += micro(r)
	m.RatingCount++
}

// Feedback records a user's rating in [0,1].
func (m *Metrics) Feedback(r float64) {
	m.FeedbackSumMicro += micro(r)
	m.FeedbackCount++
}

func micro(r float64) int64 {
	switch {
	case math.IsNaN(r) || r < 0:
		r = 0
	case r > 1:
		r = 1
	}
	return int64(math.Round(r * 1e6))
}

// SuccessRate is the raw share of successful calls, 0 with no calls.
func (m *Metrics) SuccessRate() float64 {
	if m.TotalCalls == 0 {
		return 0
	}
	return float64(m.Successes) / float64(m.TotalCalls)
}

// Recent returns the success rate over the newest window calls and how
// many calls that is.
func (m *Metrics) Recent(window int) (score float64, n int) {
	n = min(window, len(m.History))
	if n == 0 {
		return 0, 0
	}
	ok := 0
	for _, h := range m.History[:n] {
		if h > 0 {
			ok++
		}
	}
	return float64(ok) / float64(n), n
}

// Quality is the composite score; see the package comment.
func (m *Metrics) Quality() float64 {
	s := (float64(m.Successes) + 1) / (float64(m.TotalCalls) + 2)
	num := float64(m.RatingSumMicro)/1e6 + FeedbackWeight*float64(m.FeedbackSumMicro)/1e6 + RatingPriorN*RatingPrior
	den := float64(m.RatingCount) + FeedbackWeight*float64(m.FeedbackCount) + RatingPriorN
	return s * num / den
}

// Changed is the data of a quality.changed event: the state of one target
// after StateVersion events, expressed in calls (not events) so a
// subscriber can reason about it.
type Changed struct {
	Target              string   `json:"target"`
	ToolName            string   `json:"tool_name,omitempty"`
	PromptHash          string   `json:"prompt_hash,omitempty"`
	PromptID            string   `json:"prompt_id,omitempty"`
	Version             int      `json:"version,omitempty"`
	StateVersion        int64    `json:"state_version"`
	AsOfSeq             int64    `json:"as_of_seq"`
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

// Changed renders m as a quality.changed payload with a recent window of
// window calls.
func (m *Metrics) Changed(window int) Changed {
	avg := func(sum float64, n int64) *float64 {
		if n == 0 {
			return nil
		}
		v := round(sum / float64(n))
		return &v
	}
	recent, n := m.Recent(window)
	return Changed{
		Target: m.Target, ToolName: m.ToolName, PromptHash: m.PromptHash,
		PromptID: m.PromptID, Version: m.PromptVersion,
		StateVersion: m.StateVersion, AsOfSeq: m.AsOfSeq,
		QualityScore: round(m.Quality()), SuccessRate: round(m.SuccessRate()),
		TotalCalls: m.TotalCalls, Successes: m.Successes, Failures: m.Failures,
		ConsecutiveFailures: m.ConsecutiveFailures,
		AvgRating:           avg(float64(m.RatingSumMicro)/1e6, m.RatingCount), RatingCount: m.RatingCount,
		FeedbackAvg: avg(float64(m.FeedbackSumMicro)/1e6, m.FeedbackCount), FeedbackCount: m.FeedbackCount,
		AvgLatencyMs: avg(float64(m.LatencySumUs)/1000, m.LatencyCount),
		RecentScore:  round(recent), RecentWindow: n,
		QualityFormula: Formula,
	}
}

// round keeps published scores to 6 decimals.
func round(v float64) float64 { return math.Round(v*1e6) / 1e6 }
