package health

import (
	"fmt"
	"math"
	"time"
)

// State is a tool's health.
type State string

// The states of a tool, in the order a failing tool passes through them.
const (
	Healthy     State = "healthy"
	Warning     State = "warning"
	Degraded    State = "degraded"
	Quarantined State = "quarantined"
	Probation   State = "probation"
)

// Signal is a kind of outcome.
type Signal int

const (
	// Calls are tool.executed outcomes: bad when the call failed.
	Calls Signal = iota
	// Ratings are ratings of calls: bad when below the rating threshold.
	Ratings
)

func (s Signal) String() string {
	if s == Ratings {
		return "ratings"
	}
	return "calls"
}

// Tool is one tool's health: its detector per signal and where it stands
// in the state machine. Every time in it is stream time, so replaying the
// same events gives the same Tool.
type Tool struct {
	Name    string    `json:"name"`
	State   State     `json:"state"`
	Signals [2]signal `json:"signals"`
	// Since is when the tool entered its state.
	Since time.Time `json:"since"`
	// DegradedSince is when the current unhealthy episode began.
	DegradedSince time.Time `json:"degraded_since,omitzero"`
	// AtAlert counts consecutive observations at alert level in the
	// episode.
	AtAlert int `json:"at_alert"`
	// Offences counts quarantines, less those forgiven by OffenceDecay.
	Offences int `json:"offences"`
	// HealthySince is when the tool last became healthy after an episode;
	// offences decay from it.
	HealthySince time.Time `json:"healthy_since,omitzero"`
	// Expires is when the quarantine ends, or the probation does.
	Expires time.Time `json:"expires,omitzero"`
	// HeldBack: the tool would be quarantined but the tenant's share cap
	// is reached.
	HeldBack bool `json:"held_back"`
	// Reason says, in words, why the tool is in its state.
	Reason string `json:"reason"`
	// Version counts the tool's transitions: a per-tool monotonic number
	// carried by every result.
	Version int64 `json:"version"`
}

// Transition is a change of a tool's state, or of what an alert says.
type Transition struct {
	Tool     string
	From, To State
	At       time.Time
	Reason   string
	// Quality is the tool's recent share of good outcomes (calls, and
	// ratings when it has any); Threshold the share below which the
	// detector gathers evidence against it.
	Quality, Threshold float64
	Evidence           float64
	AtAlert            int
	DegradedSince      time.Time
	Offence            int
	Expires            time.Time
	HeldBack           bool
	Version            int64
}

// NewTool returns a healthy tool with the prior baseline.
func NewTool(name string, p Params, at time.Time) *Tool {
	return &Tool{Name: name, State: Healthy, Since: at,
		Signals: [2]signal{newSignal(p), newSignal(p)}}
}

func (t *Tool) unhealthy() bool { return t.State != Healthy && t.State != Warning }

// evidence is the tool's evidence of degradation as a share of what raises
// an alert, and the absolute floor's verdict.
func (t *Tool) evidence(p Params) (float64, bool) {
	e := math.Max(t.Signals[Calls].evidence(p), t.Signals[Ratings].evidence(p))
	floor := false
	for _, s := range t.Signals {
		if s.N >= int64(p.MinCalls) && s.Recent < p.Threshold {
			floor = true
		}
	}
	return e, floor
}

// Quality is the tool's recent share of good outcomes: the lower of its
// calls' and its ratings'.
func (t *Tool) Quality() float64 {
	q := t.Signals[Calls].Recent
	if t.Signals[Ratings].N > 0 {
		q = math.Min(q, t.Signals[Ratings].Recent)
	}
	return q
}

// threshold is the share of good outcomes of the calls below which the
// slow chart gathers evidence: its zero-drift point.
func (t *Tool) threshold(p Params) float64 {
	p0, _, slow, _ := t.Signals[Calls].alts(p)
	good, bad := -llr(false, p0, slow), llr(true, p0, slow)
	return 1 - good/(good+bad)
}

func (t *Tool) move(to State, at time.Time, reason string, p Params) Transition {
	from := t.State
	t.State, t.Since, t.Reason = to, at, reason
	t.Version++
	e, _ := t.evidence(p)
	return Transition{
		Tool: t.Name, From: from, To: to, At: at, Reason: reason,
		Quality: t.Quality(), Threshold: t.threshold(p), Evidence: e, AtAlert: t.AtAlert,
		DegradedSince: t.DegradedSince, Offence: t.Offences, Expires: t.Expires, HeldBack: t.HeldBack,
		Version: t.Version,
	}
}

// describe says why the signal that weighs most raised the evidence.
func (t *Tool) describe(p Params) string {
	sig := Calls
	if t.Signals[Ratings].evidence(p) > t.Signals[Calls].evidence(p) {
		sig = Ratings
	}
	s := t.Signals[sig]
	p0, _, _, _ := s.alts(p)
	what := "calls failed"
	if sig == Ratings {
		what = fmt.Sprintf("ratings below %.2f", p.RatingThreshold)
	}
	return fmt.Sprintf("%s: recent good share %.0f%% against a baseline of %.1f%% %s (%d outcomes)",
		sig, 100*s.Recent, 100*p0, what, s.N)
}

// quarantiner decides whether a tool may be quarantined now (the tenant's
// share cap) and says why not.
type quarantiner func(t *Tool) (ok bool, why string)

// observe adds one outcome at stream time at and returns the transitions
// it causes.
func (t *Tool) observe(sig Signal, bad bool, at time.Time, p Params, mayQuarantine quarantiner) []Transition {
	t.Signals[sig].observe(bad, t.unhealthy(), p)
	e, floor := t.evidence(p)
	alert := e >= 1 || floor
	switch t.State {
	case Healthy, Warning:
		switch {
		case alert:
			t.DegradedSince, t.AtAlert, t.HeldBack = at, 1, false
			for i := range t.Signals {
				t.Signals[i].Recover.S = 0
			}
			why := t.describe(p)
			if floor && e < 1 {
				why = fmt.Sprintf("quality %.0f%% is under the %.0f%% floor; %s", 100*t.Quality(), 100*p.Threshold, why)
			}
			out := []Transition{t.move(Degraded, at, why, p)}
			return append(out, t.escalate(at, p, mayQuarantine)...)
		case t.State == Healthy && e >= p.WarnAt:
			return []Transition{t.move(Warning, at, t.describe(p), p)}
		case t.State == Warning && e < p.WarnAt/2:
			// Back well under the warning line: a warning that is not
			// followed by an alert ends quietly, not with an event per
			// wobble.
			return []Transition{t.move(Healthy, at, "evidence against it faded", p)}
		}
	case Degraded:
		if alert {
			t.AtAlert++
		} else {
			t.AtAlert = 0
		}
		if t.recovered(e, floor, p) {
			return []Transition{t.heal(at, "back at its baseline", p)}
		}
		return t.escalate(at, p, mayQuarantine)
	case Probation:
		if alert {
			t.AtAlert = max(t.AtAlert+1, 1)
			if ok, _ := mayQuarantine(t); ok {
				return []Transition{t.quarantine(at, "failed again on probation: "+t.describe(p), p)}
			}
			t.HeldBack = true
			return []Transition{t.move(Degraded, at, "failed again on probation; "+t.capReason(mayQuarantine), p)}
		}
		if t.recovered(e, floor, p) {
			return []Transition{t.heal(at, "healthy on probation", p)}
		}
	case Quarantined:
		// Outcomes during a quarantine (agents that call it anyway) feed
		// the detector but decide nothing: the quarantine runs its term.
	}
	return nil
}

func (t *Tool) capReason(mayQuarantine quarantiner) string {
	_, why := mayQuarantine(t)
	return why
}

// recovered: some signal shows clear evidence of being back at its
// baseline and none is near an alert.
func (t *Tool) recovered(e float64, floor bool, p Params) bool {
	if floor || e >= p.WarnAt {
		return false
	}
	for _, s := range t.Signals {
		if s.Recover.S >= p.RecoverEvidence {
			return true
		}
	}
	return false
}

// escalate quarantines a degraded tool once the evidence, its persistence
// and the tool's volume all suffice, unless the share cap holds it back.
func (t *Tool) escalate(at time.Time, p Params, mayQuarantine quarantiner) []Transition {
	e, _ := t.evidence(p)
	n := t.Signals[Calls].N + t.Signals[Ratings].N
	if e < p.QuarantineAt || t.AtAlert < p.QuarantineAfter || n < int64(p.MinCalls) {
		return nil
	}
	ok, why := mayQuarantine(t)
	if ok {
		return []Transition{t.quarantine(at, t.describe(p), p)}
	}
	if t.HeldBack {
		return nil // the alert already said so
	}
	t.HeldBack = true
	return []Transition{t.move(Degraded, at, "would be quarantined, but "+why, p)}
}

func (t *Tool) quarantine(at time.Time, why string, p Params) Transition {
	forgiven := 0
	if !t.HealthySince.IsZero() {
		forgiven = int(at.Sub(t.HealthySince) / p.OffenceDecay)
	}
	t.Offences = max(0, t.Offences-forgiven) + 1
	t.HeldBack = false
	t.Expires = at.Add(min(p.QuarantineBase*time.Duration(t.Offences), p.QuarantineMax))
	return t.move(Quarantined, at, why, p)
}

// heal ends the episode.
func (t *Tool) heal(at time.Time, why string, p Params) Transition {
	t.HealthySince, t.HeldBack, t.AtAlert, t.Expires = at, false, 0, time.Time{}
	for i := range t.Signals {
		t.Signals[i].resetCharts()
	}
	tr := t.move(Healthy, at, why, p)
	t.DegradedSince = time.Time{}
	return tr
}

// expire handles the tool's deadline falling due at stream time at: a
// quarantine ends in probation, a probation with too few calls to decide
// ends healthy.
func (t *Tool) expire(due, at time.Time, p Params) []Transition {
	if t.Expires.IsZero() || !t.Expires.Equal(due) {
		return nil // a timer for a deadline that moved or passed
	}
	switch t.State {
	case Quarantined:
		return []Transition{t.probation(at, fmt.Sprintf("quarantine (offence %d) expired", t.Offences), p)}
	case Probation:
		if e, floor := t.evidence(p); e < 1 && !floor {
			return []Transition{t.heal(at, "probation ended without failures", p)}
		}
	}
	return nil
}

func (t *Tool) probation(at time.Time, why string, p Params) Transition {
	for i := range t.Signals {
		t.Signals[i].resetCharts()
	}
	t.AtAlert, t.HeldBack = 0, false
	t.Expires = at.Add(p.Probation)
	return t.move(Probation, at, why, p)
}

// release lifts a quarantine at an operator's request.
func (t *Tool) release(at time.Time, why string, p Params) ([]Transition, error) {
	if t.State != Quarantined {
		return nil, fmt.Errorf("tool %s is %s, not quarantined", t.Name, t.State)
	}
	return []Transition{t.probation(at, why, p)}, nil
}
