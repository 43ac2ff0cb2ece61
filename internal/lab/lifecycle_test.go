package lab_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/lab"
)

// simple is a request of one version and n queries, without the judge.
func simple(id string, n int) map[string]any {
	return map[string]any{"prompt_id": "p", "experiment_id": id, "test_queries": queries(n, ""),
		"evaluation": map[string]any{"llm_judge": false, "summary": false}}
}

// TestQueueAndTenantCap: with AGENTQ_LAB_MAX_RUNNING 2, a tenant's third
// and fourth experiments wait, in order, while another tenant's runs at
// once; when slots free up the waiting ones run.
func TestQueueAndTenantCap(t *testing.T) {
	w := newWorld(t)
	cfg := w.cfg
	cfg.Lab.MaxRunning = 2
	w.start(cfg)
	w.version("p", 1, "Answer to {q}.")
	w.sim.hold()
	var reqs []event.Event
	for i := range 4 {
		reqs = append(reqs, w.request(simple(fmt.Sprintf("exp-%d", i), 1)))
	}
	for _, r := range reqs {
		w.result(lab.TypeStarted, r, 30*time.Second)
	}
	w.eventually(30*time.Second, func() bool { return w.sim.held() == 2 }, func() string {
		return fmt.Sprintf("%d trials held, want 2", w.sim.held())
	})
	require.Equal(t, job.Running, w.status("exp-0").State)
	require.Equal(t, job.Running, w.status("exp-1").State)
	require.Equal(t, job.Queued, w.status("exp-2").State)
	require.Equal(t, job.Queued, w.status("exp-3").State)

	// Another tenant is not held up by this one's cap.
	other := newWorldOn(t, w)
	other.version("p", 1, "Answer to {q}.")
	oreq := other.request(simple("exp-other", 1))
	other.eventually(30*time.Second, func() bool { return w.sim.held() == 3 }, func() string {
		return fmt.Sprintf("the other tenant's experiment did not start: %d trials held", w.sim.held())
	})
	w.sim.release()
	for _, r := range append(reqs, oreq) {
		wld := w
		if r.ID() == oreq.ID() {
			wld = other
		}
		end := wld.ending(r, time.Minute)
		require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	}
	// The queue kept its order.
	s2, s3 := w.status("exp-2"), w.status("exp-3")
	require.False(t, s3.StartedAt.Before(*s2.StartedAt), "exp-3 started before exp-2")
}

// newWorldOn is a second tenant on w's NATS, database and model.
func newWorldOn(t *testing.T, w *world) *world {
	t.Helper()
	o := &world{t: t, nats: w.nats, pool: w.pool, dbURL: w.dbURL, model: w.model, sim: w.sim, tenant: w.tenant + "b", cfg: w.cfg, pub: w.pub}
	for _, subj := range lab.ResultSubjects {
		sub, err := w.nats.NC.Subscribe(subj[:len(subj)-1]+o.tenant, func(m *nats.Msg) {
			ev, err := bus.Decode(m.Header, m.Data)
			if err == nil {
				o.mu.Lock()
				o.results = append(o.results, ev)
				o.mu.Unlock()
			}
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, w.nats.NC.Flush())
	return o
}

// TestCancel: experiment.cancelled stops a running experiment within
// seconds, its later trials never run, and a queued one ends without
// running; both end with experiment.failed (cancelled) and the report of
// what was done.
func TestCancel(t *testing.T) {
	w := newWorld(t)
	cfg := w.cfg
	cfg.Lab.MaxRunning, cfg.Lab.Concurrency = 1, 1
	w.start(cfg)
	w.version("p", 1, "Answer to {q}.")
	w.sim.holdQuery("q1")
	running := w.request(simple("exp-running", 5))
	w.eventually(30*time.Second, func() bool { return w.sim.held() == 1 }, func() string { return "the second trial never started" })
	require.Len(t, w.storedTrials("exp-running"), 1)
	queued := w.request(simple("exp-queued", 2))
	w.result(lab.TypeStarted, queued, 30*time.Second)
	require.Equal(t, job.Queued, w.status("exp-queued").State)

	// Cancelled while it waits behind the running one: it never runs.
	w.publish(lab.TypeCancelled, map[string]any{"experiment_id": "exp-queued"})
	qend := w.ending(queued, 10*time.Second)
	require.Equal(t, lab.TypeFailed, qend.Type())
	require.Equal(t, "cancelled", decode(t, qend).ReasonCode)
	require.Zero(t, decode(t, qend).CompletedTrials)
	require.Equal(t, job.Running, w.status("exp-running").State)

	asked := time.Now()
	w.publish(lab.TypeCancelled, map[string]any{"experiment_id": "exp-running", "reason": "wrong queries", "cancelled_by": "ana"})
	end := w.ending(running, 10*time.Second)
	t.Logf("cancelled %s after the request", time.Since(asked).Round(time.Millisecond))
	require.Less(t, time.Since(asked), 5*time.Second, "stopped within seconds")
	require.Equal(t, lab.TypeFailed, end.Type())
	d := decode(t, end)
	require.Equal(t, "cancelled", d.ReasonCode)
	require.Contains(t, d.Reason, "wrong queries (by ana)")
	require.Equal(t, 1, d.CompletedTrials, "the report covers the trial done")
	require.Equal(t, 1, d.Report.Versions[0].Trials)
	require.Equal(t, job.Cancelled, w.status("exp-running").State)

	w.sim.release()
	require.Equal(t, 2, w.sim.calls(callTrial), "the held trial was the last call: nothing ran after the cancel")
	var status string
	require.NoError(t, w.pool.QueryRow(context.Background(),
		`SELECT status FROM lab_experiments WHERE tenant_id = $1 AND experiment_id = 'exp-queued'`, w.tenant).Scan(&status))
	require.Equal(t, "cancelled", status)
}

// TestTimeoutPartialReport: an experiment that outlives AGENTQ_LAB_TIMEOUT
// fails with reason timeout and the report of the trials it finished.
func TestTimeoutPartialReport(t *testing.T) {
	w := newWorld(t)
	cfg := w.cfg
	cfg.Lab.Timeout, cfg.Lab.Concurrency = 2*time.Second, 1
	w.start(cfg)
	w.version("p", 1, "Answer to {q}.")
	w.version("p", 2, "Other answer to {q}.")
	w.model.SetLatency(300 * time.Millisecond)
	req := w.request(map[string]any{"prompt_id": "p", "baseline_version": 1, "candidate_versions": []int{2},
		"test_queries": queries(20, ""), "evaluation": map[string]any{"llm_judge": false}})
	end := w.ending(req, 30*time.Second)
	require.Equal(t, lab.TypeFailed, end.Type())
	d := decode(t, end)
	require.Equal(t, "timeout", d.ReasonCode)
	require.Contains(t, d.Reason, "ran out of its 2s (AGENTQ_LAB_TIMEOUT)")
	require.Equal(t, 40, d.TotalTrials)
	require.Positive(t, d.CompletedTrials)
	require.Less(t, d.CompletedTrials, 40)
	require.Len(t, w.storedTrials(req.ID()), d.CompletedTrials)
	require.Len(t, d.Report.Versions, 2, "a partial report of both versions")
	require.Equal(t, d.CompletedTrials, d.Report.Versions[0].Trials+d.Report.Versions[1].Trials)
	require.Empty(t, d.Summary)
}

// TestProviderTrouble: a 429 is waited out as Retry-After asks and the
// trial succeeds; a call that still fails is a trial error, counted in
// error_rate, and the experiment completes.
func TestProviderTrouble(t *testing.T) {
	w := newWorld(t)
	cfg := w.cfg
	cfg.Lab.Concurrency = 1
	w.start(cfg)
	w.version("p", 1, "Answer to {q}.")
	w.version("p", 2, "EMPTY")
	w.model.FailNext(1, 429, "1")
	req := w.request(map[string]any{"prompt_id": "p", "baseline_version": 1, "candidate_versions": []int{2},
		"test_queries": queries(2, ""), "evaluation": map[string]any{"llm_judge": false, "summary": false}})
	end := w.ending(req, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	d := decode(t, end)
	require.Equal(t, 0.0, d.Report.Versions[0].ErrorRate)
	require.Equal(t, 1.0, d.Report.Versions[0].PassRate, "the rate-limited trial was retried and passed")
	require.Equal(t, 1.0, d.Report.Versions[1].ErrorRate)
	require.Equal(t, 0.0, d.Report.Versions[1].PassRate)
	require.Equal(t, 1, w.model.Answered(429))
	trials := w.trials(req.ID()) // by step: version 1's, then version 2's
	require.Len(t, trials, 4)
	require.Equal(t, 1, trials[0].Version)
	require.GreaterOrEqual(t, trials[0].DurationMs, 1000.0, "the retry waited the second Retry-After asked for")
	require.Empty(t, trials[0].Error)
	require.Equal(t, 2, trials[2].Version)
	require.Contains(t, trials[2].Error, "answer is empty")
	require.Empty(t, trials[2].Tiers)
}
