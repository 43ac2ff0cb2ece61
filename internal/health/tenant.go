package health

import (
	"fmt"
	"sort"
	"time"
)

// Tenant is the health of one tenant's tools: the share cap makes them
// depend on each other, so a tenant's events are applied in stream order
// through one Tenant.
//
// A Tenant need not hold every tool: the store loads the tools an event
// names and those held back by the cap, and keeps the counts the cap needs
// (Known, Quarantined) for all of them.
type Tenant struct {
	Tools map[string]*Tool `json:"tools"`
	// Known counts the tenant's tools, loaded or not; Quarantined those
	// in quarantine.
	Known, Quarantined int
}

// NewTenant returns a tenant with no tools.
func NewTenant() *Tenant { return &Tenant{Tools: map[string]*Tool{}} }

// tool returns the tool, created when new. Tools not loaded must have been
// loaded by the caller before: a name missing here is a new tool.
func (tn *Tenant) tool(name string, p Params, at time.Time) *Tool {
	t := tn.Tools[name]
	if t == nil {
		t = NewTool(name, p, at)
		tn.Tools[name] = t
		tn.Known++
	}
	return t
}

// count keeps Quarantined in step with trs.
func (tn *Tenant) count(trs []Transition) []Transition {
	for _, tr := range trs {
		if tr.From == Quarantined && tr.To != Quarantined {
			tn.Quarantined--
		}
		if tr.To == Quarantined && tr.From != Quarantined {
			tn.Quarantined++
		}
	}
	return trs
}

// Register records a tool without an outcome (a registration): it counts
// toward the share cap's denominator.
func (tn *Tenant) Register(name string, p Params, at time.Time) { tn.tool(name, p, at) }

// Observe applies one outcome of tool name at stream time at.
func (tn *Tenant) Observe(name string, sig Signal, bad bool, at time.Time, p Params) []Transition {
	t := tn.tool(name, p, at)
	var out []Transition
	// observe may quarantine more than one tool only through promote, and
	// the cap check inside needs the count current: count as we go.
	out = tn.count(t.observe(sig, bad, at, p, tn.mayQuarantine(p)))
	return out
}

// Expire applies a deadline of tool name that fell due, then lets held-back
// tools take a freed place.
func (tn *Tenant) Expire(name string, due, at time.Time, p Params) []Transition {
	t := tn.Tools[name]
	if t == nil {
		return nil
	}
	out := tn.count(t.expire(due, at, p))
	return append(out, tn.promote(at, p)...)
}

// Release lifts tool name's quarantine at an operator's request.
func (tn *Tenant) Release(name, why string, at time.Time, p Params) ([]Transition, error) {
	t := tn.Tools[name]
	if t == nil {
		return nil, fmt.Errorf("tool %s is unknown to the degrader", name)
	}
	out, err := t.release(at, why, p)
	if err != nil {
		return nil, err
	}
	tn.count(out)
	return append(out, tn.promote(at, p)...), nil
}

// Deadlines lists the tools' pending deadlines.
func (tn *Tenant) Deadlines() map[string]time.Time {
	out := map[string]time.Time{}
	for name, t := range tn.Tools {
		if !t.Expires.IsZero() && (t.State == Quarantined || t.State == Probation) {
			out[name] = t.Expires
		}
	}
	return out
}

// capacity is how many tools may be quarantined at once: the share of
// known tools, rounded down, so one tool of one is never quarantined and
// one of two or three at most (the small-toolbox case other breakers get
// wrong).
func (tn *Tenant) capacity(p Params) int {
	return int(p.MaxQuarantinedShare*float64(tn.Known) + 1e-9)
}

func (tn *Tenant) mayQuarantine(p Params) quarantiner {
	return func(t *Tool) (bool, string) {
		n, c := tn.Quarantined, tn.capacity(p)
		if n < c {
			return true, ""
		}
		return false, fmt.Sprintf("the tenant's share cap is reached (%d of %d known tools quarantined, at most %.0f%%)",
			n, tn.Known, 100*p.MaxQuarantinedShare)
	}
}

// promote quarantines held-back tools while places are free, the longest
// degraded first.
func (tn *Tenant) promote(at time.Time, p Params) []Transition {
	var held []*Tool
	for _, t := range tn.Tools {
		if t.State == Degraded && t.HeldBack {
			held = append(held, t)
		}
	}
	sort.Slice(held, func(i, j int) bool {
		if !held[i].DegradedSince.Equal(held[j].DegradedSince) {
			return held[i].DegradedSince.Before(held[j].DegradedSince)
		}
		return held[i].Name < held[j].Name
	})
	var out []Transition
	for _, t := range held {
		if tn.Quarantined >= tn.capacity(p) {
			break
		}
		out = append(out, tn.count([]Transition{t.quarantine(at, "a place under the share cap freed", p)})...)
	}
	return out
}
