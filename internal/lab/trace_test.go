package lab_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/lab"
)

// experiment.started and experiment.completed carry the request's trace
// context, the second although it is published from the job, long after
// the request was handled.
func TestResultsCarryTheRequestTrace(t *testing.T) {
	w := newWorld(t)
	w.start(w.cfg)
	w.version("traced", 1, shortAnswer, "production")
	w.version("traced", 2, longAnswer)
	ev, err := bus.NewEvent(lab.TypeRequested, w.tenant, "lab-test", map[string]any{
		"prompt_id": "traced", "experiment_id": "exp-trace", "candidate_versions": []int{2},
		"test_queries": queries(2, "search"), "repetitions": 1,
	})
	require.NoError(t, err)
	tc := bus.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "agent=exp"}
	tc.Set(&ev)
	w.publishEvent(ev)

	require.Equal(t, tc, bus.Trace(w.result(lab.TypeStarted, ev, 30*time.Second)))
	end := w.ending(ev, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	require.Equal(t, tc, bus.Trace(end))
}
