package health

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

// The simulation drives the real detector (Tenant.Observe) over generated
// outcome streams. Each call is one second of stream time.

var simStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type simTool struct {
	tn  *Tenant
	p   Params
	n   int
	log []Transition
}

func newSim(p Params, extraTools int) *simTool {
	s := &simTool{tn: NewTenant(), p: p}
	// The share cap would hold back the only tool: a toolbox of several.
	for i := 0; i < extraTools; i++ {
		s.tn.Register(fmt.Sprintf("other-%d", i), p, simStart)
	}
	return s
}

func (s *simTool) at() time.Time { return simStart.Add(time.Duration(s.n) * time.Second) }

// call observes one call (and its rating, when rating >= 0) and fires due
// deadlines first, as the consumer's timers would.
func (s *simTool) call(fail bool, rating float64) []Transition {
	s.n++
	at := s.at()
	var out []Transition
	for name, due := range s.tn.Deadlines() {
		if !due.After(at) {
			out = append(out, s.tn.Expire(name, due, at, s.p)...)
		}
	}
	out = append(out, s.tn.Observe("t", Calls, fail, at, s.p)...)
	if rating >= 0 {
		out = append(out, s.tn.Observe("t", Ratings, rating < s.p.RatingThreshold, at, s.p)...)
	}
	s.log = append(s.log, out...)
	return out
}

func (s *simTool) state() State {
	if t := s.tn.Tools["t"]; t != nil {
		return t.State
	}
	return Healthy
}

func reached(trs []Transition, to State) bool {
	for _, tr := range trs {
		if tr.To == to && tr.Tool == "t" {
			return true
		}
	}
	return false
}

func quantile(xs []int, q float64) int {
	if len(xs) == 0 {
		return -1
	}
	s := append([]int(nil), xs...)
	sort.Ints(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// hardDrop: warm-up calls at baseline p0, then every call fails; the calls
// from the drop to degraded and to quarantined.
func hardDrop(p Params, p0 float64, runs int, seed uint64) (degrade, quarantine []int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for r := 0; r < runs; r++ {
		s := newSim(p, 9)
		for i := 0; i < 1000; i++ {
			s.call(rng.Float64() < p0, -1)
		}
		if s.state() != Healthy && s.state() != Warning {
			continue // a false alarm before the drop: not a delay sample
		}
		d, q := -1, -1
		for i := 1; i <= 200 && q < 0; i++ {
			trs := s.call(true, -1)
			if d < 0 && reached(trs, Degraded) {
				d = i
			}
			if reached(trs, Quarantined) {
				q = i
				if d < 0 {
					d = i
				}
			}
		}
		degrade, quarantine = append(degrade, d), append(quarantine, q)
	}
	return
}

func noisy(p Params, p0 float64, calls, runs int, seed uint64) (degraded, quarantined, warnings float64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	for r := 0; r < runs; r++ {
		s := newSim(p, 9)
		for i := 0; i < calls; i++ {
			for _, tr := range s.call(rng.Float64() < p0, -1) {
				switch tr.To {
				case Degraded:
					if tr.From != Degraded {
						degraded++
					}
				case Quarantined:
					quarantined++
				case Warning:
					warnings++
				}
			}
		}
	}
	return degraded / float64(runs), quarantined / float64(runs), warnings / float64(runs)
}

// slide: success falls linearly from 95 % to 40 % over 500 calls after a
// warm-up; the delay counts from the call where it crosses 60 %.
func slide(p Params, runs int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 3))
	var delays []int
	for r := 0; r < runs; r++ {
		s := newSim(p, 9)
		for i := 0; i < 1000; i++ {
			s.call(rng.Float64() < 0.05, -1)
		}
		if s.state() != Healthy && s.state() != Warning {
			continue
		}
		d := -1
		for i := 0; i < 700 && d < 0; i++ {
			succ := 0.95 - 0.55*min(float64(i)/500, 1)
			if reached(s.call(rng.Float64() >= succ, -1), Degraded) {
				cross := 318 // where success crosses 60 %: 0.35/0.55 of 500
				d = max(0, i-cross)
			}
		}
		delays = append(delays, d)
	}
	return delays
}

// ratingDrop: calls keep succeeding (2 % failures) while their ratings
// fall from around 0.9 to around 0.2.
func ratingDrop(p Params, runs int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 4))
	var delays []int
	for r := 0; r < runs; r++ {
		s := newSim(p, 9)
		for i := 0; i < 1000; i++ {
			s.call(rng.Float64() < 0.02, 0.75+0.3*rng.Float64())
		}
		if s.state() != Healthy && s.state() != Warning {
			continue
		}
		d := -1
		for i := 1; i <= 200 && d < 0; i++ {
			if reached(s.call(rng.Float64() < 0.02, 0.05+0.3*rng.Float64()), Degraded) {
				d = i
			}
		}
		delays = append(delays, d)
	}
	return delays
}

// oscillate: after a warm-up at 95 %, the success rate swings ±5 points
// around the tool's threshold every 50 calls; degraded→healthy pairs per
// 1,000 calls.
func oscillate(p Params, calls, runs int, seed uint64) float64 {
	rng := rand.New(rand.NewPCG(seed, 5))
	pairs := 0
	for r := 0; r < runs; r++ {
		s := newSim(p, 9)
		for i := 0; i < 1000; i++ {
			s.call(rng.Float64() < 0.05, -1)
		}
		thr := s.tn.Tools["t"].threshold(p)
		for i := 0; i < calls; i++ {
			succ := thr + 0.05
			if (i/50)%2 == 1 {
				succ = thr - 0.05
			}
			for _, tr := range s.call(rng.Float64() >= succ, -1) {
				if tr.From == Degraded && tr.To == Healthy || tr.From == Probation && tr.To == Healthy {
					pairs++
				}
			}
		}
	}
	return float64(pairs) / float64(runs) / (float64(calls) / 1000)
}

// TestDetectionTable is the operator docs' detection table: each row of
// the bars, thousands of simulated runs of the real detector, asserted.
// Run it with -v to print the table.
func TestDetectionTable(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation: thousands of runs per row")
	}
	p := DefaultParams()
	var rows []string
	row := func(scenario, bar, got string, ok bool) {
		mark := "yes"
		if !ok {
			mark = "NO"
			t.Errorf("%s: %s, measured %s", scenario, bar, got)
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s |", scenario, bar, got, mark))
	}
	d, q := hardDrop(p, 0.02, 2000, 1)
	row("hard drop (every call fails), baseline 2 % failures", "tool.degraded within 3 calls (p99)",
		fmt.Sprintf("p50 %d, p99 %d, max %d calls", quantile(d, 0.5), quantile(d, 0.99), quantile(d, 1)), quantile(d, 0.99) <= 3)
	row("same, to quarantine", "within 10 calls (p99)",
		fmt.Sprintf("p50 %d, p99 %d, max %d calls", quantile(q, 0.5), quantile(q, 0.99), quantile(q, 1)), quantile(q, 0.99) <= 10)
	deg, quar, warn := noisy(p, 0.10, 10000, 1000, 2)
	row("healthy tool, 10 % random failures, 10,000 calls", "≤ 0.01 false quarantines, ≤ 1 degraded alert",
		fmt.Sprintf("%.4f quarantines, %.2f alerts (and %.1f silent warnings) per 10,000 calls", quar, deg, warn), quar <= 0.01 && deg <= 1)
	sl := slide(p, 2000, 3)
	row("slow slide from 95 % to 40 % success over 500 calls", "degraded within 25 calls of crossing 60 % (p99)",
		fmt.Sprintf("p99 %d, max %d calls after crossing (most alert before it)", quantile(sl, 0.99), quantile(sl, 1)), quantile(sl, 0.99) <= 25 && quantile(sl, 1) >= 0)
	rd := ratingDrop(p, 2000, 4)
	row("success flat, ratings drop from 0.9 to 0.2", "degraded within 10 rated calls (p99)",
		fmt.Sprintf("p50 %d, p99 %d rated calls", quantile(rd, 0.5), quantile(rd, 0.99)), quantile(rd, 0.99) <= 10 && quantile(rd, 0) > 0)
	osc := oscillate(p, 10000, 200, 5)
	row("tool oscillating ±5 points around its threshold every 50 calls", "≤ 1 degraded/recovered pair per 1,000 calls",
		fmt.Sprintf("%.2f pairs per 1,000 calls", osc), osc <= 1)
	t.Log("\n| scenario | must hold | measured | met |\n|---|---|---|---|\n" + strings.Join(rows, "\n"))

	var delays []string
	for _, p0 := range []float64{0, 0.01, 0.02, 0.05, 0.10, 0.20} {
		d, q := hardDrop(p, p0, 2000, 6)
		delays = append(delays, fmt.Sprintf("| %.0f %% | %d / %d | %d / %d |", 100*p0, quantile(d, 0.5), quantile(d, 0.99), quantile(q, 0.5), quantile(q, 0.99)))
	}
	t.Log("\n| baseline failures | hard drop → degraded, calls p50 / p99 | → quarantined, calls p50 / p99 |\n|---|---|---|\n" + strings.Join(delays, "\n"))
}
