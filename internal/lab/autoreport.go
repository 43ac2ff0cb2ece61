package lab

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/report"
)

// AutoResult is what a run from feedback reports besides the report: the
// feedback it used, the weaknesses found, the candidates made, and the
// results on the test queries held out of generation apart from those
// shown to it.
type AutoResult struct {
	NegativeFeedback int               `json:"negative_feedback"`
	FeedbackSamples  int               `json:"feedback_samples"`
	WithoutQuery     int               `json:"without_query,omitempty"`
	Since            *time.Time        `json:"since,omitempty"`
	Incremental      bool              `json:"incremental,omitempty"`
	Model            string            `json:"model"`
	Weaknesses       []WeaknessReport  `json:"weaknesses"`
	Candidates       []CandidateReport `json:"candidates"`
	// HeldOutQueries are the test queries (indexes) generation never saw.
	HeldOutQueries []int `json:"held_out_queries"`
	// Splits are the results on each part of the test queries.
	Splits Splits `json:"splits"`
}

// Splits holds the results on the held-out and the shown test queries.
type Splits struct {
	HeldOut *SplitResult `json:"held_out,omitempty"`
	Shown   *SplitResult `json:"shown,omitempty"`
}

// SplitResult is the report restricted to some of the test queries: per
// version its aggregates, per candidate its paired comparison with the
// baseline (query indexes are the experiment's), and the recommendation
// these queries alone would make.
type SplitResult struct {
	Queries        []int               `json:"queries"`
	Versions       []SplitVersion      `json:"versions"`
	Comparisons    []report.Comparison `json:"comparisons"`
	Recommendation SplitRecommendation `json:"recommendation"`
}

// SplitVersion is one version's aggregates over a split.
type SplitVersion struct {
	Version       int             `json:"version"`
	Baseline      bool            `json:"baseline"`
	Trials        int             `json:"trials"`
	PassRate      float64         `json:"pass_rate"`
	PassRateCI    report.Interval `json:"pass_rate_ci"`
	AvgScore      float64         `json:"avg_score"`
	WeightedScore float64         `json:"weighted_score"`
	ErrorRate     float64         `json:"error_rate"`
}

// SplitRecommendation is what a split's queries alone recommend.
type SplitRecommendation struct {
	Version    int               `json:"version"`
	Confidence report.Confidence `json:"confidence"`
	Reason     string            `json:"reason"`
}

// autoResult assembles a run from feedback's AutoResult from its spec and
// steps (a run that failed before its candidates were indexed reports what
// it got to), and adds to rep's warnings what the held-out queries say.
func autoResult(s Spec, steps map[string]json.RawMessage, trials []Trial, rep *report.Report) (*AutoResult, error) {
	a := s.Auto
	out := &AutoResult{
		NegativeFeedback: a.Negatives, FeedbackSamples: len(a.Samples), WithoutQuery: a.WithoutQuery,
		Since: a.Since, Incremental: a.Incremental, Model: a.Model,
		Weaknesses: a.Weaknesses, Candidates: a.Candidates, HeldOutQueries: a.HeldOut,
	}
	if out.Weaknesses == nil {
		// Not indexed yet: what the steps stored.
		var weak []chat.Weakness
		if raw, ok := steps[stepAnalysis]; ok && json.Unmarshal(raw, &weak) == nil {
			var shown []Sample
			for _, smp := range a.Samples {
				if !smp.HeldOut {
					shown = append(shown, smp)
				}
			}
			for _, w := range weak {
				wr := WeaknessReport{Category: w.Category, Description: w.Description, Frequency: len(w.Samples)}
				for _, k := range w.Samples {
					if k < len(shown) && len(wr.ExampleQueries) < 3 {
						wr.ExampleQueries = append(wr.ExampleQueries, shown[k].Query)
					}
				}
				out.Weaknesses = append(out.Weaknesses, wr)
			}
			sort.SliceStable(out.Weaknesses, func(x, y int) bool { return out.Weaknesses[x].Frequency > out.Weaknesses[y].Frequency })
		}
	}
	if raw, ok := steps[stepLeftOut]; ok && out.Candidates == nil {
		_ = json.Unmarshal(raw, &out.Candidates)
	}
	if out.Candidates == nil {
		var ids []string
		if raw, ok := steps[stepPublished]; ok {
			_ = json.Unmarshal(raw, &ids)
		}
		for i := range a.CandidateCount {
			var c candidateOut
			raw, ok := steps[stepCandidate+strconv.Itoa(i)]
			if !ok || json.Unmarshal(raw, &c) != nil {
				continue
			}
			cr := CandidateReport{Strategy: c.Strategy, Changelog: c.Changelog, Error: c.Error}
			if i < len(ids) {
				cr.EventID = ids[i]
			}
			out.Candidates = append(out.Candidates, cr)
		}
	}
	if out.Weaknesses == nil {
		out.Weaknesses = []WeaknessReport{}
	}
	if out.Candidates == nil {
		out.Candidates = []CandidateReport{}
	}
	var shown []int
	for q := range s.Queries {
		if !slices.Contains(a.HeldOut, q) {
			shown = append(shown, q)
		}
	}
	var err error
	if out.Splits.HeldOut, err = split(s, trials, a.HeldOut); err != nil {
		return nil, err
	}
	if out.Splits.Shown, err = split(s, trials, shown); err != nil {
		return nil, err
	}

	recWarn := &rep.Recommendation.Warnings
	if len(a.HeldOut) == 0 {
		*recWarn = append(*recWarn, "no test query was held out of generation (too few distinct queries, or holdout 0): the candidates are judged only on queries they were written from")
	} else if rec := rep.Recommendation.Version; rec != s.Baseline && out.Splits.HeldOut != nil {
		var base, cand *SplitVersion
		for i, v := range out.Splits.HeldOut.Versions {
			switch v.Version {
			case s.Baseline:
				base = &out.Splits.HeldOut.Versions[i]
			case rec:
				cand = &out.Splits.HeldOut.Versions[i]
			}
		}
		if base != nil && cand != nil && cand.Trials > 0 && cand.WeightedScore <= base.WeightedScore {
			*recWarn = append(*recWarn, fmt.Sprintf(
				"on the %d test queries held out of generation, version %d does not beat the baseline (weighted score %.3f against %.3f): it may fit the feedback it was written from",
				len(a.HeldOut), rec, cand.WeightedScore, base.WeightedScore))
		}
	}
	return out, nil
}

// split is the report over the trials of some queries, nil when there are
// none.
func split(s Spec, trials []Trial, queries []int) (*SplitResult, error) {
	if len(queries) == 0 {
		return nil, nil
	}
	var in []Trial
	for _, t := range trials {
		if slices.Contains(queries, t.Query) {
			in = append(in, t)
		}
	}
	// The queries keep the experiment's indexes; those of the other split
	// have no trials, which the report leaves out of every test.
	rep, _, err := buildReport(s, in)
	if err != nil {
		return nil, fmt.Errorf("report on queries %v: %w", queries, err)
	}
	out := &SplitResult{
		Queries: queries, Comparisons: rep.Comparisons,
		Recommendation: SplitRecommendation{Version: rep.Recommendation.Version, Confidence: rep.Recommendation.Confidence,
			Reason: strings.TrimSpace(rep.Recommendation.Reason)},
	}
	for _, v := range rep.Versions {
		out.Versions = append(out.Versions, SplitVersion{
			Version: v.Version, Baseline: v.Baseline, Trials: v.Trials, PassRate: v.PassRate, PassRateCI: v.PassRateCI,
			AvgScore: v.AvgScore, WeightedScore: v.WeightedScore, ErrorRate: v.ErrorRate,
		})
	}
	return out, nil
}
