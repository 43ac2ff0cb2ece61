package report_test

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/report"
	"github.com/agentq/agentq/schemas"
)

// trial is a pass/fail trial with a score and nothing else.
func trial(version, query, rep int, pass bool, score float64) report.Trial {
	return report.Trial{Version: version, Query: query, Repetition: rep, Pass: pass, Score: score}
}

// oneShot builds a one-repetition experiment of two versions over n
// queries: the baseline passes the queries below basePasses, the candidate
// those below candPasses; a pass scores 1, a failure 0.
func oneShot(n, basePasses, candPasses int) report.Input {
	in := report.Input{Baseline: 1, Versions: []int{1, 2}, Queries: n}
	for q := range n {
		in.Trials = append(in.Trials,
			trial(1, q, 0, q < basePasses, b2f(q < basePasses)),
			trial(2, q, 0, q < candPasses, b2f(q < candPasses)))
	}
	return in
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func build(t *testing.T, in report.Input) report.Report {
	t.Helper()
	rep, err := report.Build(in)
	require.NoError(t, err)
	return rep
}

func TestBuildAggregates(t *testing.T) {
	all := map[report.Tier]report.TierVerdict{
		report.TierStructural: {Pass: true, Score: 1}, report.TierRules: {Pass: true, Score: 1}, report.TierJudge: {Pass: true, Score: 1},
	}
	in := report.Input{
		Baseline: 1, Versions: []int{1, 2}, Queries: 2, JudgeSkipped: 1,
		Trials: []report.Trial{
			{Version: 1, Query: 0, Repetition: 0, Pass: true, Score: 0.875, DurationMs: 100, Tokens: 10,
				Tiers: map[report.Tier]report.TierVerdict{report.TierStructural: {Pass: true, Score: 1}, report.TierRules: {Pass: true, Score: 1}, report.TierJudge: {Pass: true, Score: 0.875}},
				Tools: map[string]int{"search": 1}},
			{Version: 1, Query: 0, Repetition: 1, Pass: true, Score: 0.75, DurationMs: 200, Tokens: 20,
				Tiers: map[report.Tier]report.TierVerdict{report.TierStructural: {Pass: true, Score: 1}, report.TierRules: {Pass: true, Score: 1}, report.TierJudge: {Pass: true, Score: 0.75}},
				Tools: map[string]int{"search": 2}},
			{Version: 1, Query: 1, Repetition: 0, Pass: false, Score: 0.25, DurationMs: 300, Tokens: 30,
				Tiers: map[report.Tier]report.TierVerdict{report.TierStructural: {Pass: true, Score: 1}, report.TierRules: {Pass: false, Score: 0}}},
			{Version: 1, Query: 1, Repetition: 1, Pass: false, Score: 0, DurationMs: 400, Tokens: 40, Error: true},
			{Version: 2, Query: 0, Repetition: 0, Pass: true, Score: 1, DurationMs: 100, Tokens: 10, Tiers: all, Tools: map[string]int{"search": 1}},
			{Version: 2, Query: 0, Repetition: 1, Pass: true, Score: 1, DurationMs: 100, Tokens: 10, Tiers: all, Tools: map[string]int{"fetch": 1}},
			{Version: 2, Query: 1, Repetition: 0, Pass: true, Score: 1, DurationMs: 100, Tokens: 10, Tiers: all},
			{Version: 2, Query: 1, Repetition: 1, Pass: true, Score: 1, DurationMs: 100, Tokens: 10, Tiers: all},
		},
	}
	rep := build(t, in)

	basePass, baseScore := 0.5, 0.46875
	wantBase := report.Version{
		Version: 1, Baseline: true, Trials: 4,
		PassRate: basePass, AvgScore: baseScore, AvgDurationMs: 250, TotalTokens: 100, ErrorRate: 0.25,
		// The judge ran on the two trials that passed the rules; the
		// errored trial reached no tier.
		TierBreakdown: map[report.Tier]float64{report.TierStructural: 1, report.TierRules: 2.0 / 3, report.TierJudge: 1},
		// Query 0 always passes and query 1 always fails: the two
		// repetitions of each add nothing, so the interval is as wide as
		// for one trial (Q − 1 = 1 effective trial).
		PassRateCI:    report.WilsonForTest(basePass, 1),
		WeightedScore: report.PassRateWeight*basePass + report.ScoreWeight*baseScore,
		TierDetail: map[report.Tier]report.TierStats{
			report.TierStructural: {Trials: 3, PassRate: 1, AvgScore: 1},
			report.TierRules:      {Trials: 3, PassRate: 2.0 / 3, AvgScore: 2.0 / 3},
			report.TierJudge:      {Trials: 2, PassRate: 1, AvgScore: 0.8125},
		},
		ToolUsage: map[string]int{"search": 3},
		PerQuery: []report.QueryResult{
			{Query: 0, Trials: 2, Passes: 2, PassRate: 1, AvgScore: 0.8125},
			{Query: 1, Trials: 2, Passes: 0, PassRate: 0, AvgScore: 0.125},
		},
		FailingQueries: []int{1},
	}
	wantCand := report.Version{
		Version: 2, Trials: 4,
		PassRate: 1, AvgScore: 1, AvgDurationMs: 100, TotalTokens: 40, ErrorRate: 0,
		TierBreakdown: map[report.Tier]float64{report.TierStructural: 1, report.TierRules: 1, report.TierJudge: 1},
		PassRateCI:    report.WilsonForTest(1, 4),
		WeightedScore: report.PassRateWeight*1 + report.ScoreWeight*1,
		TierDetail: map[report.Tier]report.TierStats{
			report.TierStructural: {Trials: 4, PassRate: 1, AvgScore: 1},
			report.TierRules:      {Trials: 4, PassRate: 1, AvgScore: 1},
			report.TierJudge:      {Trials: 4, PassRate: 1, AvgScore: 1},
		},
		ToolUsage: map[string]int{"search": 1, "fetch": 1},
		PerQuery: []report.QueryResult{
			{Query: 0, Trials: 2, Passes: 2, PassRate: 1, AvgScore: 1},
			{Query: 1, Trials: 2, Passes: 2, PassRate: 1, AvgScore: 1},
		},
		FailingQueries: []int{},
	}
	require.Equal(t, []report.Version{wantBase, wantCand}, rep.Versions)
	require.Equal(t, 2, rep.Queries)

	require.Len(t, rep.Comparisons, 1)
	c := rep.Comparisons[0]
	need := 17 // (z(1−0.025/2)·√0.5 + z(0.8)·√0.25)² / 0.5² = 16.09, at Alpha/2 (two tests)
	require.Equal(t, report.Comparison{
		Version: 2, PairedQueries: 2,
		PassRateDiff: 0.5, AvgScoreDiff: 0.53125, WeightedScoreDiff: wantCand.WeightedScore - wantBase.WeightedScore,
		ErrorRateDiff: -0.25, AvgDurationChange: -0.6, TokensPerTrialChange: -0.6,
		// Query 0 passes either way; query 1 goes 0/2 → 2/2.
		PassTest: report.PassTest{Method: "exact sign test on per-query pass fractions", Better: 1, Worse: 0, Ties: 1, P: 1, PHolm: 1},
		// Score gains 0.1875 and 0.875: V = 1 + 2, exact p = 2·(1/4).
		ScoreTest:        report.ScoreTest{Method: "Wilcoxon signed-rank test on per-query mean scores", N: 2, V: 3, Exact: true, P: 0.5, PHolm: 1},
		QueriesNeeded:    &need,
		ImprovedQueries:  []int{1},
		RegressedQueries: []int{},
	}, c)

	r := rep.Recommendation
	require.Equal(t, 2, r.Version)
	// The gap band alone would say HIGH (+50 points); two queries
	// cannot tell, so LOW.
	require.Equal(t, report.Low, r.Confidence)
	require.Equal(t, &need, r.QueriesNeeded)
	require.Equal(t, []string{
		"pass rate 50.0% → 100.0% (+50.0 points; sign test p = 1.0000, Holm 1.0000)",
		"average score 0.469 → 1.000 (+0.531; Wilcoxon p = 0.5000, Holm 1.0000)",
		"average duration 250 ms → 100 ms (-60.0%)",
		"tokens per trial 25 → 10 (-60.0%)",
		"error rate 25.0% → 0.0% (-25.0 points)",
	}, r.Improvements)
	require.Equal(t, []string{
		"the sample cannot tell: detecting a 50.0-point pass-rate difference (version 2 against the baseline) at 80% power needs about 17 queries; this experiment paired 2",
		"version 1 errored in 25.0% of its trials",
		"1 of 8 trials were not judged by the LLM judge (budget exhausted); their judge scores are placeholders",
	}, r.Warnings)
	require.Contains(t, r.Reason, "version 2 has the best weighted score (1.000 against the baseline's 0.487)")
}

func TestBuildRecommendation(t *testing.T) {
	for _, tc := range []struct {
		name          string
		in            report.Input
		wantVersion   int
		wantConf      report.Confidence
		wantNeed      int // 0: null
		wantReason    string
		wantWarning   string // one of the warnings contains it
		wantPassTest  string
		wantSignif    bool
		wantSigWorse  bool
		wantHolmBelow float64 // the pass test's Holm p is below it (0: not checked)
	}{
		{
			// 40 queries, one trial each: 30 discordant queries all in the
			// candidate's favour: exact McNemar p = 2·2⁻³⁰. Queries needed
			// at Alpha/2: (2.2414·√0.75 + 0.8416·√0.1875)² / 0.75² = 9.45.
			name: "clear improvement: HIGH", in: oneShot(40, 0, 30),
			wantVersion: 2, wantConf: report.High, wantNeed: 10, wantReason: "significantly better",
			wantPassTest: "exact McNemar test (sign test on discordant queries)", wantSignif: true, wantHolmBelow: 1e-8,
		},
		{
			// +8 points, 8 discordant queries all one way: p = 2/256,
			// significant after Holm, but the gap band for 5–10 points
			// caps it at MEDIUM. (80 % power would take
			// (2.2414·√0.08 + 0.8416·√0.0736)² / 0.08² = 116.2 queries:
			// this sample was lucky, not large.)
			name: "significant but under 10 points: MEDIUM", in: oneShot(100, 50, 58),
			wantVersion: 2, wantConf: report.Medium, wantNeed: 117, wantReason: "significantly better",
			wantPassTest: "exact McNemar test (sign test on discordant queries)", wantSignif: true, wantHolmBelow: 0.05,
		},
		{
			// +10 points from one query of ten: the gap band says MEDIUM; the
			// sample needs (2.2414·√0.1 + 0.8416·√0.09)²/0.01 = 92.4 queries.
			name: "too few queries: LOW", in: oneShot(10, 4, 5),
			wantVersion: 2, wantConf: report.Low, wantNeed: 93, wantReason: "not significant",
			wantWarning:  "the sample cannot tell: detecting a 10.0-point pass-rate difference (version 2 against the baseline) at 80% power needs about 93 queries; this experiment paired 10",
			wantPassTest: "exact McNemar test (sign test on discordant queries)",
		},
		{
			name: "candidate worse by noise: keep the baseline, LOW", in: oneShot(10, 5, 4),
			wantVersion: 1, wantConf: report.Low, wantNeed: 93, wantReason: "no candidate beats the baseline's weighted score (0.500; the best candidate, version 2, has 0.400); keep the baseline",
			wantWarning:  "the sample cannot tell",
			wantPassTest: "exact McNemar test (sign test on discordant queries)",
		},
		{
			name: "candidate clearly worse: keep the baseline, HIGH", in: oneShot(40, 30, 0),
			wantVersion: 1, wantConf: report.High, wantNeed: 10, wantReason: "keep the baseline",
			wantWarning:  "version 2 is significantly worse than the baseline: pass rate -75.0 points",
			wantPassTest: "exact McNemar test (sign test on discordant queries)", wantSigWorse: true, wantHolmBelow: 1e-8,
		},
		{
			name: "identical results: keep the baseline, nothing to tell", in: oneShot(10, 5, 5),
			wantVersion: 1, wantConf: report.Low, wantReason: "keep the baseline",
			wantWarning:  "the sample cannot tell: version 2 and the baseline have the same per-query pass rates on average over 10 queries",
			wantPassTest: "exact McNemar test (sign test on discordant queries)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := build(t, tc.in)
			r := rep.Recommendation
			require.Equal(t, tc.wantVersion, r.Version)
			require.Equal(t, tc.wantConf, r.Confidence)
			if tc.wantNeed == 0 {
				require.Nil(t, r.QueriesNeeded)
			} else {
				require.NotNil(t, r.QueriesNeeded)
				require.Equal(t, tc.wantNeed, *r.QueriesNeeded)
			}
			require.Contains(t, r.Reason, tc.wantReason)
			if tc.wantWarning != "" {
				require.True(t, containsPrefix(r.Warnings, tc.wantWarning), "warnings %q lack %q", r.Warnings, tc.wantWarning)
			}
			c := rep.Comparisons[0]
			require.Equal(t, tc.wantPassTest, c.PassTest.Method)
			require.Equal(t, tc.wantSignif, c.Significant)
			require.Equal(t, tc.wantSigWorse, c.SignificantlyWorse)
			if tc.wantHolmBelow > 0 {
				require.Less(t, c.PassTest.PHolm, tc.wantHolmBelow)
			}
		})
	}
}

func containsPrefix(ss []string, prefix string) bool {
	for _, s := range ss {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// A query the recommended version always fails is named, even when its
// average is far better (promptfoo#5847: one always-failing test must not
// hide in the average).
func TestFailingQueryDoesNotHide(t *testing.T) {
	in := report.Input{Baseline: 1, Versions: []int{1, 2}, Queries: 20}
	for q := range 20 {
		for r := range 3 {
			basePass := q == 7 || r > 0 // 2/3 on most queries, 3/3 on query 7
			candPass := q != 7          // 3/3 except query 7: 0/3
			in.Trials = append(in.Trials, trial(1, q, r, basePass, b2f(basePass)), trial(2, q, r, candPass, b2f(candPass)))
		}
	}
	rep := build(t, in)
	r := rep.Recommendation
	require.Equal(t, 2, r.Version)
	require.Equal(t, []int{7}, rep.Versions[1].FailingQueries)
	require.Equal(t, []int{7}, rep.Comparisons[0].RegressedQueries)
	require.Contains(t, r.Warnings, "passes less often than the baseline on 1 of 20 queries: 7 (3/3 → 0/3)")
	require.Contains(t, r.Warnings, "version 2 fails every trial of 1 of 20 queries: 7")
	require.Equal(t, "exact sign test on per-query pass fractions", rep.Comparisons[0].PassTest.Method)
}

// Queries a version has no trials for are left out of its paired tests,
// and the report says so.
func TestMissingTrialsAreNotPaired(t *testing.T) {
	in := oneShot(10, 4, 8)
	var kept []report.Trial
	for _, tr := range in.Trials {
		if tr.Version == 2 && tr.Query >= 8 {
			continue // the candidate never ran queries 8 and 9
		}
		kept = append(kept, tr)
	}
	in.Trials = kept
	rep := build(t, in)
	require.Equal(t, 8, rep.Comparisons[0].PairedQueries)
	require.Equal(t, 4, rep.Comparisons[0].PassTest.Better)
	require.Equal(t, 4, rep.Comparisons[0].PassTest.Ties)
	require.Contains(t, rep.Recommendation.Warnings, "2 queries lack trials of version 2 or of the baseline and are left out of its paired tests")
}

func TestBuildIsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	in := report.Input{Baseline: 3, Versions: []int{5, 3, 4}, Queries: 30}
	for q := range 30 {
		for _, v := range in.Versions {
			for r := range 3 {
				in.Trials = append(in.Trials, report.Trial{
					Version: v, Query: q, Repetition: r, Pass: rng.Float64() < 0.6, Score: rng.Float64(),
					DurationMs: 1000 * rng.Float64(), Tokens: rng.IntN(500), Error: rng.Float64() < 0.05,
					Tools: map[string]int{"search": rng.IntN(3), "fetch": rng.IntN(2)},
				})
			}
		}
	}
	want, err := json.Marshal(build(t, in))
	require.NoError(t, err)
	for range 5 {
		rng.Shuffle(len(in.Trials), func(i, j int) { in.Trials[i], in.Trials[j] = in.Trials[j], in.Trials[i] })
		got, err := json.Marshal(build(t, in))
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got))
		require.Equal(t, string(want), string(got), "byte for byte")
	}
	rep := build(t, in)
	require.Equal(t, []int{3, 5, 4}, []int{rep.Versions[0].Version, rep.Versions[1].Version, rep.Versions[2].Version}, "baseline first, then the candidates as listed")
	require.Equal(t, []int{5, 4}, []int{rep.Comparisons[0].Version, rep.Comparisons[1].Version})
}

// Extensions lists the report's fields that experiment.completed.v1 does not
// have yet; without them the report is valid against today's schema.
// extensions are the fields the report adds to the plain aggregates: experiment
// completed's schema describes them (and the schema's nested objects admit
// nothing else), so a report is checked whole.
var extensions = struct{ report, version, recommendation []string }{
	report:         []string{"queries", "comparisons"},
	version:        []string{"pass_rate_ci", "weighted_score", "per_query", "failing_queries"}, // and tier_detail, tool_usage when trials have them
	recommendation: []string{"reason", "queries_needed"},
}

func TestReportMatchesSchema(t *testing.T) {
	reg, err := schemas.Load()
	require.NoError(t, err)
	withTools := oneShot(10, 5, 5)
	for i := range withTools.Trials {
		withTools.Trials[i].Tools = map[string]int{"search": 1}
		withTools.Trials[i].Tiers = map[report.Tier]report.TierVerdict{report.TierStructural: {Pass: true, Score: 1}}
	}
	for name, in := range map[string]report.Input{
		"improvement":     oneShot(40, 0, 30),
		"baseline":        oneShot(10, 5, 5),
		"no trials":       {Baseline: 1, Versions: []int{1, 2}, Queries: 3},
		"tools and tiers": withTools,
	} {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(build(t, in))
			require.NoError(t, err)
			var rep map[string]any
			require.NoError(t, json.Unmarshal(b, &rep))
			for _, k := range extensions.report {
				require.Contains(t, rep, k)
			}
			for _, v := range rep["versions"].([]any) {
				for _, k := range extensions.version {
					require.Contains(t, v, k)
				}
			}
			for _, k := range extensions.recommendation {
				require.Contains(t, rep["recommendation"], k)
			}
			data, err := json.Marshal(map[string]any{"experiment_id": "exp-1", "baseline_version": 1, "report": rep})
			require.NoError(t, err)
			require.NoError(t, reg.Validate("agentq.experiment.completed.v1", data))
		})
	}
}

func TestBuildRejectsImpossibleInput(t *testing.T) {
	ok := func() report.Input { return oneShot(2, 1, 1) }
	for _, tc := range []struct {
		name   string
		mutate func(*report.Input)
		want   string
	}{
		{"no queries", func(in *report.Input) { in.Queries = 0 }, "0 queries"},
		{"baseline not listed", func(in *report.Input) { in.Baseline = 9 }, "baseline 9 is not among the versions"},
		{"version listed twice", func(in *report.Input) { in.Versions = []int{1, 2, 2} }, "version 2 listed twice"},
		{"version 0", func(in *report.Input) { in.Versions = append(in.Versions, 0) }, "version 0, want 1 or more"},
		{"unknown version", func(in *report.Input) { in.Trials[0].Version = 7 }, "trial 0 (version 7, query 0, repetition 0): unknown version"},
		{"query out of range", func(in *report.Input) { in.Trials[1].Query = 2 }, "query out of range [0, 2)"},
		{"duplicate trial", func(in *report.Input) { in.Trials[2] = in.Trials[0] }, "duplicate trial"},
		{"score above 1", func(in *report.Input) { in.Trials[0].Score = 1.5 }, "score 1.5 outside [0, 1]"},
		{"negative duration", func(in *report.Input) { in.Trials[0].DurationMs = -1 }, "duration -1 ms"},
		{"negative tokens", func(in *report.Input) { in.Trials[0].Tokens = -3 }, "-3 tokens"},
		{"unknown tier", func(in *report.Input) {
			in.Trials[0].Tiers = map[report.Tier]report.TierVerdict{"vibes": {Pass: true, Score: 1}}
		}, `unknown tier "vibes"`},
		{"negative judge-skipped count", func(in *report.Input) { in.JudgeSkipped = -1 }, "judge skipped -1 trials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := ok()
			tc.mutate(&in)
			_, err := report.Build(in)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
