package quality_test

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/quality"
)

// The scorer's reference for the conformance suite, written from the
// README's definitions ("The scorer") rather than with quality's fold, so
// the suite compares the scorer with what it promises, not with itself:
//
//   - a target is a tool (tool_name) or a prompt version (prompt_hash, or
//     <prompt_id>@<version>); only what identifies it is kept;
//   - every event folded in counts in state_version; as_of_seq is the
//     highest stream sequence among them;
//   - calls (tool.executed, prompt.used) count total, successes,
//     failures, latency (when given, in microseconds); an llm_rating on a
//     call counts as an automated rating, as do tool.rated and
//     prompt.rated; feedback (rating, or thumbs up 1 / down 0) is kept
//     apart; ratings are summed in millionths, clamped to [0, 1];
//   - consecutive_failures counts the failures after the newest success by
//     stream sequence; the history keeps the newest 128 calls, newest
//     first, +seq for a success and -seq for a failure; recent_score is
//     the success rate of the newest 20;
//   - quality = S × R with S = (successes + 1) / (calls + 2) and
//     R = (Σ ratings + 2·Σ feedback + 2·0.5) / (n + 2·f + 2); published
//     figures are rounded to 6 decimals.
type refTarget struct {
	key                            quality.Key
	toolName, promptHash, promptID string
	version                        int
	events, asOf                   int64
	calls                          []refCall
	latencyUs, latencyN            int64
	ratingMicro, ratingN           int64
	feedbackMicro, feedbackN       int64
}

type refCall struct {
	seq int64
	ok  bool
}

const (
	refHistory = 128
	refWindow  = 20
)

// scorerReference folds deliveries, in stream order, into the targets.
func scorerReference(ds []*bus.Delivery) []*refTarget {
	byKey := map[quality.Key]*refTarget{}
	for _, d := range ds {
		var e struct {
			Target     string   `json:"target"`
			ToolName   string   `json:"tool_name"`
			PromptHash string   `json:"prompt_hash"`
			PromptID   string   `json:"prompt_id"`
			Version    *float64 `json:"version"`
			Success    *bool    `json:"success"`
			LatencyMs  *float64 `json:"latency_ms"`
			LLMRating  *float64 `json:"llm_rating"`
			Rating     *float64 `json:"rating"`
			Thumbs     string   `json:"thumbs"`
		}
		if json.Unmarshal(d.Event.Data(), &e) != nil {
			continue
		}
		var kind string // call, rating, feedback
		switch d.Event.Type() {
		case quality.TypeToolExecuted:
			kind, e.Target = "call", quality.TargetTool
		case quality.TypePromptUsed:
			kind, e.Target = "call", quality.TargetPrompt
		case quality.TypeToolRated:
			kind, e.Target = "rating", quality.TargetTool
		case quality.TypePromptRated:
			kind, e.Target = "rating", quality.TargetPrompt
		case quality.TypeFeedbackSubmitted:
			kind = "feedback"
		default:
			continue
		}
		k := quality.Key{Tenant: d.Tenant, Target: e.Target}
		var toolName, hash, promptID string
		version := 0
		switch {
		case e.Target == quality.TargetTool && e.ToolName != "":
			k.ID, toolName = e.ToolName, e.ToolName
		case e.Target == quality.TargetPrompt && e.PromptHash != "":
			k.ID, hash = e.PromptHash, e.PromptHash
		case e.Target == quality.TargetPrompt && e.PromptID != "" && e.Version != nil:
			version = int(*e.Version)
			k.ID, promptID = e.PromptID+"@"+strconv.Itoa(version), e.PromptID
		default:
			continue // names no target: dead-lettered
		}
		var rating *float64
		switch kind {
		case "call":
			if e.Success == nil {
				continue
			}
			rating = e.LLMRating
		case "rating":
			if e.Rating == nil {
				continue
			}
			rating = e.Rating
		case "feedback":
			switch {
			case e.Rating != nil:
				rating = e.Rating
			case e.Thumbs == "up":
				rating = ptr(1.0)
			case e.Thumbs == "down":
				rating = ptr(0.0)
			default:
				continue
			}
		}
		r := byKey[k]
		if r == nil {
			r = &refTarget{key: k}
			byKey[k] = r
		}
		seq := int64(d.StreamSeq)
		r.toolName, r.promptHash, r.promptID, r.version = toolName, hash, promptID, version
		r.events++
		r.asOf = max(r.asOf, seq)
		switch kind {
		case "call":
			r.calls = append(r.calls, refCall{seq, *e.Success})
			if e.LatencyMs != nil && *e.LatencyMs >= 0 {
				r.latencyUs += int64(math.Round(*e.LatencyMs * 1000))
				r.latencyN++
			}
			if rating != nil {
				r.ratingMicro += millionths(*rating)
				r.ratingN++
			}
		case "rating":
			r.ratingMicro += millionths(*rating)
			r.ratingN++
		case "feedback":
			r.feedbackMicro += millionths(*rating)
			r.feedbackN++
		}
	}
	out := make([]*refTarget, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].key, out[j].key
		return a.Target < b.Target || a.Target == b.Target && a.ID < b.ID
	})
	return out
}

func ptr[T any](v T) *T { return &v }

func millionths(r float64) int64 {
	return int64(math.Round(math.Min(math.Max(r, 0), 1) * 1e6))
}

func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }

func (r *refTarget) counts() (successes, failures, lastSuccess int64, streak int) {
	for _, c := range r.calls {
		if c.ok {
			successes++
			lastSuccess = max(lastSuccess, c.seq)
		} else {
			failures++
		}
	}
	for _, c := range r.calls {
		if !c.ok && c.seq > lastSuccess {
			streak++
		}
	}
	return successes, failures, lastSuccess, streak
}

// newest returns the newest calls by stream sequence, newest first, at
// most n.
func (r *refTarget) newest(n int) []refCall {
	calls := append([]refCall{}, r.calls...)
	sort.Slice(calls, func(i, j int) bool { return calls[i].seq > calls[j].seq })
	return calls[:min(n, len(calls))]
}

// metrics is r as the scorer stores it (quality.List).
func (r *refTarget) metrics() *quality.Metrics {
	successes, failures, lastSuccess, streak := r.counts()
	history := []int64{}
	for _, c := range r.newest(refHistory) {
		if c.ok {
			history = append(history, c.seq)
		} else {
			history = append(history, -c.seq)
		}
	}
	return &quality.Metrics{
		Key: r.key, ToolName: r.toolName, PromptHash: r.promptHash, PromptID: r.promptID, PromptVersion: r.version,
		StateVersion: r.events, AsOfSeq: r.asOf,
		TotalCalls: int64(len(r.calls)), Successes: successes, Failures: failures,
		LatencySumUs: r.latencyUs, LatencyCount: r.latencyN,
		RatingSumMicro: r.ratingMicro, RatingCount: r.ratingN,
		FeedbackSumMicro: r.feedbackMicro, FeedbackCount: r.feedbackN,
		LastSuccessSeq: lastSuccess, ConsecutiveFailures: streak, History: history,
	}
}

// changed is the data of r's quality.changed, as JSON decodes it.
func (r *refTarget) changed() map[string]any {
	successes, failures, _, streak := r.counts()
	calls := float64(len(r.calls))
	d := map[string]any{
		"target": r.key.Target, "state_version": float64(r.events), "as_of_seq": float64(r.asOf),
		"total_calls": calls, "successes": float64(successes), "failures": float64(failures),
		"consecutive_failures": float64(streak),
		"rating_count":         float64(r.ratingN), "feedback_count": float64(r.feedbackN),
		"quality_formula": quality.Formula,
	}
	switch {
	case r.toolName != "":
		d["tool_name"] = r.toolName
	case r.promptHash != "":
		d["prompt_hash"] = r.promptHash
	default:
		d["prompt_id"], d["version"] = r.promptID, float64(r.version)
	}
	S := (float64(successes) + 1) / (calls + 2)
	R := (float64(r.ratingMicro)/1e6 + 2*float64(r.feedbackMicro)/1e6 + 2*0.5) / (float64(r.ratingN) + 2*float64(r.feedbackN) + 2)
	d["quality_score"] = round6(S * R)
	d["success_rate"] = 0.0
	if calls > 0 {
		d["success_rate"] = round6(float64(successes) / calls)
	}
	if r.ratingN > 0 {
		d["avg_rating"] = round6(float64(r.ratingMicro) / 1e6 / float64(r.ratingN))
	}
	if r.feedbackN > 0 {
		d["feedback_avg"] = round6(float64(r.feedbackMicro) / 1e6 / float64(r.feedbackN))
	}
	if r.latencyN > 0 {
		d["avg_latency_ms"] = round6(float64(r.latencyUs) / 1000 / float64(r.latencyN))
	}
	recent := r.newest(refWindow)
	ok := 0
	for _, c := range recent {
		if c.ok {
			ok++
		}
	}
	d["recent_score"], d["recent_window"] = 0.0, float64(len(recent))
	if len(recent) > 0 {
		d["recent_score"] = round6(float64(ok) / float64(len(recent)))
	}
	return d
}

// scorerState is the reference state: every target's metrics, ordered as
// quality.List orders them.
func scorerState(ds []*bus.Delivery) any {
	var out []*quality.Metrics // as List gives none
	for _, r := range scorerReference(ds) {
		out = append(out, r.metrics())
	}
	return out
}

// scorerResults are the final quality.changed of every target: the
// scorer publishes its state per target with a version that counts the
// events folded in, so the newest published version is the final state.
func scorerResults(ds []*bus.Delivery) []conformance.Result {
	var out []conformance.Result
	for _, r := range scorerReference(ds) {
		target := r.key.Target + "/" + r.key.ID
		out = append(out, conformance.Result{
			Key: target, Version: r.events, Type: quality.TypeQualityChanged,
			ID:   bus.DeriveID("scorer", r.key.Tenant, quality.TypeQualityChanged, "state:"+target+"@"+strconv.FormatInt(r.events, 10)),
			Data: r.changed(),
		})
	}
	return out
}

// readScorerResult renders a quality.changed for comparison.
func readScorerResult(ev event.Event) conformance.Result {
	var d map[string]any
	_ = json.Unmarshal(ev.Data(), &d)
	id, _ := d["tool_name"].(string)
	if h, _ := d["prompt_hash"].(string); h != "" {
		id = h
	} else if p, _ := d["prompt_id"].(string); p != "" {
		v, _ := d["version"].(float64)
		id = p + "@" + strconv.Itoa(int(v))
	}
	target, _ := d["target"].(string)
	version, _ := d["state_version"].(float64)
	revised, _ := d["revised"].(bool)
	delete(d, "revised") // the content compared is the state's
	return conformance.Result{Key: target + "/" + id, Version: int64(version), ID: ev.ID(), Type: ev.Type(), Revised: revised, Data: d}
}

// The independent reference agrees with the scorer's own fold on the
// suite's workloads, stream order, sequences with gaps: checked without a
// database, so a disagreement in the suite is the scorer's.
func TestScorerReferenceAgreesWithCompute(t *testing.T) {
	for _, seed := range []uint64{1, 2, 4, 5} {
		evs := newWorkload(t, "conf", 1500, seed).events
		ds := make([]*bus.Delivery, len(evs))
		for i, ev := range evs {
			ds[i] = &bus.Delivery{Event: ev, Tenant: "conf", StreamSeq: uint64(3*i + 7)}
		}
		want := quality.Compute(ds)
		got := scorerState(ds).([]*quality.Metrics)
		require.Equal(t, want, got, "seed %d", seed)
		for i, r := range scorerResults(ds) {
			m := want[i]
			raw, err := json.Marshal(m.Changed(20))
			require.NoError(t, err)
			var d map[string]any
			require.NoError(t, json.Unmarshal(raw, &d))
			require.Equal(t, d, r.Data, "seed %d, %s", seed, r.Key)
		}
	}
}
