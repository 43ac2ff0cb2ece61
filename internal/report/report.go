// Package report turns the trials of a prompt experiment into the report
// that experiment.completed carries: per-version aggregates, per-query pass
// rates, paired comparisons of each candidate with the baseline, and a
// recommendation whose confidence is honest about noise.
//
// The aggregates are the usual ones of a prompt experiment (pass rate,
// average score, duration, tokens, error rate, per-tier breakdown, tool
// usage, weighted score 0.6·pass rate + 0.4·average score). On top of them:
//
//   - Each pass rate has a Wilson 95 % interval over the effective number of
//     trials (repetitions of one query are correlated; see effectiveN).
//   - Each candidate is paired with the baseline by query, after reducing the
//     repetitions of each query to its pass fraction and its mean score. The
//     pass fractions are compared by the exact sign test (the exact McNemar
//     test when there is one trial per query), the mean scores by the
//     Wilcoxon signed-rank test.
//   - Holm's correction runs over the whole family: both tests of every
//     candidate (2 × candidates hypotheses). A candidate is significantly
//     better when either of its adjusted p-values is below Alpha in its
//     favour and neither is below Alpha against it. Taking the better of two
//     tests would let the false-positive rate creep past Alpha; putting both
//     in the Holm family keeps "significant" anywhere in the report at or
//     below Alpha whatever the dependence between the tests.
//   - Confidence is the lower of two bands. A band on the pass-rate gap
//     alone (HIGH over 10 points, MEDIUM 5 to 10, LOW under 5) and a
//     statistical band: HIGH when significant, LOW when the sample cannot
//     tell (the queries needed to detect the observed pass-rate difference at
//     80 % power exceed the queries paired), MEDIUM otherwise.
//
// Calibration is tested, not claimed (calibration_test.go): two identical
// versions are called significant or HIGH in at most 5 % of 1,000 simulated
// experiments at 20 × 3 and 100 × 5, and a planted +15-point improvement at
// 100 queries is called HIGH in at least 80 %.
package report

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Weights of the weighted score.
const (
	PassRateWeight = 0.6
	ScoreWeight    = 0.4
)

// Thresholds of the gap band (gapBand), in pass-rate points.
const (
	highBandPoints   = 10
	mediumBandPoints = 5
)

// highErrorRate is the error rate above which a version gets a warning.
const highErrorRate = 0.10

// Smallest changes worth reporting as an improvement or a regression;
// anything smaller is noise nobody should act on.
const (
	minPassPoints    = 1    // pass rate and error rate, in points
	minScoreChange   = 0.01 // average score
	minRelativeSpeed = 0.05 // average duration and tokens per trial, relative
)

// maxListed bounds the queries named in one warning.
const maxListed = 10

// Tier names an evaluation tier.
type Tier string

// The evaluation tiers, in the order they run (fail-fast).
const (
	TierStructural Tier = "structural"
	TierRules      Tier = "rules"
	TierJudge      Tier = "llm_judge"
)

var tiers = []Tier{TierStructural, TierRules, TierJudge}

// TierVerdict is one tier's judgement of a trial.
type TierVerdict struct {
	Pass  bool
	Score float64 // 0 (worst) to 1 (best)
}

// Trial is one run of one version on one test query.
type Trial struct {
	Version    int
	Query      int // index of the test query, 0 ≤ Query < Input.Queries
	Repetition int
	Pass       bool    // every tier that ran passed
	Score      float64 // 0 (worst) to 1 (best)
	DurationMs float64
	Tokens     int
	Error      bool // the run failed (the agent or the model errored)
	// Tiers holds the tiers that ran; a tier skipped by fail-fast is absent.
	Tiers map[Tier]TierVerdict
	// Tools counts the calls of each tool during the trial.
	Tools map[string]int
}

// Input is everything a report is built from.
type Input struct {
	Baseline int
	// Versions lists every version of the experiment, the baseline among
	// them; the others are the candidates, reported in this order.
	Versions []int
	Queries  int // number of test queries
	Trials   []Trial
	// JudgeSkipped counts trials whose LLM-judge tier did not really judge
	// (its token budget was exhausted and it returned a placeholder).
	JudgeSkipped int
}

// Confidence is how sure the recommendation is.
type Confidence string

// Confidence levels, from least to most sure.
const (
	Low    Confidence = "LOW"
	Medium Confidence = "MEDIUM"
	High   Confidence = "HIGH"
)

func (c Confidence) rank() int {
	switch c {
	case High:
		return 2
	case Medium:
		return 1
	}
	return 0
}

func lower(a, b Confidence) Confidence {
	if a.rank() <= b.rank() {
		return a
	}
	return b
}

// Report is the experiment report. Versions and Recommendation are the
// fields of experiment.completed.v1; the others are extensions.
type Report struct {
	Versions       []Version      `json:"versions"`
	Recommendation Recommendation `json:"recommendation"`
	// Queries is the number of test queries.
	Queries int `json:"queries"`
	// Comparisons holds one paired comparison per candidate, in the order
	// of Input.Versions.
	Comparisons []Comparison `json:"comparisons"`
}

// Version holds the aggregates of one version's trials.
type Version struct {
	Version       int              `json:"version"`
	Baseline      bool             `json:"baseline"`
	Trials        int              `json:"trials"`
	PassRate      float64          `json:"pass_rate"`
	AvgScore      float64          `json:"avg_score"`
	AvgDurationMs float64          `json:"avg_duration_ms"`
	TotalTokens   int              `json:"total_tokens"`
	ErrorRate     float64          `json:"error_rate"`
	TierBreakdown map[Tier]float64 `json:"tier_breakdown,omitempty"`

	// PassRateCI is the Wilson 95 % interval of PassRate.
	PassRateCI Interval `json:"pass_rate_ci"`
	// WeightedScore is 0.6·PassRate + 0.4·AvgScore.
	WeightedScore float64 `json:"weighted_score"`
	// TierDetail says, per tier that ran, how many trials reached it, and
	// its pass rate and average score over those trials. A tier runs only
	// when the ones before it passed, so its pass rate is conditional.
	TierDetail map[Tier]TierStats `json:"tier_detail,omitempty"`
	// ToolUsage counts the tool calls over all trials.
	ToolUsage map[string]int `json:"tool_usage,omitempty"`
	// PerQuery has one entry per test query, in query order.
	PerQuery []QueryResult `json:"per_query"`
	// FailingQueries lists the queries failed by every trial of the
	// version (a query that always fails must not hide in an average).
	FailingQueries []int `json:"failing_queries"`
}

// TierStats are one tier's results over the trials that reached it.
type TierStats struct {
	Trials   int     `json:"trials"`
	PassRate float64 `json:"pass_rate"`
	AvgScore float64 `json:"avg_score"`
}

// QueryResult aggregates one version's repetitions of one query.
type QueryResult struct {
	Query    int     `json:"query"`
	Trials   int     `json:"trials"`
	Passes   int     `json:"passes"`
	PassRate float64 `json:"pass_rate"`
	AvgScore float64 `json:"avg_score"`
}

// Comparison pairs a candidate with the baseline, query by query.
type Comparison struct {
	Version int `json:"version"`
	// PairedQueries counts the queries both versions have trials for; the
	// paired tests use only those.
	PairedQueries int `json:"paired_queries"`

	// Differences candidate − baseline over all trials.
	PassRateDiff      float64 `json:"pass_rate_diff"`
	AvgScoreDiff      float64 `json:"avg_score_diff"`
	WeightedScoreDiff float64 `json:"weighted_score_diff"`
	ErrorRateDiff     float64 `json:"error_rate_diff"`
	// Relative changes (candidate / baseline − 1); 0 when the baseline's
	// value is 0.
	AvgDurationChange    float64 `json:"avg_duration_change"`
	TokensPerTrialChange float64 `json:"tokens_per_trial_change"`

	PassTest  PassTest  `json:"pass_test"`
	ScoreTest ScoreTest `json:"score_test"`

	// Significant: better than the baseline at family-wise level Alpha
	// (Holm over both tests of every candidate), and not significantly
	// worse on the other test.
	Significant bool `json:"significant"`
	// SignificantlyWorse is the same claim in the baseline's favour.
	SignificantlyWorse bool `json:"significantly_worse"`
	// QueriesNeeded estimates the paired queries needed to detect the
	// observed per-query pass-rate difference at 80 % power at the first
	// Holm step's level (Alpha / family size); null when no difference was
	// observed.
	QueriesNeeded *int `json:"queries_needed"`

	// ImprovedQueries and RegressedQueries list the paired queries whose
	// pass fraction is higher, or lower, for the candidate.
	ImprovedQueries  []int `json:"improved_queries"`
	RegressedQueries []int `json:"regressed_queries"`
}

// PassTest is the exact sign test on per-query pass fractions.
type PassTest struct {
	Method string  `json:"method"`
	Better int     `json:"better"` // queries where the candidate's pass fraction is higher
	Worse  int     `json:"worse"`
	Ties   int     `json:"ties"`
	P      float64 `json:"p"`
	PHolm  float64 `json:"p_holm"`
}

// ScoreTest is the Wilcoxon signed-rank test on per-query mean scores.
type ScoreTest struct {
	Method string  `json:"method"`
	N      int     `json:"n"`     // non-zero differences
	Zeros  int     `json:"zeros"` // zero differences, dropped
	V      float64 `json:"v"`     // sum of the ranks of the candidate's gains
	Exact  bool    `json:"exact"`
	Z      float64 `json:"z,omitempty"`
	P      float64 `json:"p"`
	PHolm  float64 `json:"p_holm"`
}

// Recommendation names the version to activate and how sure the report is.
// Activation itself stays a human decision.
type Recommendation struct {
	Version      int        `json:"version"`
	Confidence   Confidence `json:"confidence"`
	Improvements []string   `json:"improvements"`
	Warnings     []string   `json:"warnings"`
	// Reason says in one sentence why this version and this confidence.
	Reason string `json:"reason"`
	// QueriesNeeded repeats the comparison's estimate for the recommended
	// candidate (or, when the baseline is kept, for the best candidate).
	QueriesNeeded *int `json:"queries_needed"`
}

// Method names, as they appear in the report.
const (
	methodMcNemar  = "exact McNemar test (sign test on discordant queries)"
	methodSign     = "exact sign test on per-query pass fractions"
	methodWilcoxon = "Wilcoxon signed-rank test on per-query mean scores"
)

// acc accumulates one version's trials.
type acc struct {
	trials, passes, errors int
	score, duration        float64
	tokens                 int
	tierRan, tierPass      map[Tier]int
	tierScore              map[Tier]float64
	tools                  map[string]int
	qTrials, qPasses       []int
	qScore                 []float64
	maxReps                int
}

// Build computes the report. It is pure and deterministic: the same input,
// in any trial order, gives the same report. It fails only on input that
// cannot come from a valid experiment.
func Build(in Input) (Report, error) {
	if err := validate(in); err != nil {
		return Report{}, err
	}
	// Baseline first, then the candidates in the order given.
	order := []int{in.Baseline}
	for _, v := range in.Versions {
		if v != in.Baseline {
			order = append(order, v)
		}
	}
	index := make(map[int]int, len(order))
	accs := make([]*acc, len(order))
	for i, v := range order {
		index[v] = i
		accs[i] = &acc{
			tierRan: map[Tier]int{}, tierPass: map[Tier]int{}, tierScore: map[Tier]float64{},
			tools:   map[string]int{},
			qTrials: make([]int, in.Queries), qPasses: make([]int, in.Queries), qScore: make([]float64, in.Queries),
		}
	}
	// Sums in a fixed order, so the report does not depend on the order
	// trials were stored in, down to the last bit.
	trials := slices.Clone(in.Trials)
	slices.SortFunc(trials, func(a, b Trial) int {
		return cmp.Or(cmp.Compare(a.Version, b.Version), cmp.Compare(a.Query, b.Query), cmp.Compare(a.Repetition, b.Repetition))
	})
	for _, t := range trials {
		a := accs[index[t.Version]]
		a.trials++
		if t.Pass {
			a.passes++
			a.qPasses[t.Query]++
		}
		if t.Error {
			a.errors++
		}
		a.score += t.Score
		a.duration += t.DurationMs
		a.tokens += t.Tokens
		a.qTrials[t.Query]++
		a.qScore[t.Query] += t.Score
		a.maxReps = max(a.maxReps, a.qTrials[t.Query])
		for _, tier := range tiers {
			if v, ok := t.Tiers[tier]; ok {
				a.tierRan[tier]++
				a.tierScore[tier] += v.Score
				if v.Pass {
					a.tierPass[tier]++
				}
			}
		}
		for name, n := range t.Tools {
			a.tools[name] += n
		}
	}

	rep := Report{Queries: in.Queries}
	for i, v := range order {
		rep.Versions = append(rep.Versions, summarize(v, i == 0, accs[i]))
	}
	rep.Comparisons = compare(rep.Versions, accs)
	rep.Recommendation = recommend(in, rep.Versions, rep.Comparisons, accs)
	return rep, nil
}

func validate(in Input) error {
	if in.Queries < 1 {
		return fmt.Errorf("report: %d queries, want at least 1", in.Queries)
	}
	if in.JudgeSkipped < 0 {
		return fmt.Errorf("report: judge skipped %d trials, want 0 or more", in.JudgeSkipped)
	}
	known := map[int]bool{}
	for _, v := range in.Versions {
		if v < 1 {
			return fmt.Errorf("report: version %d, want 1 or more", v)
		}
		if known[v] {
			return fmt.Errorf("report: version %d listed twice", v)
		}
		known[v] = true
	}
	if !known[in.Baseline] {
		return fmt.Errorf("report: baseline %d is not among the versions %v", in.Baseline, in.Versions)
	}
	type key struct{ v, q, r int }
	seen := make(map[key]bool, len(in.Trials))
	var errs []error
	for i, t := range in.Trials {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("report: trial %d (version %d, query %d, repetition %d): %s",
				i, t.Version, t.Query, t.Repetition, fmt.Sprintf(format, args...)))
		}
		switch {
		case !known[t.Version]:
			bad("unknown version")
			continue
		case t.Query < 0 || t.Query >= in.Queries:
			bad("query out of range [0, %d)", in.Queries)
			continue
		}
		k := key{t.Version, t.Query, t.Repetition}
		if seen[k] {
			bad("duplicate trial")
		}
		seen[k] = true
		if !unit(t.Score) {
			bad("score %v outside [0, 1]", t.Score)
		}
		if math.IsNaN(t.DurationMs) || math.IsInf(t.DurationMs, 0) || t.DurationMs < 0 {
			bad("duration %v ms", t.DurationMs)
		}
		if t.Tokens < 0 {
			bad("%d tokens", t.Tokens)
		}
		for tier, v := range t.Tiers {
			if !slices.Contains(tiers, tier) {
				bad("unknown tier %q", tier)
			} else if !unit(v.Score) {
				bad("tier %s score %v outside [0, 1]", tier, v.Score)
			}
		}
		for name, n := range t.Tools {
			if n < 0 {
				bad("tool %q used %d times", name, n)
			}
		}
	}
	return errors.Join(errs...)
}

func unit(x float64) bool { return x >= 0 && x <= 1 } // false for NaN

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func summarize(version int, baseline bool, a *acc) Version {
	n := float64(a.trials)
	v := Version{
		Version:        version,
		Baseline:       baseline,
		Trials:         a.trials,
		PassRate:       ratio(float64(a.passes), n),
		AvgScore:       ratio(a.score, n),
		AvgDurationMs:  ratio(a.duration, n),
		TotalTokens:    a.tokens,
		ErrorRate:      ratio(float64(a.errors), n),
		PerQuery:       make([]QueryResult, len(a.qTrials)),
		FailingQueries: []int{},
	}
	v.WeightedScore = PassRateWeight*v.PassRate + ScoreWeight*v.AvgScore
	v.PassRateCI = wilson(v.PassRate, effectiveN(a.qPasses, a.qTrials), z95)
	for _, tier := range tiers {
		ran := a.tierRan[tier]
		if ran == 0 {
			continue
		}
		if v.TierBreakdown == nil {
			v.TierBreakdown = map[Tier]float64{}
			v.TierDetail = map[Tier]TierStats{}
		}
		rate := float64(a.tierPass[tier]) / float64(ran)
		v.TierBreakdown[tier] = rate
		v.TierDetail[tier] = TierStats{Trials: ran, PassRate: rate, AvgScore: a.tierScore[tier] / float64(ran)}
	}
	if len(a.tools) > 0 {
		v.ToolUsage = a.tools
	}
	for q := range a.qTrials {
		m := float64(a.qTrials[q])
		v.PerQuery[q] = QueryResult{
			Query:    q,
			Trials:   a.qTrials[q],
			Passes:   a.qPasses[q],
			PassRate: ratio(float64(a.qPasses[q]), m),
			AvgScore: ratio(a.qScore[q], m),
		}
		if a.qTrials[q] > 0 && a.qPasses[q] == 0 {
			v.FailingQueries = append(v.FailingQueries, q)
		}
	}
	return v
}
