package quality

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
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
			for _, c := range tc.calls {
				m.Call(c.ok, c.latency, 20)
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
			ch := m.Changed()
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
		{"window above 64 is capped", 100, append(trues(64), false), 63.0 / 64, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Metrics
			for _, ok := range tc.calls {
				m.Call(ok, -1, tc.window)
			}
			require.InDelta(t, tc.want, m.RecentScore(), 1e-12)
			require.Equal(t, tc.n, m.RecentCount)
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
