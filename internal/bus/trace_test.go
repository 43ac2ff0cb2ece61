package bus_test

import (
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
)

const (
	traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceState  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
)

func TestValidTraceParent(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{traceParent, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", true}, // a later version may add fields
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},
		{"", false},
	} {
		require.Equal(t, tc.want, bus.ValidTraceParent(tc.s), tc.s)
	}
}

// An event's trace context: only a valid traceparent counts, and its
// tracestate only when agentq carries it; a result carries its cause's.
func TestTraceContext(t *testing.T) {
	data := map[string]any{"tool_name": "x", "success": true}
	ev := newToolEvent(t, "acme", data)
	tp, ts := bus.TraceContext(ev)
	require.Equal(t, [2]string{"", ""}, [2]string{tp, ts}, "none")

	require.False(t, bus.SetTraceContext(&ev, "00-bad", traceState))
	require.NotContains(t, ev.Extensions(), bus.ExtTraceParent)
	require.NotContains(t, ev.Extensions(), bus.ExtTraceState)

	require.True(t, bus.SetTraceContext(&ev, traceParent, "bad\x01state"))
	tp, ts = bus.TraceContext(ev)
	require.Equal(t, [2]string{traceParent, ""}, [2]string{tp, ts}, "an invalid tracestate is dropped, the traceparent kept")
	require.True(t, bus.SetTraceContext(&ev, traceParent, traceState))
	tp, ts = bus.TraceContext(ev)
	require.Equal(t, [2]string{traceParent, traceState}, [2]string{tp, ts})

	// It travels as ce- headers, and back.
	m, err := bus.Encode(ev)
	require.NoError(t, err)
	require.Equal(t, traceParent, m.Header.Get("ce-traceparent"))
	require.Equal(t, traceState, m.Header.Get("ce-tracestate"))
	back, err := bus.Decode(m.Header, m.Data)
	require.NoError(t, err)
	tp, ts = bus.TraceContext(back)
	require.Equal(t, [2]string{traceParent, traceState}, [2]string{tp, ts})

	// Results go on in the cause's trace.
	typ := bus.Type("quality", "changed")
	out := map[string]any{"target": "tool", "tool_name": "x", "quality_score": 0.5, "success_rate": 1, "total_calls": 1}
	r, err := bus.NewResult("scorer", typ, back, out)
	require.NoError(t, err)
	tp, ts = bus.TraceContext(r)
	require.Equal(t, [2]string{traceParent, traceState}, [2]string{tp, ts})
	sr, err := bus.NewStateResult("scorer", typ, "acme", "tool/x", 3, back, out)
	require.NoError(t, err)
	tp, _ = bus.TraceContext(sr)
	require.Equal(t, traceParent, tp)

	// A cause with an invalid one, or none: the result has none.
	bad := newToolEvent(t, "acme", data)
	bad.SetExtension(bus.ExtTraceParent, "00-"+strings.Repeat("0", 32)+"-00f067aa0ba902b7-01")
	for _, cause := range []event.Event{bad, newToolEvent(t, "acme", data)} {
		r, err := bus.NewResult("scorer", typ, cause, out)
		require.NoError(t, err)
		require.NotContains(t, r.Extensions(), bus.ExtTraceParent)
		require.NotContains(t, r.Extensions(), bus.ExtTraceState)
	}
}
