// Package quality keeps rolling quality for every tool and prompt version of
// a tenant (the scorer): call counts, success rate, latency, automated rating
// and user-feedback averages kept apart, a recent-window success rate, the
// consecutive-failure count and a composite quality score that is honest
// about few observations.
//
// The composite score (success rate × average rating) uses
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
// calls late; see HistoryDepth for what happens beyond. Of several copies
// of one event in the stream, the first counts, at its sequence, whichever
// is applied first: an earlier copy applied later re-files the event there
// (see database.Claimed.Moved).
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
	// NoEvidence is the quality of a target with no observations: the
	// prior means, 1/2 for success times RatingPrior. Search gives a
	// candidate with no figures yet this value too
	// (AGENTQ_SEARCH_NEUTRAL_QUALITY's default), so a target's first
	// observations move it up or down from where it stood, never below
	// targets nobody has used.
	NoEvidence = 0.5 * RatingPrior
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

	// newest holds the sequences of the newest events of every kind, newest
	// first, at most newestDepth: what AsOfSeq falls back to when its
	// event is re-filed at an earlier sequence. Bookkeeping, not state: List
	// does not read it, Compute does not return it.
	newest []int64
}

// newestDepth bounds Metrics.newest. A re-filing whose original is older
// than every event kept drops one entry, a newer event adds one back:
// as_of_seq stays exact unless that empties the list.
const newestDepth = 64

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

// insert puts the call at seq in its place in the history. The history is
// always the newest len(History) calls exactly: a call older than all of
// them is added only while the history holds every other call.
func (m *Metrics) insert(success bool, seq int64) {
	v := seq
	if !success {
		v = -seq
	}
	m.History = insertNewest(m.History, v, m.TotalCalls-1, HistoryDepth)
}

// insertNewest inserts v into list, which holds the newest of others
// entries (by absolute value, newest first), keeping it the newest
// len(list) of them, at most depth.
func insertNewest(list []int64, v int64, others int64, depth int) []int64 {
	i := sort.Search(len(list), func(i int) bool { return abs(list[i]) < abs(v) })
	switch {
	case i < len(list) && abs(list[i]) == abs(v):
		return list // already in place
	case i == len(list) && (i >= depth || int64(i) < others):
		return list // older than everything kept, and something older is not kept
	}
	list = slices.Insert(list, i, v)
	if len(list) > depth {
		list = list[:depth]
	}
	return list
}

// removeNewest removes the entry for sequence seq from list, if kept.
func removeNewest(list []int64, seq int64) []int64 {
	return slices.DeleteFunc(list, func(h int64) bool { return abs(h) == seq })
}

// track records an event at seq among the newest, after StateVersion
// counted it.
func (m *Metrics) track(seq int64) {
	m.newest = insertNewest(m.newest, seq, m.StateVersion-1, newestDepth)
}

// refile moves the effect of o, folded in at stream sequence from, to the
// earlier sequence to, where the event's first copy in the stream is: the
// state becomes what folding o in at to only gives. Counts and sums do
// not change, nor does StateVersion (it counts events); as_of_seq, the
// history, the failure streak and the newest success do. It is exact while
// the original (to) is newer than the oldest call the history keeps; for
// an original older than that the history is one call short until the
// next newer call, and if the newest success moves that far back the
// streak counts the failures still kept.
func (m *Metrics) refile(o observation, from, to int64) {
	m.newest = removeNewest(m.newest, from)
	m.newest = insertNewest(m.newest, to, m.StateVersion-1, newestDepth)
	if from == m.AsOfSeq {
		// The newest event moved back: the newest kept one is now the
		// newest; with none kept, to is all that is known.
		m.AsOfSeq = to
		if len(m.newest) > 0 {
			m.AsOfSeq = m.newest[0]
		}
	}
	if o.kind != obsCall {
		return
	}
	m.History = removeNewest(m.History, from)
	v := to
	if !o.success {
		v = -to
	}
	m.History = insertNewest(m.History, v, m.TotalCalls-1, HistoryDepth)
	switch {
	case !o.success:
		// A failure leaves the streak when it moves before the newest
		// success.
		if from > m.LastSuccessSeq && to < m.LastSuccessSeq {
			m.ConsecutiveFailures--
		}
	case from == m.LastSuccessSeq:
		// The newest success moved back: the newest success kept is now the
		// newest, and every call kept after it is a failure.
		for i, h := range m.History {
			if h > 0 {
				m.LastSuccessSeq, m.ConsecutiveFailures = h, i
				return
			}
		}
		// None kept (the history is full of failures newer than to): the
		// streak is at least what is kept.
		m.LastSuccessSeq = to
		m.ConsecutiveFailures = max(m.ConsecutiveFailures, len(m.History))
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
	// Revised marks the state of a target after a re-filing (a copy of an
	// event applied before its original, moved to the original's place):
	// the same state version, the stream-order content. It supersedes the
	// result of that version published before it.
	Revised bool `json:"revised,omitempty"`
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
