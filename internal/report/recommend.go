package report

import (
	"fmt"
	"math"
	"strings"
)

// gapBand is the confidence band of a pass-rate gap (a fraction) alone,
// before the statistics have their say.
func gapBand(gap float64) Confidence {
	points := math.Round(gap*100*tieScale) / tieScale
	switch {
	case points > highBandPoints:
		return High
	case points >= mediumBandPoints:
		return Medium
	}
	return Low
}

// cannotTell: no significant difference, and the sample is too small to
// detect the difference observed (or none was observed at all).
func cannotTell(c Comparison) bool {
	return c.QueriesNeeded == nil || *c.QueriesNeeded > c.PairedQueries
}

func recommend(in Input, versions []Version, comps []Comparison, accs []*acc) Recommendation {
	base := versions[0]
	rec := Recommendation{Version: base.Version, Confidence: Low, Improvements: []string{}, Warnings: []string{}}

	// The best candidate by weighted score; the first listed wins a tie.
	best := -1
	for i, c := range comps {
		if versions[i+1].Trials == 0 || c.PairedQueries == 0 {
			continue
		}
		if best < 0 || versions[i+1].WeightedScore > versions[best+1].WeightedScore {
			best = i
		}
	}

	switch {
	case len(comps) == 0:
		rec.Reason = "no candidate was tested; keep the baseline"
	case best < 0:
		rec.Reason = "no candidate has trials on the baseline's queries; keep the baseline"
	case versions[best+1].WeightedScore > base.WeightedScore:
		c, cand := comps[best], versions[best+1]
		rec.Version = cand.Version
		rec.QueriesNeeded = c.QueriesNeeded
		band := gapBand(c.PassRateDiff)
		stat := Medium
		switch {
		case c.Significant:
			stat = High
		case cannotTell(c):
			stat = Low
		}
		rec.Confidence = lower(band, stat)
		rec.Reason = fmt.Sprintf("version %d has the best weighted score (%.3f against the baseline's %.3f); pass rate %s, %s",
			cand.Version, cand.WeightedScore, base.WeightedScore, signedPoints(c.PassRateDiff), significance(c))
		rec.Improvements, rec.Warnings = changes(base, cand, c)
		if stat == Low {
			rec.Warnings = append(rec.Warnings, sampleWarning(c))
		}
	default:
		// Keep the baseline. HIGH only when every candidate is significantly
		// worse and more than 10 points behind; LOW when the closest one
		// could not have been told apart.
		c := comps[best]
		rec.QueriesNeeded = c.QueriesNeeded
		allWorse := true
		bestPass := math.Inf(-1)
		for i, cc := range comps {
			allWorse = allWorse && cc.SignificantlyWorse
			if versions[i+1].Trials > 0 {
				bestPass = math.Max(bestPass, versions[i+1].PassRate)
			}
		}
		band := gapBand(base.PassRate - bestPass)
		stat := Medium
		switch {
		case allWorse:
			stat = High
		case !c.SignificantlyWorse && cannotTell(c):
			stat = Low
		}
		rec.Confidence = lower(band, stat)
		rec.Reason = fmt.Sprintf("no candidate beats the baseline's weighted score (%.3f; the best candidate, version %d, has %.3f); keep the baseline",
			base.WeightedScore, versions[best+1].Version, versions[best+1].WeightedScore)
		if stat == Low {
			rec.Warnings = append(rec.Warnings, sampleWarning(c))
		}
	}

	// Warnings that hold whatever was recommended.
	for _, c := range comps {
		if c.SignificantlyWorse {
			rec.Warnings = append(rec.Warnings, fmt.Sprintf("version %d is significantly worse than the baseline: pass rate %s, average score %+.3f (%s)",
				c.Version, signedPoints(c.PassRateDiff), c.AvgScoreDiff, pValues(c)))
		}
	}
	for _, v := range versions {
		if v.Trials > 0 && v.ErrorRate > highErrorRate {
			rec.Warnings = append(rec.Warnings, fmt.Sprintf("version %d errored in %s of its trials", v.Version, percent(v.ErrorRate)))
		}
		if v.Trials == 0 {
			rec.Warnings = append(rec.Warnings, fmt.Sprintf("version %d has no trials", v.Version))
		}
	}
	if rec.Version != base.Version {
		for _, v := range versions {
			if v.Version == rec.Version && len(v.FailingQueries) > 0 {
				rec.Warnings = append(rec.Warnings, fmt.Sprintf("version %d fails every trial of %d of %d queries: %s",
					v.Version, len(v.FailingQueries), in.Queries, listQueries(v.FailingQueries)))
			}
		}
	} else if len(base.FailingQueries) > 0 {
		rec.Warnings = append(rec.Warnings, fmt.Sprintf("the baseline fails every trial of %d of %d queries: %s",
			len(base.FailingQueries), in.Queries, listQueries(base.FailingQueries)))
	}
	for i, c := range comps {
		if missing := queriesWithTrials(accs[0], accs[i+1]) - c.PairedQueries; missing > 0 {
			rec.Warnings = append(rec.Warnings, fmt.Sprintf("%d queries lack trials of version %d or of the baseline and are left out of its paired tests", missing, c.Version))
		}
	}
	if in.JudgeSkipped > 0 {
		rec.Warnings = append(rec.Warnings, fmt.Sprintf("%d of %d trials were not judged by the LLM judge (budget exhausted); their judge scores are placeholders",
			in.JudgeSkipped, len(in.Trials)))
	}
	return rec
}

// queriesWithTrials counts the queries at least one of the two versions ran.
func queriesWithTrials(a, b *acc) int {
	n := 0
	for q := range a.qTrials {
		if a.qTrials[q] > 0 || b.qTrials[q] > 0 {
			n++
		}
	}
	return n
}

// changes lists what got better and what got worse, with sizes, for the
// recommended candidate against the baseline.
func changes(base, cand Version, c Comparison) (better, worse []string) {
	better, worse = []string{}, []string{}
	add := func(improved bool, s string) {
		if improved {
			better = append(better, s)
		} else {
			worse = append(worse, s)
		}
	}
	if math.Abs(c.PassRateDiff)*100 >= minPassPoints {
		add(c.PassRateDiff > 0, fmt.Sprintf("pass rate %s → %s (%s; %s p = %s, Holm %s)",
			percent(base.PassRate), percent(cand.PassRate), signedPoints(c.PassRateDiff),
			shortMethod(c.PassTest.Method), pFormat(c.PassTest.P), pFormat(c.PassTest.PHolm)))
	}
	if math.Abs(c.AvgScoreDiff) >= minScoreChange {
		add(c.AvgScoreDiff > 0, fmt.Sprintf("average score %.3f → %.3f (%+.3f; Wilcoxon p = %s, Holm %s)",
			base.AvgScore, cand.AvgScore, c.AvgScoreDiff, pFormat(c.ScoreTest.P), pFormat(c.ScoreTest.PHolm)))
	}
	if math.Abs(c.AvgDurationChange) >= minRelativeSpeed {
		add(c.AvgDurationChange < 0, fmt.Sprintf("average duration %.0f ms → %.0f ms (%+.1f%%)",
			base.AvgDurationMs, cand.AvgDurationMs, 100*c.AvgDurationChange))
	}
	if math.Abs(c.TokensPerTrialChange) >= minRelativeSpeed {
		add(c.TokensPerTrialChange < 0, fmt.Sprintf("tokens per trial %.0f → %.0f (%+.1f%%)",
			ratio(float64(base.TotalTokens), float64(base.Trials)), ratio(float64(cand.TotalTokens), float64(cand.Trials)), 100*c.TokensPerTrialChange))
	}
	if math.Abs(c.ErrorRateDiff)*100 >= minPassPoints {
		add(c.ErrorRateDiff < 0, fmt.Sprintf("error rate %s → %s (%s)",
			percent(base.ErrorRate), percent(cand.ErrorRate), signedPoints(c.ErrorRateDiff)))
	}
	if n := len(c.RegressedQueries); n > 0 {
		parts := make([]string, 0, min(n, maxListed))
		for _, q := range c.RegressedQueries[:min(n, maxListed)] {
			b, k := base.PerQuery[q], cand.PerQuery[q]
			parts = append(parts, fmt.Sprintf("%d (%d/%d → %d/%d)", q, b.Passes, b.Trials, k.Passes, k.Trials))
		}
		more := ""
		if n > maxListed {
			more = fmt.Sprintf(" and %d more", n-maxListed)
		}
		worse = append(worse, fmt.Sprintf("passes less often than the baseline on %d of %d queries: %s%s",
			n, c.PairedQueries, strings.Join(parts, ", "), more))
	}
	return better, worse
}

func sampleWarning(c Comparison) string {
	if c.QueriesNeeded == nil {
		return fmt.Sprintf("the sample cannot tell: version %d and the baseline have the same per-query pass rates on average over %d queries",
			c.Version, c.PairedQueries)
	}
	return fmt.Sprintf("the sample cannot tell: detecting a %s pass-rate difference (version %d against the baseline) at 80%% power needs about %d queries; this experiment paired %d",
		unsignedPoints(c.PassRateDiff), c.Version, *c.QueriesNeeded, c.PairedQueries)
}

func significance(c Comparison) string {
	switch {
	case c.Significant:
		return "significantly better (" + pValues(c) + ")"
	case c.SignificantlyWorse:
		return "significantly worse (" + pValues(c) + ")"
	}
	return "not significant (" + pValues(c) + ")"
}

func pValues(c Comparison) string {
	return fmt.Sprintf("Holm-adjusted p: %s %s, Wilcoxon %s",
		shortMethod(c.PassTest.Method), pFormat(c.PassTest.PHolm), pFormat(c.ScoreTest.PHolm))
}

func shortMethod(m string) string {
	if m == methodMcNemar {
		return "McNemar"
	}
	return "sign test"
}

func pFormat(p float64) string {
	if p < 0.0001 {
		return "< 0.0001"
	}
	return fmt.Sprintf("%.4f", p)
}

func percent(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

func signedPoints(x float64) string { return fmt.Sprintf("%+.1f points", 100*x) }

func unsignedPoints(x float64) string { return fmt.Sprintf("%.1f-point", math.Abs(100*x)) }

func listQueries(qs []int) string {
	parts := make([]string, 0, min(len(qs), maxListed))
	for _, q := range qs[:min(len(qs), maxListed)] {
		parts = append(parts, fmt.Sprint(q))
	}
	s := strings.Join(parts, ", ")
	if len(qs) > maxListed {
		s += fmt.Sprintf(" and %d more", len(qs)-maxListed)
	}
	return s
}
