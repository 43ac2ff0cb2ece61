package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/testenv"
)

// TestJobsConformance runs the leased-job scenarios against labish, a
// small consumer built on internal/job the way the lab is meant to be.
func TestJobsConformance(t *testing.T) {
	conformance.RunJobs(t, conformance.JobAdapter{
		Consumer:       labishConsumer,
		ResultSubjects: []string{"experiment.started.*", "experiment.completed.*", "experiment.failed.*"},
		Start: func(t *testing.T, env conformance.JobEnv) conformance.Copy {
			return testenv.StartProcess(t, env.Config, labishConsumer, labish(env))
		},
		Submit: func(t *testing.T, env conformance.JobEnv, tenant, id string, steps int) {
			queries := make([]map[string]string, steps)
			for i := range queries {
				queries[i] = map[string]string{"query": fmt.Sprintf("query %d", i)}
			}
			ev, err := bus.NewEvent(bus.Type("experiment", "requested"), tenant, "conformance", map[string]any{
				"experiment_id": id, "prompt_id": "p1", "test_queries": queries,
			})
			require.NoError(t, err)
			env.Publish(t, ev)
		},
		Cancel: func(t *testing.T, env conformance.JobEnv, tenant, id, reason string) {
			ev, err := bus.NewEvent(bus.Type("experiment", "cancelled"), tenant, "conformance", map[string]any{
				"experiment_id": id, "reason": reason,
			})
			require.NoError(t, err)
			env.Publish(t, ev)
		},
		Result: func(ev event.Event) (conformance.JobResult, bool) {
			var d struct {
				ExperimentID string   `json:"experiment_id"`
				ReasonCode   string   `json:"reason_code"`
				Reason       string   `json:"reason"`
				Outputs      []string `json:"outputs"`
			}
			if err := json.Unmarshal(ev.Data(), &d); err != nil {
				return conformance.JobResult{}, false
			}
			r := conformance.JobResult{ID: d.ExperimentID, Reason: d.Reason}
			switch {
			case ev.Type() == bus.Type("experiment", "completed"):
				r.State, r.Content = job.Succeeded, d.Outputs
			case ev.Type() == bus.Type("experiment", "failed") && d.ReasonCode == "cancelled":
				r.State = job.Cancelled
			case ev.Type() == bus.Type("experiment", "failed"):
				r.State = job.Failed
			default:
				return r, false
			}
			return r, true
		},
		Expected: func(_, _ string, outputs []string) any { return outputs },
	})
}

const labishConsumer = "labish"

// labish is an app consumer that runs experiments as leased jobs: a request
// is accepted in one transaction (inbox claim, job.Enqueue, and
// experiment.started in the outbox), each test query is one checkpointed
// step doing env.Work, a cancel request is job.RequestCancel, and the
// job's end is experiment.completed (the steps' outputs) or
// experiment.failed, stored by OnDone with the outcome.
func labish(env conformance.JobEnv) app.Consumer {
	return app.Consumer{Name: labishConsumer, Run: func(ctx context.Context, d *app.Deps) error {
		if err := database.EnsureFence(ctx, d.Pool, labishConsumer); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		opts := env.Options
		opts.Consumer, opts.Kinds = labishConsumer, []string{"experiment"}
		opts.OnDone = labishDone
		opts.Metrics = job.NewMetrics(d.Registry)
		w, err := job.NewWorker(d.Pool, opts, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
			return labishRun(ctx, j, env.Work)
		}, d.Log)
		if err != nil {
			return err
		}
		r, err := bus.NewRunner(d.JS, d.Schemas, bus.Each(func(ctx context.Context, dl *bus.Delivery) error {
			return labishAccept(ctx, d, w, dl)
		}), d.Config.Runner(labishConsumer, "experiment.requested.*", "experiment.cancelled.*"), d.Log, d.Metrics)
		if err != nil {
			return err
		}
		werr := make(chan error, 1)
		go func() { werr <- w.Run(ctx) }()
		return errors.Join(r.Run(ctx), <-werr)
	}}
}

// labishJob is a job's payload.
type labishJob struct {
	RequestID string `json:"request_id"` // the experiment.requested event: the cause of every result
	PromptID  string `json:"prompt_id"`
	Steps     int    `json:"steps"`
}

// labishAccept applies a request or a cancellation in one transaction.
func labishAccept(ctx context.Context, d *app.Deps, w *job.Worker, dl *bus.Delivery) error {
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		return database.Classify(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	claimed, err := database.Claim(ctx, tx, labishConsumer, []database.InboxKey{{Tenant: dl.Tenant, EventID: dl.Event.ID()}})
	if err != nil {
		return database.Classify(err)
	}
	if !claimed.Fresh[0] {
		return nil
	}
	var in struct {
		ExperimentID string            `json:"experiment_id"`
		PromptID     string            `json:"prompt_id"`
		TestQueries  []json.RawMessage `json:"test_queries"`
		Reason       string            `json:"reason"`
	}
	if err := json.Unmarshal(dl.Event.Data(), &in); err != nil {
		return bus.Permanent(err)
	}
	key := job.Key{Tenant: dl.Tenant, Consumer: labishConsumer, ID: in.ExperimentID}
	var results []event.Event
	switch dl.Event.Type() {
	case bus.Type("experiment", "requested"):
		payload, err := json.Marshal(labishJob{RequestID: dl.Event.ID(), PromptID: in.PromptID, Steps: len(in.TestQueries)})
		if err != nil {
			return bus.Permanent(err)
		}
		created, err := job.Enqueue(ctx, tx, job.New{Key: key, Kind: "experiment", Payload: payload})
		if err != nil {
			return database.Classify(err)
		}
		if created {
			ev, err := bus.NewResult(labishConsumer, bus.Type("experiment", "started"), dl.Event, map[string]any{
				"experiment_id": in.ExperimentID, "prompt_id": in.PromptID, "baseline_version": 1, "total_trials": len(in.TestQueries),
			})
			if err != nil {
				return bus.Permanent(err)
			}
			results = append(results, ev)
		}
	case bus.Type("experiment", "cancelled"):
		if _, err := job.RequestCancel(ctx, tx, key, in.Reason); err != nil {
			if errors.Is(err, job.ErrNotFound) {
				return bus.Permanent(err)
			}
			return database.Classify(err)
		}
	}
	if err := outbox.Add(ctx, tx, results...); err != nil {
		return database.Classify(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return database.Classify(err)
	}
	_ = d.Outbox.Send(ctx, results) // committed: what is not sent, the relay sends
	w.Wake()
	return nil
}

// labishRun runs one attempt: one checkpointed step per test query.
func labishRun(ctx context.Context, j *job.Job, work *conformance.JobWork) (json.RawMessage, error) {
	var p labishJob
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return nil, bus.Permanent(err)
	}
	outs := make([]string, p.Steps)
	for i := range outs {
		out, err := job.StepJSON(ctx, j, fmt.Sprintf("trial-%d", i), func(ctx context.Context) (string, error) {
			return work.Do(ctx, j.Tenant, j.ID, i)
		})
		if err != nil {
			return nil, err
		}
		outs[i] = out
	}
	return json.Marshal(map[string]any{"outputs": outs})
}

// labishDone stores the result that ends the job, with the outcome.
func labishDone(ctx context.Context, tx pgx.Tx, j *job.Job, o job.Outcome) error {
	var p labishJob
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return bus.Permanent(err)
	}
	cause := event.New()
	cause.SetID(p.RequestID)
	cause.SetExtension(bus.ExtTenant, j.Tenant)
	var ev event.Event
	var err error
	switch o.State {
	case job.Succeeded:
		var res struct {
			Outputs []string `json:"outputs"`
		}
		if err := json.Unmarshal(o.Result, &res); err != nil {
			return bus.Permanent(err)
		}
		ev, err = bus.NewResult(labishConsumer, bus.Type("experiment", "completed"), cause, map[string]any{
			"experiment_id": j.ID, "prompt_id": p.PromptID, "total_trials": p.Steps, "outputs": res.Outputs,
			"report": map[string]any{
				"versions":       []map[string]any{{"version": 1, "baseline": true, "trials": p.Steps}},
				"recommendation": map[string]any{"version": 1, "confidence": "LOW"},
			},
		})
	default:
		code := "failed"
		if o.State == job.Cancelled {
			code = "cancelled"
		}
		ev, err = bus.NewResult(labishConsumer, bus.Type("experiment", "failed"), cause, map[string]any{
			"experiment_id": j.ID, "prompt_id": p.PromptID, "reason_code": code, "reason": o.Err.Error(),
		})
	}
	if err != nil {
		return bus.Permanent(err)
	}
	return outbox.Add(ctx, tx, ev)
}
