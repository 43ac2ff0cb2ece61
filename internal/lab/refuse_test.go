package lab_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/lab"
)

// refused waits for the lab.rejected of ev and decodes it.
func (w *world) refused(ev event.Event, timeout time.Duration) rejection {
	w.t.Helper()
	got := w.result(lab.TypeRejected, ev, timeout)
	var r rejection
	require.NoError(w.t, json.Unmarshal(got.Data(), &r))
	require.Equal(w.t, ev.ID(), r.EventID)
	return r
}

// TestNoModelRefusesAtOnce: with no model configured the lab runs, and
// refuses every experiment at once, saying why; nothing is invented.
func TestNoModelRefusesAtOnce(t *testing.T) {
	w := newWorld(t)
	cfg := w.cfg
	cfg.LLM.BaseURL, cfg.LLM.Model = "", ""
	w.start(cfg)
	w.version("support", 1, longAnswer)
	asked := time.Now()
	req := w.request(map[string]any{"prompt_id": "support", "test_queries": queries(2, "")})
	r := w.refused(req, 10*time.Second)
	require.Less(t, time.Since(asked), 5*time.Second, "refused at once")
	require.Equal(t, lab.ReasonNoModel, r.ReasonCode)
	require.Contains(t, r.Reason, "AGENTQ_LLM_BASE_URL")
	require.Contains(t, r.Reason, "never invents responses")
	require.Zero(t, w.count(lab.TypeStarted, req))
	require.Zero(t, w.model.Requests())
}

// TestRefusals: requests over a limit or naming what does not exist are
// refused with lab.rejected and a reason a person can act on; nothing
// runs.
func TestRefusals(t *testing.T) {
	w := newWorld(t)
	cfg := w.cfg
	cfg.Lab.MaxQueries, cfg.Lab.MaxVersions, cfg.Lab.MaxRepetitions = 3, 3, 2
	w.start(cfg)
	w.version("support", 1, longAnswer)
	w.version("support", 2, longAnswer)
	w.version("support", 3, longAnswer)
	w.version("support", 4, longAnswer)
	w.version("templated", 1, "Answer in {{.language}}: {q}")
	ok := w.request(map[string]any{"prompt_id": "support", "experiment_id": "exp-taken", "test_queries": queries(1, ""),
		"evaluation": map[string]any{"llm_judge": false}})
	w.ending(ok, 30*time.Second)

	for _, tc := range []struct {
		name    string
		data    map[string]any
		code    string
		reason  string
		details map[string]any
	}{
		{"too many queries", map[string]any{"prompt_id": "support", "test_queries": queries(4, "")},
			lab.ReasonOverLimit, "4 test queries is over the limit of 3 (AGENTQ_LAB_MAX_QUERIES)",
			map[string]any{"limit": 3.0, "got": 4.0, "setting": "AGENTQ_LAB_MAX_QUERIES"}},
		{"too many versions", map[string]any{"prompt_id": "support", "candidate_versions": []int{2, 3, 4}, "test_queries": queries(1, "")},
			lab.ReasonOverLimit, "4 versions (the baseline and its candidates) is over the limit of 3 (AGENTQ_LAB_MAX_VERSIONS)", nil},
		{"too many repetitions", map[string]any{"prompt_id": "support", "test_queries": queries(1, ""), "repetitions": 3},
			lab.ReasonOverLimit, "3 repetitions is over the limit of 2 (AGENTQ_LAB_MAX_REPETITIONS)", nil},
		{"unknown prompt", map[string]any{"prompt_id": "nope", "test_queries": queries(1, "")},
			lab.ReasonUnknownPrompt, "prompt nope has no versions", nil},
		{"unknown version", map[string]any{"prompt_id": "support", "candidate_versions": []int{9}, "test_queries": queries(1, "")},
			lab.ReasonUnknownVersion, "prompt support has no version 9 (known: [1 2 3 4])", nil},
		{"baseline among the candidates", map[string]any{"prompt_id": "support", "baseline_version": 2, "candidate_versions": []int{2}, "test_queries": queries(1, "")},
			lab.ReasonInvalid, "version 2 is both the baseline and a candidate", nil},
		{"unsupported assertion", map[string]any{"prompt_id": "support", "test_queries": []map[string]any{
			{"query": "q", "assert": []map[string]any{{"type": "llm-rubric", "value": "be nice"}}}}},
			lab.ReasonInvalid, `test query 1 assertion 1 (llm-rubric): unsupported assertion type "llm-rubric"; supported: equals, contains`, nil},
		{"bad regex", map[string]any{"prompt_id": "support", "test_queries": queries(1, ""),
			"evaluation": map[string]any{"assert": []map[string]any{{"type": "regex", "value": "(?<=x)"}}}},
			lab.ReasonInvalid, "evaluation assertion 1 (regex): value is not a regular expression Go accepts", nil},
		{"cost without prices", map[string]any{"prompt_id": "support", "test_queries": queries(1, ""),
			"evaluation": map[string]any{"assert": []map[string]any{{"type": "cost", "threshold": 0.01}}}},
			lab.ReasonInvalid, "cost needs the model's prices", nil},
		{"missing parameter", map[string]any{"prompt_id": "templated", "test_queries": queries(1, "")},
			lab.ReasonInvalid, "version 1 cannot be rendered for test query 1", nil},
		{"auto: too many candidates", map[string]any{"prompt_id": "support", "auto": map[string]any{"candidate_count": 3}},
			lab.ReasonOverLimit, "4 versions (the baseline and 3 candidates) is over the limit of 3 (AGENTQ_LAB_MAX_VERSIONS)", nil},
		{"auto with test queries", map[string]any{"prompt_id": "support", "auto": map[string]any{}, "test_queries": queries(1, "")},
			lab.ReasonInvalid, "with auto the test queries come from the feedback: leave out test_queries", nil},
		{"auto without feedback", map[string]any{"prompt_id": "support", "auto": map[string]any{"candidate_count": 2}},
			lab.ReasonNotEnoughFeedback, "prompt support has 0 negative feedback (thumbs down or a rating under 0.5) with its query; a run from feedback needs at least 5",
			map[string]any{"prompt_id": "support", "min_negative_feedback": 5.0, "got": 0.0, "without_query": 0.0}},
		{"experiment id taken", map[string]any{"prompt_id": "support", "experiment_id": "exp-taken", "test_queries": queries(2, "")},
			lab.ReasonDuplicate, "experiment id exp-taken is taken by another request", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := w.request(tc.data)
			r := w.refused(req, 10*time.Second)
			require.Equal(t, tc.code, r.ReasonCode, r.Reason)
			require.Contains(t, r.Reason, tc.reason)
			if tc.details != nil {
				require.Equal(t, tc.details, r.Details)
			}
			require.Zero(t, w.count(lab.TypeStarted, req))
		})
	}

	t.Run("cancel of an unknown experiment", func(t *testing.T) {
		ev := w.publish(lab.TypeCancelled, map[string]any{"experiment_id": "exp-none"})
		r := w.refused(ev, 10*time.Second)
		require.Equal(t, lab.ReasonUnknownExp, r.ReasonCode)
	})
	t.Run("cancel of a finished experiment", func(t *testing.T) {
		ev := w.publish(lab.TypeCancelled, map[string]any{"experiment_id": "exp-taken"})
		r := w.refused(ev, 10*time.Second)
		require.Equal(t, lab.ReasonFinished, r.ReasonCode)
		require.Contains(t, r.Reason, "experiment exp-taken has already ended (succeeded)")
	})
	require.Equal(t, 1, w.sim.calls(callTrial), "only the accepted experiment ran")
}

// TestRequestWaitsForItsVersion: a request naming a version the indexer
// has not reported yet waits for it instead of being refused.
func TestRequestWaitsForItsVersion(t *testing.T) {
	w := newWorld(t)
	opts := copyOpts()
	opts.PromptWait = 20 * time.Second
	w.startWith(w.cfg, opts)
	w.version("support", 1, longAnswer)
	// Version 2 reaches the stream after the request: the lab meets the
	// request first.
	req := w.request(map[string]any{"prompt_id": "support", "candidate_versions": []int{2}, "test_queries": queries(1, ""),
		"evaluation": map[string]any{"llm_judge": false}})
	w.version("support", 2, longAnswer)
	end := w.ending(req, 30*time.Second)
	require.Equal(t, lab.TypeCompleted, end.Type(), w.describe())
	require.Zero(t, w.count(lab.TypeRejected, req))
}
