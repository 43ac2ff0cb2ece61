package lab_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// TestRebuildNeverDecidesAnAnsweredRequestAgain: a request refused before
// the lab recorded its decisions (here: refused for want of a model, its
// lab_commands row removed as before migration 00027) is not decided again
// by a rebuild that has a model: its answer is on the stream, so the
// rebuild records it as decided and neither starts it nor answers again.
func TestRebuildNeverDecidesAnAnsweredRequestAgain(t *testing.T) {
	w := newWorld(t)
	cfg := w.cfg
	cfg.LLM.BaseURL, cfg.LLM.Model = "", ""
	c := w.start(cfg)
	w.version("p", 1, longAnswer)
	req := w.request(map[string]any{"prompt_id": "p", "experiment_id": "exp-refused", "test_queries": queries(1, "")})
	require.Equal(t, lab.ReasonNoModel, w.refused(req, 10*time.Second).ReasonCode)
	c.p.Stop()
	ctx := context.Background()
	_, err := w.pool.Exec(ctx, `DELETE FROM lab_commands WHERE tenant_id = $1`, w.tenant)
	require.NoError(t, err)

	llm, err := provider.NewChat(provider.Options{BaseURL: w.model.URL, Model: "model-a"})
	require.NoError(t, err)
	target, err := lab.RebuildTarget(w.pool, lab.Options{LLM: llm, Model: "model-a"}, testenv.Logger(t))
	require.NoError(t, err)
	reg, err := schemas.Load()
	require.NoError(t, err)
	rep, err := replay.Rebuild(ctx, w.nats.JS, w.pool, reg, target, replay.Options{Tenant: w.tenant, Log: testenv.Logger(t)})
	require.NoError(t, err)
	require.Zero(t, rep.Owed, "nothing to publish")

	var experiments, jobs, decided int
	require.NoError(t, w.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM lab_experiments WHERE tenant_id = $1),
		(SELECT count(*) FROM jobs WHERE tenant_id = $1),
		(SELECT count(*) FROM lab_commands WHERE tenant_id = $1 AND event_id = $2)`, w.tenant, req.ID()).Scan(&experiments, &jobs, &decided))
	require.Equal(t, [3]int{0, 0, 1}, [3]int{experiments, jobs, decided}, "not started; recorded as decided")
	require.Equal(t, 1, w.count(lab.TypeRejected, req))
	require.Zero(t, w.count(lab.TypeStarted, req))
	require.Zero(t, w.model.Requests())
}

// TestRebuildNeverDecidesAnAcceptedCancellationAgain: a cancellation the
// lab accepted before it recorded its decisions (its lab_commands row
// removed, as before migration 00027) has no answer of its own on the
// stream; the experiment's end answers it. A rebuild does not decide it
// again (it would refuse it: the experiment has ended since), but records
// it as decided; a cancellation no copy had decided, of an experiment that
// ended without one, the rebuild refuses as any copy would.
func TestRebuildNeverDecidesAnAcceptedCancellationAgain(t *testing.T) {
	w := newWorld(t)
	c := w.start(w.cfg)
	w.version("p", 1, "Answer to {q}.")
	w.sim.holdQuery("q0")
	running := w.request(simple("exp-cancelled", 2))
	w.eventually(30*time.Second, func() bool { return w.sim.held() == 1 }, func() string { return "the trial never started" })
	cancel := w.publish(lab.TypeCancelled, map[string]any{"experiment_id": "exp-cancelled", "reason": "enough"})
	end := w.ending(running, 30*time.Second)
	require.Equal(t, lab.TypeFailed, end.Type())
	require.Equal(t, "cancelled", decode(t, end).ReasonCode)
	w.sim.release()
	done := w.request(simple("exp-done", 1))
	require.Equal(t, lab.TypeCompleted, w.ending(done, 30*time.Second).Type())
	c.p.Stop()
	late := w.publish(lab.TypeCancelled, map[string]any{"experiment_id": "exp-done"}) // no copy running: undecided
	ctx := context.Background()
	_, err := w.pool.Exec(ctx, `DELETE FROM lab_commands WHERE tenant_id = $1 AND event_id = $2`, w.tenant, cancel.ID())
	require.NoError(t, err)

	target, err := lab.RebuildTarget(w.pool, lab.Options{LLM: nil, Model: "model-a"}, testenv.Logger(t))
	require.NoError(t, err)
	reg, err := schemas.Load()
	require.NoError(t, err)
	rep, err := replay.Rebuild(ctx, w.nats.JS, w.pool, reg, target, replay.Options{Tenant: w.tenant, Log: testenv.Logger(t)})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Owed, "the refusal of the undecided cancellation, and only it")
	var decided int
	require.NoError(t, w.pool.QueryRow(ctx, `SELECT count(*) FROM lab_commands WHERE tenant_id = $1 AND event_id IN ($2, $3)`,
		w.tenant, cancel.ID(), late.ID()).Scan(&decided))
	require.Equal(t, 2, decided, "both recorded as decided")

	// A running copy's relay publishes what the rebuild owes.
	w.start(w.cfg)
	r := w.refused(late, 30*time.Second)
	require.Equal(t, lab.ReasonFinished, r.ReasonCode)
	require.Zero(t, w.count(lab.TypeRejected, cancel))
	require.Equal(t, uint64(1), countSubject(t, w.nats.JS, "lab.rejected."+w.tenant))
	require.Equal(t, uint64(1), countSubject(t, w.nats.JS, "experiment.failed."+w.tenant))
	require.Equal(t, job.Cancelled, w.status("exp-cancelled").State)
}
