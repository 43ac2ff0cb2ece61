package lab_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/lab"
)

// Versions whose answers the tiers tell apart (see modelSim): a seed-shaped
// answer too short for a search (rule short_answer fails), and a long one.
const (
	shortAnswer = `{"type": "answer", "message": "A poor reply to {q}."}`
	longAnswer  = `{"type": "answer", "message": "A great and complete answer to {q}, with every step the reader needs to act on it."}`
)

// TestExperimentEndToEnd: a request is accepted against the version
// labelled production, every trial runs once against the model, the
// tiers judge them fail-fast, and experiment.completed carries the report.
func TestExperimentEndToEnd(t *testing.T) {
	w := newWorld(t)
	w.start(w.cfg)
	w.version("support", 1, shortAnswer, "production")
	w.version("support", 2, longAnswer)
	w.version("support", 3, "not under test") // the latest: production wins as baseline
	req := w.request(map[string]any{
		"prompt_id": "support", "experiment_id": "exp-e2e", "name": "longer answers",
		"candidate_versions": []int{2}, "test_queries": queries(4, "search"), "repetitions": 2,
		"judge_model": "judge-b",
	})
	started := w.result(lab.TypeStarted, req, 30*time.Second)
	var st map[string]any
	require.NoError(t, json.Unmarshal(started.Data(), &st))
	require.Equal(t, "exp-e2e", st["experiment_id"])
	require.EqualValues(t, 1, st["baseline_version"], "the version labelled production is the baseline")
	require.EqualValues(t, 16, st["total_trials"])
	require.Equal(t, "model-a", st["model"])

	end := w.ending(req, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	d := decode(t, end)
	require.Equal(t, 16, d.CompletedTrials)
	require.Len(t, d.Report.Versions, 2)
	base, cand := d.Report.Versions[0], d.Report.Versions[1]
	require.Equal(t, 1, base.Version)
	require.True(t, base.Baseline)
	require.Equal(t, 8, base.Trials)
	require.Zero(t, base.PassRate, "every short search answer fails rule short_answer")
	require.Equal(t, map[string]float64{"structural": 1, "rules": 0}, base.TierBreakdown, "the judge never ran on a trial that failed the rules")
	require.Equal(t, 2, cand.Version)
	require.Equal(t, 1.0, cand.PassRate)
	require.Equal(t, map[string]float64{"structural": 1, "rules": 1, "llm_judge": 1}, cand.TierBreakdown)
	require.Len(t, cand.PerQuery, 4)
	for q, pq := range cand.PerQuery {
		require.Equal(t, q, pq.Query)
		require.Equal(t, 2, pq.Trials)
		require.Equal(t, 2, pq.Passes)
	}
	require.Positive(t, base.TotalTokens)
	require.Equal(t, 2, d.Report.Recommendation.Version)
	require.NotEqual(t, "HIGH", d.Report.Recommendation.Confidence, "4 queries cannot make a difference significant")
	require.NotNil(t, d.Judge)
	require.Equal(t, "judge-b", d.Judge.Model)
	require.False(t, d.Judge.SameModel)
	require.Positive(t, d.Judge.SpentTokens)
	require.Zero(t, d.Judge.Skipped)
	require.NotEmpty(t, d.Summary)

	// Every trial is one real call; the judge saw only what passed tiers 1 and 2.
	require.Equal(t, 16, w.sim.calls(callTrial))
	require.Equal(t, 8, w.sim.calls(callJudge))
	require.Equal(t, 1, w.sim.calls(callSummary))
	for k, n := range w.sim.trialCalls() {
		require.Equal(t, 2, n, "each (version, query) is called once per repetition: %q", k)
	}
	require.Len(t, w.storedTrials("exp-e2e"), 16)

	var status string
	var result []byte
	require.NoError(t, w.pool.QueryRow(context.Background(),
		`SELECT status, result FROM lab_experiments WHERE tenant_id = $1 AND experiment_id = 'exp-e2e'`, w.tenant).Scan(&status, &result))
	require.Equal(t, "completed", status)
	require.JSONEq(t, string(end.Data()), string(result))
}
