package health

import (
	"time"

	"github.com/agentq/agentq/internal/bus"
)

// Event types the degrader reads and writes.
var (
	TypeToolExecuted   = bus.Type("tool", "executed")
	TypeToolRated      = bus.Type("tool", "rated")
	TypeToolRegistered = bus.Type("tool", "registered")
	TypeToolReleased   = bus.Type("tool", "released")
	// TypeTimer is the degrader's own clock: a deadline (a quarantine's or
	// a probation's end) that fell due, published when it does so the
	// transition it causes is a fact in the stream that a replay meets at
	// the same place, with no clock.
	TypeTimer           = bus.Type("degrader", "timer")
	TypeToolDegraded    = bus.Type("tool", "degraded")
	TypeToolQuarantined = bus.Type("tool", "quarantined")
	TypeToolRecovered   = bus.Type("tool", "recovered")
	TypeRejected        = bus.Type("degrader", "rejected")
)

// Subjects are the degrader's filter subjects.
var Subjects = []string{"tool.executed.*", "tool.rated.*", "tool.registered.*", "tool.released.*", "degrader.timer.*"}

// ResultSubjects are the subjects of what it publishes.
var ResultSubjects = []string{"tool.degraded.*", "tool.quarantined.*", "tool.recovered.*", "degrader.rejected.*"}

// kind is what a stored event asks of the fold.
type kind int16

const (
	kindCall kind = iota
	kindRating
	kindKnown
	kindRelease
	kindTimer
)

// fact is one input event reduced to what the fold needs, as stored.
type fact struct {
	Seq     uint64
	EventID string
	Type    string
	Kind    kind
	Tool    string
	// Bad is the outcome of a call; for a rating, Rating holds it.
	Bad    bool
	Rating float64
	// At is the stream time of the event; Due a timer's deadline.
	At  time.Time
	Due time.Time
	// Reason and By come with a release.
	Reason, By string
	// Trace is the event's trace context, which its results carry.
	Trace bus.TraceContext
}

type inputData struct {
	ToolName   string   `json:"tool_name"`
	Name       string   `json:"name"`
	Success    *bool    `json:"success"`
	LLMRating  *float64 `json:"llm_rating"`
	Rating     *float64 `json:"rating"`
	Reason     string   `json:"reason"`
	ReleasedBy string   `json:"released_by"`
	DueAt      string   `json:"due_at"`
}

// facts turns a validated event into the facts it contributes: a call
// that carries its agent's rating gives a call and a rating.
func facts(d *bus.Delivery) ([]fact, error) {
	var in inputData
	if err := bus.DecodeData(d.Event.Data(), &in); err != nil {
		return nil, bus.Permanentf("decode %s data: %w", d.Event.Type(), err)
	}
	// Postgres keeps microseconds: the fold must see the same time whether
	// the fact came from the table or straight from the stream.
	f := fact{Seq: d.StreamSeq, EventID: d.Event.ID(), Type: d.Event.Type(), Tool: in.ToolName, At: d.Time.UTC().Truncate(time.Microsecond), Trace: bus.Trace(d.Event)}
	switch d.Event.Type() {
	case TypeToolExecuted:
		if in.Success == nil {
			return nil, bus.Permanentf("tool.executed without success")
		}
		f.Kind, f.Bad = kindCall, !*in.Success
		out := []fact{f}
		if in.LLMRating != nil {
			r := f
			r.Kind, r.Rating = kindRating, *in.LLMRating
			out = append(out, r)
		}
		return out, nil
	case TypeToolRated:
		if in.Rating == nil {
			return nil, bus.Permanentf("tool.rated without rating")
		}
		f.Kind, f.Rating = kindRating, *in.Rating
	case TypeToolRegistered:
		f.Kind, f.Tool = kindKnown, in.Name
	case TypeToolReleased:
		f.Kind, f.Reason, f.By = kindRelease, in.Reason, in.ReleasedBy
	case TypeTimer:
		due, err := time.Parse(time.RFC3339Nano, in.DueAt)
		if err != nil {
			return nil, bus.Permanentf("degrader.timer due_at %q: %w", in.DueAt, err)
		}
		f.Kind, f.Due = kindTimer, due.UTC().Truncate(time.Microsecond)
	default:
		return nil, bus.Permanentf("the degrader does not handle %s", d.Event.Type())
	}
	if f.Tool == "" {
		return nil, bus.Permanentf("%s names no tool", d.Event.Type())
	}
	return []fact{f}, nil
}

// transitionData is the data of tool.degraded, tool.quarantined and
// tool.recovered.
type transitionData struct {
	ToolName            string          `json:"tool_name"`
	State               State           `json:"state"`
	PreviousState       State           `json:"previous_state"`
	QualityScore        float64         `json:"quality_score"`
	Threshold           float64         `json:"threshold"`
	Evidence            float64         `json:"evidence"`
	Reason              string          `json:"reason"`
	ConsecutiveDegraded int             `json:"consecutive_degraded"`
	DegradedSince       string          `json:"degraded_since,omitempty"`
	HeldBack            bool            `json:"held_back,omitempty"`
	Version             int64           `json:"version"`
	At                  string          `json:"at"`
	Quarantine          *quarantineData `json:"quarantine,omitempty"`
	ProbationEndsAt     string          `json:"probation_ends_at,omitempty"`
}

type quarantineData struct {
	ExpiresAt string `json:"expires_at,omitempty"`
	Offence   int    `json:"offence"`
	Reason    string `json:"reason,omitempty"`
}

// resultType is the event type announcing tr, or "" for one that is not
// announced (a warning coming or going: logged and in the state only).
func resultType(tr Transition) string {
	switch tr.To {
	case Degraded:
		return TypeToolDegraded
	case Quarantined:
		return TypeToolQuarantined
	case Probation:
		return TypeToolRecovered
	case Healthy:
		if tr.From != Warning {
			return TypeToolRecovered
		}
	}
	return ""
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func clamp01(x float64) float64 { return min(1, max(0, x)) }

func dataOf(tr Transition) transitionData {
	d := transitionData{
		ToolName: tr.Tool, State: tr.To, PreviousState: tr.From,
		QualityScore: clamp01(tr.Quality), Threshold: clamp01(tr.Threshold), Evidence: tr.Evidence,
		Reason: truncate(tr.Reason, 1024), ConsecutiveDegraded: tr.AtAlert, DegradedSince: rfc3339(tr.DegradedSince),
		HeldBack: tr.HeldBack, Version: tr.Version, At: rfc3339(tr.At),
	}
	switch tr.To {
	case Quarantined:
		d.Quarantine = &quarantineData{ExpiresAt: rfc3339(tr.Expires), Offence: tr.Offence, Reason: truncate(tr.Reason, 1024)}
	case Probation:
		d.ProbationEndsAt = rfc3339(tr.Expires)
		if tr.Offence > 0 {
			d.Quarantine = &quarantineData{Offence: tr.Offence}
		}
	}
	return d
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
