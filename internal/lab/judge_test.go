package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/lab"
)

// TestTiersFailFast: a trial stops at the first tier it fails: JSON in
// the wrong shape never reaches the rules or the judge, an assertion that
// fails keeps the judge away, and only what passes both is judged.
func TestTiersFailFast(t *testing.T) {
	w := newWorld(t)
	w.start(w.cfg)
	w.version("tiers", 1, `{"kind": "answer", "text": "{q}"}`)                               // not the built-in shape
	w.version("tiers", 2, `{"type": "answer", "message": "A great answer to {q}. Berlin."}`) // fails not-contains Berlin
	w.version("tiers", 3, `{"type": "answer", "message": "A great answer to {q}."}`)         // passes; judged
	w.version("tiers", 4, `A poor plain-text answer to {q}.`)                                // plain text: 0.5, a pass; the judge fails it
	req := w.request(map[string]any{
		"prompt_id": "tiers", "baseline_version": 1, "candidate_versions": []int{2, 3, 4}, "judge_model": "judge-b",
		"test_queries": []map[string]any{
			{"query": "q0", "assert": []map[string]any{{"type": "icontains", "value": "ANSWER"}}},
			{"query": "q1"},
		},
		"evaluation": map[string]any{"assert": []map[string]any{{"type": "not-contains", "value": "Berlin"}}},
	})
	end := w.ending(req, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	d := decode(t, end)
	breakdown := map[int]map[string]float64{}
	pass := map[int]float64{}
	for _, v := range d.Report.Versions {
		breakdown[v.Version], pass[v.Version] = v.TierBreakdown, v.PassRate
	}
	require.Equal(t, map[string]float64{"structural": 0}, breakdown[1])
	require.Equal(t, map[string]float64{"structural": 1, "rules": 0}, breakdown[2])
	require.Equal(t, map[string]float64{"structural": 1, "rules": 1, "llm_judge": 1}, breakdown[3])
	require.Equal(t, map[string]float64{"structural": 1, "rules": 1, "llm_judge": 0}, breakdown[4])
	require.Equal(t, map[int]float64{1: 0, 2: 0, 3: 1, 4: 0}, pass)
	require.Equal(t, 4, w.sim.calls(callJudge), "only versions 3 and 4 reach the judge, 2 queries each")

	// The stored trials say why.
	var out []byte
	require.NoError(t, w.pool.QueryRow(context.Background(), `
		SELECT output FROM job_steps WHERE tenant_id = $1 AND consumer = 'lab' AND job_id = $2 AND step = 'trial/2/0/0'`,
		w.tenant, req.ID()).Scan(&out))
	var tr lab.Trial
	require.NoError(t, json.Unmarshal(out, &tr))
	require.False(t, tr.Pass)
	require.Len(t, tr.Tiers, 2)
	require.Equal(t, `not-contains: the response contains "Berlin"`, tr.Tiers[1].Reason)
	require.Contains(t, tr.Response, "Berlin")
	require.Positive(t, tr.PromptTokens)
	require.Positive(t, tr.DurationMs)
}

// TestJudgeBudget: the judge stops once its budget is spent, never
// overshooting it by more than one call, and those trials get the
// neutral verdict and are counted; with a provider that sends no usage
// the tokens are counted locally, so the budget still holds.
func TestJudgeBudget(t *testing.T) {
	for _, omitUsage := range []bool{false, true} {
		t.Run(fmt.Sprintf("usage omitted %v", omitUsage), func(t *testing.T) {
			w := newWorld(t)
			if omitUsage {
				w.model.SetUsage(-1, 0)
			}
			cfg := w.cfg
			cfg.Lab.Concurrency = 4
			w.start(cfg)
			w.version("budget", 1, `{"type": "answer", "message": "A great answer to {q}."}`)
			const budget = 3000
			req := w.request(map[string]any{
				"prompt_id": "budget", "test_queries": queries(12, ""),
				"evaluation": map[string]any{"judge_budget_tokens": budget},
			})
			end := w.ending(req, time.Minute)
			require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
			d := decode(t, end)
			trials := w.trials(req.ID())
			require.Len(t, trials, 12)
			spent, most, skipped := 0, 0, 0
			for _, tr := range trials {
				spent += tr.JudgeTokens
				most = max(most, tr.JudgeTokens)
				judge := tr.Tiers[len(tr.Tiers)-1]
				require.Equal(t, "llm_judge", string(judge.Tier))
				if judge.Placeholder == lab.PlaceholderBudget {
					skipped++
					require.Equal(t, 0.5, judge.Score)
					require.True(t, judge.Pass)
					require.Equal(t, "budget exhausted", judge.Reason)
					require.Zero(t, tr.JudgeTokens)
				}
				require.Equal(t, omitUsage, tr.TokensCounted)
			}
			t.Logf("judge spent %d of %d tokens (largest call %d) and skipped %d of 12 trials", spent, budget, most, skipped)
			require.Positive(t, skipped, "the budget runs out")
			require.Less(t, skipped, 12, "the judge judged some")
			require.Equal(t, 12-skipped, w.sim.calls(callJudge), "a skipped trial costs no call")
			require.Positive(t, most)
			require.LessOrEqual(t, spent, budget+most, "spend exceeds the budget by at most one call")
			require.Equal(t, lab.JudgeSpend{Model: "model-a", BudgetTokens: budget, SpentTokens: spent, Skipped: skipped, SameModel: true}, *d.Judge)
			require.True(t, slices.ContainsFunc(d.Report.Recommendation.Warnings, func(s string) bool {
				return strings.Contains(s, fmt.Sprintf("%d of 12 trials were not judged by the LLM judge (budget exhausted)", skipped))
			}), "%q", d.Report.Recommendation.Warnings)
			require.True(t, slices.ContainsFunc(d.Report.Recommendation.Warnings, func(s string) bool {
				return strings.Contains(s, "the LLM judge (model-a) is the model under test")
			}), "%q", d.Report.Recommendation.Warnings)
			require.Positive(t, d.Report.Versions[0].TotalTokens)
		})
	}
}

// trials reads an experiment's stored trials.
func (w *world) trials(id string) []lab.Trial {
	w.t.Helper()
	rows, err := w.pool.Query(context.Background(), `
		SELECT output FROM job_steps WHERE tenant_id = $1 AND consumer = 'lab' AND job_id = $2 AND step LIKE 'trial/%' ORDER BY step`,
		w.tenant, id)
	require.NoError(w.t, err)
	defer rows.Close()
	var out []lab.Trial
	for rows.Next() {
		var b []byte
		require.NoError(w.t, rows.Scan(&b))
		var tr lab.Trial
		require.NoError(w.t, json.Unmarshal(b, &tr))
		out = append(out, tr)
	}
	require.NoError(w.t, rows.Err())
	return out
}
