package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/library"
)

// Spec is an accepted experiment, everything resolved: the job's payload.
// The versions' content is copied in, so a run never needs the prompt
// read model again, and a resumed run sees what the first one saw.
type Spec struct {
	RequestID    string        `json:"request_id"` // the experiment.requested event: the cause of every result
	ExperimentID string        `json:"experiment_id"`
	PromptID     string        `json:"prompt_id"`
	Name         string        `json:"name,omitempty"`
	Baseline     int           `json:"baseline"`
	Versions     []VersionSpec `json:"versions"` // the baseline first, then the candidates in request order
	Queries      []Query       `json:"queries"`
	Repetitions  int           `json:"repetitions"`
	Model        string        `json:"model"`
	JudgeModel   string        `json:"judge_model"`
	Temperature  float64       `json:"temperature"`
	Eval         Evaluation    `json:"evaluation"`
	Timeout      time.Duration `json:"timeout"`
	// Auto, for a run from feedback, is how the candidates are made:
	// until they are, Versions holds the baseline alone.
	Auto *AutoSpec `json:"auto,omitempty"`
	// Trace is the request's trace context, which every result carries.
	Trace bus.TraceContext `json:"trace,omitzero"`
}

// VersionSpec is one prompt version under test.
type VersionSpec struct {
	Version int             `json:"version"`
	Content string          `json:"content"`
	Params  []library.Param `json:"params,omitempty"`
	// Schema is the response schema in the version's metadata
	// (metadata.response_schema), used by tier 1 when the request has none.
	Schema json.RawMessage `json:"schema,omitempty"`
	// Tools are the OpenAI tool definitions its trials offer the model:
	// the request's tools, else the version's metadata.tools.
	Tools []json.RawMessage `json:"tools,omitempty"`
}

// Query is one test query of a request.
type Query struct {
	Query  string `json:"query"`
	Intent string `json:"intent,omitempty"`
	Domain string `json:"domain,omitempty"`
	// Reference is a known-good answer, shown to the LLM judge.
	Reference string `json:"reference,omitempty"`
	// Vars fill the version's parameters when it is rendered.
	Vars map[string]any `json:"vars,omitempty"`
	// Assert are this query's assertions (tier 2), after the evaluation's.
	Assert []Assertion `json:"assert,omitempty"`
	// Threshold, if set, passes tier 2 when its weighted score reaches it.
	Threshold *float64 `json:"threshold,omitempty"`
}

// Evaluation is how trials are judged.
type Evaluation struct {
	Structural bool `json:"structural"`
	Rules      bool `json:"rules"`
	Judge      bool `json:"llm_judge"`
	// Format and Schema configure tier 1 (FormatAuto, FormatText,
	// FormatJSON, FormatJSONSchema).
	Format string          `json:"format"`
	Schema json.RawMessage `json:"response_schema,omitempty"`
	// Assert apply to every query (promptfoo's defaultTest.assert);
	// Threshold is every query's unless it has its own.
	Assert      []Assertion `json:"assert,omitempty"`
	Threshold   *float64    `json:"threshold,omitempty"`
	Prices      *Prices     `json:"prices,omitempty"`
	JudgeBudget int         `json:"judge_budget_tokens"`
	Rubric      []Criterion `json:"rubric"`
	// Summary asks the model for a one-paragraph summary of the report.
	Summary bool `json:"summary"`
}

// Criterion is one line of the judge's rubric.
type Criterion struct {
	Name        string `json:"name"`
	Points      int    `json:"points"`
	Description string `json:"description,omitempty"`
}

func (e Evaluation) rubric() chat.Rubric {
	r := make(chat.Rubric, len(e.Rubric))
	for i, c := range e.Rubric {
		r[i] = chat.Criterion{Name: c.Name, Points: c.Points, Description: c.Description}
	}
	return r
}

// Trials is the number of trials the experiment plans.
func (s Spec) Trials() int { return len(s.Versions) * len(s.Queries) * s.Repetitions }

// Candidates are the versions compared with the baseline.
func (s Spec) Candidates() []int {
	out := []int{}
	for _, v := range s.Versions[1:] {
		out = append(out, v.Version)
	}
	return out
}

// request is experiment.requested's data.
type request struct {
	PromptID          string          `json:"prompt_id"`
	ExperimentID      string          `json:"experiment_id"`
	Name              string          `json:"name"`
	TestQueries       []Query         `json:"test_queries"`
	BaselineVersion   *int            `json:"baseline_version"`
	CandidateVersions []int           `json:"candidate_versions"`
	Repetitions       *int            `json:"repetitions"`
	Model             string          `json:"model"`
	JudgeModel        string          `json:"judge_model"`
	Temperature       *float64        `json:"temperature"`
	Evaluation        evaluationIn    `json:"evaluation"`
	Auto              json.RawMessage `json:"auto"`

	auto *autoIn   // Auto read by checkAuto, defaults filled in
	at   time.Time // the request's time: a run from feedback looks at nothing later
	// Tools, when given, are offered to every version instead of its
	// metadata.tools.
	Tools []json.RawMessage `json:"tools"`
}

type evaluationIn struct {
	Structural        *bool           `json:"structural"`
	Rules             *bool           `json:"rules"`
	LLMJudge          *bool           `json:"llm_judge"`
	JudgeBudgetTokens *int            `json:"judge_budget_tokens"`
	Rubric            []rubricIn      `json:"rubric"`
	Format            string          `json:"format"`
	ResponseSchema    json.RawMessage `json:"response_schema"`
	Assert            []Assertion     `json:"assert"`
	Threshold         *float64        `json:"threshold"`
	Prices            *Prices         `json:"prices"`
	Summary           *bool           `json:"summary"`
}

type rubricIn struct {
	Name        string  `json:"name"`
	Weight      float64 `json:"weight"`
	Description string  `json:"description"`
}

// Defaults of a request.
const (
	defaultRepetitions = 1
	defaultTemperature = 0.3
)

// Reason codes of lab.rejected.
const (
	ReasonNoModel        = "no_model"
	ReasonOverLimit      = "over_limit"
	ReasonUnknownPrompt  = "unknown_prompt"
	ReasonUnknownVersion = "unknown_version"
	ReasonInvalid        = "invalid_request"
	ReasonUnsupported    = "unsupported"
	ReasonDuplicate      = "experiment_id_taken"
	ReasonUnknownExp     = "unknown_experiment"
	ReasonFinished       = "already_finished"
)

// rejection is why a well-formed request cannot be run, for a person.
type rejection struct {
	code    string
	reason  string
	details map[string]any
}

func (r *rejection) Error() string { return r.code + ": " + r.reason }

func reject(code string, details map[string]any, format string, args ...any) *rejection {
	return &rejection{code: code, reason: fmt.Sprintf(format, args...), details: details}
}

// checkRequest applies what needs no prompt: the model, the limits, the
// evaluation's settings. It fills in the defaults.
func (l *Lab) checkRequest(r *request) (*Evaluation, *rejection) {
	o := l.opts
	if l.llm == nil {
		return nil, reject(ReasonNoModel, nil,
			"no model is configured for the lab, so no experiment can run (the lab never invents responses): set AGENTQ_LLM_BASE_URL and AGENTQ_LLM_MODEL to an OpenAI-compatible server (a local Ollama or vLLM works)")
	}
	if r.Model == "" && o.Model == "" {
		return nil, reject(ReasonNoModel, nil, "the request names no model and AGENTQ_LLM_MODEL is empty: name one in model")
	}
	if rej := l.checkAuto(r); rej != nil {
		return nil, rej
	}
	over := func(what string, got, limit int, setting string) *rejection {
		return reject(ReasonOverLimit, map[string]any{"limit": limit, "got": got, "setting": setting},
			"%d %s is over the limit of %d (%s)", got, what, limit, setting)
	}
	if n := len(r.TestQueries); n > o.Lab.MaxQueries {
		return nil, over("test queries", n, o.Lab.MaxQueries, "AGENTQ_LAB_MAX_QUERIES")
	}
	if len(r.TestQueries) == 0 && r.auto == nil {
		return nil, reject(ReasonInvalid, nil, "the request has no test queries")
	}
	if n := 1 + len(r.CandidateVersions); n > o.Lab.MaxVersions {
		return nil, over("versions (the baseline and its candidates)", n, o.Lab.MaxVersions, "AGENTQ_LAB_MAX_VERSIONS")
	}
	if r.Repetitions == nil {
		n := defaultRepetitions
		r.Repetitions = &n
	}
	if n := *r.Repetitions; n > o.Lab.MaxRepetitions {
		return nil, over("repetitions", n, o.Lab.MaxRepetitions, "AGENTQ_LAB_MAX_REPETITIONS")
	}
	for i, c := range r.CandidateVersions {
		if slices.Contains(r.CandidateVersions[:i], c) {
			return nil, reject(ReasonInvalid, nil, "candidate version %d is listed twice", c)
		}
	}
	in := r.Evaluation
	e := &Evaluation{
		Structural: boolOr(in.Structural, true), Rules: boolOr(in.Rules, true), Judge: boolOr(in.LLMJudge, true),
		Format: in.Format, Schema: in.ResponseSchema, Assert: in.Assert, Threshold: in.Threshold, Prices: in.Prices,
		JudgeBudget: o.Lab.JudgeBudget, Summary: boolOr(in.Summary, true),
	}
	if in.JudgeBudgetTokens != nil {
		e.JudgeBudget = *in.JudgeBudgetTokens
	}
	if e.Format == "" {
		e.Format = FormatAuto
	}
	if !slices.Contains([]string{FormatAuto, FormatText, FormatJSON, FormatJSONSchema}, e.Format) {
		return nil, reject(ReasonInvalid, nil, "evaluation.format %q: want auto, text, json or json_schema", e.Format)
	}
	if len(e.Schema) > 0 {
		if _, err := compileSchema(e.Schema); err != nil {
			return nil, reject(ReasonInvalid, nil, "evaluation.response_schema is not a usable JSON Schema: %v", err)
		}
	}
	if e.Threshold != nil && (*e.Threshold < 0 || *e.Threshold > 1) {
		return nil, reject(ReasonInvalid, nil, "evaluation.threshold %v: want 0..1", *e.Threshold)
	}
	if _, err := compileAssertions(e.Assert, e.Prices, "evaluation"); err != nil {
		return nil, reject(ReasonInvalid, nil, "%v", err)
	}
	for i, q := range r.TestQueries {
		if _, err := compileAssertions(q.Assert, e.Prices, fmt.Sprintf("test query %d", i+1)); err != nil {
			return nil, reject(ReasonInvalid, nil, "%v", err)
		}
		if q.Threshold != nil && (*q.Threshold < 0 || *q.Threshold > 1) {
			return nil, reject(ReasonInvalid, nil, "test query %d: threshold %v: want 0..1", i+1, *q.Threshold)
		}
	}
	if err := checkTools(r.Tools); err != nil {
		return nil, reject(ReasonInvalid, nil, "tools: %v", err)
	}
	rubric, rej := rubricFrom(in.Rubric)
	if rej != nil {
		return nil, rej
	}
	e.Rubric = rubric
	return e, nil
}

// rubricFrom turns a request's weighted rubric into points: whole weights
// are the points; other weights are scaled to 100 points in all. A
// criterion of weight 0 is left out.
func rubricFrom(in []rubricIn) ([]Criterion, *rejection) {
	if len(in) == 0 {
		var out []Criterion
		for _, c := range chat.DefaultRubric() {
			out = append(out, Criterion{Name: c.Name, Points: c.Points, Description: c.Description})
		}
		return out, nil
	}
	sum, whole := 0.0, true
	for _, c := range in {
		sum += c.Weight
		whole = whole && c.Weight == math.Trunc(c.Weight) && c.Weight <= 1000
	}
	if sum <= 0 {
		return nil, reject(ReasonInvalid, nil, "evaluation.rubric: every weight is 0")
	}
	var out []Criterion
	for _, c := range in {
		if c.Weight == 0 {
			continue
		}
		p := int(c.Weight)
		if !whole {
			p = max(1, int(math.Round(100*c.Weight/sum)))
		}
		out = append(out, Criterion{Name: c.Name, Points: p, Description: c.Description})
	}
	r := make(chat.Rubric, len(out))
	for i, c := range out {
		r[i] = chat.Criterion{Name: c.Name, Points: c.Points, Description: c.Description}
	}
	if err := r.Validate(); err != nil {
		return nil, reject(ReasonInvalid, nil, "evaluation.rubric: %v", err)
	}
	return out, nil
}

func boolOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

// resolve completes an accepted request with the prompt's versions from
// the read model: the baseline (the request's, else the version labelled
// production, else the latest) and the candidates, each rendered once per
// query to find missing parameters now rather than in every trial.
func (l *Lab) resolve(ctx context.Context, q querier, tenant, eventID string, r *request, e *Evaluation) (*Spec, *rejection, error) {
	known, production, err := promptVersions(ctx, q, tenant, r.PromptID)
	if err != nil {
		return nil, nil, err
	}
	if len(known) == 0 {
		return nil, reject(ReasonUnknownPrompt, map[string]any{"prompt_id": r.PromptID},
			"prompt %s has no versions in tenant %s that the lab has seen indexed", r.PromptID, tenant), nil
	}
	// The default baseline is never one of the candidates: the version
	// labelled production, else the latest, among the others.
	baseline := 0
	switch {
	case r.BaselineVersion != nil:
		baseline = *r.BaselineVersion
	case production > 0 && !slices.Contains(r.CandidateVersions, production):
		baseline = production
	default:
		for i := len(known) - 1; i >= 0 && baseline == 0; i-- {
			if !slices.Contains(r.CandidateVersions, known[i]) {
				baseline = known[i]
			}
		}
		if baseline == 0 {
			return nil, reject(ReasonUnknownVersion, map[string]any{"prompt_id": r.PromptID, "known": known},
				"every version of prompt %s the lab knows (%v) is a candidate: name baseline_version", r.PromptID, known), nil
		}
	}
	versions := append([]int{baseline}, r.CandidateVersions...)
	for _, v := range versions {
		if !slices.Contains(known, v) {
			return nil, reject(ReasonUnknownVersion, map[string]any{"prompt_id": r.PromptID, "version": v, "known": known},
				"prompt %s has no version %d (known: %v)", r.PromptID, v, known), nil
		}
	}
	if slices.Contains(r.CandidateVersions, baseline) {
		return nil, reject(ReasonInvalid, nil, "version %d is both the baseline and a candidate", baseline), nil
	}
	specs, err := versionContents(ctx, q, tenant, r.PromptID, versions)
	if err != nil {
		return nil, nil, err
	}
	if e.Format == FormatJSONSchema && len(e.Schema) == 0 {
		for _, v := range specs {
			if len(v.Schema) == 0 {
				return nil, reject(ReasonInvalid, nil,
					"evaluation.format json_schema needs evaluation.response_schema, or a response_schema in the metadata of every version (version %d has none)", v.Version), nil
			}
		}
	}
	for i := range specs {
		if r.Tools != nil {
			specs[i].Tools = r.Tools
		} else if err := checkTools(specs[i].Tools); err != nil {
			return nil, reject(ReasonInvalid, nil, "version %d's metadata.tools: %v", specs[i].Version, err), nil
		}
	}
	for _, v := range specs {
		if len(v.Schema) > 0 {
			if _, err := compileSchema(v.Schema); err != nil {
				return nil, reject(ReasonInvalid, nil, "version %d's metadata.response_schema is not a usable JSON Schema: %v", v.Version, err), nil
			}
		}
		for i, tq := range r.TestQueries {
			if _, err := library.Render(ctx, v.Content, v.Params, tq.Vars, library.Limits{}); err != nil {
				return nil, reject(ReasonInvalid, nil, "version %d cannot be rendered for test query %d: %v (give its parameters in test_queries[].vars)",
					v.Version, i+1, err), nil
			}
		}
	}
	s := &Spec{
		RequestID: eventID, ExperimentID: r.ExperimentID, PromptID: r.PromptID, Name: r.Name,
		Baseline: baseline, Versions: specs, Queries: r.TestQueries, Repetitions: *r.Repetitions,
		Model: strings.TrimSpace(r.Model), JudgeModel: strings.TrimSpace(r.JudgeModel),
		Temperature: defaultTemperature, Eval: *e, Timeout: l.opts.Lab.Timeout,
	}
	if s.ExperimentID == "" {
		s.ExperimentID = eventID
	}
	if r.Temperature != nil {
		s.Temperature = *r.Temperature
	}
	if s.Model == "" {
		s.Model = l.opts.Model
	}
	if s.JudgeModel == "" {
		s.JudgeModel = l.opts.Lab.JudgeModel
	}
	if s.JudgeModel == "" {
		s.JudgeModel = s.Model
	}
	return s, nil, nil
}
