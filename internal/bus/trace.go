package bus

import "github.com/cloudevents/sdk-go/v2/event"

// The CloudEvents distributed-tracing extension: W3C trace context carried
// as the attributes traceparent and tracestate. The extension carries the
// trace in which the event chain started and is not rewritten per hop, so a
// result carries its cause's trace context unchanged: an agent's trace
// continues through every rating, quality change and alert its call causes.
const (
	ExtTraceParent = "traceparent"
	ExtTraceState  = "tracestate"
)

// maxTraceState bounds a tracestate copied onto results: W3C Trace Context
// lets vendors cut it at 512 characters.
const maxTraceState = 512

// TraceContext is an event's W3C trace context.
type TraceContext struct {
	Parent string `json:"traceparent,omitempty"`
	State  string `json:"tracestate,omitempty"`
}

// Trace returns ev's trace context, or the zero value when its traceparent
// is absent or malformed: W3C Trace Context tells a receiver to ignore a
// traceparent it cannot parse, and so does agentq (the event itself is
// handled as usual). A tracestate without a valid traceparent, or one that
// is too long or not printable ASCII, is dropped likewise.
func Trace(ev event.Event) TraceContext {
	exts := ev.Extensions()
	parent, _ := exts[ExtTraceParent].(string)
	state, _ := exts[ExtTraceState].(string)
	return ParseTrace(parent, state)
}

// ParseTrace returns the trace context of a traceparent and a tracestate
// (from an event's attributes, or HTTP headers) by Trace's rules: the zero
// value when parent is malformed, no state when state is not one to carry.
func ParseTrace(parent, state string) TraceContext {
	if !ValidTraceParent(parent) {
		return TraceContext{}
	}
	if len(state) > maxTraceState || !printableASCII(state) {
		state = ""
	}
	return TraceContext{Parent: parent, State: state}
}

// Set puts tc on ev; the zero value sets nothing.
func (tc TraceContext) Set(ev *event.Event) {
	if tc.Parent == "" {
		return
	}
	ev.SetExtension(ExtTraceParent, tc.Parent)
	if tc.State != "" {
		ev.SetExtension(ExtTraceState, tc.State)
	}
}

// ValidTraceParent reports whether s is a W3C traceparent this version of
// the specification can read: version-traceid-parentid-flags in lower-case
// hex, a trace id and a parent id that are not all zeros, version ff
// refused; a later version may append fields after a dash.
func ValidTraceParent(s string) bool {
	const n = 55 // 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(s) < n || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	version, traceID, parentID, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	if !lowerHex(version) || version == "ff" || !lowerHex(traceID) || !lowerHex(parentID) || !lowerHex(flags) {
		return false
	}
	if allZero(traceID) || allZero(parentID) {
		return false
	}
	if version == "00" {
		return len(s) == n
	}
	return len(s) == n || s[n] == '-'
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
