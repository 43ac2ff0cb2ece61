package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/job"
)

// failure is why an experiment failed, as experiment.failed says it.
type failure struct {
	code string // reason_code
	err  error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// errTimeout is the cause of an experiment's context when its time is up.
var errTimeout = errors.New("experiment timeout")

// Step keys besides the trials'.
const (
	stepStart   = "start"   // when the experiment first started: its timeout counts from there
	stepSummary = "summary" // the executive summary
)

// run is the job handler: one attempt at an experiment. Every trial is a
// step, so an attempt after a crash, a stop or an outage runs only the
// trials no earlier attempt stored. The judge's budget starts from what
// the stored trials spent.
func (l *Lab) run(ctx context.Context, j *job.Job) (json.RawMessage, error) {
	var s Spec
	if err := json.Unmarshal(j.Payload, &s); err != nil {
		return nil, bus.Permanent(fmt.Errorf("experiment payload: %w", err))
	}
	if _, err := l.pool.Exec(ctx, `
		UPDATE lab_experiments SET status = 'running', started_at = coalesce(started_at, now())
		WHERE tenant_id = $1 AND experiment_id = $2 AND status = 'queued'`, j.Tenant, j.ID); err != nil {
		return nil, fmt.Errorf("mark experiment %s running: %w", j.ID, database.Classify(err))
	}
	started, err := job.StepJSON(ctx, j, stepStart, func(context.Context) (time.Time, error) { return time.Now().UTC(), nil })
	if err != nil {
		return nil, err
	}
	if l.llm == nil {
		// Accepted by a copy with a model; this one has none.
		return nil, bus.Unavailable(errors.New("no model configured on this lab copy"))
	}
	rctx, cancel := context.WithDeadlineCause(ctx, started.Add(s.Timeout), errTimeout)
	defer cancel()
	// A run from feedback makes its candidates first.
	if s, err = l.prepare(rctx, j, s); err != nil {
		var f *failure
		if !errors.As(err, &f) && ctx.Err() == nil && errors.Is(context.Cause(rctx), errTimeout) {
			return nil, bus.Permanent(&failure{code: "timeout",
				err: fmt.Errorf("the experiment ran out of its %s (AGENTQ_LAB_TIMEOUT) while making its candidates", s.Timeout)})
		}
		return nil, err
	}
	steps, err := j.Steps(ctx)
	if err != nil {
		return nil, err
	}
	spent := 0
	for k, out := range steps {
		if !isTrialStep(k) {
			continue
		}
		var t Trial
		if err := json.Unmarshal(out, &t); err == nil {
			spent += t.JudgeTokens
		}
	}
	jd := &judge{
		llm: l.llm, limit: l.limit, model: s.JudgeModel, rubric: s.Eval.rubric(), builder: l.builder,
		counter: chat.CounterForModel(s.JudgeModel), budget: newBudget(s.Eval.JudgeBudget, spent),
	}
	e, err := newEvaluator(s, jd)
	if err != nil {
		return nil, bus.Permanent(&failure{code: "invalid", err: err})
	}
	if err := l.trials(rctx, j, e); err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(rctx), errTimeout) {
			return nil, bus.Permanent(&failure{code: "timeout",
				err: fmt.Errorf("the experiment ran out of its %s (AGENTQ_LAB_TIMEOUT) before all its trials were done", s.Timeout)})
		}
		return nil, err
	}
	if s.Eval.Summary {
		if err := l.summarize(rctx, j, s); err != nil {
			if ctx.Err() == nil && errors.Is(context.Cause(rctx), errTimeout) {
				return nil, nil // every trial is in: a missing summary does not fail the experiment
			}
			return nil, err
		}
	}
	return nil, nil
}

// trials runs the plan's trials and returns the first error that stops
// them. The limiter bounds the model calls in flight (this copy's
// experiments together); twice as many trials are under way, so that a
// trial recording its result or between its two calls never leaves a
// slot idle.
func (l *Lab) trials(ctx context.Context, j *job.Job, e *evaluator) error {
	plan := e.spec.plan()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	work := make(chan trialKey)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	workers := 2 * max(1, l.opts.Lab.Concurrency)
	if l.opts.Lab.Concurrency == 1 {
		workers = 1 // one at a time, in plan order
	}
	for range min(workers, len(plan)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				_, err := job.StepJSON(ctx, j, k.step(), func(ctx context.Context) (Trial, error) { return l.trial(ctx, e, k) })
				if err != nil {
					once.Do(func() { first = err; stop(err) })
				}
			}
		}()
	}
feed:
	for _, k := range plan {
		select {
		case work <- k:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = context.Cause(ctx)
	}
	return first
}

// summarize stores the executive summary: one paragraph from the model on
// the report of the stored trials. A model that fails gives no summary,
// not a failed experiment.
func (l *Lab) summarize(ctx context.Context, j *job.Job, s Spec) error {
	_, err := j.Step(ctx, stepSummary, func(ctx context.Context) (json.RawMessage, error) {
		steps, err := j.Steps(ctx)
		if err != nil {
			return nil, err
		}
		rep, _, err := buildReport(s, trialsOf(steps))
		if err != nil {
			return json.Marshal("")
		}
		text, err := json.Marshal(rep)
		if err != nil {
			return json.Marshal("")
		}
		msgs, err := l.builder.ExecutiveSummaryMessages(string(text))
		if err != nil {
			return json.Marshal("")
		}
		conv := chat.New(s.Model).WithTemperature(0).WithMaxTokens(300).Append(msgs...)
		release, err := l.limit.acquire(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := l.llm.Complete(ctx, providerRequest(conv))
		release()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if err != nil {
			l.log.Warn().Err(err).Str("tenant", j.Tenant).Str("experiment_id", j.ID).Msg("lab: no executive summary")
			return json.Marshal("")
		}
		return json.Marshal(resp.Content)
	})
	return err
}
