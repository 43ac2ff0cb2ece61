package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/report"
)

// onDone runs in the transaction recording an experiment's end: it builds
// the report from the trials stored (all of them, or those done before a
// timeout, a cancellation or a failure), stores the result on the
// experiment's row and puts experiment.completed or experiment.failed in
// the outbox, all committed with the outcome.
func (l *Lab) onDone(ctx context.Context, tx pgx.Tx, j *job.Job, o job.Outcome) error {
	var s Spec
	if err := json.Unmarshal(j.Payload, &s); err != nil {
		return fmt.Errorf("experiment payload: %w", err)
	}
	rows, err := tx.Query(ctx, `
		SELECT step, output FROM job_steps
		WHERE tenant_id = $1 AND consumer = $2 AND job_id = $3 AND (step LIKE 'trial/%' OR step = $4 OR step LIKE 'auto/%')`,
		j.Tenant, j.Consumer, j.ID, stepSummary)
	if err != nil {
		return fmt.Errorf("read trials: %w", err)
	}
	steps := map[string]json.RawMessage{}
	var step string
	var out []byte
	if _, err := pgx.ForEachRow(rows, []any{&step, &out}, func() error {
		steps[step] = json.RawMessage(out)
		return nil
	}); err != nil {
		return fmt.Errorf("read trials: %w", err)
	}
	if raw, ok := steps[stepAutoSpec]; ok && s.Auto != nil {
		// A run from feedback ran with its candidates.
		var full Spec
		if err := json.Unmarshal(raw, &full); err != nil {
			return fmt.Errorf("experiment %s with its candidates: %w", j.ID, err)
		}
		s = full
	}
	trials := trialsOf(steps)
	rep, judge, err := buildReport(s, trials)
	if err != nil {
		return bus.Permanent(err)
	}
	var auto *AutoResult
	if s.Auto != nil {
		if auto, err = autoResult(s, steps, trials, &rep); err != nil {
			return bus.Permanent(err)
		}
	}
	data := map[string]any{
		"experiment_id": s.ExperimentID, "prompt_id": s.PromptID, "baseline_version": s.Baseline,
		"candidate_versions": s.Candidates(), "total_trials": s.Trials(), "completed_trials": len(trials),
		"model": s.Model, "judge_model": s.JudgeModel, "report": rep,
	}
	if s.Eval.Judge {
		data["judge"] = judge
	}
	if auto != nil {
		data["auto"] = auto
	}
	var summary string
	if raw, ok := steps[stepSummary]; ok {
		_ = json.Unmarshal(raw, &summary)
	}
	if summary != "" {
		data["summary"] = summary
	}
	typ, status, code, reason := TypeCompleted, "completed", "", ""
	switch o.State {
	case job.Cancelled:
		typ, status, code, reason = TypeFailed, "cancelled", "cancelled", o.Err.Error()
	case job.Failed:
		typ, status, code, reason = TypeFailed, "failed", "error", o.Err.Error()
		var f *failure
		if errors.As(o.Err, &f) {
			code, reason = f.code, f.err.Error()
		}
	}
	if code != "" {
		data["reason_code"], data["reason"] = code, truncate(reason, 2048)
	}
	cause := event.New()
	cause.SetID(s.RequestID)
	cause.SetExtension(bus.ExtTenant, j.Tenant)
	s.Trace.Set(&cause)
	ev, err := bus.NewResult(l.opts.Consumer, typ, cause, data)
	if err != nil {
		return bus.Permanent(err)
	}
	result, err := json.Marshal(data)
	if err != nil {
		return bus.Permanent(err)
	}
	if _, err := tx.Exec(ctx, `
		UPDATE lab_experiments SET status = $3, result = $4::jsonb, reason_code = nullif($5, ''), reason = nullif($6, ''),
			finished_at = now(), started_at = coalesce(started_at, now())
		WHERE tenant_id = $1 AND experiment_id = $2`, j.Tenant, j.ID, status, string(result), code, reason); err != nil {
		return fmt.Errorf("store experiment result: %w", err)
	}
	if err := outbox.Add(ctx, tx, ev); err != nil {
		return err
	}
	// While the tenant is rebuilt its results wait in the outbox for the
	// relay. The fence, as a batch's claim takes it, orders this check
	// with a rebuild's start.
	var withheld bool
	if err := tx.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM consumer_fences WHERE consumer = $1 FOR SHARE)
		   AND EXISTS (SELECT 1 FROM rebuilds WHERE consumer = $1 AND tenant_id IN ($2, '*'))`,
		j.Consumer, j.Tenant).Scan(&withheld); err != nil {
		return fmt.Errorf("look for a rebuild: %w", err)
	}
	if !withheld {
		l.ending.Store(j.Key, ev)
	}
	return nil
}

// afterDone sends the result onDone stored, now that it has committed;
// what is not sent, the outbox relay sends.
func (l *Lab) afterDone(ctx context.Context, j *job.Job, _ job.Outcome) {
	v, ok := l.ending.LoadAndDelete(j.Key)
	if !ok {
		return
	}
	if err := l.out.Send(ctx, []event.Event{v.(event.Event)}); err != nil {
		l.log.Warn().Err(err).Str("tenant", j.Tenant).Str("experiment_id", j.ID).Msg("lab: result left to the outbox relay")
	}
}

// trialsOf reads the trials among a job's steps, in plan-independent
// order (version, query, repetition).
func trialsOf(steps map[string]json.RawMessage) []Trial {
	var out []Trial
	for k, raw := range steps {
		if !isTrialStep(k) {
			continue
		}
		var t Trial
		if err := json.Unmarshal(raw, &t); err == nil {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, k int) bool {
		a, b := out[i], out[k]
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		if a.Query != b.Query {
			return a.Query < b.Query
		}
		return a.Repetition < b.Repetition
	})
	return out
}

// JudgeSpend is what the LLM judge did in an experiment.
type JudgeSpend struct {
	Model        string `json:"model"`
	BudgetTokens int    `json:"budget_tokens"`
	SpentTokens  int    `json:"spent_tokens"`
	// Skipped counts trials the judge did not judge because the budget
	// was spent; Failed those it could not judge (junk, refusal, outage).
	// Both got the neutral verdict (pass, 0.5).
	Skipped int `json:"skipped_trials"`
	Failed  int `json:"failed_trials"`
	// SameModel: the judge is the model under test, and judges favour
	// their own family.
	SameModel bool `json:"same_model"`
}

// buildReport is report.Build over the trials, plus the lab's own
// warnings: judge placeholders, and a judge of the tested model's own.
func buildReport(s Spec, trials []Trial) (report.Report, JudgeSpend, error) {
	js := JudgeSpend{Model: s.JudgeModel, BudgetTokens: s.Eval.JudgeBudget, SameModel: s.JudgeModel == s.Model}
	in := report.Input{Baseline: s.Baseline, Queries: len(s.Queries)}
	for _, v := range s.Versions {
		in.Versions = append(in.Versions, v.Version)
	}
	for _, t := range trials {
		rt := report.Trial{
			Version: t.Version, Query: t.Query, Repetition: t.Repetition, Pass: t.Pass && t.Error == "", Score: t.Score,
			DurationMs: t.DurationMs, Tokens: t.PromptTokens + t.CompletionTokens, Error: t.Error != "", Tools: t.ToolCalls,
		}
		if t.Error != "" {
			rt.Score = 0
		}
		for _, tr := range t.Tiers {
			if rt.Tiers == nil {
				rt.Tiers = map[report.Tier]report.TierVerdict{}
			}
			rt.Tiers[tr.Tier] = report.TierVerdict{Pass: tr.Pass, Score: tr.Score}
			switch tr.Placeholder {
			case PlaceholderBudget:
				js.Skipped++
			case PlaceholderError:
				js.Failed++
			}
		}
		js.SpentTokens += t.JudgeTokens
		in.Trials = append(in.Trials, rt)
	}
	in.JudgeSkipped = js.Skipped
	rep, err := report.Build(in)
	if err != nil {
		return rep, js, err
	}
	if s.Eval.Judge && js.Failed > 0 {
		rep.Recommendation.Warnings = append(rep.Recommendation.Warnings, fmt.Sprintf(
			"the LLM judge could not judge %d of %d trials (bad answers or an unreachable judge); they got a neutral 0.5", js.Failed, len(trials)))
	}
	if s.Eval.Judge && js.SameModel {
		rep.Recommendation.Warnings = append(rep.Recommendation.Warnings, fmt.Sprintf(
			"the LLM judge (%s) is the model under test; judges favour their own family: set judge_model or AGENTQ_LAB_JUDGE_MODEL to another", s.JudgeModel))
	}
	return rep, js, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutUTF8(s, n-3) + "..."
}
