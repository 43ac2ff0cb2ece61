package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// TestAutoCandidatesRejectedFailAtOnce: a run from feedback whose
// candidates the real indexer rejects (the prompt's newest version is the
// largest there is, so a create without a version has none to take:
// version_exhausted) fails as soon as the indexer has answered, not at its
// timeout: experiment.failed once, reason_code candidate_rejected, its
// reason naming each rejection's code and message as the indexer gave
// them. A rebuild of the lab afterwards, with the lab running, publishes
// nothing again, calls no model, and restores the read model: the
// rejections with their reasons, no version for either candidate, the
// experiment as it ended.
func TestAutoCandidatesRejectedFailAtOnce(t *testing.T) {
	a := newAutoWorld(t)
	var mu sync.Mutex
	rejections := map[string]map[string]any{} // indexer.rejected data by the rejected event's id
	sub, err := a.nats.NC.Subscribe("indexer.rejected."+a.tenant, func(m *nats.Msg) {
		ev, err := bus.Decode(m.Header, m.Data)
		if err != nil {
			return
		}
		var data map[string]any
		if json.Unmarshal(ev.Data(), &data) == nil {
			mu.Lock()
			rejections[bus.Causation(ev)] = data
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, a.nats.NC.Flush())

	cfg := a.cfg
	cfg.Lab.Timeout = 10 * time.Minute // waiting for it would outlast the test's waits below
	a.startWith(cfg, a.opts())
	a.publish(bus.Type("prompt", "created"), map[string]any{
		"id": a.prompt, "type": "system", "name": "Support answer", "content": poorAnswer, "version": math.MaxInt32,
	})
	a.eventually(30*time.Second, func() bool { return len(a.indexedEvents()) == 1 }, func() string { return "the indexer never indexed the baseline" })
	for i := range 5 {
		a.negative(fmt.Sprintf("rq%d", i))
	}
	req := a.request(map[string]any{"prompt_id": a.prompt, "experiment_id": "exp-rejected",
		"auto": map[string]any{"candidate_count": 2}, "evaluation": map[string]any{"summary": false}})
	require.Equal(t, lab.TypeStarted, a.result(lab.TypeStarted, req, 20*time.Second).Type())

	end := a.ending(req, 45*time.Second)
	require.Equal(t, lab.TypeFailed, end.Type(), string(end.Data()))
	created := a.labCreated()
	require.Len(t, created, 2, "both candidates published")
	mu.Lock()
	require.Len(t, rejections, 2, "the indexer rejected both")
	var why []string
	strategies := []string{"targeted_fix", "answer_structure"}
	for i, c := range created {
		r := rejections[c.ID()]
		require.Equal(t, "version_exhausted", r["reason_code"], "candidate %d", i+1)
		require.Contains(t, r["reason"], "2147483647")
		why = append(why, fmt.Sprintf("candidate %d (%s): the indexer rejected its prompt.created %s: version_exhausted: %s",
			i+1, strategies[i], c.ID(), r["reason"]))
	}
	indexerReasons := reasonsOf(rejections)
	mu.Unlock()
	wantReason := "no usable candidate: " + strings.Join(why, "; ")

	d := decode(t, end)
	require.Equal(t, lab.ReasonCandidateRejected, d.ReasonCode)
	require.Equal(t, wantReason, d.Reason)
	require.Equal(t, math.MaxInt32, d.BaselineVersion)
	require.Zero(t, d.CompletedTrials)
	var ad autoData
	require.NoError(t, json.Unmarshal(end.Data(), &ad))
	require.Empty(t, ad.CandidateVersions)
	require.Len(t, ad.Auto.Candidates, 2)
	for i, c := range ad.Auto.Candidates {
		require.Equal(t, lab.CandidateReport{Strategy: strategies[i], Changelog: "Answers in full (" + strategies[i] + ").",
			EventID: created[i].ID(), Error: strings.TrimPrefix(why[i], fmt.Sprintf("candidate %d (%s): ", i+1, strategies[i]))}, c)
	}

	// The experiment's row says what the result says.
	ctx := context.Background()
	type row struct {
		Status, ReasonCode, Reason string
		Candidates                 []int
	}
	readRow := func() row {
		var r row
		require.NoError(t, a.pool.QueryRow(ctx, `
			SELECT status, reason_code, reason, candidate_versions FROM lab_experiments WHERE tenant_id = $1 AND experiment_id = $2`,
			a.tenant, "exp-rejected").Scan(&r.Status, &r.ReasonCode, &r.Reason, &r.Candidates))
		return r
	}
	wantRow := row{Status: "failed", ReasonCode: lab.ReasonCandidateRejected, Reason: wantReason, Candidates: []int{}}
	require.Equal(t, wantRow, readRow())

	// A rebuild of the lab, the lab running.
	calls := a.model.Requests()
	llm, err := provider.NewChat(provider.Options{BaseURL: a.model.URL, Model: "model-a"})
	require.NoError(t, err)
	target, err := lab.RebuildTarget(a.pool, lab.Options{LLM: llm, Model: "model-a"}, testenv.Logger(t))
	require.NoError(t, err)
	reg, err := schemas.Load()
	require.NoError(t, err)
	rep, err := replay.Rebuild(ctx, a.nats.JS, a.pool, reg, target, replay.Options{Tenant: a.tenant, Log: testenv.Logger(t)})
	require.NoError(t, err)
	require.Zero(t, rep.Owed, "nothing to publish")

	rows, err := a.pool.Query(ctx, `
		SELECT cause_id, coalesce(reason_code, ''), coalesce(reason, '') FROM lab_prompt_results
		WHERE tenant_id = $1 AND version IS NULL`, a.tenant)
	require.NoError(t, err)
	stored := map[string]map[string]any{}
	var cause, code, reason string
	_, err = pgx.ForEachRow(rows, []any{&cause, &code, &reason}, func() error {
		stored[cause] = map[string]any{"reason_code": code, "reason": reason}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, indexerReasons, stored, "each rejection with the indexer's code and message")
	var versions []int
	rows, err = a.pool.Query(ctx, `SELECT version FROM lab_prompt_versions WHERE tenant_id = $1 ORDER BY version`, a.tenant)
	require.NoError(t, err)
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{math.MaxInt32}, versions, "the baseline alone")
	require.Equal(t, wantRow, readRow())
	require.Equal(t, calls, a.model.Requests(), "no model call")
	require.Equal(t, uint64(1), countSubject(t, a.nats.JS, "experiment.failed."+a.tenant), "failed once")
	require.Equal(t, uint64(1), countSubject(t, a.nats.JS, "experiment.started."+a.tenant), "started once")
	require.Zero(t, countSubject(t, a.nats.JS, "lab.rejected."+a.tenant))
	require.Equal(t, 1, a.count(lab.TypeFailed, req))
	require.Equal(t, uint64(3), countSubject(t, a.nats.JS, "prompt.created."+a.tenant), "the baseline and the two candidates, once")
}

// reasonsOf keeps reason_code and reason of each indexer.rejected.
func reasonsOf(in map[string]map[string]any) map[string]map[string]any {
	out := make(map[string]map[string]any, len(in))
	for k, v := range in {
		out[k] = map[string]any{"reason_code": v["reason_code"], "reason": v["reason"]}
	}
	return out
}

// TestAutoRunKeepsItsFeedbackThroughAPrune: a run from feedback accepted
// while the tenant's slot is taken, whose feedback rows are then pruned
// (past AGENTQ_LAB_FEEDBACK_RETENTION) before it starts, still analyses
// and generates from that feedback: it took its samples when it was
// accepted.
func TestAutoRunKeepsItsFeedbackThroughAPrune(t *testing.T) {
	a := newAutoWorld(t)
	cfg := a.cfg
	cfg.Lab.MaxRunning = 1
	a.startWith(cfg, a.opts())
	a.baseline()
	a.sim.holdQuery("block")
	blocker := a.request(map[string]any{"prompt_id": a.prompt, "experiment_id": "exp-blocker", "baseline_version": 1,
		"test_queries": []map[string]any{{"query": "block"}}, "evaluation": map[string]any{"summary": false, "llm_judge": false}})
	a.eventually(30*time.Second, func() bool { return a.sim.held() == 1 }, func() string { return "the blocker never ran; " + a.describe() })
	for i := range 5 {
		a.negative(fmt.Sprintf("pq%d", i))
	}
	req := a.request(map[string]any{"prompt_id": a.prompt, "experiment_id": "exp-pruned",
		"auto": map[string]any{"candidate_count": 1}, "evaluation": map[string]any{"summary": false}})
	var st map[string]any
	require.NoError(t, json.Unmarshal(a.result(lab.TypeStarted, req, 20*time.Second).Data(), &st))
	require.Equal(t, true, st["queued"])

	// Time passes: the feedback is past a retention of an hour, and a
	// copy's prune deletes it.
	ctx := context.Background()
	_, err := a.pool.Exec(ctx, `UPDATE lab_feedback SET submitted_at = now() - interval '2 hours' WHERE tenant_id = $1`, a.tenant)
	require.NoError(t, err)
	pcfg := cfg.Lab
	pcfg.FeedbackRetention = time.Hour
	pruner, err := lab.New(a.pool, outbox.Discard, lab.Options{Lab: pcfg}, testenv.Logger(t))
	require.NoError(t, err)
	used, err := bus.NewEvent(bus.Type("prompt", "used"), a.tenant, "test", map[string]any{"prompt_id": a.prompt, "run_id": "r", "input": "q"})
	require.NoError(t, err)
	require.Equal(t, []error{nil}, pruner.HandleBatch(ctx, []*bus.Delivery{{Event: used, Tenant: a.tenant, StreamSeq: 1 << 40, Time: time.Now()}}))
	var rows int
	require.NoError(t, a.pool.QueryRow(ctx, `SELECT count(*) FROM lab_feedback WHERE tenant_id = $1`, a.tenant).Scan(&rows))
	require.Zero(t, rows, "the feedback pruned")

	a.sim.release()
	require.Equal(t, lab.TypeCompleted, a.ending(blocker, time.Minute).Type())
	end := a.ending(req, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	var ad autoData
	require.NoError(t, json.Unmarshal(end.Data(), &ad))
	require.Equal(t, 5, ad.Auto.NegativeFeedback)
	require.Equal(t, 5, ad.Auto.FeedbackSamples)
	require.Equal(t, []int{2}, ad.CandidateVersions)
	spec := a.spec("exp-pruned")
	analyses, gens := a.gen.counts()
	require.Equal(t, 1, analyses)
	require.Equal(t, map[string]int{"targeted_fix": 1}, gens)
	prompts := a.gen.prompts()
	require.Len(t, prompts, 2)
	for _, p := range prompts {
		for i, q := range spec.Queries {
			fenced := "\n" + q.Query + "\n<<<END USER_QUERY"
			if slices.Contains(spec.Auto.HeldOut, i) {
				require.NotContains(t, p, fenced, "held-out query %q was shown", q.Query)
			} else {
				require.Contains(t, p, fenced, "the analysis and the generation see the shown feedback %q", q.Query)
			}
		}
	}
}
