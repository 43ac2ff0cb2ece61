package health

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Params tune the detector and the quarantine. The defaults are what the
// simulation table in the operator docs was measured with.
type Params struct {
	// FastEvidence is the evidence (log-likelihood ratio, natural log) the
	// fast chart needs to raise an alert. Its alternative is a broken tool
	// (BrokenRate of outcomes bad). ≈ ln of the calls between false alarms.
	FastEvidence float64
	// SlowEvidence is the same for the slow chart, whose alternative is
	// the baseline bad rate plus Shift: a tool that got worse.
	SlowEvidence float64
	// BrokenRate is the fast chart's alternative bad rate.
	BrokenRate float64
	// Shift is how much worse than its baseline the slow chart looks for.
	Shift float64
	// WarnAt is the share of the alert evidence that puts a tool in
	// warning; QuarantineAt the multiple that quarantines it.
	WarnAt, QuarantineAt float64
	// RecoverEvidence is the evidence for "back at its baseline" an
	// unhealthy tool needs to recover.
	RecoverEvidence float64
	// QuarantineAfter is how many consecutive observations at alert level
	// a degraded tool needs before it is quarantined.
	QuarantineAfter int
	// MinCalls is the volume of outcomes a tool needs before any
	// quarantine.
	MinCalls int
	// Threshold is an absolute floor: a tool whose recent share of good
	// outcomes is below it (with MinCalls outcomes) is degraded whatever
	// its baseline, so a tool that was always bad is still flagged.
	Threshold float64
	// RatingThreshold: a rating below it is a bad outcome.
	RatingThreshold float64
	// PriorBadRate and PriorWeight are the baseline of a new tool: its bad
	// rate and how many outcomes that guess is worth.
	PriorBadRate, PriorWeight float64
	// MinBaseline is the lowest baseline bad rate assumed.
	MinBaseline float64
	// BaselineHalfLife is, in outcomes, how fast the baseline forgets.
	BaselineHalfLife float64
	// RecentHalfLife is, in outcomes, the memory of the quality score.
	RecentHalfLife float64
	// QuarantineBase × offence is a quarantine's length, capped by
	// QuarantineMax.
	QuarantineBase, QuarantineMax time.Duration
	// OffenceDecay: every period a tool stays healthy forgives one
	// offence.
	OffenceDecay time.Duration
	// Probation is how long a tool back from quarantine stays on
	// probation at most: with too few calls to decide, it recovers then.
	Probation time.Duration
	// MaxQuarantinedShare caps the share of a tenant's known tools that
	// may be quarantined at once (rounded down).
	MaxQuarantinedShare float64
}

// DefaultParams returns the documented defaults.
func DefaultParams() Params {
	return Params{
		FastEvidence:        9,
		SlowEvidence:        9,
		BrokenRate:          0.9,
		Shift:               0.3,
		WarnAt:              0.7,
		QuarantineAt:        2,
		RecoverEvidence:     3,
		QuarantineAfter:     5,
		MinCalls:            20,
		Threshold:           0.3,
		RatingThreshold:     0.5,
		PriorBadRate:        0.05,
		PriorWeight:         20,
		MinBaseline:         0.005,
		BaselineHalfLife:    500,
		RecentHalfLife:      20,
		QuarantineBase:      5 * time.Minute,
		QuarantineMax:       2 * time.Hour,
		OffenceDecay:        time.Hour,
		Probation:           10 * time.Minute,
		MaxQuarantinedShare: 0.5,
	}
}

// Validate reports every value out of range.
func (p Params) Validate() error {
	var errs []error
	pos := func(name string, v float64) {
		if !(v > 0) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("%s must be a positive number, not %v", name, v))
		}
	}
	unit := func(name string, v float64) {
		if !(v >= 0 && v <= 1) {
			errs = append(errs, fmt.Errorf("%s must be between 0 and 1, not %v", name, v))
		}
	}
	pos("fast evidence", p.FastEvidence)
	pos("slow evidence", p.SlowEvidence)
	pos("recover evidence", p.RecoverEvidence)
	pos("baseline half-life", p.BaselineHalfLife)
	pos("recent half-life", p.RecentHalfLife)
	pos("prior weight", p.PriorWeight)
	unit("threshold", p.Threshold)
	unit("rating threshold", p.RatingThreshold)
	unit("max quarantined share", p.MaxQuarantinedShare)
	if !(p.BrokenRate > 0.5 && p.BrokenRate < 1) {
		errs = append(errs, fmt.Errorf("broken rate must be between 0.5 and 1, not %v", p.BrokenRate))
	}
	if !(p.Shift > 0 && p.Shift < 0.5) {
		errs = append(errs, fmt.Errorf("shift must be between 0 and 0.5, not %v", p.Shift))
	}
	if !(p.PriorBadRate > 0 && p.PriorBadRate < 0.5) {
		errs = append(errs, fmt.Errorf("prior bad rate must be between 0 and 0.5, not %v", p.PriorBadRate))
	}
	if !(p.MinBaseline > 0 && p.MinBaseline < 0.5) {
		errs = append(errs, fmt.Errorf("min baseline must be between 0 and 0.5, not %v", p.MinBaseline))
	}
	if !(p.WarnAt > 0 && p.WarnAt < 1) {
		errs = append(errs, fmt.Errorf("warn share must be between 0 and 1, not %v", p.WarnAt))
	}
	if !(p.QuarantineAt >= 1) || math.IsInf(p.QuarantineAt, 0) {
		errs = append(errs, fmt.Errorf("quarantine multiple must be at least 1, not %v", p.QuarantineAt))
	}
	if p.QuarantineAfter < 1 {
		errs = append(errs, fmt.Errorf("quarantine-after must be at least 1, not %d", p.QuarantineAfter))
	}
	if p.MinCalls < 1 {
		errs = append(errs, fmt.Errorf("min calls must be at least 1, not %d", p.MinCalls))
	}
	for name, d := range map[string]time.Duration{"quarantine base": p.QuarantineBase, "quarantine max": p.QuarantineMax,
		"offence decay": p.OffenceDecay, "probation": p.Probation} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, not %s", name, d))
		}
	}
	if p.QuarantineMax < p.QuarantineBase {
		errs = append(errs, errors.New("quarantine max must be at least the quarantine base"))
	}
	return errors.Join(errs...)
}
