package lab_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/lab"
)

// BenchmarkExperimentWallTime measures, not asserts, how close an
// experiment comes to the ideal wall time: 3 versions × 20 queries × 3
// repetitions with the judge on, at AGENTQ_LAB_CONCURRENCY 8, against
// providertest answering every call after a fixed 100 ms. The ideal is
// model calls × 100 ms / 8; the figure is the wall time, from the request
// published to experiment.completed received, over it; the median of the
// runs (target ≤ 1.2):
//
//	go test -run '^$' -bench ExperimentWallTime -benchtime 3x ./internal/lab/
func BenchmarkExperimentWallTime(b *testing.B) {
	const latency = 100 * time.Millisecond
	w := newWorld(b)
	cfg := w.cfg
	cfg.Lab.Concurrency = 8
	w.start(cfg)
	w.model.SetLatency(latency)
	for v := 1; v <= 3; v++ {
		w.version("bench", v, fmt.Sprintf("Answer %d: a great answer to {q}.", v))
	}
	var ratios []float64
	b.ResetTimer()
	for i := range b.N {
		calls := w.model.ChatRequests()
		start := time.Now()
		req := w.request(map[string]any{
			"prompt_id": "bench", "experiment_id": fmt.Sprintf("bench-%d", i), "baseline_version": 1, "candidate_versions": []int{2, 3},
			"test_queries": queries(20, ""), "repetitions": 3, "judge_model": "judge-b",
		})
		end := w.ending(req, 5*time.Minute)
		wall := time.Since(start)
		require.Equal(b, lab.TypeCompleted, end.Type(), string(end.Data()))
		n := w.model.ChatRequests() - calls
		ideal := time.Duration(n) * latency / time.Duration(cfg.Lab.Concurrency)
		ratio := wall.Seconds() / ideal.Seconds()
		ratios = append(ratios, ratio)
		b.Logf("run %d: %d model calls (180 trials, %d judge calls, 1 summary), wall %s, ideal %s, ratio %.3f",
			i, n, n-181, wall.Round(time.Millisecond), ideal.Round(time.Millisecond), ratio)
	}
	b.StopTimer()
	// The median: one run slowed by a neighbour on a shared machine does
	// not move it.
	slices.Sort(ratios)
	median := ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		median = (ratios[len(ratios)/2-1] + median) / 2
	}
	b.ReportMetric(median, "x-ideal")
}
