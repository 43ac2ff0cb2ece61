package rating

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/agentq/agentq/internal/bus"
)

// Event types the rater consumes and publishes.
var (
	TypeToolExecuted = bus.Type("tool", "executed")
	TypePromptUsed   = bus.Type("prompt", "used")
	TypeToolRated    = bus.Type("tool", "rated")
	TypePromptRated  = bus.Type("prompt", "rated")
)

// Subjects are the rater's filter subjects.
var Subjects = []string{"tool.executed.*", "prompt.used.*"}

// ResultSubjects are the subjects the rater publishes its ratings on.
var ResultSubjects = []string{"tool.rated.*", "prompt.rated.*"}

// Target kinds, as the scorer names them.
const (
	TargetTool   = "tool"
	TargetPrompt = "prompt"
)

// Call is what the rater reads from one tool.executed or prompt.used event:
// the target, the outcome and the untrusted text to judge.
type Call struct {
	Target     string // TargetTool or TargetPrompt
	ToolName   string
	PromptHash string
	PromptID   string
	Version    int
	Success    bool
	ErrorClass string
	LatencyMs  int64 // -1 when unknown
	RunID      string
	StepIdx    *int64
	// Input is the call's arguments as compact JSON (tool.executed), or
	// the text the prompt was applied to (prompt.used); "" when absent.
	Input string
	// HasOutput reports whether the event carries an output at all;
	// Output may be "" when it does (an empty output).
	HasOutput bool
	Output    string
	Truncated bool     // output_truncated: Output is an excerpt
	LLMRating *float64 // the rating the agent attached, if any
}

// Key returns the target's identity as the scorer keys it: the tool name,
// the prompt hash, or "<prompt_id>@<version>".
func (c Call) Key() string {
	switch {
	case c.Target == TargetTool:
		return c.ToolName
	case c.PromptHash != "":
		return c.PromptHash
	default:
		return c.PromptID + "@" + strconv.Itoa(c.Version)
	}
}

type callData struct {
	ToolName        string          `json:"tool_name"`
	PromptHash      string          `json:"prompt_hash"`
	PromptID        string          `json:"prompt_id"`
	Version         *float64        `json:"version"` // JSON Schema's integer admits 2.0
	Success         *bool           `json:"success"`
	ErrorClass      string          `json:"error_class"`
	LatencyMs       *float64        `json:"latency_ms"`
	RunID           string          `json:"run_id"`
	StepIdx         *float64        `json:"step_idx"`
	Input           json.RawMessage `json:"input"`
	Output          *string         `json:"output"`
	OutputTruncated bool            `json:"output_truncated"`
	LLMRating       *float64        `json:"llm_rating"`
}

// Decode reads the call of a validated tool.executed or prompt.used event.
// Errors are permanent: the data passed its schema but still cannot be
// rated (no target, no success).
func Decode(d *bus.Delivery) (Call, error) {
	var e callData
	if err := bus.DecodeData(d.Event.Data(), &e); err != nil {
		return Call{}, bus.Permanentf("decode %s data: %w", d.Event.Type(), err)
	}
	c := Call{ErrorClass: e.ErrorClass, RunID: e.RunID, Truncated: e.OutputTruncated, LLMRating: e.LLMRating, LatencyMs: -1}
	switch d.Event.Type() {
	case TypeToolExecuted:
		c.Target = TargetTool
		if e.ToolName == "" {
			return c, bus.Permanentf("%s without tool_name", d.Event.Type())
		}
		c.ToolName = e.ToolName
	case TypePromptUsed:
		c.Target = TargetPrompt
		switch {
		case e.PromptHash != "":
			c.PromptHash = e.PromptHash
		case e.PromptID != "" && e.Version != nil:
			v := *e.Version
			if v != math.Trunc(v) || v < 1 || v > math.MaxInt32 {
				return c, bus.Permanentf("version %v is not a positive integer", v)
			}
			c.PromptID, c.Version = e.PromptID, int(v)
		default:
			return c, bus.Permanentf("%s without prompt_hash, nor prompt_id with version", d.Event.Type())
		}
	default:
		return c, bus.Permanentf("the rater does not handle %s", d.Event.Type())
	}
	if e.Success == nil {
		return c, bus.Permanentf("%s without success", d.Event.Type())
	}
	c.Success = *e.Success
	if e.LatencyMs != nil && *e.LatencyMs >= 0 {
		c.LatencyMs = int64(*e.LatencyMs)
	}
	if e.StepIdx != nil && *e.StepIdx >= 0 && *e.StepIdx == math.Trunc(*e.StepIdx) {
		s := int64(*e.StepIdx)
		c.StepIdx = &s
	}
	if e.Output != nil {
		c.HasOutput, c.Output = true, *e.Output
	}
	input, err := inputText(e.Input)
	if err != nil {
		return c, bus.Permanentf("%s input: %w", d.Event.Type(), err)
	}
	c.Input = input
	return c, nil
}

// inputText renders an input as the text the rater shows: a JSON string
// as its value, anything else as compact JSON.
func inputText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", fmt.Errorf("not JSON: %w", err)
	}
	return b.String(), nil
}
