package indexer

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
)

// Event types the indexer consumes and publishes.
var (
	TypePromptCreated   = bus.Type("prompt", "created")
	TypePromptActivated = bus.Type("prompt", "activated")
	TypeToolRegistered  = bus.Type("tool", "registered")
	TypeQualityChanged  = bus.Type("quality", "changed")
	TypeToolDegraded    = bus.Type("tool", "degraded")
	TypeToolQuarantined = bus.Type("tool", "quarantined")
	TypeToolRecovered   = bus.Type("tool", "recovered")

	TypePromptIndexed = bus.Type("prompt", "indexed")
	TypeToolIndexed   = bus.Type("tool", "indexed")
	TypeRejected      = bus.Type("indexer", "rejected")
)

// Subjects are the indexer's filter subjects: its inputs, and the results
// of the scorer and the degrader it keeps a read model of (DESIGN §10).
var Subjects = []string{
	"prompt.created.*", "prompt.activated.*", "tool.registered.*",
	"quality.changed.*", "tool.degraded.*", "tool.quarantined.*", "tool.recovered.*",
}

// ResultSubjects are the subjects of what the indexer publishes.
var ResultSubjects = []string{"prompt.indexed.*", "tool.indexed.*", "indexer.rejected.*"}

// Reason codes of indexer.rejected.
const (
	ReasonVersionConflict = "version_conflict"
	ReasonInvalidTemplate = "invalid_template"
	ReasonUnknownVersion  = "unknown_version"
	// ReasonVersionExhausted: a create without a version after version
	// 2147483647, the largest a version can be.
	ReasonVersionExhausted = "version_exhausted"
)

type opKind int

const (
	opPrompt opKind = iota + 1
	opLabel
	opTool
	opQuality
	opHealth
)

// op is one decoded event.
type op struct {
	kind opKind
	d    *bus.Delivery
	at   time.Time // the event's time, else the stream's

	prompt  library.Prompt // opPrompt: Version 0 = next free
	label   labelMove
	tool    registry.Tool
	quality qualityRow
	health  healthRow

	// reject is set when the event is well-formed but cannot be done.
	reject *rejection
	text   string // what to embed (opPrompt, opTool)
	vec    []float32
}

type rejection struct {
	code, reason string
	details      map[string]any
}

type labelMove struct {
	promptID, label string
	version         int
}

type qualityRow struct {
	target, ref           string
	stateVersion          int64
	score, successRate    float64
	totalCalls, successes int64
}

type healthRow struct {
	toolName, state string
	quarantined     bool
	expiresAt       *time.Time
}

func eventTime(d *bus.Delivery) time.Time {
	// The agent's clock, but never later than the stream's: a publisher's
	// time in the future would make its prompt or tool look newest for as
	// long as it lasts. A replay sees the same two times.
	if t := d.Event.Time(); !t.IsZero() && (d.Time.IsZero() || !t.After(d.Time)) {
		return t.UTC()
	}
	return d.Time.UTC()
}

// decode turns a delivery into an op; an error is permanent (the schema
// admitted something the indexer cannot read).
func decode(d *bus.Delivery) (op, error) {
	o := op{d: d, at: eventTime(d)}
	switch d.Event.Type() {
	case TypePromptCreated:
		var e struct {
			ID          string          `json:"id"`
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Content     string          `json:"content"`
			Version     *float64        `json:"version"`
			Description string          `json:"description"`
			Parameters  []library.Param `json:"parameters"`
			Tags        []string        `json:"tags"`
			Author      string          `json:"author"`
			Metadata    json.RawMessage `json:"metadata"`
		}
		if err := bus.DecodeData(d.Event.Data(), &e); err != nil {
			return o, bus.Permanentf("prompt.created data: %v", err)
		}
		o.kind = opPrompt
		o.prompt = library.Prompt{
			Tenant: d.Tenant, ID: e.ID, Type: e.Type, Name: e.Name, Content: e.Content,
			Description: e.Description, Parameters: e.Parameters, Tags: e.Tags, Author: e.Author,
			Metadata: e.Metadata, CreatedAt: o.at,
		}
		if e.Version != nil {
			v, err := intVersion(*e.Version)
			if err != nil {
				return o, bus.Permanent(err)
			}
			o.prompt.Version = v
		}
		if err := library.CheckTemplate(e.Content, e.Parameters); err != nil {
			o.reject = &rejection{code: ReasonInvalidTemplate, reason: err.Error()}
		}
		o.text = promptText(o.prompt)
	case TypePromptActivated:
		var e struct {
			PromptID string  `json:"prompt_id"`
			Version  float64 `json:"version"`
			Label    string  `json:"label"`
		}
		if err := bus.DecodeData(d.Event.Data(), &e); err != nil {
			return o, bus.Permanentf("prompt.activated data: %v", err)
		}
		v, err := intVersion(e.Version)
		if err != nil {
			return o, bus.Permanent(err)
		}
		o.kind = opLabel
		o.label = labelMove{promptID: e.PromptID, label: e.Label, version: v}
		if e.Label == "latest" {
			o.reject = &rejection{code: "reserved_label", reason: `label "latest" is implicit (the newest version) and cannot be moved`}
		}
	case TypeToolRegistered:
		var e struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
			Server      string          `json:"server"`
			Tags        []string        `json:"tags"`
		}
		if err := bus.DecodeData(d.Event.Data(), &e); err != nil {
			return o, bus.Permanentf("tool.registered data: %v", err)
		}
		h, err := registry.Hash(e.Name, e.Description, e.InputSchema, e.Server, e.Tags)
		if err != nil {
			return o, bus.Permanent(err)
		}
		o.kind = opTool
		o.tool = registry.Tool{Tenant: d.Tenant, Name: e.Name, Hash: h, Description: e.Description,
			InputSchema: e.InputSchema, Server: e.Server, Tags: e.Tags, RegisteredAt: o.at}
		o.text = toolText(o.tool)
	case TypeQualityChanged:
		var e struct {
			Target       string   `json:"target"`
			ToolName     string   `json:"tool_name"`
			PromptHash   string   `json:"prompt_hash"`
			PromptID     string   `json:"prompt_id"`
			Version      *float64 `json:"version"`
			StateVersion int64    `json:"state_version"`
			Quality      float64  `json:"quality_score"`
			SuccessRate  float64  `json:"success_rate"`
			TotalCalls   int64    `json:"total_calls"`
			Successes    *int64   `json:"successes"`
		}
		if err := bus.DecodeData(d.Event.Data(), &e); err != nil {
			return o, bus.Permanentf("quality.changed data: %v", err)
		}
		q := qualityRow{target: e.Target, stateVersion: e.StateVersion, score: e.Quality, successRate: e.SuccessRate, totalCalls: e.TotalCalls}
		if q.stateVersion <= 0 {
			// Before state_version existed: the stream order stands in.
			q.stateVersion = int64(d.StreamSeq)
		}
		if e.Successes != nil {
			q.successes = *e.Successes
		} else {
			q.successes = int64(math.Round(e.SuccessRate * float64(e.TotalCalls)))
		}
		switch {
		case e.Target == "tool" && e.ToolName != "":
			q.ref = e.ToolName
		case e.Target == "prompt" && e.PromptHash != "" && !strings.Contains(e.PromptHash, "@"):
			q.ref = e.PromptHash
		case e.Target == "prompt" && e.PromptID != "" && e.Version != nil:
			v, err := intVersion(*e.Version)
			if err != nil {
				return o, bus.Permanent(err)
			}
			q.ref = fmt.Sprintf("%s@%d", e.PromptID, v)
		case e.Target == "prompt" && e.PromptHash != "":
			q.ref = e.PromptHash // already <id>@<version>
		default:
			return o, bus.Permanentf("quality.changed names no %s", e.Target)
		}
		o.kind, o.quality = opQuality, q
	case TypeToolDegraded, TypeToolQuarantined, TypeToolRecovered:
		var e struct {
			ToolName   string `json:"tool_name"`
			State      string `json:"state"`
			Quarantine *struct {
				ExpiresAt *time.Time `json:"expires_at"`
			} `json:"quarantine"`
		}
		if err := bus.DecodeData(d.Event.Data(), &e); err != nil {
			return o, bus.Permanentf("%s data: %v", d.Event.Type(), err)
		}
		h := healthRow{toolName: e.ToolName, state: e.State}
		h.quarantined = e.State == "quarantined" || (d.Event.Type() == TypeToolQuarantined && e.State == "")
		if h.state == "" {
			h.state = map[string]string{TypeToolDegraded: "degraded", TypeToolQuarantined: "quarantined", TypeToolRecovered: "healthy"}[d.Event.Type()]
		}
		if h.quarantined && e.Quarantine != nil && e.Quarantine.ExpiresAt != nil {
			t := e.Quarantine.ExpiresAt.UTC()
			h.expiresAt = &t
		}
		o.kind, o.health = opHealth, h
	default:
		return o, bus.Permanentf("indexer does not consume %s", d.Event.Type())
	}
	return o, nil
}

func intVersion(v float64) (int, error) {
	if v != math.Trunc(v) || v < 1 || v > math.MaxInt32 {
		return 0, fmt.Errorf("version %v is not a positive integer", v)
	}
	return int(v), nil
}

// promptText is what a prompt's vector is made of: what it is called, what
// it is for, and its text.
func promptText(p library.Prompt) string {
	return joinText(p.Name, p.Description, strings.Join(p.Tags, " "), p.Content)
}

// toolText is what a tool's vector is made of; a snake_case name is read as
// words.
func toolText(t registry.Tool) string {
	name := strings.NewReplacer("_", " ", ".", " ", "-", " ").Replace(t.Name)
	return joinText(name, t.Description, strings.Join(t.Tags, " "))
}

func joinText(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(". ")
		}
		b.WriteString(p)
	}
	return b.String()
}
