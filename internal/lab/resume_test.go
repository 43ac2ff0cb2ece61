package lab_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/lab"
)

// callKey is modelSim's key of a trial's calls: the version's content
// with the query, as sent.
func callKey(system, query string) string { return system + "\x00" + query }

// TestKillResumesWithoutRerunningTrials: a lab copy killed in the middle
// of an experiment (its database connections cut first, as kill -9 leaves
// them) loses it to the second copy once its lease has expired; the
// second copy runs only the trials no one stored: the model server sees
// every stored trial exactly once.
func TestKillResumesWithoutRerunningTrials(t *testing.T) {
	w := newWorld(t)
	cfg := w.cfg
	cfg.Lab.Concurrency = 2
	w.model.SetLatency(100 * time.Millisecond)
	contents := map[int]string{1: "Answer to {q}.", 2: "A better answer to {q}."}
	a := w.start(cfg)
	w.version("p", 1, contents[1])
	w.version("p", 2, contents[2])
	req := w.request(map[string]any{"prompt_id": "p", "experiment_id": "exp-kill", "baseline_version": 1, "candidate_versions": []int{2},
		"test_queries": queries(15, ""), "judge_model": "judge-b"})
	w.eventually(30*time.Second, func() bool { return len(w.storedTrials("exp-kill")) >= 8 }, func() string { return "copy a stored too few trials" })
	w.start(cfg) // copy b, waiting
	before := w.storedTrials("exp-kill")
	a.kill()
	killed := time.Now()
	end := w.ending(req, time.Minute)
	t.Logf("copy a stored %d trials before the kill; copy b finished %s after it", len(before), time.Since(killed).Round(time.Millisecond))
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	d := decode(t, end)
	require.Equal(t, 30, d.CompletedTrials)
	require.Equal(t, 2, w.status("exp-kill").Attempts, "the crash is charged; the takeover is the second attempt")

	calls := w.sim.trialCalls()
	for _, step := range before {
		parts := strings.Split(step, "/") // trial/<version>/<query>/<repetition>
		v, _ := strconv.Atoi(parts[1])
		require.Equal(t, 1, calls[callKey(contents[v], "q"+parts[2])], "stored trial %s was run again", step)
	}
	total := 0
	for _, n := range calls {
		total += n
	}
	// A copy has twice its concurrency in trials under way (see Lab.trials).
	require.LessOrEqual(t, total, 30+2*cfg.Lab.Concurrency, "only the trials under way at the kill ran twice")
	require.Equal(t, 1, w.count(lab.TypeCompleted, req), "one result ends the experiment")
}

// TestTwoCopies: two copies share the work, every experiment runs once
// and ends once, and no trial is called twice.
func TestTwoCopies(t *testing.T) {
	w := newWorld(t)
	w.start(w.cfg)
	w.start(w.cfg)
	w.model.SetLatency(20 * time.Millisecond)
	w.version("p", 1, "Answer to {q}.")
	var ids []string
	for i := range 4 {
		id := fmt.Sprintf("exp-%d", i)
		ids = append(ids, id)
		w.request(map[string]any{"prompt_id": "p", "experiment_id": id, "test_queries": queries(5, ""), "repetitions": 2,
			"evaluation": map[string]any{"summary": false}})
	}
	for _, id := range ids {
		w.eventually(time.Minute, func() bool { return w.state(id) == "succeeded" }, func() string {
			return fmt.Sprintf("%s is %q", id, w.state(id))
		})
		require.Equal(t, 1, w.status(id).Attempts)
	}
	w.eventually(10*time.Second, func() bool {
		n := 0
		for _, ev := range w.published() {
			if ev.Type() == lab.TypeCompleted {
				n++
			}
		}
		return n == 4
	}, func() string { return w.describe() })
	// Four experiments of the same version and queries: each (version,
	// query) was called four times two repetitions, never more.
	for k, n := range w.sim.trialCalls() {
		require.Equal(t, 8, n, "trial %q", k)
	}
	require.Equal(t, 40, w.sim.calls(callJudge))
}

// TestReplayNeverRerunsAnExperiment: the lab's durable consumer and inbox
// are dropped and every event is delivered again from the start of the
// stream: the prompt events apply again, but the request finds its
// experiment and nothing runs, is refused or is published again.
func TestReplayNeverRerunsAnExperiment(t *testing.T) {
	w := newWorld(t)
	c := w.start(w.cfg)
	w.version("p", 1, "Answer to {q}.")
	req := w.request(map[string]any{"prompt_id": "p", "experiment_id": "exp-once", "test_queries": queries(3, "")})
	end := w.ending(req, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type())
	calls := w.sim.calls(callTrial) + w.sim.calls(callJudge) + w.sim.calls(callSummary)
	c.p.Stop()

	ctx := context.Background()
	require.NoError(t, w.nats.JS.DeleteConsumer(ctx, bus.StreamName, "lab"))
	_, err := w.pool.Exec(ctx, `DELETE FROM inbox WHERE consumer = 'lab' AND tenant_id = $1`, w.tenant)
	require.NoError(t, err)
	w.start(w.cfg)
	w.eventually(30*time.Second, func() bool {
		var n int
		require.NoError(t, w.pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE consumer = 'lab' AND tenant_id = $1 AND event_id = $2`,
			w.tenant, req.ID()).Scan(&n))
		return n == 1
	}, func() string { return "the request was not delivered again" })
	require.Equal(t, calls, w.sim.calls(callTrial)+w.sim.calls(callJudge)+w.sim.calls(callSummary), "no model call")
	require.Equal(t, 1, w.count(lab.TypeStarted, req))
	require.Equal(t, 1, w.count(lab.TypeCompleted, req))
	require.Zero(t, w.count(lab.TypeRejected, req))
	require.Equal(t, "succeeded", string(w.status("exp-once").State))
}
