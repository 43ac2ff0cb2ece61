package bus

import (
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
)

// Trace context travels with an event as the CloudEvents distributed
// tracing extension: attributes traceparent and tracestate holding a W3C
// Trace Context, so ce-traceparent and ce-tracestate headers on NATS. It
// is the one way agentq carries it: in the event, so it is stored,
// replayed and dead-lettered with it, whatever the content mode. Per the
// extension's rules it names the trace the event started in, not each
// hop: the HTTP ingest fills it from the request's traceparent header
// when the event has none, and a result carries its cause's.
const (
	ExtTraceParent = "traceparent"
	ExtTraceState  = "tracestate"
)

// maxTraceState bounds a tracestate agentq carries, in bytes: W3C Trace
// Context asks vendors to propagate at least 512 characters, and lets
// them drop a longer list.
const maxTraceState = 512

// TraceContext returns ev's trace context, or "" for both when ev has
// none or its traceparent is not a valid W3C traceparent; tracestate is
// "" when ev has none or it is not one agentq carries.
func TraceContext(ev event.Event) (traceparent, tracestate string) {
	exts := extensions(ev)
	tp, _ := exts[ExtTraceParent].(string)
	if !ValidTraceParent(tp) {
		return "", ""
	}
	ts, _ := exts[ExtTraceState].(string)
	if !validTraceState(ts) {
		ts = ""
	}
	return tp, ts
}

// SetTraceContext gives ev the trace context traceparent and tracestate
// when traceparent is valid (tracestate only when it is valid too), and
// reports whether it did. An invalid traceparent is ignored, as W3C Trace
// Context asks of a receiver: the event then starts no trace.
func SetTraceContext(ev *event.Event, traceparent, tracestate string) bool {
	if !ValidTraceParent(traceparent) {
		return false
	}
	ev.SetExtension(ExtTraceParent, traceparent)
	if validTraceState(tracestate) && tracestate != "" {
		ev.SetExtension(ExtTraceState, tracestate)
	}
	return true
}

// inheritTrace gives a result its cause's trace context, so a trace that
// reached agentq goes on through what agentq made of the event.
func inheritTrace(ev *event.Event, cause event.Event) {
	if tp, ts := TraceContext(cause); tp != "" {
		SetTraceContext(ev, tp, ts)
	}
}

// ValidTraceParent reports whether s is a W3C traceparent
// (version-traceid-parentid-flags in lowercase hex): version 00 exactly,
// a later version by its first four fields (it may add more after a
// dash); never version ff, an all-zero trace id or an all-zero parent id.
func ValidTraceParent(s string) bool {
	const n = 55 // len("00-" + 32 + "-" + 16 + "-" + 2)
	if len(s) < n || (len(s) > n && (s[:2] == "00" || s[n] != '-')) {
		return false
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	version, trace, parent, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	for _, f := range []string{version, trace, parent, flags} {
		if !lowerHex(f) {
			return false
		}
	}
	return version != "ff" && strings.Trim(trace, "0") != "" && strings.Trim(parent, "0") != ""
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validTraceState reports whether s is a tracestate agentq carries: at
// most maxTraceState bytes of printable ASCII (the characters its list
// members are made of). Its members are not parsed: they belong to the
// tracing vendors.
func validTraceState(s string) bool {
	if len(s) > maxTraceState {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
