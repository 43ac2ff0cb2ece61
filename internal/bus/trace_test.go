package bus

import (
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"
)

const (
	goodParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	goodState  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

func TestValidTraceParent(t *testing.T) {
	for _, c := range []struct {
		name  string
		value string
		ok    bool
	}{
		{"the W3C example", goodParent, true},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"a later version with a field more", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-abcd", true},
		{"a later version without", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"empty", "", false},
		{"upper-case hex", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", false},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"version 00 with a field more", goodParent + "-abcd", false},
		{"a later version glued to more", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01abcd", false},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"zero parent id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"short trace id", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false},
		{"wrong separator", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"not hex", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},
	} {
		t.Run(c.name, func(t *testing.T) { require.Equal(t, c.ok, ValidTraceParent(c.value), c.value) })
	}
}

// Every result carries its cause's trace context unchanged (the starting
// trace, as the CloudEvents extension says); a malformed traceparent is
// ignored, as W3C Trace Context says, and takes its tracestate with it.
func TestResultsCarryTheCauseTrace(t *testing.T) {
	for _, c := range []struct {
		name          string
		parent, state any // nil: attribute absent
		want          TraceContext
	}{
		{"both", goodParent, goodState, TraceContext{goodParent, goodState}},
		{"traceparent alone", goodParent, nil, TraceContext{Parent: goodParent}},
		{"none", nil, nil, TraceContext{}},
		{"malformed traceparent", "00-xyz", goodState, TraceContext{}},
		{"tracestate without traceparent", nil, goodState, TraceContext{}},
		{"tracestate too long", goodParent, "a=" + strings.Repeat("b", 600), TraceContext{Parent: goodParent}},
		{"tracestate not ASCII", goodParent, "a=bé", TraceContext{Parent: goodParent}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cause, err := NewEvent("agentq.tool.executed.v1", "acme", "agent", map[string]any{"tool_name": "t", "success": true})
			require.NoError(t, err)
			if c.parent != nil {
				cause.SetExtension(ExtTraceParent, c.parent)
			}
			if c.state != nil {
				cause.SetExtension(ExtTraceState, c.state)
			}
			// Through the wire and back, as a consumer receives it.
			m, err := Encode(cause)
			require.NoError(t, err)
			got, err := Decode(m.Header, m.Data)
			require.NoError(t, err)
			require.Equal(t, c.want, Trace(got))

			one, err := NewResult("scorer", "agentq.quality.changed.v1", got, map[string]any{})
			require.NoError(t, err)
			state, err := NewStateResult("scorer", "agentq.quality.changed.v1", "acme", "tool/t", 3, got, map[string]any{})
			require.NoError(t, err)
			for _, r := range []event.Event{one, state} {
				require.Equal(t, c.want, Trace(r))
				exts := r.Extensions()
				if c.want.Parent == "" {
					require.NotContains(t, exts, ExtTraceParent)
				}
				if c.want.State == "" {
					require.NotContains(t, exts, ExtTraceState)
				}
			}
		})
	}
}
