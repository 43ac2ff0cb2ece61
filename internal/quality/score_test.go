package quality

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
)

func TestQualityFormula(t *testing.T) {
	type call struct {
		ok      bool
		latency float64
	}
	tests := []struct {
		name       string
		calls      []call
		ratings    []float64
		feedback   []float64
		quality    float64
		success    float64
		consec     int
		avgLatency float64
	}{
		{name: "no observations: both priors", quality: 0.5 * 0.5},
		{name: "one success, no ratings", calls: []call{{true, 10}}, quality: (2.0 / 3) * 0.5, success: 1, avgLatency: 10},
		{name: "one failure", calls: []call{{false, 30}}, quality: (1.0 / 3) * 0.5, success: 0, consec: 1, avgLatency: 30},
		{
			name:    "rated tool: ratings pull R away from the prior",
			calls:   []call{{true, 10}, {true, 20}, {false, 30}, {true, -1}},
			ratings: []float64{0.9, 0.8, 0.1, 1},
			quality: (4.0 / 6) * ((0.9 + 0.8 + 0.1 + 1 + 1) / 6),
			success: 0.75, avgLatency: 20,
		},
		{
			name:     "feedback counts double",
			calls:    []call{{true, 5}},
			ratings:  []float64{1},
			feedback: []float64{0},
			quality:  (2.0 / 3) * ((1 + 2*0 + 1) / (1 + 2 + 2.0)),
			success:  1, avgLatency: 5,
		},
		{
			name:    "consecutive failures reset by a success",
			calls:   []call{{false, 1}, {false, 1}, {true, 1}, {false, 1}, {false, 1}, {false, 1}},
			quality: (2.0 / 8) * 0.5, success: 1.0 / 6, consec: 3, avgLatency: 1,
		},
		{
			name:    "out-of-range ratings are clamped",
			ratings: []float64{7, -3, math.NaN()},
			quality: 0.5 * ((1 + 0 + 0 + 1) / 5.0),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Metrics
			for i, c := range tc.calls {
				m.Call(c.ok, c.latency, int64(i+1))
			}
			for _, r := range tc.ratings {
				m.Rate(r)
			}
			for _, f := range tc.feedback {
				m.Feedback(f)
			}
			require.InDelta(t, tc.quality, m.Quality(), 1e-12)
			require.InDelta(t, tc.success, m.SuccessRate(), 1e-12)
			require.Equal(t, tc.consec, m.ConsecutiveFailures)
			ch := m.Changed(20)
			require.Equal(t, int64(len(tc.calls)), ch.TotalCalls)
			if tc.avgLatency > 0 {
				require.NotNil(t, ch.AvgLatencyMs)
				require.InDelta(t, tc.avgLatency, *ch.AvgLatencyMs, 1e-9)
			} else {
				require.Nil(t, ch.AvgLatencyMs, "no latency reported without measurements")
			}
			require.Equal(t, len(tc.ratings) == 0, ch.AvgRating == nil, "avg_rating omitted exactly when there are no ratings")
		})
	}
}

func TestRecentWindow(t *testing.T) {
	tests := []struct {
		name   string
		window int
		calls  []bool
		want   float64
		n      int
	}{
		{"empty", 5, nil, 0, 0},
		{"partial window", 5, []bool{true, false, true}, 2.0 / 3, 3},
		{"old outcomes fall out", 3, []bool{false, false, false, true, true, true}, 1, 3},
		{"newest failures dominate", 4, []bool{true, true, true, true, false, false}, 0.5, 4},
		{"full 64-bit window", 64, append(make([]bool, 10), trues(64)...), 1, 64},
		{"window larger than the calls", 100, append(trues(64), false), 64.0 / 65, 65},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Metrics
			for i, ok := range tc.calls {
				m.Call(ok, -1, int64(i+1))
			}
			score, n := m.Recent(tc.window)
			require.InDelta(t, tc.want, score, 1e-12)
			require.Equal(t, tc.n, n)
		})
	}
}

func trues(n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = true
	}
	return out
}

// The state is a function of the set of calls and their stream sequences:
// every order gives the same state, streak and window included.
func TestStateDoesNotDependOnOrder(t *testing.T) {
	type call struct {
		ok  bool
		seq int64
	}
	tests := []struct {
		name   string
		calls  []call // in stream order
		streak int
	}{
		{"fail then success", []call{{false, 1}, {true, 2}}, 0},
		{"success then fails", []call{{true, 1}, {false, 2}, {false, 3}}, 2},
		{"mixed", []call{{false, 1}, {true, 3}, {false, 4}, {true, 7}, {false, 8}, {false, 9}, {false, 12}}, 3},
		{"only failures", []call{{false, 2}, {false, 5}, {false, 9}}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ref Metrics
			for _, c := range tc.calls {
				ref.Call(c.ok, 10, c.seq)
			}
			require.Equal(t, tc.streak, ref.ConsecutiveFailures)
			rng := rand.New(rand.NewPCG(1, 2))
			for range 50 {
				perm := rng.Perm(len(tc.calls))
				var m Metrics
				for _, i := range perm {
					m.Call(tc.calls[i].ok, 10, tc.calls[i].seq)
				}
				require.Equal(t, ref, m, "order %v", perm)
			}
		})
	}
}

// The documented bound: a call more than HistoryDepth calls late counts in
// the totals but not in the window.
func TestLateCallBeyondTheHistory(t *testing.T) {
	var m Metrics
	for i := range HistoryDepth {
		m.Call(false, -1, int64(1000+i))
	}
	m.Call(true, -1, 1) // far older than everything kept
	require.Equal(t, int64(HistoryDepth+1), m.TotalCalls)
	require.Equal(t, int64(1), m.Successes)
	require.Len(t, m.History, HistoryDepth)
	require.Equal(t, HistoryDepth, m.ConsecutiveFailures, "the newer failures are still the streak")
	score, n := m.Recent(20)
	require.Zero(t, score)
	require.Equal(t, 20, n)
}

// JSON Schema's integer admits 2.0; the scorer must read it as version 2,
// not fail the event.
func TestVersionWrittenAsFloat(t *testing.T) {
	for _, tc := range []struct {
		data string
		want []Key
	}{
		{`{"prompt_id":"router","version":2.0,"success":true}`, []Key{{"acme", TargetPrompt, "router@2"}}},
		{`{"prompt_id":"router","version":2,"success":true}`, []Key{{"acme", TargetPrompt, "router@2"}}},
		{`{"prompt_id":"router","version":2.5,"success":true}`, nil},
	} {
		ev := event.New()
		ev.SetID("e1")
		ev.SetType(TypePromptUsed)
		ev.SetSource("test")
		require.NoError(t, ev.SetData("application/json", []byte(tc.data)))
		ms := Compute([]*bus.Delivery{{Event: ev, Tenant: "acme", StreamSeq: 1}})
		var keys []Key
		for _, m := range ms {
			keys = append(keys, m.Key)
			require.Equal(t, 2, m.PromptVersion)
		}
		require.Equal(t, tc.want, keys, tc.data)
	}
}

// A copy of an event later in the stream may be applied before the
// original; re-filing it at the original's sequence (what the inbox's
// Claimed.Moved asks for) must give the state of the stream folded in
// order, where only the first copy counts. Small histories in any order,
// and long ones whose events arrive less than HistoryDepth calls late.
func TestRefileEqualsFoldingAtTheOriginal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	key := Key{"acme", TargetTool, "t"}
	for iter := range 400 {
		events, window, spread := 1+rng.IntN(40), 0, 8
		if iter%4 == 0 {
			events, window, spread = 200+rng.IntN(300), 40, 20
		}
		obs := make([]observation, events)
		for i := range obs {
			o := observation{key: key, toolName: "t", latencyMs: -1}
			switch r := rng.IntN(5); {
			case r < 2:
				o.kind, o.success = obsCall, true
			case r < 4:
				o.kind = obsCall
			default:
				o.kind, o.rating = obsRating, ptr(float64(rng.IntN(11))/10)
			}
			obs[i] = o
		}
		// The stream: every event, and copies of some a little later.
		var stream []int
		var pending []int
		for i := range events {
			stream = append(stream, i)
			if rng.IntN(3) == 0 {
				pending = append(pending, i)
			}
			for len(pending) > 0 && (rng.IntN(spread) == 0 || len(pending) > spread) {
				stream = append(stream, pending[0])
				pending = pending[1:]
			}
		}
		stream = append(stream, pending...)

		want := Metrics{Key: key}
		seen := map[int]bool{}
		for p, i := range stream {
			if !seen[i] {
				seen[i] = true
				want.apply(obs[i], int64(p+1))
			}
		}

		// Delivered in another order: shuffled whole, or within windows.
		order := rng.Perm(len(stream))
		if window > 0 {
			for p := range order {
				order[p] = p
			}
			for p := 0; p < len(order); p += window {
				w := order[p:min(p+window, len(order))]
				rng.Shuffle(len(w), func(a, b int) { w[a], w[b] = w[b], w[a] })
			}
		}
		got := Metrics{Key: key}
		applied := map[int]int64{} // event → the sequence it is filed at
		for _, p := range order {
			i, seq := stream[p], int64(p+1)
			switch at, ok := applied[i]; {
			case !ok:
				got.apply(obs[i], seq)
				applied[i] = seq
			case seq < at:
				got.refile(obs[i], at, seq)
				applied[i] = seq
			}
		}
		want.newest, got.newest = nil, nil
		require.Equal(t, want, got, "iteration %d: stream %v, delivered as %v", iter, stream, order)
	}
}

// The documented bound: when the newest success moves back behind a full
// history of newer failures, the window and totals stay exact and the
// streak counts the failures still kept; the next call mends the history.
func TestRefileBeyondTheHistory(t *testing.T) {
	var m Metrics
	success := observation{kind: obsCall, success: true, latencyMs: -1}
	failure := observation{kind: obsCall, latencyMs: -1}
	for i := range HistoryDepth + 50 {
		m.apply(failure, int64(1000+i))
	}
	m.apply(success, 5000) // a copy of the success at 1, applied first
	require.Zero(t, m.ConsecutiveFailures)
	m.refile(success, 5000, 1)

	require.Equal(t, int64(HistoryDepth+51), m.TotalCalls)
	require.Equal(t, int64(HistoryDepth+51), m.StateVersion)
	require.Equal(t, int64(1000+HistoryDepth+49), m.AsOfSeq, "as_of_seq: the newest failure")
	require.Equal(t, int64(1), m.LastSuccessSeq)
	require.Len(t, m.History, HistoryDepth-1, "one short: what lies beyond the history is not known")
	require.Equal(t, HistoryDepth-1, m.ConsecutiveFailures, "the streak counts the failures kept")
	score, n := m.Recent(20)
	require.Zero(t, score)
	require.Equal(t, 20, n)

	m.apply(failure, 6000)
	require.Len(t, m.History, HistoryDepth)
	require.Equal(t, int64(-6000), m.History[0])
	require.Equal(t, int64(-(1000 + 51)), m.History[HistoryDepth-1], "the newest calls, exactly")
}
