package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/testenv"
)

// devWithModel runs agentq dev on the test database with the test model
// (providertest.TestModel) as its LLM, and returns the client env.
func devWithModel(t *testing.T) (context.Context, map[string]string, *providertest.Server) {
	t.Helper()
	model := providertest.New(t)
	model.SetResponder(providertest.TestModel)
	env := map[string]string{
		"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn",
		"AGENTQ_LLM_BASE_URL": model.URL, "AGENTQ_LLM_MODEL": "test", "AGENTQ_LAB_JUDGE_MODEL": "test-judge",
	}
	ctx, cancel := context.WithCancel(context.Background())
	natsURL, stop := startDev(t, ctx, env)
	t.Cleanup(func() { stop(); cancel() })
	return ctx, map[string]string{"AGENTQ_NATS_URL": natsURL, "USER": "ops"}, model
}

// lastEvent reads the data of the last event on subject, or nil.
func lastEvent(t *testing.T, natsURL, subject string) map[string]any {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(context.Background(), bus.StreamName)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(context.Background(), subject)
	if err != nil {
		return nil
	}
	ev, err := bus.Decode(m.Header, m.Data)
	require.NoError(t, err)
	var d map[string]any
	require.NoError(t, json.Unmarshal(ev.Data(), &d))
	return d
}

// The lab's human gate end to end, through the commands: a promptfoo
// config becomes two versions and an experiment, followed to its report;
// status, list, trials and report read the lab's state over NATS; activate
// asks, does nothing without a yes, then moves production to the
// recommended version naming the experiment, and prompts.get serves it.
func TestExperimentCommandsEndToEnd(t *testing.T) {
	ctx, client, model := devWithModel(t)
	tenant := testenv.Tenant(t)
	config := filepath.Join("..", "..", "examples", "promptfoo", "promptfooconfig.yaml")

	code, out, errOut := run(ctx, client, "", "experiment", "run", config, "--tenant", tenant, "--prompt", "billing-answer", "--id", "pf-1", "--wait")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Contains(t, errOut, "note: providers are not used")
	require.Contains(t, errOut, "prompt 1 (prompt 1): billing-answer@1 created")
	require.Contains(t, errOut, "prompt 2 (self-service.txt): billing-answer@2 created")
	require.Contains(t, out, "experiment pf-1 accepted for tenant "+tenant+": billing-answer version 1 against candidate 2, 8 queries × 3 repetitions = 48 trials, model test, judge test-judge")
	require.Contains(t, out, "experiment pf-1: completed, 48 of 48 trials (100%)")
	require.Regexp(t, `1 \(baseline\)\s+24\s+0%\s+0%–\d+%`, out)
	require.Regexp(t, `2\s+24\s+100%\s+\d+%–100%`, out)
	require.Regexp(t, `2\s+\+100 pt\s+\+0\.\d\d\s+8/0/0`, out, "the candidate against the baseline, query by query")
	require.Contains(t, out, "recommendation: version 2, confidence HIGH")
	require.Contains(t, out, "queries that failed every time:\n  - version 1, query 0 \"How do I reset my password?\"")
	require.Contains(t, out, "judge: test-judge, ")
	require.Contains(t, out, "summary (by the model):\n  This paragraph is the test model's")
	trialCalls := model.ChatRequests()

	code, out, errOut = run(ctx, client, "", "experiment", "status", "pf-1", "--tenant", tenant)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "experiment pf-1: completed, 48 of 48 trials (100%)")
	require.Contains(t, out, "billing-answer: version 1 against candidate 2")
	require.Contains(t, out, "recommends  version 2, confidence HIGH")

	code, out, errOut = run(ctx, client, "", "experiment", "trials", "pf-1", "--tenant", tenant, "--failed", "--limit", "2")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `1\s+0\s+0\s+FAIL\s+0\.\d\d\s+S✓ R✗\s+\d+\s+\d+\s+Re: How do I reset my password\? You are the support`, out)
	require.Contains(t, out, "2 of 24 shown: --offset 2 for more")

	code, out, errOut = run(ctx, client, "", "experiment", "report", "pf-1", "--tenant", tenant, "--json")
	require.Equal(t, 0, code, errOut)
	var x lab.Experiment
	require.NoError(t, json.Unmarshal([]byte(out), &x))
	require.Equal(t, "completed", x.Status)
	require.Equal(t, &lab.Pick{Version: 2, Confidence: "HIGH"}, x.Recommendation)
	require.Len(t, x.Queries, 8)

	// Before activation nothing carries production.
	code, _, errOut = run(ctx, client, "", "prompt", "get", "billing-answer", "--tenant", tenant, "--label", "production")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not_found")

	// No yes, no activation.
	code, out, errOut = run(ctx, client, "n\n", "experiment", "activate", "pf-1", "--tenant", tenant)
	require.Equal(t, 1, code)
	require.Contains(t, out, "experiment pf-1 recommends billing-answer@2 with confidence HIGH (baseline: version 1)")
	require.Contains(t, errOut, "activate billing-answer@2 as production for tenant "+tenant+"? [y/N]")
	require.Contains(t, errOut, "not confirmed: nothing was activated")
	require.Nil(t, lastEvent(t, client["AGENTQ_NATS_URL"], "prompt.activated."+tenant))

	code, out, errOut = run(ctx, client, "yes\n", "experiment", "activate", "pf-1", "--tenant", tenant)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "billing-answer@2 is now production for tenant "+tenant+" (labels on this version: production), activated from experiment pf-1")
	require.Equal(t, map[string]any{
		"prompt_id": "billing-answer", "version": float64(2), "label": "production", "experiment_id": "pf-1",
		"activated_by": "ops", "reason": "recommended by experiment pf-1 with confidence HIGH",
	}, lastEvent(t, client["AGENTQ_NATS_URL"], "prompt.activated."+tenant))
	code, out, errOut = run(ctx, client, "", "prompt", "get", "billing-answer", "--tenant", tenant, "--json")
	require.Equal(t, 0, code, errOut)
	var got struct {
		Prompt struct {
			Version int      `json:"version"`
			Labels  []string `json:"labels"`
		} `json:"prompt"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, 2, got.Prompt.Version, "prompts.get serves the activated version")
	require.Equal(t, []string{"production"}, got.Prompt.Labels)

	// From flags and a query file; the judge off. The baseline is now the
	// version labelled production.
	queries := filepath.Join(t.TempDir(), "queries.txt")
	require.NoError(t, os.WriteFile(queries, []byte("Where are my invoices?\n\nHow do I pay?\n"), 0o644))
	code, out, errOut = run(ctx, client, "", "experiment", "run", "--prompt", "billing-answer", "--candidates", "1", "--queries", queries,
		"--no-judge", "--tenant", tenant, "--id", "flags-1", "--wait", "--json")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	var ro struct {
		Outcome    string         `json:"outcome"`
		Experiment lab.Experiment `json:"experiment"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ro))
	require.Equal(t, "accepted", ro.Outcome)
	require.Equal(t, 2, ro.Experiment.BaselineVersion)
	require.Equal(t, []int{1}, ro.Experiment.CandidateVersions)
	require.Equal(t, 4, ro.Experiment.TotalTrials)
	require.Equal(t, []string{"Where are my invoices?", "How do I pay?"}, ro.Experiment.Queries)
	require.Nil(t, ro.Experiment.Judge, "no judge")
	require.Equal(t, trialCalls+5, model.ChatRequests(), "four trials, no judge, the summary")

	// From an experiment file (the fields of experiment.requested);
	// flags override it.
	file := filepath.Join(t.TempDir(), "experiment.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`prompt_id: billing-answer
name: from a file
baseline_version: 1
candidate_versions: [2]
repetitions: 2
test_queries:
  - query: How do I pay?
    assert: [{type: icontains, value: settings}]
evaluation: {llm_judge: false, summary: false}
`), 0o644))
	code, out, errOut = run(ctx, client, "", "experiment", "run", file, "--repetitions", "1", "--tenant", tenant, "--id", "file-1", "--wait")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "experiment file-1 accepted for tenant "+tenant+": billing-answer version 1 against candidate 2, 1 query × 1 repetition = 2 trials")
	require.Contains(t, out, "name        from a file")

	code, out, errOut = run(ctx, client, "", "experiment", "list", "--tenant", tenant)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4)
	require.Regexp(t, `^ID\s+PROMPT\s+STATUS`, lines[0])
	require.Regexp(t, `^file-1\s+billing-answer\s+completed\s+1 vs 2\s+2/2\s+`, lines[1])
	require.Regexp(t, `^flags-1\s+billing-answer\s+completed\s+2 vs 1\s+4/4\s+`, lines[2])
	require.Regexp(t, `^pf-1\s+billing-answer\s+completed\s+1 vs 2\s+48/48\s+2 \(HIGH\)`, lines[3])

	// Refused: over a limit; and a cancellation of a running experiment.
	code, _, errOut = run(ctx, client, "", "experiment", "run", "--prompt", "billing-answer", "--queries", queries, "--repetitions", "9", "--tenant", tenant)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "refused by the lab: over_limit: 9 repetitions is over the limit of 5 (AGENTQ_LAB_MAX_REPETITIONS)")

	model.SetLatency(time.Second)
	code, out, errOut = run(ctx, client, "", "experiment", "run", config, "--tenant", tenant, "--prompt", "billing-answer", "--id", "slow-1")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "follow it: agentq experiment status slow-1 --tenant "+tenant)
	code, out, errOut = run(ctx, client, "", "experiment", "cancel", "slow-1", "--tenant", tenant, "--reason", "wrong model")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Regexp(t, `experiment slow-1 cancelled after \d+ of 48 trials`, out)
	model.SetLatency(0)
	code, _, errOut = run(ctx, client, "", "experiment", "cancel", "slow-1", "--tenant", tenant)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "experiment slow-1 has already ended (cancelled): nothing to cancel")
	code, _, errOut = run(ctx, client, "", "experiment", "activate", "slow-1", "--tenant", tenant, "--yes")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "experiment slow-1 is cancelled: only a completed experiment's recommendation can be activated")
	code, _, errOut = run(ctx, client, "", "experiment", "status", "nope", "--tenant", tenant)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not_found: no experiment nope in tenant "+tenant)

	// A config the lab cannot run publishes nothing.
	nc, err := nats.Connect(client["AGENTQ_NATS_URL"])
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	created := countSubject(t, js, "prompt.created."+tenant)
	bad := filepath.Join("..", "promptfoo", "testdata", "unsupported", "promptfooconfig.yaml")
	code, _, errOut = run(ctx, client, "", "experiment", "run", bad, "--tenant", tenant, "--prompt", "other")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "uses what the lab cannot run (nothing was published)")
	require.Contains(t, errOut, "tests[0].assert[0]: type llm-rubric")
	require.Equal(t, created, countSubject(t, js, "prompt.created."+tenant))
}
