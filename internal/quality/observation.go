package quality

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/agentq/agentq/internal/bus"
)

// Event types the scorer consumes.
var (
	TypeToolExecuted      = bus.Type("tool", "executed")
	TypePromptUsed        = bus.Type("prompt", "used")
	TypeFeedbackSubmitted = bus.Type("feedback", "submitted")
	TypeToolRated         = bus.Type("tool", "rated")
	TypePromptRated       = bus.Type("prompt", "rated")
	TypeQualityChanged    = bus.Type("quality", "changed")
)

// Subjects are the scorer's filter subjects.
var Subjects = []string{"tool.executed.*", "prompt.used.*", "feedback.submitted.*", "tool.rated.*", "prompt.rated.*"}

type observationKind int

const (
	obsCall observationKind = iota
	obsRating
	obsFeedback
)

// observation is what one event contributes to one target.
type observation struct {
	key        Key
	kind       observationKind
	success    bool
	latencyMs  float64 // -1 when unknown
	rating     *float64
	toolName   string
	promptHash string
	promptID   string
	version    int
}

// target fields shared by the input events.
type targetFields struct {
	ToolName   string   `json:"tool_name"`
	PromptHash string   `json:"prompt_hash"`
	PromptID   string   `json:"prompt_id"`
	Version    *float64 `json:"version"` // JSON Schema's integer admits 2.0; Go's int does not
}

type eventData struct {
	targetFields
	Target    string   `json:"target"`
	Success   *bool    `json:"success"`
	LatencyMs *float64 `json:"latency_ms"`
	LLMRating *float64 `json:"llm_rating"`
	Rating    *float64 `json:"rating"`
	Thumbs    string   `json:"thumbs"`
}

// observe turns a validated event into its observation. Errors are
// permanent: the data passed its schema but still names no target.
func observe(d *bus.Delivery) (observation, error) {
	var e eventData
	if err := bus.DecodeData(d.Event.Data(), &e); err != nil {
		return observation{}, bus.Permanentf("decode %s data: %w", d.Event.Type(), err)
	}
	o := observation{latencyMs: -1}
	switch d.Event.Type() {
	case TypeToolExecuted:
		o.kind = obsCall
		e.Target = TargetTool
	case TypePromptUsed:
		o.kind = obsCall
		e.Target = TargetPrompt
	case TypeToolRated:
		o.kind = obsRating
		e.Target = TargetTool
	case TypePromptRated:
		o.kind = obsRating
		e.Target = TargetPrompt
	case TypeFeedbackSubmitted:
		o.kind = obsFeedback
	default:
		return o, bus.Permanentf("scorer does not handle %s", d.Event.Type())
	}
	id, err := e.targetID(e.Target)
	if err != nil {
		return o, bus.Permanent(err)
	}
	o.key = Key{Tenant: d.Tenant, Target: e.Target, ID: id}
	// Only what identifies the target is kept, so the state does not
	// depend on which event arrived first.
	switch {
	case e.Target == TargetTool:
		o.toolName = e.ToolName
	case e.PromptHash != "":
		o.promptHash = e.PromptHash
	default:
		o.promptID, o.version = e.PromptID, int(*e.Version)
	}
	switch o.kind {
	case obsCall:
		if e.Success == nil {
			return o, bus.Permanentf("%s without success", d.Event.Type())
		}
		o.success = *e.Success
		if e.LatencyMs != nil && *e.LatencyMs >= 0 {
			o.latencyMs = *e.LatencyMs
		}
		o.rating = e.LLMRating
	case obsRating:
		if e.Rating == nil {
			return o, bus.Permanentf("%s without rating", d.Event.Type())
		}
		o.rating = e.Rating
	case obsFeedback:
		switch {
		case e.Rating != nil:
			o.rating = e.Rating
		case e.Thumbs == "up":
			o.rating = ptr(1.0)
		case e.Thumbs == "down":
			o.rating = ptr(0.0)
		default:
			return o, bus.Permanentf("feedback without rating or thumbs")
		}
	}
	return o, nil
}

func (e eventData) targetID(target string) (string, error) {
	switch target {
	case TargetTool:
		if e.ToolName == "" {
			return "", fmt.Errorf("no tool_name")
		}
		return e.ToolName, nil
	case TargetPrompt:
		if e.PromptHash != "" {
			return e.PromptHash, nil
		}
		if e.PromptID != "" && e.Version != nil {
			v := *e.Version
			if v != math.Trunc(v) || v < 1 || v > math.MaxInt32 {
				return "", fmt.Errorf("version %v is not a positive integer", v)
			}
			return e.PromptID + "@" + strconv.Itoa(int(v)), nil
		}
		return "", fmt.Errorf("no prompt_hash, nor prompt_id with version")
	}
	return "", fmt.Errorf("target %q is neither tool nor prompt", target)
}

func ptr[T any](v T) *T { return &v }

// apply folds o, the event at stream sequence seq, into m.
func (m *Metrics) apply(o observation, seq int64) {
	m.ToolName, m.PromptHash, m.PromptID, m.PromptVersion = o.toolName, o.promptHash, o.promptID, o.version
	m.StateVersion++
	m.AsOfSeq = max(m.AsOfSeq, seq)
	m.track(seq)
	switch o.kind {
	case obsCall:
		m.Call(o.success, o.latencyMs, seq)
		if o.rating != nil {
			m.Rate(*o.rating)
		}
	case obsRating:
		m.Rate(*o.rating)
	case obsFeedback:
		m.Feedback(*o.rating)
	}
}

// Compute folds deliveries into metrics in the order given, as the scorer
// applies them, and returns the metrics sorted by target and id. The
// scorer's stored state equals Compute of the stream in stream order,
// whatever order it applied events and their copies in: tests use it as
// the reference. Of several copies of an event (one tenant and id), the
// first given counts. Deliveries whose data names no target are skipped,
// as the scorer dead-letters them.
func Compute(deliveries []*bus.Delivery) []*Metrics {
	byKey := map[Key]*Metrics{}
	type eventKey struct{ tenant, id string }
	seen := map[eventKey]bool{}
	for _, d := range deliveries {
		o, err := observe(d)
		if err != nil {
			continue
		}
		k := eventKey{d.Tenant, d.Event.ID()}
		if seen[k] {
			continue
		}
		seen[k] = true
		m := byKey[o.key]
		if m == nil {
			m = &Metrics{Key: o.key}
			byKey[o.key] = m
		}
		m.apply(o, int64(d.StreamSeq))
	}
	out := make([]*Metrics, 0, len(byKey))
	for _, m := range byKey {
		if m.History == nil {
			m.History = []int64{}
		}
		m.newest = nil // bookkeeping, not state
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Target != out[j].Target {
			return out[i].Target < out[j].Target
		}
		return out[i].ID < out[j].ID
	})
	return out
}
