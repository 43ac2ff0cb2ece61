package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"github.com/agentq/agentq/internal/answer"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/promptfoo"
)

// This file holds agentq experiment's dispatch and run: requesting
// experiments (from agentq's own experiment files, promptfoo configs or
// flags) and following them. experiment_view.go reads the lab's state,
// experiment_control.go cancels and activates.

func init() {
	register("experiment", "prompt experiments: run (also a promptfoo config), status, list, cancel, trials, report, activate", runExperiment)
	describe("experiment", "run|status|list|cancel|trials|report|activate [args] [flags]", `Works with the lab's prompt experiments. Experiments are requested and
cancelled with experiment.requested and experiment.cancelled events, like
any agent would; status, list, trials and report ask the lab
(experiments.get, .list and .trials on NATS); activate publishes
prompt.activated for the version an experiment recommends, after showing
the recommendation and asking.

The tenant is --tenant, else AGENTQ_TENANT, else "default".`)
	describe("experiment run", "FILE | --prompt ID --queries FILE [--candidates 2,3] [flags]", `Requests an experiment, waits for the lab's answer (accepted, queued, or
refused with its reason) and, with --wait, follows it to its end and prints
the report. Exits 1 when refused, or, with --wait, when the experiment
failed or was cancelled.

FILE is either an experiment file (YAML or JSON with the fields of
experiment.requested: prompt_id, candidate_versions, test_queries, ...) or a
promptfoo config (it has prompts and tests). From a promptfoo config, run
creates a version of the prompt (--prompt, else the config's description
as an id) for each of its prompts (prompt.created, as agentq prompt seed
does), then compares the first with the others over its tests; what the
lab cannot run (model-graded or code assertions, transforms, ...) is listed
and nothing is published.

--queries FILE gives the test queries: a YAML or JSON list of queries (text,
or objects with query, intent, reference, vars, assert, threshold), or a
text file with one query a line. Flags override the file's fields.`)
	describe("experiment status", "ID [--json]", `Prints an experiment's status (queued, running, completed, failed,
cancelled), its progress in trials, its times and, once there is one, the
recommendation.`)
	describe("experiment list", "[--status S] [--prompt ID] [--limit N] [--json]", `Lists the tenant's experiments, newest first: status, versions, progress
and recommendation.`)
	describe("experiment cancel", "ID [--reason TEXT] [--by WHO] [--json]", `Publishes experiment.cancelled and waits for the experiment to stop: a
running one stops within about a second, a queued one never runs. Its
report covers the trials done.`)
	describe("experiment trials", "ID [--version N] [--query N] [--failed] [--limit N] [--offset N] [--full] [--json]", `Lists an experiment's stored trials, by version, query and repetition:
pass or fail, score, each tier's verdict, duration, tokens, and the start of
the response (all of it up to 16 KiB with --full and --json).`)
	describe("experiment report", "ID [--json]", `Prints an experiment's report: per version the pass rate with its 95 %
interval, scores, latency, tokens, errors and tool calls; each candidate
against the baseline query by query with its tests; the recommendation and
its confidence, improvements and warnings; the model's summary. While the
experiment runs, the report of the trials stored so far.`)
	describe("experiment activate", "ID [--version N] [--label production] [--yes] [--json]", `Shows the experiment's recommendation and, once confirmed (or with --yes),
publishes prompt.activated moving the label (default production) to the
recommended version, or to --version N, naming the experiment; waits for
the indexer's answer. Agents that get the prompt by label receive that
version from then on. Nothing is activated without a person's yes.`)
}

var experimentSubcommands = []subcommand{
	{"run", "request an experiment from a file (agentq's or a promptfoo config) or flags, and follow it", runExperimentRun},
	{"status", "an experiment's status and progress", runExperimentStatus},
	{"list", "the tenant's experiments, newest first", runExperimentList},
	{"cancel", "stop a queued or running experiment", runExperimentCancel},
	{"trials", "an experiment's stored trials: responses and verdicts", runExperimentTrials},
	{"report", "an experiment's report, as a table or --json", runExperimentReport},
	{"activate", "activate the recommended version (or --version N) after confirmation", runExperimentActivate},
}

func runExperiment(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	return runGroup(ctx, e, cfg, "experiment", experimentSubcommands, args)
}

// --- agentq experiment run ---

func runExperimentRun(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "experiment run"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	prompt := fs.String("prompt", "", "prompt id (with a promptfoo config: the id its versions get; default its description)")
	id := fs.String("id", "", "experiment id (default: <prompt>-<UTC time>)")
	title := fs.String("name", "", "a human-readable name")
	baseline := fs.Int("baseline", 0, "baseline version (default: the version labelled production, else the latest)")
	candidates := fs.String("candidates", "", "candidate versions, comma-separated: 2,3")
	queriesFile := fs.String("queries", "", "test queries: a YAML or JSON list, or a text file with one query a line")
	reps := fs.Int("repetitions", 0, "independent calls per version and query (default 1)")
	model := fs.String("model", "", "model the versions run with (default AGENTQ_LLM_MODEL)")
	judgeModel := fs.String("judge-model", "", "the LLM judge's model (default AGENTQ_LAB_JUDGE_MODEL, else --model)")
	noJudge := fs.Bool("no-judge", false, "no LLM judge: structural checks and rules only")
	queryVar := fs.String("query-var", "", "promptfoo: the var holding each test's query (default: the first of query, question, input, message, prompt)")
	wait := fs.Bool("wait", false, "follow the experiment to its end and print the report")
	timeout := fs.Duration("timeout", answerTimeout, "how long to wait for the lab's answer (and the indexer's, for a promptfoo config)")
	asJSON := fs.Bool("json", false, "print JSON: the lab's answer, and with --wait the experiment and its report")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 1:
		return usageError(e, fs, name, "one FILE, got %d arguments", len(pos))
	case len(pos) == 0 && *prompt == "":
		return usageError(e, fs, name, "FILE or --prompt ID is required")
	case *timeout <= 0:
		return usageError(e, fs, name, "--timeout must be positive")
	case *reps < 0 || *baseline < 0:
		return usageError(e, fs, name, "--repetitions and --baseline must be positive")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	data := map[string]any{}
	var suite *promptfoo.Suite
	if len(pos) == 1 {
		suite, data, err = readExperimentFile(pos[0], promptfoo.Options{QueryVar: *queryVar})
		if err != nil {
			return err
		}
	}
	if *prompt != "" {
		data["prompt_id"] = *prompt
	}
	if suite != nil {
		if err := promptfooVersions(ctx, e, cfg, *tenant, suite, data, *timeout); err != nil {
			return err
		}
	}
	if *candidates != "" {
		var list []int
		for _, f := range strings.Split(*candidates, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || v < 1 {
				return usageError(e, fs, name, "--candidates wants versions like 2,3, got %q", *candidates)
			}
			list = append(list, v)
		}
		data["candidate_versions"] = list
	}
	if *queriesFile != "" {
		qs, err := readQueries(*queriesFile)
		if err != nil {
			return err
		}
		data["test_queries"] = qs
	}
	setIf := func(key string, ok bool, v any) {
		if ok {
			data[key] = v
		}
	}
	setIf("baseline_version", *baseline > 0, *baseline)
	setIf("repetitions", *reps > 0, *reps)
	setIf("model", *model != "", *model)
	setIf("judge_model", *judgeModel != "", *judgeModel)
	setIf("name", *title != "", *title)
	setIf("experiment_id", *id != "", *id)
	if *noJudge {
		ev, _ := data["evaluation"].(map[string]any)
		if ev == nil {
			ev = map[string]any{}
		}
		ev["llm_judge"] = false
		data["evaluation"] = ev
	}
	promptID, _ := data["prompt_id"].(string)
	if promptID == "" {
		return usageError(e, fs, name, "the experiment names no prompt: give --prompt ID")
	}
	if _, ok := data["experiment_id"]; !ok {
		data["experiment_id"] = defaultExperimentID(promptID, time.Now())
	}
	r, err := newRequest(lab.TypeRequested, *tenant, cliSource, data)
	if err != nil {
		return err
	}
	if err := r.check(); err != nil {
		return usageError(e, fs, name, "the experiment is not a valid experiment.requested: %v", err)
	}
	ev := r.ev
	expID := data["experiment_id"].(string)

	if err := r.connect(e, cfg); err != nil {
		return err
	}
	defer r.close()
	reply, err := r.follow(ctx, []string{lab.TypeStarted, lab.TypeRejected})
	if err != nil {
		return err
	}
	defer reply.Stop()
	var ending *answer.Set
	if *wait {
		if ending, err = r.follow(ctx, []string{lab.TypeCompleted, lab.TypeFailed}); err != nil {
			return err
		}
		defer ending.Stop()
	}
	warnIfNoConsumer(ctx, e, r.js, "lab")
	if _, err := r.publish(ctx); err != nil {
		return err
	}
	reply.Wait(ctx, *timeout, nil)
	a, ok := reply.Get(ev.ID())
	if !ok {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("no answer from the lab within %s to experiment.requested %s: is the lab running (`make dev` runs it)? `agentq dlq --consumer lab` lists what it could not process", *timeout, ev.ID())
	}
	out := runOutput{RequestEventID: ev.ID(), ExperimentID: expID, Answer: a.Data}
	if a.Type == lab.TypeRejected {
		out.Outcome = "refused"
		var r rejected
		_ = json.Unmarshal(a.Data, &r)
		if *asJSON {
			if err := writeJSON(e.Stdout, out); err != nil {
				return err
			}
		}
		return fmt.Errorf("refused by the lab: %s: %s", r.ReasonCode, oneLineText(r.Reason))
	}
	out.Outcome = "accepted"
	var st struct {
		ExperimentID string `json:"experiment_id"`
		Baseline     int    `json:"baseline_version"`
		Candidates   []int  `json:"candidate_versions"`
		Total        int    `json:"total_trials"`
		Queries      int    `json:"test_query_count"`
		Repetitions  int    `json:"repetitions"`
		Model        string `json:"model"`
		JudgeModel   string `json:"judge_model"`
		Queued       bool   `json:"queued"`
	}
	_ = json.Unmarshal(a.Data, &st)
	if !*asJSON {
		queued := ""
		if st.Queued {
			queued = "; queued: the tenant's other experiments hold every slot (AGENTQ_LAB_MAX_RUNNING)"
		}
		fmt.Fprintf(e.Stdout, "experiment %s accepted for tenant %s: %s version %d against %s, %s × %s = %s, model %s, judge %s%s\n",
			st.ExperimentID, *tenant, promptID, st.Baseline, versionList(st.Candidates), count(st.Queries, "query", "queries"),
			count(st.Repetitions, "repetition", "repetitions"), count(st.Total, "trial", "trials"), st.Model, st.JudgeModel, queued)
	}
	if !*wait {
		if *asJSON {
			return writeJSON(e.Stdout, out)
		}
		fmt.Fprintf(e.Stdout, "follow it: agentq experiment status %s --tenant %s (report, trials, cancel alike)\n", st.ExperimentID, *tenant)
		return nil
	}
	x, err := followToEnd(ctx, e, cfg, *tenant, st.ExperimentID, ending, ev.ID())
	if err != nil {
		return err
	}
	out.Experiment = &x
	if *asJSON {
		if err := writeJSON(e.Stdout, out); err != nil {
			return err
		}
	} else if err := printReport(e.Stdout, x); err != nil {
		return err
	}
	if x.Status != "completed" {
		return fmt.Errorf("experiment %s %s: %s", x.ID, x.Status, oneLineText(x.Reason))
	}
	return nil
}

// runOutput is what run --json prints.
type runOutput struct {
	RequestEventID string          `json:"request_event_id"`
	ExperimentID   string          `json:"experiment_id"`
	Outcome        string          `json:"outcome"` // accepted or refused
	Answer         json.RawMessage `json:"answer"`  // experiment.started's or lab.rejected's data
	Experiment     *lab.Experiment `json:"experiment,omitempty"`
}

// followToEnd waits for the end of experiment id (its ending answers),
// reporting progress on stderr, and returns it as the lab has it then.
func followToEnd(ctx context.Context, e Env, cfg config.Config, tenant, id string, ending *answer.Set, requestID string) (lab.Experiment, error) {
	last := -1
	for {
		ending.Wait(ctx, 2*time.Second, nil)
		if err := ctx.Err(); err != nil {
			return lab.Experiment{}, fmt.Errorf("stopped waiting (the experiment goes on: agentq experiment status %s): %w", id, err)
		}
		_, done := ending.Get(requestID)
		x, err := getExperiment(ctx, e, cfg, tenant, id)
		if err != nil {
			return x, err
		}
		if done && x.FinishedAt != nil {
			return x, nil
		}
		if x.CompletedTrials != last {
			last = x.CompletedTrials
			fmt.Fprintf(e.Stderr, "%s: %s, %d of %d trials\n", id, x.Status, x.CompletedTrials, x.TotalTrials)
		}
	}
}

// defaultExperimentID names an experiment by its prompt and the time.
func defaultExperimentID(promptID string, now time.Time) string {
	id := promptID + "-" + now.UTC().Format("20060102-150405")
	if len(id) > 128 {
		id = id[len(id)-128:]
	}
	return id
}

// readExperimentFile reads an experiment file: agentq's (the fields of
// experiment.requested) or a promptfoo config (it has prompts or tests).
func readExperimentFile(path string, o promptfoo.Options) (*promptfoo.Suite, map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, nil, fmt.Errorf("%s: not a YAML or JSON mapping: %w", path, err)
	}
	_, hasPrompts := doc["prompts"]
	_, hasTests := doc["tests"]
	if hasPrompts || hasTests {
		s, err := promptfoo.Parse(raw, filepath.Dir(path), filepath.Base(path), o)
		if err != nil {
			return nil, nil, err
		}
		return s, map[string]any{}, nil
	}
	if doc == nil {
		return nil, nil, fmt.Errorf("%s: empty", path)
	}
	return nil, doc, nil
}

// readQueries reads test queries: a text file, one a line, or a YAML or
// JSON list of queries (text or objects), or a mapping with test_queries.
func readQueries(path string) ([]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(filepath.Ext(path), ".txt") {
		var out []any
		for _, line := range strings.Split(string(raw), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, map[string]any{"query": line})
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%s: no queries", path)
		}
		return out, nil
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s: not YAML or JSON: %w", path, err)
	}
	if m, ok := v.(map[string]any); ok {
		v = m["test_queries"]
	}
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("%s: want a list of queries (text, or objects with query, intent, reference, vars, assert)", path)
	}
	for i, q := range list {
		if s, ok := q.(string); ok {
			list[i] = map[string]any{"query": s}
		}
	}
	return list, nil
}

// slugRE is what an id keeps of a description.
var slugRE = regexp.MustCompile(`[^a-z0-9]+`)

// promptfooVersions creates the suite's prompts as versions of the prompt
// (data's prompt_id, else the suite's description as an id) and fills
// data with the experiment: the first version against the others, over
// the suite's tests.
func promptfooVersions(ctx context.Context, e Env, cfg config.Config, tenant string, s *promptfoo.Suite, data map[string]any, timeout time.Duration) error {
	for _, n := range s.Notes {
		fmt.Fprintf(e.Stderr, "note: %s\n", n)
	}
	promptID, _ := data["prompt_id"].(string)
	if promptID == "" {
		promptID = strings.Trim(slugRE.ReplaceAllString(strings.ToLower(s.Description), "-"), "-")
		if len(promptID) > 64 {
			promptID = strings.TrimRight(promptID[:64], "-")
		}
		if promptID == "" {
			return errors.New("the promptfoo config has no description to name the prompt by: give --prompt ID")
		}
		data["prompt_id"] = promptID
	}
	if len(s.Prompts) < 2 {
		fmt.Fprintln(e.Stderr, "note: the config has one prompt: the experiment measures it alone, with nothing to compare")
	}
	ens := make([]entry, len(s.Prompts))
	for i, p := range s.Prompts {
		d := map[string]any{
			"id": promptID, "type": "system", "name": p.Label, "content": p.Content,
			"parameters": p.Params, "author": "promptfoo import",
			"description": fmt.Sprintf("Prompt %d of a promptfoo config (%s)", i+1, p.Label),
		}
		rawJSON, err := json.Marshal(d)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(rawJSON, &m); err != nil {
			return err
		}
		ens[i] = entry{source: "promptfoo config", index: i + 1, data: m, raw: rawJSON}
	}
	rep, err := publishEntries(ctx, e, cfg, promptCatalog, tenant, ens, timeout)
	if err != nil {
		return err
	}
	versions := make([]int, len(rep.Items))
	for i, it := range rep.Items {
		switch it.Outcome {
		case outcomeCreated, outcomeUnchanged:
			versions[i] = it.Version
			fmt.Fprintf(e.Stderr, "prompt %d (%s): %s@%d %s\n", i+1, s.Prompts[i].Label, promptID, it.Version, it.Outcome)
		case outcomeRejected:
			return fmt.Errorf("prompt %d (%s) was rejected by the indexer: %s: %s", i+1, s.Prompts[i].Label, it.ReasonCode, oneLineText(it.Reason))
		default:
			return fmt.Errorf("no answer from the indexer within %s to prompt %d (%s): is the indexer running (`make dev` runs it)?", timeout, i+1, s.Prompts[i].Label)
		}
		for k := range i {
			if versions[k] == it.Version {
				return fmt.Errorf("prompts %d and %d of the config are the same version, %s@%d (the same content): nothing to compare", k+1, i+1, promptID, it.Version)
			}
		}
	}
	data["baseline_version"] = versions[0]
	data["candidate_versions"] = versions[1:]
	queries := make([]any, len(s.Queries))
	for i, q := range s.Queries {
		queries[i] = q
	}
	data["test_queries"] = queries
	ev := map[string]any{}
	if len(s.Assert) > 0 {
		ev["assert"] = s.Assert
	}
	if s.Threshold != nil {
		ev["threshold"] = *s.Threshold
	}
	if len(ev) > 0 {
		data["evaluation"] = ev
	}
	if s.Repetitions > 0 {
		data["repetitions"] = s.Repetitions
	}
	if s.Description != "" {
		data["name"] = s.Description
	}
	return nil
}

// warnIfNoConsumer notes on stderr when stream AGENTQ has no consumer of
// that name: the events wait in the stream, and nothing answers them now.
func warnIfNoConsumer(ctx context.Context, e Env, js jetstream.JetStream, name string) {
	if _, err := js.Consumer(ctx, bus.StreamName, name); errors.Is(err, jetstream.ErrConsumerNotFound) {
		fmt.Fprintf(e.Stderr, "note: stream AGENTQ has no %s consumer yet: the event is stored, but only a running %s answers it\n", name, name)
	}
}

// count is "1 query" or "3 queries".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func versionList(vs []int) string {
	if len(vs) == 0 {
		return "no candidates"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	if len(vs) == 1 {
		return "candidate " + parts[0]
	}
	return "candidates " + strings.Join(parts, ", ")
}
