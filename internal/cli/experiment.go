package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"github.com/agentq/agentq/internal/answer"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/promptfoo"
	labreport "github.com/agentq/agentq/internal/report"
	"github.com/agentq/agentq/schemas"
)

// This file holds agentq experiment: requesting experiments (from
// agentq's own experiment files, promptfoo configs or flags) and following
// them, reading the lab's state through its request/reply service
// (experiments.get, .list and .trials) and the human gate, activate.

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
	reg, err := schemas.Load()
	if err != nil {
		return err
	}
	ev, err := bus.NewEvent(lab.TypeRequested, *tenant, "agentq-cli", data)
	if err != nil {
		return err
	}
	if err := reg.Validate(ev.Type(), ev.Data()); err != nil {
		return usageError(e, fs, name, "the experiment is not a valid experiment.requested: %v", err)
	}
	expID := data["experiment_id"].(string)

	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	start, err := streamEnd(ctx, js)
	if err != nil {
		return err
	}
	reply, err := followFrom(ctx, js, start, *tenant, []string{ev.ID()}, lab.TypeStarted, lab.TypeRejected)
	if err != nil {
		return err
	}
	defer reply.Stop()
	var ending *answer.Set
	if *wait {
		if ending, err = followFrom(ctx, js, start, *tenant, []string{ev.ID()}, lab.TypeCompleted, lab.TypeFailed); err != nil {
			return err
		}
		defer ending.Stop()
	}
	warnIfNoConsumer(ctx, e, js, "lab")
	if _, err := bus.NewPublisher(js, reg).Publish(ctx, ev); err != nil {
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

// streamEnd is stream AGENTQ's last sequence: answers to events published
// from now on come after it.
func streamEnd(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	s, err := js.Stream(ctx, bus.StreamName)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", bus.StreamName, err)
	}
	return s.CachedInfo().State.LastSeq, nil
}

// followFrom follows tenant's results of types after sequence start and
// keeps those caused by causes.
func followFrom(ctx context.Context, js jetstream.JetStream, start uint64, tenant string, causes []string, types ...string) (*answer.Set, error) {
	subjects := make([]string, len(types))
	for i, t := range types {
		subjects[i], _ = bus.SubjectFor(t, tenant)
	}
	return answer.Follow(ctx, js, subjects,
		jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start + 1}, causes)
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

// --- reading the lab's state ---

// getExperiment asks the lab for experiment id.
func getExperiment(ctx context.Context, e Env, cfg config.Config, tenant, id string) (lab.Experiment, error) {
	var reply struct {
		Experiment lab.Experiment `json:"experiment"`
	}
	err := call(ctx, e, cfg, lab.GetSubject+"."+tenant, requestTimeout, lab.GetRequest{ID: id}, &reply)
	return reply.Experiment, err
}

// idCommand parses the flags and the one ID of a command.
func idCommand(e Env, name string, args []string, define func(fs *flag.FlagSet)) (tenant, id string, err error) {
	fs := flags(name, e)
	t := tenantFlag(fs, e)
	if define != nil {
		define(fs)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return "", "", err
	}
	if len(pos) != 1 {
		return "", "", usageError(e, fs, name, "one experiment ID is required, got %d arguments", len(pos))
	}
	if err := checkTenant(e, fs, name, *t); err != nil {
		return "", "", err
	}
	return *t, pos[0], nil
}

func runExperimentStatus(ctx context.Context, e Env, cfg config.Config, args []string) error {
	var asJSON *bool
	tenant, id, err := idCommand(e, "experiment status", args, func(fs *flag.FlagSet) {
		asJSON = fs.Bool("json", false, "print the experiment as JSON (without its report)")
	})
	if err != nil {
		return err
	}
	x, err := getExperiment(ctx, e, cfg, tenant, id)
	if err != nil {
		return err
	}
	if *asJSON {
		x.Report, x.Judge, x.Summary, x.Partial = nil, nil, "", false
		return writeJSON(e.Stdout, x)
	}
	printStatus(e.Stdout, x)
	return nil
}

func printStatus(w io.Writer, x lab.Experiment) {
	pct := 0
	if x.TotalTrials > 0 {
		pct = 100 * x.CompletedTrials / x.TotalTrials
	}
	status := x.Status
	if x.CancelRequested && x.FinishedAt == nil {
		status += " (cancelling)"
	}
	fmt.Fprintf(w, "experiment %s: %s, %d of %d trials (%d%%)\n", x.ID, status, x.CompletedTrials, x.TotalTrials, pct)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", k, v)
		}
	}
	row("name", x.Name)
	row("prompt", fmt.Sprintf("%s: version %d against %s", x.PromptID, x.BaselineVersion, versionList(x.CandidateVersions)))
	row("model", x.Model+", judge "+x.JudgeModel)
	row("created", x.CreatedAt.UTC().Format(time.RFC3339))
	if x.StartedAt != nil {
		row("started", x.StartedAt.UTC().Format(time.RFC3339))
	}
	if x.FinishedAt != nil {
		took := ""
		if x.StartedAt != nil {
			took = fmt.Sprintf(" (ran %s)", x.FinishedAt.Sub(*x.StartedAt).Round(100*time.Millisecond))
		}
		row("finished", x.FinishedAt.UTC().Format(time.RFC3339)+took)
	}
	if x.ReasonCode != "" {
		row("reason", x.ReasonCode+": "+oneLineText(x.Reason))
	}
	if r := x.Recommendation; r != nil {
		so := ""
		if x.Partial {
			so = " (so far: the trials stored)"
		}
		row("recommends", fmt.Sprintf("version %d, confidence %s%s", r.Version, r.Confidence, so))
	}
	_ = tw.Flush()
}

func runExperimentList(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "experiment list"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	status := fs.String("status", "", "only experiments in this status: queued, running, completed, failed or cancelled")
	prompt := fs.String("prompt", "", "only experiments of this prompt")
	limit := fs.Int("limit", 50, "at most this many (1 to 200)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(e, fs, name, "no arguments, got %d", len(pos))
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	var reply struct {
		Experiments []lab.Experiment `json:"experiments"`
	}
	if err := call(ctx, e, cfg, lab.ListSubject+"."+*tenant, requestTimeout,
		lab.ListRequest{Status: *status, PromptID: *prompt, Limit: *limit}, &reply); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.Stdout, reply)
	}
	if len(reply.Experiments) == 0 {
		fmt.Fprintf(e.Stdout, "no experiments for tenant %s\n", *tenant)
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROMPT\tSTATUS\tVERSIONS\tTRIALS\tRECOMMENDS\tCREATED")
	for _, x := range reply.Experiments {
		rec := "-"
		if r := x.Recommendation; r != nil {
			rec = fmt.Sprintf("%d (%s)", r.Version, r.Confidence)
		}
		versions := strconv.Itoa(x.BaselineVersion)
		if len(x.CandidateVersions) > 0 {
			versions += " vs " + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(x.CandidateVersions)), ","), "[]")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", x.ID, x.PromptID, x.Status, versions, x.CompletedTrials, x.TotalTrials,
			rec, x.CreatedAt.UTC().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}

func runExperimentCancel(ctx context.Context, e Env, cfg config.Config, args []string) error {
	var reason, by *string
	var timeout *time.Duration
	var asJSON *bool
	tenant, id, err := idCommand(e, "experiment cancel", args, func(fs *flag.FlagSet) {
		reason = fs.String("reason", "", "why (kept in the event and the experiment's failure)")
		by = fs.String("by", e.Getenv("USER"), "who cancels it (kept in the event as cancelled_by)")
		timeout = fs.Duration("timeout", 30*time.Second, "how long to wait for the experiment to stop")
		asJSON = fs.Bool("json", false, "print the experiment as JSON once stopped")
	})
	if err != nil {
		return err
	}
	x, err := getExperiment(ctx, e, cfg, tenant, id)
	if err != nil {
		return err
	}
	if x.FinishedAt != nil {
		return fmt.Errorf("experiment %s has already ended (%s): nothing to cancel", id, x.Status)
	}
	data := map[string]any{"experiment_id": id}
	if *reason != "" {
		data["reason"] = *reason
	}
	if *by != "" {
		data["cancelled_by"] = *by
	}
	reg, err := schemas.Load()
	if err != nil {
		return err
	}
	ev, err := bus.NewEvent(lab.TypeCancelled, tenant, "agentq-cli", data)
	if err != nil {
		return err
	}
	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	start, err := streamEnd(ctx, js)
	if err != nil {
		return err
	}
	// The lab refuses the cancellation (an answer to it), or the
	// experiment ends (an answer to its request).
	ans, err := followFrom(ctx, js, start, tenant, []string{ev.ID(), x.RequestEventID}, lab.TypeRejected, lab.TypeCompleted, lab.TypeFailed)
	if err != nil {
		return err
	}
	defer ans.Stop()
	if _, err := bus.NewPublisher(js, reg).Publish(ctx, ev); err != nil {
		return err
	}
	deadline := time.Now().Add(*timeout)
	for {
		ans.Wait(ctx, time.Until(deadline), nil)
		if a, ok := ans.Get(ev.ID()); ok && a.Type == lab.TypeRejected {
			var r rejected
			_ = json.Unmarshal(a.Data, &r)
			return fmt.Errorf("refused by the lab: %s: %s", r.ReasonCode, oneLineText(r.Reason))
		}
		if _, ok := ans.Get(x.RequestEventID); ok || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if x, err = getExperiment(ctx, e, cfg, tenant, id); err != nil {
		return err
	}
	if x.FinishedAt == nil {
		return fmt.Errorf("experiment %s has not stopped within %s (it is %s): is the lab running?", id, *timeout, x.Status)
	}
	if *asJSON {
		x.Report, x.Judge, x.Summary = nil, nil, ""
		return writeJSON(e.Stdout, x)
	}
	fmt.Fprintf(e.Stdout, "experiment %s %s after %d of %d trials (its report covers them: agentq experiment report %s --tenant %s)\n",
		id, x.Status, x.CompletedTrials, x.TotalTrials, id, tenant)
	return nil
}

func runExperimentTrials(ctx context.Context, e Env, cfg config.Config, args []string) error {
	var version, query, limit, offset *int
	var failed, full, asJSON *bool
	tenant, id, err := idCommand(e, "experiment trials", args, func(fs *flag.FlagSet) {
		version = fs.Int("version", 0, "only this version's trials")
		query = fs.Int("query", -1, "only this test query's trials (its index, from 0)")
		failed = fs.Bool("failed", false, "only the trials that did not pass")
		limit = fs.Int("limit", 100, "at most this many (1 to 1000)")
		offset = fs.Int("offset", 0, "skip this many first")
		full = fs.Bool("full", false, "whole responses (as stored, up to 16 KiB), not their first line")
		asJSON = fs.Bool("json", false, "print JSON")
	})
	if err != nil {
		return err
	}
	req := lab.TrialsRequest{ID: id, Version: *version, Failed: *failed, Limit: *limit, Offset: *offset}
	if *query >= 0 {
		req.Query = query
	}
	if *full || *asJSON {
		req.MaxResponseBytes = lab.MaxStoredResponse
	}
	var reply lab.TrialsReply
	if err := call(ctx, e, cfg, lab.TrialsSubject+"."+tenant, requestTimeout, req, &reply); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.Stdout, reply)
	}
	if len(reply.Trials) == 0 {
		fmt.Fprintf(e.Stdout, "experiment %s: no trials match (%d stored match before --offset)\n", id, reply.Total)
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tQUERY\tREP\tRESULT\tSCORE\tTIERS\tMS\tTOKENS\tRESPONSE")
	for _, t := range reply.Trials {
		result := "pass"
		if !t.Pass {
			result = "FAIL"
		}
		text := t.Response
		if t.Error != "" {
			result, text = "ERROR", t.Error
		}
		if !*full {
			text = truncateText(oneLineText(text), 70)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%.2f\t%s\t%.0f\t%d\t%s\n", t.Version, t.Query, t.Repetition, result, t.Score,
			tierMarks(t.Tiers), t.DurationMs, t.PromptTokens+t.CompletionTokens, text)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if shown := reply.Trials; *offset+len(shown) < reply.Total {
		fmt.Fprintf(e.Stdout, "%d of %d shown: --offset %d for more\n", len(shown), reply.Total, *offset+len(shown))
	}
	return nil
}

// tierMarks is a trial's tiers in brief: S, R, J with ✓ or ✗.
func tierMarks(tiers []lab.TierResult) string {
	if len(tiers) == 0 {
		return "-"
	}
	var b strings.Builder
	for i, t := range tiers {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(tierInitial(t.Tier))
		if t.Pass {
			b.WriteString("✓")
		} else {
			b.WriteString("✗")
		}
	}
	return b.String()
}

func runExperimentReport(ctx context.Context, e Env, cfg config.Config, args []string) error {
	var asJSON *bool
	tenant, id, err := idCommand(e, "experiment report", args, func(fs *flag.FlagSet) {
		asJSON = fs.Bool("json", false, "print the experiment with its report, judge spend and summary as JSON")
	})
	if err != nil {
		return err
	}
	x, err := getExperiment(ctx, e, cfg, tenant, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.Stdout, x)
	}
	return printReport(e.Stdout, x)
}

// printReport prints an experiment's report as tables.
func printReport(w io.Writer, x lab.Experiment) error {
	printStatus(w, x)
	if len(x.Report) == 0 {
		fmt.Fprintln(w, "\nno report yet: no trial is stored")
		return nil
	}
	var rep labreport.Report
	if err := json.Unmarshal(x.Report, &rep); err != nil {
		return fmt.Errorf("decode the report: %w", err)
	}
	if x.Partial {
		fmt.Fprintln(w, "\nthe experiment has not ended: this report covers the trials stored so far")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tTRIALS\tPASS RATE\t95% CI\tSCORE\tWEIGHTED\tAVG MS\tTOKENS\tERRORS\tTIERS (pass rate)\tTOOL CALLS")
	for _, v := range rep.Versions {
		name := strconv.Itoa(v.Version)
		if v.Baseline {
			name += " (baseline)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s–%s\t%.2f\t%.2f\t%.0f\t%d\t%s\t%s\t%s\n", name, v.Trials, percent(v.PassRate),
			percent(v.PassRateCI.Low), percent(v.PassRateCI.High), v.AvgScore, v.WeightedScore, v.AvgDurationMs, v.TotalTokens,
			percent(v.ErrorRate), tierRates(v.TierBreakdown), toolCounts(v.ToolUsage))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Comparisons) > 0 {
		fmt.Fprintf(w, "\nagainst the baseline, query by query (%d queries; p-values Holm-corrected):\n", rep.Queries)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CANDIDATE\tΔ PASS RATE\tΔ SCORE\tBETTER/WORSE/TIED\tPASS p\tSCORE p\tSIGNIFICANT\tQUERIES NEEDED")
		for _, c := range rep.Comparisons {
			needed := "-"
			if c.QueriesNeeded != nil {
				needed = strconv.Itoa(*c.QueriesNeeded)
			}
			sig := "no"
			switch {
			case c.Significant:
				sig = "yes, better"
			case c.SignificantlyWorse:
				sig = "yes, worse"
			}
			fmt.Fprintf(tw, "%d\t%+.0f pt\t%+.2f\t%d/%d/%d\t%.3g\t%.3g\t%s\t%s\n", c.Version, 100*c.PassRateDiff, c.AvgScoreDiff,
				c.PassTest.Better, c.PassTest.Worse, c.PassTest.Ties, c.PassTest.PHolm, c.ScoreTest.PHolm, sig, needed)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	r := rep.Recommendation
	fmt.Fprintf(w, "\nrecommendation: version %d, confidence %s\n", r.Version, r.Confidence)
	if r.Reason != "" {
		fmt.Fprintf(w, "  %s\n", oneLineText(r.Reason))
	}
	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(w, "%s:\n", title)
		for _, it := range items {
			fmt.Fprintf(w, "  - %s\n", oneLineText(it))
		}
	}
	list("improvements", r.Improvements)
	list("warnings", r.Warnings)
	var failing []string
	for _, v := range rep.Versions {
		for _, q := range v.FailingQueries {
			text := ""
			if q < len(x.Queries) {
				text = " " + strconv.Quote(truncateText(x.Queries[q], 60))
			}
			failing = append(failing, fmt.Sprintf("version %d, query %d%s", v.Version, q, text))
		}
	}
	list("queries that failed every time", failing)
	if len(x.Judge) > 0 {
		var j lab.JudgeSpend
		if err := json.Unmarshal(x.Judge, &j); err == nil {
			fmt.Fprintf(w, "judge: %s, %d of %d tokens spent, %d trials skipped (budget), %d not judged (errors)\n",
				j.Model, j.SpentTokens, j.BudgetTokens, j.Skipped, j.Failed)
		}
	}
	if x.Summary != "" {
		fmt.Fprintf(w, "\nsummary (by the model):\n  %s\n", oneLineText(x.Summary))
	}
	return nil
}

// tierInitial names a tier in a table: S(tructural), R(ules), J(udge).
func tierInitial(t labreport.Tier) string {
	switch t {
	case labreport.TierStructural:
		return "S"
	case labreport.TierRules:
		return "R"
	case labreport.TierJudge:
		return "J"
	}
	return string(t)
}

func percent(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

func tierRates(m map[labreport.Tier]float64) string {
	var parts []string
	for _, t := range []labreport.Tier{labreport.TierStructural, labreport.TierRules, labreport.TierJudge} {
		if v, ok := m[t]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", tierInitial(t), percent(v)))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func toolCounts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, name := range sortedNames(m) {
		parts = append(parts, fmt.Sprintf("%s×%d", name, m[name]))
	}
	return strings.Join(parts, " ")
}

func sortedNames(m map[string]int) []string {
	return slices.Sorted(maps.Keys(m))
}

// --- agentq experiment activate ---

func runExperimentActivate(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "experiment activate"
	var version *int
	var label, by *string
	var yes, asJSON *bool
	var timeout *time.Duration
	tenant, id, err := idCommand(e, name, args, func(fs *flag.FlagSet) {
		version = fs.Int("version", 0, "activate this version instead of the recommended one")
		label = fs.String("label", "production", "label to move to the version")
		by = fs.String("by", e.Getenv("USER"), "who activates it (kept in the event as activated_by)")
		yes = fs.Bool("yes", false, "do not ask for confirmation")
		timeout = fs.Duration("timeout", answerTimeout, "how long to wait for the indexer's answer")
		asJSON = fs.Bool("json", false, "print the outcome as JSON")
	})
	if err != nil {
		return err
	}
	x, err := getExperiment(ctx, e, cfg, tenant, id)
	if err != nil {
		return err
	}
	if x.Status != "completed" || len(x.Report) == 0 {
		return fmt.Errorf("experiment %s is %s: only a completed experiment's recommendation can be activated (agentq prompt activate moves a label by hand)", id, x.Status)
	}
	var rep labreport.Report
	if err := json.Unmarshal(x.Report, &rep); err != nil {
		return fmt.Errorf("decode the report: %w", err)
	}
	r := rep.Recommendation
	w := e.Stderr
	if !*asJSON {
		w = e.Stdout
	}
	fmt.Fprintf(w, "experiment %s recommends %s@%d with confidence %s (baseline: version %d)\n", id, x.PromptID, r.Version, r.Confidence, x.BaselineVersion)
	if r.Reason != "" {
		fmt.Fprintf(w, "  %s\n", oneLineText(r.Reason))
	}
	for _, it := range r.Improvements {
		fmt.Fprintf(w, "  + %s\n", oneLineText(it))
	}
	for _, it := range r.Warnings {
		fmt.Fprintf(w, "  ! %s\n", oneLineText(it))
	}
	target := r.Version
	if *version > 0 {
		if *version != x.BaselineVersion && !slices.Contains(x.CandidateVersions, *version) {
			return fmt.Errorf("version %d was not in experiment %s (versions %d and %v)", *version, id, x.BaselineVersion, x.CandidateVersions)
		}
		target = *version
		if target != r.Version {
			fmt.Fprintf(w, "you chose version %d, not the recommended %d\n", target, r.Version)
		}
	} else if r.Version == x.BaselineVersion {
		fmt.Fprintf(w, "the recommendation is to keep the baseline, version %d: nothing to activate (--version N activates another)\n", r.Version)
		return nil
	}
	if !*yes {
		fmt.Fprintf(e.Stderr, "activate %s@%d as %s for tenant %s? [y/N] ", x.PromptID, target, *label, tenant)
		line, _ := bufio.NewReader(e.Stdin).ReadString('\n')
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
		default:
			return errors.New("not confirmed: nothing was activated")
		}
	}
	data := map[string]any{
		"prompt_id": x.PromptID, "version": target, "label": *label, "experiment_id": id,
		"reason": activationReason(id, target, r),
	}
	if *by != "" {
		data["activated_by"] = *by
	}
	reg, err := schemas.Load()
	if err != nil {
		return err
	}
	ev, err := bus.NewEvent(indexer.TypePromptActivated, tenant, "agentq-cli", data)
	if err != nil {
		return err
	}
	if err := reg.Validate(ev.Type(), ev.Data()); err != nil {
		return err
	}
	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	a, err := awaitOne(ctx, e, js, reg, ev, indexer.TypePromptIndexed, *timeout)
	if err != nil {
		return err
	}
	out := activation{EventID: ev.ID(), ExperimentID: id, PromptID: x.PromptID, Version: target, Label: *label}
	var failure error
	out.activationOutcome, failure = readActivation(a, *timeout, ev.ID())
	if *asJSON {
		if err := writeJSON(e.Stdout, out); err != nil {
			return err
		}
	} else if failure == nil {
		fmt.Fprintf(e.Stdout, "%s@%d is now %s for tenant %s (labels on this version: %s), activated from experiment %s\n",
			x.PromptID, target, *label, tenant, strings.Join(out.Labels, ", "), id)
	}
	return failure
}

// activation is what activate --json prints.
type activation struct {
	EventID      string `json:"event_id"`
	ExperimentID string `json:"experiment_id"`
	PromptID     string `json:"prompt_id"`
	Version      int    `json:"version"`
	Label        string `json:"label"`
	activationOutcome
}

// activationReason is the reason prompt.activated records.
func activationReason(id string, target int, r labreport.Recommendation) string {
	if target == r.Version {
		return fmt.Sprintf("recommended by experiment %s with confidence %s", id, r.Confidence)
	}
	return fmt.Sprintf("chosen from experiment %s over its recommended version %d (confidence %s)", id, r.Version, r.Confidence)
}
