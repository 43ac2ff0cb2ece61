package report

import "math"

// compare pairs every candidate (versions[1:]) with the baseline
// (versions[0]) and applies Holm over the family of all their tests.
func compare(versions []Version, accs []*acc) []Comparison {
	base, b := versions[0], accs[0]
	cs := make([]Comparison, 0, len(versions)-1)
	var ps []float64
	var passDiffs [][]float64
	for i := 1; i < len(versions); i++ {
		cand, c := versions[i], accs[i]
		cm := Comparison{
			Version:              cand.Version,
			PassRateDiff:         cand.PassRate - base.PassRate,
			AvgScoreDiff:         cand.AvgScore - base.AvgScore,
			WeightedScoreDiff:    cand.WeightedScore - base.WeightedScore,
			ErrorRateDiff:        cand.ErrorRate - base.ErrorRate,
			AvgDurationChange:    relChange(cand.AvgDurationMs, base.AvgDurationMs),
			TokensPerTrialChange: relChange(ratio(float64(cand.TotalTokens), float64(cand.Trials)), ratio(float64(base.TotalTokens), float64(base.Trials))),
			ImprovedQueries:      []int{},
			RegressedQueries:     []int{},
		}
		var dPass, dScore []float64
		for q := range b.qTrials {
			if b.qTrials[q] == 0 || c.qTrials[q] == 0 {
				continue
			}
			cp, bp := cand.PerQuery[q].PassRate, base.PerQuery[q].PassRate
			d := math.Round((cp-bp)*tieScale) / tieScale
			switch {
			case d > 0:
				cm.PassTest.Better++
				cm.ImprovedQueries = append(cm.ImprovedQueries, q)
			case d < 0:
				cm.PassTest.Worse++
				cm.RegressedQueries = append(cm.RegressedQueries, q)
			default:
				cm.PassTest.Ties++
			}
			dPass = append(dPass, d)
			dScore = append(dScore, cand.PerQuery[q].AvgScore-base.PerQuery[q].AvgScore)
		}
		cm.PairedQueries = len(dPass)
		cm.PassTest.Method = methodSign
		if b.maxReps <= 1 && c.maxReps <= 1 {
			cm.PassTest.Method = methodMcNemar
		}
		cm.PassTest.P = signTestP(cm.PassTest.Better, cm.PassTest.Worse)
		sr := signedRankTest(dScore)
		cm.ScoreTest = ScoreTest{Method: methodWilcoxon, N: sr.N, Zeros: sr.Zeros, V: sr.V, Exact: sr.Exact, Z: sr.Z, P: sr.P}
		ps = append(ps, cm.PassTest.P, cm.ScoreTest.P)
		passDiffs = append(passDiffs, dPass)
		cs = append(cs, cm)
	}
	adj := holm(ps)
	family := max(1, len(ps))
	for i := range cs {
		c := &cs[i]
		c.PassTest.PHolm, c.ScoreTest.PHolm = adj[2*i], adj[2*i+1]
		passDir := sign(c.PassTest.Better - c.PassTest.Worse)
		scoreDir := signedRank{N: c.ScoreTest.N, V: c.ScoreTest.V}.direction()
		passSig, scoreSig := c.PassTest.PHolm < Alpha, c.ScoreTest.PHolm < Alpha
		up := (passSig && passDir > 0) || (scoreSig && scoreDir > 0)
		down := (passSig && passDir < 0) || (scoreSig && scoreDir < 0)
		c.Significant = up && !down
		c.SignificantlyWorse = down && !up
		if n, ok := queriesNeeded(passDiffs[i], Alpha/float64(family), Power); ok {
			c.QueriesNeeded = &n
		}
	}
	return cs
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

func relChange(cand, base float64) float64 {
	if base == 0 {
		return 0
	}
	return cand/base - 1
}
