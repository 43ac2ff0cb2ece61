package report

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// experiments is the number of simulated experiments per scenario.
const experiments = 1000

// simulate draws one experiment under the model of ANCHORS b.4: each query
// has its own pass probability p, uniform over the queries; the baseline and
// every candidate but the first pass with p, the first candidate with
// p + shift. With shift > 0, p is uniform on [0, 1 − shift], so every query
// gains exactly shift (a planted improvement of 100·shift points). A trial's
// score is uniform on [0.5, 1] when it passes and on [0, 0.5) when it fails,
// so scores carry the same signal as passes, plus noise.
func simulate(rng *rand.Rand, queries, reps, candidates int, shift float64) Input {
	in := Input{Baseline: 1, Queries: queries}
	for v := 1; v <= candidates+1; v++ {
		in.Versions = append(in.Versions, v)
	}
	for q := range queries {
		p := rng.Float64() * (1 - shift)
		for _, v := range in.Versions {
			pv := p
			if v == 2 {
				pv += shift
			}
			for r := range reps {
				in.Trials = append(in.Trials, simTrial(rng, v, q, r, pv))
			}
		}
	}
	return in
}

func simTrial(rng *rand.Rand, version, query, rep int, p float64) Trial {
	pass := rng.Float64() < p
	t := Trial{
		Version: version, Query: query, Repetition: rep,
		Pass:       pass,
		Score:      rng.Float64() / 2,
		DurationMs: 800 + 400*rng.Float64(),
		Tokens:     300 + rng.IntN(200),
		Tiers:      map[Tier]TierVerdict{TierStructural: {Pass: true, Score: 1}},
		Tools:      map[string]int{"search": rng.IntN(3)},
	}
	switch {
	case pass:
		t.Score += 0.5
		t.Tiers[TierRules] = TierVerdict{Pass: true, Score: 1}
		t.Tiers[TierJudge] = TierVerdict{Pass: true, Score: t.Score}
	case rng.IntN(2) == 0: // failed the rules; the judge never ran
		t.Tiers[TierRules] = TierVerdict{Pass: false, Score: 0}
	default:
		t.Tiers[TierRules] = TierVerdict{Pass: true, Score: 1}
		t.Tiers[TierJudge] = TierVerdict{Pass: false, Score: t.Score}
	}
	return t
}

// outcome tallies what the reports of one scenario said.
type outcome struct {
	significant           int // any Holm-adjusted p < Alpha, either way
	high, medium, low     int
	highUnsupported       int // HIGH although no comparison is significant
	recommendedCandidate2 int
	naiveFalseWinner      int // a candidate's pass rate ahead by ≥ 5 points
}

func run(t *testing.T, seed uint64, queries, reps, candidates int, shift float64) outcome {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var o outcome
	for range experiments {
		rep, err := Build(simulate(rng, queries, reps, candidates, shift))
		require.NoError(t, err)
		significant := false
		for _, c := range rep.Comparisons {
			significant = significant || c.PassTest.PHolm < Alpha || c.ScoreTest.PHolm < Alpha
		}
		if significant {
			o.significant++
		}
		for _, c := range rep.Comparisons {
			if c.PassRateDiff >= 0.05 {
				o.naiveFalseWinner++
				break
			}
		}
		switch rep.Recommendation.Confidence {
		case High:
			o.high++
			if !significant {
				o.highUnsupported++
			}
		case Medium:
			o.medium++
		default:
			o.low++
		}
		if rep.Recommendation.Version == 2 {
			o.recommendedCandidate2++
		}
	}
	return o
}

func rate(n int) float64 { return float64(n) / experiments }

// Identical versions: the report may call a difference significant, or say
// HIGH, in at most 5 % of experiments (ANCHORS b.5: A/A calibration).
func TestCalibrationIdenticalVersions(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		queries, reps, candidate int
	}{
		{"20 queries x 3 repetitions", 20, 3, 1},
		{"100 queries x 5 repetitions", 100, 5, 1},
		// Holm over the family: three identical candidates do not triple
		// the false claims.
		{"20 queries x 3 repetitions, 3 identical candidates", 20, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := run(t, uint64(tc.queries*1000+tc.reps*10+tc.candidate), tc.queries, tc.reps, tc.candidate, 0)
			t.Logf("%d experiments: significant %.3f, HIGH %.3f, MEDIUM %.3f, LOW %.3f; a naive 'pass rate ahead by >= 5 points' winner %.3f",
				experiments, rate(o.significant), rate(o.high), rate(o.medium), rate(o.low), rate(o.naiveFalseWinner))
			require.LessOrEqual(t, rate(o.significant), 0.05, "false 'significant'")
			require.LessOrEqual(t, rate(o.high), 0.05, "false HIGH")
			require.Zero(t, o.highUnsupported, "HIGH without a significant test")
		})
	}
}

// A planted +15-point improvement at 100 queries is called HIGH, for the
// right version, in at least 80 % of experiments (ANCHORS b.5: power).
func TestPowerPlantedImprovement(t *testing.T) {
	for _, tc := range []struct {
		name          string
		queries, reps int
		minHigh       float64 // 0: measured and logged only
	}{
		{"100 queries x 5 repetitions", 100, 5, 0.80},
		{"100 queries x 3 repetitions", 100, 3, 0.80},
		{"20 queries x 3 repetitions (seed scale, logged only)", 20, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := run(t, uint64(7000+tc.queries*10+tc.reps), tc.queries, tc.reps, 1, 0.15)
			t.Logf("%d experiments, +15 points planted: HIGH %.3f, MEDIUM %.3f, LOW %.3f; significant %.3f; recommended the improved version %.3f",
				experiments, rate(o.high), rate(o.medium), rate(o.low), rate(o.significant), rate(o.recommendedCandidate2))
			require.Zero(t, o.highUnsupported, "HIGH without a significant test")
			if tc.minHigh > 0 {
				require.GreaterOrEqual(t, rate(o.high), tc.minHigh)
			}
		})
	}
}

// The pass-rate interval is honest about repeated queries: over identical
// experiments at seed scale its 95 % interval covers the true pass rate
// (0.5, the mean of the uniform per-query probabilities) about 95 % of the
// time, where a Wilson interval over all trials as if independent would not.
func TestPassRateIntervalCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 4242))
	var covered, naiveCovered int
	for range experiments {
		in := simulate(rng, 20, 3, 0, 0)
		rep, err := Build(in)
		require.NoError(t, err)
		v := rep.Versions[0]
		if v.PassRateCI.Low <= 0.5 && 0.5 <= v.PassRateCI.High {
			covered++
		}
		naive := wilson(v.PassRate, float64(v.Trials), z95)
		if naive.Low <= 0.5 && 0.5 <= naive.High {
			naiveCovered++
		}
	}
	t.Logf("coverage of the 95%% interval at 20 x 3: %.3f (trials as independent: %.3f)", rate(covered), rate(naiveCovered))
	require.GreaterOrEqual(t, rate(covered), 0.93)
}
