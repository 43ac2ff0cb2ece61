package report

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// Alpha is the family-wise error rate of every significance claim in a
// report: Holm keeps the chance of any false "significant" at or below it.
const Alpha = 0.05

// Power is the power the queries-needed estimate is computed for.
const Power = 0.80

// z95 is the standard normal quantile of a two-sided 95 % interval.
var z95 = distuv.UnitNormal.Quantile(0.975)

// signTestP is the exact two-sided p-value of the sign test with plus
// positive and minus negative pairs under P(+) = 1/2: 2·P(X ≤ min), capped
// at 1. With one trial per query and version it is the exact (conditional)
// McNemar test on the discordant pairs; it equals R's binom.test(plus,
// plus+minus)$p.value.
func signTestP(plus, minus int) float64 {
	n := plus + minus
	if n == 0 {
		return 1
	}
	k := min(plus, minus)
	p := 2 * distuv.Binomial{N: float64(n), P: 0.5}.CDF(float64(k))
	return math.Min(1, p)
}

// exactSignedRankMax is the largest number of non-zero differences for which
// the exact null distribution is used (R's wilcox.test: exact when n < 50).
const exactSignedRankMax = 49

// tieScale is the grid differences are rounded to before they are compared
// with zero and with each other: means of the same scores taken in another
// order differ in the last bits, and those must count as ties, not as ranks.
const tieScale = 1e9

// signedRank is the outcome of a Wilcoxon signed-rank test.
type signedRank struct {
	N     int     // non-zero differences (zeros are dropped, Wilcoxon 1945)
	Zeros int     // differences equal to zero, dropped
	V     float64 // sum of the ranks of the positive differences
	Exact bool    // exact null distribution; otherwise normal approximation
	Z     float64 // normal statistic with continuity correction (0 when exact)
	P     float64 // two-sided p-value
}

// direction is +1 when positive differences dominate, −1 when negative ones
// do, 0 when neither does.
func (s signedRank) direction() int {
	mid := float64(s.N*(s.N+1)) / 4
	switch {
	case s.V > mid:
		return 1
	case s.V < mid:
		return -1
	}
	return 0
}

// signedRankTest is the two-sided Wilcoxon signed-rank test of d against a
// symmetric distribution around zero, computed as R's wilcox.test(d) does:
// zero differences are dropped, tied absolute values get their average rank,
// V is the sum of the positive ranks; with fewer than 50 non-zero
// differences and no ties the p-value is exact, otherwise it is the normal
// approximation with the tie-corrected variance and a continuity correction
// of 1/2. One difference from R: R also falls back to the approximation when
// zeros were dropped; here the exact distribution of the remaining
// differences is used (the same as R's wilcox.test(d[d != 0])).
func signedRankTest(d []float64) signedRank {
	abs := make([]float64, 0, len(d))
	pos := make([]bool, 0, len(d))
	var res signedRank
	for _, x := range d {
		x = math.Round(x*tieScale) / tieScale
		if x == 0 {
			res.Zeros++
			continue
		}
		abs = append(abs, math.Abs(x))
		pos = append(pos, x > 0)
	}
	n := len(abs)
	res.N = n
	if n == 0 {
		res.P = 1
		return res
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case abs[a] < abs[b]:
			return -1
		case abs[a] > abs[b]:
			return 1
		}
		return 0
	})
	ranks := make([]float64, n)
	var tieTerm float64 // Σ(t³ − t) over groups of tied |d|
	for i := 0; i < n; {
		j := i
		for j+1 < n && abs[order[j+1]] == abs[order[i]] {
			j++
		}
		r := float64(i+j)/2 + 1 // average of ranks i+1 … j+1
		for k := i; k <= j; k++ {
			ranks[order[k]] = r
		}
		t := float64(j - i + 1)
		tieTerm += t*t*t - t
		i = j + 1
	}
	for i, r := range ranks {
		if pos[i] {
			res.V += r
		}
	}
	nf := float64(n)
	mid := nf * (nf + 1) / 4
	if n <= exactSignedRankMax && tieTerm == 0 {
		res.Exact = true
		counts := signedRankCounts(n)
		total := math.Ldexp(1, n)
		v := int(res.V)
		var tail float64
		if res.V > mid {
			for s := v; s < len(counts); s++ { // P(V ≥ v)
				tail += counts[s]
			}
		} else {
			for s := 0; s <= v; s++ { // P(V ≤ v)
				tail += counts[s]
			}
		}
		res.P = math.Min(1, 2*tail/total)
		return res
	}
	sigma := math.Sqrt(nf*(nf+1)*(2*nf+1)/24 - tieTerm/48)
	z := res.V - mid
	correction := 0.5
	switch {
	case z < 0:
		correction = -0.5
	case z == 0:
		correction = 0
	}
	res.Z = (z - correction) / sigma
	res.P = math.Min(1, 2*distuv.UnitNormal.CDF(-math.Abs(res.Z)))
	return res
}

// signedRankCounts returns, for s = 0 … n(n+1)/2, how many of the 2ⁿ sign
// assignments of the ranks 1 … n give V = s. The counts stay below 2⁴⁹ for
// n ≤ 49, so float64 holds them exactly.
func signedRankCounts(n int) []float64 {
	maxSum := n * (n + 1) / 2
	c := make([]float64, maxSum+1)
	c[0] = 1
	top := 0
	for k := 1; k <= n; k++ {
		top += k
		for s := top; s >= k; s-- {
			c[s] += c[s-k]
		}
	}
	return c
}

// holm returns Holm's (1979) step-down adjusted p-values, in the order given:
// the i-th smallest p is multiplied by m − i + 1, and the adjusted values are
// made monotone and capped at 1 (R's p.adjust(p, "holm")). Rejecting where
// the adjusted p < α keeps the family-wise error rate at α under any
// dependence between the tests.
func holm(p []float64) []float64 {
	m := len(p)
	order := make([]int, m)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case p[a] < p[b]:
			return -1
		case p[a] > p[b]:
			return 1
		}
		return 0
	})
	adj := make([]float64, m)
	running := 0.0
	for i, idx := range order {
		v := math.Min(1, float64(m-i)*p[idx])
		running = math.Max(running, v)
		adj[idx] = running
	}
	return adj
}

// Interval is a two-sided 95 % confidence interval.
type Interval struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
	// EffectiveN is the sample size the interval was computed with: the
	// number of trials, reduced by the design effect of repeating each query
	// (see effectiveN).
	EffectiveN float64 `json:"effective_n"`
}

// wilson is the Wilson (1927) score interval for a proportion p observed
// over n independent trials, at the normal quantile z. n may be fractional
// (an effective sample size). With n = 0 nothing is known: [0, 1].
func wilson(p, n, z float64) Interval {
	if n <= 0 {
		return Interval{Low: 0, High: 1}
	}
	z2 := z * z
	den := 1 + z2/n
	centre := (p + z2/(2*n)) / den
	half := z / den * math.Sqrt(p*(1-p)/n+z2/(4*n*n))
	return Interval{
		Low:        math.Max(0, centre-half),
		High:       math.Min(1, centre+half),
		EffectiveN: n,
	}
}

// effectiveN is the number of independent trials that the pass counts
// y[q] out of m[q] per query are worth. Repetitions of one query are
// correlated (a hard query fails on every repetition), so trials are not
// independent and a Wilson interval over all of them would be too narrow.
// Following Korn & Graubard (1998), the interval uses n/deff, where the
// design effect deff is the cluster-robust variance of the pass rate (queries
// as clusters) over the binomial variance p(1−p)/n, truncated at 1 so the
// effective size never exceeds the number of trials. The variance carries
// the usual Q/(Q−1) small-sample factor, so Q all-or-nothing queries are
// worth Q − 1 trials. With one trial per query (nothing to cluster), fewer
// than two queries, or no spread to estimate, it is the number of trials.
func effectiveN(y, m []int) float64 {
	var sy, sm float64
	q, reps := 0, 0
	for i := range m {
		if m[i] == 0 {
			continue
		}
		sy += float64(y[i])
		sm += float64(m[i])
		q++
		reps = max(reps, m[i])
	}
	if sm == 0 {
		return 0
	}
	p := sy / sm
	if q < 2 || reps < 2 || p == 0 || p == 1 {
		return sm
	}
	var ss float64
	for i := range m {
		if m[i] == 0 {
			continue
		}
		r := float64(y[i]) - p*float64(m[i])
		ss += r * r
	}
	v := float64(q) / float64(q-1) * ss / (sm * sm)
	if v <= 0 {
		return sm
	}
	return math.Min(sm, p*(1-p)/v)
}

// queriesNeeded estimates how many queries a paired comparison needs to
// detect the mean of the per-query differences d at the given two-sided
// level and power: Connor's (1987) sample size for McNemar's test,
//
//	n = (z₁₋α/₂·√ψ + z_power·√(ψ − δ²))² / δ²,
//
// with δ the mean difference and ψ the mean squared difference. With one
// trial per query and version, d is −1, 0 or +1, ψ is the share of
// discordant queries and this is Connor's formula exactly; with repetitions,
// d is the difference of per-query pass fractions and the formula is the
// same normal approximation for a paired mean (ψ is the variance of d under
// the null hypothesis of no difference). ok is false when no difference was
// observed (δ = 0): no finite number of queries is implied.
func queriesNeeded(d []float64, alpha, power float64) (n int, ok bool) {
	if len(d) == 0 {
		return 0, false
	}
	var s, s2 float64
	for _, x := range d {
		s += x
		s2 += x * x
	}
	k := float64(len(d))
	delta := s / k
	psi := s2 / k
	if math.Abs(delta) < 1/tieScale {
		return 0, false
	}
	za := distuv.UnitNormal.Quantile(1 - alpha/2)
	zb := distuv.UnitNormal.Quantile(power)
	num := za*math.Sqrt(psi) + zb*math.Sqrt(math.Max(0, psi-delta*delta))
	need := math.Ceil(num * num / (delta * delta))
	const maxQueries = 1 << 40 // beyond any experiment; keeps the int sane
	if need > maxQueries {
		need = maxQueries
	}
	return int(need), true
}
