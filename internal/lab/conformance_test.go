package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/testenv"
)

// TestJobsConformance runs the leased-job scenarios against the lab. A
// job of n steps is an experiment of one version, n test queries and one
// repetition with every tier off, run one trial at a time; trial i's model
// call is the suite's step i: the model server answers it with
// JobWork.Do, under the request's context, so a trial cut off by a
// cancellation or a lost lease is seen interrupted. A succeeded job's
// content is its stored responses, in query order.
func TestJobsConformance(t *testing.T) {
	pool := testenv.Pool(t)
	var mu sync.Mutex
	servers := map[*conformance.JobWork]*providertest.Server{}
	model := func(t *testing.T, work *conformance.JobWork) *providertest.Server {
		mu.Lock()
		defer mu.Unlock()
		if s, ok := servers[work]; ok {
			return s
		}
		s := providertest.New(t)
		s.SetContextResponder(func(ctx context.Context, req providertest.ChatRequest) string {
			// The query is "<tenant> <job> <step>".
			f := strings.Fields(req.UserText())
			if len(f) != 3 {
				return "not a conformance step: " + req.UserText()
			}
			step, _ := strconv.Atoi(f[2])
			out, err := work.Do(ctx, f[0], f[1], step)
			if err != nil {
				return "" // the caller is gone
			}
			return out
		})
		servers[work] = s
		return s
	}
	conformance.RunJobs(t, conformance.JobAdapter{
		Consumer:       "lab",
		ResultSubjects: lab.ResultSubjects,
		Start: func(t *testing.T, env conformance.JobEnv) conformance.Copy {
			cfg := env.Config
			cfg.LLM.BaseURL, cfg.LLM.Model = model(t, env.Work).URL, "m"
			cfg.Lab.Concurrency = 1 // steps in order: later steps never start before a cancelled one
			return testenv.StartProcess(t, cfg, "lab", lab.NewConsumer(lab.Options{Job: env.Options}))
		},
		Submit: func(t *testing.T, env conformance.JobEnv, tenant, id string, steps int) {
			publishVersion(t, env, tenant)
			qs := make([]map[string]any, steps)
			for i := range qs {
				qs[i] = map[string]any{"query": fmt.Sprintf("%s %s %d", tenant, id, i)}
			}
			ev, err := bus.NewEvent(lab.TypeRequested, tenant, "conformance", map[string]any{
				"experiment_id": id, "prompt_id": "conformance", "test_queries": qs,
				"evaluation": map[string]any{"structural": false, "rules": false, "llm_judge": false, "summary": false},
			})
			require.NoError(t, err)
			env.Publish(t, ev)
		},
		Cancel: func(t *testing.T, env conformance.JobEnv, tenant, id, reason string) {
			ev, err := bus.NewEvent(lab.TypeCancelled, tenant, "conformance", map[string]any{"experiment_id": id, "reason": reason})
			require.NoError(t, err)
			env.Publish(t, ev)
		},
		Result: func(ev event.Event) (conformance.JobResult, bool) {
			var d struct {
				ExperimentID string `json:"experiment_id"`
				ReasonCode   string `json:"reason_code"`
				Reason       string `json:"reason"`
			}
			if err := json.Unmarshal(ev.Data(), &d); err != nil {
				return conformance.JobResult{}, false
			}
			r := conformance.JobResult{ID: d.ExperimentID, Reason: d.Reason}
			switch {
			case ev.Type() == lab.TypeCompleted:
				r.State, r.Content = job.Succeeded, responses(pool, bus.Tenant(ev), d.ExperimentID)
			case ev.Type() == lab.TypeFailed && d.ReasonCode == "cancelled":
				r.State = job.Cancelled
			case ev.Type() == lab.TypeFailed:
				r.State = job.Failed
			default:
				return r, false
			}
			return r, true
		},
		Expected: func(_, _ string, outputs []string) any { return outputs },
	})
}

// publishVersion gives the tenant prompt "conformance" version 1, as the
// indexer would report it; fixed ids make a repeat a duplicate.
func publishVersion(t *testing.T, env conformance.JobEnv, tenant string) {
	created, err := bus.NewEvent(bus.Type("prompt", "created"), tenant, "conformance", map[string]any{
		"id": "conformance", "type": "system", "name": "conformance", "content": "Do the step.", "version": 1,
	})
	require.NoError(t, err)
	created.SetID("conformance-prompt")
	env.Publish(t, created)
	indexed, err := bus.NewResult("indexer", bus.Type("prompt", "indexed"), created,
		map[string]any{"prompt_id": "conformance", "version": 1, "content_hash": "h1", "outcome": "created"})
	require.NoError(t, err)
	env.Publish(t, indexed)
}

// responses reads an experiment's stored responses, in query order.
func responses(pool *pgxpool.Pool, tenant, id string) []string {
	trials, err := lab.Trials(context.Background(), pool, "lab", tenant, id)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	out := make([]string, len(trials))
	for i, t := range trials {
		out[i] = t.Response
	}
	return out
}
