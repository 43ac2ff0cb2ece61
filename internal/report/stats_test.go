package report

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/stat/distuv"
)

// Reference values: published examples where they exist, each checked
// against R 4.2.2 (binom.test, wilcox.test, p.adjust, prop.test), whose
// outputs are quoted to the digits R printed.

func TestSignTestMatchesReferences(t *testing.T) {
	for _, tc := range []struct {
		name        string
		plus, minus int
		want        float64
	}{
		// Fagerland, Lydersen & Laake (2013), BMC Med Res Methodol 13:91,
		// airway hyper-responsiveness example: discordant pairs 1 and 7,
		// exact conditional McNemar p = 0.070; R binom.test(1, 8).
		{"Fagerland 2013 exact McNemar", 7, 1, 0.0703125},
		// Agresti, Categorical Data Analysis (3rd ed.), Table 11.1,
		// presidential approval: discordant 150 and 86; R binom.test(86, 236).
		{"Agresti presidential approval", 86, 150, 3.71593613957143e-05},
		{"R binom.test(2, 12)", 2, 10, 0.03857421875},
		{"R binom.test(40, 60)", 40, 20, 0.0134892937311919},
		{"R binom.test(0, 5): all one way", 0, 5, 0.0625},
		{"balanced: p capped at 1", 3, 3, 1},
		{"no discordant pairs", 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, signTestP(tc.plus, tc.minus), 1e-12*math.Max(1, 1/tc.want)*tc.want+1e-15)
		})
	}
}

func TestSignedRankMatchesReferences(t *testing.T) {
	// Hollander & Wolfe (1973), p. 29f, Hamilton depression scale before
	// (x) and after (y) tranquilizer; the example of R's ?wilcox.test:
	// wilcox.test(x, y, paired = TRUE) gives V = 40, p-value = 0.0390625
	// (exact; the documented one-sided "greater" p is 0.01953).
	x := []float64{1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30}
	y := []float64{0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29}
	hw := make([]float64, len(x))
	for i := range x {
		hw[i] = x[i] - y[i]
	}
	// 60 differences without ties: R set.seed(1); round(rnorm(60, 0.3, 1), 4).
	n60 := []float64{-0.3265, 0.4836, -0.5356, 1.8953, 0.6295, -0.5205, 0.7874, 1.0383, 0.8758, -0.0054, 1.8118, 0.6898, -0.3212, -1.9147, 1.4249, 0.2551, 0.2838, 1.2438, 1.1212, 0.8939, 1.219, 1.0821, 0.3746, -1.6894, 0.9198, 0.2439, 0.1442, -1.1708, -0.1782, 0.7179, 1.6587, 0.1972, 0.6877, 0.2462, -1.0771, -0.115, -0.0943, 0.2407, 1.4, 1.0632, 0.1355, 0.0466, 0.997, 0.8567, -0.3888, -0.4075, 0.6646, 1.0685, 0.1877, 1.1811, 0.6981, -0.312, 0.6411, -0.8294, 1.733, 2.2804, -0.0672, -0.7441, 0.8697, 0.1649}

	for _, tc := range []struct {
		name      string
		d         []float64
		wantV     float64
		wantP     float64
		wantExact bool
		wantZeros int
	}{
		{"Hollander & Wolfe, exact", hw, 40, 0.0390625, true, 0},
		// Ties: R wilcox.test(d) warns and uses the normal approximation with
		// tie correction and continuity correction: V = 63.5, p = 0.05826861.
		{"ties, normal approximation", []float64{1.5, -0.5, 2, 2, -1, 3, 0.5, 2, 1.5, -2, 4, 0.5}, 63.5, 0.0582686100913296, false, 0},
		// Zeros are dropped and the rest is tested exactly: R
		// wilcox.test(d[d != 0]) gives V = 31, p = 0.078125. (R's
		// wilcox.test(d) would switch to the approximation, p = 0.08006.)
		{"zeros dropped, exact on the rest", []float64{0, 0, 0.3, -0.1, 0.7, 0.2, 0.9, -0.4, 0.6, 0.8}, 31, 0.078125, true, 2},
		// n ≥ 50: R uses the normal approximation: V = 1387, p = 0.0005185321.
		{"n = 60, normal approximation", n60, 1387, 0.000518532080378645, false, 0},
		{"all zero", []float64{0, 0, 0}, 0, 1, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := signedRankTest(tc.d)
			require.Equal(t, tc.wantV, got.V)
			require.Equal(t, tc.wantExact, got.Exact)
			require.Equal(t, tc.wantZeros, got.Zeros)
			require.InDelta(t, tc.wantP, got.P, 1e-10*tc.wantP)
		})
	}

	t.Run("differences equal up to rounding are ties", func(t *testing.T) {
		// 0.3 − 0.1 and 0.2 differ in the last bits; they must share a rank.
		got := signedRankTest([]float64{0.3 - 0.1, 0.2, -0.5})
		require.False(t, got.Exact)
		require.Equal(t, 3.0, got.V) // ranks 1.5 + 1.5
	})

	t.Run("null distribution counts", func(t *testing.T) {
		// Σ counts = 2ⁿ; for n = 4 the counts are 1 1 1 2 2 2 2 2 1 1 1.
		require.Equal(t, []float64{1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1}, signedRankCounts(4))
		var sum float64
		for _, c := range signedRankCounts(exactSignedRankMax) {
			sum += c
		}
		require.Equal(t, math.Ldexp(1, exactSignedRankMax), sum)
	})
}

func TestHolmMatchesReferences(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    []float64
		want []float64
	}{
		// The worked example of the Holm–Bonferroni method (Wikipedia,
		// after Holm 1979): p = .01, .04, .03, .005 at α = .05 rejects the
		// first and the fourth; R p.adjust(p, "holm") = .03 .06 .06 .02.
		{"Holm–Bonferroni example", []float64{0.01, 0.04, 0.03, 0.005}, []float64{0.03, 0.06, 0.06, 0.02}},
		{"R p.adjust monotone", []float64{0.01, 0.02, 0.03, 0.04, 0.05}, []float64{0.05, 0.08, 0.09, 0.09, 0.09}},
		{"R p.adjust capped at 1", []float64{0.3, 0.6, 0.001}, []float64{0.6, 0.6, 0.003}},
		{"one test", []float64{0.04}, []float64{0.04}},
		{"none", nil, []float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := holm(tc.p)
			require.Len(t, got, len(tc.want))
			for i := range got {
				require.InDelta(t, tc.want[i], got[i], 1e-12)
			}
		})
	}
}

func TestWilsonMatchesReferences(t *testing.T) {
	// Newcombe (1998), Statistics in Medicine 17:857–872, Table I, method
	// 3 (score interval without continuity correction), 4 decimals; the
	// full digits are R prop.test(x, n, correct = FALSE)$conf.int.
	for _, tc := range []struct {
		x, n        int
		newcombe    [2]float64
		rLow, rHigh float64
	}{
		{81, 263, [2]float64{0.2553, 0.3662}, 0.255288519878274, 0.3662095769828},
		{15, 148, [2]float64{0.0624, 0.1605}, 0.0623863995307363, 0.160487241723308},
		{0, 20, [2]float64{0, 0.1611}, 0, 0.161125158052819},
		{1, 29, [2]float64{0.0061, 0.1718}, 0.00611321429276266, 0.171755218793203},
		{29, 29, [2]float64{0.8830, 1}, 0.883030201500259, 1},
	} {
		got := wilson(float64(tc.x)/float64(tc.n), float64(tc.n), z95)
		require.InDelta(t, tc.newcombe[0], got.Low, 0.00005, "%d/%d", tc.x, tc.n)
		require.InDelta(t, tc.newcombe[1], got.High, 0.00005, "%d/%d", tc.x, tc.n)
		require.InDelta(t, tc.rLow, got.Low, 1e-12, "%d/%d", tc.x, tc.n)
		require.InDelta(t, tc.rHigh, got.High, 1e-12, "%d/%d", tc.x, tc.n)
	}
	require.Equal(t, Interval{Low: 0, High: 1}, wilson(0, 0, z95))
}

func TestEffectiveN(t *testing.T) {
	for _, tc := range []struct {
		name string
		y, m []int
		want float64
	}{
		{"one trial per query: independent", []int{1, 0, 1, 1}, []int{1, 1, 1, 1}, 4},
		{"every query at the same rate: no clustering", []int{1, 1, 1}, []int{2, 2, 2}, 6},
		// Each query all-pass or all-fail: 3 repetitions add nothing, and the
		// cluster-robust variance p(1−p)/(Q−1) leaves Q − 1 trials.
		{"all-or-nothing queries", []int{3, 3, 0, 0}, []int{3, 3, 3, 3}, 3},
		{"no passes: binomial", []int{0, 0}, []int{3, 3}, 6},
		{"one query", []int{2}, []int{3}, 3},
		{"no trials", []int{0}, []int{0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, effectiveN(tc.y, tc.m), 1e-12)
		})
	}
}

func TestQueriesNeeded(t *testing.T) {
	// Connor (1987) for McNemar: ψ = 0.3 discordant (0.2 one way, 0.1 the
	// other), δ = 0.1: n = (1.96·√0.3 + 0.8416·√0.29)² / 0.01 = 233.09 → 234
	// (R: (qnorm(.975)*sqrt(.3)+qnorm(.8)*sqrt(.29))^2/.01).
	d := make([]float64, 0, 10)
	d = append(d, 1, 1, -1)
	for range 7 {
		d = append(d, 0)
	}
	n, ok := queriesNeeded(d, 0.05, 0.8)
	require.True(t, ok)
	require.Equal(t, 234, n)

	// The formula is what it claims: the exact McNemar test at that sample
	// size has about 80 % power (R, summing over the discordant counts:
	// 0.7756; the exact test is a little conservative).
	pDiscord, pUp := 0.3, 0.2/0.3
	var power float64
	for k := 1; k <= n; k++ {
		pk := distuv.Binomial{N: float64(n), P: pDiscord}.Prob(float64(k))
		for j := 0; j <= k; j++ {
			if signTestP(j, k-j) < 0.05 {
				power += pk * distuv.Binomial{N: float64(k), P: pUp}.Prob(float64(j))
			}
		}
	}
	require.InDelta(t, 0.77555883048081, power, 1e-9)

	_, ok = queriesNeeded([]float64{1, -1, 0}, 0.05, 0.8)
	require.False(t, ok, "no observed difference implies no finite sample size")
	_, ok = queriesNeeded(nil, 0.05, 0.8)
	require.False(t, ok)
}
