package health

import "math"

// baseline is a tool's normal rate of bad outcomes on one signal: a Beta
// posterior with forgetting, so it follows slow, legitimate changes of a
// tool over hundreds of calls but not a failure that starts now (it learns
// only while the charts see no evidence of change).
type baseline struct {
	Bad  float64 `json:"bad"`  // discounted count of bad outcomes, prior included
	Good float64 `json:"good"` // discounted count of good outcomes, prior included
}

func newBaseline(p Params) baseline {
	return baseline{Bad: p.PriorBadRate * p.PriorWeight, Good: (1 - p.PriorBadRate) * p.PriorWeight}
}

// rate is the baseline bad rate, clamped to where a relative test means
// something: a tool that fails more than half its calls normally is left
// to the absolute floor (Params.Threshold).
func (b baseline) rate(p Params) float64 {
	r := b.Bad / (b.Bad + b.Good)
	return math.Min(math.Max(r, p.MinBaseline), 0.5)
}

func (b *baseline) learn(bad bool, p Params) {
	f := math.Exp2(-1 / p.BaselineHalfLife)
	b.Bad, b.Good = b.Bad*f, b.Good*f
	if bad {
		b.Bad++
	} else {
		b.Good++
	}
}

// chart is one Bernoulli CUSUM: the log-likelihood ratio of "the bad rate
// is now alt" against "it is still the baseline", accumulated over
// outcomes in stream order and floored at 0 (Page's CUSUM). It is the
// test with the least detection delay for a given false-alarm rate.
type chart struct {
	S float64 `json:"s"`
}

// llr is the evidence one outcome gives for bad rate alt against p0.
func llr(bad bool, p0, alt float64) float64 {
	if bad {
		return math.Log(alt / p0)
	}
	return math.Log((1 - alt) / (1 - p0))
}

func (c *chart) add(bad bool, p0, alt float64) {
	c.S = math.Max(0, c.S+llr(bad, p0, alt))
}

// signal is the detector of one kind of outcome of one tool (calls, or
// ratings): its baseline, a fast chart for a tool that broke (nearly every
// outcome bad), a slow chart for a tool that got worse (its bad rate up by
// Params.Shift), and a recovery chart that, once the tool is unhealthy,
// gathers evidence that it is back near its baseline.
type signal struct {
	Base    baseline `json:"base"`
	Fast    chart    `json:"fast"`
	Slow    chart    `json:"slow"`
	Recover chart    `json:"recover"`
	N       int64    `json:"n"`   // outcomes seen
	Bad     int64    `json:"bad"` // of which bad
	// Recent is an exponentially weighted share of good outcomes over
	// the last ~Params.RecentHalfLife outcomes: the quality score shown.
	Recent float64 `json:"recent"`
}

func newSignal(p Params) signal { return signal{Base: newBaseline(p), Recent: 1 - p.PriorBadRate} }

func (s *signal) alts(p Params) (p0, fast, slow, mid float64) {
	p0 = s.Base.rate(p)
	fast = math.Max(p.BrokenRate, p0+0.1)
	slow = math.Min(p0+p.Shift, 0.95)
	mid = p0 + (slow-p0)/2
	return
}

// observe adds one outcome. unhealthy says whether the tool is in an
// unhealthy episode, where the recovery chart runs and the baseline does
// not learn.
func (s *signal) observe(bad bool, unhealthy bool, p Params) {
	p0, fast, slow, mid := s.alts(p)
	s.Fast.add(bad, p0, fast)
	s.Slow.add(bad, p0, slow)
	if unhealthy {
		// Evidence for "back at the baseline" against "still half-way to
		// the slow chart's alternative": a tool hovering where it was
		// flagged gathers none, so it does not flap.
		s.Recover.S = math.Max(0, s.Recover.S+llr(bad, mid, p0))
	} else if s.evidence(p) < p.WarnAt {
		s.Base.learn(bad, p)
	}
	s.N++
	g := 1.0
	if bad {
		s.Bad++
		g = 0
	}
	w := math.Exp2(-1 / p.RecentHalfLife)
	s.Recent = s.Recent*w + g*(1-w)
}

// evidence is the signal's evidence of degradation as a share of what
// raises an alert: 1 is degraded, Params.QuarantineAt quarantines.
func (s *signal) evidence(p Params) float64 {
	return math.Max(s.Fast.S/p.FastEvidence, s.Slow.S/p.SlowEvidence)
}

// resetCharts starts the charts afresh (a new episode, or probation).
func (s *signal) resetCharts() {
	s.Fast.S, s.Slow.S, s.Recover.S = 0, 0, 0
}
