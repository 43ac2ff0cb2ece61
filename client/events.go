package client

import (
	"encoding/json"
	"time"
)

// Event is the data of one input event: one of the types below, each
// published on <domain>.<event>.<tenant> as agentq.<domain>.<event>.v1.
// Its JSON must match the type's schema (schemas/<domain>.<event>.v1.json),
// which Publish checks before anything leaves. Optional fields are
// omitted when zero; those where zero means something (a rating of 0, step
// 0, a tier turned off) are pointers: write new(0.0), new(false).
type Event interface {
	// EventType is the CloudEvents type, e.g. agentq.tool.executed.v1.
	EventType() string
}

// RawEvent publishes data of any agentq event type as it is, for a type
// newer than this package. It is validated like the others.
type RawEvent struct {
	Type string
	Data json.RawMessage
}

func (e RawEvent) EventType() string { return e.Type }

// MarshalJSON is the data itself.
func (e RawEvent) MarshalJSON() ([]byte, error) {
	if len(e.Data) == 0 {
		return []byte("null"), nil
	}
	return e.Data, nil
}

// ToolExecuted reports one tool call and its outcome (tool.executed): the
// scorer rolls it into the tool's quality, the rater rates its output and
// the degrader watches it.
type ToolExecuted struct {
	ToolName  string `json:"tool_name"`
	Success   bool   `json:"success"`
	RunID     string `json:"run_id,omitempty"`
	StepIdx   *int   `json:"step_idx,omitempty"`
	LatencyMS int64  `json:"latency_ms,omitempty"`
	// ErrorClass names the kind of failure, e.g. timeout or rate_limited.
	ErrorClass string         `json:"error_class,omitempty"`
	Input      map[string]any `json:"input,omitempty"`
	// Output is an excerpt of the tool's output, at most 32,768
	// characters; OutputTruncated says it was cut.
	Output          string   `json:"output,omitempty"`
	OutputTruncated bool     `json:"output_truncated,omitempty"`
	LLMRating       *float64 `json:"llm_rating,omitempty"` // 0..1, when the agent rated the output itself
}

func (ToolExecuted) EventType() string { return "agentq.tool.executed.v1" }

// ToolRegistered registers or updates a tool definition (tool.registered).
type ToolRegistered struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// InputSchema is the JSON Schema (an object) of the tool's arguments.
	InputSchema map[string]any `json:"input_schema,omitempty"`
	Server      string         `json:"server,omitempty"`
	Tags        []string       `json:"tags,omitempty"`
}

func (ToolRegistered) EventType() string { return "agentq.tool.registered.v1" }

// PromptCreated adds a prompt version to the library (prompt.created).
// Content is a Go text/template whose parameters are declared in
// Parameters. Version 0 takes the next free version.
type PromptCreated struct {
	ID string `json:"id"`
	// Type is one of system, user, task, repair, routing,
	// tool_description, chain_of_thought, custom.
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Content     string         `json:"content"`
	Version     int            `json:"version,omitempty"`
	Description string         `json:"description,omitempty"`
	Parameters  []Param        `json:"parameters,omitempty"`
	Tags        []string       `json:"tags,omitempty"`
	Author      string         `json:"author,omitempty"`
	Metadata    map[string]any `json:"metadata,omitempty"`
}

func (PromptCreated) EventType() string { return "agentq.prompt.created.v1" }

// Param declares one template parameter of a prompt.
type Param struct {
	Name string `json:"name"`
	// Type is the JSON type of the value: string, number, integer,
	// boolean, array or object; "" accepts any.
	Type        string `json:"type,omitempty"`
	Required    bool   `json:"required,omitempty"`
	Default     any    `json:"default,omitempty"`
	Description string `json:"description,omitempty"`
}

// PromptUsed reports that a prompt version was used in a run
// (prompt.used): name it by PromptHash, or by PromptID and Version.
type PromptUsed struct {
	PromptHash      string   `json:"prompt_hash,omitempty"`
	PromptID        string   `json:"prompt_id,omitempty"`
	Version         int      `json:"version,omitempty"`
	Success         bool     `json:"success"`
	RunID           string   `json:"run_id,omitempty"`
	StepIdx         *int     `json:"step_idx,omitempty"`
	LatencyMS       int64    `json:"latency_ms,omitempty"`
	LLMRating       *float64 `json:"llm_rating,omitempty"`
	Input           string   `json:"input,omitempty"`
	Output          string   `json:"output,omitempty"`
	OutputTruncated bool     `json:"output_truncated,omitempty"`
}

func (PromptUsed) EventType() string { return "agentq.prompt.used.v1" }

// FeedbackSubmitted is a user's feedback on a tool or a prompt version
// (feedback.submitted): Target "tool" with ToolName, or "prompt" with
// PromptHash or PromptID and Version; a Rating (0..1), Thumbs ("up" or
// "down"), or both.
type FeedbackSubmitted struct {
	Target     string   `json:"target"`
	ToolName   string   `json:"tool_name,omitempty"`
	PromptHash string   `json:"prompt_hash,omitempty"`
	PromptID   string   `json:"prompt_id,omitempty"`
	Version    int      `json:"version,omitempty"`
	Rating     *float64 `json:"rating,omitempty"`
	Thumbs     string   `json:"thumbs,omitempty"`
	UserID     string   `json:"user_id,omitempty"`
	Comment    string   `json:"comment,omitempty"`
	Query      string   `json:"query,omitempty"`
	Response   string   `json:"response,omitempty"`
	RunID      string   `json:"run_id,omitempty"`
}

func (FeedbackSubmitted) EventType() string { return "agentq.feedback.submitted.v1" }

// ExperimentRequested asks the lab to compare prompt versions
// (experiment.requested). See docs/lab.md for what each field does.
type ExperimentRequested struct {
	PromptID          string      `json:"prompt_id"`
	ExperimentID      string      `json:"experiment_id,omitempty"`
	Name              string      `json:"name,omitempty"`
	TestQueries       []TestQuery `json:"test_queries,omitempty"`
	BaselineVersion   int         `json:"baseline_version,omitempty"`
	CandidateVersions []int       `json:"candidate_versions,omitempty"`
	Repetitions       int         `json:"repetitions,omitempty"`
	Model             string      `json:"model,omitempty"`
	JudgeModel        string      `json:"judge_model,omitempty"`
	Temperature       *float64    `json:"temperature,omitempty"`
	// Tools are OpenAI tool definitions offered to the model with every
	// trial instead of each version's metadata.tools; the report counts
	// the calls the answers make. They are never run.
	Tools      []map[string]any `json:"tools,omitempty"`
	Evaluation *Evaluation      `json:"evaluation,omitempty"`
	Auto       *AutoExperiment  `json:"auto,omitempty"`
}

func (ExperimentRequested) EventType() string { return "agentq.experiment.requested.v1" }

// TestQuery is one query of an experiment.
type TestQuery struct {
	Query     string         `json:"query"`
	Intent    string         `json:"intent,omitempty"`
	Domain    string         `json:"domain,omitempty"`
	Reference string         `json:"reference,omitempty"`
	Vars      map[string]any `json:"vars,omitempty"`
	Assert    []Assertion    `json:"assert,omitempty"`
	Threshold *float64       `json:"threshold,omitempty"`
}

// Assertion is one declarative check of a response, with promptfoo's
// names (contains, regex, is-json, ...).
type Assertion struct {
	Type      string   `json:"type"`
	Value     any      `json:"value,omitempty"`
	Threshold *float64 `json:"threshold,omitempty"`
	Weight    *float64 `json:"weight,omitempty"`
}

// Evaluation chooses an experiment's evaluation tiers; nil fields take the
// lab's defaults (every tier on).
type Evaluation struct {
	Structural        *bool          `json:"structural,omitempty"`
	Rules             *bool          `json:"rules,omitempty"`
	LLMJudge          *bool          `json:"llm_judge,omitempty"`
	JudgeBudgetTokens *int           `json:"judge_budget_tokens,omitempty"`
	Rubric            []Criterion    `json:"rubric,omitempty"`
	Format            string         `json:"format,omitempty"`
	ResponseSchema    map[string]any `json:"response_schema,omitempty"`
	Assert            []Assertion    `json:"assert,omitempty"`
	Threshold         *float64       `json:"threshold,omitempty"`
	Prices            *Prices        `json:"prices,omitempty"`
	Summary           *bool          `json:"summary,omitempty"`
}

// Criterion is one criterion of the LLM judge's rubric.
type Criterion struct {
	Name        string  `json:"name"`
	Weight      float64 `json:"weight"`
	Description string  `json:"description,omitempty"`
}

// Prices are what a model's tokens cost, in US dollars per million.
type Prices struct {
	PromptPerMillion     float64 `json:"prompt_per_million"`
	CompletionPerMillion float64 `json:"completion_per_million"`
}

// AutoExperiment asks the lab to generate candidates from negative
// feedback.
type AutoExperiment struct {
	CandidateCount int        `json:"candidate_count,omitempty"`
	Since          *time.Time `json:"since,omitempty"`
	// Incremental uses only feedback no earlier incremental run of the
	// prompt looked at (scheduled runs are incremental).
	Incremental         bool `json:"incremental,omitempty"`
	MaxSamples          int  `json:"max_samples,omitempty"`
	MinNegativeFeedback int  `json:"min_negative_feedback,omitempty"`
	// Holdout is the share of test queries kept out of generation.
	Holdout *float64 `json:"holdout,omitempty"`
	// Model analyses the feedback and writes the candidates.
	Model string `json:"model,omitempty"`
}

// ExperimentCancelled cancels a running experiment (operator command).
type ExperimentCancelled struct {
	ExperimentID string `json:"experiment_id"`
	Reason       string `json:"reason,omitempty"`
	CancelledBy  string `json:"cancelled_by,omitempty"`
}

func (ExperimentCancelled) EventType() string { return "agentq.experiment.cancelled.v1" }

// PromptActivated moves a label (e.g. production) to a prompt version
// (operator command). Every connected client serves the moved label's new
// version as soon as the indexer has applied it.
type PromptActivated struct {
	PromptID     string `json:"prompt_id"`
	Version      int    `json:"version"`
	Label        string `json:"label"`
	ActivatedBy  string `json:"activated_by,omitempty"`
	ExperimentID string `json:"experiment_id,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

func (PromptActivated) EventType() string { return "agentq.prompt.activated.v1" }

// ToolReleased lifts a tool's quarantine (operator command).
type ToolReleased struct {
	ToolName   string `json:"tool_name"`
	Reason     string `json:"reason,omitempty"`
	ReleasedBy string `json:"released_by,omitempty"`
}

func (ToolReleased) EventType() string { return "agentq.tool.released.v1" }
